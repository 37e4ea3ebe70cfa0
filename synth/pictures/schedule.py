"""Graphviz picture of a schedule, step by step.

    schedule_graph(schedule, "chunk")   -> graphviz.Digraph, one panel per step

Panels are tiled in a grid (panel_columns). A sparse schedule's panel is its ranks at
synth.pictures.graphviz.rank_positions with an arrow per used link, labelled with the
chunks it carries and its load / (capacity x rounds); when a step uses very many links
(a switch's all-to-all) every panel is a sender x receiver matrix instead. Everything is
placed here and drawn by `neato -n2`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from fractions import Fraction

import graphviz

from synth.errors import BadInput
from synth.pictures.graphviz import FONT, _fraction, _html, _plural, palette, rank_positions
from synth.schedule.ir import Schedule
from synth.topology.linkmodel import LinkModel

COLOR_MODES = ("chunk", "origin")
MAX_PANELS = 64  # steps drawn at most; a longer schedule shows its first ones


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
    schedule = schedule.expanded()
    coll, model = schedule.collective, schedule.model
    n = coll.ranks
    steps = schedule.steps[:MAX_PANELS]  # a picture of 300,000 panels is no picture
    busiest = max((len({(x.src, x.dst) for x in st.sends}) for st in steps), default=0)
    dense = busiest > max(DENSE_LINKS, 4 * n)
    colours, chunk_colour, how = _colouring(schedule, color)
    root = f", root {coll.root}" if coll.root is not None else ""
    title = (f"{coll.name}{root} on {model.name}: {_plural(len(steps), 'step')}, "
             f"{_plural(schedule.rounds, 'round')}, {_plural(coll.chunks, 'chunk')}"
             f" per share ({coll.num_chunks} in all)")
    if len(steps) < schedule.num_steps:
        title += f"; the first {len(steps)} steps are drawn"
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
