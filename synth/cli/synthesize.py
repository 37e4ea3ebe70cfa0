"""`synth COLLECTIVE --topo TOPO`: the frontier (or one instance), verified and written."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter

import click

from synth.cli.app import cli
from synth.cli.one_instance import one_instance, one_instance_takes_no
from synth.cli.options import (BOXES, DEGRADED, MODEL, ROOT, SEARCH, SOLVER_CHOICE, Size,
                               TIME_LIMIT, TOPO, apply, examples, json_option, out_option,
                               resolve_in_time, say_kept)
from synth.cli.summary import frontier_summary, timed_points
from synth.errors import BadInput, NoAnswer, SynthError
from synth.signals import interrupts_deferred

ROOTED = ("broadcast", "reduce", "gather", "scatter")
FORMATS = ("json", "msccl-xml", "mscclpp")
HEARTBEAT = 30.0  # seconds: without a terminal, a line at least this often


def _synthesis_command(name: str):
    def command(spec, boxes, without, degrade, routes, steps, rounds, chunks, max_steps, max_chunks,
                solver, time_limit, method, hints_path, out_dir, formats, as_json, progress,
                plots, nbytes, cost_model, root=None):
        from synth.construct.hints import read_hints
        from synth.output import parse_formats

        formats = parse_formats(formats)
        topo = resolve_in_time(spec, boxes, without + degrade, time_limit, routes)
        hints = read_hints(hints_path, topo.ranks) if hints_path is not None else None
        backend, why = SOLVER_CHOICE[solver]
        if (steps is not None and max_steps is not None and steps > max_steps
                and rounds is None and chunks is None):
            raise BadInput(f"--steps {steps} is past --max-steps {max_steps}")
        if rounds is not None or chunks is not None:
            if None in (steps, rounds, chunks):
                raise BadInput("give --steps, --rounds and --chunks together (one instance), "
                               "or --steps alone")
            if method in ("constructed", "decomposed"):
                raise BadInput(f"--method {method} builds schedules, and one instance "
                               "(--steps, --rounds, --chunks) is the exact search's")
            one_instance_takes_no(("max_steps", "max_chunks", "hints_path", "plots",
                                   "nbytes"))
            return one_instance(topo, name, root, steps, rounds, chunks, backend,
                                time_limit, out_dir, formats, as_json, FINISH_SHARE)
        return _frontier(topo, name, root, steps, max_steps, max_chunks, backend, why,
                         time_limit, out_dir, formats, as_json, progress, plots, method, hints,
                         nbytes, cost_model)

    options = [
        TOPO,
        BOXES,
        DEGRADED,
        click.option("--steps", type=click.IntRange(1, 64), default=None, metavar="S",
                     help="With --rounds and --chunks: solve that one instance. Alone: only "
                          "schedules with exactly this many steps."),
        click.option("--rounds", type=click.IntRange(1, 4096), default=None, metavar="R",
                     help="One instance: at most this many rounds in all (with --steps and "
                          "--chunks)."),
        click.option("--chunks", type=click.IntRange(1, 256), default=None, metavar="C",
                     help="One instance: pieces of each rank's share (with --steps and "
                          "--rounds)."),
        SEARCH,
        TIME_LIMIT,
        click.option("--hints", "hints_path", default=None, metavar="FILE",
                     help="Optional YAML hints for the decomposition (docs/cli.md)."),
        out_option("out_dir", "DIR", "Schedules go to DIR/TOPO/COLLECTIVE/.", default="out",
                   old=()),
        click.option("--format", "formats", default="json", show_default=True,
                     metavar="FORMAT[,FORMAT...]",
                     help=f"Files to write per schedule: {', '.join(FORMATS)}."),
        json_option("Print one JSON summary instead of the table."),
        click.option("--progress/--no-progress", default=None,
                     help="Every solver call on stderr [on a terminal; elsewhere a line "
                          f"every {HEARTBEAT:g} s]."),
        click.option("--plots", is_flag=True,
                     help="Also plot the frontier and time against size (PNG) beside the "
                          "files."),
        click.option("--size", "nbytes", type=Size(), default=None,
                     help="Also answer for this message size (nccl-tests' n, e.g. 64MB): "
                          "the file to load for each runtime, written beside the others, "
                          "its predicted time and NCCL's (its own choice at that size)."),
        MODEL,
    ]
    if name in ROOTED:
        options.insert(1, ROOT)
    command = apply(*options)(command)
    command.__doc__ = (f"Synthesize {name} schedules: the Pareto frontier of steps against "
                       "rounds per chunk, each verified and written under -o/--out.")
    return cli.command(name, short_help=f"The {name} frontier, verified and written.",
                       epilog=examples(
                           f"synth {name} --topo dgx1",
                           f"synth {name} --topo dgx2x2 -o out --format json,mscclpp",
                           f"synth {name} --topo my-box.yaml --size 64MB",
                           f"synth {name} --topo dgx1 --steps 2 --rounds 3 --chunks 2"))(command)


# of the time limit, kept for the end: the table, the answer at --size and writing
# beyond what the searches hold for each point's file as they find it (Deadline.hold);
# each file is written only if the time left affords it
FINISH_SHARE = 0.1
# of the time limit, what the searches leave for what follows them on a frontier: asking
# which runtime loads each point (an exporter's program per point and runtime: seconds
# each on 16 GPUs), timing them, the table and the files (the user's question is what
# to load: a frontier none of whose points was asked answers nothing)
CHOOSING_SHARE = 0.25
# how far past the limit the smallest point's file may be written, where nothing else
# was (the limit holds within 5%, writing included)
GRACE_SHARE = 0.04


def _frontier(topo, name, root, steps, max_steps, max_chunks, backend, why, time_limit,
              out_dir, formats, as_json, progress, plots=False, method="auto", hints=None,
              nbytes=None, cost_model="calibrated"):
    from dataclasses import replace

    from synth.anytime import EarlyFiles
    from synth.construct.paced import writing
    from synth.deadline import job_deadline
    from synth.export.loads import chosen
    from synth.frontier import synthesize
    from synth.output import format_table, write_points
    from synth.output_folder import output_dir, owner_text
    from synth.search.pareto import Limits

    started_ns = time.time_ns()
    deadline = job_deadline(time_limit)
    limits = Limits(max_steps, max_chunks or 8, time_limit, backend)
    if steps is not None:
        limits = replace(limits, max_steps=steps, min_steps=steps)
    # a bad --out fails before the search
    directory, owner = output_dir(out_dir, topo, name), owner_text(topo)
    terminal = sys.stderr.isatty()
    reporter = _Progress(progress if progress is not None else terminal, terminal,
                         heartbeat=progress is None and not terminal)
    reporter.say(f"solver: {backend} ({why})")
    searches_end = deadline.reserving(CHOOSING_SHARE * time_limit)  # early files too
    early = EarlyFiles(directory, started_ns, searches_end, reporter.line, owner) \
        if "json" in formats else None

    def on_event(kind: str, data) -> None:
        if kind == "frontier" and early is not None:  # on disk while the search goes on
            early.write(data)
        reporter.event(kind, data)

    try:
        result = synthesize(topo, name, root, limits, on_event, method, hints,
                            searches_end.holding())
    finally:
        reporter.done()
    if steps is not None:
        result.points = [p for p in result.points if p.steps == steps]
        result.candidates = [p for p in result.candidates if p.steps == steps]
    under_the_bound(result, topo.name, steps, max_steps)
    # the points are timed, and the runtimes' own found, in what their files leave (a
    # file already on disk leaves its time: dgx2x32's 13 early files held 40 s that the
    # job then ended without using) and FINISH_SHARE; an exporter's try is cut at that
    # deadline (loads.loads_within), so no further margin is kept (with one, 512 GPUs
    # ended at 218 s of 300 with no runtime asked)
    on_disk = early.intact() if early is not None else {}
    result = chosen(result, topo, cost_model, deadline.reserving(
        sum(writing(p.schedule) for p in result.points if id(p.schedule) not in on_disk)
        + FINISH_SHARE * time_limit))
    interrupted = result.interrupted
    # replace the earlier files of the steps this search covered; after Ctrl-C, none
    covered = None if interrupted else result.steps_searched
    failed, paths, missed, kept = None, [], [], []
    with interrupts_deferred() as caught:  # a second Ctrl-C must not lose the points
        try:
            paths = write_points(result.points, directory, formats, covered, started_ns,
                                 deadline, GRACE_SHARE * time_limit,
                                 early and early.intact(), missed, owner, kept)
            failed = _none_written(missed, len(result.points))
            if early is not None:  # the early files of points no longer on the frontier
                early.settle(paths)
            if plots and result.points and not deadline.passed():
                from synth.construct.baselines import baselines
                from synth.pictures.plots import write_plots

                kept += write_plots(result, [(base.name, base.schedule) for base in
                                             baselines(result.model, name, result.root)],
                                    directory)[1]
        except SynthError as e:  # the table is still worth printing
            failed = e
        summary = frontier_summary(result, topo, name, backend, paths, why, nbytes,
                                   deadline, directory, failed)
        click.echo(json.dumps(summary, indent=1) if as_json else format_table(summary))
        if summary.get("answer") is not None and not as_json:
            from synth.answer import format_answer

            click.echo(format_answer(summary["answer"]))
    if nbytes is not None and summary.get("answer") is None:
        _say_unanswered(nbytes, time_limit, failed is not None, result)
    _say_refused(missed, len(result.points), kept)
    if failed is not None:
        raise failed
    return _ending(result, paths, interrupted or bool(caught), name, topo.name, time_limit,
                   *_files_missed(result.points, paths, missed, formats))


def _refused_everywhere(missed: list[tuple[str, str, str | None]], points: int
                        ) -> dict[str, tuple[str, str]]:
    """{format asked for whose exporter refused every point: its first (STEM, why)}."""
    first: dict[str, tuple[str, str]] = {}
    counts: Counter = Counter()
    for fmt, stem, why in missed:
        if why is not None:
            first.setdefault(fmt, (stem, why))
            counts[fmt] += 1
    return {fmt: said for fmt, said in first.items() if counts[fmt] == points}


def _none_written(missed: list[tuple[str, str, str | None]], points: int
                  ) -> BadInput | None:
    """The exit 2 of a job in which a runtime asked for by --format loads no point of
    the frontier (the first refusal, as `synth export` says it); None where each
    format asked for has a file or ran out of time."""
    everywhere = _refused_everywhere(missed, points)
    if not everywhere:
        return None
    fmt, (stem, why) = next(iter(everywhere.items()))
    return BadInput(f"no point of the frontier is written as {fmt}: {stem}: {why}")


def _files_missed(points, paths, missed: list[tuple[str, str, str | None]], formats
                  ) -> tuple[int, list[str]]:
    """(how many points have no file because no format asked for loads them, the names
    of the files the time left did not afford, of points that have another file)."""
    from synth.export import EXTENSIONS
    from synth.output import point_stem

    refusals = Counter(stem for _, stem, why in missed if why is not None)
    unloadable = sum(path is None and refusals[point_stem(p)] == len(set(formats))
                     for p, path in zip(points, paths))
    kept = {point_stem(p) for p, path in zip(points, paths) if path is not None}
    late = [stem + EXTENSIONS[fmt] for fmt, stem, why in missed
            if why is None and stem in kept]
    return unloadable, late


def _say_unanswered(nbytes: int, time_limit: float, failed: bool, result) -> None:
    """The note of a job given --size that gives no answer there, and why."""
    why = ("the files could not all be written" if failed else
           f"the time limit ({time_limit:g} s) was spent before it" if timed_points(result) else
           "no point was timed in cost model 2 within the time limit")
    click.echo(f"synth: note: no answer for {nbytes} bytes: {why}"
               + ("" if failed else "; a longer --time-limit gives one"), err=True)


def _say_refused(missed: list[tuple[str, str, str | None]], points: int,
                 kept: list = ()) -> None:
    """One note on stderr per format and reason: the points a format's exporter
    refused (mostly a runtime that does not load them: the table's loads column), written
    in the others; not for a format that refused every point (_none_written's error).
    And one per file of the user's moved aside before a point's file took its name."""
    say_kept(kept)
    everywhere = _refused_everywhere(missed, points)
    reasons: dict[tuple[str, str], list[str]] = {}
    for fmt, stem, why in missed:
        if why is not None and fmt not in everywhere:  # that one is the error line
            reasons.setdefault((fmt, why), []).append(stem)
    for (fmt, why), stems in reasons.items():
        click.echo(f"synth: note: not written as {fmt}: {', '.join(stems)}: {why}",
                   err=True)


def frontier_within(topo, name: str, root, limits, cost_model: str, time_limit: float,
                    searches_end: float, choosing_end: float, method: str = "auto"):
    """The frontier as the commands show it (synthesize, then loads.chosen) within the
    job's --time-limit: the searches until `searches_end` of it, asking which runtime
    loads each point and timing them until `choosing_end`; what the command then does
    with the points (tables, pages, files) has the rest."""
    from synth.deadline import job_deadline
    from synth.export.loads import chosen
    from synth.frontier import synthesize

    deadline = job_deadline(time_limit)
    result = synthesize(topo, name, root, limits, None, method, None,
                        deadline.reserving((1 - searches_end) * time_limit))
    return chosen(result, topo, cost_model,
                  deadline.reserving((1 - choosing_end) * time_limit))


def baselines_by(result, collective: str, deadline):
    """The baselines compare and report show beside the frontier, each built only if the
    time left before `deadline` affords it (built again here in full: a degraded
    cluster's ring packs 314 channels), with a note on stderr for those left out:
    (built, {algorithm: why it does not apply}, why some were not built)."""
    from synth.construct.baselines import survey_within

    built, skipped, unbuilt = survey_within(result.model, collective, result.root, deadline)
    if unbuilt:
        click.echo(f"synth: note: some baselines left out by the time limit ({unbuilt})",
                   err=True)
    return built, dict(skipped), unbuilt


def under_the_bound(result, topology: str, steps, max_steps) -> None:
    """NoAnswer where --steps, or --max-steps with no point found, is under the step
    bound (the summary said "reached --max-steps", never given, or the searches' words)."""
    from synth.output import rooted

    for option, value in (("--steps", steps), ("--max-steps", max_steps)):
        if value is not None and value < result.bounds.steps and (
                option == "--steps" or not result.points):
            raise NoAnswer(f"no schedule found for {rooted(result.collective, result.root)} "
                           f"on {topology}: {option} {value} is under its bound of "
                           f"{result.bounds.steps} steps")


def nothing_found(result, name: str, topology: str) -> NoAnswer:
    """The error of a job whose frontier is empty (exit 1), with what stopped each search."""
    why = "; ".join(dict.fromkeys(s.stopped.split(":")[0] for s in result.searches.values()))
    return NoAnswer(f"no schedule found for {name} on {topology} ({why})")


def _ending(result, paths, interrupted: bool, name: str, topology: str,
            time_limit: float, unloadable: int = 0, late: list[str] = ()) -> int:
    """The last line on stderr and the exit code: interrupted (130), nothing found or
    nothing written in time (NoAnswer), stopped at the time limit with points kept.
    unloadable: points with no file because no format asked for loads them (said
    already), not for want of time; late: the files of kept points not written for
    want of time."""
    if interrupted:
        kept = len(result.points)
        click.echo(f"synth: interrupted ({kept} point{'s' * (kept != 1)} kept)", err=True)
        return 130
    if not result.points:
        raise nothing_found(result, name, topology)
    unwritten = sum(path is None for path in paths) - unloadable
    if all(path is None for path in paths):  # the time limit, and maybe refusals
        found = len(result.points)
        raise NoAnswer(f"the time limit ({time_limit:g} s) left no time to write any of the "
                       f"{found} point{'s' * (found != 1)} found"
                       + (f" ({unloadable} refused by every format)" if unloadable else ""))
    if result.out_of_time or unwritten or late:
        kept = len(result.points)  # every row of the table, with a file or not
        # points whose timing in cost model 2 would not fit (the job may end long
        # before the limit: say what the limit cost, not only that it was reached)
        untimed = 0 if result.lines is None else sum(
            id(p.schedule) not in result.lines for p in result.points)
        from synth.frontier import timed_out

        click.echo(f"synth: {_limit_said(time_limit, timed_out(result.searches))}: {kept} "
                   f"point{'s' * (kept != 1)} kept"
                   + (f", {unwritten} of them not written" if unwritten else "")
                   + (f", {len(late)} of their files not written ({_listed(late)})"
                      if late else "")
                   + (f", {untimed} not timed in cost model 2 (it would not fit)"
                      if untimed else ""), err=True)
    return 0


def _listed(names: list[str], most: int = 4) -> str:
    """Up to `most` names, and how many more."""
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def _limit_said(time_limit: float, searches_stopped: bool) -> str:
    """How the time limit ended the work: it stopped a search, or (every search ended
    on its own; files or timings that would not fit in what was left set aside) the job
    ended early, and when ("stopped at the time limit" read as the limit spent)."""
    from synth.deadline import job_seconds

    spent = job_seconds()
    at = f"{spent:.1f}" if spent < 10 else f"{spent:.0f}"  # not "at 0 s"
    if searches_stopped:  # a search's share of the limit can end well before the limit
        early = f" at {at} s, the searches' share of it spent" \
            if spent < 0.9 * time_limit else ""
        return f"stopped at the time limit ({time_limit:g} s){early}"
    return f"cut short by the time limit ({time_limit:g} s) at {at} s"


class _Progress:
    """What the search is doing, on stderr. On a terminal: one overwritten line per
    solver call, and a line per point found. Elsewhere, with --progress: plain lines;
    by default only a heartbeat, at least every HEARTBEAT seconds while the job runs
    (a log must not look hung for minutes)."""

    def __init__(self, enabled: bool, overwrite: bool, heartbeat: bool = False):
        self.enabled, self.overwrite = enabled, overwrite
        self.start = self.last = time.monotonic()
        self.doing = "starting"
        self.stop = threading.Event()
        if heartbeat:
            threading.Thread(target=self._beat, daemon=True).start()

    def say(self, text: str) -> None:
        if not self.enabled or (not text and not self.overwrite):
            return
        self.last = time.monotonic()
        if self.overwrite:
            click.echo(f"\r\033[K{text}", err=True, nl=False)
        else:
            click.echo(text, err=True)

    def event(self, kind: str, data) -> None:
        if kind == "stage":  # before the searches: routing, bounds
            self.doing = data
            self.say(f"{data} ...")
        elif kind == "search":
            self.doing = f"searching {data}"
            self.say(f"{self.doing} ...")
        elif kind == "ask":
            self.doing = f"trying S={data[0]} R={data[1]} C={data[2]}"
            self.say(f"  {self.doing} ...")
        elif kind == "build":
            self.doing = f"building S={data[0]} R={data[1]} C={data[2]}"
        elif kind == "point":
            self.line(f"  found S={data.steps} R={data.rounds} C={data.chunks}")

    def line(self, text: str) -> None:
        """A line that stays (on a terminal, the overwritten line is cleared first)."""
        self.say("")
        if self.enabled:
            self.last = time.monotonic()
            click.echo(text, err=True)

    def _beat(self) -> None:
        while not self.stop.wait(1.0):
            now = time.monotonic()
            if now - self.last >= HEARTBEAT:
                self.last = now
                click.echo(f"synth: {self.doing} ({now - self.start:.0f} s so far)", err=True)

    def done(self) -> None:
        self.stop.set()
        self.say("")


for _name in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
              "scatter", "alltoall"):
    _synthesis_command(_name)
