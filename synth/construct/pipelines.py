"""Pipelines: a batch program repeated over P batches, batch b starting at step b.

A construction gives one batch's program (its sends, level by level); `pipelined` makes
the schedule of P batches (a version 2 pipeline, every expanded step priced from all it
carries), and `add_pipelines` builds and verifies it at the depths in DEPTHS that fit
the step limits and the time left. Trees (tree_schedules, grid_trees), the switch and
NIC constructions and the relayed alltoall all pipeline this way.
"""

from __future__ import annotations

import time
from fractions import Fraction

from synth.construct.paced import verified_within
from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.ir import Pipeline, Schedule, Send, Step
from synth.schedule.transform import written_per_orbit
from synth.search.pareto import Limits, Point, Search
from synth.topology.linkmodel import LinkModel, rounds_for_load

DEPTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # pipeline batches tried
MAX_STEPS = 1100  # a pipeline past this many steps is not built


def levels(sends_at: list[tuple[int, Send]]) -> list[tuple[Send, ...]]:
    """(level, send) pairs as steps, level 1 first."""
    by_level: dict[int, list[Send]] = {}
    for level, send in sends_at:
        by_level.setdefault(level, []).append(send)
    return [tuple(sorted(by_level[d], key=lambda x: (x.src, x.dst, x.chunk)))
            for d in sorted(by_level)]


def pipelined(model: LinkModel, coll, program, per_batch: int, batches: int,
              info: dict, priced_on: LinkModel | None = None) -> Schedule:
    """`program` as batch 0 of a pipeline of `batches` batches (stride `per_batch`),
    batch b starting at step b; every expanded step's rounds from all it carries, on
    `priced_on` where given (an orbits' quotient, for a program of representatives)."""
    priced_on = priced_on or model
    loads = []
    for sends in program:
        load: dict[tuple[int, int], int] = {}
        for x in sends:
            load[(x.src, x.dst)] = load.get((x.src, x.dst), 0) + x.count
        loads.append(load)
    steps = tuple(Step(rounds_for_load(priced_on, load), sends)
                  for load, sends in zip(loads, program))
    if batches == 1:
        return Schedule(coll, model, steps, info)
    depth, window_rounds = len(steps), {}
    rounds = []
    for t in range(depth + batches - 1):  # expanded step t runs program steps lo..hi
        window = (max(0, t - batches + 1), min(t, depth - 1))
        if window not in window_rounds:
            total: dict[tuple[int, int], int] = {}
            for load in loads[window[0]:window[1] + 1]:
                for pair, n in load.items():
                    total[pair] = total.get(pair, 0) + n
            window_rounds[window] = rounds_for_load(priced_on, total)
        rounds.append(window_rounds[window])
    return Schedule(coll, model, steps, info, Pipeline(batches, per_batch, tuple(rounds)))


# building a pipeline of packed trees, per tree edge (copies counted): the prior an idle
# core's (dgxh100x64's allreduce, a million edges: 2 s), then the slowest measured
PIPELINE = Pace(2e-6, least=10_000)


def add_pipelines(search: Search, build, limits: Limits, deadline: Deadline,
                  depths=DEPTHS, edges: int = 0, orbits=None,
                  bound: Fraction | None = None) -> None:
    """build(P) for each depth P in `depths`, verified, as points of `search` where its
    steps are within the limits, deepest first. Anytime: the shallowest is built first
    (the fewest steps, and quick: there is an answer), then the deepest (nearest the
    bound, what trees are for), then the rest; none is started past the deadline or
    once the time left is less than the longest build so far (the builds of a program
    share their work, so the first is the dearest), the first not unless the time left
    affords `edges` (the trees' edges, their copies counted) at the pace measured so
    far (PIPELINE), and none is kept whose verification the time left does not afford
    (synth.construct.paced). Each is written once per orbit of `orbits` where they map
    it onto itself (synth.schedule.transform.written_per_orbit). Past a depth whose
    point is at `bound` (rounds per chunk) none deeper is built: more batches add steps
    and cannot go below it, so they could not join the frontier."""
    lo, hi = max(1, limits.min_steps), min(limits.max_steps or MAX_STEPS, MAX_STEPS)
    ordered = sorted(set(depths))
    ordered = list(dict.fromkeys(ordered[:1] + ordered[-1:] + ordered[::-1]))
    longest, found = PIPELINE.seconds(edges), []
    for batches in ordered:
        if any(p.ratio <= bound and p.schedule.batches < batches for p in found
               if bound is not None):
            continue
        if deadline.passed() or not deadline.affords(longest):
            search.stopped, search.complete = "out of time", False
            break
        started = time.monotonic()
        schedule = written_per_orbit(build(batches), orbits)
        elapsed = time.monotonic() - started
        if batches == ordered[0]:
            PIPELINE.record(edges, elapsed)
        longest = max(longest, elapsed)
        if not lo <= schedule.num_steps <= hi:
            continue
        try:
            found.append(Point(verified_within(schedule, deadline), proven=False))
        except OutOfTime:
            search.stopped, search.complete = "out of time", False
    search.points += sorted(found, key=lambda p: -p.schedule.batches)


