"""Solve one instance: encode, run a solver, decode, and verify before returning.

Reducescatter and reduce are solved through their duals (allgather and broadcast on the
reversed links, then run backwards: synth.schedule.transform). Decided answers are
remembered (synth.search.cache). Every schedule that leaves this module has passed the
independent verifier, a remembered one included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from synth.errors import SynthError
from synth.schedule.collectives import DUAL, Collective, make_collective
from synth.schedule.file import (model_to_dict, schedule_from_dict, schedule_to_dict,
                                 verified)
from synth.schedule.ir import Schedule
from synth.schedule.transform import reverse_model, reverse_schedule
from synth.schedule.verify import verify_schedule
from synth.search import cache
from synth.search.constraints import SAT, UNKNOWN, UNSAT, solve
from synth.search.encoding import (Instance, decode, encode, estimated_variables,
                                   variables_for)
from synth.search.one_step import one_step
from synth.topology.linkmodel import LinkModel

# CP-SAT's portfolio: more workers than cores still pays, since the workers run
# different strategies and one of them often proves infeasibility quickly (bench/).
DEFAULT_WORKERS = 4


# Past this many variables an instance would take gigabytes and far more than minutes;
# it is refused before anything is built. At the limit encoding takes seconds and the
# solver about a gigabyte; dgx1 instances stay under 60,000.
MAX_VARIABLES = 400_000


class TooLarge(Exception):
    """The instance is beyond what the exact encoder can hold; nothing was built."""


# the method of a schedule the exact search found for the collective itself (not its
# dual); answers remembered before 2026-12-02 call it "direct", the name of a baseline
EXACT, OLD_EXACT = "exact", "direct"


@dataclass(frozen=True)
class Outcome:
    status: str  # sat, unsat, unknown
    schedule: Schedule | None
    seconds: float
    method: str  # "exact" (the collective itself) or "dual of allgather" ...
    variables: int = 0
    optimal: bool = False  # minimising: the schedule's rounds are proven least
    cached: bool = False  # answered from synth.search.cache, not solved now


def solve_instance(model: LinkModel, collective: Collective, steps: int, rounds: int,
                   backend: str = "cpsat", time_limit: float = 60.0,
                   workers: int = DEFAULT_WORKERS, minimize: bool = False,
                   rounds_floor: int = 0) -> Outcome:
    """Is there a schedule with `steps` steps and at most `rounds` rounds? Find one;
    with `minimize`, one with the fewest rounds (Outcome.optimal says if proven)."""
    options = dict(minimize=minimize, rounds_floor=rounds_floor)
    key = _key(model, collective, steps, rounds, backend, minimize, rounds_floor)
    known = _from_cache(key, model, collective, steps, rounds, rounds_floor)
    if known is not None:
        return known
    if collective.name in DUAL:
        dual = make_collective(DUAL[collective.name], collective.ranks, collective.chunks,
                               collective.root)
        out = _solve(Instance(reverse_model(model, switches=True), dual, steps, rounds,
                              **options), backend,
                     time_limit, workers)
        method = f"dual of {dual.name}"
        schedule = out.schedule and reverse_schedule(out.schedule, model)
    else:
        out = _solve(Instance(model, collective, steps, rounds, **options), backend,
                     time_limit, workers)
        method, schedule = EXACT, out.schedule
    if schedule is not None:
        info = {"solver": backend, "method": method, "solve_seconds": round(out.seconds, 3)}
        schedule = verified(Schedule(schedule.collective, schedule.model, schedule.steps, info))
    outcome = Outcome(out.status, schedule, out.seconds, method, out.variables, out.optimal)
    # decided answers only; a minimum found but not proven depends on the time given
    if out.status == UNSAT or (out.status == SAT and (out.optimal or not minimize)):
        cache.store(key, {"status": out.status, "method": method, "optimal": out.optimal,
                          "variables": out.variables,
                          "schedule": schedule and schedule_to_dict(schedule)})
    return outcome


def too_large(model: LinkModel, name: str, steps: int, chunks: int) -> str:
    """Why an instance of `name` with these steps and chunks would be refused, or "".
    Checked by arithmetic alone, so a frontier search over a huge model stops at once."""
    size = variables_for(DUAL.get(name, name), model.ranks, chunks, len(model.links), steps)
    if size > MAX_VARIABLES:
        return f"about {size:,} variables (limit {MAX_VARIABLES:,})"
    return ""


def remembered(model: LinkModel, collective: Collective, steps: int, rounds: int,
               backend: str = "cpsat", minimize: bool = False, rounds_floor: int = 0
               ) -> Outcome | None:
    """solve_instance's answer where the cache holds it (checked as solve_instance
    checks it), else None: nothing is solved."""
    key = _key(model, collective, steps, rounds, backend, minimize, rounds_floor)
    return _from_cache(key, model, collective, steps, rounds, rounds_floor)


def _key(model, collective, steps, rounds, backend, minimize, rounds_floor) -> str:
    return cache.instance_key(
        model_to_dict(model),
        {"name": collective.name, "ranks": collective.ranks, "chunks": collective.chunks,
         "root": collective.root},
        {"steps": steps, "rounds": rounds, "minimize": minimize,
         "rounds_floor": rounds_floor}, backend)


def _from_cache(key: str, model: LinkModel, collective: Collective, steps: int,
                rounds: int, rounds_floor: int) -> Outcome | None:
    """A remembered answer (synth.search.cache checked its integrity). A SAT one only
    once its steps, put on the model and collective asked for (not those the entry
    names), fit the instance and pass the verifier again."""
    start = time.perf_counter()
    entry = cache.load(key)
    if entry is None:
        return None
    schedule = None
    if entry["status"] == SAT:
        try:
            stored = schedule_from_dict(entry["schedule"])
            info = {**stored.info, "cached": True}
            if info.get("method") == OLD_EXACT:
                info["method"] = EXACT
            schedule = Schedule(collective, model, stored.steps, info)
            if not (schedule.num_steps == steps and rounds_floor <= schedule.rounds <= rounds
                    and stored.collective.chunks == collective.chunks):
                return None
            verify_schedule(schedule_to_dict(schedule))
        except (SynthError, TypeError, KeyError, AttributeError, ValueError):
            return None  # not this instance's answer: solve again, and replace it
    method = str(entry.get("method", ""))
    return Outcome(entry["status"], schedule, time.perf_counter() - start,
                   EXACT if method == OLD_EXACT else method, int(entry.get("variables", 0)),
                   bool(entry.get("optimal", False)), cached=True)


def _solve(instance: Instance, backend: str, time_limit: float, workers: int) -> Outcome:
    size = estimated_variables(instance)
    if size > MAX_VARIABLES:
        raise TooLarge(f"about {size:,} variables (limit {MAX_VARIABLES:,})")
    started = time.monotonic()
    if instance.steps == 1 and (forced := one_step(instance.model, instance.collective,
                                                   instance.rounds,
                                                   instance.rounds_floor)):
        status, schedule = forced  # proven either way: the one schedule there is
        return Outcome(status, schedule, time.monotonic() - started, "", optimal=True)
    try:
        enc = encode(instance, started + time_limit)
    except TimeoutError:  # encoding alone took the time: undecided, like a solver time-out
        return Outcome(UNKNOWN, None, time.monotonic() - started, "")
    left = time_limit - (time.monotonic() - started)
    if left <= 0:  # encoding took the time: undecided, the solver is not started
        return Outcome(UNKNOWN, None, time.monotonic() - started, "")
    answer = solve(enc.constraints, backend, left, workers)
    schedule = decode(enc, answer.bools) if answer.status == SAT else None
    return Outcome(answer.status, schedule, answer.seconds, "", enc.constraints.bools,
                   answer.optimal)
