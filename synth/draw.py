"""Graphviz pictures: a topology, and a schedule step by step.

    topology_graph(topo)                 -> graphviz.Digraph of GPUs, switches, NICs, links
    schedule_graph(schedule, "chunk")    -> graphviz.Digraph, one panel per step
    render(graph, "x.svg")               -> the Path written (SVG or PNG, by the suffix)

Layouts: a topology with switches or NICs goes to `dot`, which puts NVSwitches above
the GPUs and PCIe switches, NICs and network switches below them; the boxes of a
multi-node topology are graphviz clusters, alternately above and below the network
switches. GPU-only topologies (dgx1, ring:8, torus:4x4, ...) and every schedule panel
use fixed positions (`rank_positions`: a grid for 2-D meshes and tori, otherwise a
circle in the order of a Hamiltonian cycle, so that a ring's links are the circle's
sides) and `neato -n2`, which draws them where they are put.
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
from synth.linkmodel import LinkModel
from synth.schedule import Schedule
from synth.topology import GPU, NIC, Topology

PICTURE_FORMATS = ("svg", "png")
FONT = "Helvetica"

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


class DrawError(SynthError):
    """graphviz is missing or failed: exit code 2, one line."""


def picture_format(path: str | Path) -> str:
    """'svg' or 'png' from the file name; BadInput for anything else."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in PICTURE_FORMATS:
        raise BadInput(f"{path}: unknown picture type '.{suffix}' (expected .svg or .png)")
    return suffix


def render_bytes(graph: graphviz.Digraph, fmt: str) -> bytes:
    """The picture as bytes in `fmt` (svg or png), laid out by the graph's engine."""
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


# --- topologies ---------------------------------------------------------------------

def topology_graph(topo: Topology) -> graphviz.Digraph:
    """The physical topology: every vertex, and each link labelled lanes x GB/s.

    A link whose two directions have the same lanes and bandwidth is one line; other
    links are arrows. Pen width grows with the link's bandwidth. GPU nodes are named as
    in the topology and labelled with their rank.
    """
    gpus = set(topo.gpus)
    placed = any(l.src in gpus and l.dst in gpus for l in topo.links)
    rank_of = {name: r for r, name in enumerate(topo.gpus)}
    title = (f"{topo.name}: {topo.description}" if topo.description else topo.name)
    kinds = [k for k in KIND_STYLE if any(v.kind == k for v in topo.vertices)]
    caption = (f"{_html(title)}<br/><font point-size='11'>"
               f"{_html('; '.join(KIND_WORDS[k] for k in kinds))}<br/>"
               "edge label: lanes x GB/s per direction (a line: both directions alike; "
               "an arrow: one direction); width grows with bandwidth</font>")
    g = graphviz.Digraph(topo.name, engine="neato" if placed else "dot")
    g.attr(label=f"<{caption}>", labelloc="t", fontname=FONT, fontsize="16",
           bgcolor="white", pad="0.3")
    g.attr("node", fontname=FONT, fontsize="12", style="filled", penwidth="1.2")
    g.attr("edge", fontname=FONT, fontsize="11", fontcolor="#333333", color="#555555",
           arrowsize="0.7")
    if placed:  # box outlines are nodes, which spline routing would steer around
        g.attr(splines="line" if topo.boxes > 1 else "true", outputorder="edgesfirst")
        pos = _placed_positions(topo)
    else:
        g.attr(rankdir="TB", nodesep="0.25", ranksep="0.9", newrank="true")

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
        if placed:
            x, y = pos[v.name]
            attrs["pos"] = f"{x:.1f},{y:.1f}!"
        graph.node(v.name, **attrs)

    if topo.boxes > 1 and placed:
        _box_frames(g, topo, pos)
    if topo.boxes > 1 and not placed:
        for b in sorted({v.box for v in topo.vertices if v.box is not None}):
            with g.subgraph(name=f"cluster_box{b}") as c:
                c.attr(label=f"box {b}", style="rounded", color="#888888", fontsize="14",
                       labelloc="b" if b % 2 else "t")
                for v in topo.vertices:
                    if v.box == b:
                        add_vertex(c, v)
        for v in topo.vertices:
            if v.box is None:
                add_vertex(g, v)
    else:
        for v in topo.vertices:
            add_vertex(g, v)

    unit = min((l.bandwidth for l in topo.links), default=1.0)
    link = {(l.src, l.dst): l for l in topo.links}
    level = {v.name: _level(topo, v) for v in topo.vertices}
    done = set()
    for l in topo.links:
        if (l.src, l.dst) in done:
            continue
        back = link.get((l.dst, l.src))
        both = back is not None and (back.gbps, back.count) == (l.gbps, l.count)
        label = f"{l.count}x{l.gbps:g}" if l.count > 1 else f"{l.gbps:g}"
        attrs = {"label": label, "penwidth": f"{_penwidth(l.bandwidth, unit):.2f}"}
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
    if not placed:
        _same_rank_rows(g, topo, level)
    return g


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


def _level(topo: Topology, v) -> int:
    """dot's row for a vertex: boxes alternate above (even) and below (odd) the network
    switches, the odd ones upside down, so two boxes stack instead of sitting side by
    side."""
    base = KIND_STYLE[v.kind][2]
    if topo.boxes <= 1 or v.box is None:
        return base
    return base if v.box % 2 == 0 else 8 - base


def _same_rank_rows(g: graphviz.Digraph, topo: Topology, level: dict) -> None:
    """One row per level, with invisible edges down the levels so that empty levels
    still keep their order, and along each box's GPUs to keep them in rank order."""
    rows = defaultdict(list)
    for v in topo.vertices:
        rows[level[v.name]].append(v.name)
    for names in rows.values():
        with g.subgraph() as s:
            s.attr(rank="same")
            for name in names:
                s.node(name)
    box_of = {v.name: v.box for v in topo.vertices}
    by_box = defaultdict(list)
    for name in topo.gpus:
        by_box[box_of[name]].append(name)
    for box, gpus in by_box.items():  # left to right in rank order, box after box
        chain = gpus + by_box.get(box + 2, [])[:1] if box is not None else gpus
        for a, b in zip(chain, chain[1:]):
            g.edge(a, b, style="invis")
    ordered = [rows[k] for k in sorted(rows)]
    for upper, lower in zip(ordered, ordered[1:]):
        g.edge(upper[0], lower[0], style="invis", weight="0")


def _penwidth(bandwidth: float, unit: float) -> float:
    return min(8.0, 0.8 + 1.2 * math.log2(bandwidth / unit + 1))


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


# --- schedules ----------------------------------------------------------------------

COLOR_MODES = ("chunk", "origin")


def palette(n: int) -> list[str]:
    """n distinct, dark enough colours (readable as text on white)."""
    base = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
            "#e377c2", "#7f7f7f", "#bcbd22"]
    if n <= len(base):
        return base[:n]
    out = []
    for i in range(n):
        hue = (i * 0.618033988749895) % 1.0
        value = 0.75 if i % 2 else 0.6
        r, g, b = colorsys.hsv_to_rgb(hue, 0.85, value)
        out.append(f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}")
    return out


def chunk_origin(schedule: Schedule, chunk: int) -> int | None:
    """The rank a chunk starts at; for reductions, where it ends; None when neither is one
    rank (allreduce)."""
    coll = schedule.collective
    for ranks in (coll.holders(chunk), coll.wanters(chunk)):
        if len(ranks) == 1:
            return ranks[0]
    return None


DENSE_LINKS = 64  # a step using more rank links than this (and 4 per rank) is a matrix


def schedule_graph(schedule: Schedule, color: str = "chunk", columns: int | None = None
                   ) -> graphviz.Digraph:
    """One panel per step, tiled in a grid. A panel shows which chunks cross which rank
    link in that step, coloured by chunk (or by the rank the chunk starts at), and each
    used link's load against its capacity x the step's rounds (e.g. "3/4", bold when
    full).

    Sparse schedules are drawn as graphs: the ranks at the same places in every panel
    (node s{i}r{r}, class "rank"), an arrow per used link, bending to its left so that a
    link's two directions never overlap, its label a node of class "load". When some
    step uses more than max(DENSE_LINKS, 4 x ranks) links (a switch's all-to-all), every
    panel is a matrix instead: a row per sending rank, a column per receiving rank.
    Panels are nodes of class "panel" named step0, step1, ...
    """
    if color not in COLOR_MODES:
        raise BadInput(f"unknown colouring '{color}' (expected chunk or origin)")
    coll, model = schedule.collective, schedule.model
    n = coll.ranks
    steps = schedule.steps
    busiest = max((len({(x.src, x.dst) for x in st.sends}) for st in steps), default=0)
    dense = busiest > max(DENSE_LINKS, 4 * n)
    colours, chunk_colour, how = _colouring(schedule, color)
    root = f", root {coll.root}" if coll.root is not None else ""
    title = (f"{coll.name}{root} on {model.name}: {_plural(len(steps), 'step')}, "
             f"{_plural(schedule.rounds, 'round')}, {_plural(coll.chunks, 'chunk')}"
             f" per share ({coll.num_chunks} in all)")
    if dense:
        what = ("row: sending rank, column: receiving rank; a cell lists the chunks sent "
                "and the load / (capacity x rounds), bold when full; shaded: links "
                "(darker: fuller), R: a reduce")
    else:
        what = ("each arrow is labelled with the chunks it carries, then load / (capacity "
                "x rounds), bold when full; dashed: reduce; grey lines: links unused in "
                "the step")
    caption = (f"{_html(title)}<br/><font point-size='11'>{_html(how)}<br/>{what}</font>")
    g = graphviz.Digraph(f"{coll.name}-{model.name}", engine="neato")
    g.attr(label=f"<{caption}>", labelloc="t", fontname=FONT, fontsize="16",
           bgcolor="white", pad="0.3", outputorder="edgesfirst")
    g.attr("node", fontname=FONT, fontsize="12", shape="circle", width=f"{2 * RANK_R / 72}",
           fixedsize="true", style="filled", fillcolor="white", penwidth="1.2")
    g.attr("edge", fontname=FONT, arrowsize="0.7")

    if dense:
        cell = max(30.0, max((_cell_width(schedule, st) for st in steps), default=30.0))
        width = (n + 1) * cell + 40
        height = (n + 1) * 24 + 90
    else:
        pairs = {(l.src, l.dst): l.capacity for l in model.links}
        spacing = 1.3 + 0.5 * min(2.0, max(0.0, busiest / max(n, 1) - 2))  # room for labels
        pos = rank_positions(n, pairs, model.name, spacing=spacing)
        xs = [p[0] for p in pos.values()]
        ys = [p[1] for p in pos.values()]
        shift = ((max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2)
        pos = {r: (x - shift[0], y - shift[1]) for r, (x, y) in pos.items()}
        width = max(xs) - min(xs) + 160
        height = max(ys) - min(ys) + 160 + 40  # + the panel's title
    if columns is None:
        columns = panel_columns(len(steps), 4 if n <= 8 and not dense else 3)
    gap = 24.0
    for i, step in enumerate(steps):
        col, row = i % columns, i // columns
        centre = (col * (width + gap) + width / 2, -row * (height + gap) - height / 2)
        g.node(f"step{i}", label=f"<{_panel_title(schedule, i)}>", shape="box",
               style="rounded", fixedsize="true", width=f"{width / 72:.3f}",
               height=f"{height / 72:.3f}", labelloc="t", fontsize="13", color="#999999",
               fillcolor="none", pos=_point(centre) + "!", **{"class": "panel"})
        inner = (centre[0], centre[1] - 20)  # below the title
        if dense:
            g.node(f"s{i}m", label=f"<{_matrix(schedule, step, chunk_colour, cell)}>",
                   shape="plaintext", fixedsize="false", width="0", height="0", margin="0",
                   style="", pos=_point(inner) + "!", **{"class": "matrix"})
        else:
            here = {r: (x + inner[0], y + inner[1]) for r, (x, y) in pos.items()}
            _graph_panel(g, schedule, i, here, colours if color == "origin" else None,
                         chunk_colour)
    return g


def panel_columns(panels: int, widest: int) -> int:
    """Panels per row: all in one row when they fit in `widest`, else `widest` or one
    fewer, whichever leaves fewer empty places in the last row (the wider on a tie)."""
    if panels <= widest:
        return max(panels, 1)
    return min(range(max(2, widest - 1), widest + 1), key=lambda c: (-panels % c, -c))


def _colouring(schedule: Schedule, color: str):
    """(rank colours, {chunk: colour}, words for the caption)."""
    coll = schedule.collective
    if color == "origin":
        origins = {c: chunk_origin(schedule, c) for c in range(coll.num_chunks)}
        if any(o is not None for o in origins.values()):
            colours = palette(coll.ranks)
            return (colours, {c: (colours[o] if o is not None else "#444444")
                              for c, o in origins.items()},
                    "colour: the rank a chunk starts at (reductions: where it ends)")
        how = f"colour: chunk ({coll.name} chunks start at every rank)"
    else:
        how = "colour: chunk"
    colours = palette(coll.num_chunks)
    return palette(coll.ranks), dict(enumerate(colours)), how


def _link_loads(schedule: Schedule, step) -> dict:
    """{(src, dst): (sends, capacity x rounds or None)} for the links a step uses."""
    links = schedule.model.link
    load: dict[tuple[int, int], list] = defaultdict(list)
    for send in step.sends:
        load[(send.src, send.dst)].append(send)
    return {pair: (sends, links[pair].capacity * step.rounds if pair in links else None)
            for pair, sends in sorted(load.items())}


def _load_text(sends, cap, chunk_colour, most: int = 4) -> tuple[str, str]:
    """(HTML label, its plain text): the chunks (at most `most`, then +k) and load/limit."""
    chunks = sorted({x.chunk for x in sends})
    shown = chunks[:most]
    ids = " ".join(f"<font color='{chunk_colour[c]}'>{c}</font>" for c in shown)
    more = f" +{len(chunks) - len(shown)}" if len(chunks) > len(shown) else ""
    used = f"{len(sends)}/{_fraction(cap)}" if cap is not None else f"{len(sends)}/?"
    plain = f"{' '.join(map(str, shown))}{more} {used}"
    if cap is not None and len(sends) >= cap:
        used = f"<b>{used}</b>"
    return f"{ids}{more} {used}", plain


def _graph_panel(g, schedule: Schedule, i: int, here: dict, rank_colours, chunk_colour):
    """Step i as ranks at `here` with an arrow per used link and its label."""
    n = schedule.collective.ranks
    step = schedule.steps[i]
    for r in range(n):
        fill = f"{rank_colours[r]}33" if rank_colours else "white"
        g.node(f"s{i}r{r}", label=str(r), pos=_point(here[r]) + "!", fillcolor=fill,
               **{"class": "rank"})
    loads = _link_loads(schedule, step)
    background = _undirected([(l.src, l.dst) for l in schedule.model.links])
    if len(background) <= 3 * n:
        for a, b in background:
            if (a, b) not in loads and (b, a) not in loads:
                g.edge(f"s{i}r{a}", f"s{i}r{b}", dir="none", color="#dddddd",
                       penwidth="1", pos=_straight(here[a], here[b]))
    arrows = []
    for (a, b), (sends, cap) in loads.items():
        label, plain = _load_text(sends, cap, chunk_colour)
        chunks = sorted({x.chunk for x in sends})
        # up to three chunks as parallel stripes of their colours; more: one dark line
        stroke = ":".join(chunk_colour[c] for c in chunks) if len(chunks) <= 3 else "#333333"
        curve = _bent(here[a], here[b])
        g.edge(f"s{i}r{a}", f"s{i}r{b}", color=stroke, pos=_spline(curve),
               penwidth="1.4" if len(chunks) <= 3 else f"{min(4.0, 1 + 0.4 * len(chunks)):.1f}",
               style="dashed" if any(x.op == "reduce" for x in sends) else "solid")
        arrows.append(((a, b), curve, label, _text_width(plain)))
    spots = _place_labels([(c, w) for _, c, _, w in arrows], list(here.values()))
    for ((a, b), _, label, _), spot in zip(arrows, spots):
        g.node(f"s{i}l{a}_{b}", label=f"<{label}>", shape="plaintext", fixedsize="false",
               width="0", height="0", margin="0.02", fontsize="10", style="filled",
               fillcolor="#ffffffcc",  # lines behind a label fade, text stays clear
               pos=_point(spot) + "!", **{"class": "load"})


def _cell_width(schedule: Schedule, step) -> float:
    widest = 0.0
    for sends, cap in _link_loads(schedule, step).values():
        chunks = sorted({x.chunk for x in sends})
        ids = " ".join(map(str, chunks[:2])) + (f" +{len(chunks) - 2}" if len(chunks) > 2 else "")
        used = f"{len(sends)}/{_fraction(cap) if cap is not None else '?'}"
        widest = max(widest, _text_width(ids, 9), _text_width(used, 9))
    return widest + 8


def _matrix(schedule: Schedule, step, chunk_colour, cell: float) -> str:
    """A graphviz HTML table: row = sender, column = receiver, cell = chunks and load."""
    n = schedule.collective.ranks
    links = schedule.model.link
    loads = _link_loads(schedule, step)
    size = f'width="{cell:.0f}" height="24" fixedsize="true"'
    rows = ['<tr><td border="0"></td>' + "".join(
        f'<td border="0" {size}><b>{d}</b></td>' for d in range(n)) + "</tr>"]
    for a in range(n):
        cells = [f'<td border="0" {size}><b>{a}</b></td>']
        for b in range(n):
            if a == b:
                cells.append(f'<td {size} bgcolor="#d0d0d0"></td>')
            elif (a, b) in loads:
                sends, cap = loads[(a, b)]
                label, _ = _load_text(sends, cap, chunk_colour, most=2)
                ids, _, used = label.rpartition(" ")
                fill = 1.0 if cap is None else min(1.0, float(len(sends) / cap))
                shade = _mix("#ffffff", "#fdae6b", 0.25 + 0.75 * fill)
                mark = " R" if any(x.op == "reduce" for x in sends) else ""
                cells.append(f'<td {size} bgcolor="{shade}"><font point-size="9">{ids}<br/>'
                             f'{used}{mark}</font></td>')
            elif (a, b) in links:
                cells.append(f'<td {size} bgcolor="#f4f4f4"></td>')
            else:
                cells.append(f'<td {size}></td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ('<table border="0" cellborder="1" cellspacing="0" cellpadding="1" '
            'color="#bbbbbb">' + "".join(rows) + "</table>")


def _mix(a: str, b: str, t: float) -> str:
    """The colour t of the way from a to b (#rrggbb)."""
    ca = [int(a[k:k + 2], 16) for k in (1, 3, 5)]
    cb = [int(b[k:k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))


RANK_R = 14.0  # a rank's circle radius, points
ARROW = 7.0  # arrowhead length, points (10 x arrowsize)


def _point(p) -> str:
    return f"{p[0]:.1f},{p[1]:.1f}"


def _straight(a, b) -> str:
    """A graphviz spline for a plain line between two rank circles."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    d = math.hypot(dx, dy) or 1.0
    ux, uy = dx / d, dy / d
    p0 = (a[0] + ux * RANK_R, a[1] + uy * RANK_R)
    p3 = (b[0] - ux * RANK_R, b[1] - uy * RANK_R)
    p1 = (p0[0] + (p3[0] - p0[0]) / 3, p0[1] + (p3[1] - p0[1]) / 3)
    p2 = (p0[0] + 2 * (p3[0] - p0[0]) / 3, p0[1] + 2 * (p3[1] - p0[1]) / 3)
    return " ".join(_point(p) for p in (p0, p1, p2, p3))


def _bent(a, b) -> tuple:
    """Bezier points (start, c1, c2, end, tip) of an arrow from rank circle a to rank
    circle b that bulges to its left: a link's two directions never overlap."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    d = math.hypot(dx, dy) or 1.0
    nx_, ny_ = -dy / d, dx / d  # left of the direction of travel (y up)
    bulge = min(22.0, 0.14 * d)
    c1 = (a[0] + dx / 3 + nx_ * bulge, a[1] + dy / 3 + ny_ * bulge)
    c2 = (a[0] + 2 * dx / 3 + nx_ * bulge, a[1] + 2 * dy / 3 + ny_ * bulge)

    def towards(p, q, r):
        vx, vy = q[0] - p[0], q[1] - p[1]
        m = math.hypot(vx, vy) or 1.0
        return (p[0] + vx / m * r, p[1] + vy / m * r)

    tip = towards(b, c2, RANK_R)
    return towards(a, c1, RANK_R), c1, c2, towards(tip, c2, ARROW), tip


def _spline(curve) -> str:
    """graphviz's pos for a bezier curve with an arrowhead at its tip."""
    start, c1, c2, end, tip = curve
    return f"e,{_point(tip)} " + " ".join(_point(p) for p in (start, c1, c2, end))


def _text_width(text: str, size: float = 10.0) -> float:
    """About how wide Helvetica draws `text`, in points."""
    return sum(0.28 if ch == " " else 0.56 for ch in text) * size


LABEL_H = 12.0


def _place_labels(arrows, nodes) -> list[tuple[float, float]]:
    """A spot for each arrow's label ((curve, width) pairs, in order): beside its curve,
    outside first, at the middle first, wherever it overlaps the rank circles and the
    labels already placed least."""
    placed: list[tuple[float, float, float, float]] = []  # centre x, y, half w, half h
    blocks = [(x, y, RANK_R + 2, RANK_R + 2) for x, y in nodes]
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
                clash = sum(_overlap((spot[0], spot[1], hw, hh), box)
                            for box in blocks + placed)
                score = (clash, rank)
                rank += 1
                if best is None or score < best[0]:
                    best = (score, spot)
        out.append(best[1])
        placed.append((best[1][0], best[1][1], hw, hh))
    return out


def _overlap(p, q) -> float:
    """Overlapping area of two boxes given as (centre x, centre y, half w, half h)."""
    w = min(p[0] + p[2], q[0] + q[2]) - max(p[0] - p[2], q[0] - q[2])
    h = min(p[1] + p[3], q[1] + q[3]) - max(p[1] - p[3], q[1] - q[3])
    return w * h if w > 0 and h > 0 else 0.0


def _panel_title(schedule: Schedule, i: int) -> str:
    step = schedule.steps[i]
    # one run of text per line: a viewer whose font differs from graphviz's would
    # otherwise open gaps between runs
    words = f"<b>step {i}: {_plural(step.rounds, 'round')}, {_plural(len(step.sends), 'send')}</b>"
    group = _busiest_group(schedule.model, step)
    if group:
        words += f"<br/><font point-size='10'>busiest group {_html(group)}</font>"
    return words


def _busiest_group(model: LinkModel, step) -> str | None:
    """'name load/limit' for the shared group nearest its limit in this step, if any."""
    if not model.groups:
        return None
    count = Counter((s.src, s.dst) for s in step.sends)
    best = None
    for group in model.groups:
        used = sum(count.get(p, 0) for p in group.links)
        if used:
            limit = group.capacity * step.rounds
            key = Fraction(used) / limit
            if best is None or key > best[0]:
                best = (key, f"{group.name} {used}/{_fraction(limit)}")
    return best[1] if best else None


def _undirected(pairs) -> list[tuple[int, int]]:
    return sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})


def _fraction(x: Fraction) -> str:
    return str(int(x)) if x.denominator == 1 else f"{float(x):.3g}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _html(text: str) -> str:
    return html.escape(text, quote=False)
