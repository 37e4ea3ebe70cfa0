"""The Pareto frontier of a set of points, how each stands against the bounds, and how
many baselines are on it: plain functions over synth.search.pareto's Points
(synth.frontier assembles the frontier)."""

from __future__ import annotations

from fractions import Fraction

from synth.bounds import Bounds
from synth.schedule.cost import schedule_cost
from synth.search.pareto import Limits, Point, Search


def pareto_filter(points: list[Point]) -> list[Point]:
    """The points no other beats on both real costs, latency (us) and bandwidth (us/MB,
    exactly: rounds per chunk), ordered by steps. Of equal costs the one with fewer
    steps, then a proven one, then fewer chunks is kept. Since time(n) = latency +
    n x us/byte, the frontier is at every message size as fast as any point it drops.
    O(P log P) for P points."""
    kept, best = [], None
    for p in sorted(points, key=pareto_key):
        if best is None or p.ratio < best:
            kept.append(p)
            best = p.ratio
    return sorted(kept, key=lambda p: (p.steps, p.ratio))


def within_steps(points: list[Point], limits: Limits) -> list[Point]:
    """The points within the steps asked for. Take it before pareto_filter: a point past
    --max-steps may be what kept another off the front."""
    return [p for p in points if limits.allows(p.steps)]


def pareto_key(p: Point) -> tuple:
    """pareto_filter's order: latency (a float sum of alphas: rounded, so that equal sums
    compare equal), rounds per chunk, then the tie-breaks."""
    return (round(schedule_cost(p.schedule).latency_us, 9), p.ratio, p.steps,
            not p.proven, p.chunks)


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


def baselines_kept(points: list[Point], searches: dict[str, Search]) -> None:
    """The baselines' summary: how many of them are on the final frontier (again where
    a cost model chose from it: synth.cost_choice; dgx2x4's allreduce said "1 of 6"
    with its one baseline on the line-rate frontier left out of the table)."""
    found = searches.get("baselines", Search())
    if found.points and (not found.stopped or found.stopped.endswith(" on the frontier")):
        on = sum("baseline" in p.schedule.info for p in points)
        found.stopped = f"{on} of {len(found.points)} on the frontier"
