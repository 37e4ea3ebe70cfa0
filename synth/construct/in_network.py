"""Allreduce computed by the switches: NVLink SHARP (NVLS) in a box, SHARP across boxes.

Where one switch that can reduce and multicast joins every pair of ranks (dgxh100's
NVSwitch, `can: [reduce, multicast]`), allreduce needs no GPU to add anything
(nvls_allreduce); across boxes, each box's switch and the network's do their part
where they can, the GPUs the rest (across_boxes_allreduce). On one switch, rank r
owns shard r of each batch (`pieces` chunks):

    step 1   switch_reduce: the switch sums every rank's copy of shard r into rank r
    step 2   multicast: rank r stores the sum of shard r to every other rank

A rank's port carries (N-1) pieces up and 1 down in step 1, 1 up and (N-1) down in
step 2. Pipelined, batch b's step 1 runs beside batch b-1's step 2, so each port
carries N pieces each way per step: with N x pieces a multiple of the port's capacity
that is exactly the in-network bound (one chunk each way per chunk of the buffer,
synth.bounds.allreduce.in_network_allreduce), where a GPU allreduce needs 2(N-1)/N.

The switch pays a source's (or destination's) port once per operation, however many
ranks it reaches: `switch_rounds` prices a step by that rule, which is the schedule
file's (version 3); the verifier checks it on its own.
"""

from __future__ import annotations

import time
from fractions import Fraction

from synth.construct.pipelines import DEPTHS, add_pipelines
from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Pipeline, Schedule, Send, Step, SwitchOp
from synth.schedule.transform import together, window_rounds
from synth.search.pareto import Limits, Search
from synth.topology.hierarchy import Hierarchy
from synth.topology.linkmodel import LinkModel, Switch, switch_rounds

MAX_PIECES = 64  # chunks of a shard per batch, to fill a port of fractional capacity
MAX_SENDS = 1_100_000  # of a batch program across boxes (2048 GPUs in 256 boxes: 1,044,480,
# its six pipelines built in 354 s and 3 GB here; 512 GPUs in 64 boxes: 64,512)
# building and pricing one batch program across boxes, per rank its operations and sends
# name (the prior: an idle core's, 13 us at 512 GPUs; measured, the slowest)
ACROSS = Pace(1.3e-5, least=10_000)
METHOD = "in-network (NVLS): switch reduce, then multicast"


def reducing_switch(model: LinkModel) -> Switch | None:
    """A switch that reduces and multicasts between every ordered pair of ranks."""
    return capable_switch(model, range(model.ranks))


def pipelined_schedule(model: LinkModel, coll, program: tuple[Step, ...], batches: int,
                       stride: int, info: dict, memo: dict | None = None) -> Schedule:
    """`program` as one batch of `batches`, each expanded step's rounds from the program
    steps running in it (transform.window_rounds; `memo` keeps the rounds of each window
    of program steps for the next depth of the same program)."""
    if batches == 1:
        return Schedule(coll, model, program, info)
    rounds = window_rounds(model, program, batches, memo)
    return Schedule(coll, model, program, info, Pipeline(batches, stride, rounds))


def nvls_program(model: LinkModel, switch: Switch, pieces: int) -> tuple[Step, Step]:
    """One batch of the two-step allreduce (module docstring), `pieces` chunks a shard."""
    everyone = tuple(range(model.ranks))
    reduce = [SwitchOp("switch_reduce", r * pieces, everyone, (r,), switch.name, pieces)
              for r in everyone]
    spread = [SwitchOp("multicast", r * pieces, (r,), tuple(d for d in everyone if d != r),
                       switch.name, pieces) for r in everyone]
    return (Step(switch_rounds(model, reduce), (), tuple(reduce)),
            Step(switch_rounds(model, spread), (), tuple(spread)))


def nvls_allreduce(model: LinkModel, switch: Switch, batches: int, pieces: int,
                   program: tuple[Step, ...] | None = None,
                   memo: dict | None = None) -> Schedule:
    """The two-step allreduce (module docstring) in `batches` pipelined batches of
    `pieces` chunks per shard (`program` and `memo`: nvls_program's and pipelined_schedule's, to
    share between depths)."""
    program = program or nvls_program(model, switch, pieces)
    stride = model.ranks * pieces
    coll = make_collective("allreduce", model.ranks, stride * batches)
    info = {"method": METHOD + (f", {batches} batches" if batches > 1 else "")}
    return pipelined_schedule(model, coll, program, batches, stride, info, memo)


def capable_switch(model: LinkModel, ranks) -> Switch | None:
    """A switch that reduces and multicasts between every pair of `ranks`. O(links of
    the capable switches): the N^2 pairs are never listed (16 million at 4096 ranks)."""
    ranks = set(ranks)
    for w in model.switches:
        if not {"reduce", "multicast"} <= set(w.can) or \
                len(w.links) < len(ranks) * (len(ranks) - 1):
            continue
        reach = {a: 0 for a in ranks}  # distinct other ranks of `ranks` each reaches
        for a, b in set(w.links):
            if a in ranks and b in ranks and a != b:
                reach[a] += 1
        if all(k == len(ranks) - 1 for k in reach.values()):
            return w
    return None


def box_switches(model: LinkModel, hierarchy: Hierarchy | None
                 ) -> tuple[list | None, Switch | None] | None:
    """(per box of `hierarchy` its reducing switch, or None where some box has none;
    per peer group the network switch that reduces between its ranks (one switch, or
    its rail's), or None where some group has none), or None where neither exists, or
    GPUs cross through gateways, or there is one box."""
    if hierarchy is None or hierarchy.proxy or len(hierarchy.boxes) < 2:
        return None
    inside = [capable_switch(model, box) for box in hierarchy.boxes]
    inside = inside if all(inside) else None
    across = [capable_switch(model, peers) for peers in hierarchy.peers]
    across = across if all(across) else None
    return (inside, across) if inside or across else None


def across_boxes_allreduce(model: LinkModel, hierarchy: Hierarchy, inside, across,
                           batches: int, pieces: int, program: tuple[Step, ...] | None = None,
                           memo: dict | None = None) -> Schedule:
    """Allreduce across boxes, computed in the network wherever a switch can:

        step 1   in every box, shard r summed into local rank r: by the box's switch
                 (NVLS) where it reduces, else sent and reduced by the GPUs
        step 2   among the peers of local rank r (one per box), each piece of shard r
                 summed into the peer that owns it: by the network switch (SHARP) where
                 it reduces, else a direct reducescatter
        step 3   each owner's sum back to its peers: multicast by the network switch,
                 else a direct allgather
        step 4   in every box, local rank r spreads shard r: multicast by the box's
                 switch, else sent by the GPUs

    `pieces` chunks per shard (a multiple of K), pipelined: the box and network steps
    of different batches overlap (`program` and `memo`: across_program's and
    pipelined_schedule's, to share between depths)."""
    program = program or across_program(model, hierarchy, inside, across, pieces)
    stride = len(hierarchy.boxes[0]) * pieces
    coll = make_collective("allreduce", model.ranks, stride * batches)
    where = [w for w, on in (("NVLS in each box", inside), ("SHARP across boxes", across))
             if on]
    info = {"method": f"in-network ({', '.join(where)})"
            + (f", {batches} batches" if batches > 1 else "")}
    return pipelined_schedule(model, coll, program, batches, stride, info, memo)


def across_program(model: LinkModel, hierarchy: Hierarchy, inside, across,
                   pieces: int) -> tuple[Step, ...]:
    """One batch of across_boxes_allreduce: its four steps."""
    boxes, peers, k = hierarchy.boxes, hierarchy.peers, len(hierarchy.boxes)
    g = len(boxes[0])
    part = pieces // k
    gather, spread, up, down = [], [], [], []
    for b, box in enumerate(boxes):
        for r in range(g):
            others = tuple(x for x in box if x != box[r])
            if inside:
                gather.append(SwitchOp("switch_reduce", r * pieces, box, (box[r],),
                                       inside[b].name, pieces))
                spread.append(SwitchOp("multicast", r * pieces, (box[r],), others,
                                       inside[b].name, pieces))
            else:
                gather += [Send(r * pieces, x, box[r], "reduce", pieces) for x in others]
                spread += [Send(r * pieces, box[r], x, "copy", pieces) for x in others]
    for r, group in enumerate(peers):
        for j, owner in enumerate(group):
            chunk = r * pieces + j * part
            rest = tuple(x for x in group if x != owner)
            if across:
                up.append(SwitchOp("switch_reduce", chunk, group, (owner,), across[r].name,
                                   part))
                down.append(SwitchOp("multicast", chunk, (owner,), rest, across[r].name, part))
            else:
                up += [Send(chunk, x, owner, "reduce", part) for x in rest]
                down += [Send(chunk, owner, x, "copy", part) for x in rest]

    return tuple(step_of(model, m) for m in (gather, up, down, spread))


def step_of(model: LinkModel, moves) -> Step:
    """A step of `moves` (sends and switch operations) in the fewest rounds."""
    sends = tuple(x for x in moves if isinstance(x, Send))
    ops = tuple(x for x in moves if isinstance(x, SwitchOp))
    return Step(switch_rounds(model, list(ops), sends), sends, ops)


TURNS = "in-network (NVLS in each box in turn)"


def turns_allreduce(model: LinkModel, hierarchy: Hierarchy, inside, batches: int,
                    pieces: int, program: tuple[Step, ...] | None = None,
                    memo: dict | None = None) -> Schedule:
    """Allreduce across K boxes in which every switch operation is a sum stored back to
    every member of one box (MSCCL++'s glres): the data is cut into K parts, and part h
    is summed in box h's switch, once the other boxes' sums have been added into it.
    Part h, shard r (`pieces` chunks; local rank r of each box owns it):

        step 1   in every other box, the GPUs reduce shard r into local rank r
        step 2   each of those sends its box's sum to local rank r of box h (a rail), which
                 adds it to its own copy
        step 3   box h's switch sums shard r over its ranks into local rank r
        step 4   ... and rank r multicasts it in the box (steps 3 and 4 are one glres)
        step 5   local rank r of box h sends the total back to local rank r of the others
        step 6   which copy it to their box (GPU sends)

    Each box's switch thus sums a K-th of the data and stores the sum (one glres over
    the box), where the faster across_boxes_allreduce has every switch sum everything
    into one GPU and later store everything: a sum left on one GPU and a store of what
    the switch did not just sum, which MSCCL++ runs through switch channels of one GPU
    (docs/runtimes.md, "Switch channels"; not run on hardware), which this one does not
    need. The NICs carry what a reducescatter and allgather among the peers carry.
    Pipelined over `batches` (`program` and `memo`: turns_program's and
    pipelined_schedule's, to share between depths)."""
    program = program or turns_program(model, hierarchy, inside, pieces)
    stride = len(hierarchy.boxes) * len(hierarchy.boxes[0]) * pieces
    coll = make_collective("allreduce", model.ranks, stride * batches)
    info = {"method": TURNS + (f", {batches} batches" if batches > 1 else "")}
    return pipelined_schedule(model, coll, program, batches, stride, info, memo)


def turns_program(model: LinkModel, hierarchy: Hierarchy, inside,
                  pieces: int) -> tuple[Step, ...]:
    """One batch of turns_allreduce: its six steps, chunk (h g + r) pieces + j being
    piece j of shard r of part h."""
    boxes, g = hierarchy.boxes, len(hierarchy.boxes[0])
    steps = [[] for _ in range(6)]
    for h, box in enumerate(boxes):
        for r in range(g):
            c, owner = (h * g + r) * pieces, box[r]
            for other in (b for b in boxes if b is not box):
                rest = [x for x in other if x != other[r]]
                steps[0] += [Send(c, x, other[r], "reduce", pieces) for x in rest]
                steps[1].append(Send(c, other[r], owner, "reduce", pieces))
                steps[4].append(Send(c, owner, other[r], "copy", pieces))
                steps[5] += [Send(c, other[r], x, "copy", pieces) for x in rest]
            steps[2].append(SwitchOp("switch_reduce", c, box, (owner,), inside[h].name,
                                     pieces))
            steps[3].append(SwitchOp("multicast", c, (owner,),
                                     tuple(x for x in box if x != owner), inside[h].name,
                                     pieces))
    return tuple(step_of(model, m) for m in steps)


TURNS_PIECES = (1, 2, 4)  # pieces a shard: the least steady-state rounds per chunk


def _turns_pieces(model, hierarchy, inside) -> int:
    """TURNS_PIECES' member whose steady state (all six steps at once) costs the least
    per chunk; the fewest among equals."""
    chunks = len(hierarchy.boxes) * len(hierarchy.boxes[0])
    return min(TURNS_PIECES, key=lambda p: (Fraction(together(model, turns_program(
        model, hierarchy, inside, p)).rounds, chunks * p), p))


def _across_pieces(model, hierarchy, inside, across, deadline: Deadline
                   ) -> tuple[int, tuple[Step, ...]]:
    """The pieces per shard (a multiple of K, at most MAX_PIECES or K) whose steady
    state, all four steps at once, costs the least per chunk, the fewest among equals,
    and its program: of those tried while the time left afforded one more (each costs
    about what the last did); OutOfTime if none was."""
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    # the ranks the program's operations and sends name (whatever the pieces): in each
    # box g reductions of g + 1 ranks and g multicasts of g, or their sends; across, per
    # peer group the same over k ranks
    units = (k * g * (2 * g + 1) if inside else 2 * k * g * (g - 1)) + \
        (g * k * (2 * k + 1) if across else 2 * g * k * (k - 1))
    best, last = None, ACROSS.seconds(units)
    for pieces in range(k, max(k, MAX_PIECES) + 1, k):
        if not deadline.affords(last):
            if best is None:
                raise OutOfTime("choosing pieces a shard")
            break
        started = time.monotonic()
        with ACROSS.timing(units):
            steps = across_program(model, hierarchy, inside, across, pieces)
            cost = Fraction(together(model, steps).rounds, g * pieces)  # the steady state
        if best is None or cost < best[0]:
            best = (cost, pieces, steps)
        last = time.monotonic() - started
    return best[1], best[2]


def port_pieces(model: LinkModel) -> int:
    """The fewest pieces per shard that fill the ports: N x pieces a multiple of the
    narrowest port's capacity (1 where none is found up to MAX_PIECES)."""
    port = min(g.capacity for g in model.groups) if model.groups else Fraction(1)
    return next((p for p in range(1, MAX_PIECES + 1)
                 if (model.ranks * p / port).denominator == 1), 1)


ONE_STEP = ("allgather", "reducescatter", "broadcast", "reduce")


def one_step(model: LinkModel, switch: Switch, name: str, root: int | None,
             chunks: int) -> Schedule:
    """`name` in one step of switch operations, `chunks` chunks a share: every rank (or
    the root) multicasts its share (allgather, broadcast), or the switch sums every
    rank's copy of a share into its owner (reducescatter, reduce). A source's port
    carries a share once; each other port carries what the collective must bring it,
    which is its bound: one step where plain sends need a tree or a pipeline
    (broadcast, reduce), and as fast as direct sends elsewhere."""
    n, everyone = model.ranks, tuple(range(model.ranks))
    owners = everyone if name in ("allgather", "reducescatter") else (root,)
    ops = []
    for r in owners:
        first = r * chunks if name in ("allgather", "reducescatter") else 0
        if name in ("allgather", "broadcast"):
            ops.append(SwitchOp("multicast", first, (r,), tuple(d for d in everyone if d != r),
                                switch.name, chunks))
        else:
            ops.append(SwitchOp("switch_reduce", first, everyone, (r,), switch.name, chunks))
    coll = make_collective(name, n, chunks, root)
    step = Step(switch_rounds(model, ops), (), tuple(ops))
    return Schedule(coll, model, (step,),
                    {"method": f"in-network (NVLS): one {ops[0].op} per share"})


def nvls_search(model: LinkModel, limits: Limits, deadline: Deadline | float | None = None,
                hierarchy: Hierarchy | None = None, name: str = "allreduce",
                root: int | None = None) -> Search:
    """Allreduce computed in the network at every pipeline depth within the step
    limits, each verified: on one switch for all ranks (NVLS), with the fewest pieces
    per shard that fill the ports (N x pieces a multiple of the port's capacity); else
    across the boxes of `hierarchy`, in the network wherever a switch reduces (in each
    box, between them, or both: across_boxes_allreduce). The collectives of ONE_STEP on
    one switch: one_step, with the fewest chunks a share (up to MAX_PIECES) at the
    lowest cost per chunk. `stopped` says which, why none applies, or "out of time"."""
    search = Search(complete=False)
    try:
        search.stopped = _nvls_points(model, limits, Deadline.of(deadline), hierarchy, name,
                                      root, search)
    except OutOfTime:
        search.stopped = "out of time"
    return search


def _nvls_points(model: LinkModel, limits: Limits, deadline: Deadline, hierarchy, name: str,
                 root, search: Search) -> str:
    """nvls_search's points, added to `search`; why it stopped."""
    deadline.check("looking for switches that reduce")
    switch = reducing_switch(model)
    if name != "allreduce":
        if switch is None or name not in ONE_STEP:
            return f"no switch reduces and multicasts {name} between every pair"
        chunks = min(range(1, MAX_PIECES + 1), key=lambda c: (Fraction(
            one_step(model, switch, name, root, c).rounds, c), c))
        add_pipelines(search, lambda _: one_step(model, switch, name, root, chunks), limits,
                      deadline, (1,))
        return search.stopped or f"in-network (NVLS) via {switch.name}, {chunks} chunks a share"
    if switch is not None:
        pieces = port_pieces(model)
        program, memo = nvls_program(model, switch, pieces), {}
        add_pipelines(search, lambda batches: nvls_allreduce(model, switch, batches, pieces,
                                                             program, memo),
                      limits, deadline, DEPTHS)
        return search.stopped or f"{METHOD} via {switch.name}, {pieces} pieces a shard"
    found = box_switches(model, hierarchy)
    if found is None:
        return ("no switch reduces and multicasts between every pair of ranks, nor in every "
                "box, nor between the boxes")
    inside, across = found
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    sends = (0 if inside else 2 * k * g * (g - 1)) + (0 if across else 2 * g * k * (k - 1))
    if sends > MAX_SENDS:
        return f"{sends:,} sends a batch (at most {MAX_SENDS:,})"
    pieces, program = _across_pieces(model, hierarchy, inside, across, deadline)
    memo = {}
    add_pipelines(search, lambda batches: across_boxes_allreduce(
        model, hierarchy, inside, across, batches, pieces, program, memo), limits, deadline,
        DEPTHS)
    where = " and ".join(w for w, on in (("NVLS in each box", inside),
                                         ("SHARP across boxes", across)) if on)
    stopped = search.stopped or f"in-network: {where}, {pieces} pieces a shard"
    if inside and g > 1 and not search.stopped:  # one glres per switch sum (turns_allreduce)
        turns = 2 * k * (k - 1) * g * g
        if turns > MAX_SENDS:
            return stopped + f"; in turn: {turns:,} sends a batch (at most {MAX_SENDS:,})"
        # one piece a shard (the fewest chunks: the least latency) and the pieces that
        # fill the ports best, where those differ
        tried = sorted({1, _turns_pieces(model, hierarchy, inside)})
        for tried_pieces in tried:
            program, memo = turns_program(model, hierarchy, inside, tried_pieces), {}
            add_pipelines(search, lambda batches, p=tried_pieces, pr=program, m=memo:
                          turns_allreduce(model, hierarchy, inside, batches, p, pr, m),
                          limits, deadline, DEPTHS)
        stopped = search.stopped or \
            stopped + f"; in turn, {' or '.join(map(str, tried))} pieces a shard"
    return stopped
