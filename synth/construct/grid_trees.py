"""Trees on a grid (a torus, a ring, a hypercube): packed under its shifts, written once.

A generator's grid shifts (synth.topology.symmetry) act regularly on the ranks: one
maps rank 0 onto each rank. So the trees of rank 0 and their images are a packing with
every rank a root, and every packing averages to one such; the program over rank 0's
trees (synth.construct.symmetric) reaches the best rate. Each tree found joins with its
images under the maps that fix rank 0 (u to -u, and the turns of axes of one size),
since whole weights at the rate need them: on torus:8x8 a tree and its three turns
load the four directions alike, 4 trees per root in 63 lanes.

The allgather down those trees is a schedule the shifts map onto itself, so it is
written once per orbit (version 4, synth.schedule.orbits): the sends into rank 0. Root
r's tree is rank 0's moved by r, so its edge into 0 is the move by r of rank 0's tree's
edge into -r: the representative's sends come from rank 0's trees alone, O(N x trees),
where spelling every rank out costs N times more (torus:16x16: 261,120 sends a batch,
against 1,020). Reducescatter is the same on the reversed links, run backwards;
allreduce is reducescatter then allgather (synth.schedule.transform.compose_allreduce).

Cost: the N x N table of shifts and O(N x links) to name the links' orbits (capped by
MAX_GRID_WORK), the packing; then O(N x trees x depth) per schedule. Up to MAX_GRID
ranks, and only where whole weights reach the bound (grid_packing).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np

from synth.construct.balanced_trees import balanced_trees
from synth.construct.packing import Packing
from synth.construct.pipelines import DEPTHS, add_pipelines, levels, pipelined
from synth.construct.symmetric import (Symmetry, maps_onto_itself, network_of,
                                       pack_symmetric)
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send
from synth.schedule.orbits import Orbits, orbits_of
from synth.schedule.transform import (compose_allreduce, reverse_model, reverse_schedule,
                                      same_both_ways)
from synth.search.pareto import Search
from synth.topology.linkmodel import LinkModel
from synth.topology.symmetry import Translations, translations_of

MAX_GRID = 1024  # ranks: the table of shifts is N x N
# shifts x links: the program names each link's orbit over every shift (fc:512's 134
# million would take gigabytes; torus:32x32's 4 million, hypercube:10's 10, fc:256's 17)
MAX_GRID_WORK = 1 << 24


def _packable(model: LinkModel, dims: tuple[int, ...]) -> bool:
    """Whether a grid's shifts map `model` onto itself, within MAX_GRID and
    MAX_GRID_WORK."""
    return model.ranks <= MAX_GRID and model.ranks * len(model.links) <= MAX_GRID_WORK \
        and translations_of(model, dims) is not None


def grid_symmetry(model: LinkModel, roots: list[int], dims: tuple[int, ...],
                  spelled_out: bool = True) -> Symmetry | None:
    """Every rank a root: a generator's grid shifts (synth.topology.symmetry), where they
    map `model` onto itself. They act regularly, so rank 0's trees and their images are
    a packing, and every packing averages to one such: the program reaches the best
    rate. None for one root or no such symmetry. O(N^2): the table of images.
    `spelled_out`: the packing lists every root's trees (else rank 0's alone)."""
    if len(roots) != model.ranks or not _packable(model, dims):
        return None
    grid = Translations(tuple(dims))
    table = grid.table()  # table[u, v]: u moved by v
    return Symmetry(tuple(table[:, v] for v in range(model.ranks)), (0,), False,
                    _fixing_zero(model, grid), spelled_out)


def _fixing_zero(model: LinkModel, grid: Translations) -> tuple[np.ndarray, ...]:
    """The maps u -> -u and the turns of equal-sized axes that are symmetries of `model`,
    and the group they make, the identity left out (at most 2 x axes maps). On a square
    torus a tree and its three images load the four directions alike."""
    dims = np.array(grid.dims)
    weights = np.cumprod(np.r_[dims[1:], 1][::-1])[::-1]
    coords = np.array([grid.coordinates(r) for r in range(model.ranks)])
    candidates = [-coords]
    for size in sorted(set(grid.dims)):
        axes = [i for i, d in enumerate(grid.dims) if d == size]
        if len(axes) > 1:
            turned = coords.copy()
            turned[:, axes] = coords[:, axes[1:] + axes[:1]]
            candidates.append(turned)
    links, groups = network_of(model)
    makers = [m for c in candidates
              if maps_onto_itself(m := (c % dims) @ weights, links, groups)]
    group = new = {tuple(range(model.ranks))}
    while new:  # the closure: products of the makers
        new = {n for g in new for m in makers
               if (n := tuple(m[list(g)].tolist())) not in group}
        group = group | new
    return tuple(np.array(g) for g in sorted(group) if g != tuple(range(model.ranks)))


def grid_allgather(model: LinkModel, packing: Packing, orbits: Orbits, batches: int
                   ) -> Schedule:
    """The allgather down rank 0's trees (`packing`, not spelled out) moved to every
    root, pipelined over `batches` like tree_schedules.allgather_schedule, written once
    per orbit of `orbits` (the grid's shifts): the sends into rank 0 (module
    docstring), each step priced on the orbits' quotient (the whole step's rounds)."""
    k, n = packing.per_root, model.ranks
    coll = make_collective("allgather", n, k * batches)
    sends, first = [], 0
    for tree in packing.trees:  # tree i carries its weight's chunks from `first` on
        for r in range(1, n):
            x = orbits.back(0, r)  # -r: its edge, moved by r, is root r's edge into 0
            sends.append((tree.depth(x), Send(r * coll.chunks + first,
                                         orbits.move(tree.parent[x], r), 0, "copy",
                                         tree.weight)))
        first += tree.weight
    info = replace(packing, roots=tuple(range(n))).info(batches)  # every rank a root
    schedule = pipelined(model, coll, levels(sends), k, batches, info,
                         priced_on=orbits.quotient(model))
    return replace(schedule, symmetry=orbits)


def grid_packing(model: LinkModel, dims: tuple[int, ...], deadline, target: Fraction | None
                 ) -> tuple[Packing, Orbits] | None:
    """Rank 0's trees packed under the grid's shifts, and the orbits its schedules are
    written in: its balanced shortest-path trees (synth.construct.balanced_trees) where
    they reach `target`, else the program's; None where the shifts are no symmetry, the
    grid is past MAX_GRID, or no whole weights reach `target` (the rest round to a
    thousand trees a root whose chunks no runtime would cut that fine: torus:8x16 with
    its rows at twice the capacity)."""
    orbits = orbits_of(model, tuple(dims), tuple(range(len(dims))))
    packing = orbits and grid_trees(model, list(range(model.ranks)), dims, deadline, target,
                                    spelled_out=False)
    return (packing, orbits) if packing else None


def grid_trees(model: LinkModel, roots: list[int], dims: tuple[int, ...], deadline,
               target: Fraction | None, spelled_out: bool) -> Packing | None:
    """Trees under the grid's shifts at exactly `target`: the balanced shortest-path
    trees (synth.construct.balanced_trees), else the program's; None where the shifts
    are no symmetry (grid_symmetry) or neither reaches it. `spelled_out`: every root's
    trees, else rank 0's alone."""
    found = grid_symmetry(model, roots, dims, spelled_out)
    if found is None:
        return None
    packing = balanced_trees(model, dims, spelled_out)
    if packing is None or not packing.reaches(target):
        packing = pack_symmetric(model, roots, deadline, target, found)
    return packing if packing is not None and packing.reaches(target) else None


def grid_schedule(model: LinkModel, name: str, packed: tuple[Packing, Orbits],
                  batches: int) -> Schedule:
    """`name` (allgather; reducescatter, packed on the reversed links) down the grid's
    trees, written once per orbit."""
    packing, orbits = packed
    if name == "allgather":
        return grid_allgather(model, packing, orbits, batches)
    return reverse_schedule(grid_allgather(reverse_model(model), packing, orbits, batches),
                            model)


def on_grid(model: LinkModel, name: str, translations: tuple[int, ...]) -> bool:
    """Whether `name` is packed under a grid's shifts (synth.construct.grid_trees)."""
    return name in ("allgather", "reducescatter", "allreduce") and \
        _packable(model, translations)


def grid_points(model, name, limits, deadline, search, bound, translations) -> Search:
    """Allgather and reducescatter down trees packed under the grid's shifts, written
    once per orbit; allreduce as one batch of each, composed, where the links are the
    same both ways (its bound is twice theirs a share: 2 / (N bound) trees per root
    per round). Beside the trees at the bound, one balanced tree a root (one batch):
    a rank then receives N - 1 sends, not k (N - 1), which the runtimes' limits on a
    thread block hold where k's do not (torus:16x32: MSCCL++ loads it, 1.0098 x the
    bound in the same 24 steps)."""
    if name == "allreduce" and not same_both_ways(model):
        search.stopped = "not packed: the links differ from the reversed ones"
        return search
    target = bound and (2 / (model.ranks * bound) if name == "allreduce" else 1 / bound)
    packed_on = reverse_model(model) if name == "reducescatter" else model
    packed = grid_packing(packed_on, translations, deadline, target)
    if packed is None:
        search.stopped = "not packed: no whole trees at the bound under the grid's shifts"
        return search
    one = packed[0].per_root > 1 and balanced_trees(packed_on, translations, per_root=1)
    _grid_pipelines(model, name, packed, limits, deadline, search, bound, DEPTHS)
    if one:  # one batch: deeper ones only add steps to what the trees above pipeline
        _grid_pipelines(model, name, (one, packed[1]), limits, deadline, search, None, (1,))
    search.stopped = search.stopped or f"{packed[0].counted} under the shifts" + \
        (", and 1 tree a root" if one else "")
    return search


def _grid_pipelines(model, name, packed, limits, deadline, search, bound, depths) -> None:
    """grid_points' schedules down one packing, into `search` (allgather and
    reducescatter at `depths`)."""
    if name == "allreduce":
        def composed(_):
            both = compose_allreduce(grid_schedule(model, "reducescatter", packed, 1),
                                     grid_schedule(model, "allgather", packed, 1))
            every = replace(packed[0], roots=tuple(range(model.ranks)))
            return replace(both, info=every.info(1, "reducescatter + allgather trees"))
        add_pipelines(search, composed, limits, deadline, depths=(1,))
    else:
        add_pipelines(search, lambda batches: grid_schedule(model, name, packed, batches),
                      limits, deadline, edges=model.ranks * packed[0].per_root,
                      depths=depths, bound=bound)
