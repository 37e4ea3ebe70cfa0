"""Lower bounds: how few steps and how little bandwidth time a collective can need.

Steps: the largest hop distance (rank links) some chunk must cover.

Bandwidth: the cut bound with switches as vertices (ForestColl; hardware.md). For a set
S of physical vertices, whatever must leave S crosses the links out of S, whose
bandwidth B+(S) is fixed, so time >= data(S) / B+(S) for every S. For allgather,
data(S) is the shards of the GPUs in S whenever some GPU is outside it; the maximum
over all S is found exactly with max-flow (`max_ratio_cut`). The other collectives:

    reducescatter   allgather's bound on the reversed graph (the dual)
    allreduce       the largest of three counts (no in-network reduction; the sum of
                    reducescatter's and allgather's cut bounds is NOT a bound, since a
                    schedule may overlap the two: see allreduce_rounds_per_chunk)
    broadcast       all n bytes leave every S holding the root: n / min-cut(root, t)
    reduce          broadcast's bound on the reversed graph
    gather          shards of the GPUs in S, for every S without the root
    scatter         gather's bound on the reversed graph
    alltoall        one share per ordered pair: the max concurrent flow, a linear
                    program (HiGHS), exact for fractional routing; cuts alone would
                    miss that a pair two hops apart loads two links. Past LP_LIMIT
                    variables: the best single-GPU and box cut (valid, weaker)

The graph is the network as lowered (synth.topology.linkmodel): a physical link that no
route crosses is left out, since no schedule can use it (on a DGX-2 the PCIe path
between two GPUs that the NVSwitch joins better). All ratios are exact Fractions;
capacities are in units of unit_gbps.

Where GPUs are alike, the per-GPU max-flows (allgather's and reducescatter's sinks,
broadcast's and reduce's targets, allreduce's ports and cuts) are computed once per
orbit of the graph's automorphisms, each automorphism checked before use (orbits.py);
the values are exactly those of computing every GPU, which symmetric=False still does.

The rooms: flows.py (max-flow, the ratio cut, the GPUs' ports, the deadline's Clock),
orbits.py (which GPUs no cut tells apart), steps.py (the hop bound), allreduce.py and
alltoall.py (their bandwidth bounds); this module puts them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from synth.bounds.allreduce import (across_boxes, allreduce_rounds_per_chunk,
                                    in_network_allreduce, multicasts_between_boxes)
from synth.bounds.alltoall import alltoall_bound
from synth.bounds.flows import Clock, all_sinks, least_flow, max_ratio_cut, unit_graph
from synth.bounds.orbits import Symmetry
from synth.bounds.steps import step_bound
from synth.deadline import Deadline
from synth.schedule.collectives import Collective, make_collective
from synth.schedule.cost import per_chunk
from synth.topology.linkmodel import Lowering

__all__ = ["Bounds", "Clock", "bandwidth_bound_shares", "bounds", "collective_bounds",
           "step_bound"]

NOTES = {
    "allreduce": "2(N-1) transfers per chunk over the links, a buffer across the "
                 "thinnest cut, 2(K-1) across boxes or packages (no in-network "
                 "reduction)",
    "alltoall": "max concurrent flow (linear program) over one share per pair",
}


@dataclass(frozen=True)


class Bounds:
    collective: str
    ranks: int
    steps: int  # no schedule has fewer steps
    rounds_per_chunk: Fraction  # no schedule has smaller R / C (chunk = 1/C of a share)
    us_per_byte: float  # the same, as time per byte of n at unit_gbps
    latency_us: float  # steps x the smallest alpha of any link
    note: str = ""
    partial: bool = False  # time ran out: still valid, maybe looser than the full bound
    # where switches reduce in the network: the bound for schedules that do not use
    # them (rounds_per_chunk is then the bound with them, which is lower)
    without_in_network: Fraction | None = None

    @property
    def us_per_mb(self) -> float:
        return self.us_per_byte * 1e6


def bounds(lowering: Lowering, collective: Collective,
           deadline: Deadline | float | None = None, symmetric: bool = True) -> Bounds:
    """Both bounds for one collective on the lowered topology (its link model for the
    steps, its physical graph for the cuts). Cost: a few max-flows per orbit of the
    GPUs under the graph's automorphisms (synth.bounds.orbits; O(N) of them where the
    machine has no symmetry, or with symmetric=False, the reference that computes every
    GPU's), cut short at `deadline` (Clock)."""
    model = lowering.model
    clock = Clock(deadline)
    graph, gpus = unit_graph(lowering)
    symmetry = Symmetry(graph, gpus, lowering.topology, symmetric)
    per_share = _shares(lowering, graph, symmetry, collective.name, collective.root, clock)
    # rounds per chunk: chunk = share / C, so R / C >= (shares moved per unit bandwidth)
    # expressed per the collective's own chunk: for allreduce-like ones a "share" is the
    # whole buffer divided by N, and a chunk is the buffer / C.
    if collective.name in ("allreduce",):
        rpc = per_share / collective.ranks
    else:
        rpc = per_share
    shares_in_buffer = collective.buffer_chunks // collective.chunks  # N or 1
    us_per_byte = float(rpc) / shares_in_buffer / (model.unit_gbps * 1e3)
    steps = step_bound(model, collective, clock, _representatives(symmetry, collective.root))
    min_alpha = min((l.alpha_us for l in model.links), default=0.0)
    note = NOTES.get(collective.name, "")
    plain = None
    if collective.name == "allreduce" and any("reduce" in w.can for w in model.switches):
        plain, rpc = rpc, in_network_allreduce(graph, gpus, clock, symmetry)
        if not any("reduce" in v.can for v in lowering.topology.vertices if v.box is None):
            rpc = max(rpc, across_boxes(lowering.topology, graph,  # boxes reduce alone
                                        multicasts_between_boxes(lowering)))
        us_per_byte = float(rpc) / shares_in_buffer / (model.unit_gbps * 1e3)
        note = (f"with in-network reduction ({', '.join(w.name for w in model.switches)}): "
                "each chunk crosses the thinnest cut between GPUs at least once each way, and "
                "2(K-1) times across K boxes where no switch between them reduces; without "
                f"it {per_chunk(plain)} ({note})")
    if clock.looser:
        note = ("partial: the time limit cut the bounds short; they hold, but may be "
                "looser than the full ones") + (f"; {note}" if note else "")
    return Bounds(collective.name, collective.ranks, steps, rpc, us_per_byte,
                  steps * min_alpha, note, clock.looser, plain)


def _representatives(symmetry: Symmetry, root: int | None) -> set[int]:
    """The ranks that lead the GPUs' orbits (fixing the root): the hop bound searches
    from these alone."""
    fixed = symmetry.gpus[root] if root is not None else None
    rank = {g: r for r, g in enumerate(symmetry.gpus)}
    return {rank[g] for g in symmetry.orbits(fixed).representatives}


def bandwidth_bound_shares(lowering: Lowering, name: str, root: int | None = None,
                           clock: Clock | None = None, symmetric: bool = True) -> Fraction:
    """Least time, in shares per unit of bandwidth, that the cut bound allows.

    A share is one rank's piece: n / N for allgather-like collectives, the whole
    buffer for broadcast and reduce, n / N for allreduce and alltoall.
    """
    graph, gpus = unit_graph(lowering)
    symmetry = Symmetry(graph, gpus, lowering.topology, symmetric)
    return _shares(lowering, graph, symmetry, name, root, clock or Clock())


def _shares(lowering: Lowering, graph, symmetry: Symmetry, name: str, root: int | None,
            clock: Clock) -> Fraction:
    """bandwidth_bound_shares on the unit graph, with its symmetry: one sink (or one
    target of the root's flow, one port) per orbit; the reversed graph has the same
    automorphisms."""
    topo, gpus = lowering.topology, symmetry.gpus
    # a view, not a copy: copying fc:1100's 1.2 million edges took seconds, for allgather
    # too, which never reads it
    reverse = graph.reverse(copy=False)
    root_name = gpus[root] if root is not None else None
    if name == "allgather":
        return all_sinks(graph, gpus, clock, symmetry.orbits())
    if name == "reducescatter":
        return all_sinks(reverse, gpus, clock, symmetry.orbits())
    if name == "allreduce":  # in shares: the buffer is N of them
        return allreduce_rounds_per_chunk(topo, lowering, graph, gpus, clock,
                                          symmetry) * len(gpus)
    if name in ("broadcast", "reduce"):
        return 1 / least_flow(graph if name == "broadcast" else reverse, root_name,
                              symmetry.orbits(root_name).others(), clock)
    if name == "gather":
        return max_ratio_cut(graph, [g for g in gpus if g != root_name], root_name,
                             clock=clock)
    if name == "scatter":
        return max_ratio_cut(reverse, [g for g in gpus if g != root_name], root_name,
                             clock=clock)
    if name == "alltoall":
        return alltoall_bound(topo, graph, gpus, clock)
    raise ValueError(name)


def collective_bounds(lowering: Lowering, name: str, root: int | None = None,
                      deadline: Deadline | float | None = None,
                      symmetric: bool = True) -> Bounds:
    """bounds() for a collective by name (of one chunk a share)."""
    return bounds(lowering, make_collective(name, lowering.model.ranks, 1, root), deadline,
                  symmetric)
