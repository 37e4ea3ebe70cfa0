"""Lower bounds: how few steps and how little bandwidth time a collective can need.

Steps: the largest hop distance (rank links) some chunk must cover.

Bandwidth: the cut bound with switches as vertices (ForestColl; hardware.md). For a set
S of physical vertices, whatever must leave S crosses the links out of S, whose
bandwidth B+(S) is fixed, so time >= data(S) / B+(S) for every S. For allgather,
data(S) is the shards of the GPUs in S whenever some GPU is outside it; the maximum
over all S is found exactly with max-flow (`_max_ratio_cut`). The other collectives:

    reducescatter   allgather's bound on the reversed graph (the dual)
    allreduce       the largest of three counts (no in-network reduction; the sum of
                    reducescatter's and allgather's cut bounds is NOT a bound, since a
                    schedule may overlap the two: see _allreduce_rounds_per_chunk)
    broadcast       all n bytes leave every S holding the root: n / min-cut(root, t)
    reduce          broadcast's bound on the reversed graph
    gather          shards of the GPUs in S, for every S without the root
    scatter         gather's bound on the reversed graph
    alltoall        one share per ordered pair: the max concurrent flow, a linear
                    program (HiGHS), exact for fractional routing; cuts alone would
                    miss that a pair two hops apart loads two links. Past LP_LIMIT
                    variables: the best single-GPU and box cut (valid, weaker)

The graph is the network as lowered (synth.topology.linkmodel): a physical link that no
route crosses is left out, since no schedule can use it (on a DGX-2 the PCIe path
between two GPUs that the NVSwitch joins better). All ratios are exact Fractions;
capacities are in units of unit_gbps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from math import lcm

import networkx as nx

from synth.deadline import Deadline
from synth.schedule.collectives import Collective, make_collective
from synth.topology.fabric import fabric_parts
from synth.topology.linkmodel import LinkModel, Lowering, rank_graph
from synth.topology.physical import Topology
from synth.topology.symmetry import translations_of

NOTES = {
    "allreduce": "2(N-1) transfers per chunk over the links, a buffer across the "
                 "thinnest cut, 2(K-1) across boxes (no in-network reduction)",
    "alltoall": "max concurrent flow (linear program) over one share per pair",
}


@dataclass(frozen=True)
class Bounds:
    collective: str
    ranks: int
    steps: int  # no schedule has fewer steps
    rounds_per_chunk: Fraction  # no schedule has smaller R / C (chunk = 1/C of a share)
    us_per_byte: float  # the same, as time per byte of n at unit_gbps
    latency_us: float  # steps x the smallest alpha of any link
    note: str = ""
    partial: bool = False  # time ran out: still valid, maybe looser than the full bound
    # where switches reduce in the network: the bound for schedules that do not use
    # them (rounds_per_chunk is then the bound with them, which is lower)
    without_in_network: Fraction | None = None

    @property
    def us_per_mb(self) -> float:
        return self.us_per_byte * 1e6


class Clock:
    """The bounds' deadline (synth.deadline). Every search below is a max (or min) over
    candidates that are each valid on their own, so when time runs out the best found
    so far is still a bound, only maybe looser: `partial` records that it happened."""

    def __init__(self, deadline: Deadline | float | None = None):
        self.deadline, self.partial = Deadline.of(deadline), False

    def expired(self) -> bool:
        if self.deadline.passed():
            self.partial = True
        return self.partial


def bounds(lowering: Lowering, collective: Collective,
           deadline: Deadline | float | None = None) -> Bounds:
    """Both bounds for one collective on the lowered topology (its link model for the
    steps, its physical graph for the cuts). Cost: O(N) max-flows on the physical graph,
    cut short at `deadline` (Clock)."""
    model = lowering.model
    clock = Clock(deadline)
    per_share = bandwidth_bound_shares(lowering, collective.name, collective.root, clock)
    # rounds per chunk: chunk = share / C, so R / C >= (shares moved per unit bandwidth)
    # expressed per the collective's own chunk: for allreduce-like ones a "share" is the
    # whole buffer divided by N, and a chunk is the buffer / C.
    if collective.name in ("allreduce",):
        rpc = per_share / collective.ranks
    else:
        rpc = per_share
    shares_in_buffer = collective.buffer_chunks // collective.chunks  # N or 1
    us_per_byte = float(rpc) / shares_in_buffer / (model.unit_gbps * 1e3)
    steps = step_bound(model, collective, clock)
    min_alpha = min((l.alpha_us for l in model.links), default=0.0)
    note = NOTES.get(collective.name, "")
    plain = None
    if collective.name == "allreduce" and any("reduce" in w.can for w in model.switches):
        graph, gpus = _unit_graph(lowering)
        plain, rpc = rpc, _in_network_allreduce(graph, gpus, clock)
        if not any("reduce" in v.can for v in lowering.topology.vertices if v.box is None):
            rpc = max(rpc, _across_boxes(lowering.topology, graph))  # boxes reduce alone
        us_per_byte = float(rpc) / shares_in_buffer / (model.unit_gbps * 1e3)
        note = (f"with in-network reduction ({', '.join(w.name for w in model.switches)}): "
                "each chunk crosses the thinnest cut between GPUs at least once each way, and "
                "2(K-1) times across K boxes where no switch between them reduces; without "
                f"it {plain} rounds per chunk ({note})")
    if clock.partial:
        note = ("partial: the time limit cut the bounds short; they hold, but may be "
                "looser than the full ones") + (f"; {note}" if note else "")
    return Bounds(collective.name, collective.ranks, steps, rpc, us_per_byte,
                  steps * min_alpha, note, clock.partial, plain)


def step_bound(model: LinkModel, collective: Collective, clock: Clock | None = None) -> int:
    """Largest hop distance a chunk (or, combining, a contribution) must travel.

    Who holds and who wants a chunk follows from its share, and a share has one holder
    unless every rank holds it (synth.schedule.collectives), so the bound is a maximum
    of hop distances from one rank: one breadth-first search per holder, O(N x links) in
    all, kept one at a time (all pairs at once would be N^2 entries). Past the clock's
    deadline the holders not yet searched are left out: the maximum over the rest is
    still a lower bound."""
    clock = clock or Clock()
    graph = rank_graph(model)
    far = model.ranks  # unreachable: never happens in a validated topology
    n = model.ranks
    every = range(n)
    if collective.combining:  # every rank's contribution must reach every wanter
        sources = every
        targets = lambda s: _wanting(collective)  # noqa: E731
    else:  # the holder's copy must reach every wanter of its shares
        sources, targets = _holders_and_wanters(collective)
    worst = 0
    for i, s in enumerate(sources):
        if i and clock.expired():
            break
        dist = nx.single_source_shortest_path_length(graph, s)
        worst = max([worst] + [dist.get(t, far) for t in targets(s) if t != s])
    return worst


def _wanting(collective: Collective) -> list[int]:
    """The ranks that want some chunk."""
    return sorted({r for r, _, count in collective.post_ranges() if count})


def _holders_and_wanters(collective: Collective):
    """(the ranks that hold some chunk at the start, rank -> the ranks that want a chunk
    it holds) for a collective whose every share has one holder, from the table's runs
    (no (rank, chunk) pair is built). A rank that wants every chunk is listed once, not
    once per holder (allgather: N, not N^2)."""
    per = collective.share_chunks
    held_by = {}  # share -> holder
    for rank, first, count in collective.pre_ranges():
        for share in range(first // per, (first + count - 1) // per + 1):
            held_by[share] = rank
    wanted: dict[int, set[int]] = defaultdict(set)
    everything = set()  # the ranks that want every chunk
    for rank, first, count in collective.post_ranges():
        if first == 0 and count == collective.num_chunks:
            everything.add(rank)
            continue
        for share in range(first // per, (first + count - 1) // per + 1):
            wanted[held_by[share]].add(rank)
    holders = sorted(set(held_by.values()) if everything else wanted)
    return holders, lambda s: chain(wanted.get(s, ()), everything)


def bandwidth_bound_shares(lowering: Lowering, name: str, root: int | None = None,
                           clock: Clock | None = None) -> Fraction:
    """Least time, in shares per unit of bandwidth, that the cut bound allows.

    A share is one rank's piece: n / N for allgather-like collectives, the whole
    buffer for broadcast and reduce, n / N for allreduce and alltoall.
    """
    clock = clock or Clock()
    topo = lowering.topology
    graph, gpus = _unit_graph(lowering)
    reverse = graph.reverse(copy=True)
    root_name = gpus[root] if root is not None else None
    # the generators' shifts, when they are symmetries of the links, map every GPU onto
    # every other (and the reversed graph's too)
    one_orbit = translations_of(lowering.model, topo.translations) is not None
    if name == "allgather":
        return _all_sinks(graph, gpus, clock, one_orbit)
    if name == "reducescatter":
        return _all_sinks(reverse, gpus, clock, one_orbit)
    if name == "allreduce":  # in shares: the buffer is N of them
        return _allreduce_rounds_per_chunk(topo, lowering, graph, gpus, clock) * len(gpus)
    if name in ("broadcast", "reduce"):
        return 1 / _least_flow(graph if name == "broadcast" else reverse, root_name,
                               [t for t in gpus if t != root_name], clock)
    if name == "gather":
        return _max_ratio_cut(graph, [g for g in gpus if g != root_name], root_name,
                              clock=clock)
    if name == "scatter":
        return _max_ratio_cut(reverse, [g for g in gpus if g != root_name], root_name,
                              clock=clock)
    if name == "alltoall":
        return _alltoall_bound(topo, graph, gpus, clock)
    raise ValueError(name)


def _least_flow(graph: nx.DiGraph, root: str, targets: list[str], clock: Clock) -> Fraction:
    """min over targets of the max flow from root (the first always; the rest while time
    lasts: a larger minimum only weakens 1 / it)."""
    least = None
    for t in targets:
        if least is not None and clock.expired():
            break
        flow = _max_flow(graph, root, t)
        least = flow if least is None else min(least, flow)
    return least


def _allreduce_rounds_per_chunk(topo: Topology, lowering: Lowering, graph: nx.DiGraph,
                                gpus: list[str], clock: Clock) -> Fraction:
    """Least R / C of any allreduce (a chunk: 1/C of the buffer), the largest of:

    - traffic: every chunk needs at least 2(N-1) transfers. Before the first step in
      which some rank becomes full, the transfers must join all N ranks (N-1 of them at
      least, or each newly full rank needs one per remaining component); every rank
      not full then needs one more. Each transfer leaves a GPU and enters one, and
      crosses at least h physical links (h: the shortest GPU-to-GPU route), so the
      GPUs' total out (and in) capacity, and h times all links' capacity, bound how
      many a round moves. A GPU's out capacity is its narrowest cut from the other
      GPUs (`_ports`), not its links' sum: a 64 GB/s PCIe link feeding a 50 GB/s NIC
      passes 50.
    - cut: every set of vertices that splits the GPUs must pass a whole buffer out
      (its contributions, as partial sums or final values): 1 / the thinnest such cut,
      the least max-flow between GPU 0 and another GPU, either way. Skipped past
      CUT_LIMIT GPUs (2(N-1) max-flows).
    - boxes: the traffic count with boxes as ranks: 2(K-1) transfers per chunk, each
      leaving one box and entering another.
    """
    n = len(gpus)
    hops = min(len(path) - 1 for path in lowering.routes.values())
    total = sum((c for _, _, c in graph.edges(data="capacity")), Fraction(0))
    ports = [_ports(graph, gpus, clock), _ports(graph.reverse(copy=False), gpus, clock)]
    best = max(Fraction(2 * (n - 1) * hops) / total,
               *(Fraction(2 * (n - 1)) / port for port in ports))
    if n <= CUT_LIMIT:
        thinnest = None
        for g in gpus[1:]:
            if clock.expired():
                break
            flow = min(_max_flow(graph, gpus[0], g), _max_flow(graph, g, gpus[0]))
            thinnest = flow if thinnest is None else min(thinnest, flow)
        if thinnest is not None:
            best = max(best, 1 / thinnest)
    return max(best, _across_boxes(topo, graph))


def _across_boxes(topo: Topology, graph: nx.DiGraph) -> Fraction:
    """The traffic count with boxes as ranks: 2(K-1) transfers per chunk, each leaving
    one box and entering another (0 on one box). Holds whatever a box does inside, so
    also where its switches reduce, as long as no switch between boxes does."""
    boxes = sorted({v.box for v in topo.vertices if v.box is not None})
    if len(boxes) < 2:
        return Fraction(0)
    # the same count with the parts a fabric's tier splits the machine into (leaf groups,
    # pods) as ranks: each part's uplinks carry 2(P-1) transfers per chunk in all
    worst = Fraction(0)
    for members in [[{v.name for v in topo.vertices if v.box == b} for b in boxes]] \
            + fabric_parts(topo):
        out = sum((_out_capacity(graph, m) for m in members), Fraction(0))
        into = sum((_out_capacity(graph.reverse(copy=False), m) for m in members),
                   Fraction(0))
        worst = max(worst, Fraction(2 * (len(members) - 1)) / min(out, into))
    return worst


CUT_LIMIT = 64


def _in_network_allreduce(graph: nx.DiGraph, gpus: list[str], clock: Clock) -> Fraction:
    """Least R / C of an allreduce when switches may reduce and multicast (a chunk: 1/C
    of the buffer). Every set of vertices that splits the GPUs must pass, for every
    chunk, something out (the contributions inside it, summed anywhere, or the result)
    and something in, however much the switches add: at least one chunk each way. So
    1 / the thinnest cut: each GPU's narrowest port either way, and up to CUT_LIMIT GPUs
    the max-flow between GPU 0 and each other GPU. Valid for any allreduce, with switch
    operations or without (the plain bound is the higher one then)."""
    thinnest = min(_port_cuts(graph, gpus, clock)
                   + _port_cuts(graph.reverse(copy=False), gpus, clock))
    if len(gpus) <= CUT_LIMIT:
        for g in gpus[1:]:
            if clock.expired():
                break
            thinnest = min(thinnest, _max_flow(graph, gpus[0], g), _max_flow(graph, g, gpus[0]))
    return 1 / thinnest


PORT_HOPS = 3  # how far from a GPU _ports looks for its narrowest cut


def _ports(graph: nx.DiGraph, gpus: list[str], clock: Clock) -> Fraction:
    """An upper bound on what all GPUs can send to other GPUs at once: the sum of their
    ports (_port_cuts)."""
    return sum(_port_cuts(graph, gpus, clock), Fraction(0))


def _port_cuts(graph: nx.DiGraph, gpus: list[str], clock: Clock) -> list[Fraction]:
    """Per GPU, the least cut between it and all the others. Only cuts within PORT_HOPS
    links of the GPU are tried (not through another GPU): the rest of the graph is one
    sink. Any cut bounds the flow, so this is never below the true max flow (a bound
    stays valid), and it finds the narrow place near a GPU: a 64 GB/s PCIe link that
    feeds a 50 GB/s NIC passes 50. Past the clock, a GPU counts its out-links' sum.
    O(N) small max-flows."""
    gpu_set, cuts = set(gpus), []
    for g in gpus:
        if clock.expired():
            cuts.append(sum((c for _, _, c in graph.out_edges(g, data="capacity")),
                            Fraction(0)))
            continue
        near, last = {g}, [g]
        for _ in range(PORT_HOPS):
            last = [v for u in last for v in graph.successors(u)
                    if v not in gpu_set and v not in near]
            near.update(last)
        local = nx.DiGraph()
        for u in near:
            for v, c in graph[u].items():
                w = v if v in near else "__sink__"
                old = local.get_edge_data(u, w, {"capacity": Fraction(0)})["capacity"]
                local.add_edge(u, w, capacity=old + c["capacity"])
        cuts.append(_max_flow(local, g, "__sink__"))
    return cuts


def _unit_graph(lowering: Lowering) -> tuple[nx.DiGraph, list[str]]:
    """The routed part of the physical graph, capacities in units of unit_gbps."""
    topo = lowering.topology
    unit = Fraction(str(topo.unit_gbps))
    routed = {hop for path in lowering.routes.values() for hop in zip(path, path[1:])}
    g = nx.DiGraph()
    g.add_nodes_from(v.name for v in topo.vertices)
    for l in topo.links:
        if (l.src, l.dst) in routed:
            g.add_edge(l.src, l.dst, capacity=Fraction(str(l.gbps)) * l.count / unit)
    return g, topo.gpus


def _all_sinks(graph: nx.DiGraph, gpus: list[str], clock: Clock,
               one_orbit: bool = False) -> Fraction:
    """max over S (some GPU outside) of |S n GPUs| / B+(S), trying each GPU outside;
    one_orbit: the graph's automorphisms map every GPU onto every other (proven by the
    topology's translations, synth.topology.symmetry), so all have the same cuts and
    the first GPU alone gives the maximum."""
    worst = Fraction(0)
    for t in gpus[:1] if one_orbit else gpus:
        if worst and clock.expired():
            break
        worst = max(worst, _max_ratio_cut(graph, [g for g in gpus if g != t], t, worst,
                                          clock))
    return worst


def _max_ratio_cut(graph: nx.DiGraph, sources: list[str], sink: str,
                   known: Fraction = Fraction(0), clock: Clock | None = None) -> Fraction:
    """max over S with sink not in S of |S n sources| / B+(S) (at least `known`).

    Newton's method on the rate rho = 1 / ratio: send rho from a super source into each
    source; if the max flow to `sink` is short, the min cut S has B+(S) < rho |S n
    sources|, and its own ratio is the next guess. Each step strictly lowers rho, and
    there are finitely many cuts. Capacities are scaled to integers so networkx's flow
    is exact. Every rho tried is some cut's own ratio, so stopping at the clock's
    deadline leaves a valid (maybe looser) bound.
    """
    clock = clock or Clock()
    rho = min(sum((c for _, _, c in graph.out_edges(s, data="capacity")), Fraction(0))
              for s in sources)
    if known:
        rho = min(rho, 1 / known)
    while not clock.expired():
        g = graph.copy()
        for s in sources:
            g.add_edge("__source__", s, capacity=rho)
        scale = lcm(*(c.denominator for _, _, c in g.edges(data="capacity")))
        for u, v, c in g.edges(data="capacity"):
            g.edges[u, v]["capacity"] = int(c * scale)
        value, (side, _) = nx.minimum_cut(g, "__source__", sink)
        if value >= rho * scale * len(sources):
            return 1 / rho
        cut = set(side) - {"__source__"}
        rho = _out_capacity(graph, cut) / sum(1 for s in sources if s in cut)
    return 1 / rho


def _out_capacity(graph: nx.DiGraph, vertices: set[str]) -> Fraction:
    return sum((c for u, v, c in graph.out_edges(vertices, data="capacity")
                if v not in vertices), Fraction(0))


def _max_flow(graph: nx.DiGraph, s: str, t: str) -> Fraction:
    scale = lcm(*(c.denominator for _, _, c in graph.edges(data="capacity")))
    g = nx.DiGraph()
    g.add_edges_from((u, v, {"capacity": int(c * scale)})
                     for u, v, c in graph.edges(data="capacity"))
    return Fraction(nx.maximum_flow_value(g, s, t), scale)


def _alltoall_bound(topo: Topology, graph: nx.DiGraph, gpus: list[str], clock: Clock
                    ) -> Fraction:
    """Least time for every GPU to send one share to every other: max concurrent flow.

    A linear program (HiGHS): each source's flow is conserved, and on every link the
    flows of all sources fit in capacity x T; minimise T. This is the exact bound for
    fractional routing (cuts alone miss that two-hop pairs use two links). Above
    LP_LIMIT variables it falls back to the best single-GPU and box cut.
    """
    edges = list(graph.edges(data="capacity"))
    if len(gpus) * len(edges) > LP_LIMIT or clock.expired():
        return _alltoall_cuts(topo, graph, gpus)
    value = _max_concurrent_flow(graph, gpus, edges, clock)
    if value is None:  # out of time: an unfinished program bounds nothing
        return _alltoall_cuts(topo, graph, gpus)
    # a Fraction no larger than the LP's float answer, simple when it is simple
    guess = Fraction(value).limit_denominator(1000)
    if guess > value * (1 + 1e-9):
        guess = Fraction(math.floor(value * (1 - 1e-9) * 10**6), 10**6)
    return max(guess, _alltoall_cuts(topo, graph, gpus))


LP_LIMIT = 60_000  # about 2 s with HiGHS on this kind of machine


def _max_concurrent_flow(graph: nx.DiGraph, gpus: list[str], edges, clock: Clock
                         ) -> float | None:
    """The linear program's optimum, or None when HiGHS runs out of the clock's time
    (the clock then says partial)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    nodes = {v: i for i, v in enumerate(graph.nodes)}
    n_src, n_edges, n_nodes = len(gpus), len(edges), len(nodes)
    t_var = n_src * n_edges  # the last variable is T
    rows, cols, vals = [], [], []  # flow conservation, one row per (source, vertex)
    for si in range(n_src):
        for ei, (u, v, _) in enumerate(edges):
            col = si * n_edges + ei
            rows += [si * n_nodes + nodes[v], si * n_nodes + nodes[u]]
            cols += [col, col]
            vals += [1.0, -1.0]
    demand = np.zeros(n_src * n_nodes)
    for si, s in enumerate(gpus):
        for d in gpus:
            demand[si * n_nodes + nodes[d]] = -(len(gpus) - 1) if d == s else 1
    a_eq = coo_matrix((vals, (rows, cols)), shape=(n_src * n_nodes, t_var + 1)).tocsr()
    rows, cols, vals = [], [], []  # capacity: sum over sources - cap * T <= 0
    for ei, (_, _, cap) in enumerate(edges):
        for si in range(n_src):
            rows.append(ei)
            cols.append(si * n_edges + ei)
            vals.append(1.0)
        rows.append(ei)
        cols.append(t_var)
        vals.append(-float(cap))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(n_edges, t_var + 1)).tocsr()
    cost = np.zeros(t_var + 1)
    cost[t_var] = 1.0
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(n_edges), A_eq=a_eq, b_eq=demand,
                     bounds=(0, None), method="highs",
                     options={"time_limit": clock.deadline.solver_seconds()})
    if result.status == 1:  # HiGHS's time (or iteration) limit
        clock.partial = True
        return None
    if result.status != 0:
        raise RuntimeError(f"alltoall bound: the linear program failed: {result.message}")
    return float(result.x[t_var])


def _alltoall_cuts(topo: Topology, graph: nx.DiGraph, gpus: list[str]) -> Fraction:
    """Every GPU in S sends one share (n / N) to every GPU outside S: the best of the
    single-GPU cuts, the box cuts, the half-the-boxes cut and the cuts around a
    fabric's leaf groups and pods (where an oversubscribed tier binds)."""
    n = len(gpus)
    candidates = [{g} for g in gpus]
    boxes = sorted({v.box for v in topo.vertices if v.box is not None})
    if len(boxes) > 1:
        for b in boxes:
            candidates.append({v.name for v in topo.vertices if v.box == b})
        half = boxes[: len(boxes) // 2]
        candidates.append({v.name for v in topo.vertices if v.box in half})
        candidates += [part for parts in fabric_parts(topo) for part in parts]
    worst = Fraction(0)
    for cut in candidates:
        inside = sum(1 for g in gpus if g in cut)
        for direction in (graph, graph.reverse(copy=False)):
            worst = max(worst, Fraction(inside * (n - inside)) / _out_capacity(direction, cut))
    return worst


def collective_bounds(lowering: Lowering, name: str, root: int | None = None,
                      deadline: Deadline | float | None = None) -> Bounds:
    return bounds(lowering, make_collective(name, lowering.model.ranks, 1, root), deadline)

