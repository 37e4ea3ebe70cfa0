"""A degraded machine: a resolved topology with a link, some of its lanes, a NIC or a
switch taken away, or a link narrowed (issue 29, "Degraded machines": one NVLink down,
a NIC missing, a GPU's port at half width, one box unlike the others).

    parse_edit("box1.gpu3-nvswitch:1")      the text, checked (no topology needed)
    degraded(topo, ("gpu3-nvswitch:1",))     that machine, named "dgxh100 without
                                             gpu3-nvswitch:1", with `healthy` the one given
    changes(machine)                         what each edit did, in words
    split_name(machine.name)                 ("dgxh100", ("gpu3-nvswitch:1",))

The grammar (docs/cli.md, "Degraded machines"); names are the physical vertices'
(`synth topo show --json` lists them):

    NAME          nic2, rail2: a NIC or a switch and every link it has (never a GPU)
    A-B           the link between A and B, both directions
    A-B:N         N of its lanes, both directions (all of them: the link)
    A-B=F         (`--degrade`, `degrade:`) the link at F of its bandwidth, 0 < F <= 1
    boxB.EDIT     in a cluster of boxes (NAMExK, --boxes K): in box B only; a box's
                  vertex named bare means that vertex in every box

Edits apply to the whole machine, after NAMExK or --boxes joined its boxes, so one box
may differ from the others: the decomposition, which needs identical boxes, then says
why not and the other methods run. A degraded machine keeps the healthy one's capacity
unit, so that the two compare chunk for chunk, and loses a generator's translations
(a ring with one link down is no longer its own shift).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from synth.deadline import Deadline, in_time
from synth.errors import BadInput
from synth.files import quote
from synth.topology.physical import GPU, MIN_GBPS, Topology, validate

MAX_EDITS = 1024  # edits of one machine: more is no machine anyone runs on
MAX_TEXT = 200
KIND_NAMES = {"nic": "NIC", "nvswitch": "NVSwitch", "pcie_switch": "PCIe switch",
              "net_switch": "network switch"}


@dataclass(frozen=True)
class Edit:
    text: str  # as written, the name the degraded machine gets
    part: str  # "gpu3-nvswitch" or "nic2": box prefix, lanes and fraction cut off
    box: int | None = None  # boxB.: that box only
    lanes: int | None = None  # A-B:N
    fraction: float | None = None  # A-B=F


def parse_edit(text) -> Edit:
    """One edit's text, checked as far as it can be without the topology."""
    if not isinstance(text, str) or not text.strip():
        raise BadInput(f"an empty edit {quote(text)} (expected a NIC, a switch or a link "
                       "A-B, e.g. nic2 or gpu3-nvswitch:1)")
    text = text.strip()
    if len(text) > MAX_TEXT or any(ord(ch) < 32 for ch in text):
        raise BadInput(f"edit {quote(text)}: expected a name of at most {MAX_TEXT} "
                       "printable characters")
    part, box, lanes, fraction = text, None, None, None
    prefix = re.fullmatch(r"box(\d{1,5})\.(.+)", part)
    if prefix:
        box, part = int(prefix.group(1)), prefix.group(2)
    if "=" in part:
        part, _, value = part.rpartition("=")
        # digits, a point and an exponent only: the text is the machine's name, and
        # float() also takes "+0.5", " 0.5" and "0.5_0", names that resolve to nothing
        plain = re.fullmatch(r"(\d+\.?\d*|\.\d+)([eE]-?\d+)?", value, re.ASCII)
        fraction = float(value) if plain else math.nan
        if not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise BadInput(f"edit {quote(text)}: expected a fraction F of the link's "
                           "bandwidth, 0 < F <= 1 (0.5: half width)")
    elif re.fullmatch(r".+:\d+", part):
        part, _, count = part.rpartition(":")
        lanes = int(count) if len(count) <= 6 else 10 ** 6
        if lanes < 1:
            raise BadInput(f"edit {quote(text)}: expected a number of lanes from 1 up")
    elif re.fullmatch(r".+:[-+]?[\d.]+([eE][-+]?\d+)?", part):  # :-1, :1.5 read as names
        raise BadInput(f"edit {quote(text)}: expected a number of lanes from 1 up")
    if not part:
        raise BadInput(f"edit {quote(text)}: expected a NIC, a switch or a link A-B")
    return Edit(text, part, box, lanes, fraction)


def degraded(topo: Topology, texts, deadline: Deadline = Deadline()) -> Topology:
    """`topo` with the edits applied, in order; BadInput, one line naming the edit, for
    a name the machine lacks, more lanes than a link has, or a machine whose GPUs no
    longer all reach each other. TimeLimit past `deadline` (a million links: seconds)."""
    texts = tuple(texts)
    if not texts:
        return topo
    if len(texts) > MAX_EDITS:
        raise BadInput(f"{len(texts):,} edits of one machine (at most {MAX_EDITS})")
    edits = [parse_edit(t) for t in texts]
    doing = f"editing {topo.name} ({len(topo.links):,} links)"
    links = {(l.src, l.dst): (l, l.gbps, l.count)
             for l in in_time(topo.links, deadline, doing, 65536)}
    gone: set[str] = set()
    said = [_apply(topo, edit, links, gone) for edit in edits]
    healthy = topo.healthy or topo
    done = topo.edits + tuple(e.text for e in edits)
    vertices = tuple(v for v in topo.vertices if v.name not in gone)
    kept = tuple(l if (gbps, count) == (l.gbps, l.count) else
                 replace(l, gbps=gbps, count=count)
                 for l, gbps, count in in_time(links.values(), deadline, doing, 65536)
                 if l.src not in gone and l.dst not in gone)
    words = tuple(changes(topo)) + tuple(said)  # a file's edits, then the command line's
    machine = replace(topo, name=degraded_name(healthy.name, done), vertices=vertices,
                      links=kept, translations=(), edits=done, healthy=healthy, said=words,
                      description=f"{healthy.description}; degraded: {', '.join(words)}"
                      .lstrip("; "))
    try:
        validate(machine, deadline)
    except BadInput as e:
        raise BadInput(f"{machine.name}: {e} (an edit may not cut a GPU off)") from None
    return machine


def changes(topo: Topology) -> list[str]:
    """What each edit of a degraded machine did, in words, as `degraded` said them when
    it made the machine (replaying them on a million links took two seconds that no
    deadline looked at); [] for a healthy machine."""
    return list(topo.said) if topo.healthy is not None else []


def degraded_name(base: str, texts) -> str:
    """"dgxh100-without-gpu3-nvswitch:1+nic2-with-gpu0-nic0-at-0.5": a name of its own,
    so that its files go to a folder of their own and no check takes it for `base`; in
    the characters a folder name keeps as they are (synth.files.safe_component)."""
    gone = [t for t in texts if "=" not in t]
    narrowed = [t.replace("=", "-at-") for t in texts if "=" in t]
    return "-".join([base] + ([f"without-{'+'.join(gone)}"] if gone else [])
                    + ([f"with-{'+'.join(narrowed)}"] if narrowed else []))


def split_name(spec: str) -> tuple[str, tuple[str, ...]]:
    """degraded_name's inverse: the healthy machine's name and the edits, so that a
    degraded machine's name resolves to it (a schedule file names its machine);
    (spec, ()) for a name that is no degraded machine's."""
    found = re.fullmatch(r"(.+?)(?:-without-(.+?))?(?:-with-(.+-at-[^+]+))?", spec)
    if not found or found.group(1) == spec:
        return spec, ()
    gone = found.group(2).split("+") if found.group(2) else []
    narrowed = ["=".join(t.rsplit("-at-", 1)) for t in found.group(3).split("+")] \
        if found.group(3) else []
    return found.group(1), tuple(gone + narrowed)


def _apply(topo: Topology, edit: Edit, links: dict, gone: set[str]) -> str:
    """Apply one edit to `links` (by (src, dst): the link, its GB/s and lanes so far;
    a Link is made once, at the end, as a bare name edits a thousand links on 512
    boxes) and `gone` (vertices removed); what it did, in words."""
    whole = _named(topo, edit.part, edit.box, gone)
    if whole and edit.box is not None and topo.vertex(whole[0]).box is None:
        # box B's part of a switch between boxes is its links to it: removing the switch
        # took every box's links (the same machine as the bare name, under another)
        near = next((l.src for l in topo.links if l.dst == whole[0]
                     and topo.vertex(l.src).box == edit.box), "NIC").split(".", 1)[-1]
        raise BadInput(f"edit {quote(edit.text)}: {edit.part} is between boxes, not box "
                       f"{edit.box}'s: name it bare ({edit.part}), or box {edit.box}'s link "
                       f"to it (box{edit.box}.{near}-{edit.part})")
    if whole:
        kinds = {topo.vertex(name).kind for name in whole}
        if GPU in kinds:
            near = next((l.dst for l in topo.links if l.src == whole[0]), "SWITCH")
            raise BadInput(f"edit {quote(edit.text)}: a GPU cannot be removed (every rank "
                           "takes part in a collective); name one of its links instead, "
                           f"e.g. {edit.part}-{near.split('.', 1)[-1]}")
        if edit.lanes is not None or edit.fraction is not None:
            raise BadInput(f"edit {quote(edit.text)}: {edit.part} is a "
                           f"{KIND_NAMES.get(kinds.pop(), 'switch')}; lanes (:N) and widths "
                           "(=F) are a link's")
        gone.update(whole)
        what = KIND_NAMES.get(kinds.pop(), "switch")
        return (f"{edit.text} and its links removed in every box ({len(whole)} {what}s)"
                if len(whole) > 1 else f"{edit.text} and its links removed")
    pairs = _link_pairs(topo, edit, links, gone)
    for a, b in pairs:
        for key in ((a, b), (b, a)):
            if key in links:
                links[key] = _narrowed(links[key], edit)
                if links[key] is None:
                    del links[key]
    return _said(edit, pairs)


def _narrowed(state: tuple, edit: Edit) -> tuple | None:
    """(link, GB/s, lanes) after the edit; None when the link is gone."""
    link, was, count = state
    if edit.fraction is not None:
        gbps = float(f"{was * edit.fraction:.9g}")  # no 2.5000000000000004
        if gbps < MIN_GBPS:
            raise BadInput(f"edit {quote(edit.text)}: {was:g} GB/s x {edit.fraction:g} "
                           f"is below {MIN_GBPS:g} GB/s a lane")
        return link, gbps, count
    lanes = count if edit.lanes is None else edit.lanes
    if lanes > count:
        raise BadInput(f"edit {quote(edit.text)}: {link.src}-{link.dst} has {count} "
                       f"lane{'s' * (count != 1)}, not {lanes}")
    return None if lanes == count else (link, was, count - lanes)


def _said(edit: Edit, pairs) -> str:
    where = f" in {len(pairs)} boxes" if len(pairs) > 1 else ""
    link = edit.text.rpartition("=" if edit.fraction is not None else ":")[0] or edit.text
    if edit.fraction is not None:
        return f"{link} at {edit.fraction:g} of its bandwidth{where}"
    if edit.lanes is None:
        return f"{edit.text} removed{where}"
    return f"{edit.lanes} lane{'s' * (edit.lanes != 1)} of {link} removed{where}"


def _named(topo: Topology, name: str, box: int | None, gone: set[str]) -> list[str]:
    """The vertices `name` means (several: a box's vertex in every box), or []."""
    names = _vertex_names(topo)
    if box is not None:
        if topo.boxes < 2:
            raise BadInput(f"box{box}.{name}: {topo.name} is not a cluster of boxes (name "
                           f"it {name})")
        if box >= topo.boxes:
            raise BadInput(f"box{box}.{name}: {topo.name} has boxes 0 to {topo.boxes - 1}")
        local = f"n{box}.{name}"
        if local in names:
            return [] if local in gone else [local]
        between = name in names and names[name].box is None  # a switch between boxes
        return [name] if between and name not in gone else []
    local = [f"n{b}.{name}" for b in range(topo.boxes) if f"n{b}.{name}" in names]
    if name in names and local:  # a switch between boxes, and a box's vertex, both rail0
        raise BadInput(f"{name}: {topo.name} has a {name} between its boxes and one in "
                       f"each box: box0.{name} names box 0's; to name the one between "
                       "boxes, rename the box's in its file")
    if name in names:
        return [] if name in gone else [name]
    return [v for v in local if v not in gone]


_NAMES: list = [None, {}]  # (topo.vertices, by name) of the machine edited last


def _vertex_names(topo: Topology) -> dict:
    # built once per machine, not per name looked up (thousands an edit on 512 boxes);
    # the cache holds the tuple itself, so `is` cannot match another machine's
    if _NAMES[0] is not topo.vertices:
        _NAMES[:] = [topo.vertices, {v.name: v for v in topo.vertices}]
    return _NAMES[1]


def _link_pairs(topo: Topology, edit: Edit, links: dict, gone: set[str]) -> list:
    """The (A, B) pairs the link `edit.part` means: every split of it at a '-' whose two
    sides name vertices that a link joins (in the same box, or one between boxes); one
    split only, or the edit is ambiguous."""
    names = _vertex_names(topo)
    found = {}
    for at in (m.start() for m in re.finditer("-", edit.part)):
        a, b = edit.part[:at], edit.part[at + 1:]
        xs = _named(topo, a, edit.box, gone)
        ys = _named(topo, b, edit.box, gone) if xs else []
        # each x meets only the ys of its own box and those between boxes: pairing
        # every x with every y took half a second an edit on 512 boxes
        by_box: dict = {}
        for y in ys:
            by_box.setdefault(names[y].box, []).append(y)
        pairs = [(x, y) for x in xs
                 for y in (ys if names[x].box is None
                           else by_box.get(names[x].box, []) + by_box.get(None, []))
                 if (x, y) in links or (y, x) in links]
        if pairs:
            found[(a, b)] = pairs
    if len(found) > 1:
        raise BadInput(f"edit {quote(edit.text)} is ambiguous: "
                       + " or ".join(f"{a} to {b}" for a, b in found))
    if not found and _named(topo, edit.part, edit.box, set()):
        # `--without nic0,nic0`: the machine has it, an earlier edit took it away
        raise BadInput(f"edit {quote(edit.text)}: {edit.part} is already removed by an "
                       "earlier edit")
    if not found:
        raise BadInput(f"edit {quote(edit.text)}: {topo.name} has no NIC, switch or link "
                       f"of that name (synth topo show lists them{_hint(topo, edit)})")
    return next(iter(found.values()))


def _hint(topo: Topology, edit: Edit) -> str:
    if topo.boxes > 1 and edit.box is None:
        return f"; box B's parts are boxB.NAME, B from 0 to {topo.boxes - 1}"
    return ""
