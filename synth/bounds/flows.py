"""Max-flows over the physical graph, the pieces every cut bound is made of.

The graph is the routed part of the physical graph (unit_graph), capacities exact
Fractions in units of unit_gbps; networkx's flows run on it scaled to integers. Clock
is the bounds' deadline: every search here is a max (or min) over candidates that are
each valid alone, so the best found when time runs out is still a bound.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import networkx as nx

from synth.bounds.orbits import Orbits
from synth.deadline import Deadline, Pace
from synth.topology.linkmodel import Lowering


# seconds per edge of one minimum cut on the unit graph (networkx, with the graph's copy
# and scaling): 1.7e-5 on this kind of machine
MIN_CUT = Pace(1.7e-5, least=10_000)


class Clock:
    """The bounds' deadline (synth.deadline). Every search below is a max (or min) over
    candidates that are each valid on their own, so when time runs out the best found
    so far is still a bound, only maybe looser: `partial` records that it happened, and
    `skipped` that a search was left out because the time left could not afford it
    (while the rest, cheaper, go on: `expired` stays False)."""

    def __init__(self, deadline: Deadline | float | None = None):
        self.deadline, self.partial, self.skipped = Deadline.of(deadline), False, False

    @property
    def looser(self) -> bool:
        """Whether the bounds may be looser than the full ones."""
        return self.partial or self.skipped

    def expired(self) -> bool:
        if self.deadline.passed():
            self.partial = True
        return self.partial


def least_flow(graph: nx.DiGraph, root: str, targets: list[str], clock: Clock) -> Fraction:
    """min over targets of the max flow from root (the first always; the rest while time
    lasts: a larger minimum only weakens 1 / it). The caller may pass one target per
    orbit of the automorphisms fixing the root (Orbits.others): they have equal flows."""
    least = None
    for t in targets:
        if least is not None and clock.expired():
            break
        flow = max_flow(graph, root, t)
        least = flow if least is None else min(least, flow)
    return least

PORT_HOPS = 3  # how far from a GPU port_cuts looks for its narrowest cut


def port_sum(graph: nx.DiGraph, gpus: list[str], clock: Clock,
             orbits: Orbits | None = None) -> Fraction:
    """An upper bound on what all GPUs can send to other GPUs at once: the sum of their
    ports (port_cuts)."""
    return sum(port_cuts(graph, gpus, clock, orbits), Fraction(0))


def port_cuts(graph: nx.DiGraph, gpus: list[str], clock: Clock,
              orbits: Orbits | None = None) -> list[Fraction]:
    """Per GPU, the least cut between it and all the others. Only cuts within PORT_HOPS
    links of the GPU are tried (not through another GPU): the rest of the graph is one
    sink. Any cut bounds the flow, so this is never below the true max flow (a bound
    stays valid), and it finds the narrow place near a GPU: a 64 GB/s PCIe link that
    feeds a 50 GB/s NIC passes 50. Past the clock, a GPU counts its out-links' sum.
    One small max-flow per orbit (synth.bounds.orbits: an automorphism maps a GPU's
    neighbourhood onto its image's), O(N) without `orbits`."""
    orbits = orbits or Orbits.trivial(gpus)
    gpu_set, cuts = set(gpus), {}
    for g in orbits.representatives:
        if clock.expired():
            cuts[g] = sum((c for _, _, c in graph.out_edges(g, data="capacity")),
                          Fraction(0))
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
        cuts[g] = max_flow(local, g, "__sink__")
    return orbits.spread(cuts)


def unit_graph(lowering: Lowering) -> tuple[nx.DiGraph, list[str]]:
    """The routed part of the physical graph, capacities in units of unit_gbps."""
    topo = lowering.topology
    unit = Fraction(str(topo.unit_gbps))
    routed = {hop for path in lowering.routes.values() for hop in zip(path, path[1:])}
    routed |= {hop for paths in lowering.further.values() for path in paths
               for hop in zip(path, path[1:])}
    g = nx.DiGraph()
    g.add_nodes_from(v.name for v in topo.vertices)
    capacity = {}  # per (gbps, lanes): a Fraction each made once, not per link (fc:1100
    for l in topo.links:  # has 1.2 million links of one kind)
        if (l.src, l.dst) in routed:
            kind = (l.gbps, l.count)
            if kind not in capacity:
                capacity[kind] = Fraction(str(l.gbps)) * l.count / unit
            g.add_edge(l.src, l.dst, capacity=capacity[kind])
    return g, topo.gpus


def all_sinks(graph: nx.DiGraph, gpus: list[str], clock: Clock,
              orbits: Orbits | None = None) -> Fraction:
    """max over S (some GPU outside) of |S n GPUs| / B+(S), trying each GPU outside,
    or with `orbits` one GPU of each (synth.bounds.orbits: an automorphism maps the cuts
    with one GPU outside onto those with its image outside, so both have the same
    maximum)."""
    worst = Fraction(0)
    for t in (orbits or Orbits.trivial(gpus)).representatives:
        if worst and clock.expired():
            break
        worst = max(worst, max_ratio_cut(graph, [g for g in gpus if g != t], t, worst,
                                         clock))
    return worst


def max_ratio_cut(graph: nx.DiGraph, sources: list[str], sink: str,
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
    # and the cut of everything but the sink: every source behind the sink's in-links
    # (fc:1100's true bound, where a time limit leaves no minimum cut)
    into = sum((c for _, _, c in graph.in_edges(sink, data="capacity")), Fraction(0))
    if into and sources:
        rho = min(rho, into / len(sources))
    if known:
        rho = min(rho, 1 / known)
    edges = graph.number_of_edges() + len(sources)
    while not clock.expired():
        if not clock.deadline.affords(MIN_CUT.seconds(edges)):
            clock.skipped = True  # one cut of fc:1100's 1.2 million edges takes 20 s
            break
        with MIN_CUT.timing(edges):
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
        rho = out_capacity(graph, cut) / sum(1 for s in sources if s in cut)
    return 1 / rho


def out_capacity(graph: nx.DiGraph, vertices: set[str]) -> Fraction:
    return sum((c for u, v, c in graph.out_edges(vertices, data="capacity")
                if v not in vertices), Fraction(0))


def max_flow(graph: nx.DiGraph, s: str, t: str) -> Fraction:
    scale = lcm(*(c.denominator for _, _, c in graph.edges(data="capacity")))
    g = nx.DiGraph()
    g.add_edges_from((u, v, {"capacity": int(c * scale)})
                     for u, v, c in graph.edges(data="capacity"))
    return Fraction(nx.maximum_flow_value(g, s, t), scale)
