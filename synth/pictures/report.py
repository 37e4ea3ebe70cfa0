"""One HTML page about a collective on a topology: the frontier, the comparison with the
baselines, and the pictures.

    write_report(topo, result, baselines, sizes, directory) -> DIR/index.html

The page needs nothing but itself: every picture is inlined as a data: URI (an SVG).
Beside it go the same pictures as files, each frontier schedule's JSON file, and the
plots, which the page links to. The files are written all or none, the page last, only
inside DIR (synth.files.write_folder).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from synth.compare import comparison, make_rows, nccl_choices
from synth.export.loads import RUNTIMES
from synth.files import write_folder
from synth.frontier import Result
from synth.output import loads_lines, point_stem, result_summary
from synth.pictures.graphviz import render_bytes
from synth.pictures.plots import figure_bytes, frontier_figure, plot_files, time_figure
from synth.pictures.schedule import schedule_graph
from synth.pictures.topology import topology_graph
from synth.predict.nccl import NCCL_VERSION
from synth.predict.timing import prices
from synth.schedule.cost import format_size
from synth.schedule.file import schedule_json, schedule_to_dict
from synth.topology.physical import Topology

STYLE = """
body { font-family: Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td.name, th.name { text-align: left; }
tr.synth td.name { color: #1f4f8f; } td.best { background: #e5f5e0; font-weight: bold; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
.note { color: #555; font-size: 0.9em; }
"""


def _e(text) -> str:
    return html.escape(str(text))


def _picture(data: bytes, href: str, alt: str, caption: str) -> str:
    uri = "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")
    return (f'<figure><a href="{_e(href)}"><img src="{uri}" alt="{_e(alt)}"></a>'
            f'<figcaption>{_e(caption)} (<a href="{_e(href)}">{_e(href)}</a>)</figcaption>'
            "</figure>")


def _frontier_table(summary: dict) -> str:
    head = ["S", "R", "C", "R/C", "latency us", "us/MB", "x bound", "optimal", "loads",
            "method", "solve s", "file"]
    rows = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for p in summary["frontier"]:
        name = Path(p["file"]).name if p["file"] else ""
        why = "; ".join(f"{RUNTIMES[f]}: {w['why']}" for f, w in p["not_loaded"].items())
        cells = [p["steps"], p["rounds"], p["chunks"], p["rounds_per_chunk"],
                 f"{p['latency_us']:.2f}", f"{p['us_per_mb']:.3f}",
                 f"{p['ratio_to_bound']:.3f}", p["optimality"]]
        after = [p["method"] or "-",
                 "-" if p["solve_seconds"] is None else f"{p['solve_seconds']:.2f}"]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells)
                    + f'<td title="{_e(why)}">{_e(p["loads"] or "?")}</td>'
                    + "".join(f"<td>{_e(c)}</td>" for c in after)
                    + f'<td class="name"><a href="{_e(name)}">{_e(name)}</a></td></tr>')
    return '<table class="frontier">' + "".join(rows) + "</table>"


def _loads_list(summary: dict) -> str:
    """Why a runtime does not load a point, one item per runtime and reason."""
    items = "".join(f"<li>{_e(line)}</li>" for line in loads_lines(summary))
    return f'<ul class="note">{items}</ul>' if items else ""


def _model_words(result: Result) -> str:
    if result.cost_model == "calibrated":
        return ("Cost model 2 (docs/cost-model.md: the topology's figures); latency us and "
                "us/MB in the line-rate model")
    return "Line-rate alpha-beta model"


def _nccl_list(data: dict) -> str:
    """NCCL as it runs, per size (cost model 2): its choice, time and the speed-up."""
    if not data.get("nccl"):
        return ""
    items = "".join(f"<li>{_e(size)}: NCCL runs {_e(v['nccl_runs'])}, {v['nccl_us']:.1f} us; "
                    f"the fastest here {v['speedup']:.2f} x that ({_e(v['why'])})</li>"
                    for size, v in data["nccl"].items())
    return f"<p>NCCL {NCCL_VERSION} as it runs there:</p><ul>{items}</ul>"


def _comparison_table(data: dict, sizes: list[int]) -> str:
    labels = [format_size(n) for n in sizes]
    head = ('<tr><th class="name">schedule</th><th>S</th><th>R</th><th>C</th>'
            "<th>latency us</th><th>us/MB</th><th>bw x bound</th>"
            + "".join(f"<th>{_e(l)}<br>us (GB/s)</th>" for l in labels) + "</tr>")
    rows = [head]
    for r in data["rows"]:
        cells = [f'<td class="name">{_e(r["name"])}</td>', f"<td>{r['steps']}</td>",
                 f"<td>{r['rounds']}</td>", f"<td>{r['chunks']}</td>",
                 f"<td>{r['latency_us']:.2f}</td>", f"<td>{r['us_per_mb']:.3f}</td>",
                 f"<td>{r['bandwidth_to_bound']:.2f}</td>"]
        for l in labels:
            t = r["sizes"][l]
            best = ' class="best"' if data["winners"][l] == r["name"] else ""
            cells.append(f"<td{best}>{t['time_us']:.1f} ({t['algbw_gbps']:.1f})</td>")
        rows.append(f'<tr class="{_e(r["kind"])}">' + "".join(cells) + "</tr>")
    return '<table class="comparison">' + "".join(rows) + "</table>"


def write_report(topo: Topology, result: Result, baselines: list, sizes: list[int],
                 directory: str | Path, solver: str = "cpsat", color: str = "chunk",
                 skipped: dict | None = None) -> Path:
    """Write DIR/index.html and the files it links to; returns the page's path.

    `baselines` is a list of (name, Schedule); `skipped` optionally {algorithm: why}
    for the baselines that do not apply.
    """
    directory = Path(directory)
    b = result.bounds
    files = {Path(f"{point_stem(p)}.json"): schedule_json(schedule_to_dict(p.schedule))
             for p in result.points}
    paths = [directory / name for name in files]
    summary = result_summary(result, topo.name, solver, paths)
    calibrated = result.cost_model == "calibrated"
    rows = make_rows([p.schedule for p in result.points], baselines,
                     prices(topo) if calibrated else None)
    nccl = nccl_choices(topo, result.collective, sizes) if calibrated else None
    data = comparison(rows, b, sizes, nccl) if rows else {"rows": [], "winners": {}, "nccl": {}}

    topo_svg = render_bytes(topology_graph(topo), "svg")
    files[Path("topology.svg")] = topo_svg
    plots = []
    stems = plot_files(result)
    for key, fig, caption in (
            ("frontier", frontier_figure(result, baselines),
             "Latency against bandwidth cost; dashed and dotted lines: the bounds."),
            ("time", time_figure(result, baselines),
             "Predicted time and algbw against message size, frontier and baselines.")):
        svg = figure_bytes(fig, "svg")
        name = f"{stems[key]}.svg"
        files[Path(name)] = svg
        plots.append(_picture(svg, name, key, caption))
    schedules = []
    for p in result.points:
        svg = render_bytes(schedule_graph(p.schedule, color), "svg")
        name = f"{point_stem(p)}.svg"
        files[Path(name)] = svg
        pipe = p.schedule.pipeline
        how = ("step by step" if pipe is None else
               f"a pipeline of {pipe.batches} batch{'' if pipe.batches == 1 else 'es'}: "
               f"one batch's {len(p.schedule.steps)}-step program and the timeline")
        schedules.append(f"<h3>S{p.steps} R{p.rounds} C{p.chunks}</h3>"
                         + _picture(svg, name, point_stem(p),
                                    f"{p.steps} steps, {p.rounds} rounds, {p.chunks} chunks "
                                    f"per share, {how}"))

    root = f" (root {result.root})" if result.root is not None else ""
    title = f"{result.collective}{root} on {topo.name}"
    stops = "; ".join(f"{k}: {v}" for k, v in summary["stopped"].items())
    winners = ", ".join(f"{_e(k)}: {_e(v)}" for k, v in data["winners"].items())
    skipped_note = ""
    if skipped:
        skipped_note = ('<p class="note">Baselines that do not apply: '
                        + "; ".join(f"{_e(k)} ({_e(v)})" for k, v in skipped.items())
                        + "</p>")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>synth: {_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>synth: {_e(title)}</h1>",
        f"<p>{_e(topo.description or topo.name)}; {result.model.ranks} ranks, capacity unit "
        f"{result.model.unit_gbps:g} GB/s.</p>",
        f"<p>Lower bounds: {b.steps} step{'' if b.steps == 1 else 's'} "
        f"(latency {b.latency_us:.2f} us), "
        f"{_e(b.rounds_per_chunk)} rounds per chunk ({b.us_per_mb:.3f} us/MB)"
        + (f"; {_e(b.note)}" if b.note else "") + ".</p>",
        "<h2>Pareto frontier</h2>",
        f'<p class="note">{len(result.points)} points, {summary["solver_calls"]} solver calls, '
        f"{summary['seconds']:.1f} s, solver {_e(solver)} ({_e(stops)}). "
        "proven: every cheaper instance was shown infeasible; bw-bound, step-bound: the "
        "point meets that lower bound; loads: which runtimes load the point's export (MSCCL "
        "XML, MSCCL++, both or neither; the reasons below, and on the cell).</p>",
        _frontier_table(summary) if result.points else "<p>No schedule was found within "
                                                       "the limits.</p>",
        _loads_list(summary),
        "<h2>Against the baselines and NCCL</h2>",
        f'<p class="note">{_e(_model_words(result))}; n is nccl-tests\' message size. '
        f"Shaded: the fastest at that size. Fastest: {winners}.</p>",
        _comparison_table(data, sizes) if rows else "<p>Nothing to compare.</p>",
        _nccl_list(data),
        skipped_note,
        "<h2>Plots</h2>", *plots,
        "<h2>Topology</h2>",
        _picture(topo_svg, "topology.svg", topo.name,
                 "GPUs, switches, NICs and links (lanes x GB/s per direction)."),
        "<h2>Schedules</h2>",
        '<p class="note">One panel per step; each arrow (or matrix cell) lists the chunks '
        "that cross the link and its load against capacity x rounds. A pipelined schedule "
        "shows one batch (its program) and a timeline of which batch runs which program "
        "step in each step.</p>",
        *schedules,
        "</body></html>", "",
    ]
    files[Path("index.html")] = "\n".join(parts)
    return write_folder(directory, files)[-1]
