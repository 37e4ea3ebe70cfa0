"""What a step carries, as the pictures label it: loads per link, chunk ranges as text
("0-17 576-593", "+k" for chunks not shown), sets of ranks as runs."""

from __future__ import annotations

from collections import defaultdict

from synth.pictures.graphviz import _fraction
from synth.schedule.ir import Schedule


def link_loads(schedule: Schedule, step) -> dict:
    """{(src, dst): (sends, capacity x rounds or None)} for the links a step uses."""
    links = schedule.model.link
    load: dict[tuple[int, int], list] = defaultdict(list)
    for send in step.sends:
        load[(send.src, send.dst)].append(send)
    return {pair: (sends, links[pair].capacity * step.rounds if pair in links else None)
            for pair, sends in sorted(load.items())}


def chunk_spans(sends) -> list[tuple[int, int]]:
    """The chunks the sends move as sorted, merged (first, last) ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted((x.chunk, x.chunk + x.count - 1) for x in sends):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def span_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def load_text(sends, cap, colour, most: int = 4) -> tuple[str, str]:
    """(HTML label, its plain text): the chunks as ranges (at most `most`, then +k more
    chunks) and load/limit, the load counting every chunk of every send."""
    spans = chunk_spans(sends)
    shown = spans[:most]
    hidden = sum(hi - lo + 1 for lo, hi in spans[most:])
    ids = " ".join(f"<font color='{colour(lo)}'>{span_text(lo, hi)}</font>"
                   for lo, hi in shown)
    more = f" +{hidden}" if hidden else ""
    load = sum(x.count for x in sends)
    used = f"{load}/{_fraction(cap)}" if cap is not None else f"{load}/?"
    plain = f"{' '.join(span_text(lo, hi) for lo, hi in shown)}{more} {used}"
    if cap is not None and load >= cap:
        used = f"<b>{used}</b>"
    return f"{ids}{more} {used}", plain


def rank_set_text(ranks) -> str:
    """Ranks as ranges: 0-7,16-23."""
    out, ranks = [], sorted(ranks)
    lo = prev = ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(span_text(lo, prev))
        if r is not None:
            lo = prev = r
    return ",".join(out)
