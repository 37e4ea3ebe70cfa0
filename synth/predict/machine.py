"""A topology as NCCL's tuner sees it: GPUs per node, the rate each GPU has into its
node's fabric, the NICs per node, and what the switches can do.

NCCL's graph search (src/graph/search.cc) packs channels into exactly these rates;
synth.predict.nccl turns them into NCCL's bandwidths and latencies. Line rates here;
the efficiencies come from synth.topology.figures.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache, cached_property, partial

import networkx as nx

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
    # how many times longer than its GPUs' own rates allow a node's alltoall takes at
    # least: a number, or how to compute it (node_alltoall_spread, where the GPUs do not
    # all meet on NVSwitches), when alltoall first asks: on one box of 1100 GPUs it takes
    # 40 s, and no other collective reads it
    spread: float | Callable[[], float] = field(default=1.0, compare=False, repr=False)
    # the narrowest PCIe hop on a GPU's widest way to a NIC (the slowest GPU's): a GPU
    # link at half width runs its NIC traffic at that hop's rate, at PCIe's efficiency
    nic_path_gbps: float = math.inf

    @cached_property
    def alltoall_spread(self) -> float:
        return self.spread() if callable(self.spread) else self.spread

    @property
    def arch(self) -> str:
        return self.figures.arch

    @property
    def per_node(self) -> int:
        return self.ranks // self.nodes


def machine_of(topo: Topology) -> Machine:
    """The NCCL view of `topo`. O(vertices + links); where a box's GPUs do not all meet
    on NVSwitches, node_alltoall_spread's program and searches over one box once
    alltoall_spread is first read."""
    figures = topo.figures or defaults("ampere")
    kind = {v.name: v.kind for v in topo.vertices}
    box = {v.name: v.box for v in topo.vertices}
    gpus = topo.gpus
    nvlink_out: Counter = Counter()
    pcie_out: Counter = Counter()
    direct_out: Counter = Counter()  # to NICs and CPUs with no PCIe switch between
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
        elif a == GPU:
            direct_out[link.src] += link.bandwidth
        elif a == NIC and b == "net_switch":
            uplink[link.src] = uplink.get(link.src, 0.0) + link.bandwidth
    # NVLink only where it joins every GPU of a box (NVLinked pairs joined over PCIe, as
    # Azure NCv4's, ring over PCIe: at NVLink's rate their allreduce was 4.5 x under the
    # proven bound), or where the GPUs have no PCIe at all (a view, a file of NVLinks)
    intra = "nvlink" if all(nvlink_out[g] > 0 for g in gpus) and (
        _nvlink_joins_boxes(topo, kind, box) or not any(pcie_out.values())) else "pcie"
    # a GPU with no PCIe switch (MI300X's, alone in a communicator's view of its box)
    # reaches its node through its own links: at 1 GB/s its rings were 63 x too slow
    rate = nvlink_out if intra == "nvlink" else {g: pcie_out[g] or direct_out[g] for g in gpus}
    intra_gbps = min(rate[g] for g in gpus) or 1.0
    switches = [v for v in topo.vertices if v.kind == "nvswitch"]
    if switches or pair == 0:
        pair = intra_gbps
    node_of = [box[g] for g in gpus]
    nodes = len(set(node_of))
    paths = _nic_paths(topo, kind)
    nics_per = defaultdict(set)
    for reached in paths.values():
        for nic in reached:
            if nic in uplink:
                nics_per[box[nic]].add(nic)
    nics = min((len(v) for v in nics_per.values()), default=0) if nodes > 1 else 0
    nic_gbps = min((uplink[n] for v in nics_per.values() for n in v), default=0.0) \
        if nics else 0.0
    # each GPU's best way out, and the slowest GPU's of those
    nic_path = min((max(rate for nic, rate in reached.items() if nic in uplink)
                    for reached in paths.values() if set(reached) & set(uplink)),
                   default=math.inf) if nics else math.inf
    nvls = (any({"reduce", "multicast"} <= set(v.can) for v in switches)
            and figures.arch in ("hopper", "blackwell"))
    sharp = any("reduce" in v.can for v in topo.vertices if v.kind == "net_switch")
    # one memo for every copy dataclasses.replace makes (calibrate makes one a row and
    # a step of its fit, and recomputed the spread each time)
    spread = 1.0 if switches else cache(partial(
        node_alltoall_spread, topo, [r for r, b in enumerate(node_of) if b == node_of[0]],
        intra_gbps, intra))
    return Machine(topo.name, figures, len(gpus), nodes, intra, intra_gbps, pair, nics,
                   nic_gbps, bool(switches), nvls, sharp, spread, nic_path)


# variables of the max concurrent flow's program, at most (16 GPUs on 64 links: a
# tenth of a second; torus:8x8's 16,384 took 13 s, too long for every comparison)
SPREAD_LP_LIMIT = 4096


def node_alltoall_spread(topo: Topology, ranks: list[int], gpu_gbps: float,
                         intra: str) -> float:
    """How many times longer than (n - 1) shares at `gpu_gbps` one node's alltoall (its
    GPUs `ranks`, n of them) takes at the least over the links NCCL's sends take: NVLinks
    between GPUs where every GPU has them and they join all of them (NCCL's P2P takes
    NVLink, through one GPU between where there is no direct one: PATH_NVB,
    src/graph/paths.cc), else every link of the node, PCIe too. A lower bound (its flows
    may cross more GPUs than NCCL's one): the max concurrent flow (synth.bounds.alltoall:
    its linear program, or its cuts past SPREAD_LP_LIMIT variables, which on a large
    mesh miss its bisection) or, where larger, every share crossing as many links as its
    fewest hops. At least 1. Counting every peer at a GPU's whole NVLink rate made
    NCCL's alltoall on a torus of NVLinks faster than the proven bound. Box 0 stands for
    every box. Cost: that program (a tenth of a second at its limit) and a breadth-first
    search per GPU."""
    from synth.bounds.alltoall import alltoall_bound
    from synth.bounds.flows import Clock
    from synth.topology.communicator import view

    n = len(ranks)
    if n < 3 or gpu_gbps <= 0:
        return 1.0
    node = view(topo, ranks)
    graph = _sends_graph(node, intra)
    hops = _hops_sum(graph, node.gpus)
    if hops is None:  # some GPU reaches not every other: NCCL's own paths, not these
        return 1.0
    capacity = sum(c for _, _, c in graph.edges(data="capacity"))
    flow = alltoall_bound(node, graph, node.gpus, Clock(), lp_limit=SPREAD_LP_LIMIT)
    least = max(float(flow), hops / capacity)
    return max(1.0, least / ((n - 1) / gpu_gbps))


def _sends_graph(node: Topology, intra: str) -> nx.DiGraph:
    """The links a node's GPUs send to each other over, capacities in GB/s: their
    NVLinks, or every link but those to NICs and network switches."""
    kind = {v.name: v.kind for v in node.vertices}
    inside = ({GPU} if intra == "nvlink" else
              {k for k in kind.values() if k not in (NIC, "net_switch")})
    graph = nx.DiGraph()
    graph.add_nodes_from(node.gpus)
    for link in node.links:
        if kind[link.src] in inside and kind[link.dst] in inside:
            old = graph.edges[link.src, link.dst]["capacity"] if graph.has_edge(
                link.src, link.dst) else 0
            graph.add_edge(link.src, link.dst,
                           capacity=old + Fraction(str(link.gbps)) * link.count)
    return graph


def _hops_sum(graph: nx.DiGraph, gpus: list[str]) -> int | None:
    """The fewest hops summed over every ordered pair of `gpus`; None where one reaches
    not every other. Sources in blocks, so that memory stays small."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    place = {v: i for i, v in enumerate(graph.nodes)}
    pairs = [(place[u], place[v]) for u, v in graph.edges]
    n = len(place)
    sparse = csr_matrix((np.ones(len(pairs)), ([a for a, _ in pairs], [b for _, b in pairs])),
                        shape=(n, n))
    ends = [place[g] for g in gpus]  # the GPUs, as sources and as targets
    total = 0
    for first in range(0, len(ends), 256):
        hops = shortest_path(sparse, directed=True, unweighted=True,
                             indices=ends[first:first + 256])[:, ends]
        if np.isinf(hops).any():
            return None
        total += int(hops.sum())
    return total


def _nvlink_joins_boxes(topo: Topology, kind: dict, box: dict) -> bool:
    """Whether NVLinks and NVSwitches join every GPU of each box to every other.
    O(links), by union-find (networkx's graph of fc:1100's 1.2 million links: 1.2 s)."""
    parent: dict[str, str] = {}

    def root(v: str) -> str:
        while parent.get(v, v) != v:
            parent[v] = v = parent.get(parent[v], parent[v])
        return v

    joining = {GPU, "nvswitch"}
    for link in topo.links:
        if kind[link.src] in joining and kind[link.dst] in joining:
            a, b = root(link.src), root(link.dst)
            if a != b:
                parent[a] = b
    first: dict = {}
    return all(first.setdefault(box[g], root(g)) == root(g) for g in topo.gpus)


def _nic_paths(topo: Topology, kind: dict) -> dict[str, dict[str, float]]:
    """{GPU: {NIC: the widest path's narrowest link, GB/s}} over the NICs each GPU
    reaches over PCIe alone (not through another GPU or a switch that joins GPUs), those
    NCCL sends its traffic through: NCCL's path to a NIC is no faster than its slowest
    hop (a GPU's PCIe link at half width, a NIC on an older PCIe switch), per GPU (two
    GPUs behind one NIC each take their own path). A communicator's view keeps its
    box's other NICs, which its GPUs do not use. O(GPUs x the links each reaches)."""
    onward = defaultdict(list)  # the links such a walk may take (not into a GPU: fc:1100
    for link in topo.links:     # has 1.2 million of those)
        if kind[link.dst] not in (GPU, "nvswitch", "net_switch"):
            onward[link.src].append((link.dst, link.bandwidth))
    paths = {}
    for gpu in topo.gpus:
        widest, heap = {gpu: math.inf}, [(-math.inf, gpu)]
        while heap:  # Dijkstra on the narrowest hop, widest first
            rate, v = heapq.heappop(heap)
            if -rate < widest[v]:
                continue
            for w, gbps in onward[v]:
                through = min(-rate, gbps)
                if through > widest.get(w, 0.0):
                    widest[w] = through
                    heapq.heappush(heap, (-through, w))
        paths[gpu] = {v: rate for v, rate in widest.items() if kind[v] == NIC}
    return paths
