"""The first thing an engineer asks of a run: at each message size, how much faster is
the frontier's fastest schedule than the best alternative, and where does that change?

    curve = speedup_curve(candidates, alternatives)   SpeedupCurve over 1 KB .. 4 GB
    speedup_figure(curve, title, words)                its plot, crossings marked
    speedup_words(curve)                               the same in one sentence

`candidates` and `alternatives` map a name to its predicted time in us for n bytes
(nccl-tests' n). The report passes the frontier's points as candidates, and NCCL as it
runs there (synth.predict.nccl, cost model 2) and the baselines as alternatives, all in
one cost model. A crossing is where the speed-up passes 1: found on a grid of sizes,
then to the byte by bisection, so the marks are where the model puts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter

from synth.schedule.cost import format_size

KB, GB = 1 << 10, 1 << 30
PER_OCTAVE = 4  # sizes on the grid per doubling
TIE = 1e-9  # a speed-up within this of 1 is no speed-up (a frontier point that is a baseline)

TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8,
         12, 16, 24, 32, 50, 100, 200, 500, 1000)  # speed-ups the y axis may label
Times = dict[str, Callable[[int], float]]


@dataclass(frozen=True)
class Crossing:
    nbytes: int  # the first size on the far side
    rising: bool  # True: from here on the frontier is faster; False: from here on not


@dataclass(frozen=True)
class SpeedupCurve:
    sizes: list[int]
    speedup: list[float]  # best alternative's time / fastest candidate's, per size
    fastest: list[str]  # the candidate fastest at each size
    alternative: list[str]  # the alternative fastest at each size
    crossings: list[Crossing]
    over: dict[str, list[float]]  # the speed-up over each alternative named in `lines`


def size_grid(smallest: int = KB, largest: int = 4 * GB) -> list[int]:
    """PER_OCTAVE sizes per doubling from `smallest` to `largest`, both included."""
    octaves = (largest // smallest).bit_length() - 1 if largest > smallest else 0
    count = octaves * PER_OCTAVE
    out = [round(smallest * 2 ** (k / PER_OCTAVE)) for k in range(count + 1)]
    return sorted(set(out[:-1] + [largest]))


def _best(times: Times, n: int) -> tuple[str, float]:
    return min(((name, f(n)) for name, f in times.items()), key=lambda x: x[1])


def _ratio(candidates: Times, alternatives: Times, n: int) -> float:
    return _best(alternatives, n)[1] / _best(candidates, n)[1]


def _faster(ratio: float) -> bool:
    return ratio > 1 + TIE


def speedup_curve(candidates: Times, alternatives: Times, sizes: list[int] | None = None,
                  lines: tuple[str, ...] = ()) -> SpeedupCurve:
    """The speed-up of the fastest candidate over the fastest alternative at each size
    (default size_grid()), where it crosses 1 (to the byte), and the speed-up over each
    alternative named in `lines` alone (e.g. NCCL's)."""
    if not candidates or not alternatives:
        raise ValueError("a speed-up needs a candidate and an alternative")
    sizes = sizes or size_grid()
    fastest = [_best(candidates, n) for n in sizes]
    alt = [_best(alternatives, n) for n in sizes]
    ratio = [a[1] / f[1] for f, a in zip(fastest, alt)]
    crossings = []
    for k in range(1, len(sizes)):
        if _faster(ratio[k - 1]) != _faster(ratio[k]):
            crossings.append(_crossing(candidates, alternatives, sizes[k - 1], sizes[k]))
    over = {name: [alternatives[name](n) / f[1] for n, f in zip(sizes, fastest)]
            for name in lines if name in alternatives}
    return SpeedupCurve(sizes, ratio, [f[0] for f in fastest], [a[0] for a in alt],
                        crossings, over)


def _crossing(candidates: Times, alternatives: Times, lo: int, hi: int) -> Crossing:
    """The first size after `lo` on `hi`'s side of 1, by bisection (lo and hi differ)."""
    side = _faster(_ratio(candidates, alternatives, hi))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _faster(_ratio(candidates, alternatives, mid)) == side:
            hi = mid
        else:
            lo = mid
    return Crossing(hi, side)


def about(nbytes: float) -> str:
    """A size in binary units, to 2-3 figures: 1 KB, 3.2 MB, 4 GB."""
    for unit, scale in (("GB", GB), ("MB", 1 << 20), ("KB", KB)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def down(ratio: float) -> str:
    """A speed-up rounded down to 2 decimals: never shown larger than it is."""
    return f"{math.floor(ratio * 100) / 100:.2f}"


def speedup_words(curve: SpeedupCurve) -> str:
    """Where the frontier is faster, by how much at most, at both ends, and where it
    crosses; speed-ups rounded down."""
    wins = [k for k, r in enumerate(curve.speedup) if _faster(r)]
    span = f"{about(curve.sizes[0])} to {about(curve.sizes[-1])}"
    ends = (f"{down(curve.speedup[0])} x at {about(curve.sizes[0])}, "
            f"{down(curve.speedup[-1])} x at {about(curve.sizes[-1])}")
    if not wins:
        return (f"From {span} no frontier point is faster than the best alternative "
                f"({ends}; at {about(curve.sizes[-1])} the best is {curve.alternative[-1]}).")
    top = max(wins, key=lambda k: curve.speedup[k])
    # the ranges end at the crossings, found exactly (the grid's sizes said 1 KB..609 KB
    # beside a crossing at 642 KB)
    spans, start = [], curve.sizes[0] if _faster(curve.speedup[0]) else None
    for c in sorted(curve.crossings, key=lambda c: c.nbytes):
        if c.rising:
            start = c.nbytes
        elif start is not None:
            spans.append((start, c.nbytes - 1))
            start = None
    if start is not None:
        spans.append((start, curve.sizes[-1]))
    ranges = [about(a) if about(a) == about(b) else f"{about(a)}..{about(b)}"
              for a, b in spans]
    return (f"The fastest frontier point beats the best alternative at "
            f"{', '.join(ranges)} (of {span}), by up to {down(curve.speedup[top])} x at "
            f"{about(curve.sizes[top])} ({curve.fastest[top]} against "
            f"{curve.alternative[top]}); {ends}; crossings: "
            + (", ".join(f"{about(c.nbytes)} ({'faster' if c.rising else 'not faster'} "
                         "from there)" for c in curve.crossings) or "none") + ".")


def speedup_figure(curve: SpeedupCurve, title: str, model: str) -> Figure:
    """Speed-up against message size (log x, log y): the curve over the best
    alternative, thin curves over the alternatives in `curve.over`, 1 x as a line, the
    region above it shaded, and each crossing marked with its size."""
    fig = Figure(figsize=(10, 4.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = curve.sizes
    ax.plot(xs, curve.speedup, "-", color="#1f77b4", linewidth=2.4,
            label="over the best alternative", zorder=4)
    styles = [("#d62728", "--"), ("#7f7f7f", ":"), ("#2ca02c", "-.")]
    for (name, ys), (colour, style) in zip(curve.over.items(), styles * 4):
        ax.plot(xs, ys, style, color=colour, linewidth=1.3, label=f"over {name} alone",
                zorder=3)
    ax.axhline(1.0, color="black", linewidth=1)
    every = curve.speedup + [y for ys in curve.over.values() for y in ys]
    lo, hi = min(every + [1.0]), max(every + [1.0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(lo / 1.15, hi * 1.25)
    ax.axhspan(1.0, hi * 1.25, color="#e5f5e0", zorder=0)
    for c in curve.crossings:
        ax.axvline(c.nbytes, color="#444444", linestyle="--", linewidth=0.9, zorder=2)
        ax.plot([c.nbytes], [1.0], "o", color="black", markersize=6, zorder=5)
        ax.annotate(about(c.nbytes), (c.nbytes, 1.0), textcoords="offset points",
                    xytext=(4, 6 if c.rising else -14), fontsize=9)
    ticks = [KB << k for k in range(0, 64, 2) if KB << k <= xs[-1] and KB << k >= xs[0]]
    ax.set_xticks(ticks, [format_size(n) for n in ticks], fontsize=8)
    ax.set_xlim(xs[0], xs[-1])
    ax.yaxis.set_major_locator(FixedLocator([t for t in TICKS if lo / 1.15 <= t <= hi * 1.25]))
    ax.yaxis.set_major_formatter(lambda y, _: f"{y:g} x")
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size (nccl-tests' n)")
    ax.set_ylabel("speed-up (higher is better)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{title}: the fastest frontier point's speed-up ({model})", fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(ax.plot([], [], "o", color="black", markersize=6)[0])
    labels.append("crossing 1 x (size marked)")
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    return fig
