"""The user's question at one message size: what to load, how fast, against what.

`answer_at(result, n)` takes a frontier and a message size n (bytes, nccl-tests' n) and
returns, in the model:
- the fastest frontier point at n, whether or not a runtime can load it;
- per runtime (MSCCL XML, MSCCL++), the fastest point whose export the runtime loads
  and that cuts n into whole chunks (synth.export.units), with the file's text, tried
  in order of time at n for at most BUDGET_S seconds a runtime (an export that fails
  its checks can take tens of seconds to say so on 16 GPUs): the answer says how many
  it tried;
- the reference at n: in cost model 2 (result.cost_model "calibrated"), NCCL's own
  choice at n and its predicted time (synth.predict.nccl); in the line-rate model, the
  faster of the ring and double binary tree baselines (synth.plan.planner.reference_of),
  a stand-in that the answer names as such.

Times are those of the result's cost model. Cost: one timing per point, then exports
for at most 2 x BUDGET_S seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from synth.construct.paced import WRITE, export_size
from synth.deadline import Deadline, OutOfTime
from synth.errors import BadInput, NoAnswer
from synth.export import EXTENSIONS, RUNTIME_PROTOCOLS, render
from synth.export.units import unit_of
from synth.frontier import Result
from synth.output import method_of, point_stem
from synth.plan.planner import reference_of
from synth.schedule.cost import schedule_cost
from synth.search.pareto import Point
from synth.topology.figures import library_of

BUDGET_S = 30.0  # seconds of exports a runtime, past the first point tried
RUNTIME_NAMES = {"msccl-xml": "MSCCL XML", "mscclpp": "MSCCL++"}
LINE_RATE_NOTE = ("NCCL-style ring or tree in the line-rate model, a stand-in for NCCL's "
                  "own choice (--model calibrated predicts that)")


def line_rate_note(collective: str) -> str:
    """What the line-rate model's reference is, per collective (planner.REFERENCE)."""
    if collective in ("gather", "scatter"):
        return (f"NCCL has no {collective} of its own: nccl-tests runs it as grouped "
                "sends, which this baseline stands in for, in the line-rate model")
    if collective == "alltoall":
        return ("direct sends in the line-rate model, a stand-in for NCCL's grouped "
                "sends (--model calibrated predicts them)")
    return LINE_RATE_NOTE


UNCUT = "its chunking does not cut {:,} bytes whole"  # a file that loads, not this size


@dataclass
class Loadable:
    point: Point | None  # None: no point tried loads and cuts the size
    us: float = 0.0
    text: str = ""  # the runtime file
    why_not: list[str] = field(default_factory=list)  # of the points tried before it
    tried: list[str] = field(default_factory=list)  # their stems, in the same order
    uncut: list[int] = field(default_factory=list)  # id(point) of those loaded, not cut


@dataclass
class Answer:
    nbytes: int
    fastest: Point
    fastest_us: float
    runtimes: dict[str, Loadable]
    reference: str  # the reference's name at n
    reference_us: float
    reference_is: str = LINE_RATE_NOTE
    nccl_has_it: bool = True  # NCCL has the collective (not gather, scatter)


def answer_at(result: Result, nbytes: int, deadline: Deadline = Deadline()) -> Answer:
    """The answer at `nbytes` (module docstring); BadInput when there is no point. The
    exports stop at `deadline` too (a runtime then has no file if none was tried)."""
    if not result.points:
        raise BadInput("no frontier point to answer with")
    time_of = timer(result, nbytes)
    timed = sorted(result.points, key=lambda p: (time_of(p.schedule)[0], p.steps))
    runtimes = {}
    for i, fmt in enumerate(RUNTIME_NAMES):  # each its share of the time left: MSCCL
        # XML's exports took it all on dgxh100x4, and MSCCL++ was asked about nothing
        share = deadline.within(deadline.left() / (len(RUNTIME_NAMES) - i))
        runtimes[fmt] = _loadable(sorted(timed, key=lambda p: time_of(
            p.schedule, RUNTIME_PROTOCOLS[fmt])[0]), fmt, nbytes, time_of, share,
            library_of(result.topology))
    name, us, note = reference_at(result, nbytes, time_of)
    from synth.predict.nccl_tables import COLLECTIVES

    return Answer(nbytes, timed[0], time_of(timed[0].schedule)[0], runtimes, name, us, note,
                  result.collective in COLLECTIVES)


def timer(result: Result, nbytes: int):
    """(schedule, protocols) -> (its time at nbytes, the protocol of that time) in the
    result's cost model; the line-rate model has no protocols ("Simple")."""
    if result.cost_model == "calibrated":
        from synth.predict.timing import fastest, prices, schedule_lines

        p = prices(result.topology)
        known: dict[int, list] = dict(result.lines or {})  # timed once for all uses

        def calibrated(s, protocols=RUNTIME_PROTOCOLS["msccl-xml"]):
            if id(s) not in known:
                known[id(s)] = schedule_lines(s, p)
            line = fastest([x for x in known[id(s)] if x.protocol in protocols], nbytes)
            return line.time_us(nbytes), line.protocol
        return calibrated
    return lambda s, protocols=None: (schedule_cost(s).time_us(nbytes), "Simple")


def reference_at(result: Result, nbytes: int, time_of=None) -> tuple[str, float, str]:
    """(name, us, what it is) of what synth is compared with at nbytes; `time_of`:
    the result's timer at nbytes, where the caller has one."""
    if result.cost_model == "calibrated":
        from synth.predict.machine import machine_of
        from synth.predict.nccl import COLLECTIVES, NCCL_VERSION, choose

        if result.collective in COLLECTIVES:
            m = machine_of(result.topology)
            c = choose(m, result.collective, nbytes)
            rccl = (", standing in for RCCL's (docs/cost-model.md, \"AMD GPUs\")"
                    if m.figures.library == "rccl" else "")
            return (f"NCCL {c.name}", c.predicted_us,
                    f"NCCL {NCCL_VERSION}'s own choice at this size{rccl}, in cost model 2 "
                    f"({c.reason})")
    refs = reference_of(result.collective, result.model, result.root)
    if not refs:
        return "none applies", float("nan"), (
            f"NCCL has no {result.collective} of its own, and no baseline applies here to "
            f"stand in for its grouped sends" if result.cost_model == "calibrated"
            else line_rate_note(result.collective))
    if result.cost_model == "calibrated":  # gather, scatter: no NCCL collective
        time_of = time_of or timer(result, nbytes)  # as the points are, not line-rate
        best = min(refs, key=lambda c: time_of(c.schedule)[0])
        return (best.label, time_of(best.schedule)[0],
                f"NCCL has no {result.collective} of its own: nccl-tests runs it as "
                f"grouped sends, which this baseline stands in for, in cost model 2")
    best = min(refs, key=lambda c: c.time_us(nbytes))
    return best.label, best.time_us(nbytes), line_rate_note(result.collective)


def _loadable(timed: list[Point], fmt: str, nbytes: int, time_of,
              deadline: Deadline = Deadline(), library: str = "nccl") -> Loadable:
    found, until = Loadable(None), deadline.within(BUDGET_S)
    for p in timed:
        if (found.why_not and until.passed()) or deadline.passed():
            break
        us, protocol = time_of(p.schedule, RUNTIME_PROTOCOLS[fmt])
        # its text and simulation are not cut once started: started only where they
        # fit (gb200nvl72's direct baseline at 10 s took the job to 17 s)
        units = export_size(p.schedule)
        if not deadline.affords(WRITE[fmt].seconds(units)):
            break
        try:
            with WRITE[fmt].timing(units):
                text, _ = render(p.schedule, fmt, protocol=protocol, deadline=deadline)
        except OutOfTime:
            break
        except BadInput as e:  # the runtime cannot express it
            found.why_not.append(str(e))
            found.tried.append(point_stem(p))
            continue
        if not unit_of(fmt, text, library).cuts(nbytes):
            found.why_not.append(UNCUT.format(nbytes))
            found.tried.append(point_stem(p))
            found.uncut.append(id(p))
            continue
        found.point, found.text, found.us = p, text, us
        return found
    return found


VARIANT_S = 60.0  # at most, of the time left, to synthesize on power-of-two lanes
VARIANT_WORDS = (" (synthesized on every link's lanes rounded down to a power of two, "
                 "so that its chunks cut this size)")


def lane_variants(result: Result, deadline: Deadline) -> list[Point]:
    """The points of the result's collective synthesized again (constructions only) with
    every link's lanes rounded down to a power of two, as `synth plan` does
    (synth.plan.planner.runtime_variants): on 18 NVLink lanes synth cuts by 9 and 18
    (NVLS's 9 pieces a shard, 18 packed trees), which no runtime file runs for a
    power-of-two message; on 16 lanes it cuts by powers of two, a little slower in the
    model and valid on the real links. [] where no lane count changes or no time is
    left. Their schedules say so (info `lanes`, the method's words, `-p2` file names)."""
    from synth.frontier import synthesize
    from synth.topology.lanes import power_of_two_lanes

    fewer = power_of_two_lanes(result.topology)
    seconds = min(VARIANT_S, deadline.left() / 2)
    if fewer is None or seconds < 1:
        return []
    try:
        # the steps and chunks asked for hold here too (--max-steps, --steps)
        found = synthesize(fewer, result.collective, result.root,
                           replace(result.limits, time_limit=seconds), None, "constructed",
                           None, deadline.within(seconds))
    except NoAnswer:
        return []
    for p in found.points:
        info = p.schedule.info
        info["lanes"] = "power-of-two"
        info["method"] = f"{info.get('method') or 'exact'} (power-of-two lanes)"
    return found.points


SHARDED = ("allreduce", "allgather", "reducescatter", "alltoall")  # chunks: k x ranks


def with_variants(answer: Answer, result: Result, deadline: Deadline) -> Answer:
    """`answer` with, for each runtime whose faster points it loads do not cut the
    size, the fastest lane variant (lane_variants) it loads that cuts the size, where
    that beats its file. Not tried where no variant can cut the size: a collective
    sharded over ranks whose odd factor does not divide the size's 4-byte elements
    (gb200nvl72's 72 = 8 x 9 at any power of two)."""
    short = [fmt for fmt, f in answer.runtimes.items() if f.uncut]
    ranks = result.model.ranks if result.model is not None else 1
    odd = ranks // (ranks & -ranks)
    if not short or (result.collective in SHARDED and (answer.nbytes // 4) % odd):
        return answer
    points = lane_variants(result, deadline)
    if not points:
        return answer
    again = answer_at(replace(result, points=points, lines=None), answer.nbytes, deadline)
    if again.fastest_us < answer.fastest_us:  # the fastest known, whichever lanes
        answer.fastest, answer.fastest_us = again.fastest, again.fastest_us
    for fmt in short:
        found, had = again.runtimes[fmt], answer.runtimes[fmt]
        if found.point is not None and (had.point is None or found.us < had.us):
            found.why_not, found.uncut = had.why_not + found.why_not, had.uncut + found.uncut
            found.tried = had.tried + found.tried
            answer.runtimes[fmt] = found
    return answer


def write_answer(answer: Answer, directory: Path, kept: list | None = None) -> dict:
    """Write each runtime's file of an Answer beside the frontier's files
    (STEM.xml, STEM.mscclpp.json, as write_points names them), and a lane variant's
    schedule file (STEM-p2.json: not on the frontier, so not written with it), and
    return the answer as the --json summary's `answer`. A user's file at one of those
    names is moved aside first, and (its path, where it went) added to `kept`
    (synth.output_folder.write_guarded)."""
    from synth.output_folder import write_guarded
    from synth.schedule.file import schedule_json, schedule_to_dict

    runtimes, files = {}, {}
    for fmt, found in answer.runtimes.items():
        entry = {"runtime": RUNTIME_NAMES[fmt], "file": None, "us": None,
                 "not_loadable": found.why_not, "not_loadable_points": found.tried}
        if found.point is not None:
            if found.point.schedule.info.get("lanes"):  # synth verify reads it
                files[f"{point_stem(found.point)}.json"] = schedule_json(
                    schedule_to_dict(found.point.schedule))
            path = directory / f"{point_stem(found.point)}{EXTENSIONS[fmt]}"
            files[path.name] = found.text
            entry.update(file=str(path),
                         us=round(found.us, 3), point=point_stem(found.point),
                         speedup=round(answer.reference_us / found.us, 4)
                         if answer.reference_us == answer.reference_us else None)
        runtimes[fmt] = entry
    if files:
        kept_aside = write_guarded(directory, files)[1]
        if kept is not None:
            kept += kept_aside
    loads = [fmt for fmt, f in answer.runtimes.items() if f.point is answer.fastest]
    uncut = [fmt for fmt, f in answer.runtimes.items() if id(answer.fastest) in f.uncut]
    return {"bytes": answer.nbytes, "fastest": point_stem(answer.fastest),
            "fastest_method": method_of(answer.fastest),
            "fastest_us": round(answer.fastest_us, 3), "fastest_loads_in": loads,
            "fastest_uncut_in": uncut,
            "runtimes": runtimes, "reference": answer.reference,
            "reference_us": _us(answer.reference_us), "reference_is": answer.reference_is,
            "nccl_has_it": answer.nccl_has_it,
            "choice": _choice(runtimes, answer.reference_us)}


def _choice(runtimes: dict, reference_us: float) -> dict:
    """The file to load at the size: the fastest one a runtime loads, if it beats the
    reference at the times shown (each rounded to 0.001 us, as each runtime's line
    judges: a file 0.0005 us ahead is a tie, not one to load); else the reference
    (NCCL's own), runtime and file None."""
    files = [(r["us"], fmt) for fmt, r in runtimes.items() if r["file"]]
    if files and (reference_us != reference_us or min(files)[0] < _us(reference_us)):
        fmt = min(files)[1]
        return {"runtime": fmt, "file": runtimes[fmt]["file"], "us": runtimes[fmt]["us"]}
    return {"runtime": None, "file": None, "us": _us(reference_us)}


def _us(us: float) -> float | None:
    """A time for JSON: NaN (no reference applies) is null, which every reader takes."""
    return None if us != us else round(us, 3)


def format_answer(a: dict) -> str:
    """The --size answer as lines under the table."""
    lines = [f"at {a['bytes']:,} bytes, in the model: the fastest point is "
             f"{a['fastest']} ({a['fastest_method']}), {a['fastest_us']:.1f} us; "
             f"{_fastest_runs_in(a)}"]
    for r in a["runtimes"].values():
        if r["file"]:
            # rounded down: a speed-up is never shown larger than it is
            ratio = (f", {math.floor(r['speedup'] * 100) / 100:.2f} x the reference"
                     if r["speedup"] else "")
            # a file slower than NCCL's own is not one to load, even for this runtime
            # as the last line judges (_choice); with no reference, every file is a load
            slower = a["reference_us"] is not None and r["us"] >= a["reference_us"]
            verb, tail = (("fastest file", f": not faster, so {_otherwise(a, 'should run')}"
                           " this size") if slower else ("load", ""))
            lines.append(f"  {r['runtime']:<9} {verb} {r['file']}: {r['us']:.1f} us"
                         f"{ratio}{tail}" + (VARIANT_WORDS if r["point"].endswith("-p2")
                                             else ""))
        else:
            lines.append(f"  {r['runtime']:<9} {_no_file(r['not_loadable'], a['bytes'])}, "
                         f"so {_otherwise(a)} this size")
    lines.append(f"  reference: none applies ({a['reference_is']})" if a["reference_us"] is None
                 else f"  reference {a['reference']}: {a['reference_us']:.1f} us "
                 f"({a['reference_is']})")
    return "\n".join(lines + [choice_line(a)])


def _otherwise(a: dict, verb: str = "") -> str:
    """What runs a size no file of a runtime runs, and `verb` (default: runs): NCCL's
    own algorithm, or for gather and scatter, which NCCL has not, the grouped sends
    nccl-tests runs them as."""
    if a.get("nccl_has_it", True):
        return f"NCCL's own algorithm {verb or 'runs'}"
    return f"grouped sends (NCCL has no such collective) {verb or 'run'}"


def choice_line(a: dict) -> str:
    """The answer's last line: what to load at the size, its predicted time, and the
    reference's (NCCL's own choice in cost model 2) with its algorithm."""
    c = a["choice"]
    if a["reference_us"] is None:  # gather or scatter where no baseline applies
        return (f"for {a['bytes']:,} bytes load {c['file']} ({RUNTIME_NAMES[c['runtime']]}): "
                f"{c['us']:.1f} us predicted (no reference applies here)" if c["file"] else
                f"for {a['bytes']:,} bytes load nothing: no file a runtime loads runs this "
                f"size, and no reference applies here")
    ref = f"{a['reference']} at {a['reference_us']:.1f} us"
    unasked = ", ".join(a["runtimes"][f]["runtime"] for f in _unasked(a))
    if c["file"] is None and unasked:
        return (f"for {a['bytes']:,} bytes load nothing found in time: {unasked} was asked "
                f"about no point (the time limit came first), so {ref} runs it here")
    if c["file"] is None and not any(r["file"] for r in a["runtimes"].values()):
        return (f"for {a['bytes']:,} bytes load nothing: no file a runtime loads runs "
                f"this size, so {ref} runs it")
    if c["file"] is None:
        return (f"for {a['bytes']:,} bytes load nothing: {ref} is at least as fast as "
                "every file a runtime loads here")
    ratio = f", {math.floor(a['reference_us'] / c['us'] * 100) / 100:.2f} x"
    return (f"for {a['bytes']:,} bytes load {c['file']} ({RUNTIME_NAMES[c['runtime']]}): "
            f"{c['us']:.1f} us predicted, against {ref}{ratio}")


def _fastest_runs_in(a: dict) -> str:
    """Whether the runtimes run the fastest point at the size: it loads (and cuts the
    size), it loads but its chunking does not cut the size, or neither runs it."""
    def named(formats):
        return ", ".join(a["runtimes"][f]["runtime"] for f in formats)
    loads, uncut = a["fastest_loads_in"], a.get("fastest_uncut_in", [])
    whole = f"its chunking does not cut {a['bytes']:,} bytes whole"
    if loads and uncut:
        return f"it loads in {named(loads)}; in {named(uncut)} {whole}"
    if uncut:
        return f"it loads in {named(uncut)}, but {whole}"
    if loads:
        return f"it loads in {named(loads)}" + _faster_elsewhere(a)
    unasked = _unasked(a)
    return (f"{named(unasked)} not asked about it in time" if unasked
            else "neither runtime runs it at this size")


def _faster_elsewhere(a: dict) -> str:
    """What a runtime that was never asked about the fastest point runs instead: a point
    faster on that runtime's own protocols (mi250's allgather at 1.5 MB read as though
    MSCCL++ did not load the fastest point, beside a table that said both do)."""
    if a["fastest"].endswith("-p2"):  # a lane variant: the others never compared with it
        return ""
    others = [r for r in a["runtimes"].values() if r["file"] and r["point"] != a["fastest"]
              and a["fastest"] not in r.get("not_loadable_points", [])]
    return "".join(f"; {r['runtime']} runs {r['point']}, faster on its own protocols"
                   for r in others)


def _unasked(a: dict) -> list[str]:
    """The runtimes the time limit left no point to try (no file, nothing tried)."""
    return [f for f, r in a["runtimes"].items() if not r["file"] and not r["not_loadable"]]


def _no_file(why_not: list[str], nbytes: int) -> str:
    """Why a runtime has no file at the size: what the points tried said."""
    if not why_not:
        return "no point tried (the time limit came first)"
    uncut = sum(why == UNCUT.format(nbytes) for why in why_not)
    # each reason once, with how many points gave it (gb200nvl72: 7 for switch
    # operations, 1 for its threadblocks, read before as 8 for the first reason)
    other = Counter(why for why in why_not if why != UNCUT.format(nbytes))
    one = uncut == 1
    parts = ([f"{uncut} load{'s' * one} but {'does' if one else 'do'} not cut {nbytes:,} "
              f"bytes whole"] if uncut else []) + \
        [f"{n} not loaded ({_cut_words(why)})" for why, n in other.items()]
    return f"none of the {len(why_not)} fastest points tried runs it: {'; '.join(parts)}"


def _cut_words(text: str, width: int = 110) -> str:
    """`text` on one line, at most `width` characters: cut at a word, and before a
    parenthesis it would leave open."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[:width - 3].rsplit(" ", 1)[0]
    opened = []  # where each parenthesis still open opened
    for i, ch in enumerate(cut):
        if ch == "(":
            opened.append(i)
        elif ch == ")" and opened:
            opened.pop()
    if opened:
        cut = cut[:opened[0]].rstrip() or text[:width - 3]
    return cut + "..."