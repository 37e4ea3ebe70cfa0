"""Plots of a frontier with matplotlib (the Agg backend; no display needed).

    frontier_figure(result, baselines)   latency against bandwidth cost, the bounds marked
    time_figure(result, baselines)       predicted time and algbw against message size
    write_plots(result, baselines, dir)  both, as PNG files; returns their paths

`result` is a synth.frontier.Result, `baselines` a list of (name, Schedule). Every
curve uses synth.schedule.cost's alpha-beta model, as `synth compare` does.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from synth.files import write_atomic
from synth.frontier import Result
from synth.schedule.cost import format_size, schedule_cost

SYNTH_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
                 "#8c564b", "#e377c2"]
BASE_COLOURS = ["#7f7f7f", "#bcbd22", "#8c564b", "#e377c2", "#17becf", "#aec7e8",
                "#ffbb78", "#98df8a"]
KB, GB = 1 << 10, 1 << 30


def _name(schedule) -> str:
    return f"synth S{schedule.num_steps} R{schedule.rounds} C{schedule.collective.chunks}"


def _title(result: Result) -> str:
    root = f" (root {result.root})" if result.root is not None else ""
    return f"{result.collective}{root} on {result.model.name} ({result.model.ranks} ranks)"


def frontier_figure(result: Result, baselines: list) -> Figure:
    """A Figure: each frontier point (and baseline) at (us/MB, latency us), the frontier
    as a staircase, lines at the bandwidth bound (dashed) and the latency bound
    (dotted), and the region they rule out shaded."""
    fig = Figure(figsize=(8, 5.5), dpi=110, layout="constrained")
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
    if pts:  # the frontier: from each point right to the next one's latency
        sx, sy = [], []
        for k, (x, y, _) in enumerate(pts):
            sx += [x]
            sy += [y]
            if k + 1 < len(pts):
                sx += [pts[k + 1][0]]
                sy += [y]
        ax.plot(sx, sy, color="#1f77b4", linewidth=1.2, alpha=0.5, zorder=2)
    for k, (x, y, p) in enumerate(pts):
        ax.scatter([x], [y], s=60, color="#1f77b4", zorder=4,
                   marker="o" if p.proven else "D", edgecolors="black", linewidths=0.6)
        ax.annotate(f"S{p.steps} R{p.rounds} C{p.chunks}", (x, y), textcoords="offset points",
                    xytext=(7, 6), fontsize=9, color="#1f3f6f")
    for x, y, name in base:
        ax.scatter([x], [y], s=45, marker="s", color="#bbbbbb", edgecolors="#555555",
                   linewidths=0.6, zorder=3)
    steps = f"{b.steps} step{'' if b.steps == 1 else 's'}"
    bw_line = ax.axvline(b.us_per_mb, color="black", linestyle="--", linewidth=1)
    lat_line = ax.axhline(b.latency_us, color="black", linestyle=":", linewidth=1)
    lo_x, hi_x = ax.get_xlim()
    lo_y, hi_y = ax.get_ylim()
    if not log:  # room around the points and the bounds, from 0 when that is near
        lo_x, hi_x = _span(xs)
        lo_y, hi_y = _span(ys + [b.latency_us])
    ax.axvspan(lo_x, b.us_per_mb, color="#eeeeee", zorder=0)
    ax.axhspan(lo_y, b.latency_us, color="#eeeeee", zorder=0)
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    right = ax.transData.inverted().transform(ax.transAxes.transform((0.7, 0)))[0]
    for x, y, name in base:  # below their points (synthesized ones are labelled above);
        left = x > right     # far right: to the left of them
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(-7 if left else 7, -12),
                    ha="right" if left else "left", fontsize=8, color="#555555")
    ax.set_xlabel("bandwidth cost (us per MB of message; lower is better)")
    ax.set_ylabel("latency (us; lower is better)")
    ax.set_title(f"{_title(result)}: Pareto frontier", fontsize=11)
    handles = [ax.scatter([], [], s=60, color="#1f77b4", edgecolors="black", marker="o"),
               ax.scatter([], [], s=60, color="#1f77b4", edgecolors="black", marker="D"),
               ax.scatter([], [], s=45, color="#bbbbbb", edgecolors="#555555", marker="s")]
    handles += [bw_line, lat_line]
    ax.legend(handles, ["synthesized, proven optimal", "synthesized", "baseline",
                        f"bandwidth bound {b.us_per_mb:.4g} us/MB",
                        f"latency bound {b.latency_us:.3g} us ({steps})"],
              loc="best", fontsize=8, framealpha=0.9)
    ax.grid(True, which="both", alpha=0.25)
    return fig


def _span(values: list[float]) -> tuple[float, float]:
    """Axis limits with a margin around `values`; from 0 when 0 is within a third of
    the span below them."""
    lo, hi = min(values), max(values)
    width = max(hi - lo, 0.2 * abs(hi), 1e-9)
    lo, hi = lo - 0.12 * width, hi + 0.15 * width
    return (0.0 if min(values) >= 0 and lo < width / 3 else lo), hi


def time_figure(result: Result, baselines: list, smallest: int = KB, largest: int = GB
                ) -> Figure:
    """A Figure of two plots against message size (log x, nccl-tests' n): predicted
    time (log y) and algbw, for every frontier point and baseline, and the bound
    (latency bound + bandwidth bound x n) dashed."""
    fig = Figure(figsize=(12, 5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    t_ax, bw_ax = fig.subplots(1, 2)
    count = 64
    ratio = (largest / smallest) ** (1 / (count - 1))
    sizes = [smallest * ratio ** k for k in range(count)]
    b = result.bounds
    curves = [(_name(p.schedule), schedule_cost(p.schedule), SYNTH_COLOURS[k % 8], "-")
              for k, p in enumerate(result.points)]
    curves += [(name, schedule_cost(s), BASE_COLOURS[k % 8], "--")
               for k, (name, s) in enumerate(baselines)]
    for name, cost, colour, style in curves:
        t_ax.plot(sizes, [cost.time_us(n) for n in sizes], style, color=colour, label=name,
                  linewidth=1.6)
        bw_ax.plot(sizes, [cost.algbw_gbps(n) for n in sizes], style, color=colour,
                   label=name, linewidth=1.6)
    bound = [b.latency_us + b.us_per_byte * n for n in sizes]
    t_ax.plot(sizes, bound, ":", color="black", linewidth=1.2, label="bound")
    bw_ax.plot(sizes, [n / t / 1e3 for n, t in zip(sizes, bound)], ":", color="black",
               linewidth=1.2, label="bound")
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
    bw_ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.suptitle(f"{_title(result)}: alpha-beta model", fontsize=11)
    return fig


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure encoded as `fmt` ("png" or "svg")."""
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    with warnings.catch_warnings():  # a name in a script the font lacks: boxes, not noise
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(buf, format=fmt, metadata=metadata, facecolor="white")
    return buf.getvalue()


def plot_files(result: Result) -> dict[str, str]:
    """{plot: file stem} of write_plots, e.g. {"frontier": "allgather-frontier"}."""
    return {k: f"{result.collective}-{k}" for k in ("frontier", "time")}


def write_plots(result: Result, baselines: list, directory: str | Path,
                fmt: str = "png") -> list[Path]:
    """Write COLLECTIVE-frontier.FMT and COLLECTIVE-time.FMT into `directory` (each
    whole or not at all); returns their paths."""
    directory = Path(directory)
    stems = plot_files(result)
    figures = {"frontier": frontier_figure(result, baselines),
               "time": time_figure(result, baselines)}
    return [write_atomic(directory / f"{stems[k]}.{fmt}", figure_bytes(fig, fmt))
            for k, fig in figures.items()]
