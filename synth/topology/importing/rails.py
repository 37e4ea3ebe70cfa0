"""A GPU's several nearest NICs, used together as NCCL uses them: one NIC of their rates.

NCCL gives each GPU DIVUP(nets, gpus) of the NICs nearest it (the nets at its best path
type, shared by the gpus nearest them) and turns its channels over them
(ncclTopoGetLocalNetType, src/graph/topo.cc, NCCL_NETDEVS_POLICY's default AUTO). On
AWS p5 that is all four of a GPU's 100 Gb/s EFA NICs, which AWS's plugin also joins
into one device of their summed speed (aws-ofi-nccl's multi-rail grouping): what a GPU
has is one 400 Gb/s NIC, not four routes.

synth routes a GPU pair one way (synth.topology.linkmodel), so an NCCL XML import says
this in its file: where k >= 2 NICs are nearest one GPU alone (no other GPU as near,
none of them nearer to another GPU), hanging from one parent on alike links, they are
one NIC (`a..b`, its first and last rail) of k times the rate, and the network's NIC
rate is k times too. Only where every NIC of the box is some GPU's rail, k alike, since
`network:` joins boxes at one NIC rate; otherwise nothing changes and the assumptions
say why. NICs that GPUs share are left as they are: where there are no more of them
than GPUs (Azure NDv4: two GPUs, two NICs) each GPU takes its own
(synth.topology.routes.own_nics), as NCCL does; where there are more, which of them
NCCL gives which GPU hangs on the GPUs' device numbers (a start at dev % gpus, spread
only over a power of two of NICs), so they are left apart too. A matrix (`nvidia-smi
topo -m`) gives no NIC rates or links, so its NICs are never joined.
"""

from __future__ import annotations

from collections import defaultdict

from synth.topology.importing.draft import Draft, Wire
from synth.topology.importing.paths import MACHINE, above, nearest_root

NCCL_RULE = ("NCCL turns a GPU's channels over DIVUP(nets, GPUs) of the NICs nearest it "
             "(ncclTopoGetLocalNetType, src/graph/topo.cc; AWS's EFA plugin joins them into "
             "one device of their summed speed)")


def join_rails(draft: Draft, rates_read: bool = True) -> None:
    """Join each GPU's rails into one NIC in `draft` (module docstring), or leave the
    draft as it is and say why where some GPU has more nearest NICs than one;
    `rates_read` False (a matrix): never join, the NICs' rates and links are assumed."""
    nics = [p.name for p in draft.of_kind("nic")]
    if len(nics) < 2 or not draft.network:
        return
    wires = {w.b: w for w in draft.wires if w.kind == "pcie"}
    groups, some = _rail_groups(draft, nics, wires)
    if not some:
        return
    if not rates_read:
        draft.assume("NICs are routed one at a time: a matrix gives no NIC rates or links "
                     "to join a GPU's nearest NICs by, as NCCL's channels use them (NCCL's "
                     "XML dump of the machine has them)")
        return
    per_gpu = {len(rails) for rails in groups}
    if sum(len(rails) for rails in groups) != len(nics) or len(per_gpu) != 1:
        draft.assume("NICs are routed one at a time, not as NCCL's channels use a GPU's "
                     "nearest NICs together: they are joined only where every NIC of the "
                     "box is nearest one GPU alone, as many for each, on alike links")
        return
    k = per_gpu.pop()
    notes = {p.name: p.note for p in draft.parts}
    gone = {n for rails in groups for n in rails}
    draft.wires = [w for w in draft.wires if w.b not in gone]
    draft.drop(gone)
    for rails in groups:
        _joined(draft, rails, wires[rails[0]], notes)
    gbps = draft.network["gbps"]
    draft.network["gbps"] = round(gbps * k, 4)
    draft.network_note += f"; each NIC is a GPU's {k} rails together, {k} x {gbps:g} GB/s"
    draft.description += f"; each GPU's {k} NICs joined into one"
    draft.assume(f"each GPU's {k} nearest NICs are one NIC of {k} x {gbps:g} GB/s: "
                 f"{NCCL_RULE}")


def _rail_groups(draft: Draft, nics: list[str], wires: dict[str, Wire]
                 ) -> tuple[list[list[str]], bool]:
    """(each GPU's rails, in NIC order: the k >= 2 NICs nearest one GPU alone, with no
    NIC nearer to a GPU below them, hanging alike from one parent; whether any GPU has
    more nearest NICs than one, joined or not). Linear in the tree: each GPU and each
    NIC's root walk up once (a dump of 4096 GPUs each on its own switch, walked per
    root, took 35 s)."""
    parent = {child: w.a for child, w in wires.items()}
    gpus = [p.name for p in draft.of_kind("gpu")]
    at = defaultdict(list)  # the lowest vertex with a GPU below it -> the NICs there
    with_gpu = above(parent, gpus)
    for n in nics:
        at[nearest_root(n, parent, with_gpu)].append(n)
    below = defaultdict(int)  # a root -> how many GPUs are below it
    for g in gpus:
        v = parent.get(g)
        while v is not None:
            if v in at:
                below[v] += 1
            v = parent.get(v)
    nested = above(parent, [r for r in at if r is not MACHINE])  # another root below
    groups, some = [], False
    for root, members in at.items():
        if root is MACHINE or len(members) <= below[root]:
            continue  # no GPU below (nobody's rails), or no more NICs than GPUs
        some = True
        if below[root] == 1 and root not in nested and _alike(members, wires):
            groups.append(members)
    return groups, some


def _alike(members: list[str], wires: dict[str, Wire]) -> bool:
    """The NICs hang from one parent (a switch or a CPU) by links alike (rate, count,
    latency)."""
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
