"""The horizontal plan: collectives that run at the same time share the physical links.

Calls of a workload with the same `overlap` tag run together. Each communicator's chosen
schedule runs on every one of its groups at once; its traffic on each physical link of
the full topology (the routes of every group's view, every send's bytes) over its
duration is the link's utilisation. The longest of the set runs as planned; the next is
synthesized again on the residual topology, every physical link's bandwidth reduced by
what the ones before it use (`residual`), and so on. A collective that needs longer on
the residual than the window it shares finishes at full speed after it:

    overlapped = D1 + max(0, 1 - D1 / D2') x D2

for the first's duration D1 and the second's D2 alone and D2' on the residual (counts x
one call's time). Against it the report puts each alone and the sum (one after the
other). A fluid model: it assumes the runtime interleaves the two collectives' traffic
on a shared link in proportion; a switch operation moves what the schedule file's
version 3 charges (its single side once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from synth.errors import NoAnswer
from synth.frontier import synthesize
from synth.plan.planner import (Candidate, Entry, Plan, candidates_of, nccl_pick,
                                nccl_reference, reference_of, typical, with_groups)
from synth.plan.shapes import planning_view
from synth.plan.traffic import bandwidth, physical_use
from synth.predict.machine import machine_of
from synth.predict.timing import prices
from synth.search.pareto import Limits
from synth.topology.communicator import fastest_unit
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import Topology
from synth.topology.several_routes import one_route

GRAIN = 32  # residual shares are rounded down to 1/GRAIN: capacities with small
# denominators, which the exact search's integer model needs; a link the others use
# fully keeps 1/GRAIN, so nothing is stalled forever


@dataclass
class Overlapped:
    """One overlap tag's calls, planned to share the links."""

    tag: str
    members: list[tuple[Entry, object]]  # (entry, call), longest first
    alone_us: list[float]  # each member's count x time, alone
    residual_us: list[float]  # each on what the ones before it leave (first: alone)
    choices: list[Candidate]  # each member's schedule on the residual
    overlapped_us: float = 0.0
    utilisation: dict = field(default_factory=dict)  # physical link -> share in use
    nccl_alone_us: list[float] = field(default_factory=list)  # NCCL-style, the same way
    nccl_overlapped_us: float = 0.0

    @property
    def sequential_us(self) -> float:
        return sum(self.alone_us)


def residual(topo: Topology, used: dict[tuple[str, str], float]) -> Topology:
    """The topology with each link's bandwidth scaled by the share `used` leaves,
    rounded down to 1/GRAIN (at least 1/GRAIN)."""
    def left(link):
        share = 1.0 - used.get((link.src, link.dst), 0.0)
        return max(1, math.floor(GRAIN * share + 1e-9)) / GRAIN

    links = tuple(replace(l, gbps=l.gbps * left(l)) for l in topo.links)
    return replace(topo, links=links, name=f"{topo.name} (residual)")


def overlap(plan: Plan, topo: Topology, tag: str, limits: Limits,
            method: str = "auto") -> Overlapped:
    """Plan the calls tagged `tag` to run together (module docstring); NCCL-style
    choices run together the same way (ring or tree, rebuilt on the residual), for the
    report's comparison. `method`: how a call is searched again on the residual links
    (synth.frontier.synthesize's, as the plan's own searches)."""
    members = [(e, c) for e in plan.entries for c in e.calls if c.overlap == tag]
    members.sort(key=lambda m: -m[1].count * m[0].best(typical(m[1])).time_us(typical(m[1])))
    result = Overlapped(tag, members, [], [], [])
    limits = replace(limits, time_limit=limits.time_limit / max(1, len(members) - 1))
    for nccl in (False, True):
        used: dict = {}
        durations, alone = [], []
        for i, (entry, call) in enumerate(members):
            n = typical(call)
            first = entry.nccl(n) if nccl else entry.best(n)
            alone.append(call.count * first.time_us(n))
            on = topo if i == 0 else residual(topo, used)
            pick = first if i == 0 else _on_residual(
                on, entry, plan.planned_on.get(entry.communicator, entry.groups[:1]), n, nccl,
                limits, method)
            durations.append(call.count * pick.time_us(n))
            if not nccl:
                result.choices.append(pick)
            _add_use(used, topo, on, entry, pick, n, call.count, durations[-1])
        window = _together(durations, alone)
        if nccl:
            result.nccl_alone_us, result.nccl_overlapped_us = alone, window
        else:
            result.alone_us, result.residual_us = alone, durations
            result.overlapped_us, result.utilisation = window, used
    return result


def _on_residual(on: Topology, entry: Entry, reps: list[list[int]], n: int, nccl: bool,
                 limits: Limits, method: str = "auto") -> Candidate:
    """The entry's fastest schedule at size n on the residual topology `on`: planned
    again, or NCCL-style (ring or tree built there), on the groups `reps`' view
    (synth.plan.shapes)."""
    sub = fastest_unit(replace(planning_view(on, reps), name=f"{on.name}:{entry.communicator}"),
                       on.ranks)
    if nccl:  # NCCL runs on one route per GPU pair
        sub, on = one_route(sub), one_route(on)
    model = lower_with_routes(sub).model
    calibrated = entry.machine is not None
    if nccl and calibrated:
        made = [with_groups(c, on, entry.groups)
                for c in nccl_reference(sub, entry.collective, model, entry.root)]
        if made:  # NCCL's tuner choice there, not the fastest of its options
            return nccl_pick(machine_of(sub), entry.collective, made, n)
    if nccl:
        made = reference_of(entry.collective, model, entry.root) or entry.reference
    else:
        try:
            result = synthesize(sub, entry.collective, entry.root, limits, method=method)
            made = candidates_of(result, prices(sub) if calibrated else None)
        except NoAnswer:
            made = []
        # no time left to plan it again (there is no floor): its own, on the residual
        made = made or entry.candidates
    # as they run on every group at once, on the residual links
    return min((with_groups(c, on, entry.groups) for c in made),
               key=lambda c: c.time_us(n))


def _add_use(used: dict, topo: Topology, on: Topology, entry: Entry, pick: Candidate,
             n: int, count: int, duration: float) -> None:
    """Add pick's traffic over its duration, as a share of each full link."""
    bw = bandwidth(topo)
    for hop, nbytes in physical_use(on, entry.groups, pick.schedule, n).items():
        used[hop] = used.get(hop, 0.0) + count * nbytes / (duration * bw[hop])


def _together(durations: list[float], alone: list[float]) -> float:
    """The set's time: the first's window, each later one finishing at full speed what
    it could not do on the residual within it (module docstring)."""
    window = durations[0]
    for d, a in zip(durations[1:], alone[1:]):
        if d > window:
            window += (1.0 - window / d) * a
    return window
