"""Where each arrow's label goes in a schedule drawing (synth.pictures.schedule): beside
its curve, where it overlaps the ranks and the labels placed before it least.

    place_arrow_labels(arrows, nodes, node_half) -> [(x, y)], one spot per arrow

Cost: 18 candidate spots per arrow, each compared only with the boxes in the grid
cells it covers (_Boxes), so about linear in the arrows of a panel.
"""

from __future__ import annotations

import math

LABEL_H = 12.0


def place_arrow_labels(arrows, nodes, node_half: float, bounds=None
                       ) -> list[tuple[float, float]]:
    """A spot for each arrow's label ((curve, width) pairs, in order; a curve is its
    start, two control points, end and tip): beside its curve, outside first, at the
    middle first, wherever it overlaps the nodes (squares of half side `node_half`
    about each centre in `nodes`) and the labels already placed least; within `bounds`
    (x0, y0, x1, y1: the panel), where given, first of all, and moved inside where no
    spot beside the curve is (labels printed over the next panel)."""
    boxes = _Boxes()  # centre x, y, half w, half h: the nodes, then the labels
    for x, y in nodes:
        boxes.add((x, y, node_half, node_half))
    out = []
    for (start, c1, c2, end, _), width in arrows:
        dx, dy = end[0] - start[0], end[1] - start[1]
        d = math.hypot(dx, dy) or 1.0
        nx_, ny_ = -dy / d, dx / d
        hw, hh = width / 2 + 1, LABEL_H / 2
        off = 3.0 + abs(nx_) * hw + abs(ny_) * hh
        best = None
        rank = 0
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78, 0.15, 0.85):
            u = 1 - t
            px = u ** 3 * start[0] + 3 * u * u * t * c1[0] + 3 * u * t * t * c2[0] + t ** 3 * end[0]
            py = u ** 3 * start[1] + 3 * u * u * t * c1[1] + 3 * u * t * t * c2[1] + t ** 3 * end[1]
            for side in (1, -1):
                spot = (px + side * nx_ * off, py + side * ny_ * off)
                score = (_outside(spot, hw, hh, bounds),
                         boxes.overlap((spot[0], spot[1], hw, hh)), rank)
                rank += 1
                if best is None or score < best[0]:
                    best = (score, spot)
        spot = _inside(best[1], hw, hh, bounds)
        out.append(spot)
        boxes.add((spot[0], spot[1], hw, hh))
    return out


def _outside(spot, hw: float, hh: float, bounds) -> float:
    """How far a label at `spot` reaches past `bounds` (0: inside, or no bounds)."""
    if bounds is None:
        return 0.0
    x0, y0, x1, y1 = bounds
    return (max(0.0, x0 - (spot[0] - hw)) + max(0.0, spot[0] + hw - x1)
            + max(0.0, y0 - (spot[1] - hh)) + max(0.0, spot[1] + hh - y1))


def _inside(spot, hw: float, hh: float, bounds):
    """`spot` moved the least way that keeps its label within `bounds`."""
    if bounds is None:
        return spot
    x0, y0, x1, y1 = bounds
    x = min(max(spot[0], x0 + hw), x1 - hw) if x1 - x0 >= 2 * hw else (x0 + x1) / 2
    y = min(max(spot[1], y0 + hh), y1 - hh) if y1 - y0 >= 2 * hh else (y0 + y1) / 2
    return (x, y)


class _Boxes:
    """Boxes (centre x, centre y, half w, half h) filed by the grid cells they cover, so
    that a box's overlap with all of them looks only at its neighbours (each label
    compared with every other took 20 s on a 64-rank panel of thousands of arrows). The
    sum runs over the boxes in the order they were added, as a sum over all would."""

    CELL = 64.0

    def __init__(self):
        self.boxes: list[tuple[float, float, float, float]] = []
        self.cells: dict[tuple[int, int], list[int]] = {}

    def _cells(self, b):
        def span(centre, half):
            return range(math.floor((centre - half) / self.CELL),
                         math.floor((centre + half) / self.CELL) + 1)

        return [(i, j) for i in span(b[0], b[2]) for j in span(b[1], b[3])]

    def add(self, b) -> None:
        for cell in self._cells(b):
            self.cells.setdefault(cell, []).append(len(self.boxes))
        self.boxes.append(b)

    def overlap(self, b) -> float:
        near = sorted({k for cell in self._cells(b) for k in self.cells.get(cell, ())})
        return sum(_overlap(b, self.boxes[k]) for k in near)


def _overlap(p, q) -> float:
    """Overlapping area of two boxes given as (centre x, centre y, half w, half h)."""
    w = min(p[0] + p[2], q[0] + q[2]) - max(p[0] - p[2], q[0] - q[2])
    h = min(p[1] + p[3], q[1] + q[3]) - max(p[1] - p[3], q[1] - q[3])
    return w * h if w > 0 and h > 0 else 0.0
