"""Hierarchical: inside the boxes, then across them, then inside again.

Boxes come from synth.topology.hierarchy.find_boxes (the components left when the
slowest links are dropped). Local rank i of every box forms the peer group of shard i.
Inside a box, and within a peer group, data moves directly when every pair is linked,
else around a ring (a Hamiltonian cycle of that subset), else the baseline does not
apply.

  allreduce:     reducescatter in each box (shard i to local rank i), allreduce of each
                 shard among its peers (2 boxes: one swap-and-add step; more: a
                 reducescatter + allgather among the peers), allgather in each box.
  allgather:     allgather among peers, then allgather in each box of all it received.
  reducescatter: reducescatter in each box (to the local rank of the owners' peer
                 group), then reducescatter among peers.
  broadcast:     root to its peers, then each of them to its box. reduce: the reverse.
"""

from __future__ import annotations

from synth.construct.baselines.baseline import Baseline
from synth.construct.baselines.graphs import all_linked, hamiltonian_cycle
from synth.construct.moves import (assemble_widest, chain_broadcast, chain_reduce,
                                   direct_allgather, direct_allreduce, direct_broadcast,
                                   direct_reduce, direct_reducescatter, exchange_allreduce,
                                   in_parallel, in_sequence, ring_allgather, ring_allreduce,
                                   ring_reducescatter)
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel

NAME = "hierarchical"
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def hierarchical_baseline(model: LinkModel, collective: str, root: int | None
                          ) -> Baseline | str:
    """The hierarchical algorithm for `collective`, or why it does not apply.
    C = 1 (N x 1 global chunks for allgather / reducescatter), local-ranks x (1 or boxes)
    for allreduce, times lanes."""
    if collective not in COLLECTIVES:
        return f"no hierarchical algorithm for {collective}"
    boxes, why = find_boxes(model)
    if not boxes:
        return why
    g = len(boxes[0])
    peers = [[box[i] for box in boxes] for i in range(g)]
    inside = [_method(model, box) for box in boxes]
    across = [_method(model, group) for group in peers]
    if None in inside:
        return f"box {inside.index(None)} is neither fully linked nor has a ring in it"
    if None in across:
        i = across.index(None)
        return f"local ranks {i} of the boxes ({peers[i]}) are neither fully linked nor on a ring"
    local = {r: i for box in boxes for i, r in enumerate(box)}

    if collective == "allreduce":
        pieces = 1 if len(boxes) == 2 and across[0][0] == "direct" else len(boxes)
        shard = {i: list(range(i * pieces, (i + 1) * pieces)) for i in range(g)}
        owned = [{box[i]: shard[i] for i in range(g)} for box in boxes]
        moves = in_sequence(
            in_parallel(*(_reducescatter(m, o) for m, o in zip(inside, owned))),
            in_parallel(*(_allreduce(m, shard[i]) for i, m in enumerate(across))),
            in_parallel(*(_allgather(m, o) for m, o in zip(inside, owned))))
        chunks = g * pieces
    elif collective in ("allgather", "reducescatter"):
        # chunk r (C = 1) belongs to rank r; a box's local rank i gathers its peers' chunks
        among = [{r: [r] for r in group} for group in peers]
        per_box = [{box[i]: peers[i] for i in range(g)} for box in boxes]
        if collective == "allgather":
            moves = in_sequence(
                in_parallel(*(_allgather(m, o) for m, o in zip(across, among))),
                in_parallel(*(_allgather(m, o) for m, o in zip(inside, per_box))))
        else:
            moves = in_sequence(
                in_parallel(*(_reducescatter(m, o) for m, o in zip(inside, per_box))),
                in_parallel(*(_reducescatter(m, o) for m, o in zip(across, among))))
        chunks = 1
    else:
        i0 = local[root]
        heads = across[i0]
        if collective == "broadcast":
            moves = in_sequence(_broadcast(heads, root, [0]),
                                in_parallel(*(_broadcast(m, box[i0], [0])
                                              for m, box in zip(inside, boxes))))
        else:
            moves = in_sequence(in_parallel(*(_reduce(m, box[i0], [0])
                                              for m, box in zip(inside, boxes))),
                                _reduce(heads, root, [0]))
        chunks = 1
    info = {"algorithm": NAME, "boxes": boxes,
            "inside": inside[0][0], "across": across[0][0]}
    schedule = assemble_widest(model, collective, chunks, root, moves, info)
    return Baseline(NAME, schedule, NAME)


def _method(model: LinkModel, ranks):
    """("direct", ranks) when every pair is linked, ("ring", cycle) when a Hamiltonian
    cycle of the subset is found (bounded search), else None."""
    if all_linked(model, ranks):
        return ("direct", list(ranks))
    inside = set(ranks)
    succ = {r: [d for d in model.out_neighbours(r) if d in inside] for r in ranks}
    cycle = hamiltonian_cycle(ranks, succ)
    return ("ring", list(cycle)) if cycle else None


def _allgather(method, owned):
    kind, ranks = method
    return direct_allgather(ranks, owned) if kind == "direct" else ring_allgather(ranks, owned)


def _reducescatter(method, owned):
    kind, ranks = method
    return (direct_reducescatter(ranks, owned) if kind == "direct"
            else ring_reducescatter(ranks, owned))


def _allreduce(method, chunks):
    kind, ranks = method
    if kind == "direct":
        return exchange_allreduce(ranks, chunks) if len(ranks) == 2 else \
            direct_allreduce(ranks, chunks)
    return ring_allreduce(ranks, chunks)


def _broadcast(method, source, chunks):
    kind, ranks = method
    if kind == "direct":
        return direct_broadcast(source, ranks, chunks)
    at = ranks.index(source)
    return chain_broadcast(ranks[at:] + ranks[:at], chunks)


def _reduce(method, target, chunks):
    kind, ranks = method
    if kind == "direct":
        return direct_reduce(target, ranks, chunks)
    at = ranks.index(target)
    return chain_reduce(ranks[at + 1:] + ranks[:at + 1], chunks)
