"""Which runtime loads a schedule, and why not, asked without writing its file.

    refusal(schedule, "mscclpp")   # None, or the one line render would refuse it with
    loads_of(schedule)             # {"msccl-xml": None or why, "mscclpp": None or why}
    where(loads)                   # "both", "MSCCL XML", "MSCCL++" or "neither"
    phrase(why)                    # that line as one short phrase, for tables

A runtime loads a schedule when its exporter can express it: `lowered` runs what
synth.export.render runs before the file's text, the runtime form
(synth.export.form.runtime_form) and the exporter's program (synth.export.msccl.build,
synth.export.mscclpp.build), and render itself starts from `lowered`, so the answer
here and render's cannot disagree. Loading is judged for the form the frontier's files
are written in: out of place, MSCCL XML in the Simple protocol (the protocol does not
change what the XML can express).

Cost: the programs are the expensive part (a failing MSCCL XML export of a 16-GPU
decomposed schedule tries every channel count, seconds). Answers are kept per schedule
object and per runtime form: the pipelines of one construction at different depths share
their batch program, so a family of points costs one program per runtime.

with_runtimes(result) marks every frontier point with what loads it and adds, per
runtime, the candidates no other point that runtime loads beats (its own Pareto frontier:
a point that only loses to points it cannot load is its best there);
synth.cost_choice.in_cost_model then keeps those that are the fastest at some size.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from dataclasses import replace

from synth.errors import BadInput
from synth.export import answers
from synth.export.form import RUNTIME_PROTOCOLS, runtime_form
from synth.frontier import Result
from synth.pareto_front import pareto_key
from synth.construct.paced import verified_within
from synth.cycles import cycles_paused
from synth.deadline import Deadline, OutOfTime
from synth.search.pareto import Search

RUNTIMES = {"msccl-xml": "MSCCL XML", "mscclpp": "MSCCL++"}
BUDGET_S = 30.0  # CPU seconds per runtime of checks for its own points (frontier points: all)
# an exporter's search is cut (not asked) past ASK_OVERRUN x its paced estimate, at
# least ASK_FLOOR_S: torus:16x16's 255-step point held a 0.6 s synthesis 190 s
ASK_OVERRUN, ASK_FLOOR_S = 2.0, 10.0
# an ask whose estimate does not fit the time left still gets PROBE_S: a refusal by
# arithmetic comes before any program (MSCCL XML at 512 GPUs: 16 s cold, the runtime
# form most of it, against an estimate of 157 s)
PROBE_S = 30.0
# a runtime's program past this many chunk moves (export_size: every rank's, of a
# pipeline's batch) is not made, for any runtime: spelled out it takes gigabytes
# (dgxh100x512's decomposed allgather, 33.5 million a batch, passed 5.5 GB before any
# runtime's rule was checked), as a build's sends do (synth.construct.batches)
MAX_PROGRAM = 8_000_000
_PROGRAMS = 2  # built programs kept for render (they can be large)
_programs: OrderedDict = OrderedDict()  # (fmt, inplace, form key) -> (form, note, program)
_last_form: dict = {}  # the last schedule's runtime form (orbits.last_made)


def lowered(schedule, fmt: str, inplace: bool = False, deadline: Deadline = Deadline()):
    """(the runtime form, the note for render's summary, the exporter's program).
    Raises the exporter's BadInput when the runtime cannot load the schedule; that
    refusal is remembered, so asking again costs nothing. OutOfTime when the deadline
    passes while the exporter tries."""
    return _lowering(schedule, fmt, inplace, keep=True, deadline=deadline)


def _lowering(schedule, fmt: str, inplace: bool, keep: bool,
              deadline: Deadline = Deadline()):
    """lowered; keep=False only asks whether there is a program (the MSCCL++ search
    stops at its first plan, not its best) and keeps none. OutOfTime (nothing
    remembered) when the deadline passes while the exporter tries."""
    from synth.construct.paced import export_size  # read when called: tests replace it

    known = answers.answer(schedule, fmt, inplace) or _too_large(export_size(schedule))
    if known is True and not keep:
        return None
    if isinstance(known, BadInput):
        answers.remember(schedule, fmt, inplace, known)
        raise copy.copy(known)  # the kept one gathers no traceback (answers.remember)
    batch = answers.batch_key(schedule, fmt, inplace)  # pipelines of one program: one answer
    answer = answers.by_form.get(batch) if batch else None
    if isinstance(answer, BadInput) or (answer is True and not keep):
        answers.remember(schedule, fmt, inplace, None if answer is True else answer)
        if answer is True:
            return None
        raise copy.copy(answer)
    try:
        form, note = _form_of(schedule, fmt, deadline)
    except BadInput as e:
        answers.remember(schedule, fmt, inplace, e)
        raise
    key = (fmt, inplace, answers.form_key(form))
    if key in _programs:
        _programs.move_to_end(key)
        answers.remember(schedule, fmt, inplace, None)
        return _programs[key]
    answer = answers.by_form.get(key)
    if isinstance(answer, BadInput):
        answers.remember(schedule, fmt, inplace, answer)
        raise copy.copy(answer)
    if answer is True and not keep:
        answers.remember(schedule, fmt, inplace, None)
        return None
    try:
        form, note, program = _built(form, note, fmt, inplace, keep, deadline)
    except BadInput as e:
        answers.remember(schedule, fmt, inplace, e, key, batch)
        raise
    answers.remember(schedule, fmt, inplace, None, key, batch)
    if not keep:
        return None
    _programs[key] = (form, note, program)
    answers.newest(_programs, key, _PROGRAMS)
    return form, note, program


def _too_large(units: int) -> BadInput | None:
    """The refusal of a schedule whose runtime program would spell out `units` chunk
    moves (export_size) past MAX_PROGRAM, by arithmetic (nothing is unfolded); else
    None."""
    if units <= MAX_PROGRAM:
        return None
    return BadInput(f"not exported: its program spells out {units:,} chunk moves (every "
                    f"rank's), over the {MAX_PROGRAM:,} synth makes at once")


def _form_of(schedule, fmt: str, deadline: Deadline = Deadline()):
    """runtime_form for `fmt`, made once for the last schedule asked: both runtimes lower
    the same form of a schedule without switch operations (MSCCL XML refuses the others
    first), and at 512 GPUs making it (the batch program, verified) took 21 s of each
    runtime's 32 s ask. Making it is not cut once started, so it starts only where the
    deadline affords it at its pace (FORM), else OutOfTime."""
    from synth.construct.paced import FORM, export_size
    from synth.schedule.orbits import last_made, made_for

    if fmt == "msccl-xml" and schedule.in_network:
        return runtime_form(schedule)  # refused: MSCCL XML has no switch operations
    units = 0 if made_for(_last_form, "form", (schedule,)) else export_size(schedule)
    if units and not deadline.affords(FORM.seconds(units)):
        raise OutOfTime("making a runtime form")
    with FORM.timing(units):
        return last_made(_last_form, "form", (schedule,),
                         lambda: runtime_form(schedule, switch_ops=True))


def refusal(schedule, fmt: str, inplace: bool = False,
            deadline: Deadline = Deadline()) -> str | None:
    """None when `fmt`'s runtime loads `schedule`, else the line render refuses it with.
    OutOfTime when the deadline passes first."""
    known = answers.answer(schedule, fmt, inplace)
    if known is not None:
        return str(known) if isinstance(known, BadInput) else None
    try:
        _lowering(schedule, fmt, inplace, False, deadline)
    except BadInput as e:
        return str(e)
    return None


def loads_of(schedule) -> dict[str, str | None]:
    """{runtime format: None if it loads the schedule (out of place), else why not}."""
    return {fmt: refusal(schedule, fmt) for fmt in RUNTIMES}


def loads_within(schedule, deadline: Deadline, formats=tuple(RUNTIMES)
                 ) -> dict[str, str | None] | None:
    """loads_of for `formats`, if the time left affords asking: an answer not yet known costs about
    what building the exporter's program costs, paced per unit of its size
    (synth.construct.paced.EXPORT), except MSCCL XML's for a schedule with switch
    operations, refused before any program; None (not asked) where the time left does
    not afford it, or the deadline passes while the exporter tries, or the exporter
    tries for more than ASK_OVERRUN times that (at least ASK_FLOOR_S). Where the time
    left does not afford the estimate but does PROBE_S, the exporter is given that
    long: a refusal by arithmetic comes before any program. An answer remembered for a
    pipeline's batch program (another depth of one construction) is read whenever making
    that program fits (BATCH), even where an ask would not."""
    from synth.construct.paced import EXPORT, export_size

    units = export_size(schedule)
    # what is remembered first, for every runtime: an ask that does not fit must not
    # keep another runtime's remembered answer from being read
    out = {fmt: refusal(schedule, fmt) for fmt in formats
           if _remembered(schedule, fmt, units, deadline)}
    for fmt in [f for f in formats if f not in out]:
        expected = EXPORT[fmt].seconds(units)
        probe = not deadline.affords(expected)
        if probe and not deadline.affords(PROBE_S):
            return None
        try:
            if probe:  # not timed: a refusal by arithmetic builds no program
                out[fmt] = refusal(schedule, fmt, deadline=deadline.within(PROBE_S))
                continue
            with EXPORT[fmt].timing(units):
                out[fmt] = refusal(schedule, fmt, deadline=deadline.within(
                    max(ASK_OVERRUN * expected, ASK_FLOOR_S)))
        except OutOfTime:
            return None
    return out


def _remembered(schedule, fmt: str, units: int, deadline: Deadline) -> bool:
    """Whether `fmt`'s answer for the schedule is known without an ask: remembered for
    it (or MSCCL XML's refusal of switch operations), or for its pipeline's batch program
    where making that program fits (BATCH: seconds at 512 GPUs, where an ask takes a
    minute; dgxh100x64's depths waited on an ask that no longer fit, not on the answer),
    or costs nothing since it is made already (for the other runtime)."""
    from synth.construct.paced import BATCH

    if answers.answer(schedule, fmt, False) is not None or (fmt == "msccl-xml"
                                                     and schedule.in_network):
        return True
    if _too_large(units):  # refused by arithmetic: its batch is not made to look up
        return False
    if schedule.pipeline is None:  # no batch program: nothing more to look up
        return False
    made = answers.batch_made(schedule)
    if not made and not deadline.affords(BATCH.seconds(units)):
        return False
    with BATCH.timing(0 if made else units):  # a program made already is not timed
        return _known(schedule, fmt)


def _known(schedule, fmt: str, inplace: bool = False) -> bool:
    """Whether the answer for `fmt` is remembered (for the object or its batch program):
    asking costs nothing then."""
    if answers.answer(schedule, fmt, inplace) is not None:
        return True
    batch = answers.batch_key(schedule, fmt, inplace)
    return batch is not None and batch in answers.by_form


def where(loads: dict[str, str | None]) -> str:
    """Which runtimes load, in one word or two."""
    yes = [RUNTIMES[f] for f in RUNTIMES if f in loads and loads[f] is None]
    return "both" if len(yes) == len(RUNTIMES) else (yes[0] if yes else "neither")


PREFIXES = ("cannot export to MSCCL XML: ", "cannot export to MSCCL++: ")


def phrase(why: str, width: int = 120) -> str:
    """A refusal line as one phrase: without the exporter's prefix and its explanation
    in parentheses or after a semicolon, cut to `width` characters."""
    for prefix in PREFIXES:
        if why.startswith(prefix):
            why = why[len(prefix):]
    for stop in (" (", "; "):
        if stop in why:
            why = why[:why.index(stop)]
    return why if len(why) <= width else why[:width - 3] + "..."


def chosen(result: Result, topo, cost_model: str, deadline: Deadline | None = None
           ) -> Result:
    """The frontier as the commands show it: with_runtimes, then
    synth.cost_choice.in_cost_model, each runtime timed in the protocols it runs, both by
    `deadline` (the job's: what is not done by then is left undone and said so). In
    cost model 2 the points are timed first, and the runtimes asked about the fastest
    at some size first: the times are the answer the user reads, and at 512 GPUs asking
    a runtime about one point takes a minute (building its program)."""
    from synth.cost_choice import in_cost_model, timed, winners

    deadline = Deadline.of(deadline)
    if result.interrupted:  # dgxh100x4's asked 10 s before its files
        return _unasked(result, topo, cost_model, None)
    lines = None
    if cost_model == "calibrated" and topo is not None and result.points:
        lines = {}
        try:
            timed(result.points, topo, result.model, deadline, lines)
            # a share of the time left: at 512 GPUs 26 candidates took 10 s
            result = _fastest_candidates(result, topo, deadline.share(CANDIDATES_SHARE),
                                         lines)
        except KeyboardInterrupt:  # the times so far are kept; nothing more is asked
            return _unasked(result, topo, cost_model, lines)
        first = {id(p) for p in winners([p for p in result.points
                                         if id(p.schedule) in lines], lines)}
        result = replace(result, points=sorted(result.points, key=lambda p: id(p) not in first))
    # the asking has the whole deadline: each try is cut at it (loads_within), and the
    # runtimes' own points are timed as the walks meet them
    return in_cost_model(with_runtimes(result, topo, cost_model, deadline=deadline,
                                       lines=lines),
                         topo, cost_model, RUNTIME_PROTOCOLS, deadline, lines, asked=True)


def _unasked(result: Result, topo, cost_model: str, lines: dict | None) -> Result:
    """The frontier after Ctrl-C: no runtime asked, no point timed but those in `lines`."""
    from synth.cost_choice import in_cost_model

    stopped = replace(result, runtimes_stopped="interrupted",
                      searches=dict(result.searches, runtimes=Search(stopped="interrupted")))
    return in_cost_model(stopped, topo, cost_model, RUNTIME_PROTOCOLS, Deadline.after(0), lines)


CANDIDATES_SHARE = 0.25  # of the time left, at most, to time the candidates off the frontier


def _fastest_candidates(result: Result, topo, deadline: Deadline, lines: dict) -> Result:
    """`result` with the candidates off the line-rate frontier that are the fastest of
    all at some size in cost model 2 (timed into `lines` while the deadline affords it,
    verified, their runtimes asked later): the line-rate frontier can hold a point that
    beats them on both of its costs and is slower at every size in cost model 2 (on
    dgx2x4, trees of 4 steps against the decomposition's: 143.4 us at 1 MB against
    71.8). These joined only as a runtime's own points, once every frontier point was
    asked, which a time limit of 30 s did not leave time for."""
    from synth.cost_choice import timed, winners

    have = {id(p.schedule) for p in result.points}
    others = [c for c in result.candidates if id(c.schedule) not in have]
    if not others:
        return result
    timed(others, topo, result.model, deadline, lines)
    pool = [p for p in result.points + others if id(p.schedule) in lines]
    extra = []
    for c in winners(pool, lines):
        if id(c.schedule) in have:
            continue
        try:  # verified if that fits the time left (synth.construct.paced)
            schedule = verified_within(c.schedule, deadline)
        except OutOfTime:
            break
        lines[id(schedule)] = lines[id(c.schedule)]
        have.add(id(schedule))
        extra.append(replace(c, schedule=schedule))
    return replace(result, points=sorted(result.points + extra, key=_order))


# of one runtime, for one point that joins the frontier: asking would not fit the time
# left, or the exporter's search ran past its cut (then the loads: line says which)
NOT_IN_TIME = "not asked: no time for the exporter's search"
# what with_runtimes says of points not asked: the time limit passed, or it did not
OUT_OF_TIME = "stopped at the time limit: the runtimes' own points may be missing"
NOT_ASKED = ("not asked about every point: an exporter's search would not fit the time "
             "left or ran past twice its expected time (`synth export FILE --to FORMAT` "
             "asks about one): the runtimes' own points may be missing")


def with_runtimes(result: Result, topo=None, cost_model: str = "line-rate",
                  budget_s: float = BUDGET_S, deadline: Deadline | None = None,
                  lines: dict | None = None) -> Result:
    """`result` with every point's `loads` set, and per runtime its own points added
    (verified, with their `loads`): in the line-rate model the candidates no other
    candidate it loads beats on both costs (its own Pareto frontier); in cost model 2
    ("calibrated", on `topo`'s prices) each candidate that is the fastest it loads at
    one of timing.SIZES, timed in the protocols it runs. The frontier's points are all
    judged while the deadline lasts (past it, `loads` None: not asked); the other
    candidates only while they could be a runtime's, for at most `budget_s` CPU seconds
    per runtime and within the deadline (then `runtimes_stopped` says so). `lines`: the
    candidates timed so far ({id(schedule): lines}), to which those timed here are
    added."""
    deadline = Deadline.of(deadline)
    points, extra, stopped = list(result.points), [], ""
    try:
        points = [replace(p, loads=loads_within(p.schedule, deadline)) for p in points]
        have = {id(p.schedule) for p in points}
        # the runtimes' own points only once every frontier point is answered: else a
        # candidate's try can run minutes past the time (512 GPUs: past the limit)
        pool = result.candidates + points if all(p.loads is not None for p in points) \
            else points
        if pool is points and result.candidates:
            stopped = OUT_OF_TIME if deadline.passed() else NOT_ASKED
        walks = (_fastest_walks(pool, topo, deadline, lines)
                 if cost_model == "calibrated" and topo
                 else _pareto_walks(pool))
        # each schedule asked once per runtime: the walks meet the same ones at every
        # size (at 512 GPUs, re-asking the points not asked in time took 0.1 s each, 560
        # times), and a candidate only about the runtime whose walk meets it (dgx2x2's
        # trees: MSCCL++ was asked for MSCCL XML's walk, 2.8 s and 170 MB for nothing)
        told = {id(p.schedule): p.loads for p in points}
        for fmt, walk in walks:
            # a budget each: MSCCL XML's refusals at 512 GPUs (15-26 s a candidate) took
            # all of a shared one, and MSCCL++ was never asked (torus:16x32)
            until = time.process_time() + budget_s
            for c in walk:
                asked = told.get(id(c.schedule), {})
                if asked is not None and fmt not in asked:
                    if time.process_time() > until or deadline.passed():
                        stopped = (f"stopped after {budget_s:g} s or at the time limit: "
                                   "the runtimes' own points may be missing")
                        break
                    more = loads_within(c.schedule, deadline, (fmt,))
                    asked = None if more is None else {**asked, **more}
                    told[id(c.schedule)] = asked
                if asked is None:  # its programs would not fit: a smaller one may
                    stopped = OUT_OF_TIME if deadline.passed() else NOT_ASKED
                    continue
                if asked[fmt] is not None:
                    continue
                walk.send(c)  # found: the walk skips what it no longer needs
                if id(c.schedule) not in have:
                    try:  # verified if that and writing it fit (synth.construct.paced)
                        schedule = verified_within(c.schedule, deadline)
                    except OutOfTime:
                        stopped = OUT_OF_TIME
                        break
                    have.add(id(c.schedule))
                    # kept for the other walk too: a runtime not asked in time is not
                    # asked again there (its search would run past its cut again)
                    said = told[id(c.schedule)] = _every_runtime(c.schedule, asked,
                                                                 deadline)
                    if NOT_IN_TIME in said.values():
                        stopped = OUT_OF_TIME if deadline.passed() else NOT_ASKED
                    extra.append(replace(c, schedule=schedule, loads=said))
    except KeyboardInterrupt:  # the points found stay; the command ends as interrupted
        searches = dict(result.searches, runtimes=Search(stopped="interrupted"))
        return replace(result, points=sorted(points + extra, key=_order), searches=searches,
                       runtimes_stopped="interrupted")
    return replace(result, points=sorted(points + extra, key=_order),
                   searches=_baselines_counted(result.searches, points + extra),
                   runtimes_stopped=stopped)


def _every_runtime(schedule, asked: dict, deadline: Deadline) -> dict:
    """`asked` with the runtimes not yet asked about `schedule` asked now (a point joins
    the frontier with what every runtime says of it), or, past the time, said to be not
    asked."""
    missing = [fmt for fmt in RUNTIMES if fmt not in asked]
    more = loads_within(schedule, deadline, missing) if missing else {}
    return {**asked, **(more if more is not None else dict.fromkeys(missing, NOT_IN_TIME))}


def _pareto_walks(pool):
    """Per runtime, the candidates in pareto_filter's order, skipping those a loadable
    one already beats (told by send)."""
    def walk():
        best = None
        for c in sorted(pool, key=pareto_key):
            if best is None or c.ratio < best:
                if (yield c) is not None:  # loadable: it sets the bar
                    best = c.ratio
                    yield None
    return [(fmt, walk()) for fmt in RUNTIMES]


def _fastest_walks(pool, topo, deadline: Deadline, lines: dict | None = None):
    """Per runtime, for each size of timing.SIZES the candidates fastest first (in the
    protocols the runtime runs), until one it loads (told by send); of the candidates,
    those timed already (in `lines`, which gains the others timed here) and those timed
    while the deadline affords it, the smallest first."""
    from synth.cost_choice import timed
    from synth.predict.timing import SIZES, fastest

    if lines is None:
        lines = {}
    if pool:
        timed(pool, topo, pool[0].schedule.model, deadline, lines)
    pool = [c for c in pool if id(c.schedule) in lines]

    def walk(protocols):
        for n in SIZES:
            def at(c):
                line = fastest([x for x in lines[id(c.schedule)] if x.protocol in protocols],
                               n)
                return (line.time_us(n), c.steps)
            for c in sorted(pool, key=at):
                if (yield c) is not None:
                    yield None
                    break
    return [(fmt, walk(RUNTIME_PROTOCOLS[fmt])) for fmt in RUNTIMES]


def _baselines_counted(searches: dict, points: list) -> dict:
    """The baselines' "K of N on the frontier", counted again with the runtimes' points."""
    base = searches.get("baselines")
    if base is None or not base.stopped.endswith(" on the frontier"):
        return searches
    on = sum("baseline" in p.schedule.info for p in points)
    return dict(searches, baselines=replace(
        base, stopped=f"{on} of {len(base.points)} on the frontier"))


def _order(p):
    return (p.steps, p.ratio)


def forget() -> None:
    """Drop every remembered answer and program (a test asking render afresh)."""
    answers.forget()
    _programs.clear()
    _last_form.clear()


def _built(form, note, fmt, inplace, fewest=True, deadline: Deadline = Deadline()):
    """(the form the exporter lowers, render's note, the exporter's program; MSCCL XML's
    is always its first: the fewest channels). For MSCCL++ the form is first relayed
    where the executor gives a GPU no InfiniBand device (synth.export.relays)."""
    with cycles_paused():
        if fmt == "msccl-xml":
            from synth.export.msccl import build
            return form, note, build(form, inplace, deadline)
        from synth.export.mscclpp import build
        from synth.export.relays import ib_relayed, large_node_note, ranks_per_node

        form, relayed = ib_relayed(form)  # port channels the executor sets up
        note += relayed + large_node_note(ranks_per_node(form.model))
        return form, note, build(form, inplace, fewest, deadline)
