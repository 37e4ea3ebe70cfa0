"""Graphviz pictures: the pieces shared by synth.pictures.topology (topology_graph) and
synth.pictures.schedule (schedule_graph).

    render(graph, "x.svg")               -> the Path written (SVG or PNG, by the suffix)
    rank_positions(ranks, pairs, name)   -> {rank: (x, y)}, in points

Pictures with fixed positions (GPU-only topologies such as dgx1, ring:8, torus:4x4, and
every schedule panel) place their ranks with `rank_positions`: a grid for 2-D meshes
and tori, otherwise a circle in the order of a Hamiltonian cycle, so that a ring's links
are the circle's sides; `render` draws them with `neato -n2`, where they are put. Also
here: DrawError, picture_format, render_bytes, palette and small text helpers.

A PNG is drawn at its natural size (never scaled down: a scaled-down drawing's text is
what made big PNGs unreadable) at a resolution chosen from that size (`png_dpi`): up to
MAX_DPI for a small drawing, down to MIN_DPI (a point a pixel: the smallest text, 8
points, still 8 pixels tall) for a big one, within PNG_MAX_SIDE pixels a side and
PNG_MAX_PIXELS in all; a drawing too big for that is refused as a PNG (Unreadable: its
SVG reads at any zoom). An SVG is scaled down to declare at most SVG_MAX_INCHES a side.
"""

from __future__ import annotations

import colorsys
import html
import math
import re
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import graphviz

from synth.errors import BadInput, SynthError
from synth.files import write_atomic

PICTURE_FORMATS = ("svg", "png")
MIN_DPI, MAX_DPI = 72, 144  # a PNG's resolution: a point a pixel at least, two at most
PNG_MAX_SIDE = 8192  # pixels: what browsers and image libraries open without fuss
PNG_MAX_PIXELS = 40_000_000  # 160 MB of memory as RGBA
SVG_MAX_INCHES = 45  # of an SVG: 3240 points, 4320 pixels when rasterized at 96 dpi
FONT = "Helvetica"


class DrawError(SynthError):
    """graphviz is missing or failed: exit code 2, one line."""


class Unreadable(DrawError):
    """A drawing too big for a PNG whose text can be read: exit code 2, one line."""


def picture_format(path: str | Path) -> str:
    """'svg' or 'png' from the file name; BadInput for anything else."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if Path(path).is_dir():
        raise BadInput(f"{path}: a folder; name the picture's file (.svg or .png)")
    if not suffix:
        raise BadInput(f"{path}: no picture type (name a file ending in .svg or .png)")
    if suffix not in PICTURE_FORMATS:
        raise BadInput(f"{path}: unknown picture type '.{suffix}' (expected .svg or .png)")
    return suffix


def png_dpi(width: float, height: float) -> float | None:
    """The resolution of a PNG of a drawing `width` x `height` inches: MAX_DPI for a
    small one, less for a bigger one so that it keeps within PNG_MAX_SIDE and
    PNG_MAX_PIXELS; None where that would take it under MIN_DPI (unreadable)."""
    dpi = min(MAX_DPI, PNG_MAX_SIDE / max(width, height, 1e-3),
              math.sqrt(PNG_MAX_PIXELS / max(width * height, 1e-6)))
    return dpi if dpi >= MIN_DPI else None


def drawing_inches(graph: graphviz.Digraph) -> tuple[float, float]:
    """The laid-out drawing's natural width and height, in inches."""
    first = _pipe(graph, "plain").split(b"\n", 1)[0].split()  # graph SCALE WIDTH HEIGHT
    return float(first[2]), float(first[3])


def render_bytes(graph: graphviz.Digraph, fmt: str) -> bytes:
    """The picture as bytes in `fmt` (svg or png), laid out by the graph's engine; a PNG
    at its natural size, at png_dpi (Unreadable when none is readable)."""
    graph = graph.copy()
    if fmt == "png":
        width, height = drawing_inches(graph)
        dpi = png_dpi(width + 1, height + 1)  # + the margin graphviz adds
        if dpi is None:
            raise Unreadable(f"the drawing is {width:.0f} x {height:.0f} inches: a PNG whose "
                             f"text can be read ({MIN_DPI} dpi at least) would be over "
                             f"{PNG_MAX_SIDE} pixels a side or {PNG_MAX_PIXELS // 10 ** 6} "
                             "megapixels; write .svg instead")
        graph.attr(dpi=f"{dpi:.2f}")
    else:  # a vector picture still zooms; its declared size is what a rasterizer fills
        graph.attr(size=f"{SVG_MAX_INCHES},{SVG_MAX_INCHES}")
    return _pipe(graph, fmt)


def _pipe(graph: graphviz.Digraph, fmt: str) -> bytes:
    no_op = 2 if graph.engine == "neato" else False
    try:
        return graph.pipe(format=fmt, neato_no_op=no_op, quiet=True)
    except graphviz.ExecutableNotFound:
        raise DrawError("drawing needs graphviz's 'dot' program (Debian package graphviz)"
                        ) from None
    except graphviz.CalledProcessError as e:
        lines = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise DrawError(f"graphviz failed: {lines[-1] if lines else e}") from None


def render(graph: graphviz.Digraph, path: str | Path) -> Path:
    """Render to `path` (.svg or .png), written whole or not at all; returns the path."""
    return write_atomic(path, render_bytes(graph, picture_format(path)))


# --- positions ----------------------------------------------------------------------

def rank_positions(ranks: int, pairs: dict, name: str = "", spacing: float = 1.2
                   ) -> dict[int, tuple[float, float]]:
    """Points (x, y), in points, for ranks 0..ranks-1.

    A 2-D mesh or torus by name ("torus:4x4") is a grid, rows bent a little so that a
    wrap-around link passes beside the row, not through it; anything else is a circle
    in the order of a Hamiltonian cycle of `pairs` ({(a, b): width}) when one is found
    quickly, preferring wide links (the circle's sides are then links), else in rank
    order. `spacing` is the distance
    between neighbours in inches.
    """
    step = spacing * 72
    grid = re.fullmatch(r"(?:mesh|torus):(\d+)x(\d+)", name)
    if grid and int(grid.group(1)) * int(grid.group(2)) == ranks:
        rows, cols = int(grid.group(1)), int(grid.group(2))
        bend = 0.45 if name.startswith("torus") else 0.0

        def bump(k, n):
            return math.sin(math.pi * k / (n - 1)) if n > 2 else 0.0

        return {r * cols + c: ((c + bend * bump(r, rows)) * step,
                               -(r + bend * bump(c, cols)) * step)
                for r in range(rows) for c in range(cols)}
    order = hamiltonian_cycle(ranks, pairs) or list(range(ranks))
    radius = max(step * 0.9, ranks * step / (2 * math.pi))
    out = {}
    for i, r in enumerate(order):
        angle = math.pi / 2 - 2 * math.pi * i / ranks  # clockwise from the top
        out[r] = (radius * math.cos(angle), radius * math.sin(angle))
    return out


def hamiltonian_cycle(ranks: int, pairs: dict, budget: int = 20000) -> list[int] | None:
    """A cycle through every rank over `pairs` ({(a, b): width}, either direction
    counts), found by a depth-first search that tries wide links first, within `budget`
    extensions; None when none is found."""
    if ranks < 3:
        return None
    adjacent = defaultdict(Counter)
    for (a, b), width in pairs.items():
        if a != b:
            adjacent[a][b] += float(width)
            adjacent[b][a] += float(width)
    path, seen, left = [0], {0}, [budget]

    def extend() -> bool:
        if len(path) == ranks:
            return 0 in adjacent[path[-1]]
        for nxt in sorted(adjacent[path[-1]], key=lambda r: (-adjacent[path[-1]][r], r)):
            if nxt in seen:
                continue
            left[0] -= 1
            if left[0] < 0:
                return False
            path.append(nxt)
            seen.add(nxt)
            if extend():
                return True
            path.pop()
            seen.discard(nxt)
        return False

    return path if extend() else None


# --- colours and text ---------------------------------------------------------------

_BASE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
         "#e377c2", "#7f7f7f", "#bcbd22"]


def palette(n: int) -> list[str]:
    """n distinct, dark enough colours (readable as text on white)."""
    return [palette_colour(i, n) for i in range(n)]


def palette_colour(i: int, n: int) -> str:
    """palette(n)[i], without building the list (a schedule may have 10^5 chunks)."""
    if n <= len(_BASE):
        return _BASE[i]
    hue = (i * 0.618033988749895) % 1.0
    value = 0.75 if i % 2 else 0.6
    r, g, b = colorsys.hsv_to_rgb(hue, 0.85, value)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _fraction(x: Fraction) -> str:
    return str(int(x)) if x.denominator == 1 else f"{float(x):.3g}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _html(text: str) -> str:
    return html.escape(text, quote=False)


def mix(a: str, b: str, t: float) -> str:
    """The colour t of the way from a to b (#rrggbb)."""
    ca = [int(a[k:k + 2], 16) for k in (1, 3, 5)]
    cb = [int(b[k:k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))


def point(p) -> str:
    return f"{p[0]:.1f},{p[1]:.1f}"


def text_width(text: str, size: float = 10.0) -> float:
    """About how wide Helvetica draws `text`, in points."""
    return sum(0.28 if ch == " " else 0.56 for ch in text) * size
