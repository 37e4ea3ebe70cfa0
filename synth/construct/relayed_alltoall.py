"""Alltoall across boxes in two steps: gather at the rail peer, then one network hop.

On a multi-node topology a GPU often reaches only its rail peers in other boxes (the
GPU at the same place: dgxh100xK, dgxa100xK), so the direct alltoall does not apply,
and where it does, every GPU opens a connection to every other. The relayed alltoall
(NCCL's PXN): the piece rank (b, i) has for rank (b', j) in another box first goes,
inside box b, to (b, j), the rank of box b on j's rail; then over the network to
(b', j). Pieces for the own box go straight there in the first step; a rank already on
the destination's rail sends over the network in the second. Every GPU then talks to
the other boxes only through its own NIC or rail, and each rail carries, per pair of
boxes, exactly the pieces between them.

One batch (one piece per ordered pair) is the two steps; P batches are pipelined
(batch b's pieces are the (b+1)-th of every pair, starting at step b), so the network
step of one batch overlaps the box step of the next: R / C = (r1 + (P - 1) r12 + r2) /
P, with r1 and r2 the two steps' rounds and r12 those of both at once (their larger
where they use different links). On rail fabrics with one GPU per NIC (dgxh100xK,
dgxa100xK) the network step alone is at the max-concurrent-flow bound (every NIC sends
and receives (K - 1) x GPUs-per-box pieces a batch, the least a box's traffic to the
others can take), so deep pipelines approach the bound; where GPUs share a NIC on rails
it carries their pieces together and may not.

A topology file's boxes are those the decomposition finds (synth.topology.hierarchy),
ranks at the same place in their boxes being rail peers.

Cost: up to 2 N (N - 1) sends a batch (a piece between boxes off its source's rail
takes two): about half a million at 512 GPUs; each pipeline is built and verified
whole, which takes about 170 bytes a chunk (N^2 chunks a batch): so the depth stops at
MAX_CHUNKS chunks.
"""

from __future__ import annotations

from synth.construct.packing import past
from synth.construct.tree_schedules import DEPTHS, add_pipelines, pipelined
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send
from synth.search.pareto import Limits, Search
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel, box_places


MAX_CHUNKS = 1 << 23  # N^2 x batches: past it, verifying takes gigabytes (~170 B a chunk)


def relayed_alltoall(model: LinkModel, batches: int) -> Schedule | str:
    """The two-step relayed alltoall in `batches` pipelined batches, or why it does not
    apply (one box, boxes of different sizes, or a link it needs is missing)."""
    labels = model.boxes
    if not labels:  # a file's cluster: the boxes the decomposition would find
        found, _ = find_boxes(model)
        labels = [b for r in range(model.ranks) for b, ranks in enumerate(found) if r in ranks]
    if len(set(labels)) < 2:
        return "one box: nothing to relay"
    box, place, alike_sizes = box_places(labels)
    if not alike_sizes:
        return "boxes of different sizes"
    at = {(b, p): r for r, (b, p) in enumerate(zip(box, place))}
    n = model.ranks
    coll = make_collective("alltoall", n, batches)
    first, second = [], []
    for s in range(n):
        for d in range(n):
            if s == d:
                continue
            chunk = (s * n + d) * batches  # piece 0 of the pair; batch b takes piece b
            relay = at[(box[s], place[d])]
            if box[s] == box[d] or relay == d:
                first.append(Send(chunk, s, d, "copy"))
            elif relay == s:
                second.append(Send(chunk, s, d, "copy"))
            else:
                first.append(Send(chunk, s, relay, "copy"))
                second.append(Send(chunk, relay, d, "copy"))
    missing = next(((x.src, x.dst) for x in first + second if (x.src, x.dst) not in model.link),
                   None)
    if missing:
        return f"no link {missing[0]}->{missing[1]}"
    info = {"method": "relayed at rail peers" + (f", {batches} batches" if batches > 1
                                                 else "")}
    return pipelined(model, coll, [tuple(first), tuple(second)], 1, batches, info)


def relayed_search(model: LinkModel, limits: Limits, deadline: float | None = None
                   ) -> Search:
    """The relayed alltoall at every pipeline depth (tree_schedules.DEPTHS) within the
    step limits and MAX_CHUNKS chunks (at 512 GPUs, 32 batches),
    each verified; `stopped` says why none applies."""
    search = Search()
    why = relayed_alltoall(model, 1)
    if isinstance(why, str):
        search.stopped = f"not relayed: {why}"
        return search
    if past(deadline):
        search.stopped, search.complete = "out of time", False
        return search
    depths = [d for d in DEPTHS if model.ranks ** 2 * d <= MAX_CHUNKS] or [1]
    add_pipelines(search, lambda batches: relayed_alltoall(model, batches), limits, deadline,
                  depths)
    search.stopped = search.stopped or "relayed at rail peers, 2 steps a batch"
    return search
