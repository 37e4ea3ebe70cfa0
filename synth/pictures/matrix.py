"""A step as a matrix: a row per sending rank, a column per receiving rank, a cell per
used link (its chunks and its load against capacity x rounds), for steps too dense to
draw as arrows; past MAX_RANKS ranks, a matrix of blocks of ranks (`rank_blocks`: a
block never spans two boxes), each cell the chunks sent between two blocks and the
fullest link's load."""

from __future__ import annotations

from collections import Counter, defaultdict

from synth.pictures.graphviz import _fraction, mix, text_width
from synth.pictures.loads import link_loads, load_text, rank_set_text
from synth.schedule.ir import Schedule
from synth.topology.linkmodel import LinkModel

MAX_RANKS = 64  # a matrix's rows and columns at most; more ranks are gathered in blocks


def matrix_cell_width(schedule: Schedule, step) -> float:
    widest = 0.0
    for sends, cap in link_loads(schedule, step).values():
        _, plain = load_text(sends, cap, lambda c: "", most=2)
        ids, _, used = plain.rpartition(" ")
        widest = max(widest, text_width(ids, 9), text_width(used, 9))
    return 1.3 * widest + 8  # graphviz's font may be wider than Helvetica's metrics


def matrix_label(schedule: Schedule, step, colour, cell: float) -> str:
    """A graphviz HTML table: row = sender, column = receiver, cell = chunks and load."""
    n = schedule.collective.ranks
    links = schedule.model.link
    loads = link_loads(schedule, step)
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
                label, _ = load_text(sends, cap, colour, most=2)
                ids, _, used = label.rpartition(" ")
                load = sum(x.count for x in sends)
                fill = 1.0 if cap is None else float(load / cap)
                cells.append(_load_cell(size, fill, ids, used,
                                        any(x.op == "reduce" for x in sends)))
            else:
                cells.append(_empty_cell(size, (a, b) in links))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return _table(rows)


def _load_cell(size: str, fill: float, top: str, used: str, reduce: bool) -> str:
    """A used link (or pair of blocks): what it carries over its load, shaded by how
    full it is, "R" when a send reduces."""
    shade = mix("#ffffff", "#fdae6b", 0.25 + 0.75 * min(1.0, fill))
    return (f'<td {size} bgcolor="{shade}"><font point-size="9">{top}<br/>'
            f'{used}{" R" if reduce else ""}</font></td>')


def _empty_cell(size: str, linked: bool) -> str:
    """Nothing sent: grey where a link would allow it, blank where none does."""
    return f'<td {size} bgcolor="#f4f4f4"></td>' if linked else f'<td {size}></td>'


def _table(rows: list[str]) -> str:
    return ('<table border="0" cellborder="1" cellspacing="0" cellpadding="1" '
            'color="#bbbbbb">' + "".join(rows) + "</table>")


def rank_blocks(model: LinkModel, most: int = MAX_RANKS) -> list[list[int]]:
    """The ranks cut into at most `most` blocks for a matrix. With boxes (model.boxes):
    each box cut into equal runs of the fewest ranks that keep to `most` blocks, a block
    never spanning two boxes; with more boxes than `most`, runs of whole boxes. Without:
    runs of consecutive ranks."""
    n = model.ranks
    if not model.boxes:
        per = -(-n // most)
        return [list(range(lo, min(n, lo + per))) for lo in range(0, n, per)]
    members = defaultdict(list)
    for r in range(n):
        members[model.boxes[r]].append(r)
    boxes = sorted(members.values())
    if len(boxes) > most:
        per = -(-len(boxes) // most)
        return [sum(boxes[lo:lo + per], []) for lo in range(0, len(boxes), per)]
    per = next(m for m in range(1, n + 1) if sum(-(-len(b) // m) for b in boxes) <= most)
    return [b[lo:lo + per] for b in boxes for lo in range(0, len(b), per)]


def block_words(model: LinkModel, blocks) -> str:
    sizes = sorted({len(b) for b in blocks})
    size = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    if not model.boxes:
        return f"{size} consecutive ranks each"
    per_box = Counter(model.boxes[b[0]] for b in blocks)
    if max(per_box.values()) == 1 and len(per_box) == len(blocks):
        return f"a box of {size} ranks each"
    if len(per_box) < len(blocks):
        return f"{size} ranks each, {max(per_box.values())} per box"
    return f"whole boxes, {size} ranks each"


def _block_loads(schedule: Schedule, step, of: dict) -> dict:
    """{(sending block, receiving block): (chunks, fullness of the fullest link, its
    load, its limit, whether any send reduces)}."""
    out = {}
    for (a, b), (sends, cap) in link_loads(schedule, step).items():
        key = (of[a], of[b])
        load = sum(x.count for x in sends)
        ratio = float("inf") if not cap else float(load / cap)
        chunks, best, best_load, best_cap, reduce = out.get(key, (0, -1.0, 0, None, False))
        if ratio > best:
            best, best_load, best_cap = ratio, load, cap
        out[key] = (chunks + load, best, best_load, best_cap,
                    reduce or any(x.op == "reduce" for x in sends))
    return out


def block_cell_width(schedule: Schedule, program, blocks, of) -> float:
    widest = max(text_width(rank_set_text(b), 9) for b in blocks)
    for step in program:
        for chunks, _, load, cap, _ in _block_loads(schedule, step, of).values():
            used = f"{load}/{_fraction(cap) if cap is not None else '?'} R"
            widest = max(widest, text_width(str(chunks), 9), text_width(used, 9))
    return max(30.0, 1.15 * widest + 8)


def block_matrix_label(schedule: Schedule, step, blocks, of, cell: float, linked) -> str:
    """A graphviz HTML table: row = sending block, column = receiving block, cell = the
    chunks sent between them and their fullest link's load / limit; `linked`: the
    (block, block) pairs some link joins."""
    loads = _block_loads(schedule, step, of)
    size = f'width="{cell:.0f}" height="24" fixedsize="true"'
    names = [rank_set_text(b) for b in blocks]
    rows = ['<tr><td border="0"></td>' + "".join(
        f'<td border="0" {size}><font point-size="9"><b>{x}</b></font></td>'
        for x in names) + "</tr>"]
    for a in range(len(blocks)):
        cells = [f'<td border="0" {size}><font point-size="9"><b>{names[a]}</b></font></td>']
        for b in range(len(blocks)):
            if (a, b) in loads:
                chunks, ratio, load, cap, reduce = loads[(a, b)]
                used = f"{load}/{_fraction(cap) if cap is not None else '?'}"
                if cap is not None and load >= cap:
                    used = f"<b>{used}</b>"
                cells.append(_load_cell(size, ratio, str(chunks), used, reduce))
            else:
                cells.append(_empty_cell(size, (a, b) in linked))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return _table(rows)
