"""Shortest-path trees balanced level by level: one batch at both bounds on a grid.

Under a grid's shifts (synth.topology.symmetry), which act regularly, a link u -> v
is named by its move v - u, and the moves of rank 0's links are every rank's. Rank 0
gets k trees, k its links in: in each, a rank v at distance s from rank 0 takes as
parent a rank at distance s - 1 (a move m with v - m one step nearer), so every tree
is as deep as rank 0's farthest rank. The choice is balanced per level: of the k c_s
edges into the c_s ranks at distance s, each move gets exactly c_s. That is a flow
(each rank supplies k, each move takes c_s, a rank gives only to the moves that bring
it nearer), found or shown impossible by one maximum flow per level.

Why that is enough: in the allgather down every root's trees (root r's are rank 0's
moved by r), an edge of rank 0's trees with move m lands on a given link of move m
under exactly one shift. So at step s every link carries c_s chunks, and the whole
batch N - 1 rounds for k chunks a root: (N - 1) / k rounds per chunk, the cut bound of
a rank's k links in, in as many steps as the farthest rank is away, the step bound.
The program over trees (synth.construct.symmetric) reaches that rate too, but on a
torus whose sides differ (torus:16x32) only at whole weights of a thousand trees a
root; here it is k.

Only where every link carries one chunk a round and no group is shared (the torus,
ring, hypercube and fc generators; not GPUs around one switch): with capacity c, a step
of c_s chunks would take ceil(c_s / c) rounds, over the bound wherever c does not divide
c_s. Trees chosen alike are kept once, with their count as weight (fc:8: one star of
weight 7). Cost: O(N k) for the distances and the choice, one maximum flow of O(c_s k)
arcs per level; spelled out, O(N^2 k) to move the trees to every root.
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from synth.construct.packing import Packing, Tree
from synth.topology.linkmodel import LinkModel
from synth.topology.symmetry import Translations, translations_of


def balanced_trees(model: LinkModel, dims: tuple[int, ...], spelled_out: bool = False,
                   per_root: int | None = None) -> Packing | None:
    """Rank 0's k balanced shortest-path trees (module docstring), or with
    `spelled_out` every root's (rank 0's moved by it). With `per_root` k' < k, k' trees
    whose level s gives each move at most ceil(k' c_s / k) edges (one tree a root: a rank
    receives N - 1 sends, not k (N - 1), as the runtimes' thread blocks need). None where
    the grid's shifts are no symmetry of `model`, a link's capacity is not 1, a group is
    shared, or some level has no such choice."""
    grid = translations_of(model, dims)
    if grid is None or model.groups or model.ranks < 2 or \
            any(l.capacity != 1 for l in model.links):
        return None
    moves = sorted(l.dst for l in model.links if l.src == 0)
    minus = _minus(grid, moves)  # minus[j][v]: v moved back by moves[j]
    distance = _distances(grid, moves, model.ranks)
    if distance is None:
        return None
    k = per_root or len(moves)
    choices: dict[int, list[int]] = {}  # v -> k move indices, one per tree
    for level in range(1, int(distance.max()) + 1):
        ranks = np.flatnonzero(distance == level).tolist()
        chosen = _balanced_level(ranks, minus, distance, level, k, len(moves))
        if chosen is None:
            return None
        choices.update(chosen)
    alike = Counter(tuple(sorted((v, int(minus[js[t]][v])) for v, js in choices.items()))
                    for t in range(k))
    trees = tuple(Tree(0, dict(edges), weight) for edges, weight in alike.items())
    if spelled_out:
        table = grid.table()
        trees = tuple(Tree(r, {int(table[v, r]): int(table[p, r])
                               for v, p in tree.parent.items()}, tree.weight)
                      for r in range(model.ranks) for tree in trees)
    roots = tuple(range(model.ranks)) if spelled_out else (0,)
    per_move = Counter(j for js in choices.values() for j in js)
    return Packing(max(per_move.values()), k, trees, roots)  # the busiest link's lanes


def _minus(grid: Translations, moves: list[int]) -> list[np.ndarray]:
    """For each move m, every rank v moved back by m (v - m)."""
    coords = np.array([grid.coordinates(r) for r in range(grid.order)], dtype=np.int64)
    dims = np.array(grid.dims, dtype=np.int64)
    weights = np.cumprod(np.r_[dims[1:], 1][::-1])[::-1]  # row-major, as Translations
    return [((coords - coords[m]) % dims) @ weights for m in moves]


def _distances(grid: Translations, moves: list[int], n: int) -> np.ndarray | None:
    """Hops from rank 0 to every rank along the moves; None if some rank is unreached."""
    distance = np.full(n, -1, dtype=np.int64)
    distance[0] = 0
    queue = deque([0])
    while queue:
        u = queue.popleft()
        for m in moves:
            v = grid.shift(u, m)
            if distance[v] < 0:
                distance[v] = distance[u] + 1
                queue.append(v)
    return None if (distance < 0).any() else distance


def _balanced_level(ranks: list[int], minus, distance, level: int, k: int, moves: int
                    ) -> dict[int, list[int]] | None:
    """{v: k move indices}: each rank of the level gets k moves that bring it one
    step nearer, each of the `moves` used at most ceil(k len(ranks) / moves) times in
    all (k = moves: exactly len(ranks)); None if no such choice. One maximum flow:
    source -> rank (k) -> move (k) -> sink (that many)."""
    c = len(ranks)
    sink = c + moves + 1  # nodes: 0 the source, 1..c the ranks, then the moves
    arcs = [(0, i, k) for i in range(1, c + 1)]
    arcs += [(i, c + 1 + j, k) for i, v in enumerate(ranks, start=1) for j in range(moves)
             if distance[minus[j][v]] == level - 1]
    arcs += [(c + 1 + j, sink, -(-k * c // moves)) for j in range(moves)]
    rows, cols, caps = zip(*arcs)
    graph = csr_matrix((np.array(caps, dtype=np.int32), (rows, cols)),
                       shape=(sink + 1, sink + 1))
    flow = maximum_flow(graph, 0, sink)
    if flow.flow_value != k * c:
        return None
    amounts = flow.flow.tocsr()
    chosen = {}
    for i, v in enumerate(ranks, start=1):
        row = amounts.getrow(i).tocoo()
        chosen[v] = [int(col) - c - 1 for col, f in zip(row.col, row.data) if f > 0
                     for _ in range(int(f))]
    return chosen
