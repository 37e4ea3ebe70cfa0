"""Commands for pictures: `synth topo draw`, `synth draw`, `synth report`.

Registered when synth.cli imports this module. Rendering is in
synth.pictures.graphviz, synth.pictures.topology, synth.pictures.schedule,
synth.pictures.plots and synth.pictures.report; these commands check their input first
(an unknown topology, a file that is not a schedule, an -o that is neither .svg nor .png
are one line on stderr and exit 2) and write each file whole or not at all.
"""

from __future__ import annotations

import math

import click

from synth.cli.app import cli, topo
from synth.cli.options import (BOXES, COLOR, DEGRADED, MODEL, ROOT, SEARCH, SIZES,
                               SOLVER_CHOICE, TIME_LIMIT, TOPO, examples, out_option,
                               resolve_in_time, say_kept)
from synth.errors import NoAnswer

PAGE_END = 0.95  # of report's limit: its drawings end by then, writing its files follows
# seconds after a Ctrl-C for the page's baselines and drawings: what fits, then the page
# (dgxh100x4's took 14 s more, asking the runtimes and drawing every point)
AFTER_CTRL_C_S = 1.0

PICTURE = out_option("output", "FILE.svg|FILE.png",
                     "Where to write the picture; its suffix picks the format.",
                     required=True)


@topo.command("draw", short_help="Draw a topology (SVG or PNG).", epilog=examples(
    "synth topo draw dgx1 -o dgx1.svg", "synth topo draw dgxh100 --boxes 2 -o h100x2.svg"))
@click.argument("spec", metavar="TOPO")
@BOXES
@DEGRADED
@PICTURE
def topo_draw(spec, boxes, without, degrade, routes, output):
    """Draw TOPO: GPUs, NVSwitches, PCIe switches, NICs, network switches, and links
    labelled lanes x GB/s; the boxes of a multi-node topology framed."""
    from synth.pictures.graphviz import picture_format, render
    from synth.pictures.topology import topology_graph
    from synth.topology.catalog import resolve

    picture_format(output)
    path = render(topology_graph(resolve(spec, boxes, without + degrade, routes=routes)), output)
    click.echo(f"wrote {path}")


@cli.command("draw", short_help="Draw a schedule step by step (SVG or PNG).",
             epilog=examples("synth draw allgather-s2-r3-c2.json -o ag.svg",
                             "synth draw allgather-s2-r3-c2.json -o ag.png --color origin"))
@click.argument("file", type=click.Path(dir_okay=False))
@PICTURE
@COLOR
@click.option("--columns", type=click.IntRange(1, 64), default=None, metavar="K",
              help="Panels per row [4 for up to 8 ranks, else 3; fewer for big panels].")
def draw_command(file, output, color, columns):
    """Draw a schedule FILE step by step: one panel per step, showing which chunks
    cross which rank link and each link's load against capacity x rounds. A pipelined
    schedule: one batch's program and a timeline of the batches. A PNG draws the panels
    its text can be read in (docs/cli.md); an SVG reads at any zoom."""
    from synth.pictures.graphviz import picture_format, render
    from synth.pictures.schedule import PANEL_ROOM, PNG_ROOM, schedule_graph
    from synth.schedule.machine import read_verified

    fmt = picture_format(output)
    schedule = read_verified(file)
    room = PNG_ROOM if fmt == "png" else PANEL_ROOM  # a PNG draws fewer panels, readably
    path = render(schedule_graph(schedule, color, columns, room=room), output)
    click.echo(f"wrote {path}")


@cli.command("report", short_help="One HTML page: speed-up, frontier, comparison, pictures.",
             epilog=examples("synth report allgather --topo dgx1 -o report",
                             "synth report allreduce --topo dgx2x4 -o report --time-limit 60"))
@click.argument("collective", metavar="COLLECTIVE")
@TOPO
@BOXES
@DEGRADED
@out_option("out_dir", "DIR", "Folder for index.html and the files it links to.",
            required=True)
@ROOT
@TIME_LIMIT
@SEARCH
@SIZES
@COLOR
@MODEL
def report_command(collective, spec, boxes, without, degrade, routes, out_dir, root, time_limit,
                   max_steps, max_chunks, method, sizes, solver, color, cost_model):
    """Synthesize COLLECTIVE on TOPO and write one HTML page: first the fastest frontier
    point's speed-up over the best alternative (NCCL as it runs there, the baselines)
    against message size, then the frontier table, the comparison, the plots, the
    topology and every frontier schedule drawn. The page works offline and keeps to 5
    MB: a drawing too big for it is drawn smaller there, the full one a file beside it."""
    from synth.deadline import job_deadline
    from synth.cli.synthesize import baselines_by, frontier_within, under_the_bound
    from synth.files import check_folder
    from synth.pictures.report import write_report
    from synth.search.pareto import Limits

    check_folder(out_dir, "-o")
    topology = resolve_in_time(spec, boxes, without + degrade, time_limit, routes)
    backend = SOLVER_CHOICE[solver][0]
    limits = Limits(max_steps, max_chunks, time_limit, backend)
    # the page's drawings and plots follow: a third of the limit
    result = frontier_within(topology, collective, root, limits, cost_model, time_limit,
                             0.5, 0.65, method)
    # the baselines end where the page's third begins, the drawings by PAGE_END of the
    # limit (writing its files follows); after a Ctrl-C, both by AFTER_CTRL_C_S
    soon = AFTER_CTRL_C_S if result.interrupted else math.inf
    built, skipped, _ = baselines_by(
        result, collective, job_deadline(time_limit).reserving(time_limit / 3).within(soon))
    base = [(x.name, x.schedule) for x in built]
    kept = []
    page = write_report(topology, result, base, sizes, out_dir, backend, color, skipped,
                        job_deadline(time_limit).reserving(time_limit * (1 - PAGE_END))
                        .within(soon), kept)
    say_kept(kept)
    n, k = len(result.points), len(base)
    click.echo(f"wrote {page} ({n} frontier point{'s' * (n != 1)}, {k} baseline"
               f"{'s' * (k != 1)})")
    if result.interrupted:
        click.echo("synth: interrupted (the page has the points found until then)", err=True)
        return 130
    if not result.points:
        under_the_bound(result, topology.name, None, max_steps)
        raise NoAnswer(f"no schedule found for {collective} on {topology.name} within the "
                       "limits (the page says so)")
