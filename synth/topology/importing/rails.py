"""A GPU's several nearest NICs, used together as NCCL uses them: one NIC of their rates.

NCCL gives each GPU DIVUP(nets, gpus) of the NICs nearest it (the nets at its best path
type, shared by the gpus nearest them) and turns its channels over them
(ncclTopoGetLocalNetType, src/graph/topo.cc, NCCL_NETDEVS_POLICY's default AUTO). On
AWS p5 that is all four of a GPU's 100 Gb/s EFA NICs, which AWS's plugin also joins
into one device of their summed speed (aws-ofi-nccl's multi-rail grouping): what a GPU
has is one 400 Gb/s NIC, not four routes.

synth routes a GPU pair one way (synth.topology.linkmodel), so an import says this in
its file: where the NICs nearest a set of G GPUs number k x G (k >= 2), hang from one
PCIe switch and are joined to it alike, each GPU's k become one NIC (`a..b`, its first
and last rail) of k times the rate, and the network's NIC rate is k times too. Only
where every NIC of the box joins a GPU's rails, k alike, since `network:` joins boxes at
one NIC rate; otherwise nothing changes and the assumptions say why. NICs the GPUs
share one-to-one (Azure NDv4: two GPUs, two NICs) stay as they are: each GPU takes its
own (synth.topology.routes.own_nics), as NCCL does.
"""

from __future__ import annotations

from collections import defaultdict

from synth.topology.importing.draft import Draft, Wire
from synth.topology.importing.paths import MACHINE, nearest_root, above_gpus

NCCL_RULE = ("NCCL turns a GPU's channels over DIVUP(nets, GPUs) of the NICs nearest it "
             "(ncclTopoGetLocalNetType, src/graph/topo.cc; AWS's EFA plugin joins them into "
             "one device of their summed speed)")


def join_rails(draft: Draft) -> None:
    """Join each GPU's rails into one NIC in `draft` (module docstring), or leave the
    draft as it is and say why where some GPU had several NICs to itself."""
    nics = [p.name for p in draft.of_kind("nic")]
    if len(nics) < 2 or not draft.network:
        return
    groups = _rail_groups(draft, nics)
    if groups is None:
        return
    per_gpu = {len(rails) for rails in groups}
    whole = sum(len(rails) for rails in groups) == len(nics)
    if not whole or len(per_gpu) != 1:
        draft.assume("each GPU's nearest NICs are routed one at a time (not joined as "
                     "NCCL's channels use them: not every NIC of the box is a GPU's "
                     "rail, k alike)")
        return
    k = per_gpu.pop()
    wires = {w.b: w for w in draft.wires if w.kind == "pcie"}
    notes = {p.name: p.note for p in draft.parts}
    gone = {n for rails in groups for n in rails}
    draft.wires = [w for w in draft.wires if w.b not in gone]
    draft.drop(gone)
    for rails in groups:
        _joined(draft, rails, wires[rails[0]], notes)
    gbps = draft.network["gbps"]
    draft.network["gbps"] = round(gbps * k, 4)
    draft.network_note += f"; each NIC is a GPU's {k} rails together, {k} x {gbps:g} GB/s"
    draft.assume(f"each GPU's {k} nearest NICs are one NIC of {k} x {gbps:g} GB/s: "
                 f"{NCCL_RULE}")


def _rail_groups(draft: Draft, nics: list[str]) -> list[list[str]] | None:
    """Each GPU's rails, in NIC order: the NICs nearest G GPUs, k x G of them (k >= 2)
    hanging alike from one switch, with no other NIC nearer to those GPUs, cut into G
    runs of k; None when no GPU has more nearest NICs than its mates (nothing to join,
    nothing to say)."""
    wires = {w.b: w for w in draft.wires if w.kind == "pcie"}
    parent = {child: w.a for child, w in wires.items()}
    gpus = [p.name for p in draft.of_kind("gpu")]
    with_gpu = above_gpus(parent, gpus)
    at = defaultdict(list)  # the lowest vertex with a GPU below it -> the NICs there
    for n in nics:
        at[nearest_root(n, parent, with_gpu)].append(n)
    nested = set()  # the vertices with another NIC's root below them
    for root in at:
        v = parent.get(root) if root is not MACHINE else None
        while v is not None and v not in nested:
            nested.add(v)
            v = parent.get(v)
    groups, some = [], False
    for root, members in at.items():
        if root is MACHINE:
            continue  # NICs with no GPU below any switch above them: nobody's rails
        below = [g for g in gpus if _under(g, root, parent)]
        if len(members) <= len(below) or len(members) % len(below):
            continue
        some = True
        if root in nested or not _alike(members, wires):
            continue
        k = len(members) // len(below)
        groups += [members[i:i + k] for i in range(0, len(members), k)]
    return groups if some else None


def _under(v: str, root: str, parent: dict) -> bool:
    while v is not None:
        if v == root:
            return True
        v = parent.get(v)
    return False


def _alike(members: list[str], wires: dict[str, Wire]) -> bool:
    """The NICs hang from one switch by links alike (rate, count, latency)."""
    links = {(w.a, w.gbps, w.count, w.alpha_us) if w else None
             for w in (wires.get(n) for n in members)}
    return len(links) == 1 and None not in links


def _joined(draft: Draft, rails: list[str], link: Wire, notes: dict[str, str]) -> None:
    """Add the one NIC that stands for `rails` (NICs of one GPU, already taken out),
    its PCIe link counting theirs."""
    name = draft.add(f"{rails[0]}..{rails[-1]}", "nic",
                     f"{len(rails)} rails as one: " + "; ".join(
                         f"{n} ({notes[n]})" if notes[n] else n for n in rails))
    draft.link(link.a, name, link.gbps, link.count * len(rails), link.alpha_us,
               note=link.note, inferred=f"{len(rails)} NICs of one GPU used together, as "
               "NCCL uses them (assumptions)", kind="pcie")
