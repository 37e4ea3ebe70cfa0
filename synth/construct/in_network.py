"""Allreduce computed by the switch: NVLink SHARP (NVLS) inside an NVSwitch box.

Where one switch that can reduce and multicast joins every pair of ranks (dgxh100's
NVSwitch, `can: [reduce, multicast]`), allreduce needs no GPU to add anything. Rank r
owns shard r of each batch (`pieces` chunks):

    step 1   switch_reduce: the switch sums every rank's copy of shard r into rank r
    step 2   multicast: rank r stores the sum of shard r to every other rank

A rank's port carries (N-1) pieces up and 1 down in step 1, 1 up and (N-1) down in
step 2. Pipelined, batch b's step 1 runs beside batch b-1's step 2, so each port
carries N pieces each way per step: with N x pieces a multiple of the port's capacity
that is exactly the in-network bound (one chunk each way per chunk of the buffer,
synth.bounds._in_network_allreduce), where a GPU allreduce needs 2(N-1)/N.

The switch pays a source's (or destination's) port once per operation, however many
ranks it reaches: `switch_rounds` prices a step by that rule, which is the schedule
file's (version 3); the verifier checks it on its own.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

from synth.construct.tree_schedules import DEPTHS, add_pipelines
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Pipeline, Schedule, Step, SwitchOp
from synth.search.pareto import Limits, Search
from synth.topology.linkmodel import LinkModel, Switch

MAX_PIECES = 64  # chunks of a shard per batch, to fill a port of fractional capacity
METHOD = "in-network (NVLS): switch reduce, then multicast"


def reducing_switch(model: LinkModel) -> Switch | None:
    """A switch that reduces and multicasts between every ordered pair of ranks."""
    pairs = {(a, b) for a in range(model.ranks) for b in range(model.ranks) if a != b}
    return next((w for w in model.switches if {"reduce", "multicast"} <= set(w.can)
                 and pairs <= set(w.links)), None)


def switch_rounds(model: LinkModel, ops: list[SwitchOp]) -> int:
    """Rounds for `ops` at once: each link carries count per operation using it, and so
    does each group per link, but for the switch's port the operation pays once (a
    reduction: its dst's down port; a multicast: its src's up port; Switch)."""
    link_load, group_load = Counter(), Counter()
    group_of = {}
    for g in model.groups:
        for pair in g.links:
            group_of.setdefault(pair, []).append(g.name)
    ports = {w.name: (dict(w.up), dict(w.down)) for w in model.switches}
    for op in ops:
        up, down = ports[op.via]
        once = (down.get(op.dsts[0]) if op.op == "switch_reduce" else up.get(op.srcs[0]))
        for pair in op.pairs():
            link_load[pair] += op.count
            for name in group_of.get(pair, ()):
                if name != once:
                    group_load[name] += op.count
        if once is not None and any(once in group_of.get(pair, ()) for pair in op.pairs()):
            group_load[once] += op.count
    capacity = {g.name: g.capacity for g in model.groups}
    need = [Fraction(load) / model.link[pair].capacity for pair, load in link_load.items()]
    need += [Fraction(load) / capacity[name] for name, load in group_load.items()]
    return max(1, math.ceil(max(need, default=0)))


def nvls_allreduce(model: LinkModel, switch: Switch, batches: int, pieces: int) -> Schedule:
    """The two-step allreduce (module docstring) in `batches` pipelined batches of
    `pieces` chunks per shard."""
    n, everyone = model.ranks, tuple(range(model.ranks))
    stride = n * pieces
    reduce = [SwitchOp("switch_reduce", r * pieces, everyone, (r,), switch.name, pieces)
              for r in everyone]
    spread = [SwitchOp("multicast", r * pieces, (r,), tuple(d for d in everyone if d != r),
                       switch.name, pieces) for r in everyone]
    program = (Step(switch_rounds(model, reduce), (), tuple(reduce)),
               Step(switch_rounds(model, spread), (), tuple(spread)))
    coll = make_collective("allreduce", n, stride * batches)
    info = {"method": METHOD + (f", {batches} batches" if batches > 1 else "")}
    if batches == 1:
        return Schedule(coll, model, program, info)
    both = switch_rounds(model, reduce + spread)  # batch b's step 1 beside b-1's step 2
    rounds = (program[0].rounds,) + (both,) * (batches - 1) + (program[1].rounds,)
    return Schedule(coll, model, program, info, Pipeline(batches, stride, rounds))


def port_pieces(model: LinkModel) -> int:
    """The fewest pieces per shard that fill the ports: N x pieces a multiple of the
    narrowest port's capacity (1 where none is found up to MAX_PIECES)."""
    port = min(g.capacity for g in model.groups) if model.groups else Fraction(1)
    return next((p for p in range(1, MAX_PIECES + 1)
                 if (model.ranks * p / port).denominator == 1), 1)


def nvls_search(model: LinkModel, limits: Limits, deadline: float | None = None) -> Search:
    """The NVLS allreduce at every pipeline depth within the step limits, each verified,
    with the fewest pieces per shard that fill the ports (N x pieces a multiple of the
    port's capacity); `stopped` says why there is none."""
    search = Search(complete=False)
    switch = reducing_switch(model)
    if switch is None:
        search.stopped = "no switch reduces and multicasts between every pair of ranks"
        return search
    pieces = port_pieces(model)
    add_pipelines(search, lambda batches: nvls_allreduce(model, switch, batches, pieces),
                  limits, deadline, DEPTHS)
    search.stopped = f"{METHOD} via {switch.name}, {pieces} pieces a shard"
    return search
