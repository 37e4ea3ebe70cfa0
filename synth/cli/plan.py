"""`synth plan WORKLOAD --topo TOPO -o DIR`: every collective of a training step planned
(README, "Planning a training step"; docs/cli.md).

Registered on the `synth` group when synth.cli imports this module.
"""

from __future__ import annotations

import json
import math
import time

import click

from synth.cli.app import cli
from synth.cli.options import (BOXES, DEGRADED, MODEL, Renamed, SEARCH, SOLVER_CHOICE,
                               TIME_LIMIT, TOPO, examples, json_option, out_option,
                               resolve_in_time, say_kept)
from synth.signals import interrupt_seen, interrupts_deferred


SYNTHESIS_END = 0.6  # of --time-limit: when the candidates' synthesis ends
# of --time-limit: when the candidates' exports must end (one starts only if, at the
# pace measured, it would; the report and its page take another second or two on 16
# GPUs, and writing the files the rest)
EXPORTS_END = 0.8


@cli.command("plan", short_help="Plan every collective of a training step.",
             epilog=examples(
                 "synth plan examples/3d-parallel-dgxh100x8.yaml --topo dgxh100x8 -o plan",
                 "synth plan examples/nccl-debug-dgxh100x2.log --topo dgxh100x2 "
                 "--training-steps 2"))
@click.argument("workload")
@TOPO
@BOXES
@DEGRADED
@out_option("out_dir", "DIR", "Folder for the plan's files (report.md, report.html, "
            "plan.json, runtime files).", default="plan", old=())
@TIME_LIMIT
@SEARCH
@click.option("--training-steps", "steps", cls=Renamed, old=("--steps",),
              type=click.IntRange(1, 10 ** 6), default=1, show_default=True, metavar="N",
              help="Training steps an NCCL log or profiler trace holds (its counts are "
                   "divided by it).")
@click.option("--format", "formats", default="msccl-xml,mscclpp", show_default=True,
              metavar="FORMAT[,FORMAT...]",
              help="Runtime files to write: msccl-xml, mscclpp (or none).")
@json_option("Print plan.json instead of the summary.")
@click.option("--plots", is_flag=True, help="Also plot the step and each collective's time "
              "against size (DIR/plots/*.png).")
@MODEL
def plan_command(workload, spec, boxes, without, degrade, routes, out_dir, time_limit, max_steps,
                 max_chunks, method, solver, steps, formats, as_json, plots, cost_model):
    """Plan every collective of WORKLOAD (a YAML file, an NCCL_DEBUG=INFO log or a
    PyTorch profiler trace) on the topology: per communicator and message size the
    fastest schedule, runtime files whose size ranges tile every size, and a report
    against what NCCL runs there (model predictions: cost model 2 by default)."""
    from pathlib import Path

    from synth.deadline import job_deadline
    from synth.errors import BadInput
    from synth.files import check_folder
    from synth.plan.output import RUNTIMES, render_plan, write_files
    from synth.plan.make import make_plan
    from synth.plan.reading import load_workload
    from synth.search.pareto import Limits

    wanted = [] if formats == "none" else [f.strip() for f in formats.split(",")]
    unknown = [f for f in wanted if f not in RUNTIMES]
    if unknown:
        raise BadInput(f"unknown format {unknown[0]!r} (expected msccl-xml, mscclpp or none)")
    deadline = job_deadline(time_limit)  # from the command's start, as a user counts
    check_folder(out_dir, "-o")  # before minutes of planning
    topo = resolve_in_time(spec, boxes, without + degrade, time_limit, routes)
    work = load_workload(workload, topo, steps)
    for note in work.notes:  # what the log or trace held that the plan leaves out
        click.echo(f"synth: note: {note}", err=True)
    # synthesis until SYNTHESIS_END of the limit, exports (rendered and simulated) until
    # EXPORTS_END of it: the report and writing the files are left the rest
    began = deadline.end - time_limit
    synthesis = max(began + time_limit * SYNTHESIS_END - time.monotonic(), 0.01)
    limits = Limits(max_steps, max_chunks, synthesis, SOLVER_CHOICE[solver][0])
    plan = make_plan(work, topo, limits, cost_model=cost_model, method=method)
    for note in plan.notes:
        click.echo(f"synth: note: {note}", err=True)
    extra = {}
    if plots:
        from synth.pictures.plan_plots import plan_figures

        extra = {Path("plots") / name: data for name, data in plan_figures(plan)}
    texts, doc = render_plan(plan, tuple(wanted), extra,  # Ctrl-C still stops this
                             began + time_limit * EXPORTS_END)
    skipped = sum(len(r["not_exported"]) for rs in doc["runtimes"].values() for r in rs)
    if skipped:
        click.echo(f"synth: note: {skipped} candidate export{'s' * (skipped != 1)} did not "
                   "fit in --time-limit; NCCL's own algorithm runs their sizes (plan.json: "
                   "not_exported; a longer --time-limit tries them)", err=True)
    if interrupt_seen():  # a Ctrl-C a search or export kept to itself: DIR as it was
        raise KeyboardInterrupt
    with interrupts_deferred() as caught:
        _say_kept(*write_files(Path(out_dir), texts, doc["files"]))
    if caught:  # the folder is whole; the command still ends as interrupted
        raise KeyboardInterrupt
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    step = doc["step_us"]
    nccl = "NCCL" if cost_model == "calibrated" else "NCCL-style"
    if cost_model == "calibrated" and getattr(topo.figures, "library", "") == "rccl":
        nccl = "NCCL for RCCL"  # NCCL's tuner standing in for RCCL's, said below
    many = len(plan.entries)
    click.echo(f"{work.name} on {topo.name}: {many} collective{'s' * (many != 1)} planned in "
               f"{plan.seconds:.1f} s")
    for e in doc["entries"]:
        for c in e["calls"]:
            click.echo(f"  {e['collective']:>13} on {e['communicator']:<10} "
                       f"{c['load']['bytes']:>12} B x{c['count']:<5g} {c['algorithm']:<60.60} "
                       f"{c['us']:>10.1f} us  "
                       f"({math.floor(c['speedup'] * 100) / 100:.2f} x {nccl})"
                       + _model_only(c))
    for o in doc["overlaps"]:
        click.echo(f"  together ({o['tag']}): {o['overlapped_us']:.1f} us against "
                   f"{o['sequential_us']:.1f} us one after the other")
    click.echo(f"one step (model): {step['plan_overlapped']:.1f} us against "
               f"{step['nccl_overlapped']:.1f} us {nccl}: "
               f"{math.floor(step['speedup'] * 100) / 100:.2f} x; "
               f"files and report in {out_dir}/")
    _files_alone(doc, nccl)
    if nccl == "NCCL for RCCL":
        from synth.predict.nccl import as_it_runs

        click.echo(f"  NCCL for RCCL: {as_it_runs(topo.figures)}")
    for e in doc["entries"]:  # what to load, per call: the user's question, answered
        for c in e["calls"]:
            click.echo(load_line(e, c, nccl, out_dir))


def _files_alone(doc: dict, nccl: str) -> None:
    """The step with each runtime's files alone (what a user can load: the plan's step
    is the schedules' in the model), and what several routes assume."""
    from synth.topology.several_routes import routes_lines

    step = doc["step_us"]
    files_alone = [f"{fmt} {step[f'{fmt}_files']:.1f} us "
                   f"({math.floor(step['nccl'] / step[f'{fmt}_files'] * 100) / 100:.2f} x)"
                   for fmt in ("msccl-xml", "mscclpp") if step.get(f"{fmt}_files")]
    if files_alone:
        skipped = sum(len(r["not_exported"]) for rs in doc["runtimes"].values() for r in rs)
        click.echo("  with each runtime's files alone, every call one after the other: "
                   + ", ".join(files_alone) + f" against {step['nccl']:.1f} us {nccl}"
                   + (f" ({skipped} exports did not fit the time limit)" if skipped else ""))
    for line in routes_lines(doc):
        click.echo(f"  {line}")


def _model_only(call: dict) -> str:
    """Where the plan's choice at a call's size is a schedule no runtime file runs there
    (its chunks do not cut the size: mi300xx2's two-rank allreduce in 7 chunks showed
    1.81 x, while both runtimes left 1 MiB to NCCL's own), says so."""
    loads = call["load"]["runtimes"]
    if not loads or call["algorithm"].startswith("NCCL's own") or \
            any(x["file"] for x in loads.values()):
        return ""
    return "  model only: no runtime's file runs this size"


def load_line(entry: dict, call: dict, nccl: str, out_dir: str) -> str:
    """One call's answer: per runtime the file that runs its size and its predicted time
    (or NCCL's own algorithm where no file does), then what NCCL runs there."""
    where = "; ".join(
        f"{RUNTIME_NAMES[fmt]} {out_dir}/{x['file']} ({x['us']:.1f} us)" if x["file"] else
        f"{RUNTIME_NAMES[fmt]} no file (NCCL's own runs it)"
        for fmt, x in call["load"]["runtimes"].items())
    named = call["nccl"] if call["nccl"].startswith(nccl) else f"{nccl} {call['nccl']}"
    return (f"load for {entry['collective']} on {entry['communicator']} at "
            f"{call['load']['bytes']:,} B: {where or 'no runtime files (--format none)'}; "
            f"{named}: {call['nccl_us']:.1f} us")


RUNTIME_NAMES = {"msccl-xml": "MSCCL XML", "mscclpp": "MSCCL++"}


def _say_kept(changed: list, moved: list) -> None:
    """Notes for the user's files: an earlier plan's that this one does not write,
    changed since synth wrote them or not known to be its, moved aside; and those at a
    name this plan writes, moved aside."""
    if changed:
        path, aside = changed[0]
        click.echo(f"synth: note: moved {len(changed)} file{'s' * (len(changed) != 1)} an "
                   f"earlier plan wrote and this one does not aside ({path} to {aside}...): "
                   "changed since, or not known to be synth's, so not removed; out of the "
                   "runtimes' folders, none of them loads it", err=True)
    say_kept(moved)
