"""Writing a frontier to disk and describing it: the table and the --json summary."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from synth.construct.paced import WRITE, export_size, size
from synth.deadline import Deadline
from synth.errors import BadInput
from synth.files import write_atomic
from synth.frontier import Result
from synth.topology.several_routes import routes_lines, routes_summary
from synth.output_folder import (MARKER, Manifest, keep_aside, manifest_of, record, users_file,
                                 written_by_synth)
from synth.pareto_front import optimality, ratio_to_bound
from synth.schedule.cost import format_size, per_chunk, schedule_cost
from synth.schedule.file import schedule_text
from synth.search.pareto import Point
from synth.topology.physical import Topology

FORMATS = ("json", "msccl-xml", "mscclpp")  # files: synth.export.EXTENSIONS


def parse_formats(text: str) -> list[str]:
    """--format's comma-separated list; BadInput for an unknown or empty one (an empty
    --format is a script's unset variable more often than a wish for the default)."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    for f in formats:
        if f not in FORMATS:
            raise BadInput(f"unknown format '{f}' (expected {', '.join(FORMATS)})")
    if not formats:
        raise BadInput(f"--format: no format given (expected {', '.join(FORMATS)})")
    return formats


def rooted(collective: str, root: int | None) -> str:
    """The collective as lines name it: with its root where it has one ("gather (root
    5)"), as the root changes the answer."""
    return collective if root is None else f"{collective} (root {root})"


def counted(n: int, word: str) -> str:
    """`n word`, the word plural past one: "1 step", "3 steps"."""
    return f"{n} {word}{'s' * (n != 1)}"


def point_stem(point: Point) -> str:
    """A point's file name without extension: COLLECTIVE[-rootR]-sS-rR-cC, the root of a
    rooted collective named (runs of two roots share a folder); `-p2` for a point
    synthesized on the links' lanes rounded down to a power of two
    (synth.answer.lane_variants), which may share S, R and C with a frontier point."""
    variant = "-p2" if point.schedule.info.get("lanes") == "power-of-two" else ""
    return (f"{collective_stem(point.schedule.collective)}-s{point.steps}-r{point.rounds}"
            f"-c{point.chunks}{variant}")


def collective_stem(coll) -> str:
    """COLLECTIVE, or COLLECTIVE-rootR for a rooted one."""
    return coll.name + (f"-root{coll.root}" if coll.root is not None else "")


def write_points(points: list[Point], directory: Path, formats: list[str],
                 replaces: tuple[int, int] | None = None, started_ns: int | None = None,
                 deadline: Deadline = Deadline(), grace: float = 0.0,
                 already: dict[int, Path] | None = None,
                 missed: list[tuple[str, str, str | None]] | None = None,
                 owner: str | None = None, kept: list | None = None) -> list[Path | None]:
    """Write every point in each format (json: STEM.json, msccl-xml: STEM.xml, mscclpp:
    STEM.mscclpp.json). Returns one path per point, in order: its JSON file, else its
    first format's; None where none was written. A point an exporter cannot express
    raises BadInput after everything else is written, or, given a `missed` list, is
    added to it as (format, STEM, why) and the rest goes on (why None: a file the time
    left did not afford); a file that cannot be written raises OutputError. The smallest points go first, each file only if the time left
    affords it at the pace measured so far (WRITE): a file is written whole or not at
    all, and none after the deadline, except the smallest point's first file, which
    may end up to `grace` seconds past it (a job that found points keeps one where
    that is cheap: the searches may overrun a little, as a solver stops).

    replaces: the (least, most) steps the search covered. Files of earlier runs in that
    range, in the formats written now, that are not on this frontier are removed (their
    names follow point_stem, and synth wrote them: synth.output_folder's manifest), so
    the folder holds the frontier; files outside it, every file after a run of one
    instance (replaces=None), and every file when the deadline left a point unwritten,
    stay. started_ns: when this run started (time.time_ns());
    a file written since then is another run's, running at the same time, and stays.
    already: {id(schedule): its JSON file} written earlier in this run (synth.anytime),
    not written again. Files are written in the folder synth chose: a symbolic link
    there is replaced, not followed (nothing is written outside --out). owner: the
    folder's marker text (synth.output_folder.owner_text; None: the model's name). A
    file of the user's at a name this run writes (one synth did not write there, or that
    changed since) is moved aside first, and (its name, where it went) added to `kept`
    (synth.output_folder.keep_aside)."""
    from synth.export import EXTENSIONS, render

    already = already or {}
    if points and not deadline.affords(-grace):  # past the deadline and its grace
        return [already.get(id(p.schedule)) for p in points]
    if points:
        write_atomic(directory.parent / MARKER,
                     owner or points[0].schedule.model.name + "\n", follow_links=False)
    formats = list(dict.fromkeys(formats))
    ours = manifest_of(directory)
    written, primary, failed, late = [], [None] * len(points), None, False
    for i in sorted(range(len(points)), key=lambda i: size(points[i].schedule)):
        p, paths = points[i], {}
        for fmt in formats:
            if fmt == "json" and id(p.schedule) in already:
                paths[fmt] = already[id(p.schedule)]
                continue
            path = directory / f"{point_stem(p)}{EXTENSIONS[fmt]}"
            units = (size if fmt == "json" else export_size)(p.schedule)
            first = not written and not paths
            if not deadline.affords(WRITE[fmt].seconds(units) - (grace if first else 0)):
                late = True
                if missed is not None:
                    missed.append((fmt, point_stem(p), None))
                continue
            with WRITE[fmt].timing(units):
                try:
                    text = (schedule_text(p.schedule) if fmt == "json"
                            else render(p.schedule, fmt)[0])
                except BadInput as e:
                    if missed is None:
                        failed = failed or f"{point_stem(p)}: {e}"
                    else:
                        missed.append((fmt, point_stem(p), str(e)))
                    continue
                # one the manifest does not vouch for: written over only where it holds
                # these very bytes
                aside = keep_aside(path) if users_file(directory, path, ours, text) else None
                try:
                    paths[fmt] = write_atomic(path, text, follow_links=False)
                except BaseException:  # not written: the user's file back at its name
                    if aside is not None:
                        os.replace(aside, path)
                    raise
                if aside is not None and kept is not None:
                    kept.append((path, aside))
        written += paths.values()
        if paths:
            primary[i] = paths.get("json", next(iter(paths.values())))
    if written:
        record(directory, written)
    if replaces is not None and points and not late:
        _remove_stale(directory, collective_stem(points[0].schedule.collective), replaces,
                      {path.name for path in written}, {EXTENSIONS[f] for f in formats},
                      started_ns)
    if failed:
        raise BadInput(failed)
    return primary


def _remove_stale(directory: Path, collective: str, steps: tuple[int, int], keep: set[str],
                  extensions: set[str], started_ns: int | None = None):
    """Remove earlier frontier files of `collective` (collective_stem: a rooted one's
    root too, so another root's files stay) whose steps lie in `steps`: only
    names synth writes, with `extensions` (the formats this run writes: a run in one
    format leaves another's files alone), only files synth wrote there and nobody
    changed since (synth.output_folder), older than this run; best effort (another run
    may remove one at the same moment)."""
    pattern = re.compile(rf"{collective}-s([1-9]\d*)-r[1-9]\d*-c[1-9]\d*"
                         r"(\.mscclpp\.json|\.json|\.xml)")
    ours, removed = manifest_of(directory) or Manifest({}), []
    for old in directory.glob(f"{collective}-s*-r*-c*.*"):
        m = pattern.fullmatch(old.name)
        if (not m or old.name in keep or m.group(2) not in extensions
                or not steps[0] <= int(m.group(1)) <= steps[1]
                or not written_by_synth(directory, old, ours)):
            continue
        try:
            st = old.lstat()
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                continue
            if started_ns is not None and st.st_mtime_ns >= started_ns:
                continue  # written by a run going on at the same time
            old.unlink()
            removed.append(old)
        except OSError:
            continue
    if removed:
        record(directory, [], removed)


def method_of(point: Point) -> str:
    """How a point was made, in words for the table."""
    info = point.schedule.info
    return "reducescatter + allgather" if "composed" in info else info.get("method") or ""


def point_summary(point: Point, result: Result, path: Path | None) -> dict:
    cost = schedule_cost(point.schedule)
    info = point.schedule.info
    return {
        "steps": point.steps, "rounds": point.rounds, "chunks": point.chunks,
        "rounds_per_chunk": str(point.ratio),
        "latency_us": round(cost.latency_us, 6), "us_per_mb": round(cost.us_per_byte * 1e6, 6),
        "ratio_to_bound": float(ratio_to_bound(point, result.bounds)),
        "proven": point.proven, "optimality": optimality(point, result.bounds),
        "method": method_of(point),
        "solve_seconds": info.get("solve_seconds"),
        "cached": bool(info.get("cached")),  # solve_seconds are then the run's that found it
        "file": str(path) if path else None,
    } | loads_summary(point) | ({"predicted_us": predicted(point.schedule, result)}
                               if result.cost_model == "calibrated" and _timed(point, result)
                               else {})


def _timed(point: Point, result: Result) -> bool:
    """Whether cost model 2 timed the point (cost_choice.in_cost_model: not every point,
    when the deadline came first)."""
    return result.lines is None or id(point.schedule) in result.lines


def loads_summary(point: Point) -> dict:
    """`loads`: which runtimes load the point's export (both, MSCCL XML, MSCCL++,
    neither; None where not asked); `not_loaded`: per refusing runtime its reason, as a
    phrase and as the line `synth export` says (synth.export.loads)."""
    from synth.export.loads import phrase, where

    if point.loads is None:
        return {"loads": None, "not_loaded": {}}
    return {"loads": where(point.loads),
            "not_loaded": {fmt: {"why": phrase(why), "message": why}
                           for fmt, why in point.loads.items() if why is not None}}


TABLE_SIZES = (1 << 10, 1 << 20, 1 << 30)  # the sizes the table times in cost model 2


def predicted(schedule, result: Result) -> dict:
    """{size: {us, protocol}} at TABLE_SIZES in cost model 2."""
    from synth.predict.timing import fastest, prices, schedule_lines

    lines = (result.lines or {}).get(id(schedule)) or schedule_lines(
        schedule, prices(result.topology))
    out = {}
    for n in TABLE_SIZES:
        line = fastest(lines, n)
        out[format_size(n)] = {"us": round(line.time_us(n), 3), "protocol": line.protocol}
    return out


def model_summary(result: Result) -> dict:
    """Which costs chose the points; in cost model 2 also its figures, NCCL's own time
    at the table's sizes, and the line-rate points left out."""
    if result.cost_model != "calibrated":
        return {"name": "line-rate"}
    from synth.predict.machine import machine_of
    from synth.predict.nccl import COLLECTIVES, NCCL_VERSION, as_it_runs, choose

    m = machine_of(result.topology)
    nccl = {}
    if result.collective in COLLECTIVES:
        for n in TABLE_SIZES:
            c = choose(m, result.collective, n)
            nccl[format_size(n)] = {"us": round(c.predicted_us, 3), "runs": c.name}
    return {"name": "calibrated", "figures": m.figures.source, "arch": m.arch,
            "nccl_version": NCCL_VERSION, "nccl": nccl, "library": m.figures.library,
            "nccl_said": as_it_runs(m.figures),
            "left_out": [f"S{p.steps} R{p.rounds} C{p.chunks}" for p in result.left_out]}


def result_summary(result: Result, topology: str, solver: str, paths: list[Path],
                   solver_reason: str = "") -> dict:
    b = result.bounds
    return {
        "collective": result.collective, "topology": topology, "ranks": result.model.ranks,
        "root": result.root, "solver": solver, "solver_reason": solver_reason,
        "bounds": {"steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
                   "us_per_mb": b.us_per_mb, "note": b.note}
        | ({"without_in_network": str(b.without_in_network)}
           if b.without_in_network is not None else {}),
        "frontier": [point_summary(p, result, path)
                     for p, path in zip(result.points, paths + [None] * len(result.points))],
        "complete": result.complete,
        "out_of_time": result.out_of_time,
        "interrupted": result.interrupted,
        "stopped": ({"not decomposed": result.not_decomposed}
                    if result.not_decomposed else {})
        | ({"exact search": result.not_searched} if result.not_searched else {})
        | {name: s.stopped for name, s in result.searches.items()},
        "solver_calls": sum(len(s.attempts) for s in result.searches.values()),
        "cached_calls": sum(a.cached for s in result.searches.values() for a in s.attempts),
        "seconds": round(result.seconds, 3),
        "cost_model": model_summary(result),
    } | ({"runtimes_stopped": result.runtimes_stopped} if result.runtimes_stopped else {}) \
        | routes_summary(result.topology, result.model)


def degraded_summary(topo: Topology | None, collective: str, root, bounds,
                     deadline: Deadline = Deadline()) -> dict | None:
    """On a degraded machine (synth.topology.degrade): what was taken away, the healthy
    machine's bounds and the degraded bound's distance to them (rounds per chunk, the
    bandwidth bound); None on a healthy machine."""
    if topo is None or topo.healthy is None:
        return None
    from synth.bounds import collective_bounds
    from synth.topology.degrade import changes
    from synth.topology.linkmodel import TimeLimit, lower_with_routes

    out = {"healthy": topo.healthy.name, "edits": list(topo.edits),
           "changes": changes(topo), "healthy_bounds": None, "bound_ratio": None}
    try:
        lowering = lower_with_routes(topo.healthy, deadline)
    except TimeLimit:
        return out  # the time limit went to the degraded machine itself
    h = collective_bounds(lowering, collective, root, deadline)
    return out | {"healthy_bounds": {"steps": h.steps, "rounds_per_chunk": str(h.rounds_per_chunk),
                                     "us_per_mb": h.us_per_mb, "partial": h.partial},
                  "bound_ratio": float(bounds.rounds_per_chunk / h.rounds_per_chunk)}


def degraded_line(d: dict) -> str:
    """One line: what was taken away and the bound's distance to the healthy one's."""
    h = d["healthy_bounds"]
    bound = ("the healthy machine's bound not computed (out of time)" if h is None else
             f"degraded bound {d['bound_ratio']:.3f} x the healthy machine's "
             f"({per_chunk(h['rounds_per_chunk'])}"
             f"{', partial' if h['partial'] else ''})")
    return f"degraded from {d['healthy']} ({', '.join(d['changes'])}): {bound}"


def format_table(summary: dict) -> str:
    model = summary.get("cost_model", {"name": "line-rate"})
    sizes = [format_size(n) for n in TABLE_SIZES] if model["name"] == "calibrated" else []
    rows = [("S", "R", "C", "R/C", "latency us", "us/MB", "x bound")
            + tuple(f"{label} us" for label in sizes)
            + ("optimal", "loads", "method", "solve s")]
    for p in summary["frontier"]:
        rows.append((str(p["steps"]), str(p["rounds"]), str(p["chunks"]), p["rounds_per_chunk"],
                     f"{p['latency_us']:.2f}", f"{p['us_per_mb']:.3f}",
                     f"{p['ratio_to_bound']:.3f}")
                    + tuple(f"{p['predicted_us'][label]['us']:.1f}" if "predicted_us" in p
                            else "-" for label in sizes)
                    + (p["optimality"], p.get("loads") or "?", p["method"] or "-",
                       solve_cell(p)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = 7 + len(sizes)
    lines = ["  ".join(cell.rjust(w) if i < numeric else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    b = summary["bounds"]
    head = (f"{rooted(summary['collective'], summary.get('root'))} on {summary['topology']} "
            f"({summary['ranks']} ranks), "
            f"solver {summary['solver']}"
            f"{' (' + summary['solver_reason'] + ')' if summary.get('solver_reason') else ''}"
            f": bounds {b['steps']} step{'s' * (b['steps'] != 1)}, "
            f"{per_chunk(b['rounds_per_chunk'])} ({b['us_per_mb']:.3f} us/MB)"
            + (f" with in-network reduction, {b['without_in_network']} without"
               if "without_in_network" in b else ""))
    searches_by_stop: dict[str, list[str]] = {}  # one reason, once, for the searches
    for name, why in summary["stopped"].items():    # it stopped (often all "too large")
        searches_by_stop.setdefault(why, []).append(name)
    stops = "; ".join(f"{', '.join(names)}: {why}" for why, names in searches_by_stop.items())
    points, calls = len(summary["frontier"]), summary["solver_calls"]
    tail = (f"{points} frontier point{'s' * (points != 1)}, "
            f"{calls} solver call{'s' * (calls != 1)}"
            + (f" ({summary['cached_calls']} answered from the cache)"
               if summary.get("cached_calls") else "") + ", "
            f"{summary['seconds']:.1f} s ({stops})")
    degraded = [degraded_line(summary["degraded"])] if summary.get("degraded") else []
    return "\n".join([head] + degraded + lines + [tail] + loads_lines(summary)
                     + routes_lines(summary) + model_lines(model))


def loads_lines(summary: dict) -> list[str]:
    """Under the table, per runtime, the points it does not load and why, one line per
    reason."""
    from synth.export.loads import RUNTIMES

    out = []
    for fmt, runtime in RUNTIMES.items():
        why = {}
        for p in summary["frontier"]:
            if fmt in p.get("not_loaded", {}):
                why.setdefault(p["not_loaded"][fmt]["why"], []).append(
                    f"S{p['steps']} R{p['rounds']} C{p['chunks']}")
        out += [f"{runtime} does not load {', '.join(names)}: {reason}"
                for reason, names in why.items()]
    if summary.get("runtimes_stopped"):
        out.append(f"loads: {summary['runtimes_stopped']}")
    return out


def solve_cell(p: dict) -> str:
    """The `solve s` column: a cached point's seconds are another run's."""
    if p.get("cached"):
        return "cached"
    return "-" if p["solve_seconds"] is None else f"{p['solve_seconds']:.2f}"


def model_lines(model: dict) -> list[str]:
    """What the table's costs mean, under it."""
    if model["name"] != "calibrated":
        return ["costs: line-rate alpha-beta model (--model line-rate)"]
    out = [f"costs: latency us and us/MB in the line-rate model (bounds and proofs); the "
           f"times at sizes in cost model 2 ({model['arch']}, figures: {model['figures']})"]
    if model["nccl"]:
        out.append(f"{model['nccl_said']}: " + ", ".join(
            f"{label} {v['us']:.1f} us ({v['runs']})" for label, v in model["nccl"].items()))
    if model["left_out"]:
        out.append(f"left out, never the fastest at any size in cost model 2: "
                   f"{', '.join(model['left_out'])} (--model line-rate keeps them)")
    return out

