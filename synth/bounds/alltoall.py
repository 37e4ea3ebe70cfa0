"""Alltoall's bandwidth bound: the max concurrent flow, a linear program (HiGHS), and
the cuts it falls back to past LP_LIMIT variables or the deadline."""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx

from synth.bounds.flows import Clock, out_capacity
from synth.topology.fabric import fabric_parts
from synth.topology.physical import Topology


def alltoall_bound(topo: Topology, graph: nx.DiGraph, gpus: list[str], clock: Clock,
                   lp_limit: int | None = None) -> Fraction:
    """Least time for every GPU to send one share to every other: max concurrent flow.

    A linear program (HiGHS): each source's flow is conserved, and on every link the
    flows of all sources fit in capacity x T; minimise T. This is the exact bound for
    fractional routing (cuts alone miss that two-hop pairs use two links). Above
    `lp_limit` variables (default LP_LIMIT) it falls back to the best single-GPU and box
    cut.
    """
    edges = list(graph.edges(data="capacity"))
    if len(gpus) * len(edges) > (lp_limit or LP_LIMIT) or clock.expired():
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
    from scipy.sparse import coo_matrix, vstack

    from synth.lp import solve

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
    result = solve(cost, vstack([a_ub, a_eq]), np.r_[np.full(n_edges, -np.inf), demand],
                   np.r_[np.zeros(n_edges), demand], 0.0, np.inf,
                   seconds=clock.deadline.solver_seconds())
    if result.status == "time":  # HiGHS's time (or iteration) limit
        clock.partial = True
        return None
    if result.status != "optimal":
        raise RuntimeError(f"alltoall bound: the linear program failed: {result.status}")
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
            worst = max(worst, Fraction(inside * (n - inside)) / out_capacity(direction, cut))
    return worst
