"""The timeline of a pipelined schedule: a column per step of the schedule with its
rounds, a row per program step, in each cell the batch that runs that program step
then (docs/schedule-file.md, version 2); a long timeline keeps its first and last
columns. Also what a program step does, in words (where its sends go, and what the
decomposition recorded), for the panels' titles and the caption."""

from __future__ import annotations

from synth.pictures.graphviz import _html, _plural, mix, palette_colour, point, text_width
from synth.schedule.ir import Schedule

MAX_TIMELINE = 128  # a timeline's columns at most; a longer one elides its middle
MIN_TIMELINE = 32  # and at least, however narrow the panels above it


def draw_timeline(g, schedule: Schedule, top: float, z: float = 1.0, most: int = 64,
                  room: float = 0.0) -> None:
    """The pipeline below the panels, its top at y = top, everything z times the usual
    size: a column per step (its number and rounds), a row per program step (at most
    `most`), a cell where batch b runs that program step; at most as many columns as
    fit in `room` points (the panels' width: 128 columns beside two panels left most
    of a picture 5711 pixels wide empty), and never fewer than MIN_TIMELINE."""
    pipe = schedule.pipeline
    program, total = len(schedule.steps), schedule.num_steps
    rows = min(program, most)
    # a column as wide as its widest number, over every step (a bound on those shown)
    cw = max(18.0, 6 + max(text_width(str(x), 9) for x in
                           (total - 1, max(pipe.rounds), pipe.batches - 1)))
    rh, head, pad = 16.0, 30.0, 12.0
    labels = [_row_label(schedule, i) for i in range(rows)]
    lw = max(text_width(x, 10) for x in labels + ["rounds"]) + 12
    limit = MAX_TIMELINE if not room else max(MIN_TIMELINE, min(
        MAX_TIMELINE, int((room / z - lw - 2 * pad) / cw) - 1))  # - 1: the elision's
    if total > limit:
        half = limit // 2
        columns = list(range(half)) + [None] + list(range(total - half + 1, total))
    else:
        columns = list(range(total))
    title = (f"timeline: {batch_words(pipe.batches)} (stride {pipe.stride}) in "
             f"{_plural(total, 'step')}, {_plural(schedule.rounds, 'round')}")
    words = ("column: a step and its rounds; row: a program step; a cell b: batch b runs "
             "that program step in that step")
    if None in columns:
        words += f"; steps {limit // 2}-{total - limit // 2} are not drawn"
    if rows < program:
        words += f"; the first {rows} of {program} program steps are drawn"
    cw, rh, head, pad, lw = cw * z, rh * z, head * z, pad * z, lw * z
    width = max(lw + len(columns) * cw, 1.1 * text_width(title, 12 * z),  # bold
                text_width(words, 10 * z)) + 2 * pad
    height = 34 * z + head + rows * rh + 2 * pad
    g.node("timeline", label=f"<<b>{_html(title)}</b><br/><font point-size='{10 * z:.1f}'>"
           f"{_html(words)}</font>>", shape="box", style="rounded", fixedsize="true",
           width=f"{width / 72:.3f}", height=f"{height / 72:.3f}", labelloc="t",
           fontsize=f"{12 * z:.1f}", color="#999999", fillcolor="none",
           pos=point((width / 2, top - height / 2)) + "!", **{"class": "timeline"})
    x0, y0 = pad + lw, top - 34 * z - pad  # the grid's top left

    def text(name, label, x, y, w, h, size, kind):
        g.node(name, label=label, shape="plaintext", fixedsize="true", style="",
               margin="0", fontsize=f"{size * z:.1f}", width=f"{w / 72:.3f}",
               height=f"{h / 72:.3f}", pos=point((x, y)) + "!", **{"class": kind})

    text("tlhead", "<step<br/>rounds>", pad + lw / 2, y0 - head / 2, lw, head, 9, "tlrow")
    for i, label in enumerate(labels):
        text(f"tlrow{i}", _html(label), pad + lw / 2, y0 - head - i * rh - rh / 2, lw, rh,
             10, "tlrow")
    for j, t in enumerate(columns):
        x = x0 + j * cw + cw / 2
        if t is None:
            text("tickgap", "...", x, y0 - head / 2, cw, head, 9, "tick")
            continue
        text(f"tick{t}", f"<{t}<br/><font color='#666666'>{pipe.rounds[t]}</font>>", x,
             y0 - head / 2, cw, head, 9, "tick")
        for i in range(rows):
            b = t - i
            if 0 <= b < pipe.batches:
                g.node(f"slot{i}_{t}", label=str(b), shape="box", fixedsize="true",
                       width=f"{(cw - 2) / 72:.3f}", height=f"{(rh - 2) / 72:.3f}",
                       fontsize=f"{8 * z:.1f}", style="filled", color="#ffffff",
                       fillcolor=mix("#ffffff", palette_colour(b % 10, 10), 0.3),
                       penwidth="0.5", pos=point((x, y0 - head - i * rh - rh / 2)) + "!",
                       **{"class": "slot"})


def batch_words(count: int) -> str:
    return f"{count} batch{'' if count == 1 else 'es'}"


def _row_label(schedule: Schedule, i: int) -> str:
    where = where_sends_go(schedule, schedule.steps[i])
    return f"program step {i}" + (f": {where}" if where else "")


def where_sends_go(schedule: Schedule, step) -> str | None:
    """Where a step's sends go on a multi-node topology (between boxes, inside boxes),
    and, for a combining collective, whether they reduce or copy: read off the sends,
    since no level is recorded per step. None on one box."""
    boxes = schedule.model.boxes
    if not boxes or not step.sends:
        return None
    across = {boxes[x.src] != boxes[x.dst] for x in step.sends}
    words = {frozenset({True}): "between boxes", frozenset({False}): "inside boxes"}.get(
        frozenset(across), "between and inside boxes")
    if schedule.collective.combining:
        ops = sorted({x.op for x in step.sends})
        words += ", " + " and ".join("reduce" if op == "reduce" else "copy" for op in ops)
    return words


def decomposition_words(schedule: Schedule) -> str | None:
    """What info["decomposition"] records (the hierarchy, the levels), for the caption."""
    info = schedule.info.get("decomposition")
    if not isinstance(info, dict):
        return None
    words = "decomposed"
    if info.get("hierarchy"):
        words += f" over {info['hierarchy']}"
    levels = info.get("levels") or []
    names = (["reducescatter", "allgather"] if schedule.collective.name == "allreduce"
             and len(levels) == 2 else [schedule.collective.name] * len(levels))
    parts = []
    for name, level in zip(names, levels):
        if not isinstance(level, dict):
            continue
        each = []
        for where in ("across", "inside"):
            x = level.get(where)
            if isinstance(x, dict):
                steps = _plural(x.get("steps") or 0, "step")
                each.append(f"{where} {x.get('ranks')} ranks, {steps}"
                            + (f" ({x['method']})" if x.get("method") else ""))
        if each:
            parts.append(f"{name}: " + "; ".join(each))
    if parts:
        words += "; levels: " + " / ".join(parts)
    return words + ("; a program step's level is not recorded: its panel says where its "
                    "sends go")
