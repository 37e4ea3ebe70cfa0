"""Allgather, reducescatter and allreduce across boxes whose switch multicasts (NVLS),
with every GPU receiving over its NIC and its NVLink ports at once.

Bring each foreign share into a box once through a NIC and multicast it inside, and
every GPU receives all N - 1 shares over NVLink: (N - 1) / c_nv rounds per chunk, where
the bound counts the NIC too, (N - 1) / (c_nv + c_nic) (gb200nvl72x4: 287/18 against
287/19, 1.056 x). Here each share reaches r GPUs of every other box through their
NICs, and one of those multicasts it to the rest of its box. With n GPUs a box and K
boxes, a GPU then receives r (K - 1) shares through its NIC and (nK - 1) - r (K - 1)
over NVLink; r = (nK - 1) c_nic / ((K - 1)(c_nic + c_nv)) balances the two at the
bound. A fractional r is a mix: a share is cut into `pieces`, piece q going to r_q
GPUs, R = sum of r_q (Split).

NICs meet only their rail peers (local rank j of every box), so the r_q GPUs that
carry piece q of local rank i's share across are local ranks i .. i + r_q - 1 (mod n)
of its own box, each sending to its rail peer in every other box. Cyclic windows give
every GPU the same load: each local rank is in R windows of every box's shares. One
batch, three steps:

    1  local rank i multicasts its share in its box (NVLS)
    2  local ranks i .. i + r_q - 1 send piece q to their rail peers in every other box
    3  there local rank i multicasts it to the GPUs of its box outside the window

Pipelined, the three steps of consecutive batches run at once. Reducescatter is the
same turned round (SCCL's duality: copies become reductions, a multicast a switch
reduction, run from the last step to the first). Allreduce is the reducescatter's
three steps then the allgather's, pipelined, so that the reductions of one batch run
beside the multicasts of an earlier one; its NICs carry both, so it balances at a
larger r than the allgather, short of the in-network bound (by how much, and why no
schedule gets much closer: docs/guide/05-in-network.md).

The reducescatter is turned round here (turned) rather than by
synth.schedule.transform.reverse_schedule, which wants the allgather built on the
reversed model: each turned step is priced on the model itself, and the verifier
checks the result like any schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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

COLLECTIVES = ("allgather", "reducescatter", "allreduce")
MAX_PIECES = 32  # of a share per batch: enough for r within 1/32 of the balance
MAX_SENDS = 1_100_000  # of a batch program, as synth.construct.in_network's
PRICED = 4  # splits priced exactly, of those the per-GPU loads promise the least
# building and pricing a program, per rank its operations and sends name (an idle
# core's pace, about that of the in-network programs across boxes)
BUILD = Pace(1.3e-5, least=10_000)
METHOD = "in-network (NVLS, shares also through the NICs)"


@dataclass(frozen=True)
class Split:
    """A share cut into `pieces`, carried across by R GPUs of a box in all: the first
    R mod pieces by one GPU more than the others."""

    pieces: int
    forwarders: int  # R, the sum over pieces of the GPUs carrying each across

    def ranges(self) -> list[tuple[int, int, int]]:
        """(first piece, pieces, GPUs carrying each across): at most two runs."""
        r, extra = divmod(self.forwarders, self.pieces)
        runs = [(0, extra, r + 1), (extra, self.pieces - extra, r)]
        return [run for run in runs if run[1] > 0]


def nic_switches(model: LinkModel, hierarchy: Hierarchy | None) -> list | None:
    """Per box its switch that reduces and multicasts, where there are two boxes or
    more, every GPU crosses the network itself (no gateways) and every rail peer
    pair is linked both ways; else None."""
    if hierarchy is None or hierarchy.proxy or len(hierarchy.boxes) < 2:
        return None
    links = model.link
    if any((a, b) not in links for group in hierarchy.peers for a in group for b in group
           if a != b):
        return None
    inside = [capable_switch(model, box) for box in hierarchy.boxes]
    return inside if all(inside) else None


def allgather_program(model: LinkModel, hierarchy: Hierarchy, inside, split: Split
                      ) -> tuple[Step, ...]:
    """One batch (module docstring), piece q of rank s's share being chunk s x pieces
    + q (renumbered for a pipeline by _renumbered)."""
    boxes, p = hierarchy.boxes, split.pieces
    n = len(boxes[0])
    steps = [[], [], []]
    for a, box in enumerate(boxes):
        for i, src in enumerate(box):
            share = src * p
            steps[0].append(SwitchOp("multicast", share, (src,),
                                     tuple(x for x in box if x != src), inside[a].name, p))
            for first, count, r in split.ranges():
                window = [(i + t) % n for t in range(r)]
                for b, other in enumerate(boxes):
                    if b == a:
                        continue
                    steps[1] += [Send(share + first, box[j], other[j], "copy", count)
                                 for j in window]
                    rest = tuple(x for j, x in enumerate(other) if j not in window)
                    if rest:
                        steps[2].append(SwitchOp("multicast", share + first, (other[i],),
                                                 rest, inside[b].name, count))
    return tuple(step_of(model, moves) for moves in steps)


def turned(model: LinkModel, program: tuple[Step, ...]) -> tuple[Step, ...]:
    """An allgather program run backwards as a reducescatter (SCCL's duality): each
    copy a reduction the other way, each multicast a switch reduction into its source,
    the steps in reverse order, priced on `model`."""
    out = []
    for step in reversed(program):
        sends = [replace(x, src=x.dst, dst=x.src, op="reduce") for x in step.sends]
        ops = [SwitchOp("switch_reduce", x.chunk, x.dsts, x.srcs, x.via, x.count)
               for x in step.switch_ops]
        out.append(step_of(model, sends + ops))
    return tuple(out)


def _renumbered(program: tuple[Step, ...], pieces: int, chunks: int) -> tuple[Step, ...]:
    """The program with piece q of rank s's share as chunk s x chunks + q (a share of
    `chunks` chunks, the pipeline's batches after the first taking the next pieces)."""
    if chunks == pieces:
        return program

    def moved(x):
        return replace(x, chunk=x.chunk // pieces * chunks + x.chunk % pieces)
    return tuple(Step(s.rounds, tuple(map(moved, s.sends)), tuple(map(moved, s.switch_ops)))
                 for s in program)


def program_of(model: LinkModel, hierarchy: Hierarchy, inside, name: str,
               split: Split) -> tuple[Step, ...]:
    """One batch of `name`: the allgather's steps, or turned round, or both (allreduce:
    chunk s x pieces + q, reduced into rank s, then spread)."""
    gather = allgather_program(model, hierarchy, inside, split)
    if name == "allgather":
        return gather
    reduce = turned(model, gather)
    return reduce if name == "reducescatter" else reduce + gather


def nic_schedule(model: LinkModel, name: str, split: Split, batches: int,
                 program: tuple[Step, ...], memo: dict | None = None) -> Schedule:
    """`program` (program_of) pipelined over `batches`."""
    p, ranks = split.pieces, model.ranks
    if name == "allreduce":
        coll = make_collective(name, ranks, ranks * p * batches)
        steps, stride = program, ranks * p
    else:
        coll = make_collective(name, ranks, p * batches)
        steps, stride = _renumbered(program, p, p * batches), p
    info = {"method": METHOD + (f", {batches} batches" if batches > 1 else ""),
            "pieces": p, "forwarders": split.forwarders}
    return pipelined_schedule(model, coll, steps, batches, stride, info, memo)


def capacities(model: LinkModel, hierarchy: Hierarchy, inside) -> tuple[Fraction, Fraction]:
    """(c_nv, c_nic): what a GPU receives per round through its switch port, and through
    its NIC from the other K - 1 boxes together (the tightest of the rail links and the
    groups they share), for choosing splits before pricing them exactly."""
    boxes, k = hierarchy.boxes, len(hierarchy.boxes)
    x, y = boxes[0][0], boxes[1][0]
    capacity = {g.name: Fraction(g.capacity) for g in model.groups}
    port = dict(inside[0].down).get(x)
    nv = capacity.get(port, Fraction(model.link[(boxes[0][1], x)].capacity))
    nic = Fraction(model.link[(x, y)].capacity) * (k - 1)
    for g in model.groups:
        if (x, y) in g.links:  # x's NIC out, or y's in: how many rail links share it
            shared = max(sum((x, b[0]) in g.links for b in boxes),
                         sum((b[0], y) in g.links for b in boxes))
            nic = min(nic, capacity[g.name] * (k - 1) / shared)
    return nv, nic


def sends(name: str, n: int, k: int, split: Split) -> int:
    """Sends of one batch's program (step 2's; each half of an allreduce has them)."""
    across = k * n * (k - 1) * sum(r for _, _, r in split.ranges())
    return across * (2 if name == "allreduce" else 1)


def size(name: str, n: int, k: int, split: Split) -> int:
    """Units of work in building and pricing one batch's program: its sends and the
    ranks its switch operations name (steps 1 and 3, about n each)."""
    named = k * n * n * (1 + (k - 1) * len(split.ranges()))
    return sends(name, n, k, split) + named * (2 if name == "allreduce" else 1)


def loads(name: str, n: int, k: int, split: Split) -> tuple[int, int]:
    """(NIC, NVLink) chunks a GPU receives per batch in the steady state (module
    docstring); allreduce: its reductions' sends and its multicasts' receives, the
    larger direction of each."""
    p, r = split.pieces, split.forwarders
    nic, nvlink = (k - 1) * r, p * (n * k - 1) - (k - 1) * r
    if name == "allreduce":  # the other half's NIC both ways, its multicasts' sources
        return 2 * nic, nvlink + k * p
    return nic, nvlink


def balance(name: str, n: int, k: int, nv: Fraction, nic: Fraction) -> Fraction:
    """The GPUs of a box a share should reach through their NICs (r, fractional) for
    NIC and NVLink to carry their loads in the same time: (k-1) r m / nic =
    (nk - 1 - (k-1) r + extra) / nv, m and extra those of the allreduce's two halves."""
    m, extra = (2, k) if name == "allreduce" else (1, 0)
    return (n * k - 1 + extra) * nic / ((k - 1) * (m * nv + nic))


def candidates(name: str, n: int, k: int, nv: Fraction, nic: Fraction) -> list[Split]:
    """The splits of up to MAX_PIECES pieces whose estimated rounds per piece are
    least (the fewest pieces among equals), PRICED of them: per piece count the two R
    either side of the balance, none with more than MAX_SENDS sends a batch."""
    found, r = set(), balance(name, n, k, nv, nic)
    for p in range(1, MAX_PIECES + 1):
        for forwarders in (math.floor(p * r), math.ceil(p * r)):
            split = Split(p, min(max(forwarders, p), p * n))
            if sends(name, n, k, split) <= MAX_SENDS:
                found.add(split)

    def estimate(split: Split):
        a, b = loads(name, n, k, split)
        return Fraction(max(math.ceil(a / nic), math.ceil(b / nv)), split.pieces), split.pieces
    return sorted(found, key=lambda s: (estimate(s), s.forwarders))[:PRICED]


def best_split(model: LinkModel, hierarchy: Hierarchy, inside, name: str,
               deadline: Deadline) -> tuple[Split, tuple[Step, ...]] | None:
    """Of the candidates, the split whose steady state (every step of the program at
    once) costs the least per piece, the fewest pieces among equals, and its program:
    of those the time left affords at the pace measured so far; OutOfTime if none,
    None where there is no candidate."""
    n, k = len(hierarchy.boxes[0]), len(hierarchy.boxes)
    nv, nic = capacities(model, hierarchy, inside)
    best = None
    for split in candidates(name, n, k, nv, nic):
        units = size(name, n, k, split)
        if not deadline.affords(BUILD.seconds(units)):
            if best is None:
                raise OutOfTime("choosing how a share crosses the NICs")
            break
        with BUILD.timing(units):
            program = program_of(model, hierarchy, inside, name, split)
            cost = Fraction(together(model, program).rounds, split.pieces)
        if best is None or (cost, split.pieces) < best[:2]:
            best = (cost, split.pieces, split, program)
    return best and (best[2], best[3])


def nic_applies(model: LinkModel, name: str, hierarchy: Hierarchy | None) -> list | None:
    """Per box its switch (nic_switches), where `name` is one of COLLECTIVES and its
    balance has a share reach more than one GPU of a box through the NICs (else one
    NIC crossing per box, which the decomposition and trees already pipeline, is
    what the NICs can carry); else None."""
    inside = nic_switches(model, hierarchy) if name in COLLECTIVES else None
    if inside is None:
        return None
    nv, nic = capacities(model, hierarchy, inside)
    return inside if balance(name, len(hierarchy.boxes[0]), len(hierarchy.boxes), nv,
                             nic) > 1 else None


def nic_search(model: LinkModel, name: str, limits: Limits,
               deadline: Deadline | float | None, hierarchy: Hierarchy | None) -> Search:
    """`name` through the NICs and NVLS at once (module docstring) at every pipeline
    depth within the limits, each verified; `stopped` says how, why it does not apply,
    or "out of time"."""
    search, deadline = Search(complete=False), Deadline.of(deadline)
    inside = nic_applies(model, name, hierarchy)
    if inside is None:
        search.stopped = "no alike boxes around multicasting switches whose NICs could carry more"
        return search
    try:
        found = best_split(model, hierarchy, inside, name, deadline)
        if found is None:
            search.stopped = f"every split takes more than {MAX_SENDS:,} sends a batch"
            return search
        split, program = found
        memo = {}
        add_pipelines(search, lambda batches: nic_schedule(model, name, split, batches,
                                                           program, memo),
                      limits, deadline, DEPTHS)
        search.stopped = search.stopped or (
            f"{METHOD}: {split.pieces} pieces a share, {split.forwarders} GPUs of each box "
            "carry them across")
    except OutOfTime:
        search.stopped = "out of time"
    return search
