"""Labels beside points in a matplotlib plot that never overlap each other, the points,
or the edge of the plot.

    place_labels(ax, points, texts, avoid) -> [Text or None per label]

Each label tries spots around its point, nearest first (right, above, left, below, then
the diagonals, farther out with a thin leader line), measured in display pixels with
the font's real extent; the first spot that overlaps nothing already placed is taken,
and a leader line crosses no label either (nor does a later label cross it).
A label with no free spot is not drawn (None): the caller then labels with something
shorter (numbers and a key), never with text on text. The figure's layout is fixed
first (a later draw would move the axes and the labels with it).
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

PAD = 2.0  # pixels kept clear around every label
RADII = (5, 12, 22, 36, 54, 78, 108)  # points from the marker's edge to the label
ANGLES = (0, 90, 180, 270, 45, 135, 315, 225, 22.5, 67.5, 112.5, 157.5, 202.5, 247.5,
          292.5, 337.5)
LEADER = 20  # points: a label farther than this gets a line to its point

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@contextmanager
def glyphs_quiet():
    """A name in a script the font lacks is drawn as boxes, without a warning each time
    it is measured or drawn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        yield


def freeze_layout(fig) -> None:
    """Run the layout engine once and keep its result: positions measured now stay."""
    with glyphs_quiet():
        fig.canvas.draw()
    fig.set_layout_engine("none")


def place_labels(ax, points: list[tuple[float, float]], texts: list[str],
                 avoid: list[tuple[float, float]] = (), marker: float = 8.0,
                 lines: list[tuple[tuple[float, float], tuple[float, float]]] = (),
                 **style) -> list:
    """Annotate each data point in `points` with its text at a spot clear of every other
    label, every point in `points` and `avoid` (markers `marker` points wide), the
    horizontal and vertical segments `lines` ((x0, y0), (x1, y1)) and the axes' edge;
    returns each label's Text, or None where no spot was clear."""
    fig = ax.figure
    freeze_layout(fig)
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72  # pixels per point
    frame = ax.get_window_extent(renderer)
    inside = (frame.x0 + PAD, frame.y0 + PAD, frame.x1 - PAD, frame.y1 - PAD)
    anchors = [tuple(ax.transData.transform(p)) for p in points]
    half = marker * px / 2 + PAD
    markers: list[Box] = [(x - half, y - half, x + half, y + half)
                          for x, y in anchors + [tuple(ax.transData.transform(p)) for p in avoid]]
    taken = list(markers)
    for a, b in lines:  # a thin box along each segment (its bounding box: keep them straight)
        (x0, y0), (x1, y1) = ax.transData.transform(a), ax.transData.transform(b)
        taken.append((min(x0, x1) - 1, min(y0, y1) - 1, max(x0, x1) + 1, max(y0, y1) + 1))
    out, labels, leaders = [], [], []
    for (x, y), (dx, dy), text in zip(anchors, points, texts):
        probe = ax.text(0, 0, text, ha="center", va="center", **style)
        with glyphs_quiet():
            box = probe.get_window_extent(renderer)
        probe.remove()
        w, h = box.width + 2 * PAD, box.height + 2 * PAD
        others = labels + [m for m in markers if not (m[0] < x < m[2] and m[1] < y < m[3])]
        spot = _free_spot(x, y, w, h, half, px, inside, taken, others, leaders)
        if spot is None:
            out.append(None)
            continue
        cx, cy, far = spot
        taken.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        labels.append(taken[-1])
        if far:
            leaders.append(((x, y), (cx, cy)))
        leader = {"arrowprops": {"arrowstyle": "-", "color": "#999999", "linewidth": 0.6,
                                 "shrinkA": 0, "shrinkB": 4}} if far else {}
        out.append(ax.annotate(text, (dx, dy), textcoords="offset points",
                               xytext=((cx - x) / px, (cy - y) / px), ha="center",
                               va="center", **leader, **style))
    return out


def _free_spot(x, y, w, h, half, px, inside: Box, taken: list[Box], others: list[Box],
               leaders: list):
    """(centre x, centre y, far) of the first clear spot for a w x h box around (x, y):
    inside, clear of `taken` boxes and of the `leaders` lines, and when far, its own
    leader line clear of the `others` (labels, other points' markers) and of the
    other leaders."""
    for radius in RADII:
        r = half + radius * px
        for angle in ANGLES:
            c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
            # the box's near edge `r` from the point, in the direction of `angle`
            cx = x + c * r + (w / 2 if c > 1e-9 else -w / 2 if c < -1e-9 else 0)
            cy = y + s * r + (h / 2 if s > 1e-9 else -h / 2 if s < -1e-9 else 0)
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if box[0] < inside[0] or box[1] < inside[1] or box[2] > inside[2] \
                    or box[3] > inside[3]:
                continue
            if any(overlaps(box, t) for t in taken) or \
                    any(crosses(line, box) for line in leaders):
                continue
            far = radius > LEADER
            line = ((x, y), (cx, cy))
            if far and (any(crosses(line, t) for t in others)
                        or any(_meet(line, other) for other in leaders)):
                continue
            return cx, cy, far
    return None


def _meet(a, b) -> bool:
    """Whether segments a and b ((x0, y0), (x1, y1)) cross (touching ends do not)."""
    def side(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])
    return (side(*a, b[0]) * side(*a, b[1]) < 0) and (side(*b, a[0]) * side(*b, a[1]) < 0)


def crosses(line, box: Box) -> bool:
    """Whether the segment `line` ((x0, y0), (x1, y1)) passes through `box`
    (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = line
    dx, dy = x1 - x0, y1 - y0
    lo, hi = 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]),
                 (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            lo = max(lo, t)
        else:
            hi = min(hi, t)
        if lo > hi:
            return False
    return True
