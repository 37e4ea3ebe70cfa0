"""Packed spanning trees: as many trees from each root as the cuts allow, with weights.

The theorem. Edmonds' branching theorem (1973): in a directed multigraph, spanning
arborescences T_1 .. T_K with roots r_1 .. r_K (a root may repeat) can be chosen
edge-disjoint if and only if every nonempty vertex set S is entered by at least as many
edges as there are trees whose root lies outside S. Joining a new source s* to each rank
by as many edges as trees it roots turns this into max-flow(s*, v) >= K for every rank v
(Menger). One root repeated k times is Edmonds' arborescence theorem (broadcast: k trees
from the root when every rank has k edge-disjoint paths from it); every rank rooting k
trees is ForestColl's allgather packing (arXiv 2402.06787).

The construction is Lovasz's proof (1976), one edge at a time: a tree T under
construction may take an edge (u, v) with u in T and v not whenever afterwards the other
trees still satisfy the condition in the graph without T's edges; such an edge always
exists, so T always completes. Removing one edge lowers a rank's max-flow by at most
one, and only if the edge lies in one of its minimum cuts; that breaks the condition
only for ranks whose flow is exactly the demand (tight). The edges in some minimum cut
are read off one maximum flow: saturated, with ends in different strongly connected
components of the residual graph (Picard and Queyranne, 1980). A step costs one
max-flow per tight rank, whatever the number of candidates.

Weights: a finished tree T of root r is taken w times at once, w the largest count for
which the graph without w copies of T still packs the rest (the same max-flow test; it
holds for w = 1, and if for w then for w - 1), so a symmetric topology needs few distinct
trees however many its cuts allow.

Here the multigraph is the link model's rank links, each repeated by its capacity in
chunks per round, scaled to integers: lanes. Where links share switch ports or NICs, the
capacities are first split among the links (synth.construct.splitting), so that trees
that fit the lanes fit every group. The rate, trees per root per round, is the least
ratio over rank sets S of the lanes into S to the roots outside S; Newton's method on
cuts (Dinkelbach) finds it exactly in a few rounds of N max-flows. L, the lanes per unit
of capacity, is the lcm of the capacities' denominators and the rate's, so that k = rate
x L trees per root is an integer. Where that would take more than MAX_TREES trees per
root and the best split falls just short of the bound (the program's vertex has large
denominators, and coarser lanes round some of it away), a split in whole lanes at the
bound's own rate is sought instead (splitting.whole_split, _whole_at).

Cost: per distinct tree, (N - 1) edges, each up to N max-flows over N + 1 vertices
(scipy's Dinic, in C, about 1 ms a call with its input checks at 32 ranks and 1,000
links), and a binary search of N max-flows each for its weight. About 10 s for the
104 distinct trees of dgx2x2's allgather; N^3 max-flows in all, so 64 ranks is the
limit tree_schedules sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.construct.splitting import candidate_splits, rails_only, whole_split
from synth.deadline import Deadline, OutOfTime
from synth.topology.linkmodel import LinkModel

MAX_TREES = 1024  # trees per root at most (chunks per batch per root): past it, fewer
MAX_UNITS = 8192  # chunks per batch per source along paths (they cost nothing to find)
MAX_LANES = 1 << 24  # lanes per link fit the int32 that scipy's max-flow counts in
# where the best split falls short of the bound by less than this, whole splits at the
# bound are sought (_whole_at), in at most this many multiples of its denominator
WHOLE_WITHIN, WHOLE_MULTIPLES = Fraction(1, 100), 8


@dataclass(frozen=True)
class Tree:
    """A spanning arborescence: parent[v] is v's parent; it is taken `weight` times
    (each copy one lane of every edge, and one chunk of a batch)."""

    root: int
    parent: dict[int, int]
    weight: int = 1

    def depth(self, v: int) -> int:
        d = 0
        while v != self.root:
            v = self.parent[v]
            d += 1
        return d


@dataclass(frozen=True)
class Packing:
    """Trees over `lanes_per_capacity` lanes per unit of capacity; each root roots
    `per_root` of them in weight."""

    lanes_per_capacity: int
    per_root: int
    trees: tuple[Tree, ...]
    roots: tuple[int, ...] = ()

    def weight(self, root: int) -> int:
        return sum(t.weight for t in self.trees if t.root == root)

    @property
    def rate(self) -> Fraction:
        """Chunks per round each root gets out: per_root / L."""
        return Fraction(self.per_root, self.lanes_per_capacity)

    def reaches(self, target: Fraction | None) -> bool:
        """Whether the rate is exactly `target` (None: any rate will do)."""
        return target is None or self.rate == target

    def info(self, batches: int, what: str = "trees") -> dict:
        """A schedule's info from these trees: its method in words, and the trees."""
        distinct = len(self.trees)
        return {"method": f"{what}, {self.per_root} packed" +
                (f" ({distinct} distinct)" if distinct != self.per_root * len(self.roots)
                 else "") + (f", {batches} batches" if batches > 1 else ""),
                "trees": self.per_root}

    @property
    def counted(self) -> str:
        """What a search says of the packing: trees per root, distinct trees."""
        return (f"{self.per_root} tree{'s' * (self.per_root != 1)} per root, "
                f"{len(self.trees)} distinct")


@dataclass
class _Lanes:
    """Lanes of the rank links plus s* (vertex N) into every rank, kept as a scipy CSR
    matrix whose data is rewritten in place before each max-flow."""

    n: int
    src: np.ndarray
    dst: np.ndarray
    lanes: np.ndarray  # per link, then per rank (s* -> rank)

    def __post_init__(self):
        from scipy.sparse import coo_matrix  # here: 0.2 s to import, only when packing

        self.rows = np.concatenate([self.src, np.full(self.n, self.n)])
        self.cols = np.concatenate([self.dst, np.arange(self.n)])
        ids = np.arange(1, len(self.rows) + 1)
        self.graph = coo_matrix((ids, (self.rows, self.cols)),
                                shape=(self.n + 1,) * 2).tocsr()
        self.order = self.graph.data - 1
        self.index = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(self.src, self.dst))}

    def flows(self, supply: np.ndarray, targets) -> dict[int, int]:
        """max-flow(s*, v) for v in targets, with `supply` lanes from s* to each rank."""
        return {v: int(self._max_flow(supply, v).flow_value) for v in targets}

    def in_min_cuts(self, supply: np.ndarray, target: int
                    ) -> tuple[int, np.ndarray, np.ndarray]:
        """max-flow(s*, target); the flow on each link; and which links lie in some
        minimum cut: those the flow saturates whose ends fall in different strongly
        connected components of its residual graph (Picard and Queyranne, 1980).
        Taking a lane off such a link lowers the max-flow; off any other, it does not."""
        from scipy.sparse.csgraph import connected_components

        value, used, residual = self._solve(supply, target)
        _, component = connected_components(residual, directed=True, connection="strong")
        m = len(self.src)
        cut = (used[:m] == self.lanes[:m]) & (component[self.src] != component[self.dst])
        return value, used, cut

    def sink_side(self, supply: np.ndarray, target: int) -> tuple[int, np.ndarray]:
        """max-flow(s*, target), and the ranks on the target's side of a minimum cut
        (those s* cannot reach in the residual graph), as a boolean mask."""
        from scipy.sparse.csgraph import breadth_first_order

        value, _, residual = self._solve(supply, target)
        reached = breadth_first_order(residual, self.n, directed=True,
                                      return_predecessors=False)
        side = np.ones(self.n, dtype=bool)
        side[reached[reached < self.n]] = False
        return value, side

    def _max_flow(self, supply, target):
        from scipy.sparse.csgraph import maximum_flow

        self.lanes[len(self.src):] = supply
        self.graph.data = self.lanes[self.order].astype(np.int32)
        return maximum_flow(self.graph, self.n, target, method="dinic")

    def _solve(self, supply, target):
        """max-flow(s*, target), the flow on each link then each supply, and the
        residual graph (1 where a lane is left)."""
        result = self._max_flow(supply, target)
        residual = (self.graph - result.flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        used = np.asarray(result.flow[self.rows, self.cols]).ravel()  # links, then s*
        return int(result.flow_value), used, residual


def pack_trees(model: LinkModel, roots: list[int], deadline: Deadline | float | None = None,
               target: Fraction | None = None) -> Packing | None:
    """As many trees from each of `roots` (each rank at most once) as the cuts allow, up
    to MAX_TREES per root, with weights (module docstring), over the split of the
    switches that lets the most through (the first to reach `target` trees per root per
    round, if given: the bound, when the caller knows it). Raises OutOfTime past the
    deadline; None when some rank cannot be reached from some root."""
    deadline = Deadline.of(deadline)
    found = _best_lanes(model, roots, None, deadline, target)
    if found is None:
        return None
    lanes, scale, k = found
    left = np.zeros(model.ranks, dtype=np.int64)
    left[roots] = k
    trees: list[Tree] = []
    for root in roots:
        while left[root] > 0:
            deadline.check("packing trees")
            left[root] -= 1  # the tree under construction
            parent = _grow(lanes, left, root, deadline)
            weight = 1 + _extra_copies(lanes, left, parent, root)
            left[root] -= weight - 1
            lanes.lanes[[lanes.index[(u, v)] for v, u in parent.items()]] -= weight - 1
            trees.append(Tree(root, parent, weight))
    return Packing(scale, k, tuple(trees), tuple(roots))


def _best_lanes(model: LinkModel, roots: list[int], sinks: list[int] | None,
                deadline: Deadline,
                target: Fraction | None, most: int = MAX_TREES
                ) -> tuple[_Lanes, int, int] | None:
    """(lanes, L, k): the split of the switches that lets the most through from `roots`
    to `sinks` (the first to reach `target` per root per round, if given), as lanes, L
    per unit of capacity, and k = rate x L per root, an integer of at most `most`.

    Where the exact rate needs more than `most` per root (capacities of awkward ratio,
    e.g. 15.754 GB/s PCIe beside 25 GB/s NVLink), the lanes are coarsened to L' = most /
    rate, each rounded down, and k is what they allow: within about 1 / most of the
    rate. None when nothing gets through; OutOfTime past the deadline before any split
    was measured."""
    best = None
    for split in candidate_splits(model, roots, sinks, deadline):
        if deadline.passed():
            break
        scale = math.lcm(*(l.capacity.denominator for l in split.links))
        # measuring multiplies lanes by up to len(roots), and they must fit int32: past
        # that, measure on coarser lanes
        if _top_lanes(split, scale) * len(roots) > MAX_LANES:
            scale = max(1, MAX_LANES // (len(roots) * math.ceil(_top_lanes(split, 1))))
        rate = _exact_rate(_lanes_of(split, scale), roots, sinks) / scale
        if rate > 0 and (best is None or rate > best[0]):
            best = (rate, split)
        if best is not None and target is not None and best[0] >= target:
            break
    if best is None:
        if deadline.passed():
            raise OutOfTime
        return None
    rate, split = best
    scale = math.lcm(rate.denominator, *(l.capacity.denominator for l in split.links))
    if rate * scale <= most and _top_lanes(split, scale) <= MAX_LANES:
        return _lanes_of(split, scale), scale, int(rate * scale)
    if target is not None and target * (1 - WHOLE_WITHIN) <= rate < target:
        found = _whole_at(model, roots, sinks, deadline, target, most)
        if found is not None:
            return found
    scale = max(1, math.floor(most / rate))
    if _top_lanes(split, scale) * len(roots) > MAX_LANES:
        return None
    lanes = _lanes_of(split, scale)
    k = min(math.floor(_exact_rate(lanes, roots, sinks)), most)
    return (lanes, scale, k) if k > 0 else None


def _whole_at(model: LinkModel, roots: list[int], sinks: list[int] | None,
              deadline: Deadline, target: Fraction, most: int
              ) -> tuple[_Lanes, int, int] | None:
    """(lanes, L, k) at exactly `target` trees per root per round: k = m x its numerator
    trees in L = m x its denominator lanes, for the least m (k at most `most`, m at most
    WHOLE_MULTIPLES) whose
    whole split (splitting.whole_split) the max-flows confirm; None when none does."""
    bases = [m for m in (rails_only(model), model) if m is not None]
    for multiple in range(1, min(most // target.numerator, WHOLE_MULTIPLES) + 1):
        scale, k = target.denominator * multiple, target.numerator * multiple
        for base in bases:  # rail peers alone first: fewer, wider links (candidate_splits)
            if deadline.passed():
                return None
            split = whole_split(base, roots, sinks, target, scale, deadline)
            if split is None or _top_lanes(split, scale) * len(roots) > MAX_LANES:
                continue
            lanes = _lanes_of(split, scale)
            if _exact_rate(lanes, roots, sinks) >= k:
                return lanes, scale, k
    return None


def _top_lanes(split: LinkModel, scale: int) -> Fraction:
    return max((l.capacity * scale for l in split.links), default=Fraction(0))


@dataclass(frozen=True)
class Paths:
    """A flow from every source to one sink in `lanes_per_capacity` lanes per unit of
    capacity, as paths: (source, ranks from source to sink, units), each source's
    units adding up to per_source."""

    lanes_per_capacity: int
    per_source: int
    sink: int
    paths: tuple[tuple[int, tuple[int, ...], int], ...]


def pack_paths(model: LinkModel, sources: list[int], sink: int,
               deadline: Deadline | float | None = None, target: Fraction | None = None
               ) -> Paths | None:
    """The most units per source that reach `sink` at once (gather: max-flow from s*,
    k from each source, is k x sources exactly when the rate allows k), over the best
    split of the switches, decomposed into paths. None when some source cannot reach
    the sink. A flow's paths use each link at most its flow's units, so chunks that
    follow them one hop a step fit L rounds a step, as trees do."""
    found = _best_lanes(model, sources, [sink], Deadline.of(deadline), target, MAX_UNITS)
    if found is None:
        return None
    lanes, scale, k = found
    supply = np.zeros(model.ranks, dtype=np.int64)
    supply[sources] = k
    value, used, _ = lanes._solve(supply, sink)
    assert value == k * len(sources)  # k was measured on these lanes
    m = len(lanes.src)
    flow: dict[int, dict[int, int]] = {}
    for i in np.flatnonzero(used[:m] > 0):
        flow.setdefault(int(lanes.src[i]), {})[int(lanes.dst[i])] = int(used[i])
    paths = []
    for source in sources:
        left = k
        while left:
            path = _walk(flow, source, sink)
            units = min([left] + [flow[a][b] for a, b in zip(path, path[1:])])
            _take(flow, path, units)
            paths.append((source, tuple(path), units))
            left -= units
    return Paths(scale, k, sink, tuple(paths))


def _walk(flow: dict[int, dict[int, int]], source: int, sink: int) -> list[int]:
    """A path from source to sink along links that still carry flow; a cycle met on
    the way is cancelled (it moves nothing anywhere) and the walk starts over."""
    while True:
        path, seen = [source], {source: 0}
        while path[-1] != sink:
            here = path[-1]
            nxt = next(iter(flow[here]))  # conservation: flow in means flow out
            if nxt in seen:
                cycle = path[seen[nxt]:] + [nxt]
                _take(flow, cycle, min(flow[a][b] for a, b in zip(cycle, cycle[1:])))
                break
            seen[nxt] = len(path)
            path.append(nxt)
        else:
            return path


def _take(flow: dict[int, dict[int, int]], walk: list[int], units: int) -> None:
    """Take `units` of flow off every link along `walk` (links left empty go)."""
    for a, b in zip(walk, walk[1:]):
        flow[a][b] -= units
        if not flow[a][b]:
            del flow[a][b]


def _lanes_of(split: LinkModel, scale: int) -> _Lanes:
    """The split's links as lanes: capacity x scale each, rounded down."""
    counts = [math.floor(l.capacity * scale) for l in split.links]
    return _Lanes(split.ranks, np.array([l.src for l in split.links], dtype=np.int64),
                  np.array([l.dst for l in split.links], dtype=np.int64),
                  np.array(counts + [0] * split.ranks, dtype=np.int64))


def _exact_rate(lanes: _Lanes, roots: list[int], sinks: list[int] | None = None
                ) -> Fraction:
    """The most trees per root, in lanes (a Fraction), that Edmonds' condition allows:
    min over rank sets S of the lanes into S over the roots outside S (S holding one of
    `sinks`: every rank but a lone root when None; [sink] for a gather's flow). Found
    by Newton's method on cuts (Dinkelbach): guess lam, test it with one max-flow per
    sink (lanes x q, q lam from s* into each root, q the denominator), and where a flow
    falls short, its minimum cut's ratio is the next, smaller guess. 0 when some rank
    cannot be reached."""
    n, m, count = lanes.n, len(lanes.src), len(roots)
    base = lanes.lanes[:m].copy()
    into = np.zeros(n, dtype=np.int64)
    np.add.at(into, lanes.dst, base)
    others = sinks if sinks is not None else \
        [v for v in range(n) if not (count == 1 and v == roots[0])]
    lam = min(Fraction(int(into[v]), count - (v in roots)) for v in others)
    try:
        while lam > 0:
            if int(base.max(initial=0)) * lam.denominator > MAX_LANES:
                return Fraction(0)  # a cut of awkward ratio: not worth its lanes
            lanes.lanes[:m] = base * lam.denominator
            supply = np.zeros(n, dtype=np.int64)
            supply[roots] = lam.numerator
            for v in others:
                value, side = lanes.sink_side(supply, v)
                if value < lam.numerator * count:
                    entering = side[lanes.dst] & ~side[lanes.src]
                    outside = count - int(side[roots].sum())
                    lam = Fraction(int(base[entering].sum()), outside)
                    break
            else:
                return lam
        return Fraction(0)
    finally:
        lanes.lanes[:m] = base


def _grow(lanes: _Lanes, left: np.ndarray, root: int, deadline: Deadline) -> dict[int, int]:
    """One tree from `root`, edge by edge (Lovasz): each edge keeps the trees in `left`
    packable in what the tree leaves, i.e. lies in no minimum cut of a rank whose
    max-flow is exactly the demand (tight). Its edges are taken out of `lanes`."""
    n, need = lanes.n, int(left.sum())
    # per rank w: a maximum flow to it and the links in its minimum cuts, kept while
    # valid: taking a lane off a link its flow leaves with a lane to spare changes
    # neither the flow's value nor its residual graph's connections
    known: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
    parent: dict[int, int] = {}
    depth = {root: 0}
    while len(depth) < n:
        deadline.check("packing trees")
        blocked = np.zeros(len(lanes.src), dtype=bool)
        for w in range(n):
            if w not in known:
                known[w] = lanes.in_min_cuts(left, w)
            value, _, cut = known[w]
            if value < need:  # cannot happen: the theorem's premise holds throughout
                raise AssertionError(f"rank {w}: max-flow {value} below {need}")
            if value == need:
                blocked |= cut
        u, v = _next_edge(lanes, depth, blocked)
        i = lanes.index[(u, v)]
        lanes.lanes[i] -= 1
        for w in [w for w, (_, used, _) in known.items() if used[i] >= lanes.lanes[i]]:
            del known[w]
        parent[v], depth[v] = u, depth[u] + 1
    return parent


def _next_edge(lanes: _Lanes, depth, blocked: np.ndarray) -> tuple[int, int]:
    """An unblocked edge out of the tree: from the shallowest tree vertex first (a short
    pipeline fill), then the link with the most lanes left (room for the tree's
    copies)."""
    inside = np.zeros(lanes.n, dtype=bool)
    inside[list(depth)] = True
    ok = np.flatnonzero((lanes.lanes[:len(lanes.src)] > 0) & inside[lanes.src]
                        & ~inside[lanes.dst] & ~blocked)
    if len(ok) == 0:
        raise AssertionError("no edge keeps the other trees packable (Lovasz says one does)")
    best = min(ok, key=lambda i: (depth[int(lanes.src[i])], -lanes.lanes[i],
                                  int(lanes.src[i]), int(lanes.dst[i])))
    return int(lanes.src[best]), int(lanes.dst[best])


def _extra_copies(lanes: _Lanes, left: np.ndarray, parent: dict[int, int], root: int
                  ) -> int:
    """How many more copies of the finished tree to take: the most, up to the trees
    its root still owes and the lanes its edges have left, that keep the rest
    packable (binary search; taking w copies is possible if w + 1 are)."""
    edges = [lanes.index[(u, v)] for v, u in parent.items()]
    lo, hi = 0, int(min(left[root], min(lanes.lanes[i] for i in edges)))
    everyone = list(range(lanes.n))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lanes.lanes[edges] -= mid
        left[root] -= mid
        ok = all(f >= left.sum() for f in lanes.flows(left, everyone).values())
        lanes.lanes[edges] += mid
        left[root] += mid
        if ok:
            lo = mid
        else:
            hi = mid - 1
    return lo
