"""Allreduce with NVLS in each box where the boxes reach the network unlike each other.

On dgxh100x4 without box 1's NIC 2, the boxes are alike inside but box 1's GPU 2
reaches no other box, and rail 2 joins only three boxes: across_boxes_allreduce
(synth.construct.in_network), which has local rank r of every box sum shard r across
its peer group, does not apply. Here every piece of a batch gets a plan of its own:

    lane l, owner o   the GPU at local rank l of box o sums the piece over the boxes
    crossings         for every other box b, the pair (i, j): box b's GPU i holds the
                      box's sum of the piece and sends it to box o's GPU j, linked both
                      ways across the network; j = l adds it into the owner directly,
                      any other j is a relay that passes it on inside box o

One batch, six steps (empty ones left out):

    1  in every box the switch sums the piece into its holder (o's GPU l, b's GPU i)
    2  every holder sends its box's sum across: a reduce into the owner, or a copy to
       the relay (whose own copy step 1 has already summed)
    3  every relay adds what it received into the owner (NVLink)
    4  the owner copies the total back to its relays
    5  the owner and its relays send the total back across to the holders
    6  in every box the holder multicasts it through the switch

The plans are chosen piece by piece (`plans`): each takes the lane, owner and
crossings that load the links and groups it touches least, so that the pieces spread
over every NIC a box has, and a box with fewer NICs owns fewer pieces: on the cluster
above the network carries each NIC's share of the bound, where equal shards would
leave box 1's seven NICs 8/7 of the others' load. Where two boxes relay one piece,
their relays differ (two copies into one GPU would collide).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from synth.construct.in_network import capable_switch, pipelined_schedule, step_of
from synth.construct.pipelines import DEPTHS, add_pipelines
from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send, Step, SwitchOp
from synth.schedule.transform import together
from synth.search.pareto import Limits, Search
from synth.topology.hierarchy import Hierarchy
from synth.topology.linkmodel import LinkModel

MAX_PIECES = 128  # a batch's pieces: enough that 31 NICs' loads come out even
PRICED = 4  # batch sizes priced exactly, of those whose greedy loads promise the least
# choosing plans, per crossing weighed (an idle core's, about 10 us; measured, the slowest)
WEIGH = Pace(1e-5, least=10_000)
METHOD = "in-network (NVLS in each box, pieces balanced over every box's NICs)"


@dataclass(frozen=True)
class Plan:
    """Where one piece goes (module docstring): crossings[b] = (i, j) for every box b
    but the owner, whose entry is None."""

    lane: int
    owner: int
    crossings: tuple[tuple[int, int] | None, ...]


class Loads:
    """The chunks a batch's sends put on each link and group, in units of capacity."""

    def __init__(self, model: LinkModel):
        self.capacity = {pair: float(l.capacity) for pair, l in model.link.items()}
        self.of = {pair: [pair] for pair in self.capacity}
        for g in model.groups:
            self.capacity[g.name] = float(g.capacity)
            for pair in g.links:
                self.of[pair].append(g.name)
        self.load, self.peak = Counter(), 0.0

    def cost(self, pairs) -> tuple[float, float]:
        """(the highest load after adding one chunk on each pair, the sum of squares it
        adds): what the greedy choice minimises."""
        added = Counter(r for pair in pairs for r in self.of[pair])
        peak, spread = self.peak, 0.0
        for r, n in added.items():
            before, after = self.load[r] / self.capacity[r], (self.load[r] + n) / self.capacity[r]
            peak, spread = max(peak, after), spread + after * after - before * before
        return peak, spread

    def add(self, pairs) -> None:
        for pair in pairs:
            for r in self.of[pair]:
                self.load[r] += 1
                self.peak = max(self.peak, self.load[r] / self.capacity[r])

    def remove(self, pairs) -> None:
        """Take one chunk off each pair; `peak` stays the highest so far until settle()."""
        for pair in pairs:
            for r in self.of[pair]:
                self.load[r] -= 1

    def settle(self) -> float:
        """`peak` made the highest load now, and returned."""
        self.peak = max((n / self.capacity[r] for r, n in self.load.items()), default=0.0)
        return self.peak


def crossing_pairs(boxes, lane: int, owner: int, b: int, i: int, j: int) -> list:
    """The rank links one chunk of a piece uses to cross from box b (GPU i) to the owner
    (GPU j, relaying to GPU lane where j is not lane) and back."""
    src, via, dst = boxes[b][i], boxes[owner][j], boxes[owner][lane]
    pairs = [(src, via), (via, src)]
    return pairs + ([(via, dst), (dst, via)] if j != lane else [])


def options(model: LinkModel, boxes) -> dict:
    """(b, o) -> the (i, j) with box b's GPU i and box o's GPU j linked both ways."""
    links = model.link
    return {(b, o): [(i, j) for i, x in enumerate(boxes[b]) for j, y in enumerate(boxes[o])
                     if (x, y) in links and (y, x) in links]
            for b in range(len(boxes)) for o in range(len(boxes)) if b != o}


def _plan(loads: Loads, boxes, crossing: dict, lane: int, owner: int):
    """The crossings for a piece at (lane, owner), box by box the least loading, and
    their links; None where some box cannot cross to the owner."""
    links, used, chosen = [], set(), []
    for b in range(len(boxes)):
        if b == owner:
            chosen.append(None)
            continue
        fits = [(i, j) for i, j in crossing[(b, owner)]
                if (j == lane or (j not in used and (boxes[owner][j], boxes[owner][lane])
                                  in loads.of and (boxes[owner][lane], boxes[owner][j])
                                  in loads.of))]
        if not fits:
            return None
        i, j = min(fits, key=lambda ij: (loads.cost(links + crossing_pairs(
            boxes, lane, owner, b, *ij)), ij[1] != lane, ij))
        if j != lane:
            used.add(j)
        chosen.append((i, j))
        links += crossing_pairs(boxes, lane, owner, b, i, j)
    return Plan(lane, owner, tuple(chosen)), links


def plans(model: LinkModel, hierarchy: Hierarchy, pieces: int,
          deadline: Deadline = Deadline()) -> tuple[list[Plan], list[float]]:
    """`pieces` plans, each the least loading given those before it (module docstring),
    and after each the highest load of a link or group in rounds; ([], []) where no
    piece can be placed. Cost: pieces x lanes x boxes^2 x crossings; OutOfTime past
    the deadline."""
    boxes, loads = hierarchy.boxes, Loads(model)
    crossing = options(model, boxes)
    out, peaks = [], []
    for _ in range(pieces):
        deadline.check("balancing the pieces over the NICs")
        best = None
        for owner in range(len(boxes)):
            for lane in range(len(boxes[0])):
                found = _plan(loads, boxes, crossing, lane, owner)
                if found is not None:
                    cost = loads.cost(found[1])
                    if best is None or cost < best[0]:
                        best = (cost, found)
        if best is None:
            return [], []
        out.append(best[1][0])
        loads.add(best[1][1])
        peaks.append(loads.peak)
    return out, peaks


def relayed_program(model: LinkModel, hierarchy: Hierarchy, inside,
                    chosen: list[Plan]) -> tuple[Step, ...]:
    """One batch (module docstring) of the pieces of `chosen`, alike plans given
    consecutive chunks (one ranged operation each)."""
    boxes = hierarchy.boxes
    steps = [[] for _ in range(6)]
    start = 0
    for plan, n in sorted(Counter(chosen).items(), key=lambda pn: _order(pn[0])):
        owner = boxes[plan.owner][plan.lane]
        for b, box in enumerate(boxes):
            cross = plan.crossings[b]
            holder = owner if cross is None else box[cross[0]]
            others = tuple(x for x in box if x != holder)
            steps[0].append(SwitchOp("switch_reduce", start, box, (holder,), inside[b].name, n))
            steps[5].append(SwitchOp("multicast", start, (holder,), others, inside[b].name, n))
            if cross is None:
                continue
            via = boxes[plan.owner][cross[1]]
            steps[1].append(Send(start, holder, via, "reduce" if via == owner else "copy", n))
            steps[4].append(Send(start, via, holder, "copy", n))
            if via != owner:
                steps[2].append(Send(start, via, owner, "reduce", n))
                steps[3].append(Send(start, owner, via, "copy", n))
        start += n
    return tuple(step_of(model, moves) for moves in steps if moves)


def _order(plan: Plan):
    return plan.owner, plan.lane, tuple((-1, -1) if c is None else c for c in plan.crossings)


def steady_cost(model: LinkModel, program: tuple[Step, ...], pieces: int) -> Fraction:
    """Rounds per chunk with every step of the program running at once (a deep
    pipeline's steady state)."""
    return Fraction(together(model, program).rounds, pieces)


def relayed_allreduce(model: LinkModel, hierarchy: Hierarchy, inside, batches: int,
                      pieces: int, program: tuple[Step, ...], memo: dict | None = None
                      ) -> Schedule:
    """`program` (relayed_program, `pieces` chunks) pipelined over `batches`."""
    coll = make_collective("allreduce", model.ranks, pieces * batches)
    info = {"method": METHOD + (f", {batches} batches" if batches > 1 else "")}
    return pipelined_schedule(model, coll, program, batches, pieces, info, memo)


def relayed_switches(model: LinkModel, hierarchy: Hierarchy | None) -> list | None:
    """Per box its switch that reduces and multicasts, where the boxes cross the network
    through gateways (hierarchy.proxy: a NIC missing somewhere) and every box has one;
    else None (across_boxes_allreduce covers boxes whose every GPU crosses)."""
    if hierarchy is None or not hierarchy.proxy or len(hierarchy.boxes) < 2:
        return None
    inside = [capable_switch(model, box) for box in hierarchy.boxes]
    return inside if all(inside) else None


def relayed_search(model: LinkModel, limits: Limits, deadline: Deadline | float | None,
                   hierarchy: Hierarchy) -> Search:
    """The relayed allreduce at every pipeline depth within the limits, each verified,
    with the batch size (up to MAX_PIECES) whose steady state costs the least per
    chunk; `stopped` says which, or "out of time"."""
    search, deadline = Search(complete=False), Deadline.of(deadline)
    try:
        inside = relayed_switches(model, hierarchy)
        found = _best_batch(model, hierarchy, inside, deadline)
        if isinstance(found, str):
            search.stopped = found
            return search
        pieces, program = found
        memo = {}
        add_pipelines(search, lambda batches: relayed_allreduce(
            model, hierarchy, inside, batches, pieces, program, memo), limits, deadline,
            DEPTHS)
        search.stopped = search.stopped or f"{METHOD}, {pieces} pieces a batch"
    except OutOfTime:
        search.stopped = "out of time"
    return search


def _best_batch(model, hierarchy, inside, deadline
                ) -> tuple[int, tuple[Step, ...]] | str:
    """(pieces, program): the greedy plans' prefix whose steady state costs the least
    per chunk, priced exactly for the PRICED prefixes whose network loads promise the
    least (their highest load, rounded up to whole rounds, per piece), from at most
    MAX_PIECES, fewer where the time left affords no more; else why not."""
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    crossings = sum(map(len, options(model, hierarchy.boxes).values())) / max(1, k - 1)
    pieces, per_piece = MAX_PIECES, g * k * crossings  # crossings weighed for one piece
    while pieces > g and not deadline.affords(WEIGH.seconds(pieces * per_piece)):
        pieces //= 2
    if not deadline.affords(WEIGH.seconds(pieces * per_piece)):
        return f"not built: about {WEIGH.seconds(pieces * per_piece):.0f} s to balance it"
    with WEIGH.timing(pieces * per_piece):
        chosen, peaks = plans(model, hierarchy, pieces, deadline)
    if not chosen:
        return "some box reaches no owner of a piece across the network"
    promising = sorted(range(1, len(chosen) + 1),
                       key=lambda p: (math.ceil(peaks[p - 1] - 1e-9) / p, p))[:PRICED]
    best = None
    for p in promising:
        deadline.check("pricing a batch")
        program = relayed_program(model, hierarchy, inside, chosen[:p])
        cost = steady_cost(model, program, p)
        if best is None or (cost, p) < (best[0], best[1]):
            best = (cost, p, program)
    return best[1], best[2]
