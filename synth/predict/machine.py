"""A topology as NCCL's tuner sees it: GPUs per node, the rate each GPU has into its
node's fabric, the NICs per node, and what the switches can do.

NCCL's graph search (src/graph/search.cc) packs channels into exactly these rates;
synth.predict.nccl turns them into NCCL's bandwidths and latencies. Line rates here;
the efficiencies come from synth.topology.figures.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from synth.topology.figures import Figures, defaults
from synth.topology.physical import GPU, NIC, Topology


@dataclass(frozen=True)
class Machine:
    name: str
    figures: Figures
    ranks: int
    nodes: int
    intra: str  # "nvlink" or "pcie": how the GPUs of a node reach each other
    intra_gbps: float  # line rate from one GPU into its node's fabric (the least GPU's)
    pair_gbps: float  # the widest GPU-to-GPU path's line rate (NCCL's maxBw)
    nics: int  # NICs of a node that reach the network
    nic_gbps: float  # line rate of one of them (the least)
    nvswitch: bool  # GPUs meet on NVSwitches (CollNet Direct needs them)
    nvls: bool  # the NVSwitches reduce and multicast, and the GPUs can use it
    sharp: bool  # the network switches reduce (CollNet)

    @property
    def arch(self) -> str:
        return self.figures.arch

    @property
    def per_node(self) -> int:
        return self.ranks // self.nodes


def machine_of(topo: Topology) -> Machine:
    """The NCCL view of `topo`. O(vertices + links)."""
    figures = topo.figures or defaults("ampere")
    kind = {v.name: v.kind for v in topo.vertices}
    box = {v.name: v.box for v in topo.vertices}
    gpus = topo.gpus
    nvlink_out: Counter = Counter()
    pcie_out: Counter = Counter()
    pair = 0.0
    uplink: dict[str, float] = {}
    for link in topo.links:
        a, b = kind[link.src], kind[link.dst]
        if a == GPU and b in (GPU, "nvswitch"):
            nvlink_out[link.src] += link.bandwidth
            if b == GPU:
                pair = max(pair, link.bandwidth)
        elif a == GPU and b == "pcie_switch":
            pcie_out[link.src] += link.bandwidth
        elif a == NIC and b == "net_switch":
            uplink[link.src] = uplink.get(link.src, 0.0) + link.bandwidth
    intra = "nvlink" if all(nvlink_out[g] > 0 for g in gpus) else "pcie"
    rate = nvlink_out if intra == "nvlink" else pcie_out
    intra_gbps = min(rate[g] for g in gpus) or 1.0
    switches = [v for v in topo.vertices if v.kind == "nvswitch"]
    if switches or pair == 0:
        pair = intra_gbps
    node_of = [box[g] for g in gpus]
    nodes = len(set(node_of))
    nics_per = defaultdict(list)
    for nic in _local_nics(topo, kind):
        if nic in uplink:
            nics_per[box[nic]].append(uplink[nic])
    nics = min((len(v) for v in nics_per.values()), default=0) if nodes > 1 else 0
    nic_gbps = min((g for v in nics_per.values() for g in v), default=0.0) if nics else 0.0
    nvls = (any({"reduce", "multicast"} <= set(v.can) for v in switches)
            and figures.arch in ("hopper", "blackwell"))
    sharp = any("reduce" in v.can for v in topo.vertices if v.kind == "net_switch")
    return Machine(topo.name, figures, len(gpus), nodes, intra, intra_gbps, pair, nics,
                   nic_gbps, bool(switches), nvls, sharp)


def _local_nics(topo: Topology, kind: dict) -> set[str]:
    """The NICs some GPU reaches over PCIe alone (not through another GPU or a
    switch that joins GPUs): those NCCL sends a node's traffic through. A communicator's
    view keeps its box's other NICs, which its GPUs do not use."""
    g = topo.graph()
    found, stack = set(), [v for v in topo.gpus]
    seen = set(stack)
    while stack:
        v = stack.pop()
        for w in g.successors(v):
            if w in seen or kind[w] in (GPU, "nvswitch", "net_switch"):
                continue
            seen.add(w)
            if kind[w] == NIC:
                found.add(w)
            else:
                stack.append(w)
    return found
