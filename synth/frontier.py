"""A collective's whole frontier: bounds, the searches, and allreduce's composition.

Allreduce gets three searches sharing the time limit: allreduce directly, and the
reducescatter and allgather frontiers, whose every pairing (cut to a common number of
chunks per rank) is a composed allreduce candidate. All candidates meet on one
frontier. Every schedule returned has passed the verifier.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction

from synth.bounds import Bounds, bounds
from synth.collectives import make_collective
from synth.duality import compose_allreduce, refine
from synth.linkmodel import LinkModel, lower_with_routes
from synth.pareto import Limits, Point, Search, frontier
from synth.synthesis import verified
from synth.topology import Topology


@dataclass
class Result:
    collective: str
    root: int | None
    model: LinkModel
    bounds: Bounds
    points: list[Point]
    searches: dict[str, Search] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return all(s.complete for s in self.searches.values())


def default_max_steps(b: Bounds) -> int:
    """3 steps past the hop bound; allreduce: room for two phases."""
    return 2 * b.steps + 2 if b.collective == "allreduce" else b.steps + 3


def default_limits(b: Bounds, max_steps=None, max_chunks=None, time_limit=None,
                   backend="cpsat") -> Limits:
    """Limits with every default filled in (8 chunks, 5 minutes, default_max_steps)."""
    return Limits(max_steps or default_max_steps(b), max_chunks or 8, time_limit or 300.0,
                  backend)


def synthesize(topo: Topology, name: str, root: int | None = None, limits: Limits | None = None,
               on_event=None) -> Result:
    """The Pareto frontier of `name` on `topo` within `limits`."""
    start = time.monotonic()
    lowering = lower_with_routes(topo)
    model = lowering.model
    coll = make_collective(name, model.ranks, 1, root)
    b = bounds(topo, coll, lowering)
    limits = limits or Limits()
    if limits.max_steps is None:
        limits = replace(limits, max_steps=default_max_steps(b))
    if name != "allreduce":
        search = frontier(model, name, coll.root, b.steps, b.rounds_per_chunk, limits, on_event)
        return Result(name, coll.root, model, b, search.points, {name: search},
                      time.monotonic() - start)

    searches = {}
    for part, share in (("allreduce", 3), ("allgather", 2), ("reducescatter", 1)):
        remaining = limits.time_limit - (time.monotonic() - start)
        part_limits = replace(limits, time_limit=max(remaining / share, 0.0))
        pb = b if part == "allreduce" else bounds(topo, make_collective(part, model.ranks),
                                                  lowering)
        if part != "allreduce":  # room for the other phase, at least its hop bound
            part_limits = replace(part_limits, min_steps=1,
                                  max_steps=max(pb.steps, limits.max_steps - pb.steps))
        if on_event:
            on_event("search", part)
        searches[part] = frontier(model, part, None, pb.steps, pb.rounds_per_chunk,
                                  part_limits, on_event)
        if searches[part].stopped == "interrupted":
            break  # Ctrl-C ends the whole job, keeping what was found
    composed = [Point(_compose(rs.schedule, ag.schedule), proven=False)
                for rs in searches.get("reducescatter", Search()).points
                for ag in searches.get("allgather", Search()).points]
    points = pareto_filter(searches["allreduce"].points + composed)
    return Result(name, None, model, b, points, searches, time.monotonic() - start)


def _compose(rs, ag):
    k = math.lcm(rs.collective.chunks, ag.collective.chunks)
    return verified(compose_allreduce(refine(rs, k // rs.collective.chunks),
                                      refine(ag, k // ag.collective.chunks)))


def pareto_filter(points: list[Point]) -> list[Point]:
    """The points no other beats on both steps and rounds per chunk, by steps."""
    kept, best = [], None
    for p in sorted(points, key=lambda p: (p.steps, p.ratio, not p.proven, p.chunks)):
        if best is None or p.ratio < best:
            kept.append(p)
            best = p.ratio
    return kept


def optimality(point: Point, b: Bounds) -> str:
    """How far a point is known to be optimal, in words for the table."""
    marks = []
    if point.proven:
        marks.append("proven")
    if point.ratio == b.rounds_per_chunk:
        marks.append("bw-bound")
    if point.steps == b.steps:
        marks.append("step-bound")
    return ",".join(marks) or "-"


def ratio_to_bound(point: Point, b: Bounds) -> Fraction:
    return point.ratio / b.rounds_per_chunk
