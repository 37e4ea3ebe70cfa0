"""The Pareto frontier over (steps S, rounds R, chunks C), SCCL's search made lazier.

For S = the hop bound, S + 1, ... the search asks for the smallest rounds per chunk
R / C at that S, and only for ratios that beat every point already found (anything
else is dominated). Facts that save solver calls:

- R / C below the cut bound is impossible: the solver is told R >= bound x C.
- A schedule for (R, C) gives one for (kR, kC) by cutting chunks
  (synth.schedule.transform.refine), so only C in (max_chunks / 2, max_chunks] is asked,
  each for its least R (CP-SAT minimises, proving the minimum): every smaller C divides
  one of them. Pairs with a
  common factor are not skipped: the least R at C = 4 is found whatever C = 2 allows.
  Where that window finds nothing for want of answers (time-outs), the half below it
  is asked, down to one chunk.
- Once a point is found at some C, the other C are asked for strictly less, which is
  often a quick UNSAT.
- With no point yet, rounds are unbounded, so UNSAT means S steps cannot work at all.
- The point is reported with the fewest chunks that reach its ratio.
- A call that found nothing in its whole budget makes every instance at least as large
  (in variables) not worth asking: it is skipped, unproven, and the search says why.
  On 32 GPUs the first such call at S = 5 took its 45 s, and the seven after it took
  theirs, each finding nothing, while the trees had long reached the bound.

A point is proven Pareto-optimal (within C <= max_chunks) when every cheaper instance
the search skipped or asked was shown infeasible, with no solver time-out on the way.
The search stops at the bandwidth bound, at max_steps, or when the time runs out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

from synth.deadline import DEFAULT_TIME_LIMIT, Deadline
from synth.schedule.collectives import DUAL, make_collective
from synth.schedule.ir import Schedule
from synth.search.constraints import SAT, UNKNOWN, UNSAT
from synth.search.encoding import variables_for
from synth.search.instance import (DEFAULT_WORKERS, Outcome, TooLarge, remembered,
                                   solve_instance, too_large)
from synth.topology.linkmodel import LinkModel

INSTANCE_SHARE = 0.2  # of the search's time limit, at most, for one solver call
INSTANCE_FLOOR = 5.0  # seconds any call may take, if the search has them left


@dataclass(frozen=True)
class Attempt:
    steps: int
    rounds: int
    chunks: int
    status: str
    seconds: float
    method: str
    cached: bool = False  # answered from the cache (synth.search.cache)


@dataclass(frozen=True)
class Point:
    schedule: Schedule
    proven: bool  # every cheaper instance was shown infeasible
    # {runtime format: None where it loads the schedule, else why not}: set by
    # synth.export.loads.with_runtimes; None: not asked
    loads: dict | None = field(default=None, compare=False)

    @property
    def steps(self) -> int:
        return self.schedule.num_steps

    @property
    def rounds(self) -> int:
        return self.schedule.rounds

    @property
    def chunks(self) -> int:
        return self.schedule.collective.chunks

    @property
    def ratio(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)


@dataclass
class Search:
    """What a frontier search did: its points, every solver call, why it stopped."""

    points: list[Point] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    stopped: str = ""
    complete: bool = True  # no call timed out so far
    too_large: str = ""  # why an instance was refused, if one was
    # the smallest call (variables, what it was) that found nothing in its whole budget
    hopeless: tuple[int, str] | None = None


@dataclass(frozen=True)
class Limits:
    max_steps: int | None = None  # None: synth.frontier's default from the hop bound
    max_chunks: int = 8
    time_limit: float = DEFAULT_TIME_LIMIT  # seconds for the whole search
    backend: str = "cpsat"
    min_steps: int = 1  # searched from max(this, the hop bound)
    workers: int = DEFAULT_WORKERS  # CP-SAT portfolio size

    def allows(self, steps: int) -> bool:
        """Whether `steps` is within the steps asked for (no max_steps: no cap)."""
        return max(1, self.min_steps) <= steps <= (self.max_steps or steps)


def frontier(model: LinkModel, name: str, root: int | None, min_steps: int,
             ratio_bound: Fraction, limits: Limits,
             on_event: Callable[[str, object], None] | None = None,
             known: tuple[tuple[int, Fraction], ...] = (),
             deadline: Deadline | None = None) -> Search:
    """Search the frontier of collective `name`; see the module doc.

    known: (steps, R / C) of schedules found another way (the decomposition); at S
    steps only ratios below every known one with at most S steps are asked for, since
    the rest are dominated. deadline: when the search ends (default: limits.time_limit
    from now); each solver call is given the time left as its own limit. Cost: at most
    max_chunks / 2 + a few solver calls per step count; the calls dominate.
    """
    on_event = on_event or (lambda kind, data: None)
    deadline = deadline or Deadline.after(limits.time_limit)
    per_call = max(INSTANCE_FLOOR, deadline.left() * INSTANCE_SHARE)
    search = Search()
    # starting above the hop bound leaves fewer steps unexplored: nothing is proven
    search.complete = limits.min_steps <= min_steps
    best = None  # smallest ratio found so far

    ask = _asker(model, name, root, limits, deadline, per_call, search, on_event)

    first = max(1, min_steps, limits.min_steps)
    refused = too_large(model, name, first, limits.max_chunks // 2 + 1)
    if refused:  # the smallest instance the search would ask is refused: so is the rest
        search.complete = False
        search.too_large = refused
        search.stopped = f"instances too large for exact synthesis: {refused}"
        return search
    try:
        for steps in range(first, limits.max_steps + 1):
            cap = min([r for s, r in known if s <= steps] + ([best] if best else []),
                      default=None)
            if cap is not None and cap <= ratio_bound:
                search.stopped = "reached the bandwidth bound"
                break
            point = _least_ratio(ask, model, name, root, steps, ratio_bound, cap,
                                 limits.max_chunks)
            if point is None:
                continue
            search.points.append(Point(point, proven=search.complete))
            on_event("point", search.points[-1])
            best = Fraction(point.rounds, point.collective.chunks)
            if best <= ratio_bound:
                search.stopped = "reached the bandwidth bound"
                break
        else:
            search.stopped = f"reached --max-steps {limits.max_steps}"
            if search.hopeless:
                search.stopped = (f"larger instances not asked: {search.hopeless[1]}")
            if not search.points and search.too_large:
                search.stopped = ("instances too large for exact synthesis: "
                                  f"{search.too_large}")
    except (TimeoutError, KeyboardInterrupt) as stop:
        search.stopped = "out of time" if isinstance(stop, TimeoutError) else "interrupted"
        search.complete = False
        found = getattr(stop, "found", None)
        if found is not None and (best is None or
                                  Fraction(found.rounds, found.collective.chunks) < best):
            search.points.append(Point(found, proven=False))
            on_event("point", search.points[-1])
    return search


def _asker(model: LinkModel, name: str, root: int | None, limits: Limits,
           deadline: Deadline, per_call: float, search: Search, on_event):
    """ask(steps, rounds, chunks, floor, minimize): one solver call of the search, each
    recorded in `search` (its attempts, whether it is still complete, the smallest call
    that found nothing in its whole budget, after which no larger one is asked)."""

    def ask(steps, rounds, chunks, floor=0, minimize=False):
        if deadline.passed():
            raise TimeoutError
        size = variables_for(DUAL.get(name, name), model.ranks, chunks, len(model.links),
                             steps)
        coll = make_collective(name, model.ranks, chunks, root)
        if search.hopeless and size >= search.hopeless[0] and remembered(
                model, coll, steps, rounds, limits.backend, minimize, floor) is None:
            search.complete = False  # not asked (an answer remembered is still read)
            return Outcome(UNKNOWN, None, 0.0, "skipped")
        on_event("ask", (steps, rounds, chunks))
        # one hard instance may not eat the whole budget: the search moves on, and the
        # points after it are no longer proven
        budget = deadline.solver_seconds(per_call)
        try:
            out = solve_instance(model, coll, steps, rounds, limits.backend, budget,
                                 limits.workers, minimize, floor)
        except TooLarge as e:  # as good as a time-out: skipped, and nothing after is proven
            search.too_large = str(e)
            search.complete = False
            out = Outcome(UNKNOWN, None, 0.0, "too large")
        search.attempts.append(Attempt(steps, out.schedule.rounds if out.schedule else rounds,
                                       chunks, out.status, out.seconds, out.method,
                                       out.cached))
        on_event("answer", search.attempts[-1])
        if out.status == UNKNOWN or (minimize and out.status == SAT and not out.optimal):
            search.complete = False
        if (out.status == UNKNOWN and out.schedule is None and budget >= per_call
                and out.method != "too large"
                and (search.hopeless is None or size < search.hopeless[0])):
            search.hopeless = (size, f"S={steps} C={chunks} found nothing in "
                                     f"{out.seconds:.0f} s")
        return out

    return ask


def _least_ratio(ask, model, name, root, steps: int, floor: Fraction, cap: Fraction | None,
                 max_chunks: int) -> Schedule | None:
    """The schedule with the smallest R / C at this S, below `cap`, or None.

    Only C in (max_chunks / 2, max_chunks] is asked, each for its least R: every
    smaller C divides one of them, and refining never raises R / C. A C that cannot
    beat the best so far is asked for strictly less, so its answer is often a quick
    UNSAT. With no cap yet, rounds are unbounded, and UNSAT means S steps cannot work
    for any C (chunks are independent when capacity is no object). Where that window
    finds nothing and some C in it went unanswered (out of its time, too large, or
    not asked after a larger call found nothing), the window below it is asked, (C /
    4, C / 2] and so on down to one chunk: with --max-chunks 16 every C from 9 up ran
    out of time, and the search ended with no point where --max-chunks 8 found some.
    """
    top = max_chunks
    while top >= 1:
        found, unanswered = _in_window(ask, model, name, root, steps, floor, cap, top)
        if found == "too few steps":
            return None
        if found is not None or not unanswered:
            break
        top //= 2
    if found is None:
        return None
    cap = Fraction(found.rounds, found.collective.chunks)
    try:
        return _fewest_chunks(ask, steps, cap, found.collective.chunks // cap.denominator,
                              found)
    except (TimeoutError, KeyboardInterrupt) as stop:
        stop.found = found
        raise


def _in_window(ask, model, name, root, steps: int, floor: Fraction, cap: Fraction | None,
               top: int):
    """(the schedule of least R / C with C in (top / 2, top], below `cap`, or None, or
    "too few steps"; whether some C went unanswered)."""
    found, unanswered = None, False
    # C that can meet the cut bound exactly first, smallest (quickest) first: if one
    # reaches the bound the others need not be asked
    order = sorted(range(top // 2 + 1, top + 1),
                   key=lambda c: ((floor * c).denominator != 1, c))
    for chunks in order:
        lower = max(steps, math.ceil(floor * chunks))
        upper = (math.ceil(cap * chunks) - 1 if cap is not None
                 else _unbounded_rounds(model, name, root, steps) * chunks)
        if upper < lower:
            continue
        try:
            out = ask(steps, upper, chunks, floor=lower, minimize=True)
        except (TimeoutError, KeyboardInterrupt) as stop:
            stop.found = found  # the caller keeps a point already verified
            raise
        if out.status != SAT:
            if cap is None and out.status == UNSAT:
                return "too few steps", False
            unanswered |= out.status == UNKNOWN
            continue
        found = out.schedule
        cap = Fraction(found.rounds, chunks)
        if cap <= floor:
            break
    return found, unanswered


def _fewest_chunks(ask, steps: int, ratio: Fraction, k: int, found: Schedule) -> Schedule:
    """The same ratio with as few chunks as possible: simpler programs, less overhead.

    Tries (j p, j q) for j = 1 .. k - 1 (ratio p / q, found at k q chunks); the first
    that is satisfiable wins.
    """
    p, q = ratio.numerator, ratio.denominator
    for j in range(1, k):
        if j * p >= steps:
            out = ask(steps, j * p, j * q)
            if out.status == SAT:
                return out.schedule
    return found


def _unbounded_rounds(model: LinkModel, name: str, root: int | None, steps: int) -> int:
    """Rounds so many that no capacity can bind, with one chunk per share."""
    coll = make_collective(name, model.ranks, 1, root)
    smallest = min([l.capacity for l in model.links] + [g.capacity for g in model.groups])
    per_step = math.ceil(coll.num_chunks * 2 * max(
        [1] + [len(g.links) for g in model.groups]) / smallest)
    return steps * per_step
