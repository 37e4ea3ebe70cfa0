"""NCCL as it runs: its algorithms and protocols, the latency and bandwidth NCCL's tuner
gives each (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, of NCCL
2.30.7), NCCL's choice per call (the fastest in that model), and the time the choice
takes on the hardware.

Both use one set of formulas. NCCL's choice feeds them the rates NCCL counts (its
per-link NVLink figures, width x rate / 80 for PCIe, its NIC ladder); the prediction
feeds them achieved rates (line rate x the figures' efficiencies) and adds the call's
fixed cost, which NCCL's model leaves out. What is approximated, and why, is in
docs/cost-model.md ("NCCL as it runs"): the channel search (src/graph/search.cc) is
reduced to its speed ladders and its channel duplication, the CPU is taken to be
Intel's (network overhead 1 us), and alltoall, which NCCL runs as grouped send and
receive outside this model, is charged its busiest link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from synth.errors import BadInput
from synth.topology.figures import NVLS_EFFICIENCY, Figures
from synth.predict.machine import Machine
from synth.predict.nccl_fill import fill_us
# NCCL's tables; COLLECTIVES and NCCL_VERSION are read from here by the callers
from synth.predict.nccl_tables import (ALGORITHMS,  # noqa: F401
                                       ARCH_INDEX, BANDWIDTH_FACTOR, BASE_US,
                                       COLLECTIVES, HOP_US, LL_MAX_GBPS, LL_MAX_ROW,
                                       MAX_RING_CHANNELS, NCCL_NIC_SHARE, NCCL_NVLINK_SHARE,
                                       NCCL_PCIE_SHARE, NCCL_VERSION, NET_OVERHEAD_US,
                                       NVLS_TREE_CHANNEL_GBPS, PCI_BW, PROTOCOLS,
                                       RING_LL128_CHANNEL_GBPS, SPEEDS_INTER, SPEEDS_INTRA,
                                       THREAD_THRESHOLD, THREADS, TREE_CHANNEL_GBPS,
                                       TREE_CORRECTION, TREE_LL128_CHANNEL_GBPS)


def as_it_runs(figures) -> str:
    """How tables name the reference: NCCL as it runs there, or, where RCCL runs the
    collectives (figures.library), NCCL's tuner standing in for RCCL's."""
    if getattr(figures, "library", "nccl") == "rccl":  # None: a topology without costs
        return (f"NCCL {NCCL_VERSION} as it runs there (standing in for RCCL, whose own "
                f"tuner synth does not model yet: docs/cost-model.md, \"AMD GPUs\")")
    return f"NCCL {NCCL_VERSION} as it runs there"

@dataclass(frozen=True)
class Rates:
    """GB/s as the formulas take them: a GPU into its node's fabric, the widest pair,
    one NIC; and NVLS's efficiency."""

    intra: float
    pair: float
    nic: float
    nvls: float


@dataclass(frozen=True)
class Graph:
    channels: int
    intra: float  # GB/s per channel inside a node
    inter: float  # GB/s per channel across nodes


@dataclass(frozen=True)
class Option:
    """One algorithm and protocol for one collective: time = latency_us + n / (1e3 x
    gbps) in NCCL's model (gbps: its algorithm bandwidth for n as NCCL counts bytes)."""

    algorithm: str
    protocol: str
    latency_us: float
    gbps: float
    channels: int


@dataclass(frozen=True)
class Choice:
    collective: str
    nbytes: int
    option: Option  # what NCCL's tuner runs
    nccl_us: float  # its time in NCCL's own model
    predicted_us: float  # the time it takes on the hardware (cost model 2)
    reason: str

    @property
    def name(self) -> str:
        return f"{self.option.algorithm}/{self.option.protocol}"


def nccl_rates(m: Machine) -> Rates:
    share = NCCL_NVLINK_SHARE[m.arch] if m.intra == "nvlink" else NCCL_PCIE_SHARE
    return Rates(m.intra_gbps * share, m.pair_gbps * share,
                 min(m.nic_gbps, m.nic_path_gbps) * NCCL_NIC_SHARE, NVLS_EFFICIENCY[m.arch])


def achieved_rates(m: Machine, f: Figures) -> Rates:
    eff = f.efficiency(m.intra)
    # a NIC behind a narrower PCIe hop runs at that hop's rate, at PCIe's efficiency
    nic = min(m.nic_gbps * f.nic, m.nic_path_gbps * f.efficiency("pcie"))
    return Rates(m.intra_gbps * eff, m.pair_gbps * eff, nic, f.nvls)


def _sm(arch: str) -> str:
    return {"hopper": "sm90", "blackwell": "sm100"}.get(arch, "sm80")


def _speed(ladder, most: float) -> float:
    return next((s for s in ladder if s <= most), ladder[-1])


def ring_graph(m: Machine, counted: Rates, achieved: Rates | None = None) -> Graph:
    """The ring (and tree) channels NCCL's search finds at the counted rates: from the
    fastest speed of its ladder a path carries down to about half of it (its first
    pass, "Decrease bw until we find a solution", stopping once the channels carry the
    GPU's whole rate), the speed whose channels carry the most, as many as the GPU's
    fabric (and, across nodes, the node's NICs) hold at it; then doubled as
    ncclTopoDupChannels does. Each channel's rate is the speed (NCCL's view) or, given
    `achieved`, its share of the achieved aggregate."""
    speed, channels = _search(m, counted)
    fast = m.arch in ("hopper", "blackwell")
    if speed >= 25 and not (fast and speed < 50 and channels > 4):
        doubled = min(2 * channels, MAX_RING_CHANNELS)
        speed /= math.ceil(doubled / channels)
        channels = doubled
    if achieved is None:
        return Graph(channels, speed, speed)
    total = achieved.intra if m.nodes == 1 else min(achieved.intra, m.nics * achieved.nic)
    return Graph(channels, total / channels, total / channels)


def _search(m: Machine, counted: Rates) -> tuple[float, int]:
    """(speed, channels) of the ring search's first pass (ring_graph)."""
    sm = _sm(m.arch)
    if m.nodes == 1:
        ladder, most = SPEEDS_INTRA[sm], min(counted.pair, counted.intra)
    else:
        ladder, most = SPEEDS_INTER[sm], min(counted.pair, counted.nic, counted.intra)

    def fits(speed):
        channels = math.floor(counted.intra / speed + 1e-9)
        if m.nodes > 1:
            channels = min(channels, m.nics * math.floor(counted.nic / speed + 1e-9))
        return max(1, min(MAX_RING_CHANNELS, channels))

    first = _speed(ladder, most)
    best = (first, fits(first))
    for speed in (s for s in ladder if s < first and s / first > 0.49):
        if best[0] * best[1] >= counted.intra - 1e-9:
            break  # the channels carry the GPU's whole rate: NCCL stops searching
        if speed * fits(speed) > best[0] * best[1] + 1e-9:
            best = (speed, fits(speed))
    return best


def nvls_graph(m: Machine, counted: Rates, achieved: Rates | None = None) -> Graph:
    """NVLS channels: one per GPU of a node (NCCL's search wants them all as heads),
    each at its share of the fabric (the search's x ppn / (ppn - 1) for patterns that
    need not close a ring); across nodes a channel has its share of the NICs."""
    ppn = m.per_node
    channels = min(32, ppn)
    sm = _sm(m.arch)
    boost = ppn / max(1, ppn - 1)
    ladder = SPEEDS_INTER[sm] if m.nodes > 1 else SPEEDS_INTRA[sm]  # search.cc's choice
    intra = _speed(ladder, counted.intra * boost / channels)
    inter = _speed(SPEEDS_INTER[sm], m.nics * counted.nic / channels) if m.nodes > 1 else 0.0
    if achieved is not None:
        intra = achieved.intra * boost / channels
        inter = m.nics * achieved.nic / channels if m.nodes > 1 else 0.0
    return Graph(channels, intra, inter if m.nodes > 1 else intra)


def _index2(m: Machine) -> int:
    return min(m.nodes, 3) - 1


def _applies(m: Machine, coll: str, algo: str, proto: str) -> bool:
    """Which algorithm and protocol NCCL would consider (ncclTopoTuneModel's filters
    and its enable rules)."""
    if coll in ("broadcast", "reduce") and algo != "ring":
        return False
    if coll in ("allgather", "reducescatter") and algo not in ("pat", "ring", "nvls",
                                                               "collnet_direct"):
        return False
    if coll == "allreduce" and algo == "pat":
        return False
    if algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat") and proto != "Simple":
        return False
    if algo == "pat" and m.per_node != 1:
        return False
    if algo in ("nvls", "nvls_tree") and not m.nvls:
        return False
    if algo == "nvls_tree" and m.nodes == 1:
        return False
    if algo.startswith("collnet") and not (m.sharp and m.nodes > 1):
        return False
    if algo == "nvls" and m.nodes > 1 and not m.sharp:
        return False
    if algo == "collnet_direct" and not m.nvswitch:
        return False
    if coll in ("allgather", "reducescatter") and algo in ("nvls", "collnet_direct") and m.nodes > 1:
        return False  # needs the network's own allgather / reducescatter
    if proto == "LL128" and m.intra != "nvlink":
        return False  # NCCL enables LL128 only over NVLink (typeIntra <= NVB)
    return True


def options(m: Machine, coll: str, counted: Rates, achieved: Rates | None = None,
            latency_scale: float = 1.0) -> list[Option]:
    """Every algorithm and protocol NCCL considers for `coll` on `m`, with the latency
    and bandwidth ncclTopoTuneModel gives it; with `achieved`, the same formulas over
    achieved rates and the network's hop latency on the hardware (latencies x
    latency_scale)."""
    hop = nccl_net_hop if achieved is None else hardware_net_hop
    ring = ring_graph(m, counted, achieved)
    nvls = nvls_graph(m, counted, achieved) if m.nvls else None
    out = []
    for algo in ALGORITHMS:
        for p, proto in enumerate(PROTOCOLS):
            if not _applies(m, coll, algo, proto):
                continue
            graph = nvls if algo in ("nvls", "nvls_tree") else ring
            if graph is None or graph.channels < 1 or (algo.startswith("nvls") and graph.channels < 2):
                continue
            if achieved is not None and algo in ("nvls", "nvls_tree"):
                gbps = _nvls_achieved(m, coll, algo, graph, achieved)
            else:
                gbps = _bandwidth(m, coll, algo, p, graph, counted if achieved is None else achieved)
            if gbps <= 0:
                continue
            out.append(Option(algo, proto, _latency(m, coll, algo, p, hop) * latency_scale,
                              gbps, graph.channels))
    return out


def _steps(m: Machine, coll: str) -> int:
    n = m.ranks
    return 2 * (n - 1) if coll == "allreduce" else n - 1 if coll in ("allgather", "reducescatter") else n


def _bandwidth(m: Machine, coll: str, algo: str, p: int, graph: Graph, rates: Rates,
               share: float = 1.0) -> float:
    """ncclTopoTuneModel's bandwidth of `algo` with protocol PROTOCOLS[p]: GB/s of
    the bytes NCCL counts for the call (its bus bandwidth converted). With `share`, the
    same formula over that share of the channels (those NCCL launches for a small
    call): the channels' rates and per-channel caps scale with it, LL's cap on the
    whole bus bandwidth (llMaxBws) does not."""
    ai, i2, ppn = ARCH_INDEX[m.arch], _index2(m), m.per_node
    ch = graph.channels * share
    ll_max = LL_MAX_GBPS[ai if m.nodes == 1 else LL_MAX_ROW[m.figures.cpu]][i2]
    bw = graph.intra if m.nodes <= 2 or algo.startswith("collnet") else graph.inter
    if algo in ("nvls", "nvls_tree"):
        intra = graph.intra * rates.nvls * (ch - 1) / ch
        intra *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
        inter = graph.inter * (2 if m.nodes <= 2 and algo == "nvls_tree" else 1)
        bw = min(intra, inter, NVLS_TREE_CHANNEL_GBPS[ai][i2] if algo == "nvls_tree" else math.inf)
    bus = ch * bw
    if algo == "ring" and p == 0:
        bus = min(ll_max, bus * 0.5)
    if algo == "ring" and p == 1:
        bus = min(bus * 0.92, ch * RING_LL128_CHANNEL_GBPS[ai][i2])
    if algo == "tree" and coll == "allreduce":
        bus = min(bus * 0.92, ch * TREE_CHANNEL_GBPS[ai][i2])
    if algo == "tree" and p == 0:
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and p == 1:
        bus = min(bus * (7 / 9 if m.nodes == 1 else 120 / 128), ch * TREE_LL128_CHANNEL_GBPS[ai][i2])
    if algo == "tree" and ppn == 1:
        bus *= 0.85  # one GPU per node: the search's pattern is a plain tree (search.cc)
    if algo == "pat":
        bus *= 0.75
    if algo == "collnet_direct":
        if coll in ("allgather", "reducescatter"):
            bus = ppn * min(graph.intra, graph.inter * 0.9)
        else:
            factor = ppn / graph.channels  # GPUs per NIC
            bus /= factor - (factor - 1) / 2
            bus *= 0.85 if ai >= 2 else 1.0
    if algo == "ring" or coll not in ("allgather", "reducescatter"):
        bus *= m.ranks / _steps(m, coll) if algo in ("ring", "nvls", "nvls_tree") else 0.5
    return bus


def _nvls_achieved(m: Machine, coll: str, algo: str, graph: Graph, rates: Rates) -> float:
    """What NVLS moves, not NCCL's formula for it: in an allreduce each GPU's data
    crosses its port into the switch once and the result comes back once, and the
    switch's copy to the GPU that asked is one more of N + 1 (so N / (N + 1) of the
    port), at NVLink's efficiency times NVLS's own. NVLS-tree adds the tree over
    nodes: a node's NICs carry its whole buffer once each way (twice past 2 nodes), and
    NCCL's per-channel cap on it (perChMaxNVLSTreeBw) stays."""
    ppn = m.per_node
    port = rates.intra * rates.nvls
    if coll == "allreduce":
        gbps = port * ppn / (ppn + 1)
    else:  # allgather, reducescatter: (N - 1) / N of the buffer through the port
        gbps = port * ppn / max(1, ppn - 1)
    if algo == "nvls_tree":
        across = m.nics * rates.nic / (1 if m.nodes <= 2 else 2)
        cap = graph.channels * NVLS_TREE_CHANNEL_GBPS[ARCH_INDEX[m.arch]][_index2(m)]
        gbps = min(gbps, across, cap * m.ranks / _steps(m, coll))
    return gbps


def nccl_net_hop(f: Figures, algo: str, p: int) -> float:
    """An inter-node hop in NCCL's model: its NET table plus what the network's plugin
    reports (graph->latencyInter), added once more for Simple ("the flush")."""
    plugin = f.network.plugin_latency_us
    return HOP_US["net"][algo][p] + plugin * (2 if p == 2 else 1)


def hardware_net_hop(f: Figures, algo: str, p: int) -> float:
    """An inter-node hop on the hardware: NCCL's NET table (InfiniBand's), or, where the
    network's message latency is known (f.net_us), that and its Simple completion."""
    if f.net_us <= 0:
        return HOP_US["net"][algo][p]
    return f.net_us + (f.network.completion_us if p == 2 else 0.0)


def _latency(m: Machine, coll: str, algo: str, p: int, hop=nccl_net_hop) -> float:
    """ncclTopoTuneModel's latency of `algo` with protocol PROTOCOLS[p], in us; `hop`
    prices an inter-node hop (NCCL's view or the hardware's)."""
    ppn, nodes = m.per_node, m.nodes
    lat = BASE_US[algo][p]
    intra = HOP_US[m.intra][algo][p]
    inter = hop(m.figures, "tree" if ppn == 1 else algo, p)  # ppn 1: latencies exposed
    steps = _steps(m, coll)
    levels = int(math.log2(nodes))
    if algo == "ring":
        if coll in ("broadcast", "reduce"):
            return lat + (HOP_US[m.intra][algo][p] if nodes == 1 else hop(m.figures, algo, p))
        overhead = NET_OVERHEAD_US[m.figures.cpu] * (3 if p == 2 else 1) if nodes > 1 else 0.0
        intra = max(intra, overhead)
        across = 0 if nodes == 1 else 2 * (nodes - 1) if coll == "allreduce" else nodes - 1
        return lat + (steps - across) * intra + across * inter
    if algo == "tree":
        return lat + 2 * ((ppn - 1) * intra + levels * inter)
    if algo == "collnet_direct":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if algo == "collnet_chain":
        return lat + 2 * (ppn - 1) * intra + inter
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return lat + intra + 2 * levels * inter
    return lat + levels * inter / 3.5 + m.ranks * 2.8  # pat


def model_us(m: Machine, coll: str, option: Option, nbytes: int) -> float:
    """ncclTopoGetAlgoTime: the option's time for an nbytes call, with its corrections
    (trees at medium sizes, the ring's plateau across nodes)."""
    gbps, lat = option.gbps, option.latency_us
    log_size = int(math.log2(nbytes >> 6)) if nbytes >> 6 else -1
    p = PROTOCOLS.index(option.protocol)
    corrected = ((option.algorithm == "tree" and log_size < 23)
                 or (option.algorithm == "nvls_tree" and m.arch == "blackwell" and log_size < 24))
    if coll == "allreduce" and corrected and log_size >= 0:
        gbps *= TREE_CORRECTION[p][log_size]
    if (option.algorithm == "ring" and p == 2 and m.nodes > 1 and coll == "allreduce"
            and nbytes / (comm_channels(m) * m.ranks) >= 64):
        lat *= 1.9 if m.arch == "volta" else 1.4
    return lat + nbytes / (1e3 * gbps)


def comm_channels(m: Machine) -> int:
    """The channels a communicator has (comm->nChannels), which the ring and tree
    launch from: the ring search's, doubled (connect.cc, "Duplication should be
    complete now"), doubled again across nodes on Hopper and later when a channel
    carries over 45 GB/s and there are fewer than 16."""
    graph = ring_graph(m, nccl_rates(m))
    channels = min(64, 2 * graph.channels)
    if m.arch in ("hopper", "blackwell") and m.nodes > 1 and graph.intra > 45 and channels < 16:
        channels *= 2
    return channels


def channel_share(m: Machine, option: Option, nbytes: int) -> float:
    """The share of the option's bandwidth NCCL launches for nbytes (enqueue.cc: one
    channel fewer while each would have less than threads x threshold bytes); NVLS
    always runs all of its own."""
    if option.algorithm in ("nvls", "nvls_tree"):
        return 1.0
    p = PROTOCOLS.index(option.protocol)
    threads = THREADS[p]
    if option.algorithm == "ring" and p == 2:
        graph = ring_graph(m, nccl_rates(m))
        threads = 256 if graph.intra * graph.channels <= PCI_BW else threads
    per = threads * THREAD_THRESHOLD[p] * (m.ranks if option.algorithm == "ring" and p == 0 else 1)
    launched = comm_channels(m)
    return max(1, min(launched, nbytes // per)) / launched


P2P_LL_THRESHOLD = 16384  # bytes per peer below which a send uses LL (enqueue.cc)


def p2p_protocol(m: Machine, nbytes: int) -> int:
    """The protocol (index into PROTOCOLS) of an alltoall's sends: LL while each peer's
    part is at most NCCL_P2P_LL_THRESHOLD (one channel per peer), else Simple."""
    return 0 if nbytes / m.ranks <= P2P_LL_THRESHOLD else 2


def p2p_latency_us(m: Machine, p: int) -> float:
    """An alltoall's latency in NCCL's hop figures: the ring's base latency for the
    protocol and, the sends to all peers running at once, the longer of one hop inside
    the node and the remote peers' network hops one after another (a GPU's proxy posts
    them in turn). An approximation: NCCL's tuner has no model of grouped sends."""
    f = m.figures
    intra = HOP_US[m.intra]["ring"][p]
    remote = (m.ranks - m.per_node) * hardware_net_hop(f, "ring", p) if m.nodes > 1 else 0.0
    return (BASE_US["ring"][p] + max(intra, remote)) * f.latency_scale


def alltoall_us(m: Machine, nbytes: int, rates: Rates, call_us: float) -> float:
    """Alltoall as grouped send/receive: each GPU sends (N - 1) / N of its buffer, the
    part for its own node over the node's fabric and the rest over its share of the
    node's NICs (the fabric slower where its GPUs do not all meet on NVSwitches:
    Machine.alltoall_spread); the call's cost covers starting its N - 1 transfers."""
    n, ppn = m.ranks, m.per_node
    inside = nbytes * (ppn - 1) / n / rates.intra * m.alltoall_spread
    outside = nbytes * (n - ppn) / n / (m.nics * rates.nic / ppn) if m.nodes > 1 else 0.0
    return call_us + max(inside, outside) / 1e3


def choose(m: Machine, coll: str, nbytes: int, algorithm: str = "", protocol: str = "",
           launches: int = 1) -> Choice:
    """NCCL's choice for an nbytes `coll` on `m` (the fastest option in its tuner's
    model, or among those NCCL_ALGO / NCCL_PROTO allow: comma-separated lists of
    synth's names, "ring,tree") and the time it takes there (cost model 2 with
    m.figures) when one thread launches it on `launches` GPUs (nccl-tests' -g).
    BadInput when nothing allowed runs there."""
    if coll == "alltoall":
        p = p2p_protocol(m, nbytes)
        opt = Option("p2p", PROTOCOLS[p], m.figures.alltoall_call_us + p2p_latency_us(m, p),
                     0.0, 0)
        return Choice(coll, nbytes, opt, math.nan,
                      predicted_us(m, coll, opt, nbytes, launches),
                      "NCCL runs alltoall as grouped send/receive, outside its tuner")
    algos, protos = _allowed(algorithm), _allowed(protocol)
    ranked = sorted((o for o in options(m, coll, nccl_rates(m))
                     if (not algos or o.algorithm in algos)
                     and (not protos or o.protocol in protos)),
                    key=lambda o: model_us(m, coll, o, nbytes))
    if not ranked:
        raise BadInput(f"{m.name}: NCCL {NCCL_VERSION} has no {algorithm or 'algorithm'}/"
                       f"{protocol or 'protocol'} for {coll} there")
    best = ranked[0]
    runner_up = (f"; next {ranked[1].algorithm}/{ranked[1].protocol} "
                 f"{model_us(m, coll, ranked[1], nbytes):.1f} us" if len(ranked) > 1 else "")
    forced = " (forced)" if algorithm or protocol else ""
    reason = (f"fastest of {len(ranked)} in NCCL {NCCL_VERSION}'s tuner{forced}: "
              f"{model_us(m, coll, best, nbytes):.1f} us{runner_up}")
    return Choice(coll, nbytes, best, model_us(m, coll, best, nbytes),
                  predicted_us(m, coll, best, nbytes, launches), reason)


def _allowed(names: str) -> set[str]:
    return {n.strip() for n in names.split(",") if n.strip()}


def predicted_us(m: Machine, coll: str, option: Option, nbytes: int, launches: int = 1) -> float:
    """The time `option` takes on the hardware, call after call as nccl-tests times it:
    the GPU's part (its formulas over achieved rates, the channels NCCL launches for
    nbytes, the call's fixed cost) or, when longer, the host's (launch_us per GPU one
    thread launches: back-to-back calls queue behind whichever is slower)."""
    f = m.figures
    return max(launches * f.launch_us, _gpu_us(m, coll, option, nbytes))


def _gpu_us(m: Machine, coll: str, option: Option, nbytes: int) -> float:
    f = m.figures
    achieved = achieved_rates(m, f)
    if coll == "alltoall":
        p = p2p_protocol(m, nbytes)
        data = alltoall_us(m, nbytes, achieved, 0.0) / BANDWIDTH_FACTOR[p]
        return f.alltoall_call_us + p2p_latency_us(m, p) + data
    real = next(o for o in options(m, coll, nccl_rates(m), achieved, f.latency_scale)
                if (o.algorithm, o.protocol) == (option.algorithm, option.protocol))
    share = channel_share(m, option, nbytes)
    if share < 1:  # NVLS always runs all its channels (share 1)
        p = PROTOCOLS.index(real.protocol)
        graph = ring_graph(m, nccl_rates(m), achieved)
        real = Option(real.algorithm, real.protocol, real.latency_us,
                      _bandwidth(m, coll, real.algorithm, p, graph, achieved, share),
                      real.channels)
    across = _nvls_allreduce_gbps(m) if real.algorithm == "nvls" and m.nodes > 1 else math.inf
    return call_us(f, option.algorithm) + model_us(m, coll, real, nbytes) + \
        fill_us(m, coll, real, nbytes, across)


def call_us(f: Figures, algorithm: str) -> float:
    """The fixed cost of a call NCCL runs with `algorithm` (NVLS has its own)."""
    return f.nvls_call_us if algorithm.startswith("nvls") else f.call_us


def _nvls_allreduce_gbps(m: Machine) -> float:
    """comm->bandwidths[allreduce][NVLS][Simple]: NCCL's own bandwidth for it (its NVLS
    chunk depends on it across nodes, synth.predict.nccl_fill.nvls_chunk)."""
    return next((o.gbps for o in options(m, "allreduce", nccl_rates(m))
                 if o.algorithm == "nvls"), 0.0)
