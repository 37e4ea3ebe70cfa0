"""One HTML page about a collective on a topology: first the speed-up over the best
alternative against message size, then the frontier, the comparison with the baselines
and NCCL, the plots, the topology and the schedules.

    write_report(topo, result, baselines, sizes, directory) -> DIR/index.html

The page needs nothing but itself to show what it shows: its pictures are inlined as
data: URIs (SVG), and it keeps to synth.pictures.page.PAGE_LIMIT bytes whatever the run,
so a browser opens it in seconds: a picture too big for its share is drawn smaller (a
schedule's matrices in coarser blocks of ranks, fewer panels) or only linked. Beside it
go every picture in full, each frontier schedule's JSON file, and the plots, which the
page links to. The files are written all or none, the page last, only inside DIR
(synth.files.write_folder).
"""

from __future__ import annotations

import html
import math
from functools import lru_cache
from pathlib import Path

from synth.compare import comparison, make_rows, nccl_choices
from synth.deadline import Deadline, Pace
from synth.export.loads import RUNTIMES
from synth.frontier import Result
from synth.html import page
from synth.output import loads_lines, point_stem, result_summary, solve_cell
from synth.output_folder import write_guarded
from synth.pictures.graphviz import render_bytes
from synth.pictures.matrix import MAX_RANKS
from synth.pictures.page import PAGE_LIMIT, Picture, figure, fit_pictures
from synth.pictures.plots import figure_bytes, frontier_figure, plot_files, time_figure
from synth.pictures.schedule import PANEL_AREA, schedule_graph
from synth.pictures.speedup import speedup_curve, speedup_figure, speedup_words
from synth.pictures.topology import topology_graph
from synth.predict.machine import machine_of
from synth.predict.nccl import COLLECTIVES, NCCL_VERSION, as_it_runs, choose
from synth.predict.timing import prices
from synth.schedule.cost import format_size, per_chunk
from synth.schedule.file import schedule_json, schedule_to_dict
from synth.topology.physical import Topology
from synth.topology.several_routes import routes_lines

# seconds per rank drawn for the page (a matrix draws at most MAX_RANKS), the slowest so
# far (a 64-rank drawing takes 1-3 s, a 4-rank one a few hundredths): none is begun that
# this pace says would end past the page's deadline; a drawing counts at least 8 ranks
DRAWING = Pace(0.03, least=8)


def _e(text) -> str:
    return html.escape(str(text))


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
        after = [p["method"] or "-", solve_cell(p)]
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
    return f"<p>{_e(data['nccl_said'])}:</p><ul>{items}</ul>"


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


def _speedup_section(topo: Topology, result: Result, rows: list) -> tuple[str, object]:
    """(the words, the speed-up figure or None): the fastest frontier point against the
    best alternative at each size from 1 KB to 4 GB, in the result's cost model."""
    # a point no runtime loads is named so: the headline may credit it (dgxh100x2's
    # allgather, up to 1.51 x by a point that loads in neither)
    unloaded = {id(p.schedule) for p in result.points if p.loads is not None
                and all(why is not None for why in p.loads.values())}
    candidates = {r.name + (" (no runtime loads it)" if id(r.schedule) in unloaded else ""):
                  r.time_us for r in rows if r.kind == "synth"}
    alternatives = {r.name: r.time_us for r in rows if r.kind == "baseline"}
    lines: tuple[str, ...] = ()
    calibrated = result.cost_model == "calibrated"
    if calibrated and result.collective in COLLECTIVES:
        machine, name = machine_of(topo), f"NCCL {NCCL_VERSION}"
        alternatives[name] = lru_cache(maxsize=None)(
            lambda n: choose(machine, result.collective, n).predicted_us)
        lines = (name,)
    if not candidates or not alternatives:
        return ("<p>No speed-up to show: " + ("no frontier point." if not candidates else
                                               "nothing to compare with.") + "</p>", None)
    curve = speedup_curve(candidates, alternatives, lines=lines)
    model = "cost model 2" if calibrated else "line-rate model"
    what = (f"{as_it_runs(topo.figures)} (synth.predict.nccl) and the baselines"
            if lines else "the baselines")
    words = (f'<p class="headline">{_e(speedup_words(curve))}</p>'
             f'<p class="note">The best alternative at each size is the fastest of {what}, '
             f"in {model} (docs/cost-model.md); speed-up = its time / the fastest frontier "
             "point's time. Shaded: the frontier is faster.</p>")
    root = f" (root {result.root})" if result.root is not None else ""
    return words, speedup_figure(curve, f"{result.collective}{root} on {topo.name}", model)


def _schedule_versions(schedule, color: str, full: int, room: int,
                       deadline: Deadline = Deadline()):
    """Coarser drawings of a schedule for a page, most detailed first: its matrices in
    fewer, bigger blocks of ranks, then fewer panels. A drawing's size goes about with
    its matrices' cells: a version reckoned over `room` bytes from the full drawing's
    `full` bytes is skipped unmade. None begun that would end past `deadline` (the
    page links the file)."""
    n = schedule.collective.ranks
    for most in (32, 16, 8):
        if n > most and full * ((most + 1) / (n + 1)) ** 2 <= room:
            if not deadline.affords(DRAWING.seconds(most)):
                return
            with DRAWING.timing(most):
                svg = render_bytes(schedule_graph(schedule, color, max_ranks=most), "svg")
            yield svg, f"drawn smaller: ranks in at most {most} blocks"
    if not deadline.affords(DRAWING.seconds(min(n, 8))):
        return
    with DRAWING.timing(min(n, 8)):
        svg = render_bytes(schedule_graph(schedule, color, max_ranks=min(n, 8),
                                          room=(PANEL_AREA / 16, math.inf)), "svg")
    yield svg, "drawn smaller: fewer panels" + (", ranks in at most 8 blocks" if n > 8 else "")


def _schedule_parts(result: Result, color: str, deadline: Deadline
                    ) -> tuple[dict, list, list[str]]:
    """({file: its full drawing}, [(heading, Picture, file, alt, caption)], [the page's
    words for each point not drawn]) for every frontier point: a pipeline drawn as one
    batch (its program) and its timeline; none is begun that would end past `deadline`
    at the pace of the slowest drawn so far."""
    files, parts, undrawn = {}, [], []
    for p in result.points:
        ranks = max(min(p.schedule.collective.ranks, MAX_RANKS), DRAWING.least)  # drawn
        if not deadline.affords(DRAWING.seconds(ranks)):
            undrawn.append(f"<h3>{_e(f'S{p.steps} R{p.rounds} C{p.chunks}')}</h3><p>Not "
                           "drawn: the time limit ran out first (<code>synth draw "
                           f"{_e(point_stem(p))}.json -o {_e(point_stem(p))}.svg</code> "
                           "draws it).</p>")
            continue
        with DRAWING.timing(ranks):
            svg = render_bytes(schedule_graph(p.schedule, color), "svg")
        name = f"{point_stem(p)}.svg"
        files[Path(name)] = svg
        pipe = p.schedule.pipeline
        how = ("step by step" if pipe is None else
               f"a pipeline of {pipe.batches} batch{'' if pipe.batches == 1 else 'es'}: "
               f"one batch's {len(p.schedule.steps)}-step program and the timeline")
        picture = Picture(svg, lambda room, s=p.schedule, full=len(svg):
                          _schedule_versions(s, color, full, room, deadline))
        parts.append((f"S{p.steps} R{p.rounds} C{p.chunks}", picture, name, point_stem(p),
                      f"{p.steps} steps, {p.rounds} rounds, {p.chunks} chunks per share, "
                      f"{how}"))
    return files, parts, undrawn


def _placed(fitted, name: str, data: bytes, alt: str, caption: str, lazy: bool = False) -> str:
    """A picture as fit_pictures left it: inlined whole, a smaller drawing, or linked."""
    if fitted is None:
        return figure(None, "svg", name, alt, f"{caption}; too big to show here "
                      f"({len(data) / 1e6:.1f} MB): open the file")
    shown, words = fitted
    if words:
        caption += f"; {words} (the full drawing, {len(data) / 1e6:.1f} MB, is the file)"
    return figure(shown, "svg", name, alt, caption, lazy)


def write_report(topo: Topology, result: Result, baselines: list, sizes: list[int],
                 directory: str | Path, solver: str = "cpsat", color: str = "chunk",
                 skipped: dict | None = None, deadline: Deadline = Deadline(),
                 kept: list | None = None) -> Path:
    """Write DIR/index.html and the files it links to; returns the page's path. A
    user's file at a name it writes is moved aside first, and (its path, where it went)
    added to `kept` (synth.output_folder.write_guarded; in a folder with no manifest,
    one that differs from what is written there).

    `baselines` is a list of (name, Schedule); `skipped` optionally {algorithm: why}
    for the baselines that do not apply. The page keeps to PAGE_LIMIT bytes
    (synth.pictures.page.fit_pictures): a picture that does not fit is drawn smaller
    or only linked; every full drawing is a file beside the page. Past `deadline` the
    schedules left are not drawn (the page says so and how to draw them).
    """
    directory = Path(directory)
    files = {Path(f"{point_stem(p)}.json"): schedule_json(schedule_to_dict(p.schedule))
             for p in result.points}
    paths = [directory / name for name in files]
    summary = result_summary(result, topo.name, solver, paths)
    calibrated = result.cost_model == "calibrated"
    rows = make_rows([p.schedule for p in result.points], baselines,
                     prices(topo) if calibrated else None)
    nccl = nccl_choices(topo, result.collective, sizes) if calibrated else None
    data = comparison(rows, result.bounds, sizes, nccl, as_it_runs(topo.figures)) if rows else \
        {"rows": [], "winners": {}, "nccl": {}}

    model = "cost model 2" if calibrated else "line-rate model"
    speed_words, speed_fig = _speedup_section(topo, result, rows)
    stems = plot_files(result)
    plots = [("speedup", speed_fig, "The fastest frontier point's speed-up over the best "
              "alternative against message size; dots: where it crosses 1 x.")] \
        if speed_fig is not None else []
    plots += [("frontier", frontier_figure(result, baselines),
               "Latency against bandwidth cost (line-rate); dashed and dotted lines: the "
               "bounds."),
              ("time", time_figure(result, baselines, rows=rows or None, model=model),
               f"Predicted time and algbw against message size, frontier and baselines "
               f"({model}).")]
    figures = []  # (name, Picture, alt, caption)
    for key, fig, caption in plots:
        rooted_as = "" if result.root is None else f"-root{result.root}"  # as plot_files
        name = f"{stems.get(key, f'{result.collective}{rooted_as}-{key}')}.svg"
        svg = figure_bytes(fig, "svg")
        files[Path(name)] = svg
        figures.append((name, Picture(svg), key, caption))
    topo_svg = render_bytes(topology_graph(topo), "svg")
    files[Path("topology.svg")] = topo_svg
    figures.append(("topology.svg", Picture(topo_svg), topo.name,
                    "GPUs, switches, NICs and links (lanes x GB/s per direction)."))
    drawings, schedules, undrawn = _schedule_parts(result, color, deadline)
    files.update(drawings)

    text = _page_text(topo, result, summary, data, sizes, solver, skipped, speed_words)
    pictures = [f[1] for f in figures] + [s[1] for s in schedules]
    fitted = fit_pictures(pictures, PAGE_LIMIT - len(text.encode()) - 4096)
    shown = [_placed(fit, name, pic.full, alt, caption)
             for fit, (name, pic, alt, caption) in zip(fitted, figures)]
    drawn = [f"<h3>{_e(head)}</h3>" + _placed(fit, name, pic.full, alt, caption, lazy=True)
             for fit, (head, pic, name, alt, caption)
             in zip(fitted[len(figures):], schedules)] + undrawn
    speed = shown[:1] if speed_fig is not None else []
    rest = shown[len(speed):]
    for slot, html_ in (("speedup", speed), ("plots", rest[:-1]), ("topology", rest[-1:]),
                        ("schedules", drawn)):
        text = text.replace(_slot(slot), "".join(html_))
    files[Path("index.html")] = text
    written, moved = write_guarded(directory, files)
    if kept is not None:
        kept += moved
    return written[-1]


def _page_text(topo: Topology, result: Result, summary: dict, data: dict,
               sizes: list[int], solver: str, skipped: dict | None, speed_words: str) -> str:
    """The page without its pictures: _slot(name) where the speedup, plots, topology
    and schedules pictures go."""
    b = result.bounds
    root = f" (root {result.root})" if result.root is not None else ""
    title = f"{result.collective}{root} on {topo.name}"
    stops = "; ".join(f"{k}: {v}" for k, v in summary["stopped"].items())
    winners = ", ".join(f"{_e(k)}: {_e(v)}" for k, v in data["winners"].items())
    skipped_note = ""
    if skipped:
        skipped_note = ('<p class="note">Baselines that do not apply: '
                        + "; ".join(f"{_e(k)} ({_e(v)})" for k, v in skipped.items())
                        + "</p>")
    body = [
        f"<h1>synth: {_e(title)}</h1>",
        f"<p>{_e(topo.description or topo.name)}; {result.model.ranks} ranks, capacity unit "
        f"{result.model.unit_gbps:g} GB/s.</p>",
        *(f'<p class="note">{_e(line)}.</p>' for line in routes_lines(summary)),
        f"<p>Lower bounds: {b.steps} step{'' if b.steps == 1 else 's'} "
        f"(latency {b.latency_us:.2f} us), "
        f"{_e(per_chunk(b.rounds_per_chunk))} ({b.us_per_mb:.3f} us/MB)"
        + (f"; {_e(b.note)}" if b.note else "") + ".</p>",
        "<h2>Speed-up over the best alternative</h2>", speed_words, _slot("speedup"),
        "<h2>Pareto frontier</h2>",
        f'<p class="note">{len(result.points)} point{"s" * (len(result.points) != 1)}, '
        f'{summary["solver_calls"]} solver calls'
        + (f" ({summary['cached_calls']} answered from the cache)"
           if summary.get("cached_calls") else "")
        + f", {summary['seconds']:.1f} s, solver {_e(solver)} ({_e(stops)}). "
        "proven: every cheaper instance was shown infeasible; bw-bound, step-bound: the "
        "point meets that lower bound; loads: which runtimes load the point's export (MSCCL "
        "XML, MSCCL++, both or neither; the reasons below, and on the cell).</p>",
        _frontier_table(summary) if result.points else "<p>No schedule was found within "
                                                       "the limits.</p>",
        _loads_list(summary),
        "<h2>Against the baselines and NCCL</h2>",
        f'<p class="note">{_e(_model_words(result))}; n is nccl-tests\' message size. '
        f"Shaded: the fastest at that size. Fastest: {winners}.</p>",
        _comparison_table(data, sizes) if data["rows"] else "<p>Nothing to compare.</p>",
        _nccl_list(data),
        skipped_note,
        "<h2>Plots</h2>", _slot("plots"),
        "<h2>Topology</h2>", _slot("topology"),
        "<h2>Schedules</h2>",
        '<p class="note">One panel per step; each arrow (or matrix cell) lists the chunks '
        "that cross the link and its load against capacity x rounds. A pipelined schedule "
        "shows one batch (its program) and a timeline of which batch runs which program "
        "step in each step. A drawing too big for this page is drawn smaller here (or "
        "only linked); the link opens the full drawing.</p>",
        _slot("schedules"),
    ]
    return page(f"synth: {title}", body)


def _slot(name: str) -> str:
    """A place in the page's text for pictures: a comment, which no escaped text of the
    page can contain."""
    return f"<!--{name}-->"
