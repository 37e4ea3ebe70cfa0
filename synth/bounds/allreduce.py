"""Allreduce's bandwidth bounds: transfers counted over the GPUs' ports and all links,
the thinnest cut between GPUs, and the count across boxes; with switches that reduce,
the thinnest cut alone (synth.bounds module docstring)."""

from __future__ import annotations

from fractions import Fraction

import networkx as nx

from synth.bounds.flows import Clock, max_flow, out_capacity, port_cuts, port_sum
from synth.bounds.orbits import Symmetry
from synth.topology.fabric import fabric_parts
from synth.topology.linkmodel import Lowering
from synth.topology.physical import Topology


def allreduce_rounds_per_chunk(topo: Topology, lowering: Lowering, graph: nx.DiGraph,
                               gpus: list[str], clock: Clock, symmetry: Symmetry
                               ) -> Fraction:
    """Least R / C of any allreduce (a chunk: 1/C of the buffer), the largest of:

    - traffic: every chunk needs at least 2(N-1) transfers. Before the first step in
      which some rank becomes full, the transfers must join all N ranks (N-1 of them at
      least, or each newly full rank needs one per remaining component); every rank
      not full then needs one more. Each transfer leaves a GPU and enters one, and
      crosses at least h physical links (h: the shortest GPU-to-GPU route), so the
      GPUs' total out (and in) capacity, and h times all links' capacity, bound how
      many a round moves. A GPU's out capacity is its narrowest cut from the other
      GPUs (`port_sum`), not its links' sum: a 64 GB/s PCIe link feeding a 50 GB/s NIC
      passes 50. Where a switch multicasts (and none reduces: then this is the bound
      without switch operations), one send out of a GPU can arrive at several: only
      arrivals are counted, against the GPUs' in capacity, and one link each.
    - cut: every set of vertices that splits the GPUs must pass a whole buffer out
      (its contributions, as partial sums or final values): 1 / the thinnest such cut,
      the least max-flow between GPU 0 and another GPU, either way. Skipped past
      CUT_LIMIT GPUs (2(N-1) max-flows).
    - boxes: the traffic count with boxes as ranks: 2(K-1) transfers per chunk, each
      leaving one box and entering another; and with packages as ranks
      (`across_packages`: MI250's two dies, joined wider than to the other dies).

    Ports are computed once per orbit of the graph's automorphisms, the flows with GPU 0
    once per orbit of those fixing GPU 0 (`symmetry`, synth.bounds.orbits).
    """
    n = len(gpus)
    spread = multicasts_alone(lowering)
    hops = 1 if spread else min(len(path) - 1 for path in lowering.routes.values())
    total = sum((c for _, _, c in graph.edges(data="capacity")), Fraction(0))
    every = symmetry.orbits()
    ports = [port_sum(graph.reverse(copy=False), gpus, clock, every)]
    if not spread:
        ports.append(port_sum(graph, gpus, clock, every))
    best = max(Fraction(2 * (n - 1) * hops) / total,
               *(Fraction(2 * (n - 1)) / port for port in ports))
    if n <= CUT_LIMIT:
        thinnest = None
        for g in symmetry.orbits(gpus[0]).others():
            if clock.expired():
                break
            flow = min(max_flow(graph, gpus[0], g), max_flow(graph, g, gpus[0]))
            thinnest = flow if thinnest is None else min(thinnest, flow)
        if thinnest is not None:
            best = max(best, 1 / thinnest)
    return max(best, across_boxes(topo, graph, spread and multicasts_between_boxes(lowering)),
               across_packages(graph, gpus, clock, arrivals_only=spread))


def multicasts_alone(lowering: Lowering) -> bool:
    """Whether a switch some route crosses multicasts and none of them reduces: then a
    schedule may copy in the network, so one send can arrive at several GPUs (where
    one reduces too, the bound with switch operations is the in-network one, and this
    module's counts are the bound without them)."""
    routed = lowering.model.switches
    return any("multicast" in w.can for w in routed) and \
        not any("reduce" in w.can for w in routed)


def multicasts_between_boxes(lowering: Lowering) -> bool:
    """Whether a switch some route crosses, outside every box, multicasts: one send
    out of a box can then arrive in several boxes."""
    topo = lowering.topology
    return any("multicast" in w.can and topo.vertex(w.name).box is None
               for w in lowering.model.switches)


def _transfers_bound(graph: nx.DiGraph, groups: list[set[str]], arrivals_only: bool
                     ) -> Fraction:
    """2(K-1) transfers per chunk between K groups over what the groups pass out and
    take in (only in, where a send out can arrive at several groups)."""
    into = sum((out_capacity(graph.reverse(copy=False), g) for g in groups), Fraction(0))
    out = into if arrivals_only else \
        sum((out_capacity(graph, g) for g in groups), Fraction(0))
    return Fraction(2 * (len(groups) - 1)) / min(out, into)


def across_boxes(topo: Topology, graph: nx.DiGraph, arrivals_only: bool = False) -> Fraction:
    """The traffic count with boxes as ranks: 2(K-1) transfers per chunk, each leaving
    one box and entering another (0 on one box). Holds whatever a box does inside, so
    also where its switches reduce, as long as no switch between boxes does.
    arrivals_only: a switch between boxes may copy (it multicasts), so only what the
    boxes take in is counted."""
    boxes = sorted({v.box for v in topo.vertices if v.box is not None})
    if len(boxes) < 2:
        return Fraction(0)
    # the same count with the parts a fabric's tier splits the machine into (leaf groups,
    # pods) as ranks: each part's uplinks carry 2(P-1) transfers per chunk in all
    return max(_transfers_bound(graph, members, arrivals_only) for members in
               [[{v.name for v in topo.vertices if v.box == b} for b in boxes]]
               + fabric_parts(topo))


def across_packages(graph: nx.DiGraph, gpus: list[str], clock: Clock | None = None,
                    arrivals_only: bool = False) -> Fraction:
    """The traffic count with packages as ranks, where direct links of several widths
    join GPUs: for each width, the groups of GPUs that links at least that wide join
    (on MI250 the two dies of a package, 4 xGMI links apart, against 1 or 2 to other
    packages). Each chunk crosses between the K groups 2(K-1) times, as across_boxes
    counts between boxes: true of any partition of the GPUs where nothing between the
    groups reduces, so the widths only choose which partitions to try. Where wide
    links inside a group are cheap and the narrow ones between groups are the
    bottleneck, this is the highest count; 0 where no width splits the GPUs. Cost: a
    union-find over the direct links per width, until `clock` expires."""
    on_gpus = set(gpus)
    direct = [(u, v, d["capacity"]) for u in gpus for v, d in graph.adj[u].items()
              if v in on_gpus]
    widths = {c for _, _, c in direct}
    worst = Fraction(0)
    for width in sorted(widths):
        if clock is not None and clock.expired():
            break
        groups = _joined(gpus, [(u, v) for u, v, c in direct if c >= width])
        if len(groups) >= 2:
            worst = max(worst, _transfers_bound(graph, groups, arrivals_only))
    return worst


def _joined(gpus: list[str], pairs: list[tuple[str, str]]) -> list[set[str]]:
    """The groups of GPUs that `pairs` join (union-find: linear, where networkx's
    components of a 512-GPU clique took most of a second)."""
    parent = {g: g for g in gpus}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for u, v in pairs:
        parent[root(u)] = root(v)
    groups: dict[str, set[str]] = {}
    for g in gpus:
        groups.setdefault(root(g), set()).add(g)
    return list(groups.values())


CUT_LIMIT = 64


def in_network_allreduce(graph: nx.DiGraph, gpus: list[str], clock: Clock,
                         symmetry: Symmetry) -> Fraction:
    """Least R / C of an allreduce when switches may reduce and multicast (a chunk: 1/C
    of the buffer). Every set of vertices that splits the GPUs must pass, for every
    chunk, something out (the contributions inside it, summed anywhere, or the result)
    and something in, however much the switches add: at least one chunk each way. So
    1 / the thinnest cut: each GPU's narrowest port either way, and up to CUT_LIMIT GPUs
    the max-flow between GPU 0 and each other GPU. Valid for any allreduce, with switch
    operations or without (the plain bound is the higher one then). Once per orbit, as
    allreduce_rounds_per_chunk."""
    every = symmetry.orbits()
    thinnest = min(port_cuts(graph, gpus, clock, every)
                   + port_cuts(graph.reverse(copy=False), gpus, clock, every))
    if len(gpus) <= CUT_LIMIT:
        for g in symmetry.orbits(gpus[0]).others():
            if clock.expired():
                break
            thinnest = min(thinnest, max_flow(graph, gpus[0], g), max_flow(graph, g, gpus[0]))
    return 1 / thinnest
