"""Which paths between GPUs carry a collective's traffic, as NCCL (2.30) picks them.

The lowering (synth.topology.linkmodel) routes a GPU pair over any chain of switches
and NICs, so an import's whole PCIe tree and socket links would join GPUs that NCCL
never joins that way: a DGX-1's GPUs 0 and 5 have no NVLink between them, yet meet over
PCIe and the sockets, at no latency. NCCL's rules, from its source:

- Rings and trees are searched over the tightest kind of path between GPUs first and
  over looser kinds only when none is found (ncclTopoCompute, src/graph/search.cc).
  When NVLink joins every GPU (directly, through NVSwitches, or through other GPUs,
  NCCL's NVB paths), GPU-to-GPU traffic stays on NVLink.
- Over PCIe a GPU pair uses P2P only when both sit under PCIe switches, not behind a
  CPU: PIX or PXB, NCCL_P2P_LEVEL's default PATH_PXB (ncclTopoCheckP2p,
  src/graph/paths.cc; SYS on an AMD CPU with at most two GPUs). Further apart (PHB,
  NODE, SYS) NCCL copies through host memory (its SHM transport), over the same PCIe
  links and sockets; its cost model charges either the PCI latency per hop.

So an import keeps, where NVLink joins every GPU, only the PCIe that joins each NIC to
the GPUs nearest it (the smallest part of the PCIe tree holding the NIC and a GPU, as
NCCL pairs a NIC with the GPUs at the best path type; the others reach it over NVLink
through them, as NCCL's PXN does), and no two GPUs meet there unless NVLink joins
them. Where NVLink leaves GPUs apart, they meet over PCIe, P2P or through host
memory, every PCIe or socket hop at NCCL's PCI latency (hardware.PCIE_ALPHA_US).
"""

from __future__ import annotations

from collections import defaultdict

from synth.topology.importing.draft import Draft
from synth.topology.importing.hardware import PCIE_ALPHA_US

MACHINE = None  # the piece root of a NIC whose CPU socket has no GPU: the whole machine


def apply_runtime_paths(draft: Draft) -> None:
    """Keep of the draft's PCIe and sockets what NCCL would use (module docstring)."""
    gpus = [p.name for p in draft.of_kind("gpu")]
    # without any NVLink, GPUs meet over PCIe alone, as NCCL's P2P or SHM has them
    nvlink = any(w.kind == "nvlink" for w in draft.wires)
    link = draft.gpu_link  # NVLink, or xGMI (kept as kind "nvlink": the GPUs' fabric)
    if nvlink and not _nvlink_joins(draft, gpus):
        draft.assume(f"{link} does not join every GPU: GPUs it leaves apart meet over PCIe "
                     "(P2P up to PXB, NCCL's default; through host memory beyond)")
    elif nvlink:
        before = len(draft.wires)
        _keep_pcie_for_nics(draft)
        if not any(w.kind == "socket" for w in draft.wires):
            draft.retract("between CPU sockets")
        draft.assume(f"{link} joins every GPU, so GPU-to-GPU traffic stays on it (NCCL "
                     f"searches {link} rings and trees first); of PCIe only what joins each "
                     f"NIC to its nearest GPUs is kept ({before - len(draft.wires)} PCIe and "
                     "socket links left out)")
    hops = [w for w in draft.wires if w.kind != "nvlink"]
    for w in hops:
        w.alpha_us = PCIE_ALPHA_US
    if hops:
        draft.assume(f"a PCIe or socket hop: {PCIE_ALPHA_US:g} us, NCCL's PCI latency per "
                     "hop (src/graph/tuning.cc)")


def _nvlink_joins(draft: Draft, gpus: list[str]) -> bool:
    """Whether NVLink wires (GPU to GPU, GPU to NVSwitch) join every GPU."""
    root = {}

    def find(v):
        root.setdefault(v, v)
        while root[v] != v:
            root[v] = root[root[v]]
            v = root[v]
        return v

    for w in draft.wires:
        if w.kind == "nvlink":
            root[find(w.a)] = find(w.b)
    return len({find(g) for g in gpus}) == 1


def _keep_pcie_for_nics(draft: Draft) -> None:
    """Drop every PCIe and socket wire but those on the way from a NIC, or from a GPU
    kept for it, to the root of the NIC's piece; then the switches left bare."""
    parent = {w.b: w.a for w in draft.wires if w.kind == "pcie"}
    kinds = {p.name: p.kind for p in draft.parts}
    with_gpu = above(parent, [name for name, kind in kinds.items() if kind == "gpu"])
    nics = [name for name, kind in kinds.items() if kind == "nic"]
    roots = {n: nearest_root(n, parent, with_gpu) for n in nics}
    pieces = _pieces(set(roots.values()), parent)
    below = _gpus_below(kinds, parent, pieces)
    pairs, switches = _nvlink_neighbours(draft)
    kept: set[tuple[str, str]] = set()
    cpus = set()
    for piece, members in below.items():
        for g in _clique(members, pairs, switches):
            kept |= _path_up(g, piece, parent, cpus)
    for n, root in roots.items():
        kept |= _path_up(n, pieces[root], parent, cpus)
    draft.wires = [w for w in draft.wires if w.kind == "nvlink" or (w.a, w.b) in kept
                   or (w.kind == "socket" and MACHINE in below and {w.a, w.b} <= cpus)]
    used = {v for w in draft.wires for v in (w.a, w.b)}
    draft.drop({p.name for p in draft.parts if p.kind == "pcie_switch" and p.name not in used})


def above(parent: dict, vertices) -> set:
    """Every vertex of the PCIe tree with one of `vertices` below it (each walk stops
    where an earlier one passed: linear in the tree)."""
    found = set()
    for g in vertices:
        v = parent.get(g)
        while v is not None and v not in found:
            found.add(v)
            v = parent.get(v)
    return found


def nearest_root(nic: str, parent: dict, with_gpu: set):
    """The lowest vertex above `nic` with a GPU below it; MACHINE when none is."""
    v = parent.get(nic)
    while v is not None and v not in with_gpu:
        v = parent.get(v)
    return v if v is not None else MACHINE


def _pieces(roots: set, parent: dict) -> dict:
    """Each NIC's root -> the highest root above it (or itself): nested parts of the
    tree are one piece; with MACHINE among them, everything is."""
    if MACHINE in roots:
        return {r: MACHINE for r in roots}
    top = {}
    for r in roots:
        highest, v = r, parent.get(r)
        while v is not None:
            if v in roots:
                highest = v
            v = parent.get(v)
        top[r] = highest
    return top


def _gpus_below(kinds: dict, parent: dict, pieces: dict) -> dict:
    """Piece root -> the GPUs under it in rank order (all of them under MACHINE)."""
    tops = set(pieces.values())
    below = defaultdict(list)
    for g in (name for name, kind in kinds.items() if kind == "gpu"):
        if MACHINE in tops:
            below[MACHINE].append(g)
            continue
        v = parent.get(g)
        while v is not None and v not in tops:
            v = parent.get(v)
        if v is not None:
            below[v].append(g)
    return below


def _path_up(v: str, top, parent: dict, cpus: set) -> set[tuple[str, str]]:
    """The PCIe wires (parent, child) from `v` up to `top` (to its root under
    MACHINE, whose CPU joins `cpus`)."""
    hops = set()
    while v != top and v in parent:
        hops.add((parent[v], v))
        v = parent[v]
    if top is MACHINE:
        cpus.add(v)
    return hops


def _nvlink_neighbours(draft: Draft) -> tuple[set, dict]:
    """(GPU pairs with an NVLink between them, both ways; each GPU's NVSwitches)."""
    pairs, switches = set(), defaultdict(set)
    kinds = {p.name: p.kind for p in draft.parts}
    for w in draft.wires:
        if w.kind != "nvlink":
            continue
        if kinds.get(w.a) == "gpu" and kinds.get(w.b) == "gpu":
            pairs |= {(w.a, w.b), (w.b, w.a)}
        else:
            gpu, switch = (w.a, w.b) if kinds.get(w.a) == "gpu" else (w.b, w.a)
            switches[gpu].add(switch)
    return pairs, switches


def _clique(members: list[str], pairs: set, switches: dict) -> list[str]:
    """The GPUs of one piece that may meet over its PCIe: greedily, in rank order, each
    one that NVLink joins in one hop (directly or through an NVSwitch) to every GPU kept
    before it, so that a PCIe route never stands in for NVLink."""
    if members and set.intersection(*(switches[g] for g in members)):
        return members  # one NVSwitch holds them all (the usual machine): linear time
    kept = []
    for g in members:
        if all((g, h) in pairs or switches[g] & switches[h] for h in kept):
            kept.append(g)
    return kept
