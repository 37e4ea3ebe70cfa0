"""Schedules from packed trees (synth.construct.packing), pipelined: the cut bound, up to
the fill.

Broadcast: chunk j of a batch follows the tree whose weight range holds j, one level per
step. Allgather: the same from every rank, each rank's chunks down its own trees. A link
carries at most its lanes' worth of tree copies over all levels, and the lanes fit every
group, so a step needs at most L rounds (synth.topology.linkmodel prices each exactly).
A batch of k chunks per root takes D steps (the deepest tree); P batches, batch b
starting at step b, take D + P - 1 steps, so R / C = L (D + P - 1) / (k P): the rate
the split and the trees reach (k / L chunks per round per root) times the fill
(D + P - 1) / P. Where the split reaches the cut bound (every built-in but dgx2xK,
whose routes give each GPU pair one NIC path), that is the bound times the fill; no
finite pipeline is exactly at it unless D = 1, as the last batch still has D - 1 levels
to go.

Reduce and reducescatter are broadcast and allgather on the reversed links, run
backwards (SCCL's duality). Allreduce: reduce trees up to a root, then broadcast trees
down from it, as one pipeline; where the two phases use each link in opposite directions
it too is the bound times the fill, elsewhere the rounds show what the overlap costs
and the frontier keeps it only where it wins.

Gather: a maximum flow to the root, k chunks a batch from every GPU, cut into paths
(packing.pack_paths); chunks follow their path one hop a step, and a link carries at
most its flow, so the same argument gives the same R / C. Scatter is the gather on the
reversed links, run backwards (transform.mirror_schedule).
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from synth.construct.batches import MAX_BATCH_MOVES
from synth.construct.grid_trees import grid_points, grid_trees, on_grid
from synth.construct.packing import (MAX_UNITS, Packing, Paths, Tree, pack_paths,
                                     pack_trees)
from synth.construct.pipelines import DEPTHS, add_pipelines, levels, pipelined
from synth.construct.splitting import allreduce_split
from synth.construct.symmetric import box_symmetry, pack_symmetric
from synth.deadline import Deadline, OutOfTime
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send
from synth.schedule.orbits import box_grid, last_made
from synth.schedule.transform import (mirror_schedule, reverse_model, reverse_schedule,
                                      same_both_ways)
from synth.search.pareto import Limits, Point, Search
from synth.topology.linkmodel import LinkModel

COLLECTIVES = ("allgather", "reducescatter", "broadcast", "reduce", "allreduce", "gather",
               "scatter")
MAX_RANKS = 64  # past this, packing takes minutes (a broadcast on torus:8x8 about 30 s):
# trees only where boxes alike give a symmetry to pack under (synth.construct.symmetric)
ALLREDUCE_ROOTS = 8  # allreduce tries every root up to this many ranks (else rank 0)


def _ranges(packing: Packing, root: int) -> list[tuple[int, Tree]]:
    """The trees of `root`, each with the first of the chunks (of its root's k) it
    carries: tree i carries weight_i chunks from there."""
    out, first = [], 0
    for tree in packing.trees:
        if tree.root == root:
            out.append((first, tree))
            first += tree.weight
    return out


def _down(tree: Tree, chunk: int, count: int, op: str = "copy") -> list[tuple[int, Send]]:
    """Chunks chunk .. chunk + count - 1 down `tree`: (level, send) for every edge."""
    return [(tree.depth(v), Send(chunk, u, v, op, count)) for v, u in tree.parent.items()]


def broadcast_schedule(model: LinkModel, packing: Packing, batches: int) -> Schedule:
    """Each batch's k chunks down the trees (tree i its weight's range of them), one
    level per step; `batches` batches, batch b starting at step b (a version 2
    pipeline)."""
    root, k = packing.roots[0], packing.per_root
    coll = make_collective("broadcast", model.ranks, k * batches, root)
    program = levels([s for first, tree in _ranges(packing, root)
                      for s in _down(tree, first, tree.weight)])
    return pipelined(model, coll, program, k, batches, packing.info(batches))


def allgather_schedule(model: LinkModel, packing: Packing, batches: int) -> Schedule:
    """Every rank's k chunks of a batch down its own trees; pipelined like broadcast
    (the stride k moves each batch to the next k chunks of every rank's share)."""
    k = packing.per_root
    coll = make_collective("allgather", model.ranks, k * batches)
    program = levels([s for r in packing.roots for first, tree in _ranges(packing, r)
                      for s in _down(tree, r * coll.chunks + first, tree.weight)])
    return pipelined(model, coll, program, k, batches, packing.info(batches))


def gather_schedule(model: LinkModel, paths: Paths, batches: int) -> Schedule:
    """Every source's k chunks of a batch along its paths to the sink, one hop a step
    (a path of u units carries u of them); pipelined like allgather."""
    k = paths.per_source
    coll = make_collective("gather", model.ranks, k * batches, paths.sink)
    first: dict[int, int] = {}
    hops = []
    for source, path, units in paths.paths:
        chunk = source * coll.chunks + first.get(source, 0)
        first[source] = first.get(source, 0) + units
        hops += [(level, Send(chunk, a, b, "copy", units))
                 for level, (a, b) in enumerate(zip(path, path[1:]), start=1)]
    info = {"method": f"paths, {_per_gpu(k)}, {len(paths.paths)} paths"
            + (f", {batches} batches" if batches > 1 else ""), "paths": len(paths.paths)}
    return pipelined(model, coll, levels(hops), k, batches, info)


def allreduce_schedule(model: LinkModel, up: Packing, down: Packing, batches: int
                       ) -> Schedule:
    """Reduce then broadcast, per root: chunk j of root r is summed up the `up` tree of
    r that carries it (packed on the reversed links, so its edges run child to parent
    here), deepest level first, then copied down its `down` tree. One root: reduce +
    broadcast trees; every rank a root: reducescatter + allgather trees, root r owning
    chunks r k P + j k .. + k - 1 of batch j (P batches, stride k). Pipelined, one
    batch's reduction overlaps an earlier batch's copies."""
    # the two packings count trees in lanes of their own: compare them in common ones
    scale = math.lcm(up.lanes_per_capacity, down.lanes_per_capacity)
    if max(p.per_root * scale // p.lanes_per_capacity for p in (up, down)) <= MAX_UNITS:
        up, down = _at_scale(up, scale), _at_scale(down, scale)
    k = min(up.per_root, down.per_root)
    gather, spread = [], []
    for position, root in enumerate(down.roots):
        ups, downs = _ranges(up, root), _ranges(down, root)
        cuts = sorted({0, k} | {f for f, _ in ups + downs if f < k})
        for a, b in zip(cuts, cuts[1:]):
            # root p's chunks of batch j are p k P + j k .. + k - 1 (stride k): a root's
            # chunks are one block, which moves with it where boxes alike shift
            first = position * k * batches + a
            gather += [(level, Send(x.chunk, x.dst, x.src, "reduce", x.count))
                       for level, x in _down(_tree_at(ups, a), first, b - a)]
            spread += _down(_tree_at(downs, a), first, b - a)
    coll = make_collective("allreduce", model.ranks, k * len(down.roots) * batches)
    what = "reduce + broadcast trees" if len(down.roots) == 1 else \
        "reducescatter + allgather trees"
    return pipelined(model, coll, list(reversed(levels(gather))) + levels(spread),
                     k, batches, down.info(batches, what))


def _at_scale(packing: Packing, scale: int) -> Packing:
    """The same trees counted in `scale` lanes per unit of capacity (a multiple of the
    packing's): every weight, and so every root's count, times the factor."""
    factor = scale // packing.lanes_per_capacity
    return replace(packing, lanes_per_capacity=scale, per_root=packing.per_root * factor,
                   trees=tuple(replace(t, weight=t.weight * factor) for t in packing.trees))


def _tree_at(ranges: list[tuple[int, Tree]], chunk: int) -> Tree:
    """The tree whose range holds `chunk`."""
    return next(t for f, t in reversed(ranges) if f <= chunk)


def tree_search_again(first: Search, model: LinkModel, name: str, root: int | None,
                      limits: Limits, deadline: Deadline, bound: Fraction | None = None,
                      translations: tuple[int, ...] = ()) -> Search:
    """The packing again, by `deadline`, where the first try's share ran out before it
    built any point: the searches after it may have ended early (the exact search stops
    once an instance finds nothing in its budget), leaving time that share did not have.
    `first` where nothing better comes of it."""
    if first.stopped != "out of time" or first.points or deadline.passed():
        return first
    again = tree_search(model, name, root, limits, deadline, bound, translations)
    return again if again.points or again.stopped == "interrupted" else first


def tree_search(model: LinkModel, name: str, root: int | None, limits: Limits,
                deadline: Deadline | float | None = None, bound: Fraction | None = None,
                translations: tuple[int, ...] = ()) -> Search:
    """`name` by packed trees, at every pipeline depth in DEPTHS within the step limits,
    each verified. None is `proven` (a construction proves nothing); the search is
    complete unless the deadline cut it short. `bound` (rounds per chunk), when given,
    lets the packing stop trying splits once one reaches it. `translations`: the
    topology's grid (Topology.translations), packed under where its shifts are
    symmetries (synth.construct.grid_trees)."""
    search = Search()
    if name not in COLLECTIVES:
        search.stopped = f"{name} is not built from trees (only {', '.join(COLLECTIVES)})"
        return search
    deadline = Deadline.of(deadline)
    if deadline.passed():  # not even the symmetry is looked for (a second at 1024 GPUs)
        search.stopped, search.complete = "out of time", False
        return search
    roots = [root] if name in ("broadcast", "reduce") else list(range(model.ranks))
    # sends of a batch (of each phase, allreduce): a tree per root at least; past the cap
    # the program alone took gigabytes (dgxh100x512 allgather: 18 GB, then out of time).
    # Counted first: it is arithmetic, and the boxes' symmetry is looked for after it.
    # Gather and scatter are paths into one root, not a tree per rank: not counted so
    least = len(roots) * (model.ranks - 1)
    per_rank = name not in ("gather", "scatter") and not on_grid(model, name, translations)
    if per_rank and least > MAX_BATCH_MOVES:
        search.stopped = (f"not packed: a batch of at least {least:,} sends, over the "
                          f"{MAX_BATCH_MOVES:,} a build can hold in memory")
        return search
    if per_rank and model.ranks > MAX_RANKS and box_symmetry(model, roots) is None:
        search.stopped = (f"not packed: {model.ranks} ranks (at most {MAX_RANKS} unless "
                          "the boxes are alike or a grid's shifts map it onto itself)")
        return search
    try:
        return _tree_points(model, name, root, limits, deadline, search, bound,
                            translations)
    except OutOfTime:
        search.stopped, search.complete = "out of time", False
        return search
    except KeyboardInterrupt:  # Ctrl-C keeps the points built so far
        search.stopped, search.complete = "interrupted", False
        return search


def _tree_points(model, name, root, limits, deadline, search, bound, translations
                 ) -> Search:
    if model.ranks > MAX_RANKS and on_grid(model, name, translations):
        # written for rank 0 alone; up to 64 GPUs spelled out, as the runtimes read them
        return grid_points(model, name, limits, deadline, search, bound, translations)
    if name == "allreduce":
        return _allreduce_points(model, limits, deadline, search, bound, translations)
    if name in ("gather", "scatter"):
        return _path_points(model, name, root, limits, deadline, search, bound)
    reversed_ = name in ("reduce", "reducescatter")
    packed_on = reverse_model(model) if reversed_ else model
    roots = [root] if name in ("broadcast", "reduce") else list(range(model.ranks))
    packing = _pack(packed_on, roots, deadline, bound and 1 / bound, translations)
    if packing is None:
        search.stopped = "some rank cannot be reached"
        return search
    build_one = broadcast_schedule if len(roots) == 1 else allgather_schedule

    def build(batches):
        schedule = build_one(packed_on, packing, batches)
        return reverse_schedule(schedule, model) if reversed_ else schedule

    add_pipelines(search, build, limits, deadline, edges=_edges(packing),
                  orbits=_box_shifts(model), bound=bound)
    search.stopped = search.stopped or packing.counted
    return search


def _path_points(model, name, root, limits, deadline, search, bound) -> Search:
    """Gather by a maximum flow to the root, decomposed into paths; scatter is the
    gather on the reversed links, run backwards."""
    packed_on = reverse_model(model) if name == "scatter" else model
    sources = [r for r in range(model.ranks) if r != root]
    paths = pack_paths(packed_on, sources, root, deadline, bound and 1 / bound)
    if paths is None:
        search.stopped = "some rank cannot be reached"
        return search

    def build(batches):
        schedule = gather_schedule(packed_on, paths, batches)
        return mirror_schedule(schedule, model) if name == "scatter" else schedule

    add_pipelines(search, build, limits, deadline)
    search.stopped = search.stopped or (f"{_per_gpu(paths.per_source)} along "
                                        f"{len(paths.paths)} paths")
    return search


def _per_gpu(k: int) -> str:
    return f"{k} chunk{'s' * (k != 1)} per GPU"


def _allreduce_points(model, limits, deadline, search, bound, translations) -> Search:
    """Reducescatter + allgather trees (every rank a root), one packing used both ways;
    unless that reaches the bound in the steady state, the same on links split between
    the two phases (splitting.allreduce_split), and then, if still short, reduce +
    broadcast trees through the root whose deepest
    pipeline has the least R/C (then the fewest steps; every rank is tried up to
    ALLREDUCE_ROOTS ranks, else rank 0 only): they win where one root's trees are
    shallow and the two phases avoid each other's links (a line through its middle)."""
    reverse = reverse_model(model)
    everyone = list(range(model.ranks))
    # where the allreduce bound is twice the allgather's per share (every built-in),
    # one packing at 2 / (N bound) per root per round, used both ways, reaches it
    target = bound and 2 / (model.ranks * bound)
    down = _pack(model, everyone, deadline, target, translations)
    # a network the same both ways (every link and group mirrored) packs the same trees
    # reversed: no second packing
    deadline.check("packing trees")
    mirrored = same_both_ways(model)
    up = down if mirrored else _pack(reverse, everyone, deadline, target, translations)
    if up is None or down is None:
        search.stopped = "some rank cannot be reached"
        return search
    add_pipelines(search, lambda batches: allreduce_schedule(model, up, down, batches),
                  limits, deadline, edges=_edges(up) + _edges(down),
                  orbits=_box_shifts(model), bound=bound)
    described = f"{down.counted} each way"
    at_bound = bound is not None and any(p.ratio <= bound for p in search.points)
    steady = bound if at_bound else _steady(search.points)
    if steady != bound and model.ranks <= MAX_RANKS and not deadline.passed():
        # one packing used both ways can overload a link with the two phases (mesh:4x4
        # 1.3 x the bound): split the links between them first, where that promises more
        split_down, split_up, rate = allreduce_split(model, deadline)
        phase = bound and 1 / (model.ranks * bound)  # each phase's rate at the bound
        promising = steady is None or rate > 1.001 / (model.ranks * steady)
        down2 = promising and pack_trees(split_down, everyone, deadline, phase)
        up2 = promising and pack_trees(split_up, everyone, deadline, phase)
        if down2 and up2:
            add_pipelines(search, lambda batches: allreduce_schedule(model, up2, down2,
                                                                     batches),
                          limits, deadline, edges=_edges(up2) + _edges(down2))
            described += f"; on links split between the phases, {down2.counted} and " \
                f"{up2.counted}"
    roots = range(model.ranks if model.ranks <= ALLREDUCE_ROOTS else 1)
    if at_bound or bound is not None and _steady(search.points) == bound or \
            model.ranks > MAX_RANKS:
        roots = range(0)
    best, tried = None, 0
    for root in roots:
        if deadline.passed():
            break
        try:
            one = (pack_trees(model, [root], deadline),)
            one += one if mirrored else (pack_trees(reverse, [root], deadline),)
        except OutOfTime:
            break
        tried += 1
        # judged by what the deepest pipeline costs: where the two phases share a link
        # direction, its steps take 2 rounds, which neither tree count nor depth shows
        deepest = allreduce_schedule(model, one[1], one[0], DEPTHS[-1])
        key = (Fraction(deepest.rounds, deepest.collective.chunks), deepest.num_steps)
        if best is None or key < best[0]:
            best = (key, one)
    if best is not None:
        down1, up1 = best[1]
        add_pipelines(search, lambda batches: allreduce_schedule(model, up1, down1,
                                                                 batches),
                      limits, deadline, edges=_edges(up1) + _edges(down1))
        described += f"; through root {up1.roots[0]}, {down1.counted}"
    if tried < len(roots):
        search.stopped = f"out of time: {tried} of {len(roots)} roots tried"
        search.complete = False
    search.stopped = search.stopped or described
    return search


def _pack(model: LinkModel, roots: list[int], deadline, target: Fraction | None,
          translations: tuple[int, ...] = ()) -> Packing | None:
    """Under a grid's shifts where they are symmetries and give whole trees at `target`
    (grid_trees: balanced ones, or the program's over rank 0's trees: torus:8x8 in a
    second, where pack_trees's max-flows take about 20), else pack_trees, or past MAX_RANKS the packing that the symmetry of alike
    boxes makes small (synth.construct.symmetric)."""
    packing = grid_trees(model, roots, translations, deadline, target, spelled_out=True)
    if packing is not None:
        return packing
    if model.ranks > MAX_RANKS:
        return pack_symmetric(model, roots, deadline, target)
    return pack_trees(model, roots, deadline, target)


def _steady(points: list[Point]) -> Fraction | None:
    """The least steady_rounds_per_chunk of the deepest pipelines among `points`."""
    deepest = max((p.schedule.batches for p in points), default=None)
    steady = [s for p in points if p.schedule.batches == deepest
              and (s := steady_rounds_per_chunk(p.schedule)) is not None]
    return min(steady, default=None)


def _edges(packing: Packing) -> int:
    """The trees' edges, each tree counted as often as it is taken."""
    return sum(t.weight * len(t.parent) for t in packing.trees)


def steady_rounds_per_chunk(schedule: Schedule) -> Fraction | None:
    """Rounds per chunk of a pipeline step with every level busy (the rate the trees
    reach, without the fill); a schedule of one step with no pipeline has R / C; None
    when no step has every level busy."""
    pipe, depth = schedule.pipeline, len(schedule.steps)
    if pipe is None:
        return Fraction(schedule.rounds, schedule.collective.chunks) if depth == 1 else None
    if pipe.batches < depth:
        return None
    # a batch is a P-th of the chunks (C / P of them), whatever its stride
    return Fraction(pipe.rounds[depth - 1] * pipe.batches, schedule.collective.chunks)


def _box_shifts(model: LinkModel):
    """Past MAX_RANKS, the shifts of alike boxes (synth.schedule.orbits.box_grid) under
    which the packing is symmetric (pack_symmetric): its schedules are written once per
    orbit (version 4), a K-th of the sends (a 512-GPU allreduce's file was 56 MB). None
    below, or where the boxes are not alike. Made once per machine."""
    if model.ranks <= MAX_RANKS or not model.boxes:
        return None
    return last_made(_BOX_SHIFTS, "boxes", (model,),
                     lambda: box_grid(model, len(set(model.boxes))))


_BOX_SHIFTS: dict = {}
