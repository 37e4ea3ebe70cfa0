"""`nvidia-smi topo -m` output as a Draft.

        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      NV18    PIX     0-47            0
GPU1    NV18     X      NODE    0-47            0
NIC0    PIX     NODE     X
    ...
NIC Legend:
  NIC0: mlx5_0

The matrix says how each pair of devices is joined, not what lies between them, so the
structure is inferred (and marked so in the file):

| entry | read as | modelled as |
| --- | --- | --- |
| NV# | # bonded NVLinks | a link of # lanes; equal NV# between every pair of 3+ GPUs: an NVSwitch each GPU reaches with # lanes |
| PIX | at most one PCIe bridge between | both on one PCIe switch |
| PXB | several bridges, no host bridge | switches under a common switch |
| PHB | through a PCIe host bridge | both under one host bridge |
| NODE | between host bridges of one NUMA node | both on one CPU socket |
| SYS | across the sockets' interconnect | different sockets, joined by a socket link |

A device is hung on the smallest group it shares with another (a GPU pair joined by
NVLink hides its PCIe relation; the CPU affinity column then puts it on its socket).
Bandwidths: NVLink and PCIe by the GPU generation (`--gpu`, else inferred from the NV
counts: NV18 H100, NV12 A100, NV1/NV2 on 8 GPUs V100), at the line rates of
synth.topology.physical's table as the built-ins (NVLink 25 GB/s a lane; PCIe x16 Gen3
16, Gen4 32, Gen5 64 GB/s), a socket link 10 GB/s (NCCL's Skylake figure: the matrix
does not name the CPU), NICs by --nic-gbps or the model's usual NIC. Latency as the
built-ins: 0.7 us on NVLink, 0.35 us through an NVSwitch, 2.6 us on the network, and
1 us a PCIe or socket hop (NCCL's PCI figure). Which PCIe paths GPUs use is paths.py's
rule (NCCL's), applied after the import.
"""

from __future__ import annotations

import re
from itertools import combinations

import networkx as nx

from synth.errors import BadInput
from synth.topology.importing.draft import Draft, vertex_name
from synth.topology.importing.hardware import (GPU_MODELS, MAX_NVLINKS, NVLINK_ALPHA_US, arch_of,
                                               NVLINK_GBPS, NVSWITCH_ALPHA_US, GpuModel,
                                               nic_speed, nvlink_what, pcie_x16_gbps,
                                               switch_computes)

LEVELS = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}  # SOC: old SYS
GROUP_KIND = {1: "a PCIe switch (PIX)", 2: "a PCIe switch above switches (PXB)",
              3: "a PCIe host bridge (PHB)", 4: "a CPU socket (NODE)"}
GROUP_NAME = {1: "pcie", 2: "pcie", 3: "hostbridge", 4: "cpu"}
SOCKET_GBPS = 10.0
MAX_SOCKETS = 64  # sockets are joined pairwise
CELL = re.compile(r"X|SYS|SOC|NODE|PHB|PXB|PIX|NV(\d+)")
DEVICE = re.compile(r"(GPU\d+|NIC\d+|mlx\w*|[a-z]+\d*_\w+)")


def is_matrix(text: str) -> bool:
    """Whether `text` looks like `nvidia-smi topo -m` output (a GPU0 column header)."""
    return any(line.split()[:1] == ["GPU0"] for line in text.splitlines()[:50]
               if line.strip())


def from_matrix(text: str, where: str, name: str, gpu: GpuModel | None = None,
                nic_gbps: float | None = None, fabric: str | None = None) -> Draft:
    """The Draft of an nvidia-smi topology matrix (module docstring)."""
    columns, rows, affinity, legend = _read(text, where)
    gpus = [c for c in columns if c.startswith("GPU")]
    nics = [c for c in columns if not c.startswith("GPU")]
    if len(gpus) < 2:
        raise BadInput(f"{where}: {len(gpus)} GPU: a collective needs two")
    draft = Draft(name, "", f"nvidia-smi topo -m output {where}")
    model, why = _model(rows, gpus, gpu)
    if gpu is None and model is GPU_MODELS["h100-sxm"]:  # one guess of three: said on
        # stderr too (the assumptions have it already)
        draft.warnings.append(f"{where}: NV18 between every pair read as H100, 25 GB/s a "
                              f"link; B200 and B300 show NV18 too, at 50: give --gpu "
                              f"h100-sxm, b200-sxm or b300-sxm to say which")
    names = {g: f"gpu{i}" for i, g in enumerate(gpus)}
    names.update({n: vertex_name(legend.get(n, n), n) for n in nics})
    for g in gpus:
        draft.add(names[g], "gpu", f"{g} of the matrix")
    for n in nics:  # two NICs of one name (a legend's typo) get -2, -3, ...
        names[n] = draft.add(names[n], "nic", f"{n} of the matrix"
                             + (f" ({legend[n]})" if n in legend else ""))
    pcie_gen = model.pcie_gen if model else 3
    pcie = pcie_x16_gbps(pcie_gen)
    draft.assume(f"PCIe: x16 Gen{pcie_gen}, {pcie:g} GB/s per direction (its line rate) for "
                 f"every PCIe link, {why}; the matrix gives no speeds")
    _nvlinks(draft, rows, gpus, names, model, why)
    _pcie(draft, rows, columns, names, affinity, pcie, where)
    _network(draft, [names[n] for n in nics], model, nic_gbps, fabric)
    draft.description = (f"{len(gpus)} GPUs, {_nics(len(nics))}, imported from nvidia-smi "
                         f"topo -m ({why})")
    return draft


def _read(text: str, where: str):
    """(columns, rows {a: {b: cell}}, affinity {device: text}, NIC legend)."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if head is None:
        raise BadInput(f"{where}: no matrix header (a line starting with GPU0)")
    columns = []
    for token in lines[head].split():
        if token in ("CPU", "NUMA", "GPU NUMA"):
            break
        if not DEVICE.fullmatch(token):
            raise BadInput(f"{where}: line {head + 1}: unexpected column {token[:40]!r}")
        columns.append(token)
    rows, affinity, legend = {}, {}, {}
    for number, line in enumerate(lines[head + 1:], start=head + 2):
        fields = line.split()
        if not fields:
            continue
        if fields[0].startswith("Legend") or fields[:2] == ["NIC", "Legend:"]:
            break  # the matrix is over
        if fields[0] not in columns:
            raise BadInput(f"{where}: line {number}: row {fields[0][:40]!r} is not one of the "
                           f"columns ({', '.join(columns)})")
        if len(fields) < len(columns) + 1:
            raise BadInput(f"{where}: line {number}: row {fields[0]} has "
                           f"{len(fields) - 1} entries for {len(columns)} columns")
        cells = fields[1:len(columns) + 1]
        for column, cell in zip(columns, cells):
            _check_cell(cell, f"{where}: line {number}: {fields[0]} to {column}")
        rows[fields[0]] = dict(zip(columns, cells))
        affinity[fields[0]] = " ".join(fields[len(columns) + 1:len(columns) + 2])
    for line in lines:
        match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
        if match:
            legend[match.group(1)] = match.group(2)
    if list(rows) != columns:
        missing = [c for c in columns if c not in rows]
        raise BadInput(f"{where}: the rows and columns disagree (columns {', '.join(columns)};"
                       f" rows {', '.join(rows) or 'none'}"
                       + (f"; no row for {missing[0]})" if missing else ")"))
    for a, b in combinations(columns, 2):
        if rows[a][b] != rows[b][a]:
            raise BadInput(f"{where}: {a} to {b} is {rows[a][b]} but {b} to {a} is "
                           f"{rows[b][a]}")
    for a in columns:
        if rows[a][a] != "X":
            raise BadInput(f"{where}: {a} to itself is {rows[a][a]}, expected X")
    return columns, rows, affinity, legend


def _check_cell(cell: str, place: str) -> None:
    match = CELL.fullmatch(cell)
    if not match:
        raise BadInput(f"{place}: unknown entry {cell[:40]!r} (expected X, NV#, PIX, PXB, "
                       "PHB, NODE or SYS)")
    # the digits are counted before they are read: a number of thousands of digits
    # is no NVLink count, and Python refuses to convert it
    digits = (match.group(1) or "").lstrip("0")
    if len(digits) > 4 or (digits and int(digits) > MAX_NVLINKS):
        raise BadInput(f"{place}: {cell[:12]}{'...' if len(cell) > 12 else ''}: more "
                       f"than {MAX_NVLINKS} NVLinks ({len(match.group(1)):,} digits)")


def _nv(cell: str) -> int:
    m = CELL.fullmatch(cell)
    return int(m.group(1)) if m and m.group(1) else 0


def _model(rows, gpus, given: GpuModel | None) -> tuple[GpuModel | None, str]:
    """The GPU model: given, or inferred from the NV counts."""
    if given is not None:
        return given, f"--gpu {given.name}"
    counts = {_nv(rows[a][b]) for a, b in combinations(gpus, 2)}
    pairs = {(i, j): _nv(rows[a][b]) for (i, a), (j, b) in combinations(enumerate(gpus), 2)
             if _nv(rows[a][b])}
    if counts == {18}:
        return GPU_MODELS["h100-sxm"], ("NV18 between every pair read as H100 (B200 and "
                                        "B300 show NV18 too: give --gpu)")
    if counts == {12}:
        return GPU_MODELS["a100-sxm"], "NV12 between every pair read as A100 (give --gpu)"
    if len(gpus) == 8 and set(pairs.values()) == {1, 2}:
        return GPU_MODELS["v100-sxm"], "NV1/NV2 between 8 GPUs read as V100 (give --gpu)"
    return None, "GPU model unknown (give --gpu)"


def _nvlinks(draft, rows, gpus, names, model, why) -> None:
    counts = {_nv(rows[a][b]) for a, b in combinations(gpus, 2)}
    if counts == {0}:
        draft.assume("no NVLink: the matrix shows none")
        return
    sm = model.sm if model else 70
    draft.arch = arch_of(sm)
    gbps = NVLINK_GBPS[sm]
    draft.assume(f"NVLink: {gbps:g} GB/s per link and direction, the {nvlink_what(sm)} "
                 f"({why})")
    if len(counts) == 1 and len(gpus) >= 3:
        lanes = counts.pop()
        because = f"NV{lanes} between every pair of GPUs: an NVSwitch"
        nvls = model is not None and switch_computes(model.sm)
        computes = f"{model.name}'s NVSwitches reduce and multicast (NVLS)" if nvls else ""
        draft.add("nvswitch", "nvswitch", computes, inferred=because,
                  can=("multicast", "reduce") if nvls else ())
        for g in gpus:
            draft.link(names[g], "nvswitch", gbps, lanes, NVSWITCH_ALPHA_US,
                       note=f"NV{lanes} (read) at {gbps:g} GB/s each", inferred=because,
                       kind="nvlink")
        return
    for a, b in combinations(gpus, 2):
        lanes = _nv(rows[a][b])
        if lanes:
            draft.link(names[a], names[b], gbps, lanes, NVLINK_ALPHA_US,
                       note=f"NV{lanes} (read) at {gbps:g} GB/s each", kind="nvlink")


def _pcie(draft, rows, columns, names, affinity, pcie: float, where: str) -> None:
    """Groups of devices at each level (module docstring), each a switch vertex, each
    device hung on its smallest group; sockets joined pairwise."""
    groups_at: dict[int, list[frozenset]] = {}
    for level in (1, 2, 3, 4):
        g = nx.Graph()
        g.add_nodes_from(columns)
        g.add_edges_from((a, b) for a, b in combinations(columns, 2)
                         if LEVELS.get(rows[a][b], 9) <= level)
        if level == 4:  # a GPU pair whose PCIe relation NVLink hides: its CPU affinity
            g.add_edges_from((a, b) for a, b in combinations(columns, 2)
                             if _nv(rows[a][b]) and affinity.get(a) == affinity.get(b)
                             and affinity.get(a) not in ("", "N/A"))
        groups_at[level] = [frozenset(c) for c in nx.connected_components(g)]
    level_of: dict[frozenset, int] = {}  # a group is named by the level it first forms at
    for level in (4, 3, 2, 1):
        for group in groups_at[level]:
            if level == 4 or len(group) >= 2:
                level_of[group] = level
    vertex: dict[frozenset, str] = {}
    counter = {"pcie": 0, "hostbridge": 0, "cpu": 0}
    for group in sorted(level_of, key=lambda g: (-level_of[g], sorted(g))):  # sockets first
        level = level_of[group]
        above = min((p for p in vertex if group < p), key=len, default=None)
        kind = GROUP_NAME[level]
        name = f"{kind}{counter[kind]}"
        counter[kind] += 1
        because = f"{GROUP_KIND[level]}: {', '.join(sorted(group))}"
        draft.add(name, "pcie_switch", inferred=because)
        vertex[group] = name
        if above is not None:
            draft.link(vertex[above], name, pcie, note=f"PCIe x16, {pcie:g} GB/s (assumed)",
                       inferred=because)
    for d in columns:
        home = min((g for g in vertex if d in g), key=len)
        draft.link(vertex[home], names[d], pcie, note=f"PCIe x16, {pcie:g} GB/s (assumed)",
                   inferred=f"{d} in {GROUP_KIND[level_of[home]]}")
    sockets = [vertex[g] for g in sorted(groups_at[4], key=lambda s: sorted(s))]
    if len(sockets) > MAX_SOCKETS:
        raise BadInput(f"{where}: {len(sockets)} CPU sockets (at most {MAX_SOCKETS}): SYS "
                       "between that many groups is not one machine")
    for a, b in combinations(sockets, 2):
        draft.link(a, b, SOCKET_GBPS, note=f"SYS: between sockets, {SOCKET_GBPS:g} GB/s "
                   "(NCCL's Skylake UPI figure; the matrix does not name the CPU)",
                   inferred="SYS between their devices: two sockets", kind="socket")
    if len(sockets) > 1:
        draft.assume(f"between CPU sockets: {SOCKET_GBPS:g} GB/s, NCCL's Skylake UPI figure")


def _nics(n: int) -> str:
    return f"{n} NIC{'' if n == 1 else 's'}"


def _network(draft, nics: list[str], model, nic_gbps, fabric) -> None:
    if nics:  # the matrix gives no speed
        draft.join_by_network(len(nics), *nic_speed(nic_gbps, None, model), fabric)
