"""Plots of a frontier with matplotlib (the Agg backend; no display needed).

    frontier_figure(result, baselines)   latency against bandwidth cost, the bounds marked
    time_figure(result, baselines)       predicted time and algbw against message size
    write_plots(result, baselines, dir)  both, as PNG files; returns their paths and
                                         any file of the user's moved aside

`result` is a synth.frontier.Result, `baselines` a list of (name, Schedule). The curves
use synth.schedule.cost's line-rate (alpha-beta) model unless time_figure is given rows timed in
cost model 2 (the report does). Labels never overlap (synth.pictures.labels), lines are
told apart by colour, style and marker, and legends sit outside the plots. The speed-up
against size is synth.pictures.speedup's.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from synth.frontier import Result
from synth.pictures.labels import glyphs_quiet, place_labels
from synth.schedule.cost import format_size, schedule_cost

# ten colours a reader tells apart (matplotlib's tab10) for synthesized schedules, eight
# others (ColorBrewer's Dark2) for the baselines; past them the marker changes
SYNTH_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
BASE_COLOURS = ["#e7298a", "#1b9e77", "#d95f02", "#7570b3", "#66a61e", "#e6ab02",
                "#a6761d", "#666666"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
KB, GB = 1 << 10, 1 << 30


def _name(schedule) -> str:
    return f"synth S{schedule.num_steps} R{schedule.rounds} C{schedule.collective.chunks}"


def _undominated(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other is at least as good as on both axes and better on one, by x."""
    return sorted((x, y) for x, y in set(points)
                  if not any(a <= x and b <= y and (a, b) != (x, y) for a, b in points))


def _title(result: Result) -> str:
    root = f" (root {result.root})" if result.root is not None else ""
    return f"{result.collective}{root} on {result.model.name} ({result.model.ranks} ranks)"


def frontier_figure(result: Result, baselines: list) -> Figure:
    """A Figure: each frontier point (and baseline) at (us/MB, latency us), the frontier
    as a staircase, lines at the bandwidth bound (dashed) and the latency bound
    (dotted), and the region they rule out shaded. Every point is labelled where no
    label overlaps another or a point (synth.pictures.labels); when the names do not
    all fit, the points carry numbers and the legend, outside the plot, names them."""
    fig, fits = _frontier(result, baselines, numbered=False)
    return fig if fits else _frontier(result, baselines, numbered=True)[0]


def _frontier(result: Result, baselines: list, numbered: bool) -> tuple[Figure, bool]:
    """frontier_figure's Figure, its points labelled with names (or numbers and a key
    in the legend), and whether every label found a clear spot."""
    fig = Figure(figsize=(9.5, 5.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    b = result.bounds
    pts = sorted((schedule_cost(p.schedule).us_per_byte * 1e6,
                  schedule_cost(p.schedule).latency_us, p) for p in result.points)
    base = [(schedule_cost(s).us_per_byte * 1e6, schedule_cost(s).latency_us, name)
            for name, s in baselines]
    xs = [x for x, _, _ in pts] + [x for x, _, _ in base] + [b.us_per_mb]
    ys = [y for _, y, _ in pts] + [y for _, y, _ in base] + [max(b.latency_us, 1e-3)]
    log = max(xs) > 25 * min(xs) or max(ys) > 25 * max(min(ys), 1e-3)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    # the staircase joins the points no other beats in this (the line-rate) model: a
    # frontier chosen in cost model 2 may hold some it dominates, and the line ran back
    sx, sy = _staircase(_undominated([(x, y) for x, y, _ in pts]
                                     + [(x, y) for x, y, _ in base]))
    ax.plot(sx, sy, color="#1f77b4", linewidth=1.2, alpha=0.5, zorder=2)
    for x, y, p in pts:
        ax.scatter([x], [y], s=60, color="#1f77b4", zorder=4,
                   marker="o" if p.proven else "D", edgecolors="black", linewidths=0.6)
    for x, y, name in base:
        ax.scatter([x], [y], s=45, marker="s", color="#bbbbbb", edgecolors="#555555",
                   linewidths=0.6, zorder=3)
    steps = f"{b.steps} step{'' if b.steps == 1 else 's'}"
    bw_line = ax.axvline(b.us_per_mb, color="black", linestyle="--", linewidth=1)
    lat_line = ax.axhline(b.latency_us, color="black", linestyle=":", linewidth=1)
    lo_x, hi_x = ax.get_xlim()
    lo_y, hi_y = ax.get_ylim()
    if log:  # room for labels above and to the right of the points
        hi_x, hi_y = hi_x * (hi_x / lo_x) ** 0.08, hi_y * (hi_y / lo_y) ** 0.08
    else:  # room around the points and the bounds, from 0 when that is near
        lo_x, hi_x = _span(xs)
        lo_y, hi_y = _span(ys + [b.latency_us])
    ax.axvspan(lo_x, b.us_per_mb, color="#eeeeee", zorder=0)
    ax.axhspan(lo_y, b.latency_us, color="#eeeeee", zorder=0)
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    if log:
        _plain_log_ticks(ax.xaxis, lo_x, hi_x)
        _plain_log_ticks(ax.yaxis, lo_y, hi_y)
    ax.set_xlabel("bandwidth cost (us per MB of message; lower is better)")
    ax.set_ylabel("latency (us; lower is better)")
    ax.set_title(f"{_title(result)}: Pareto frontier (line-rate model)", fontsize=11)
    handles = [ax.scatter([], [], s=60, color="#1f77b4", edgecolors="black", marker="o"),
               ax.scatter([], [], s=60, color="#1f77b4", edgecolors="black", marker="D"),
               ax.scatter([], [], s=45, color="#bbbbbb", edgecolors="#555555", marker="s")]
    handles += [bw_line, lat_line]
    labels = ["synthesized, proven optimal", "synthesized", "baseline",
              f"bandwidth bound {b.us_per_mb:.4g} us/MB",
              f"latency bound {b.latency_us:.3g} us ({steps})"]
    names = ([f"S{p.steps} R{p.rounds} C{p.chunks}" for _, _, p in pts]
             + [name for _, _, name in base])
    if numbered:  # the key: a number and a name per point
        handles += [ax.scatter([], [], s=30, color="#1f77b4", edgecolors="black",
                               marker="o" if p.proven else "D") for _, _, p in pts]
        handles += [ax.scatter([], [], s=25, color="#bbbbbb", edgecolors="#555555",
                               marker="s") for _ in base]
        labels += [f"{k + 1}: {name}" for k, name in enumerate(names)]
    fig.legend(handles, labels, loc="outside right upper", fontsize=8,
               ncols=1 if len(labels) <= 26 else 2)
    ax.grid(True, which="both", alpha=0.25)
    colours = ["#1f3f6f"] * len(pts) + ["#555555"] * len(base)
    texts = [str(k + 1) for k in range(len(names))] if numbered else names
    lines = [((b.us_per_mb, lo_y), (b.us_per_mb, hi_y)), ((lo_x, b.latency_us),
                                                          (hi_x, b.latency_us))]
    lines += list(zip(zip(sx, sy), zip(sx[1:], sy[1:])))
    placed = place_labels(ax, [(x, y) for x, y, _ in pts] + [(x, y) for x, y, _ in base],
                          texts, lines=lines, fontsize=8.5,
                          fontweight="bold" if numbered else "normal")
    for t, colour in zip(placed, colours):
        if t is not None:
            t.set_color(colour)
    return fig, all(t is not None for t in placed)


def _staircase(points: list[tuple[float, float]]) -> tuple[list, list]:
    """The frontier's line through points sorted by x: from each point right to the
    next one's x, then down to it."""
    sx, sy = [], []
    for k, (x, y) in enumerate(points):
        sx.append(x)
        sy.append(y)
        if k + 1 < len(points):
            sx.append(points[k + 1][0])
            sy.append(y)
    return sx, sy


def _plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Ticks at 1, 2 and 5 x a power of ten within lo..hi (only the powers of ten when
    those are many), labelled as plain numbers: matplotlib's own label the minor ticks
    of a short log axis too, and "3 x 10^1" and "4 x 10^1" run into each other."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1, 2, 5) if last - first <= 4 else (1,)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in steps
             if lo <= m * 10.0 ** e <= hi]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _span(values: list[float]) -> tuple[float, float]:
    """Axis limits with a margin around `values`; from 0 when 0 is within a third of
    the span below them."""
    lo, hi = min(values), max(values)
    width = max(hi - lo, 0.2 * abs(hi), 1e-9)
    lo, hi = lo - 0.12 * width, hi + 0.15 * width
    return (0.0 if min(values) >= 0 and lo < width / 3 else lo), hi


def line_styles(synthesized: int, baselines: int) -> list[tuple[str, str, str]]:
    """(colour, line style, marker) for each curve, synthesized ones first: solid lines
    for synthesized schedules, dashed for baselines, and within each kind no two alike
    (ten colours, then the next marker)."""
    out = [(SYNTH_COLOURS[k % 10], "-", MARKERS[k // 10 % len(MARKERS)])
           for k in range(synthesized)]
    return out + [(BASE_COLOURS[k % 8], "--", MARKERS[(k // 8 + 1) % len(MARKERS)])
                  for k in range(baselines)]


def time_figure(result: Result, baselines: list, smallest: int = KB, largest: int = GB,
                rows: list | None = None, model: str = "line-rate model") -> Figure:
    """A Figure of two plots against message size (log x, nccl-tests' n): predicted
    time (log y) and algbw, for every frontier point and baseline, and the bound
    (latency bound + bandwidth bound x n) dotted. Times are the alpha-beta model's, or
    those of `rows` (synth.compare.Row: name, kind, time_us) in the cost model `model`
    names. Each curve has its own colour, line style and marker; the legend is beside
    the plots."""
    fig = Figure(figsize=(13, 5.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    t_ax, bw_ax = fig.subplots(1, 2)
    count = 64
    ratio = (largest / smallest) ** (1 / (count - 1))
    sizes = [smallest * ratio ** k for k in range(count)]
    b = result.bounds
    if rows is None:
        named = [(_name(p.schedule), schedule_cost(p.schedule).time_us)
                 for p in result.points]
        named += [(name, schedule_cost(s).time_us) for name, s in baselines]
        mine = len(result.points)
    else:
        named = [(r.name, r.time_us) for r in rows]
        mine = sum(r.kind == "synth" for r in rows)
    styles = line_styles(mine, len(named) - mine)
    for k, ((name, time_us), (colour, style, marker)) in enumerate(zip(named, styles)):
        times = [time_us(n) for n in sizes]
        look = dict(color=colour, linestyle=style, marker=marker, markersize=4.5,
                    markevery=(k % 8, 8), linewidth=1.5, label=name)
        t_ax.plot(sizes, times, **look)
        bw_ax.plot(sizes, [n / t / 1e3 for n, t in zip(sizes, times)], **look)
    bound = [b.latency_us + b.us_per_byte * n for n in sizes]
    t_ax.plot(sizes, bound, ":", color="black", linewidth=1.2, label="bound (line rate)")
    bw_ax.plot(sizes, [n / t / 1e3 for n, t in zip(sizes, bound)], ":", color="black",
               linewidth=1.2)
    ticks = [smallest << k for k in range(0, 64, 2) if smallest << k <= largest]
    for ax in (t_ax, bw_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [format_size(n) for n in ticks], fontsize=8)
        ax.set_xlabel("message size (nccl-tests' n)")
        ax.grid(True, which="major", alpha=0.25)
    t_ax.set_yscale("log")
    t_ax.set_ylabel("predicted time (us)")
    t_ax.set_title("time (lower is better)", fontsize=10)
    bw_ax.set_ylabel("algbw (GB/s)")
    bw_ax.set_title("algorithm bandwidth (higher is better)", fontsize=10)
    entries = len(named) + 1
    fig.legend(*t_ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8,
               ncols=1 if entries <= 24 else 2)
    fig.suptitle(f"{_title(result)}: {model}", fontsize=11)
    return fig


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure encoded as `fmt` ("png" or "svg")."""
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    # the same figure, the same bytes: no date, and SVG ids from a fixed salt, not a
    # random one (a folder with no list keeps aside a file that differs: output_folder)
    with glyphs_quiet(), matplotlib.rc_context({"svg.hashsalt": "synth"}):
        fig.savefig(buf, format=fmt, metadata=metadata, facecolor="white")
    return buf.getvalue()


def plot_files(result: Result) -> dict[str, str]:
    """{plot: file stem} of write_plots, e.g. {"frontier": "allgather-frontier"}; a
    rooted collective's carry the root, as its schedule files do (broadcast-root3-time:
    another root's plots replaced them)."""
    root = f"-root{result.root}" if result.root is not None else ""
    return {k: f"{result.collective}{root}-{k}" for k in ("frontier", "time")}


def write_plots(result: Result, baselines: list, directory: str | Path, fmt: str = "png"
                ) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """Write COLLECTIVE-frontier.FMT and COLLECTIVE-time.FMT into `directory` (both or
    neither; a user's file at their names moved aside first, as for the schedules:
    synth.output_folder.write_guarded); returns (their paths, (path, where it went) of
    each file moved aside)."""
    from synth.output_folder import write_guarded

    stems = plot_files(result)
    figures = {"frontier": frontier_figure(result, baselines),
               "time": time_figure(result, baselines)}
    return write_guarded(Path(directory), {f"{stems[k]}.{fmt}": figure_bytes(fig, fmt)
                                           for k, fig in figures.items()})
