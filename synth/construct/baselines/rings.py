"""NCCL-style rings: pack directed Hamiltonian cycles, then run the textbook ring
algorithm on each, the data split evenly across them.

A channel is one ring instance carrying one chunk per link per step. A link of capacity
k (and a group of capacity k) may carry up to k x R channels when every step is given R
rounds; on a switch one cycle can therefore carry several channels (one cycle on dgx2
fills each 6-wide port with 6 channels) and that is preferred over distinct cycles,
which would cost the same. A fractional capacity p/q is kept whole by a budget of q
rounds (a 24 GB/s NIC at a 25 GB/s unit: 24 channels in 25 rounds, not 3 in 4). The
packing is greedy and bounded (see `pack_rings`).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from synth.construct.baselines.baseline import Baseline, too_many_sends
from synth.construct.baselines.graphs import hamiltonian_cycle
from synth.construct.moves import (assemble, capacity_tables, chain_broadcast, chain_reduce,
                                   in_parallel, ring_allgather, ring_allreduce,
                                   ring_reducescatter, scaled_rounds)
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel

MAX_CHANNELS = 24  # ring instances per round of the budget (dgxh100's 18-wide ports need 18)
MAX_BUDGET = 32  # rounds per step tried at most: capacities of denominator <= 32 kept exact
MAX_SEARCHES = 12  # Hamiltonian-cycle searches per packing attempt
RESTARTS = 2  # extra randomized packings for small topologies (<= 16 ranks)
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


@dataclass(frozen=True)
class RingPacking:
    channels: tuple[tuple[int, ...], ...]  # one cycle per channel; a cycle may repeat
    rounds: int  # rounds of a step in which every channel sends once on each of its links

    @property
    def distinct(self) -> int:
        return len(set(self.channels))


def ring_baseline(model: LinkModel, collective: str, root: int | None) -> Baseline | str:
    """The ring baseline for `collective`, or why there is none.

    C = channels (allgather, reducescatter), channels x N (allreduce), channels x (N-1)
    (broadcast and reduce: each channel pipelines N-1 chunks along its ring, 2N-3 steps).
    """
    if collective not in COLLECTIVES:
        return f"no ring algorithm for {collective}"
    packing = pack_rings(model)
    if packing is None:
        return f"no Hamiltonian cycle found in {model.ranks} ranks' links within the search budget"
    n, k = model.ranks, len(packing.channels)
    channels = packing.channels
    # each channel's chunks cross n - 1 links (allreduce: twice); a chain's n - 1 chunks too
    per_channel = {"allgather": n * (n - 1), "reducescatter": n * (n - 1),
                   "allreduce": 2 * n * (n - 1)}.get(collective, (n - 1) ** 2)
    refused = too_many_sends(k * per_channel)
    if refused:
        return refused
    if collective in ("allgather", "reducescatter"):
        step = ring_allgather if collective == "allgather" else ring_reducescatter
        moves = in_parallel(*(step(cycle, {r: [r * k + j] for r in range(n)})
                              for j, cycle in enumerate(channels)))
        chunks = k
    elif collective == "allreduce":
        moves = in_parallel(*(ring_allreduce(cycle, list(range(j * n, (j + 1) * n)))
                              for j, cycle in enumerate(channels)))
        chunks = k * n
    else:
        depth = n - 1  # pipeline depth per channel
        parts = []
        for j, cycle in enumerate(channels):
            at = cycle.index(root)
            mine = list(range(j * depth, (j + 1) * depth))
            if collective == "broadcast":
                parts.append(chain_broadcast(cycle[at:] + cycle[:at], mine))
            else:  # reduce: the chain ends at root
                parts.append(chain_reduce(cycle[at + 1:] + cycle[:at + 1], mine))
        moves = in_parallel(*parts)
        chunks = k * depth
    d = packing.distinct
    name = f"ring x{d}" if k == d else f"ring x{d} ({k} channels)"
    info = {"algorithm": "ring", "rings": [list(c) for c in sorted(set(channels))],
            "channels": k, "rounds_per_step": packing.rounds}
    return Baseline(name, assemble(model, collective, chunks, root, moves, info), "ring")


@lru_cache(maxsize=32)
def pack_rings(model: LinkModel) -> RingPacking | None:
    """The best greedy packing of ring channels, or None if no Hamiltonian cycle is found.

    For each round budget R (`budgets`), channels are added while every link and group
    stays within capacity x R (at most MAX_CHANNELS x R of them): first seed cycles
    (rank order, and box-by-box orders on multi-box topologies), then cycles found by a
    bounded depth-first search in what capacity is left; each found cycle is repeated
    while it fits, then its reverse. The best packing has the fewest rounds per
    channel, then the fewest channels.
    Cost: at most |budgets| (<= 4 + distinct denominators) x (1 + RESTARTS) x
    MAX_SEARCHES searches of HAMILTON_BUDGET pushes each; the channels, and so the
    schedule, grow with R (192 channels for 24 GB/s NICs at a 25 GB/s unit on dgxa100x2).
    """
    attempts = [None] + ([random.Random(seed) for seed in range(RESTARTS)]
                         if model.ranks <= 16 else [])
    seeds = _seed_cycles(model)
    best = None
    for budget in budgets(model):
        for rng in attempts:
            channels = _pack(model, budget, seeds, rng)
            if not channels:
                continue
            load = Counter(e for c in channels for e in _edges(c))
            rounds = scaled_rounds(model, load)
            key = (Fraction(rounds, len(channels)), len(channels))
            if best is None or key < best[0]:
                best = (key, RingPacking(tuple(channels), rounds))
    return best[1] if best else None


def budgets(model: LinkModel) -> tuple[int, ...]:
    """Rounds per step worth trying: 1; with fractional capacities also 2..4 and, for
    each capacity p/q, the R <= MAX_BUDGET at which it carries the most channels per
    round, floor(p/q x R) / R: R = q when q <= MAX_BUDGET (then the fraction is kept
    whole), else the best approximation from below (documented loss, under 1/MAX_BUDGET
    of a unit)."""
    caps = {l.capacity for l in model.links} | {g.capacity for g in model.groups}
    fractions = {c for c in caps if c.denominator != 1}
    if not fractions:
        return (1,)
    out = {1, 2, 3, 4}
    for c in fractions:
        out.add(max(range(1, MAX_BUDGET + 1),
                    key=lambda r: (Fraction(math.floor(c * r), r), -r)))
    return tuple(sorted(out))


def _edges(cycle):
    return [(cycle[i], cycle[(i + 1) % len(cycle)]) for i in range(len(cycle))]


def _pack(model: LinkModel, budget: int, seeds, rng) -> list[tuple[int, ...]]:
    room = {pair: l.capacity * budget for pair, l in model.link.items()}
    group_room = {i: g.capacity * budget for i, g in enumerate(model.groups)}
    groups_of = capacity_tables(model)[0]
    channels: list[tuple[int, ...]] = []
    most = MAX_CHANNELS * budget

    def fits(cycle):
        use = Counter()
        for e in _edges(cycle):
            if room.get(e, 0) < 1:
                return False
            for g in groups_of.get(e, ()):
                use[g] += 1
        return all(group_room[g] >= count for g, count in use.items())

    def take_while_fits(cycle):
        at = cycle.index(min(cycle))
        cycle = cycle[at:] + cycle[:at]  # one name per cycle: lowest rank first
        while len(channels) < most and fits(cycle):
            channels.append(cycle)
            for e in _edges(cycle):
                room[e] -= 1
                for g in groups_of.get(e, ()):
                    group_room[g] -= 1

    for cycle in seeds:
        take_while_fits(cycle)
    for _ in range(MAX_SEARCHES):
        if len(channels) >= most:
            break
        succ = {r: [] for r in range(model.ranks)}
        for (a, b), left in room.items():
            if left >= 1:
                succ[a].append(b)
        cycle = hamiltonian_cycle(range(model.ranks), succ, weight=room, edge_groups=groups_of,
                                  group_room={g: math.floor(x) for g, x in group_room.items()},
                                  rng=rng)
        if cycle is None:
            break
        take_while_fits(cycle)
        take_while_fits(tuple(reversed(cycle)))
    return channels


def _seed_cycles(model: LinkModel) -> list[tuple[int, ...]]:
    """Cycles worth trying before any search: rank order, and on multi-box topologies
    each box in turn, rotated by t (leave box b at local rank t-1, enter box b+1 at t),
    or snaking (odd boxes backwards, so that a box is left and the next entered at the
    same local rank, as rail-only networks need). Each with its reverse; only those
    whose links exist are kept."""
    n = model.ranks
    orders = [tuple(range(n))]
    boxes, _ = find_boxes(model)
    if boxes:
        g = len(boxes[0])
        for t in range(g):
            forward = [b[(t + i) % g] for b in boxes for i in range(g)]
            snake = [b[(t + i) % g] if index % 2 == 0 else b[(t - 1 - i) % g]
                     for index, b in enumerate(boxes) for i in range(g)]
            orders += [tuple(forward), tuple(snake)]
    seeds = []
    for order in orders:
        for cycle in (order, tuple(reversed(order))):
            if cycle not in seeds and all(e in model.link for e in _edges(cycle)):
                seeds.append(cycle)
    return seeds
