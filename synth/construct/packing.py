"""Broadcast, reduce (and allreduce) by packed spanning trees, pipelined: the cut bound,
up to the fill.

The theorem. Edmonds (1973): a directed multigraph has k edge-disjoint spanning
arborescences rooted at r if and only if every vertex v != r has k edge-disjoint paths
from r (max-flow(r, v) >= k, Menger). Lovasz's proof (1976) builds them one at a time and
one edge at a time: a partial arborescence T may take an edge (u, v), u in T, v not,
whenever afterwards every vertex w != r still has max-flow(r, w) >= k - 1 in the graph
without T's edges; such an edge always exists, and a finished T leaves a graph where
the same holds for k - 1 trees. Removing one edge lowers a max-flow by at most one, so
only the vertices whose flow is exactly k - 1 (tight) need checking per candidate.

Here the multigraph is the link model's rank links, each repeated by its capacity in
chunks per round (scaled to integers by L, the lcm of the denominators), so k = the
least max-flow from the root in lanes, and the broadcast cut bound over these links is
L / k rounds per chunk. Chunk t of a batch follows tree t down, one level per step; a
link carries at most its lanes' worth of trees, so each step needs L rounds at most
(synth.topology.linkmodel.min_rounds prices it exactly, groups included). A batch of k
chunks takes D steps (the deepest tree); P batches pipelined, batch b starting at step
b, take D + P - 1 steps: R / C = L (D + P - 1) / (k P), the bound times (D + P - 1) / P.
No schedule reaches the bound exactly unless D = 1: the root's last chunk still has
D - 1 levels to go. Reduce is the broadcast on the reversed links, run backwards.
Allreduce: reduce trees up to a root, then broadcast trees down from it, as one
pipeline (allreduce_schedule); where the two phases use each link in opposite
directions (a line through its middle) it too is the bound times the fill, elsewhere
the rounds show what the overlap costs and the frontier keeps it only where it wins.

Only link models without groups are packed (direct links: dgx1, rings, meshes, tori):
where links share a switch port or a NIC, the rank links overstate what the switch
passes, and packing there needs ForestColl's edge splitting of the switch vertices
(Mader; Bang-Jensen, Frank and Jackson), which is not built yet.

Cost: k trees x (N - 1) edges, each an O(N) max-flows check in the worst case, with the
tight vertices only per candidate; MAX_TREES caps k, MAX_RANKS the size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
from networkx.algorithms.flow import shortest_augmenting_path

from synth.schedule.collectives import make_collective
from synth.schedule.file import verified
from synth.schedule.ir import Pipeline, Schedule, Send, Step
from synth.schedule.transform import reverse_model, reverse_schedule
from synth.search.pareto import Limits, Point, Search
from synth.topology.linkmodel import LinkModel, min_rounds

COLLECTIVES = ("broadcast", "reduce", "allreduce")
MAX_TREES = 64  # more lanes than this out of the root: pack this many (off the bound)
MAX_RANKS = 64  # past this, O(N^2) max-flows per tree take minutes (64: about 36 s)
DEPTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # pipeline batches tried
MAX_STEPS = 1100  # a pipeline past this many steps is not built
ALLREDUCE_ROOTS = 8  # allreduce tries every root up to this many ranks (else rank 0)


@dataclass(frozen=True)
class Packing:
    """k spanning trees from the root: parents[t][v] is v's parent in tree t."""

    root: int
    lanes_per_capacity: int  # L: a link of capacity c chunks per round has c x L lanes
    parents: tuple[dict[int, int], ...]
    wanted: int = 0  # the trees the min cut allows (more than parents when time ran out)

    @property
    def trees(self) -> int:
        return len(self.parents)

    def depth(self, t: int, v: int) -> int:
        d = 0
        while v != self.root:
            v = self.parents[t][v]
            d += 1
        return d


def pack_trees(model: LinkModel, root: int, deadline: float | None = None
               ) -> Packing | None:
    """Edge-disjoint spanning arborescences from `root` over the lanes of the rank links,
    as many as the least max-flow from the root (at most MAX_TREES). At the deadline,
    the trees finished so far (any of them are a packing, only fewer); None when some
    rank cannot be reached, or not one tree was finished."""
    scale = math.lcm(*(l.capacity.denominator for l in model.links))
    lanes = {(l.src, l.dst): int(l.capacity * scale) for l in model.links}
    others = [v for v in range(model.ranks) if v != root]
    k = min(min(_flows(lanes, root, others, MAX_TREES).values(), default=0), MAX_TREES)
    if k == 0:
        return None
    parents = []
    for t in range(k):
        need = k - t - 1  # trees still to come after this one
        # flows[w] is a lower bound on max-flow(root, w): need + 1 at a tree's start
        # (the theorem), and a flow drops by one at most per edge taken, so
        # flows[w] - (taken - when[w]) still is one; only the w where that reaches
        # `need` are recomputed, and only as far as need + 1
        flows = dict.fromkeys(others, need + 1)
        parent, depth, taken, when = {}, {root: 0}, 0, dict.fromkeys(others, 0)
        while len(depth) < model.ranks:
            if _past(deadline):
                return Packing(root, scale, tuple(parents), k) if parents else None
            stale = [w for w in others if when[w] != taken
                     and flows[w] - (taken - when[w]) <= need]
            flows.update(_flows(lanes, root, stale, need + 1))
            when.update(dict.fromkeys(stale, taken))
            tight = [w for w in others if when[w] == taken and flows[w] == need]
            edge = _next_edge(lanes, depth, root, tight, need, deadline)
            if edge is None and _past(deadline):
                return Packing(root, scale, tuple(parents), k) if parents else None
            if edge is None:  # cannot happen when the theorem's premise holds
                raise AssertionError(f"tree {t}: no edge keeps {need} trees packable")
            u, v = edge
            lanes[edge] -= 1
            parent[v], depth[v] = u, depth[u] + 1
            taken += 1
        parents.append(parent)
    return Packing(root, scale, tuple(parents), k)


def _next_edge(lanes, depth, root, tight, need, deadline=None):
    """An edge out of the tree that keeps max-flow(root, w) >= need for the tight w,
    from the shallowest tree vertex first (shallow trees: a short pipeline fill), then
    the link with the most lanes left. None past the deadline."""
    candidates = sorted(((u, v) for (u, v), n in lanes.items()
                         if n > 0 and u in depth and v not in depth),
                        key=lambda e: (depth[e[0]], -lanes[e], e))
    for edge in candidates:
        if not tight:
            return edge
        if _past(deadline):
            return None
        lanes[edge] -= 1
        ok = all(f >= need for f in _flows(lanes, root, tight, need).values())
        lanes[edge] += 1
        if ok:
            return edge
    return None


def _flows(lanes: dict, root: int, targets: list[int], enough: int) -> dict[int, int]:
    """max-flow(root, w) over the lanes left, for each w, or a value >= `enough` once
    the flow reaches it (the augmenting stops there: all a caller asks is whether)."""
    g = nx.DiGraph()
    g.add_node(root)
    g.add_edges_from((u, v, {"capacity": n}) for (u, v), n in lanes.items() if n > 0)
    return {w: (nx.maximum_flow_value(g, root, w, flow_func=shortest_augmenting_path,
                                      cutoff=enough) if w in g else 0) for w in targets}


def _tree_program(packing: Packing, trees: int) -> list[tuple[Send, ...]]:
    """The sends of the first `trees` trees, level by level: chunk t down tree t."""
    by_level: dict[int, list[Send]] = {}
    for t, parent in enumerate(packing.parents[:trees]):
        for v, u in parent.items():
            by_level.setdefault(packing.depth(t, v), []).append(Send(t, u, v))
    return [tuple(sorted(by_level[d], key=lambda x: (x.src, x.dst, x.chunk)))
            for d in sorted(by_level)]


def _pipelined(model: LinkModel, coll, program, per_batch: int, batches: int,
               info: dict) -> Schedule:
    """`program` as batch 0 of a pipeline of `batches` batches (stride `per_batch`),
    batch b starting at step b; every step's rounds from all it carries."""
    steps = tuple(Step(min_rounds(model, [(x.src, x.dst) for x in sends]), sends)
                  for sends in program)
    if batches == 1:
        return Schedule(coll, model, steps, info)
    depth = len(steps)
    rounds = tuple(min_rounds(model, [(x.src, x.dst)
                                      for i in range(max(0, t - batches + 1),
                                                     min(t, depth - 1) + 1)
                                      for x in steps[i].sends])
                   for t in range(depth + batches - 1))
    return Schedule(coll, model, steps, info, Pipeline(batches, per_batch, rounds))


def _info(k: int, batches: int, what: str = "trees") -> dict:
    return {"method": f"{what}, {k} packed" + (f", {batches} batches" if batches > 1 else ""),
            "trees": k}


def broadcast_schedule(model: LinkModel, packing: Packing, batches: int) -> Schedule:
    """Chunk t of every batch down tree t, one level per step; `batches` batches of
    `packing.trees` chunks, batch b starting at step b (a version 2 pipeline)."""
    k = packing.trees
    coll = make_collective("broadcast", model.ranks, k * batches, packing.root)
    return _pipelined(model, coll, _tree_program(packing, k), k, batches, _info(k, batches))


def allreduce_schedule(model: LinkModel, up: Packing, down: Packing, batches: int
                       ) -> Schedule:
    """Reduce then broadcast through one root: chunk t is summed up tree t of `up`
    (packed on the reversed links, so its edges run child to parent here), deepest
    level first, then copied down tree t of `down`. Pipelined, one batch's reduction
    overlaps an earlier batch's broadcast; the two phases use a link in opposite
    directions where the trees mirror each other."""
    k = min(up.trees, down.trees)
    reduce = [tuple(Send(x.chunk, x.dst, x.src, "reduce") for x in sends)
              for sends in reversed(_tree_program(up, k))]
    coll = make_collective("allreduce", model.ranks, k * batches)
    return _pipelined(model, coll, reduce + _tree_program(down, k), k, batches,
                      _info(k, batches, "reduce + broadcast trees"))


def tree_search(model: LinkModel, name: str, root: int, limits: Limits,
                deadline: float | None = None) -> Search:
    """Broadcast (or reduce) by packed trees, at every pipeline depth in DEPTHS within
    the step limits, each verified. None is `proven` (a construction proves nothing);
    the search is complete unless the deadline cut it short."""
    search = Search()
    if name not in COLLECTIVES:
        search.stopped = f"{name} is not built from trees (only {', '.join(COLLECTIVES)})"
        return search
    if model.ranks > MAX_RANKS:
        search.stopped = f"not packed: {model.ranks} ranks (at most {MAX_RANKS})"
        return search
    if model.groups:  # switches: their ports bind, and the rank links would overstate them
        search.stopped = ("not packed: links share switch ports or NICs (packing through "
                          "switches needs edge splitting, not built yet)")
        return search
    try:
        return _tree_points(model, name, root, limits, deadline, search)
    except KeyboardInterrupt:  # Ctrl-C keeps the points built so far
        search.stopped = "interrupted"
        return search


def _tree_points(model, name, root, limits, deadline, search) -> Search:
    if name == "allreduce":
        return _allreduce_points(model, limits, deadline, search)
    packed_on = model if name == "broadcast" else reverse_model(model)
    packing = pack_trees(packed_on, root, deadline)
    if packing is None:
        return _nothing_packed(search, deadline)
    if packing.trees < packing.wanted:
        search.stopped = f"out of time: {packing.trees} of {packing.wanted} trees packed"
        search.complete = False

    def build(batches):
        schedule = broadcast_schedule(packed_on, packing, batches)
        return reverse_schedule(schedule, model) if name == "reduce" else schedule

    _add_pipelines(search, build, limits, deadline)
    search.stopped = search.stopped or f"{packing.trees} trees packed"
    return search


def _allreduce_points(model, limits, deadline, search) -> Search:
    """Reduce + broadcast trees through the root whose deepest pipeline has the least
    R/C (then the fewest steps); every rank is tried up to ALLREDUCE_ROOTS ranks, else
    rank 0 only."""
    reverse = reverse_model(model)
    roots = range(model.ranks if model.ranks <= ALLREDUCE_ROOTS else 1)
    best, tried = None, 0
    for root in roots:
        if best and _past(deadline):
            break
        down, up = pack_trees(model, root, deadline), pack_trees(reverse, root, deadline)
        tried += 1
        if down is None or up is None:
            continue
        # judged by what the deepest pipeline costs: where the two phases share a link
        # direction, its steps take 2 rounds, which neither tree count nor depth shows
        deepest = allreduce_schedule(model, up, down, DEPTHS[-1])
        key = (Fraction(deepest.rounds, deepest.collective.chunks), deepest.num_steps)
        if best is None or key < best[0]:
            best = (key, up, down)
    if best is None:
        return _nothing_packed(search, deadline)
    _, up, down = best
    if tried < len(roots) or min(up.trees, down.trees) < min(up.wanted, down.wanted):
        search.stopped = f"out of time: {tried} of {len(roots)} roots tried"
        search.complete = False
    _add_pipelines(search, lambda batches: allreduce_schedule(model, up, down, batches),
                   limits, deadline)
    k = min(up.trees, down.trees)
    search.stopped = search.stopped or (f"{k} tree{'s' * (k != 1)} each way, "
                                        f"root {up.root}")
    return search


def _add_pipelines(search: Search, build, limits: Limits, deadline) -> None:
    """build(P) for each depth P in DEPTHS, verified, as points of `search` where its
    steps are within the limits; past the deadline, no more once there is one."""
    lo, hi = max(1, limits.min_steps), min(limits.max_steps or MAX_STEPS, MAX_STEPS)
    for batches in DEPTHS:
        if search.points and _past(deadline):
            search.stopped, search.complete = "out of time", False
            return
        schedule = build(batches)
        if lo <= schedule.num_steps <= hi:
            search.points.append(Point(verified(schedule), proven=False))


def _nothing_packed(search: Search, deadline) -> Search:
    out_of_time = _past(deadline)
    search.stopped = "out of time" if out_of_time else \
        "some rank cannot be reached from the root"
    search.complete = not out_of_time
    return search


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline
