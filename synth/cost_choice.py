"""The frontier as a cost model chooses it (synth.frontier.Result in, Result out): the
line-rate model keeps every Pareto point; cost model 2 keeps those that are the
fastest at some size, per runtime too, each timed only if the time left affords it."""

from __future__ import annotations

from dataclasses import replace

from synth.construct.paced import TIMING, timing_size
from synth.deadline import Deadline, Pace
from synth.errors import BadInput
from synth.pareto_front import baselines_kept
from synth.search.pareto import Point
from synth.topology.physical import Topology

Result = "synth.frontier.Result"  # what these take and give (imported there, not here)

COST_MODELS = ("calibrated", "line-rate")


def in_cost_model(result: Result, topo: Topology, cost_model: str,
                  protocols: dict | None = None, deadline: Deadline = Deadline(),
                  lines: dict | None = None, asked: bool = False) -> Result:
    """The frontier as `cost_model` chooses it. "line-rate" keeps every point (the
    Pareto frontier of latency and us/MB, whose bounds and proofs are exact);
    "calibrated" times the points in cost model 2 (synth.predict.timing, with the
    topology's figures), the smallest first, each only if the time left affords it
    (TIMING), keeps those that are the fastest at some size, and where points say which
    runtimes load them (Point.loads), per runtime those that are the fastest it loads at
    some size (timed in `protocols`[runtime], where given: the protocols it runs); it
    keeps those it cannot judge, left untimed (out_of_time says so) or, where the
    runtimes were `asked` about the points, not asked in time (loads None: one may be
    a runtime's fastest), and lists the others in left_out. `lines`: the points timed
    already (timed's), not timed again."""
    if cost_model not in COST_MODELS:
        raise BadInput(f"unknown cost model '{cost_model}' (expected "
                       f"{' or '.join(COST_MODELS)})")
    result = replace(result, cost_model=cost_model, topology=topo)
    if cost_model == "calibrated" and result.points:
        result.lines = {} if lines is None else lines
        untimed = timed(result.points, topo, result.model, deadline, result.lines)
        # a search's time-out stays; points left untimed after a Ctrl-C are not the limit's
        result.out_of_time = result.out_of_time or (untimed and not result.interrupted)
        done = [pt for pt in result.points if id(pt.schedule) in result.lines]
        kept = {id(pt) for pt in winners(done, result.lines)}
        if asked:  # a point the asking did not reach in time is not judged
            kept |= {id(pt) for pt in done if pt.loads is None}
        for fmt in sorted({f for pt in done for f in pt.loads or ()}):
            loadable = [pt for pt in done if pt.loads and pt.loads.get(fmt, 1) is None]
            kept |= {id(pt) for pt in winners(loadable, result.lines,
                                              (protocols or {}).get(fmt))}
        out = {id(pt) for pt in done if id(pt) not in kept}  # by identity: comparing
        result.points = [pt for pt in result.points if id(pt) not in out]  # is O(schedule)
        baselines_kept(result.points, result.searches)  # of those the table shows
        # a point of a kept one's steps, rounds and chunks (an exact point and the
        # baseline it equals) is not named as left out: its name is a row of the table
        shown = {(pt.steps, pt.rounds, pt.chunks) for pt in result.points}
        result.left_out = [pt for pt in done if id(pt) in out
                           and (pt.steps, pt.rounds, pt.chunks) not in shown]
    return result


def timed(points: list[Point], topo: Topology, model, deadline: Deadline = Deadline(),
          lines: dict | None = None) -> bool:
    """Time the points in cost model 2 on `topo` (lowered to `model`) into `lines`
    ({id(schedule): synth.predict.timing's lines}), the smallest first, each only if
    the time left affords it (TIMING), after the prices where none are in `lines` yet
    (ROUTING: timing a first point prices the machine, which is then remembered);
    those in `lines` already are not timed again. Whether any point was left untimed.
    A Ctrl-C keeps the lines made so far."""
    from synth.predict.timing import priced_model, prices, schedule_lines

    lines = {} if lines is None else lines
    todo = [pt for pt in points if id(pt.schedule) not in lines]
    if not todo:
        return False
    if not lines and not deadline.affords(ROUTING.seconds(len(model.links)
                                                          + len(model.groups))):
        return True
    p, untimed = prices(topo), False
    for point in sorted(todo, key=lambda pt: timing_size(pt.schedule)):
        units = timing_size(point.schedule)
        if not deadline.affords(TIMING.seconds(units)):
            untimed = True
            continue
        # a folded schedule's orbit prices are made once per machine, outside the pace
        # (in it, dgx2x32's first point made the rest look 20 times dearer)
        priced_model(point.schedule, p)
        with TIMING.timing(units):
            lines[id(point.schedule)] = schedule_lines(point.schedule, p)
    return untimed


# routing a topology, per rank link and group, as this command's own routing took (cost
# model 2's prices route the topology again); the prior an idle core's pace (25 us)
ROUTING = Pace(2.5e-5, least=10_000)


def winners(points: list[Point], lines: dict,
            protocols: tuple[str, ...] | None = None) -> list[Point]:
    """The points that are the fastest in cost model 2 at one or more of its SIZES (of
    equal times the one with fewer steps), each timed in `protocols` (a runtime's; None:
    every one): synth.predict.timing.fastest_somewhere's rule, over lines computed once,
    within the deadline."""
    from synth.predict.timing import SIZES, fastest
    if not points:
        return []
    lines = {id(pt.schedule): [x for x in lines[id(pt.schedule)]
                               if protocols is None or x.protocol in protocols]
             for pt in points}
    points = [pt for pt in points if lines[id(pt.schedule)]]
    fastest_at = set()
    for n in SIZES:
        times = [fastest(lines[id(pt.schedule)], n).time_us(n) for pt in points]
        fastest_at.add(min(range(len(points)), key=lambda i: (times[i], points[i].steps)))
    return [pt for i, pt in enumerate(points) if i in fastest_at]
