"""One deadline for a whole job, handed down to every stage that can take long.

`--time-limit` is a promise about the whole command: routing, bounds, searches,
constructions, timing the points and writing their files. Each stage gets the job's
Deadline (or a share of what is left of it), checks it inside its loops (check(): the
stage stops with OutOfTime and keeps what it found so far), hands a solver the time
left as the solver's own limit (solver_seconds()), and before a piece of work whose size
it knows, asks whether the time left affords it at the pace this machine has shown so
far (Pace: seconds per unit of work, measured as the job runs, so a busy machine's
slowness is counted). Past the deadline a stage starts nothing new.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

# seconds: --time-limit of every command that has one, and a search's Limits, unless told
DEFAULT_TIME_LIMIT = 300.0


class OutOfTime(Exception):
    """The deadline passed inside a stage; what the stage found before it stands."""


class TimeLimit(OutOfTime):
    """The deadline passed while a machine was built, edited or lowered; its argument
    says which (the command's one line: "ran out while DOING")."""


def in_time(items, deadline: Deadline, doing: str, every: int = 4096):
    """`items` one by one, TimeLimit(doing) once the deadline has passed: a pass over
    the hundreds of thousands of routes or rank links of a machine of 1024 GPUs looks
    at the deadline every `every` of them, not only once it is over."""
    for i, item in enumerate(items):
        if i % every == 0 and deadline.passed():
            raise TimeLimit(doing)
        yield item


class Held:
    """Work set aside, from the end of a job's searches, for what follows them on what
    they found (writing each point kept): shared by a Deadline and every share of it,
    so that a stage after the one that found a point spends only what is left. Held as
    work (a Pace and units), its seconds follow the pace as measurements change it.
    Each item may carry costs (a point's latency and rounds per chunk): an item another
    beats on every cost is not kept (the job will not write it), and what it held is
    free again."""

    def __init__(self, end: float):
        self.end = end
        self.items: list[tuple[tuple | None, Pace, float]] = []  # (costs, pace, units)

    @property
    def seconds(self) -> float:
        return sum(pace.seconds(units) for _, pace, units in self.items)

    def add(self, pace: Pace, units: float, costs: tuple | None = None) -> None:
        if costs is not None:
            if any(k is not None and _beats(k, costs) for k, _, _ in self.items):
                return
            self.items = [item for item in self.items
                          if item[0] is None or not _beats(costs, item[0])]
        self.items.append((costs, pace, units))


def _beats(a: tuple, b: tuple) -> bool:
    """Whether costs a are no worse than costs b in every respect."""
    return all(x <= y for x, y in zip(a, b))


@dataclass(frozen=True)
class Deadline:
    """A moment in time.monotonic() seconds (math.inf: none), earlier by what is held
    (hold) where the deadline holds time for later work."""

    end: float = math.inf
    held: Held | None = field(default=None, compare=False)

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    @classmethod
    def of(cls, value: Deadline | float | None) -> Deadline:
        """A Deadline from what callers pass: a Deadline, a time.monotonic() moment, or
        None (no deadline)."""
        if isinstance(value, Deadline):
            return value
        return cls(math.inf if value is None else float(value))

    def holding(self) -> Deadline:
        """This deadline, from which hold() sets time aside (for the searches of a job
        whose points are then timed and written by the deadline itself)."""
        return Deadline(self.end, Held(self.end))

    def hold(self, pace: Pace, units: float, costs: tuple | None = None) -> None:
        """Set `units` of work at `pace` aside for later, for an item of these `costs`:
        every share of this deadline ends that much sooner, until an item that beats it
        on every cost is held (Held); nothing, where the deadline holds nothing
        (holding())."""
        if self.held is not None:
            self.held.add(pace, units, costs)

    @property
    def moment(self) -> float:
        """When it passes: its end, or sooner by what is held."""
        if self.held is None:
            return self.end
        return min(self.end, self.held.end - self.held.seconds)

    def left(self) -> float:
        """Seconds until the deadline, 0 once past it."""
        return max(self.moment - time.monotonic(), 0.0)

    def passed(self) -> bool:
        return time.monotonic() >= self.moment

    def check(self, doing: str = "") -> None:
        """OutOfTime past the deadline: for the loops of a stage."""
        if self.passed():
            raise OutOfTime(doing)

    def share(self, fraction: float) -> Deadline:
        """`fraction` of the time left, from now: a sub-stage's deadline."""
        return Deadline(min(self.end, time.monotonic() + fraction * self.left()), self.held)

    def within(self, seconds: float) -> Deadline:
        """At most `seconds` from now, and never past this deadline."""
        return Deadline(min(self.end, time.monotonic() + seconds), self.held)

    def reserving(self, seconds: float) -> Deadline:
        """`seconds` earlier: what a stage may use when work after it must still fit."""
        return Deadline(self.end - seconds, self.held)

    def affords(self, seconds: float) -> bool:
        """Whether work estimated at `seconds` would end before the deadline."""
        return time.monotonic() + seconds <= self.moment

    def solver_seconds(self, at_most: float = math.inf) -> float:
        """The limit to hand a solver: the time left (at most `at_most`), at least 10 ms
        (a solver told 0 may take that as no limit)."""
        return max(min(self.left(), at_most), 0.01)


_job_start: float | None = None  # time.monotonic() when the command began


def start_job(with_process: bool) -> None:
    """Mark the command's start (synth.cli.main): now, or with_process (run as the
    program) when the process began, so that a time limit counts the interpreter's
    start and the imports too, as a user's clock does."""
    global _job_start, _timed
    _job_start = time.monotonic() - (process_age() if with_process else 0.0)
    _timed = False
    forget_paces()


def forget_paces() -> None:
    """Every Pace back to its prior: what one command measured says nothing of the next
    one in the same process (a test run's commands, called in turn)."""
    for pace in _PACES:
        pace.per_unit, pace.measured = pace.prior, False


_timed = False  # whether the command took a job_deadline


def job_deadline(seconds: float) -> Deadline:
    """`seconds` from the command's start (start_job), else from now."""
    global _timed
    _timed = True
    return Deadline((time.monotonic() if _job_start is None else _job_start) + seconds)


def job_seconds() -> float:
    """Seconds since the command began (start_job; 0 where it was not marked)."""
    return 0.0 if _job_start is None else time.monotonic() - _job_start


def timed_job() -> bool:
    """Whether the command runs under a time limit (it took a job_deadline)."""
    return _timed


def process_age() -> float:
    """Seconds since this process began (Linux /proc; 0 where unknown, or where it is
    over a minute: then this is no fresh command-line process)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return age if 0.0 <= age <= 60.0 else 0.0


class Pace:
    """Seconds per unit of one kind of work (sends built and verified, bytes written),
    as this machine runs it: the slowest pace measured on work of at least `least` units
    (smaller work is mostly overhead, and would make large work look dearer than it
    is); until the first measurement, `prior` (an idle core's pace, about) times how
    much slower than its prior the middle one of the paces measured in this command so
    far ran (machine_slowdown: a busy machine is slower at every kind of work), times
    UNMEASURED."""

    def __init__(self, prior: float, least: int = 1):
        self.prior, self.per_unit, self.least, self.measured = prior, prior, least, False
        _PACES.append(self)

    def seconds(self, units: float) -> float:
        if self.measured:
            return units * self.per_unit
        return units * self.prior * machine_slowdown() * UNMEASURED  # a guess: leave room

    @contextmanager
    def timing(self, units: float):
        """Measure the work done inside the block as `units` units."""
        start = time.monotonic()
        yield
        self.record(units, time.monotonic() - start)

    def record(self, units: float, seconds: float) -> None:
        """`units` units of this work took `seconds`."""
        if units >= self.least:
            pace = seconds / units
            self.per_unit = max(self.per_unit, pace) if self.measured else pace
            self.measured = True


def machine_slowdown() -> float:
    """How much slower than their priors this machine runs work now: the middle one (the
    lower of two) of the measured paces' ratios to their priors, at least 1. Not the
    largest: one kind of work whose prior is off (a small build that is mostly
    verifying, 14 x its prior on dgx2x2) would make every guess that much dearer, and
    nothing else would be tried (no runtime asked, no point timed)."""
    ratios = sorted(p.per_unit / p.prior for p in _PACES if p.measured)
    return max(1.0, ratios[(len(ratios) - 1) // 2]) if ratios else 1.0


_PACES: list[Pace] = []  # every Pace made (module-level, a few dozen): forget_paces
# a pace not measured yet is guessed this much dearer than its scaled prior: one kind of
# work runs up to about three times slower than another on a loaded machine (in-network
# programs against tree pipelines), and a guess too low costs the limit, too high a point
UNMEASURED = 1.5
