"""Graphviz picture of a schedule, step by step.

    schedule_graph(schedule, "chunk")   -> graphviz.Digraph, one panel per step

Panels are tiled in a grid (panel_columns). A sparse schedule's panel is its ranks at
synth.pictures.graphviz.rank_positions with an arrow per used link, labelled with the
chunks it carries (a range of chunks as "0-7") and its load / (capacity x rounds); when
a step uses very many links (a switch's all-to-all) every panel is a sender x receiver
matrix instead, and past MAX_RANKS ranks a matrix of blocks of ranks (a block never
spans two boxes). A pipelined schedule (docs/schedule-file.md, version 2) is drawn as
one batch, its program, plus a timeline of which batch runs which program step in which
step; nothing is ever expanded. Everything is placed here and drawn by `neato -n2`.

Bounded: at most MAX_PANELS panels and a grid of at most PANEL_AREA square points, or
PNG_ROOM for a PNG (fewer panels when they are big; the caption says how many are
drawn), at most
MAX_RANKS rows and columns in a matrix, MAX_TIMELINE columns in a timeline.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import graphviz

from synth.errors import BadInput
from synth.pictures.arrow_labels import place_arrow_labels
from synth.pictures.graphviz import (FONT, _fraction, _html, _plural, palette,
                                     palette_colour, point, rank_positions, text_width)
from synth.pictures.loads import chunk_spans, link_loads, load_text
from synth.pictures.matrix import (MAX_RANKS, block_cell_width, block_matrix_label,
                                   block_words, matrix_cell_width, matrix_label,
                                   rank_blocks)
from synth.pictures.timeline import (batch_words, decomposition_words, draw_timeline,
                                     where_sends_go)
from synth.schedule.ir import Schedule
from synth.topology.linkmodel import LinkModel

COLOR_MODES = ("chunk", "origin")
MAX_PANELS = 64  # steps drawn at most; a longer schedule shows its first ones
# a schedule written once per orbit (version 4) is drawn spelled out up to this many
# sends, past it as the sends into its representatives
DRAWN_UNFOLDED = 100_000
PANEL_AREA = 75_000_000  # square points the panel grid may fill: 4 x a 60-inch square
PANEL_ROOM = (PANEL_AREA, math.inf)  # (area, longest side) for an SVG
PNG_ROOM = (30_000_000, 7_600.0)  # for a PNG: readable (graphviz.png_dpi) with the caption


def chunk_origin(schedule: Schedule, chunk: int) -> int | None:
    """The rank a chunk starts at; for reductions, where it ends; None when neither is one
    rank (allreduce)."""
    coll = schedule.collective
    for ranks in (coll.holders(chunk), coll.wanters(chunk)):
        if len(ranks) == 1:
            return ranks[0]
    return None


DENSE_LINKS = 64  # a step using more rank links than this (and 4 per rank) is a matrix
GAP = 24.0  # between panels


def schedule_graph(schedule: Schedule, color: str = "chunk", columns: int | None = None,
                   max_ranks: int = MAX_RANKS, room: tuple[float, float] = PANEL_ROOM
                   ) -> graphviz.Digraph:
    """One panel per step, tiled in a grid. A panel shows which chunks cross which rank
    link in that step, coloured by chunk (or by the rank the chunk starts at), and each
    used link's load against its capacity x the step's rounds (e.g. "3/4", bold when
    full). Consecutive chunks are one range ("0-7"), never a label each.

    Sparse schedules are drawn as graphs: the ranks at the same places in every panel
    (node s{i}r{r}, class "rank"), an arrow per used link, bending to its left so that a
    link's two directions never overlap, its label a node of class "load". When some
    step uses more than max(DENSE_LINKS, 4 x ranks) links (a switch's all-to-all), every
    panel is a matrix instead (node s{i}m, class "matrix"): a row per sending rank, a
    column per receiving rank; with more than MAX_RANKS ranks, a row and a column per
    block of ranks (`rank_blocks`). Panels are nodes of class "panel" named step0,
    step1, ...; on a multi-node topology each says whether its sends cross boxes.

    A pipelined schedule is drawn without expanding it: the panels are its program (the
    steps of batch 0, the loads of one batch alone), and below them a timeline (node
    "timeline", class "timeline"): a column per step of the schedule (node tick{t},
    class "tick", with the step's rounds), a row per program step (class "tlrow"), and
    a cell (node slot{i}_{t}, class "slot") labelled b where batch b runs program step i
    in step t.

    `max_ranks` caps a matrix's rows and columns (fewer: coarser blocks, a smaller
    picture); `room` is (area, longest side) in points the panel grid may fill: the
    first steps that fit are drawn, one at least.
    """
    switched, orbits = schedule.in_network, schedule.symmetry
    if orbits is not None and orbits.order * sum(len(s.sends) for s in schedule.steps) \
            <= DRAWN_UNFOLDED:
        schedule = schedule.unfolded()
    schedule = schedule.as_sends()  # a switch operation: its sends, link by link
    if color not in COLOR_MODES:
        raise BadInput(f"unknown colouring '{color}' (expected chunk or origin)")
    coll, model, pipe = schedule.collective, schedule.model, schedule.pipeline
    n = coll.ranks
    program = schedule.steps[:MAX_PANELS]  # a picture of 300,000 panels is no picture
    blocks = rank_blocks(model, max_ranks) if n > max_ranks else None
    busiest = max((len({(x.src, x.dst) for x in st.sends}) for st in program), default=0)
    dense = blocks is not None or busiest > max(DENSE_LINKS, 4 * n)
    rank_colours, colour, how = _colouring(schedule, color)
    panel = _panel(schedule, program, blocks, dense, busiest)
    shown, cols = _panels_shown(len(program), n, dense, panel, columns, room)
    steps = program[:shown]

    lines = _caption_lines(schedule, orbits, switched, blocks, dense, how, shown)
    # a big grid gets a bigger caption and timeline, readable when the picture is scaled
    span = min(len(steps), cols) * (panel.width + GAP) - GAP
    zoom = min(2.5, max(1.0, span / 2000))
    chars = max(70, int(span / (0.56 * 11 * zoom)))  # as wide as the panels, no wider
    caption = "<br/>".join(_wrapped(line, chars) for line in lines).replace("point-size='11'", f"point-size='{11 * zoom:.0f}'")

    g = graphviz.Digraph(f"{coll.name}-{model.name}", engine="neato")
    g.attr(label=f"<{caption}>", labelloc="t", fontname=FONT, fontsize=f"{16 * zoom:.0f}",
           bgcolor="white", pad="0.3", outputorder="edgesfirst")
    g.attr("node", fontname=FONT, fontsize="12", shape="circle", width=f"{2 * RANK_R / 72}",
           fixedsize="true", style="filled", fillcolor="white", penwidth="1.2")
    g.attr("edge", fontname=FONT, arrowsize="0.7")
    _draw_panels(g, schedule, steps, cols, panel, blocks, dense,
                 rank_colours if color == "origin" else None, colour)
    if pipe is not None and steps:
        rows = -(-len(steps) // cols)
        draw_timeline(g, schedule, -rows * (panel.height + GAP), zoom, MAX_PANELS,
                      room=cols * (panel.width + GAP) - GAP)
    return g


@dataclass
class _Panel:
    """A step's panel: its size in points, its title's scale, and what its drawing
    needs: rank positions (a graph), or the cell width (a matrix) and for blocks of
    ranks the block of each rank and the block pairs a link joins."""
    width: float
    height: float
    big: float = 1.0
    pos: dict | None = None
    cell: float = 30.0
    of: dict | None = None
    linked: set | None = None


def _panel(schedule: Schedule, program, blocks, dense: bool, busiest: int) -> _Panel:
    """The size of one step's panel (every panel has it) and its layout."""
    model, n = schedule.model, schedule.collective.ranks
    if blocks is not None or dense:
        side = len(blocks) if blocks is not None else n
        of = linked = None
        if blocks is not None:
            of = {r: k for k, block in enumerate(blocks) for r in block}
            cell = block_cell_width(schedule, program, blocks, of)
            linked = {(of[l.src], of[l.dst]) for l in model.links}
        else:
            cell = max(30.0, max((matrix_cell_width(schedule, st) for st in program), default=30.0))
        width = (side + 1) * cell + 40
        big = min(2.0, max(1.0, width / 1500))  # a big matrix: a bigger title, room for it
        height = (side + 1) * 24 + 90 + (big - 1) * 50
        return _Panel(width, height, big, cell=cell, of=of, linked=linked)
    pairs = {(l.src, l.dst): l.capacity for l in model.links}
    spacing = 1.3 + 0.5 * min(2.0, max(0.0, busiest / max(n, 1) - 2))  # room for labels
    pos = rank_positions(n, pairs, model.name, spacing=spacing)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    shift = ((max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2)
    pos = {r: (x - shift[0], y - shift[1]) for r, (x, y) in pos.items()}
    width = max(xs) - min(xs) + 160
    height = max(ys) - min(ys) + 160 + 40  # + the panel's title
    return _Panel(width, height, pos=pos)


def _panels_shown(steps: int, n: int, dense: bool, panel: _Panel, columns: int | None,
                  room: tuple[float, float]) -> tuple[int, int]:
    """(panels drawn, columns): the first steps whose grid fits `room`, one at least."""
    width, height = panel.width, panel.height

    def grid(k: int) -> int:
        if columns is not None:
            return columns
        widest = 4 if n <= 8 and not dense else 3
        if width > 600:  # big panels: about as many rows as columns, a squarer picture
            widest = min(widest, max(1, math.ceil(math.sqrt(k * height / width))))
        return panel_columns(k, widest)

    def too_big(k: int) -> bool:
        cols = min(grid(k), k)
        across, down = cols * (width + GAP), -(-k // cols) * (height + GAP)
        return across * down > room[0] or max(across, down) > room[1]

    shown = steps
    while shown > 1 and too_big(shown):
        shown -= 1
    return shown, grid(shown)


def _caption_lines(schedule: Schedule, orbits, switched: bool, blocks, dense: bool,
                   how: str, shown: int) -> list[str]:
    """The picture's caption, a line each: what is drawn and how to read it."""
    coll, model, pipe, n = (schedule.collective, schedule.model, schedule.pipeline,
                            schedule.collective.ranks)
    root = f", root {coll.root}" if coll.root is not None else ""
    title = (f"{coll.name}{root} on {model.name}: {_plural(schedule.num_steps, 'step')}, "
             f"{_plural(schedule.rounds, 'round')}, {_plural(coll.chunks, 'chunk')}"
             f" per share ({coll.num_chunks} in all)")
    lines = [f"{_html(title)}", f"<font point-size='11'>{_html(how)}</font>"]
    if blocks is not None:
        what = (f"{n} ranks in {len(blocks)} blocks ({block_words(model, blocks)}); row: "
                "sending block, column: receiving block; a cell gives how many chunks go "
                "between them and the fullest link's load / (capacity x rounds), bold when "
                "full; shaded: used (darker: fuller), R: reduces")
    elif dense:
        what = ("row: sending rank, column: receiving rank; a cell lists the chunks sent "
                "and the load / (capacity x rounds), bold when full; shaded: links "
                "(darker: fuller), R: a reduce")
    else:
        what = ("each arrow is labelled with the chunks it carries, then load / (capacity "
                "x rounds), bold when full; dashed: reduce; an arrow of more than three "
                "chunk ranges is dark grey; light grey lines: links unused in the step")
    lines.append(f"<font point-size='11'>{_html(what)}</font>")
    if pipe is not None:
        lines.append("<font point-size='11'>" + _html(
            f"pipelined: {batch_words(pipe.batches)} of a {len(schedule.steps)}-step "
            f"program, drawn once (batch 0; loads "
            f"and rounds of one batch alone); batch b moves chunk + b x {pipe.stride} and "
            "runs program step i in step b + i, as the timeline below shows") + "</font>")
    if orbits is not None:
        reps = orbits.representatives
        drawn = ("drawn spelled out for every rank" if schedule.symmetry is None else
                 f"only the sends into rank{'s' if len(reps) > 1 else ''} {_few(reps)} are "
                 "drawn (loads: those of every link of their orbits)")
        lines.append("<font point-size='11'>" + _html(
            f"written once per orbit (version 4): every rank does the same, translated "
            f"along dims {list(orbits.dims)}, axes {list(orbits.axes)}; {drawn}") + "</font>")
    if switched:
        lines.append("<font point-size='11'>" + _html(
            "switch operations (version 3) are drawn as the sends they stand for: link "
            "loads are theirs, but a group the switch pays once per operation (its port) "
            "shows the sends' larger load") + "</font>")
    decomposition = decomposition_words(schedule)
    if decomposition:
        lines.append(f"<font point-size='11'>{_html(decomposition)}</font>")
    if shown < len(schedule.steps):
        what = "program steps" if pipe is not None else "steps"
        lines.append("<font point-size='11'>" + _html(
            f"the first {shown} {what} of {len(schedule.steps)} are drawn") + "</font>")
    return lines


def _draw_panels(g, schedule: Schedule, steps, cols: int, panel: _Panel, blocks,
                 dense: bool, rank_colours, colour) -> None:
    """A panel per step in a grid of `cols` columns: its title and its graph or matrix."""
    width, height, big = panel.width, panel.height, panel.big
    for i, step in enumerate(steps):
        col, row = i % cols, i // cols
        centre = (col * (width + GAP) + width / 2, -row * (height + GAP) - height / 2)
        g.node(f"step{i}", label=f"<{_panel_title(schedule, i, round(10 * big))}>",
               shape="box", style="rounded", fixedsize="true", width=f"{width / 72:.3f}",
               height=f"{height / 72:.3f}", labelloc="t", fontsize=f"{13 * big:.0f}",
               color="#999999", fillcolor="none", pos=point(centre) + "!",
               **{"class": "panel"})
        inner = (centre[0], centre[1] - 20 - (big - 1) * 25)  # below the title
        if blocks is not None:
            label = block_matrix_label(schedule, step, blocks, panel.of, panel.cell,
                                       panel.linked)
        elif dense:
            label = matrix_label(schedule, step, colour, panel.cell)
        else:
            here = {r: (x + inner[0], y + inner[1]) for r, (x, y) in panel.pos.items()}
            frame = (centre[0] - width / 2 + 4, centre[1] - height / 2 + 4,
                     centre[0] + width / 2 - 4, centre[1] + height / 2 - 40 * big)
            _graph_panel(g, schedule, i, here, rank_colours, colour, frame)
            continue
        g.node(f"s{i}m", label=f"<{label}>", shape="plaintext", fixedsize="false",
               width="0", height="0", margin="0", style="", pos=point(inner) + "!",
               **{"class": "matrix"})


def _few(ranks) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" ... ({len(ranks)} in all)" if len(ranks) > 8
                                             else "")


def _wrapped(line: str, chars: int) -> str:
    """A caption line (escaped text, maybe in one <font>) broken into lines of about
    `chars` characters: a long line would make the picture wider than its panels."""
    head, text, tail = re.fullmatch(r"(<font[^>]*>)?(.*?)(</font>)?", line).groups()
    return (head or "") + "<br/>".join(textwrap.wrap(text, chars) or [""]) + (tail or "")


def panel_columns(panels: int, widest: int) -> int:
    """Panels per row: all in one row when they fit in `widest`, else `widest` or one
    fewer, whichever leaves fewer empty places in the last row (the wider on a tie)."""
    if panels <= widest or widest <= 1:
        return max(min(panels, widest), 1)
    return min(range(max(2, widest - 1), widest + 1), key=lambda c: (-panels % c, -c))


def _colouring(schedule: Schedule, color: str):
    """(rank colours, chunk -> colour, words for the caption). Chunk colours are computed
    when asked for: a schedule may have 10^5 chunks."""
    coll = schedule.collective
    ranks = palette(coll.ranks)
    if color == "origin":
        # who holds and who wants a chunk is one rank for every chunk of a collective or
        # for none (synth.schedule.collectives): chunk 0 tells
        if chunk_origin(schedule, 0) is not None:
            return (ranks, lambda c: ranks[chunk_origin(schedule, c)],
                    "colour: the rank a chunk starts at (reductions: where it ends)")
        how = f"colour: chunk ({coll.name} chunks start at every rank)"
    else:
        how = "colour: chunk"
    return ranks, lambda c: palette_colour(c % coll.num_chunks, coll.num_chunks), how


def _graph_panel(g, schedule: Schedule, i: int, here: dict, rank_colours, colour,
                 frame=None):
    """Step i as ranks at `here` with an arrow per used link and its label, the labels
    within `frame` (x0, y0, x1, y1), the panel under its title."""
    n = schedule.collective.ranks
    step = schedule.steps[i]
    for r in range(n):
        fill = f"{rank_colours[r]}33" if rank_colours else "white"
        g.node(f"s{i}r{r}", label=str(r), pos=point(here[r]) + "!", fillcolor=fill,
               **{"class": "rank"})
    loads = link_loads(schedule, step)
    background = _undirected([(l.src, l.dst) for l in schedule.model.links])
    if len(background) <= 3 * n:
        for a, b in background:
            if (a, b) not in loads and (b, a) not in loads:
                g.edge(f"s{i}r{a}", f"s{i}r{b}", dir="none", color="#dddddd",
                       penwidth="1", pos=_straight(here[a], here[b]))
    arrows = []
    for (a, b), (sends, cap) in loads.items():
        label, plain = load_text(sends, cap, colour)
        spans = chunk_spans(sends)
        chunks = sum(hi - lo + 1 for lo, hi in spans)
        # up to three ranges as parallel stripes of their colours; more: one dark line
        stroke = ":".join(colour(lo) for lo, _ in spans) if len(spans) <= 3 else "#333333"
        curve = _bent(here[a], here[b])
        g.edge(f"s{i}r{a}", f"s{i}r{b}", color=stroke, pos=_spline(curve),
               penwidth="1.4" if chunks <= 3 else f"{min(4.0, 1 + 0.4 * chunks):.1f}",
               style="dashed" if any(x.op == "reduce" for x in sends) else "solid")
        arrows.append(((a, b), curve, label, text_width(plain)))
    spots = place_arrow_labels([(c, w) for _, c, _, w in arrows], list(here.values()),
                               RANK_R + 2, frame)
    for ((a, b), _, label, _), spot in zip(arrows, spots):
        g.node(f"s{i}l{a}_{b}", label=f"<{label}>", shape="plaintext", fixedsize="false",
               width="0", height="0", margin="0.02", fontsize="10", style="filled",
               fillcolor="#ffffffcc",  # lines behind a label fade, text stays clear
               pos=point(spot) + "!", **{"class": "load"})


# --- many ranks: blocks ---------------------------------------------------------------


# --- pipelines: the timeline --------------------------------------------------------


RANK_R = 14.0  # a rank's circle radius, points
ARROW = 7.0  # arrowhead length, points (10 x arrowsize)


def _straight(a, b) -> str:
    """A graphviz spline for a plain line between two rank circles."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    d = math.hypot(dx, dy) or 1.0
    ux, uy = dx / d, dy / d
    p0 = (a[0] + ux * RANK_R, a[1] + uy * RANK_R)
    p3 = (b[0] - ux * RANK_R, b[1] - uy * RANK_R)
    p1 = (p0[0] + (p3[0] - p0[0]) / 3, p0[1] + (p3[1] - p0[1]) / 3)
    p2 = (p0[0] + 2 * (p3[0] - p0[0]) / 3, p0[1] + 2 * (p3[1] - p0[1]) / 3)
    return " ".join(point(p) for p in (p0, p1, p2, p3))


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
    return f"e,{point(tip)} " + " ".join(point(p) for p in (start, c1, c2, end))


def _panel_title(schedule: Schedule, i: int, small: int = 10) -> str:
    step = schedule.steps[i]
    # one run of text per line: a viewer whose font differs from graphviz's would
    # otherwise open gaps between runs
    name = "program step" if schedule.pipeline is not None else "step"
    load = step.load
    of = f" of {_plural(load, 'chunk')}" if load != len(step.sends) else ""
    words = (f"<b>{name} {i}: {_plural(step.rounds, 'round')}, "
             f"{_plural(len(step.sends), 'send')}{of}</b>")
    where = where_sends_go(schedule, step)
    if where:
        words += f"<br/><font point-size='{small}'>{_html(where)}</font>"
    group = _busiest_group(schedule.model, step)
    if group:
        words += f"<br/><font point-size='{small}'>busiest group {_html(group)}</font>"
    return words


def _busiest_group(model: LinkModel, step) -> str | None:
    """'name load/limit' for the shared group nearest its limit in this step, if any."""
    if not model.groups:
        return None
    count = Counter()
    for s in step.sends:
        count[(s.src, s.dst)] += s.count
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
