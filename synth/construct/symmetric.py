"""Trees for alike boxes and for grids: pack under a symmetry, a few roots' worth.

Where the boxes of a multi-node model are alike, permuting whole boxes (each rank to
the same place in another box) can map the network onto itself: links to links of the
same capacity, groups to groups; so can a generator's grid shifts (a torus, a ring, a
hypercube). Such groups H of maps (box_symmetry; grid_trees.grid_symmetry):

- every rank a root (allgather; reducescatter and allreduce use its trees): box b to
  box b + s, boxes counted round, or a grid's shifts. They fix no rank, so the images
  of the first s boxes' trees (rank 0's, on a grid) root every other rank exactly once:
  the packing is the sum of the images of a packing P0 for those roots alone;
- one root (broadcast; reduce): the rotation of the other boxes among themselves, the
  root's box fixed. Each image of a packing from the root is one: the packing is the
  average of P0's images.

Either way, averaging (or summing) any packing over H keeps its rate and makes it
H-invariant, so the best rate is reached this way. The load the images put on a link e
is the sum, over P0's trees T, of y_T x |T cap O(e)| x |H| / |O(e)| (O(e) the orbit of
e; for the translations |O(e)| = |H|), divided by |H| where averaged; a group's load is
the sum over its links. So P0's trees are the columns of a small linear program: one
row per link orbit and per distinct group row, one per chosen root (every root at least
lam), maximise lam. It is solved by column generation (Ford and Fulkerson, 1958;
Gilmore and Gomory, 1961): HiGHS solves the program over the trees found so far, its
prices make each link orbit cost something, and a tree of negative reduced cost is a
cheapest spanning arborescence under those costs (Edmonds, 1967; networkx's
implementation). A greedy one (Prim's rule: the cheapest edge out of the tree so far)
is tried first, as it is far faster and, on the rail links of the built-ins, enough;
the exact one runs when the greedy finds nothing (on dgx2x2's full link set, hundreds
of times: about 18 s).

The rate is the program's optimum over all trees (groups are rows of their own). Its
vertex is rational, often of large denominators, so whole weights come from a small
integer program over the trees found (HiGHS): exactly the bound's rate in L = m x its
denominator lanes per unit of capacity for the least m that allows it, else the most
trees per root in the most lanes MAX_TREES allows (a little below the rate); checked
exactly against every row, and the schedules built are verified whole. On a grid each
tree comes with its images under the maps fixing rank 0 (Symmetry.fixing), which
whole weights need: on torus:8x8 a tree and its three turns, 4 in 63 lanes.

Cost: a program of (link orbits + group rows + roots) rows per round, and one greedy
tree per chosen root, O(E log E) for E links. Between boxes rail peers first: one tree
per root reaches the allgather bound on dgx2xK and dgxh100xK from K = 8, in under a
second at 512 GPUs (bench/results/trees-scale-*). At small K it may not (dgx2x2: 25/124
a round against 166/775; dgxh100x3 a little below 20/23): there tree_schedules packs
alike boxes of at most 64 GPUs by packing.py instead.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from synth.construct.packing import MAX_TREES, Packing, Tree
from synth.construct.splitting import rails_only
from synth.deadline import Deadline, OutOfTime
from synth.topology.linkmodel import LinkModel, box_places

MAX_ROUNDS = 400  # column generation rounds at most
EPS = 1e-9
MULTIPLES = 60  # lanes tried: the bound's denominator times 1 .. this
MILP_SECONDS = 2.0  # each whole-weight program at most


@dataclass(frozen=True)
class Symmetry:
    """A group of automorphisms of the network that maps the roots onto themselves:
    `perms` (the identity first); `chosen`, the roots the program picks trees for (one
    per orbit of roots); `averaged`: whether the packing is the images' average (one
    root, each image a whole packing of it) or their sum (every rank a root, the
    images of the chosen roots' trees rooting the rest). `fixing`: maps of the network
    onto itself that fix the one chosen root; a tree found is added with its images
    under them, whose sum loads every link orbit they permute alike (whole weights at
    the rate, where one tree's images alone would have fractional ones)."""

    perms: tuple[np.ndarray, ...]
    chosen: tuple[int, ...]
    averaged: bool
    fixing: tuple[np.ndarray, ...] = ()
    spelled_out: bool = True  # False: the packing is the chosen roots' trees alone


def box_symmetry(model: LinkModel, roots: list[int]) -> Symmetry | None:
    """Every rank a root: the translations of the boxes (box b to box b + s, boxes
    counted round, for the least s that maps the network onto itself), no rank fixed.
    One root: the rotation of the other boxes among themselves, the root's box fixed.
    None when there are fewer than two boxes (three for one root), the boxes differ in
    size, or no such map keeps every link, capacity and group. Remembered: tree_search
    asks first, packing again (each a second at 512 GPUs)."""
    return _box_symmetry(model, tuple(roots))


@lru_cache(maxsize=4)
def _box_symmetry(model: LinkModel, roots: tuple[int, ...]) -> Symmetry | None:
    labels = sorted(set(model.boxes))
    k, one = len(labels), len(roots) == 1
    if k < 2 + one or not (one or len(roots) == model.ranks):
        return None
    box, place, alike_sizes = box_places(model.boxes)
    if not alike_sizes:
        return None
    at = {(b, p): r for r, (b, p) in enumerate(zip(box, place))}
    links, groups = network_of(model)
    if one:
        fixed = box[roots[0]]
        others = [b for b in range(k) if b != fixed]
        step = {b: others[(i + 1) % len(others)] for i, b in enumerate(others)} | {
            fixed: fixed}
        candidates = [(np.array([at[(step[b], p)] for b, p in zip(box, place)]), 1)]
    else:
        candidates = [(np.array([at[((b + s) % k, p)] for b, p in zip(box, place)]), s)
                      for s in range(1, k) if k % s == 0]
    for perm, shift in candidates:
        if maps_onto_itself(perm, links, groups):
            perms = [np.arange(model.ranks)]
            while len(perms) < (k - 1 if one else k // shift):
                perms.append(perm[perms[-1]])
            chosen = roots if one else [r for r in range(model.ranks) if box[r] < shift]
            return Symmetry(tuple(perms), tuple(chosen), one)
    return None


def network_of(model: LinkModel):
    """The links (pair: capacity) and groups (links, capacity), for maps_onto_itself."""
    return ({(l.src, l.dst): l.capacity for l in model.links},
            {(frozenset(g.links), g.capacity) for g in model.groups})


def maps_onto_itself(perm, links, groups) -> bool:
    if any(links.get((perm[a], perm[b])) != c for (a, b), c in links.items()):
        return False
    return all((frozenset((perm[a], perm[b]) for a, b in g), c) in groups
               for g, c in groups)


class _Program:
    """The rows of the linear program over link orbits: one per orbit, then one per
    distinct group row. A tree's load on a row is, per orbit O it has n edges in,
    n x (|H| / |O|) (x the group's links in O): the load its images put on each link
    of O, times |H| where the packing is the images' average. Capacities are scaled
    to match."""

    def __init__(self, model: LinkModel, symmetry: Symmetry):
        from scipy.sparse import csr_matrix  # here: 0.2 s to import, only when packing

        n_ranks, order = model.ranks, len(symmetry.perms)
        self.index = {(l.src, l.dst): i for i, l in enumerate(model.links)}
        src = np.array([l.src for l in model.links], dtype=np.int64)
        dst = np.array([l.dst for l in model.links], dtype=np.int64)
        # a link's orbit is named by its least image
        least = np.min([p[src] * n_ranks + p[dst] for p in symmetry.perms], axis=0)
        _, first, self.orbit_of, size = np.unique(least, return_index=True,
                                                  return_inverse=True, return_counts=True)
        n = len(first)
        per_edge = order // size  # images of a tree put this much on each link of O
        scale = order if symmetry.averaged else 1
        capacity = [model.links[i].capacity * scale for i in first]
        rows: dict[tuple, Fraction] = {}
        for g in model.groups:
            counts: dict[int, int] = defaultdict(int)
            for pair in g.links:
                counts[int(self.orbit_of[self.index[pair]])] += 1
            key = tuple(sorted(counts.items()))
            rows[key] = min(rows.get(key, g.capacity * scale), g.capacity * scale)
        entries = [(o, o, 1) for o in range(n)] + [(n + i, o, c) for i, key in
                                                   enumerate(rows) for o, c in key]
        r, o, c = zip(*entries)
        self.matrix = csr_matrix((c, (r, o)), shape=(n + len(rows), n), dtype=np.int64
                                 ) @ csr_matrix((per_edge, (range(n), range(n))))
        self.capacity = capacity + list(rows.values())
        self.orbits = n

    def uses(self, parent: dict[int, int]) -> np.ndarray:
        """The tree's load on each row (one lane of every edge)."""
        counts = np.zeros(self.orbits, dtype=np.int64)
        for v, u in parent.items():
            counts[self.orbit_of[self.index[(u, v)]]] += 1
        return self.matrix @ counts


def pack_symmetric(model: LinkModel, roots: list[int],
                   deadline: Deadline | float | None = None,
                   target: Fraction | None = None,
                   symmetry: Symmetry | None = None) -> Packing | None:
    """A packing from `roots` (every rank, or one) invariant under `symmetry` (default:
    box_symmetry); None where there is none or some rank cannot be reached. `target`,
    trees per root per round (1 / the bound), stops the search once reached. Trees over
    rail peers alone between boxes first (dgx2x16: 7,680 links of 65,280), every link
    where those fall short. OutOfTime past the deadline before any packing."""
    deadline = Deadline.of(deadline)
    deadline.check("packing trees")
    found = symmetry or box_symmetry(model, roots)
    if found is None:
        return None
    best = None
    rails = [] if symmetry else [m for m in (rails_only(model),) if m is not None]
    for links in rails + [model]:  # (a grid's shifts need not keep the rails)
        try:
            deadline.check("packing trees")
            packing = _pack_on(links, found, deadline, target)
        except OutOfTime:
            if best is None:
                raise
            break
        if packing is not None and (best is None or packing.rate > best.rate):
            best = packing
        if best is not None and (target is not None and best.rate >= target
                                 or deadline.passed()):
            break
    return best


def _pack_on(model: LinkModel, symmetry: Symmetry, deadline: Deadline, target
             ) -> Packing | None:
    """pack_symmetric over `model`'s links."""
    firsts = list(symmetry.chosen)
    if not model.links:
        return None
    deadline.check("packing trees")
    program = _Program(model, symmetry)
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, l in enumerate(model.links):
        out[l.src].append((i, l.dst))
    columns: list[tuple[int, dict[int, int], np.ndarray]] = []
    widest = np.array([1.0 / float(c) for c in program.capacity[:program.orbits]])
    for r in firsts:
        deadline.check("packing trees")
        parent = _greedy_tree(model.ranks, out, widest[program.orbit_of], r)
        if parent is None:
            return None
        columns += _with_images([(r, parent, program.uses(parent))], symmetry, program)
    goal = float(target) if target is not None else math.inf
    y = None
    for _ in range(MAX_ROUNDS):
        try:
            deadline.check("packing trees")
            y, lam, prices, root_price = _solve(program, columns, firsts, deadline)
        except OutOfTime:
            if y is None:
                raise
            break
        if lam >= goal * (1 - EPS):
            break
        edge_cost = (program.matrix.T @ prices)[program.orbit_of]
        added = _price(columns, firsts, root_price, program, prices, deadline,
                       lambda r: _greedy_tree(model.ranks, out, edge_cost, r))
        if not added:
            added = _price(columns, firsts, root_price, program, prices, deadline,
                           lambda r: _cheapest_tree(model, edge_cost, r))
        if not added:
            break  # no tree improves: lam is the best any packing of trees reaches
        columns += _with_images(added, symmetry, program)
    return _packing(model, program, columns, y, symmetry, target, deadline)


def _with_images(columns, symmetry: Symmetry, program: _Program):
    """`columns` and their trees' images under symmetry.fixing (each once)."""
    out, seen = list(columns), {tuple(sorted(p.items())) for _, p, _ in columns}
    for r, parent, _ in columns:
        for perm in symmetry.fixing:
            image = {int(perm[v]): int(perm[u]) for v, u in parent.items()}
            if (key := tuple(sorted(image.items()))) not in seen:
                seen.add(key)
                out.append((r, image, program.uses(image)))
    return out


def _solve(program: _Program, columns, firsts, deadline: Deadline):
    """The program over `columns`: their amounts, lam, the price of each row and of
    each root's row; OutOfTime when HiGHS runs out of the time left."""
    from scipy.sparse import csc_matrix, hstack

    from synth.lp import solve

    rows, m = len(program.capacity), len(columns)
    where = {r: rows + a for a, r in enumerate(firsts)}
    root_rows = csc_matrix(([-1.0] * m, ([where[c[0]] for c in columns], range(m))),
                           shape=(rows + len(firsts), m))
    lam = csc_matrix(([1.0] * len(firsts), (range(rows, rows + len(firsts)),
                                            [0] * len(firsts))),
                     shape=(rows + len(firsts), 1))
    loads = csc_matrix(np.array([c for _, _, c in columns], dtype=float).T)
    loads.resize((rows + len(firsts), m))
    a = hstack([loads + root_rows, lam]).tocsr()
    b = np.concatenate([np.array([float(c) for c in program.capacity]),
                        np.zeros(len(firsts))])
    cost = np.zeros(m + 1)
    cost[m] = -1.0
    result = solve(cost, a, -math.inf, b, 0.0, math.inf, seconds=deadline.solver_seconds())
    if result.status == "time":  # HiGHS's iteration or time limit
        raise OutOfTime("packing trees")
    if result.status != "optimal":  # cannot happen: y = 0 is feasible and lam is bounded
        raise RuntimeError(f"tree program: {result.status}")
    prices = -result.row_dual
    return result.x[:m], result.x[m], prices[:rows], prices[rows:]


def _price(columns, firsts, root_price, program, prices, deadline, tree_of):
    """The trees tree_of(root) whose reduced cost is negative (their load, at the rows'
    prices, below their root's price), unless already columns; none past the
    deadline."""
    added = []
    for a, r in enumerate(firsts):
        if deadline.passed():
            break
        parent = tree_of(r)
        load = program.uses(parent)
        if load @ prices < root_price[a] - EPS and \
                all(parent != p for q, p, _ in columns if q == r):
            added.append((r, parent, load))
    return added


def _greedy_tree(n: int, out, cost: np.ndarray, root: int) -> dict[int, int] | None:
    """A spanning arborescence from `root` by Prim's rule: the cheapest link out of the
    tree so far (ties: the shallowest end). None when some rank cannot be reached."""
    parent: dict[int, int] = {}
    depth = {root: 0}
    heap = [(cost[i], 1, root, v) for i, v in out[root]]
    heapq.heapify(heap)
    while heap and len(depth) < n:
        _, d, u, v = heapq.heappop(heap)
        if v in depth:
            continue
        parent[v], depth[v] = u, d
        for i, w in out[v]:
            if w not in depth:
                heapq.heappush(heap, (cost[i], d + 1, v, w))
    return parent if len(depth) == n else None


def _cheapest_tree(model: LinkModel, cost: np.ndarray, root: int) -> dict[int, int]:
    """A cheapest spanning arborescence from `root` (Edmonds' algorithm, networkx)."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(range(model.ranks))
    for i, l in enumerate(model.links):
        if l.dst != root:
            graph.add_edge(l.src, l.dst, weight=float(cost[i]))
    tree = nx.minimum_spanning_arborescence(graph, preserve_attrs=False)
    return {v: u for u, v in tree.edges}


def _packing(model: LinkModel, program: _Program, columns, y, symmetry: Symmetry,
             target, deadline) -> Packing | None:
    """The program's amounts as whole trees in L lanes per unit of capacity: exactly
    `target` where an integer program finds them (_whole_at); else the most trees per
    root in the most lanes MAX_TREES allows (_most_at); else, should that program run
    out of time, each amount rounded down in those lanes (rows are sums of amounts, so
    that still fits), every root the same count (the least any reaches; the rest
    trimmed off its last trees). Then every image of every tree: averaged, each image
    one copy in |H| L lanes (MAX_TREES holds per image)."""
    firsts = list(symmetry.chosen)
    chosen = [(c, float(v)) for c, v in zip(columns, y) if v > EPS]
    if not chosen:
        return None
    lam = min(sum(v for c, v in chosen if c[0] == r) for r in firsts)
    best = None
    if target is not None and lam >= float(target) * (1 - EPS):
        best = _whole_at(program, columns, firsts, target, deadline)
    lanes = max(1, math.floor(MAX_TREES / lam))
    best = best or _most_at(program, columns, firsts, lanes, MAX_TREES, deadline)
    if best is None:
        weights = [math.floor(v * lanes * (1 + EPS)) for _, v in chosen]
        per_root = min(MAX_TREES, min(sum(w for (c, _), w in zip(chosen, weights)
                                          if c[0] == r) for r in firsts))
        trimmed = _trimmed(chosen, weights, per_root)
        if per_root == 0 or not _fits(program, trimmed, lanes):
            return None
        best = (Fraction(per_root, lanes), lanes, per_root, trimmed)
    _, lanes, per_root, trimmed = best
    if not symmetry.spelled_out:
        trees = tuple(Tree(r, parent, w) for (r, parent, _), w in trimmed)
        return Packing(lanes, per_root, trees, tuple(firsts))
    weight: dict[tuple, int] = defaultdict(int)
    for perm in symmetry.perms:
        deadline.check("packing trees")
        for (r, parent, _), w in trimmed:
            key = (int(perm[r]), tuple(sorted((int(perm[v]), int(perm[u]))
                                              for v, u in parent.items())))
            weight[key] += w
    trees = [Tree(root, dict(edges), w) for (root, edges), w in weight.items()]
    trees.sort(key=lambda t: t.root)  # stable: each root's trees in their order
    if symmetry.averaged:
        order = len(symmetry.perms)
        return Packing(lanes * order, per_root * order, tuple(trees), tuple(firsts))
    return Packing(lanes, per_root, tuple(trees), tuple(range(model.ranks)))


def _whole_at(program: _Program, columns, firsts, target, deadline):
    """(target, L, k, (column, weight) pairs): whole weights at exactly `target` trees
    per root per round over `columns`: k = m x the target's numerator trees in L = m x
    its denominator lanes (_most_at, exactly), for the least m (up to MULTIPLES, k at
    most MAX_TREES) that allows them. None when none does."""
    for multiple in range(1, MULTIPLES + 1):
        lanes, per_root = target.denominator * multiple, target.numerator * multiple
        if per_root > MAX_TREES:
            return None
        found = _most_at(program, columns, firsts, lanes, per_root, deadline, exactly=True)
        if found is not None:
            return found
        if deadline.passed():
            return None
    return None


def _most_at(program: _Program, columns, firsts, lanes, most, deadline,
             exactly: bool = False):
    """(rate, L, k, (column, weight) pairs): the most whole trees k per root (at most
    `most`; `exactly`: k = most, a question of feasibility, which HiGHS settles far
    sooner than a maximum) that fit `lanes` lanes per unit of capacity, from an integer
    program over `columns` (HiGHS, at most MILP_SECONDS); None when it finds none in
    time."""
    from synth.lp import solve

    if deadline.passed():
        return None
    left = deadline.solver_seconds(MILP_SECONDS)
    n = len(columns)
    loads = np.array([c for _, _, c in columns], dtype=float).T  # rows x columns
    caps = np.array([float(c * lanes) for c in program.capacity])
    own = np.array([[float(c[0] == r) for c in columns] for r in firsts])
    # loads w <= caps; own w - k >= 0; maximise k
    rows = np.vstack([np.hstack([loads, np.zeros((len(caps), 1))]),
                      np.hstack([own, -np.ones((len(firsts), 1))])])
    cost = np.zeros(n + 1)
    cost[n] = 0.0 if exactly else -1.0
    result = solve(cost, rows, np.r_[np.full(len(caps), -np.inf), np.zeros(len(firsts))],
                   np.r_[caps, np.full(len(firsts), np.inf)],
                   np.r_[np.zeros(n), most if exactly else 0], np.r_[np.full(n, np.inf), most],
                   integer=True, seconds=left)
    if result.x is None or round(result.x[n]) < 1:
        return None
    per_root = int(round(result.x[n]))
    trimmed = _trimmed([(c, 0.0) for c in columns], [int(round(w)) for w in result.x[:n]],
                       per_root)
    if not _fits(program, trimmed, lanes):
        return None
    return Fraction(per_root, lanes), lanes, per_root, trimmed


def _trimmed(chosen, weights, per_root):
    """(column, weight) with each root's weights cut to add up to per_root."""
    left: dict[int, int] = defaultdict(lambda: per_root)
    out = []
    for (column, _), w in zip(chosen, weights):
        take = min(w, left[column[0]])
        if take:
            left[column[0]] -= take
            out.append((column, take))
    return out


def _fits(program: _Program, trimmed, lanes: int) -> bool:
    """Whether the weighted trees load every row within its capacity x lanes."""
    rows = sum(load * w for (_, _, load), w in trimmed)
    return all(int(x) <= c * lanes for x, c in zip(rows, program.capacity))
