"""The exact search over the whole machine, as a job runs it: whether method "auto" runs
it at all (past AUTO_EXACT_GPUS it does not), and allreduce's three searches (allreduce
itself, and the reducescatter and allgather frontiers whose pairings are composed)."""

from __future__ import annotations

import math
from dataclasses import replace

from synth.bounds import Bounds, bounds
from synth.construct.paced import verified_within
from synth.deadline import Deadline
from synth.schedule.collectives import make_collective
from synth.schedule.transform import compose_allreduce, refine
from synth.search.instance import too_large
from synth.search.pareto import Limits, Search, frontier
from synth.topology.linkmodel import Lowering

# past this many GPUs, "auto" leaves the exact search over the whole machine out: on 32
# (dgxh100x4, dgx2x2, ndv2x4, dgxa100x4) the job took 854-2550 MiB and 189.8-235.4 s with
# it, 107-279 MiB and 3.0-20.3 s without, and it made nothing faster at 1 KB, 1 MB or
# 1 GB; on 16 (dgxh100x2, ndv2x2) its few-step points were 1.080-1.937 x faster at 1 KB
# (bench/results/auto-exact-2026-12-06.md). "exact" still runs it
AUTO_EXACT_GPUS = 16


def exact_left_out(method: str, ranks: int, found: bool) -> str:
    """Why `method` leaves the exact search over all `ranks` out ("" where it runs it):
    auto past AUTO_EXACT_GPUS, where the constructions `found` some schedule within the
    steps asked for (else it is the only way left to one: --steps 10 on ring:17)."""
    if method != "auto" or ranks <= AUTO_EXACT_GPUS or not found:
        return ""
    return (f"left out past {AUTO_EXACT_GPUS} GPUs ({ranks} here): on 32 it took GBs and "
            "minutes for nothing faster at 1 KB, 1 MB or 1 GB (--method exact runs it)")


def allreduce_searches(lowering: Lowering, b: Bounds, limits: Limits, on_event,
                       known=(), deadline: Deadline = Deadline(),
                       bounds_share: float = 0.4) -> dict[str, Search]:
    """Allreduce directly (asking only for what beats `known`, as frontier does), then
    allgather and reducescatter for the composition, sharing the time 3 : 2 : 1 of what
    is left at each start; each part's bounds at most `bounds_share` of its time."""
    model = lowering.model
    searches = {}
    parts = (("allreduce", 3), ("allgather", 2), ("reducescatter", 1))
    for k, (part, weight) in enumerate(parts):
        refused = too_large(model, part, 1, limits.max_chunks // 2 + 1)
        if refused:  # not even one step fits: skip the bounds too (minutes at 256 GPUs)
            searches[part] = Search(stopped=f"instances too large for exact synthesis: "
                                            f"{refused}", complete=False, too_large=refused)
            continue
        # its weight of those left (1 / weight gave each a third, as the walker found)
        part_deadline = deadline.share(weight / sum(w for _, w in parts[k:]))
        part_limits = replace(limits, time_limit=part_deadline.left())
        pb = b if part == "allreduce" else bounds(
            lowering, make_collective(part, model.ranks), part_deadline.share(bounds_share))
        if part != "allreduce":  # room for the other phase, at least its hop bound
            part_limits = replace(part_limits, min_steps=1,
                                  max_steps=max(pb.steps, limits.max_steps - pb.steps))
        on_event("search", part)
        searches[part] = frontier(model, part, None, pb.steps, pb.rounds_per_chunk,
                                  part_limits, on_event, known if part == "allreduce" else (),
                                  part_deadline)
        if searches[part].stopped == "interrupted":
            break  # Ctrl-C ends the whole job, keeping what was found
    return searches


def compose(rs, ag, deadline: Deadline = Deadline()):
    """The allreduce of reducescatter `rs` then allgather `ag`, cut to a common number
    of chunks, verified."""
    k = math.lcm(rs.collective.chunks, ag.collective.chunks)
    return verified_within(compose_allreduce(refine(rs, k // rs.collective.chunks),
                                             refine(ag, k // ag.collective.chunks)), deadline)
