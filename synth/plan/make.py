"""make_plan: a workload planned whole: each (communicator, collective, root) on the
topology as its groups see it (synth.plan.shapes: the first's view, or on a degraded
machine the slowest's), then the calls of each overlap tag together
(synth.plan.overlap), within one time limit.
"""

from __future__ import annotations

import time
from dataclasses import replace

from synth.deadline import Deadline, TimeLimit
from synth.errors import NoAnswer
from synth.cost_choice import in_cost_model
from synth.frontier import synthesize
from synth.plan.overlap import overlap
from synth.plan.shapes import planning_groups, planning_view
from synth.plan.planner import (Entry, Plan, candidates_of, envelope,
                                nccl_reference, reference_of, runtime_variants,
                                with_groups)
from synth.plan.workload import Workload
from synth.predict.machine import machine_of
from synth.predict.timing import prices
from synth.search.pareto import Limits
from synth.signals import interrupt_seen
from synth.topology.communicator import fastest_unit
from synth.topology.figures import library_of
from synth.topology.linkmodel import lower
from synth.topology.physical import Topology
from synth.topology.several_routes import one_route, routes_summary

def make_plan(workload: Workload, topo: Topology, limits: Limits,
              on_event=None, cost_model: str = "calibrated", method: str = "auto") -> Plan:
    """Plan every (communicator, collective, root) of the workload on `topo`, then the
    calls of each overlap tag together (synth.plan.overlap), sharing
    `limits.time_limit` evenly between them, in `cost_model` (module docstring).
    `method`: how each communicator's frontier is searched (synth.frontier.synthesize)."""
    on_event = on_event or (lambda kind, data: None)
    start = time.monotonic()
    keys = []
    for call in workload.calls:
        key = (call.communicator, call.collective, call.root)
        if key not in keys:
            keys.append(key)
    plan = Plan(workload, topo.name, cost_model=cost_model)
    models = []  # the communicators' views' lowerings, for routes_summary
    try:
        views = _planning_views(plan, topo, [k[0] for k in keys],
                                Deadline(start + limits.time_limit))
    except TimeLimit as e:
        raise NoAnswer(f"no plan: the search's share of the time limit "
                       f"({limits.time_limit:.3g} s) ran out with 0 of the workload's "
                       f"{len(keys)} collectives planned (while {e})") from None
    for i, (comm, coll, root) in enumerate(keys):
        group = workload.communicators[comm][0]
        left = limits.time_limit - (time.monotonic() - start)
        if left <= 0:
            raise NoAnswer(f"no plan: the search's share of the time limit "
                           f"({limits.time_limit:.3g} s) ran out with {i} of the "
                           f"workload's {len(keys)} collectives planned")
        # no floor of a second a collective (18 of them ran 1.5 x a 10 s limit); a share
        # too short for even the quickest answer says so
        share = left / (len(keys) - i)
        sub = views[comm]
        on_event("search", f"{coll} on {comm} ({len(group)} GPUs)")
        began = time.monotonic()
        try:
            result = in_cost_model(synthesize(sub, coll, root, Limits(
                limits.max_steps, limits.max_chunks, share * 3 / 4, limits.backend),
                method=method), sub, cost_model)
            models.append(result.model)
        except NoAnswer as e:
            if "time limit" not in str(e):
                raise
            raise NoAnswer(f"no plan: {coll} on {comm} ({i + 1} of {len(keys)} collectives) "
                           f"had {share * 3 / 4:.2g} s of the search's share of the "
                           f"time limit ({limits.time_limit:.3g} s): {e}") from None
        calibrated = cost_model == "calibrated"
        groups = workload.communicators[comm]
        variants = runtime_variants(sub, result, Limits(
            limits.max_steps, limits.max_chunks, share / 4, limits.backend), method)
        if interrupt_seen():  # the searches keep what Ctrl-C left them; a plan does not
            raise KeyboardInterrupt
        p = prices(sub) if calibrated else None
        cands = [with_groups(c, topo, groups)
                 for c in candidates_of(result, p) + variants]
        if not cands:
            raise _none_within(f"{coll} on {comm}", result)
        # NCCL runs on one route per GPU pair, whatever synth's schedules may assume
        model = result.model if not sub.several_routes else lower(one_route(sub))
        made = (nccl_reference(one_route(sub), coll, model, root) if calibrated
                else reference_of(coll, model, root))
        reference = [with_groups(c, one_route(topo), groups) for c in made] or list(cands)
        plan.entries.append(Entry(
            comm, coll, root, len(group), sub.name, result.bounds, cands, reference,
            envelope(cands), [c for c in workload.calls if (c.communicator, c.collective,
                                                           c.root) == (comm, coll, root)],
            groups, time.monotonic() - began, bool(made),
            machine_of(sub) if calibrated and made else None,
            library_of(sub)))
    tags = [t for t in dict.fromkeys(c.overlap for c in workload.calls) if t]
    for i, tag in enumerate(tags):
        if sum(c.overlap == tag for c in workload.calls) < 2:
            continue
        on_event("search", f"the calls tagged {tag} together")
        left = limits.time_limit - (time.monotonic() - start)
        plan.overlaps.append(overlap(plan, topo, tag, replace(
            limits, time_limit=max(left / (len(tags) - i), 0.0)), method))
        if interrupt_seen():
            raise KeyboardInterrupt
    plan.routes = routes_summary(topo, *models)
    plan.seconds = time.monotonic() - start
    return plan


def _planning_views(plan: Plan, topo: Topology, comms: list[str], deadline: Deadline
                    ) -> dict[str, Topology]:
    """{communicator: the view it is planned on} (synth.plan.shapes), each made once;
    the plan's planned_on and notes say which. TimeLimit past `deadline`."""
    views = {}
    for comm in dict.fromkeys(comms):
        groups = plan.workload.communicators[comm]
        plan.planned_on[comm], differ = planning_groups(topo, comm, groups, deadline)
        if differ:  # degraded where the healthy machine's groups are alike
            degraded = topo.healthy is not None and not planning_groups(
                topo.healthy, comm, groups, deadline)[1]
            plan.notes.append(_planned_on(comm, plan.planned_on[comm], degraded))
        views[comm] = fastest_unit(replace(planning_view(topo, plan.planned_on[comm]),
                                           name=f"{topo.name}:{comm}"), topo.ranks)
    return views


def _planned_on(comm: str, reps: list[list[int]], degraded: bool) -> str:
    """In words, the view a communicator whose groups differ is planned on."""
    differ = (f"communicator {comm}: its groups see the machine differently"
              + (" (a degraded machine)" if degraded else ""))
    if len(reps) == 1:
        return (f"{differ}; planned on group {reps[0]}, whose links every other group has "
                "at least as fast: its files serve them all, timed as it runs them, the "
                "slowest")
    return (f"{differ}; planned on each link at its slowest in groups "
            f"{', '.join(map(str, reps))}: its files serve them all, timed no faster "
            "than the slowest runs them")


def _none_within(what: str, result) -> NoAnswer:
    """Why a collective has no candidate: --max-steps under its step bound (exit 1, as
    synthesis says it), or nothing found in its share of the time."""
    most = result.limits.max_steps
    if most is not None and most < result.bounds.steps:
        return NoAnswer(f"no plan: {what}: --max-steps {most} is under its bound of "
                        f"{result.bounds.steps} steps")
    return NoAnswer(f"no plan: {what}: no schedule found within the limits")
