"""Trees for identical boxes: pack one box's roots, translate to every other box.

Where the boxes of a multi-node model are alike, moving every rank k boxes on (the same
place in box b + k, boxes counted round) maps the network onto itself: links to links
of the same capacity, groups to groups. Such translations form a group G that moves no
rank to itself. Averaging any allgather packing over G keeps its rate (every image is a
packing of the same network) and makes it G-invariant: the trees of rank g(r) are g's
images of the trees of r. So the best rate is reached by packings that choose trees
only for the ranks of the first box (one per orbit of G) and translate them.

Under such a packing the load on a link e is the sum, over the chosen trees T, of
y_T x |T cap O(e)|, O(e) the orbit of e under G (G moves no rank to itself, so each
image of T meets e at most once per edge of T in the orbit); a group's load is the sum
over its links. So the trees of one box are the columns of a small linear program:
one row per link orbit and per distinct group row, one per chosen root (every root at
least lam), maximise lam. It is solved by column generation (Ford and Fulkerson,
1958; Gilmore and Gomory, 1961): HiGHS solves the program over the trees found so far,
its prices make each link orbit cost something, and a tree of negative reduced cost is
a cheapest spanning arborescence under those costs (Edmonds, 1967; networkx's
implementation). A greedy one (Prim's rule: the cheapest edge out of the tree so far)
is tried first, as it is far faster and usually enough; the exact one only runs when
the greedy finds nothing and the rate is below the bound the caller passes.

The rate is the linear program's optimum over all trees, so no split of the switches
is needed: groups are rows of their own. Its vertex is rational but often of large
denominators, so whole weights come from a small integer program over the trees found
(HiGHS): exactly the bound's rate in L = m x its denominator lanes per unit of
capacity, for the least m that allows it. Where none does, the amounts are rounded down
to lanes instead (a little below the rate). Either way the weights are checked exactly
against every row, so the trees always fit; the schedules built from them are verified
whole.

Cost: a program of (link orbits + group rows + roots) rows per round, and one greedy
tree per chosen root, O(E log E) for E links. Between boxes only rail peers first: on
every built-in they reach the bound with one or two trees per root, dgx2x16 (256 GPUs)
and dgxh100x64 (512) in under a second.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from fractions import Fraction

import numpy as np

from synth.construct.packing import MAX_TREES, OutOfTime, Packing, Tree, past
from synth.construct.splitting import rails_only
from synth.topology.linkmodel import LinkModel

MAX_ROUNDS = 400  # column generation rounds at most
DENOMINATORS = (1, 2, 4, 8, 12, 16, 24, 30, 32, 48, 60, 64, 120, 128, 240, 256, 360,
                720, 1024)  # lanes per unit of capacity tried, smallest first
EPS = 1e-9
MULTIPLES = 60  # lanes tried: the bound's denominator times 1 .. this
MILP_SECONDS = 2.0  # each whole-weight program at most


def translations(model: LinkModel) -> tuple[list[np.ndarray], list[int]] | None:
    """The translations of the boxes that map the network onto itself, as rank
    permutations (the identity first), and the ranks of the boxes they do not reach
    from the first (one rank per orbit); None when there are fewer than two boxes,
    the boxes differ in size, or no shift but the identity maps the network to itself."""
    if len(set(model.boxes)) < 2:
        return None
    labels = sorted(set(model.boxes))
    box = [labels.index(b) for b in model.boxes]
    k = len(labels)
    place, seen = [], defaultdict(int)
    for b in box:
        place.append(seen[b])
        seen[b] += 1
    if len(set(seen.values())) != 1:
        return None
    at = {(b, p): r for r, (b, p) in enumerate(zip(box, place))}
    links = {(l.src, l.dst): l.capacity for l in model.links}
    groups = {(frozenset(g.links), g.capacity) for g in model.groups}
    for shift in (s for s in range(1, k) if k % s == 0):
        perm = np.array([at[((b + shift) % k, p)] for b, p in zip(box, place)])
        if _maps_onto_itself(perm, links, groups):
            powers = [np.arange(model.ranks)]
            for _ in range(k // shift - 1):
                powers.append(perm[powers[-1]])
            return powers, [r for r in range(model.ranks) if box[r] < shift]
    return None


def _maps_onto_itself(perm, links, groups) -> bool:
    if any(links.get((perm[a], perm[b])) != c for (a, b), c in links.items()):
        return False
    return all((frozenset((perm[a], perm[b]) for a, b in g), c) in groups
               for g, c in groups)


class _Program:
    """The rows of the linear program over link orbits: one per orbit (its capacity),
    then one per distinct group row (how many of the group's links each orbit holds)."""

    def __init__(self, model: LinkModel, powers: list[np.ndarray], firsts: list[int]):
        from scipy.sparse import csr_matrix  # here: 0.2 s to import, only when packing

        inverse = [np.argsort(p) for p in powers]
        first_box = set(firsts)
        self.index = {(l.src, l.dst): i for i, l in enumerate(model.links)}
        orbit_index: dict[tuple[int, int], int] = {}
        self.orbit_of = np.zeros(len(model.links), dtype=np.int64)
        capacity: list[Fraction] = []
        for i, l in enumerate(model.links):
            # the image whose source lies in the first boxes names the orbit
            inv = next(inv for inv in inverse if inv[l.src] in first_box)
            key = (int(inv[l.src]), int(inv[l.dst]))
            if key not in orbit_index:
                orbit_index[key] = len(capacity)
                capacity.append(l.capacity)
            self.orbit_of[i] = orbit_index[key]
        n = len(capacity)
        rows: dict[tuple, Fraction] = {}
        for g in model.groups:
            counts: dict[int, int] = defaultdict(int)
            for pair in g.links:
                counts[int(self.orbit_of[self.index[pair]])] += 1
            key = tuple(sorted(counts.items()))
            rows[key] = min(rows.get(key, g.capacity), g.capacity)
        entries = [(o, o, 1) for o in range(n)] + [(n + i, o, c) for i, key in
                                                   enumerate(rows) for o, c in key]
        r, o, c = zip(*entries)
        self.matrix = csr_matrix((c, (r, o)), shape=(n + len(rows), n), dtype=np.int64)
        self.capacity = capacity + list(rows.values())
        self.orbits = n

    def uses(self, parent: dict[int, int]) -> np.ndarray:
        """The tree's load on each row (one lane of every edge)."""
        counts = np.zeros(self.orbits, dtype=np.int64)
        for v, u in parent.items():
            counts[self.orbit_of[self.index[(u, v)]]] += 1
        return self.matrix @ counts


def pack_translated(model: LinkModel, deadline: float | None = None,
                    target: Fraction | None = None) -> Packing | None:
    """An allgather packing (every rank a root) invariant under the box translations
    (module docstring); None where the model has none or some rank cannot be reached.
    `target`, trees per root per round (1 / the bound), stops the search once reached.
    Trees over rail peers alone between boxes come first (few links: dgx2x16 has 7,680
    of them against 65,280), every link only where those fall short. Raises OutOfTime
    past the deadline before any packing."""
    found = translations(model)
    if found is None:
        return None
    best = None
    for links in [m for m in (rails_only(model),) if m is not None] + [model]:
        try:
            packing = _pack_on(links, found, deadline, target)
        except OutOfTime:
            if best is None:
                raise
            break
        if packing is not None and (best is None or packing.rate > best.rate):
            best = packing
        if best is not None and (target is None or best.rate >= target or past(deadline)):
            break
    return best


def _pack_on(model: LinkModel, found, deadline, target) -> Packing | None:
    """pack_translated over `model`'s links, translated by `found`."""
    powers, firsts = found
    program = _Program(model, powers, firsts)
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, l in enumerate(model.links):
        out[l.src].append((i, l.dst))
    columns: list[tuple[int, dict[int, int], np.ndarray]] = []
    widest = np.array([1.0 / float(c) for c in program.capacity[:program.orbits]])
    for r in firsts:
        parent = _greedy_tree(model.ranks, out, widest[program.orbit_of], r)
        if parent is None:
            return None
        columns.append((r, parent, program.uses(parent)))
    goal = float(target) if target is not None else math.inf
    y = None
    for _ in range(MAX_ROUNDS):
        if past(deadline):
            if y is None:
                raise OutOfTime
            break
        y, lam, prices, root_price = _solve(program, columns, firsts)
        if lam >= goal * (1 - EPS):
            break
        edge_cost = (program.matrix.T @ prices)[program.orbit_of]
        added = _price(columns, firsts, root_price, program, prices,
                       lambda r: _greedy_tree(model.ranks, out, edge_cost, r))
        if not added:
            added = _price(columns, firsts, root_price, program, prices,
                           lambda r: _cheapest_tree(model, edge_cost, r))
        if not added:
            break  # no tree improves: lam is the best any packing of trees reaches
        columns += added
    return _packing(model, program, columns, y, powers, target, deadline)


def _solve(program: _Program, columns, firsts):
    """The program over `columns`: their amounts, lam, the price of each row and of
    each root's row."""
    from scipy.optimize import linprog
    from scipy.sparse import csc_matrix, hstack

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
    result = linprog(cost, A_ub=a, b_ub=b, bounds=[(0, None)] * (m + 1), method="highs")
    if result.status != 0:  # cannot happen: y = 0 is feasible and lam is bounded
        raise RuntimeError(f"tree program: {result.message}")
    prices = -result.ineqlin.marginals
    return result.x[:m], result.x[m], prices[:rows], prices[rows:]


def _price(columns, firsts, root_price, program, prices, tree_of):
    """The trees tree_of(root) whose reduced cost is negative (their load, at the rows'
    prices, below their root's price), unless already columns."""
    added = []
    for a, r in enumerate(firsts):
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


def _packing(model: LinkModel, program: _Program, columns, y, powers, target, deadline
             ) -> Packing | None:
    """The program's amounts as whole trees in L lanes per unit of capacity, L the
    first of DENOMINATORS to reach `target` (else the one that gets most through):
    each amount rounded down to lanes, every root taking the same count (the least
    any reaches, at most MAX_TREES; the rest trimmed off its last trees), kept only
    if it fits every row exactly. Then translated to every box."""
    chosen = [(c, float(v)) for c, v in zip(columns, y) if v > EPS]
    firsts = sorted({c[0] for c, _ in chosen})
    reached = target is not None and sum(v for _, v in chosen) >= len(firsts) * float(
        target) * (1 - EPS)
    best = _whole_at(program, columns, firsts, target, deadline) if reached else None
    for lanes in () if best else _lanes_to_try(chosen, target):
        weights = [math.floor(v * lanes * (1 + EPS)) for _, v in chosen]
        per_root = min(MAX_TREES, min(sum(w for (c, _), w in zip(chosen, weights)
                                          if c[0] == r) for r in firsts))
        if per_root == 0:
            continue
        trimmed = _trimmed(chosen, weights, per_root)
        if not _fits(program, trimmed, lanes):
            continue
        rate = Fraction(per_root, lanes)
        if best is None or rate > best[0]:
            best = (rate, lanes, per_root, trimmed)
        if target is not None and rate >= target:
            break
    if best is None:
        return None
    _, lanes, per_root, trimmed = best
    trees = [Tree(int(perm[r]), {int(perm[v]): int(perm[u]) for v, u in parent.items()}, w)
             for perm in powers for (r, parent, _), w in trimmed]
    trees.sort(key=lambda t: t.root)  # stable: each root's trees in their order
    return Packing(lanes, per_root, tuple(trees), tuple(range(model.ranks)))


def _whole_at(program: _Program, columns, firsts, target, deadline):
    """(target, L, k, (column, weight) pairs): whole weights at exactly `target` trees
    per root per round over `columns`, L = m x the target's denominator for the least
    m (up to MULTIPLES, with k = m x its numerator at most MAX_TREES) for which a small
    integer program (HiGHS) finds them in MILP_SECONDS. None when none does."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    own = LinearConstraint(np.array([[float(c[0] == r) for c in columns] for r in firsts]))
    loads = np.array([c for _, _, c in columns], dtype=float).T  # rows x columns
    for multiple in range(1, MULTIPLES + 1):
        lanes, per_root = target.denominator * multiple, target.numerator * multiple
        left = MILP_SECONDS if deadline is None else min(MILP_SECONDS,
                                                         deadline - time.monotonic())
        if per_root > MAX_TREES or left <= 0:
            return None
        caps = np.array([float(c * lanes) for c in program.capacity])
        result = milp(np.zeros(len(columns)), integrality=np.ones(len(columns)),
                      bounds=Bounds(0, per_root),
                      constraints=[LinearConstraint(loads, -np.inf, caps),
                                   LinearConstraint(own.A, per_root, per_root)],
                      options={"time_limit": left})
        if result.status == 0:
            trimmed = [(c, int(round(w))) for c, w in zip(columns, result.x) if round(w)]
            if _fits(program, trimmed, lanes):
                return target, lanes, per_root, trimmed
    return None


def _lanes_to_try(chosen, target):
    """Lanes per unit of capacity: first the lcm of the amounts' denominators as
    Fractions of growing denominators (the program's vertex is rational, its floats
    near it) where the trees stay few, then DENOMINATORS."""
    seen = []
    for most in (12, 120, 1000):
        lanes = math.lcm(*(Fraction(v).limit_denominator(most).denominator
                           for _, v in chosen),
                         target.denominator if target is not None else 1)
        if lanes not in seen and lanes * sum(v for _, v in chosen) <= 4 * MAX_TREES:
            seen.append(lanes)
    return seen + [d for d in DENOMINATORS if d not in seen]


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
