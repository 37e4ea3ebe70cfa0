"""Graphviz picture of a topology: GPUs, NVSwitches, PCIe switches, NICs, network
switches, and links labelled lanes x GB/s.

    topology_graph(topo)   -> graphviz.Digraph (write it with synth.pictures.graphviz.render)

A topology with GPU-to-GPU links (dgx1, ring:8, torus:4x4, ...) is placed here and drawn
by `neato -n2`: each box's GPUs at synth.pictures.graphviz.rank_positions, its switches
and NICs outside them, one ring further out per hop, boxes side by side in outlines,
network switches below. A switched cluster, or a switched box of more than MAX_ROW GPUs
(gb200nvl72), is placed too: each box's GPUs in rows in rank order, each NIC under its
GPU, the switches above, the boxes in rows in rank order, network switches below. A
single switched box goes to `dot`, which puts NVSwitches above the GPUs and PCIe
switches, NICs and network switches below them.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter, defaultdict

import graphviz

from synth.pictures.graphviz import FONT, _html, rank_positions
from synth.topology.fabric import tier_of
from synth.topology.physical import GPU, NIC, Topology

# kind -> (shape, fill, level): level orders dot's ranks, top to bottom
KIND_STYLE = {
    "nvswitch": ("hexagon", "#9ecae1", 0),
    GPU: ("box", "#c7e9c0", 1),
    "pcie_switch": ("ellipse", "#e0e0e0", 2),
    NIC: ("box", "#fdd0a2", 3),
    "net_switch": ("octagon", "#dadaeb", 4),
}
KIND_WORDS = {"nvswitch": "blue hexagon: NVSwitch", GPU: "green box: GPU (its rank below)",
              "pcie_switch": "grey ellipse: PCIe switch", NIC: "orange box: NIC",
              "net_switch": "purple octagon: network switch"}


def topology_graph(topo: Topology) -> graphviz.Digraph:
    """The physical topology: every vertex, and each link labelled lanes x GB/s.

    A link whose two directions have the same lanes and bandwidth is one line; other
    links are arrows. Pen width grows with the link's bandwidth. GPU nodes are named as
    in the topology and labelled with their rank.
    """
    gpus = set(topo.gpus)
    placed = any(l.src in gpus and l.dst in gpus for l in topo.links)
    per_box = Counter(v.box for v in topo.vertices if v.kind == GPU)
    gridded = not placed and (max(per_box.values(), default=0) > MAX_ROW or topo.boxes > 1)
    g = graphviz.Digraph(topo.name, engine="neato" if placed or gridded else "dot")
    hubs = _hubs(topo) if gridded else {}
    g.attr(label=f"<{_caption(topo, hubs)}>", labelloc="t", fontname=FONT, fontsize="16",
           bgcolor="white", pad="0.3")
    g.attr("node", fontname=FONT, fontsize="12", style="filled", penwidth="1.2")
    g.attr("edge", fontname=FONT, fontsize="11", fontcolor="#333333", color="#555555",
           arrowsize="0.7")
    pos = None
    if placed or gridded:  # box outlines are nodes, which spline routing would steer around
        g.attr(splines="line" if topo.boxes > 1 or gridded else "true",
               outputorder="edgesfirst")
        pos = _placed_positions(topo) if placed else _grid_positions(topo)
    else:
        g.attr(rankdir="TB", nodesep="0.25", ranksep="0.9", newrank="true")
    _add_vertices(g, topo, pos)
    tiers = tier_of(topo)  # a fabric's tiers of switches, each a row (none: one row)
    level = {v.name: KIND_STYLE[v.kind][2] + (tiers.get(v.name, 1) - 1) / 10
             for v in topo.vertices}
    _add_links(g, topo, level, pos is not None, hubs)
    if pos is None:
        _same_rank_rows(g, topo, level)
    return g


TITLE_WIDTH = 110  # characters a line of a picture's title holds


def _hubs(topo: Topology) -> dict[str, str]:
    """{vertex: its links' one label} for a vertex whose links are all alike and many:
    more than MAX_ROW, or a network switch's (gb200nvl72's NVSwitch: 72 labels 18x50
    piled up between the rows; a cluster's rails crossed every box, labelled)."""
    labels = defaultdict(set)
    for l in topo.links:
        labels[l.src].add(_link_label(l))
        labels[l.dst].add(_link_label(l))
    degree = Counter(l.src for l in topo.links)
    network = {v.name for v in topo.vertices if v.kind == "net_switch"}
    return {v: next(iter(ls)) for v, ls in labels.items()
            if len(ls) == 1 and (degree[v] > MAX_ROW or (v in network and degree[v] > 2))}


def _link_label(l) -> str:
    """A link as its line is labelled: lanes x GB/s, or GB/s for one lane."""
    return f"{l.count}x{l.gbps:g}" if l.count > 1 else f"{l.gbps:g}"


def _hub_words(hubs: dict[str, str]) -> str:
    """The caption's lines for the hubs' links: each label once, with whose they are."""
    by_label = defaultdict(list)
    for v, label in sorted({(re.sub(r"^n\d+\.", "", v), label) for v, label in hubs.items()}):
        by_label[label].append(v)  # each box's once
    return "".join(f"<br/>every link of {_html(', '.join(vs[:4]))}"
                   f"{f' and {len(vs) - 4} more' if len(vs) > 4 else ''}: {label}, drawn light"
                   for label, vs in sorted(by_label.items()))


def _caption(topo: Topology, hubs: dict[str, str] | None = None) -> str:
    """The title, the kinds of vertex drawn, how to read a link, and for an imported
    topology what was inferred; a hub's links are labelled here once (_hubs)."""
    title = (f"{topo.name}: {topo.description}" if topo.description else topo.name)
    kinds = [k for k in KIND_STYLE if any(v.kind == k for v in topo.vertices)]
    # wrapped: an imported box's title, warnings and all, made a PNG 6156 pixels wide
    lines = textwrap.wrap(title, TITLE_WIDTH, break_on_hyphens=False) or [title]
    return ("<br/>".join(_html(line) for line in lines) + "<br/><font point-size='11'>"
            f"{_html('; '.join(KIND_WORDS[k] for k in kinds))}<br/>"
            "edge label: lanes x GB/s per direction (a line: both directions alike; "
            "an arrow: one direction); width grows with bandwidth"
            + _hub_words(hubs or {})
            + ("<br/>imported: dashed outlines and lines are inferred, the rest read "
               f"from {_html(topo.source)}" if topo.source else "") + "</font>")


def _add_vertices(g, topo: Topology, pos: dict | None) -> None:
    """Every vertex, at its place where `pos` gives places; a multi-box topology's
    vertices inside their box (an outline, or a cluster for dot)."""
    rank_of = {name: r for r, name in enumerate(topo.gpus)}

    def short(name: str) -> str:  # a box's vertices are drawn inside its box
        return re.sub(r"^n\d+\.", "", name) if topo.boxes > 1 else name

    def add_vertex(graph, v):
        shape, fill, _ = KIND_STYLE[v.kind]
        attrs = {"shape": shape, "fillcolor": fill, "class": v.kind}
        if v.kind == GPU:
            attrs.update(label=f"{short(v.name)}\nrank {rank_of[v.name]}", style="rounded,filled")
        else:
            attrs["label"] = short(v.name)
            if v.kind == "pcie_switch":
                attrs.update(fontsize="10", height="0.35")
        if pos is not None:
            x, y = pos[v.name]
            attrs["pos"] = f"{x:.1f},{y:.1f}!"
        if v.inferred:  # imported and deduced, not read: dashed, the reason on hover
            attrs.update(style=attrs.get("style", "filled") + ",dashed", tooltip=v.inferred)
        graph.node(v.name, **attrs)

    if topo.boxes > 1:  # placed (_placed_positions, _grid_positions): outlined
        _box_frames(g, topo, pos)
    for v in topo.vertices:
        add_vertex(g, v)


def _add_links(g, topo: Topology, level: dict, placed: bool,
               hubs: dict[str, str] | None = None) -> None:
    """Each link: one undirected line where both directions are alike, else an arrow;
    drawn from the upper level down (dot ranks tails above heads). A hub's (_hubs):
    light, its label in the caption."""
    hubs = hubs or {}
    unit = min((l.bandwidth for l in topo.links), default=1.0)
    link = {(l.src, l.dst): l for l in topo.links}
    done = set()
    for l in topo.links:
        if (l.src, l.dst) in done:
            continue
        back = link.get((l.dst, l.src))
        both = back is not None and (back.gbps, back.count) == (l.gbps, l.count)
        attrs = {"label": _link_label(l), "penwidth": f"{_penwidth(l.bandwidth, unit):.2f}"}
        if l.src in hubs or l.dst in hubs:
            attrs.update(label="", color="#c8c8c8")
        if l.inferred:
            attrs.update(style="dashed", tooltip=l.inferred)
        src, dst = l.src, l.dst
        if both:
            done.add((l.dst, l.src))
            attrs["dir"] = "none"
            if level[src] > level[dst]:  # dot ranks tails above heads
                src, dst = dst, src
        elif level[src] > level[dst]:
            src, dst = dst, src
            attrs["dir"] = "back"
        if level[src] == level[dst] and not placed:
            attrs["constraint"] = "false"
        done.add((l.src, l.dst))
        g.edge(src, dst, **attrs)


def _placed_positions(topo: Topology) -> dict[str, tuple[float, float]]:
    """Points for a topology with GPU-to-GPU links: each box's GPUs on a circle
    (rank_positions), boxes side by side; a switch or NIC goes outside its box's circle
    in the direction of the vertices it links to (at the centre when they surround
    it), one ring further out per hop from the GPUs; network switches below the boxes,
    each box turned so that the vertices linked to them face down."""
    step = 1.6 * 72
    graph = topo.graph().to_undirected()
    box_of = {v.name: v.box for v in topo.vertices}
    pos: dict[str, tuple[float, float]] = {}
    centre: dict[int | None, tuple[float, float]] = {}
    boxes = sorted({v.box for v in topo.vertices if v.box is not None})
    x0 = 0.0
    for b in boxes:
        names = [n for n in topo.gpus if box_of[n] == b]
        local = {n: i for i, n in enumerate(names)}
        pairs = {(local[l.src], local[l.dst]): l.bandwidth for l in topo.links
                 if l.src in local and l.dst in local}
        ring = rank_positions(len(names), pairs, topo.name if len(boxes) == 1 else "",
                              spacing=1.6)
        r = max(math.hypot(x, y) for x, y in ring.values()) or step
        depth = max(_hops_from_gpus(topo, graph, b).values(), default=0)
        half = r + depth * step * 0.8 + step * 0.6
        x0 += half
        centre[b] = (x0, 0.0)
        for n, i in local.items():
            pos[n] = (x0 + ring[i][0], ring[i][1])
        x0 += half
    for b in boxes:
        cx, cy = centre[b]
        r = max(math.hypot(pos[n][0] - cx, pos[n][1] - cy) for n in topo.gpus
                if box_of[n] == b)
        hops = _hops_from_gpus(topo, graph, b)
        for name, d in sorted(hops.items(), key=lambda kv: (kv[1], kv[0])):
            vx = vy = 0.0
            for nb in graph.neighbors(name):
                if nb in pos and box_of[nb] == b:
                    vx += pos[nb][0] - cx
                    vy += pos[nb][1] - cy
            norm = math.hypot(vx, vy)
            if norm < 1e-6 * step:  # surrounded: the centre, or below when further out
                pos[name] = (cx, cy) if d == 1 else (cx, cy - r - d * step * 0.8)
            else:
                out = r + d * step * 0.8
                pos[name] = (cx + vx / norm * out, cy + vy / norm * out)
    outer = [v.name for v in topo.vertices if v.name not in pos]  # network switches
    for b in boxes:  # turn each box so that its way out faces the switches below
        cx, cy = centre[b]
        exits = [u for u in pos if box_of[u] == b
                 and any(nb in outer for nb in graph.neighbors(u))]
        vx = sum(pos[u][0] - cx for u in exits)
        vy = sum(pos[u][1] - cy for u in exits)
        if math.hypot(vx, vy) > 1e-6:
            turn = -math.pi / 2 - math.atan2(vy, vx)
            c, s = math.cos(turn), math.sin(turn)
            for u in [u for u in pos if box_of[u] == b]:
                dx, dy = pos[u][0] - cx, pos[u][1] - cy
                pos[u] = (cx + c * dx - s * dy, cy + s * dx + c * dy)
    if outer:
        low = min(y for _, y in pos.values()) - step
        width = max(x for x, _ in pos.values()) - min(x for x, _ in pos.values())
        left = min(x for x, _ in pos.values())
        for i, name in enumerate(outer):
            pos[name] = (left + width * (i + 1) / (len(outer) + 1), low)
    _spread(pos, step * 0.7)
    return pos


MAX_ROW = 18  # GPUs a row of the drawing holds: gb200nvl72's 72 in one were a strip
# 8158 x 412 pixels


ASPECT = 1.6  # width over height a drawing of boxes in rows aims at


def _grid_positions(topo: Topology) -> dict[str, tuple[float, float]]:
    """Points for a switched cluster, or a switched box too wide for one row: each box
    as _box_grid lays it out, the boxes in rank order in rows of about the square root
    of their count (dot scrambled their order and the GPUs', and made dgxh100x16 a strip
    8153 pixels wide), network switches below in as many rows as their width takes.
    O(vertices + links)."""
    step = 1.3 * 72
    graph = topo.graph().to_undirected()
    box_of = {v.name: v.box for v in topo.vertices}
    # the boxes with GPUs (a vertex of one without goes with the network switches)
    boxes = sorted({box_of[g] for g in topo.gpus}, key=lambda b: (b is None, b or 0))
    layouts = [_box_grid(topo, graph, box_of, b, step) for b in boxes]
    width = max((w for _, w, _ in layouts), default=0.0) + 2 * step
    height = max((h for _, _, h in layouts), default=0.0) + 2 * step
    # as many boxes a row as make the drawing about ASPECT times as wide as it is tall
    cols = min(range(1, len(boxes) + 1), default=1, key=lambda c: abs(math.log(
        c * width / (-(-len(boxes) // c) * height) / ASPECT)))
    pos: dict[str, tuple[float, float]] = {}
    for k, (local, _, _) in enumerate(layouts):
        dx, dy = (k % cols) * width, -(k // cols) * height
        pos.update({n: (x + dx, y + dy) for n, (x, y) in local.items()})
    x0 = min(cols, len(boxes)) * width - 2 * step
    outer = [v.name for v in topo.vertices if v.name not in pos]  # network switches,
    if outer:  # in as many rows under the boxes as their width takes (72 rails: 2)
        low = min(y for _, y in pos.values()) - step
        per_row = max(1, int(x0 // step))
        count = min(per_row, len(outer))
        for i, name in enumerate(outer):
            pos[name] = (x0 * (i % per_row + 1) / (count + 1), low - (i // per_row) * step)
    _spread(pos, step * 0.7)
    return pos


def _box_grid(topo: Topology, graph, box_of: dict, b, step: float
              ) -> tuple[dict[str, tuple[float, float]], float, float]:
    """(points, width, height) of box `b` from its top left: its GPUs in rank order in
    rows of at most MAX_ROW; a vertex of few GPUs (a NIC, a PCIe switch) under them; one
    shared by many (a switch) in a row above."""
    names = [n for n in topo.gpus if box_of[n] == b]
    hops = _hops_from_gpus(topo, graph, b)
    depth = max(hops.values(), default=0)
    rows = -(-len(names) // MAX_ROW)
    per_row = -(-len(names) // rows)
    gap = step * (1.2 + 0.7 * depth)  # room under each row for its NICs
    top = step * 1.2  # the switches' row, above the GPUs
    pos = {n: ((i % per_row) * step, -top - (i // per_row) * gap)
           for i, n in enumerate(names)}
    shared = []
    for name, d in sorted(hops.items(), key=lambda kv: (kv[1], kv[0])):
        near = [pos[nb] for nb in graph.neighbors(name) if nb in pos and box_of[nb] == b]
        if not near or (d == 1 and len(near) > 2):
            shared.append(name)
            continue
        pos[name] = (sum(p[0] for p in near) / len(near),
                     min(p[1] for p in near) - step * 0.8)
    width = (per_row - 1) * step
    for i, name in enumerate(shared):
        pos[name] = (width * (i + 1) / (len(shared) + 1), 0.0)
    return pos, width, -min(y for _, y in pos.values())


def _hops_from_gpus(topo: Topology, graph, box) -> dict[str, int]:
    """Non-GPU vertices of `box` by their hop distance from the box's GPUs."""
    box_of = {v.name: v.box for v in topo.vertices}
    frontier = [n for n in topo.gpus if box_of[n] == box]
    seen = set(frontier)
    out, d = {}, 0
    while frontier:
        d += 1
        nxt = []
        for u in frontier:
            for v in graph.neighbors(u):
                if v not in seen and box_of[v] == box:
                    seen.add(v)
                    out[v] = d
                    nxt.append(v)
        frontier = nxt
    return out


def _spread(pos: dict, gap: float) -> None:
    """Push apart vertices that landed on top of each other (a few sideways passes)."""
    names = sorted(pos)
    for _ in range(20):
        moved = False
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                (ax, ay), (bx, by) = pos[a], pos[b]
                if math.hypot(ax - bx, ay - by) < gap:
                    pos[b] = (bx + gap, by)
                    moved = True
        if not moved:
            return


def _box_frames(g: graphviz.Digraph, topo: Topology, pos: dict) -> None:
    """An outline around each box's vertices, for layouts graphviz does not cluster."""
    for b in sorted({v.box for v in topo.vertices if v.box is not None}):
        pts = [pos[v.name] for v in topo.vertices if v.box == b]
        x1, x2 = min(p[0] for p in pts) - 60, max(p[0] for p in pts) + 60
        y1, y2 = min(p[1] for p in pts) - 40, max(p[1] for p in pts) + 50
        g.node(f"box{b}", label=f"box {b}", shape="box", style="rounded", color="#888888",
               labelloc="t", fixedsize="true", width=f"{(x2 - x1) / 72:.2f}",
               height=f"{(y2 - y1) / 72:.2f}", pos=f"{(x1 + x2) / 2:.1f},{(y1 + y2) / 2:.1f}!",
               fillcolor="none", fontsize="14", **{"class": "box"})




def _same_rank_rows(g: graphviz.Digraph, topo: Topology, level: dict) -> None:
    """One row per level, with invisible edges down the levels so that empty levels
    still keep their order, and along the GPUs to keep them in rank order."""
    rows = defaultdict(list)
    for v in topo.vertices:
        rows[level[v.name]].append(v.name)
    for names in rows.values():
        with g.subgraph() as s:
            s.attr(rank="same")
            for name in names:
                s.node(name)
    for a, b in zip(topo.gpus, topo.gpus[1:]):  # left to right in rank order
        g.edge(a, b, style="invis")
    ordered = [rows[k] for k in sorted(rows)]
    for upper, lower in zip(ordered, ordered[1:]):
        g.edge(upper[0], lower[0], style="invis", weight="0")


def _penwidth(bandwidth: float, unit: float) -> float:
    return min(8.0, 0.8 + 1.2 * math.log2(bandwidth / unit + 1))
