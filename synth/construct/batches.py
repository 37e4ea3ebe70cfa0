"""One batch of a decomposed collective, as moves (synth.construct.moves): its levels'
schedules embedded on the global ranks and chunks, across the boxes then inside them
(synth.construct.decompose's module docstring), and its size by arithmetic, before any
move is listed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from synth.construct.moves import Moves, in_parallel, in_sequence
from synth.deadline import Deadline
from synth.schedule.ir import Schedule
from synth.topology.hierarchy import Hierarchy

# moves of one batch, at most, that a design may list to be priced or built, counted
# before any is listed: each takes about 125 bytes at the peak of building and verifying
# it (dgxh100x16 allreduce: 585,216 moves, 73 MB), so about 1 GB
MAX_BATCH_MOVES = 8_000_000


@dataclass(frozen=True)
class Levels:
    """An allgather per level, each on the level's own ranks: across 0..K-1 (box order),
    inside 0..g-1 (local order)."""

    across: Schedule
    inside: Schedule


def _embed(steps, ranks, chunk_of, at: tuple[int, int] | None = None) -> Moves:
    """The level's `steps` (sending_steps: an empty one would be priced a round) on
    global ranks (level rank j is ranks[j]) and chunks. With `at` = (end, j), only the
    moves whose source (end 0) or destination (end 1) is level rank j, each step kept
    even where none is left."""
    if at is None:
        return [[(chunk_of[x.chunk], ranks[x.src], ranks[x.dst], x.op) for x in step.sends]
                for step in steps]
    end, j = at
    return [[(chunk_of[x.chunk], ranks[x.src], ranks[x.dst], x.op) for x in step.sends
             if (x.src, x.dst)[end] == j] for step in steps]


def allgather_batch(hierarchy: Hierarchy, levels: Levels, share_chunks: int, batch: int,
                    pieces: int, deadline: Deadline = Deadline(),
                    at: tuple[int, int] | None = None) -> Moves:
    """One batch of the decomposed allgather: chunks batch * pieces .. + pieces - 1 of
    every rank's share (share_chunks chunks a share, the chunk numbering) cross the
    network within each peer group, then spread inside every box; a box's own pieces
    spread beside the crossing where that adds no step (home_beside). OutOfTime past the
    deadline (at 512 GPUs a batch takes half a minute). With `at` = (end, b) (no
    gateways), only the moves out of box b (end 0) or into it (end 1), each step kept
    even where none is left: a K-th of them."""
    assert at is None or not hierarchy.proxy
    boxes, peers = hierarchy.boxes, hierarchy.peers
    across_steps = sending_steps(levels.across)
    inside_steps = sending_steps(levels.inside)
    ca, ci = levels.across.collective.chunks, levels.inside.collective.chunks
    first = batch * pieces
    proxy = hierarchy.proxy or range(len(boxes[0]))

    def chunk(rank, piece):
        return rank * share_chunks + first + piece

    def along(paths, pairs) -> Moves:
        """For each (box, origin box): every piece of origin[i] along paths[i] (local
        ranks) in box, for every i."""
        return in_parallel(*([[(chunk(origin[i], x), box[u], box[v], "copy")
                               for x in range(pieces)]
                              for u, v in zip(path, path[1:])]
                             for box, origin in pairs for i, path in enumerate(paths)))

    # level chunk x is piece (x % c) * lanes + lane of member x // c: the lanes of one
    # level chunk are consecutive pieces, so they travel as one ranged send; local rank
    # i's pieces cross in its proxy's peer group
    across, la = [], pieces // ca
    for group, via in zip(peers, (peers[p] for p in proxy)):
        deadline.check("building a batch")
        for lane in range(la):
            chunk_of = [chunk(group[x // ca], (x % ca) * la + lane)
                        for x in range(len(group) * ca)]
            across.append(_embed(across_steps, via, chunk_of, at))
    to_gateways = along(hierarchy.to_proxy, [(box, box) for box in boxes])
    from_gateways = along(hierarchy.from_proxy, [(box, origin) for box in boxes
                                                 for origin in boxes if origin != box])
    home, remote, li = [], [], pieces // ci
    for box in (boxes if at is None else boxes[at[1]:at[1] + 1]):
        deadline.check("building a batch")
        for origin in boxes:  # after `across`, local rank i holds origin[i]'s pieces
            for lane in range(li):
                chunk_of = [chunk(origin[x // ci], (x % ci) * li + lane)
                            for x in range(len(box) * ci)]
                (home if origin == box else remote).append(
                    _embed(inside_steps, box, chunk_of))
    crossing = in_sequence(to_gateways, in_parallel(*across), from_gateways)
    home = in_parallel(*home)
    if home_beside(len(inside_steps), len(crossing)):
        moves = in_sequence(in_parallel(crossing, home), in_parallel(*remote))
    else:
        moves = in_sequence(crossing, in_parallel(home, *remote))
    return first_receipts(moves, share_chunks) if hierarchy.proxy else moves


def sending_steps(level: Schedule) -> list:
    """A level's steps that send something (a step of none is no step of a batch)."""
    return [step for step in level.expanded().steps if step.sends]


def home_beside(inside: int, crossing: int) -> bool:
    """Whether a box's own pieces spread inside it (`inside` steps) beside the
    crossing (`crossing` steps) rather than after it: they need nothing from the other
    boxes, so they start at once where that adds no step. The crossing mostly takes the
    network's links and the spread the box's (not all: a GPU's PCIe way to a shared NIC,
    or a path to a gateway, may carry both), so a step of both takes about the rounds of
    the busier, and the spread after the crossing carries a box fewer. The choice is made
    on step counts, not priced both ways: no design checked got worse (2026-12-06)."""
    return inside <= crossing


def first_receipts(moves: Moves, share_chunks: int) -> Moves:
    """The allgather moves without a copy to a rank that already holds the chunk (its
    own, or received at this step or before: it still forwards it), empty steps left
    out. Each rank then receives each chunk once, so the moves run backwards as
    reductions count every contribution once."""
    held, kept = set(), []
    for step in moves:
        left = []
        for move in step:
            c, _, d, _ = move
            if d != c // share_chunks and (c, d) not in held:
                held.add((c, d))
                left.append(move)
        if left:
            kept.append(left)
    return kept


def reversed_moves(moves: Moves) -> Moves:
    """SCCL's duality on a moves: an allgather built on the reversed links, run backwards
    with every copy a reduction, is a reducescatter on the links themselves."""
    return [[(c, d, s, "reduce") for c, s, d, _ in step] for step in reversed(moves)]


def batch_moves(name: str, hierarchy: Hierarchy, levels: tuple[Levels, ...],
                share_chunks: int, batch: int, pieces: int,
                deadline: Deadline = Deadline(), into: int | None = None) -> Moves:
    """One batch of `name`. levels: (allgather's) or (reducescatter's, allgather's), the
    reducescatter's synthesized on the reversed links. Allreduce runs a batch's
    reducescatter then its allgather, so in the pipeline the two overlap across batches.
    With `into` = b (no gateways), only the moves into box b, each step kept even where
    none is left."""
    at = None if into is None else (1, into)
    if name == "allgather":
        return allgather_batch(hierarchy, levels[0], share_chunks, batch, pieces, deadline,
                               at)
    # run backwards, a move into box b is one out of it
    rs = reversed_moves(allgather_batch(hierarchy.reversed(), levels[0], share_chunks, batch,
                                        pieces, deadline, None if at is None else (0, into)))
    if name == "reducescatter":
        return rs
    return in_sequence(rs, allgather_batch(hierarchy, levels[1], share_chunks, batch, pieces,
                                           deadline, at))


def batch_size(hierarchy: Hierarchy, levels: tuple[Levels, ...], pieces: int) -> int:
    """The moves batch_moves would list, by arithmetic (nothing is built): per level
    pairing, each peer group runs the across level pieces / its chunks times, and each
    box the inside level once per box of origin, pieces / its chunks times (allreduce:
    both phases, a level pairing each); gateway paths, where there are any, are counted
    generously."""
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    total = 0
    for lv in levels:
        across = sum(len(step.sends) for step in lv.across.expanded().steps)
        inside = sum(len(step.sends) for step in lv.inside.expanded().steps)
        total += g * (pieces // lv.across.collective.chunks) * across \
            + k * k * (pieces // lv.inside.collective.chunks) * inside
        if hierarchy.proxy:
            total += 2 * k * k * g * pieces * (g + 1)
    return total


def batch_steps(hierarchy: Hierarchy, levels: tuple[Levels, ...]) -> int | None:
    """The steps of one batch (of pieces a multiple of every level's chunks, as the
    decomposition lists them), by arithmetic: per phase, the across level's non-empty
    steps, then the inside level's (None where GPUs cross through gateways: there the
    paths to them add steps, and receipts already made drop some)."""
    if hierarchy.proxy:
        return None
    return sum(len(sending_steps(s)) for lv in levels for s in (lv.across, lv.inside))


Loads = list  # list[Counter]: per step of a batch, moves per (src, dst) rank pair


def batch_loads(name: str, hierarchy: Hierarchy, levels: tuple[Levels, ...],
                pieces: int) -> tuple[Loads, int]:
    """(per step of one batch, its moves per rank pair; the moves in all), as
    batch_moves(name, hierarchy, levels, pieces, 0, pieces) lists them, by arithmetic
    from the levels alone: each peer group runs the across level pieces / its chunks
    times, each box the inside level once per box of origin, pieces / its chunks times
    (reducescatter: the same on the reversed links, run backwards; allreduce: both).
    Nothing is listed, so pricing a design costs O(rank pairs used), not O(moves): at
    1024 GPUs a batch lists about a million moves a piece. Not where GPUs cross through
    gateways (hierarchy.proxy: their paths add moves, and receipts made drop some)."""
    assert not hierarchy.proxy, "gateways: list the moves (batch_moves)"
    if name == "allgather":
        return _allgather_loads(hierarchy, levels[0], pieces)
    rs, count = _allgather_loads(hierarchy.reversed(), levels[0], pieces)
    rs = [Counter({(d, s): n for (s, d), n in load.items()}) for load in reversed(rs)]
    if name == "reducescatter":
        return rs, count
    ag, more = _allgather_loads(hierarchy, levels[1], pieces)
    return rs + ag, count + more


def _allgather_loads(hierarchy: Hierarchy, levels: Levels, pieces: int
                     ) -> tuple[Loads, int]:
    """As allgather_batch lists the moves: the crossing, and each box's spread of its
    own pieces beside it where home_beside says so (else after it, with the rest)."""
    boxes, peers = hierarchy.boxes, hierarchy.peers
    across, inside = sending_steps(levels.across), sending_steps(levels.inside)
    per_crossing = pieces // levels.across.collective.chunks
    per_origin = pieces // levels.inside.collective.chunks
    crossing = _level_loads(across, peers, per_crossing)
    home = _level_loads(inside, boxes, per_origin)
    remote = _level_loads(inside, boxes, (len(boxes) - 1) * per_origin)
    # summed in place: at 4096 GPUs a crossing step loads 2.1 million pairs
    if home_beside(len(inside), len(crossing)):
        for a, h in zip(crossing, home):
            a.update(h)
        loads = crossing + remote
    else:
        for h, r in zip(home, remote):
            h.update(r)
        loads = crossing + home
    count = (sum(len(s.sends) for s in across) * len(peers) * per_crossing
             + sum(len(s.sends) for s in inside) * len(boxes) ** 2 * per_origin)
    return loads, count


def _level_loads(steps, places, times: int) -> Loads:
    """Per step, the moves per rank pair of `steps` (a level's, on its own ranks) run
    `times` over in each of `places` (the level's ranks on the global ones)."""
    loads = []
    for step in steps:
        pairs = Counter((x.src, x.dst) for x in step.sends)
        load = Counter()
        for ranks in places:
            for (u, v), n in pairs.items():
                load[(ranks[u], ranks[v])] += n * times
        loads.append(load)
    return loads
