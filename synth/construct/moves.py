"""Moves: the sends of a constructed schedule, step by step, before rounds are attached.

A Move is (chunk, src, dst, op); Moves are a list of steps, each a list of moves. The
baselines (synth/construct/baselines/) and the decomposition (synth/construct/decompose.py)
build schedules this way. The baselines write their moves with small primitives (a ring
pass, a direct exchange, a tree sweep) that take explicit chunk lists, so one primitive
serves every chunk numbering; `assemble` turns moves into a Schedule whose every step's
rounds come from `synth.topology.linkmodel.min_rounds`.

Lanes: moves written for C0 chunks can be run w times side by side (chunk b becomes
chunks b*w .. b*w + w - 1, which keeps the chunk numbering, since the owner of chunk
b*w + l is still (b*w + l) // (C0*w) = b // C0). Wide links (a switch port of capacity
6 or 18) need several chunks per step to be used fully; `best_lanes` picks w.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np

from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send, Step
from synth.schedule.orbits import last_made
from synth.topology.linkmodel import LinkModel

Move = tuple  # (chunk, src, dst, op)
Moves = list  # list[list[Move]]

MAX_LANES = 24  # bound on w: enough for the widest built-in port (18 links' worth)


# --- composing moves -----------------------------------------------------------------

def in_parallel(*parts: Moves) -> Moves:
    """Step i of the result runs step i of every part; as long as the longest part."""
    length = max((len(p) for p in parts), default=0)
    return [[m for p in parts if i < len(p) for m in p[i]] for i in range(length)]


def in_sequence(*parts: Moves) -> Moves:
    return [step for p in parts for step in p]


def pipelined(parts: list[Moves]) -> Moves:
    """Part i starts at step i, alongside the others: a pipeline over batches (parts
    over disjoint chunks), so each step runs a different stage of several batches."""
    return in_parallel(*([[] for _ in range(i)] + p for i, p in enumerate(parts)))


def pairs(step) -> list[tuple[int, int]]:
    return [(s, d) for _, s, d, _ in step]


def missing_link(model: LinkModel, moves: Moves) -> tuple[int, int] | None:
    """The first (src, dst) the moves send over that is not a link, or None."""
    for step in moves:
        for _, s, d, _ in step:
            if (s, d) not in model.link:
                return (s, d)
    return None


# --- rounds and lanes ----------------------------------------------------------------

_CAPACITY_CACHE: dict[int, tuple] = {}


def capacity_tables(model: LinkModel):
    """(groups_of, link_cap, group_cap): link -> indices of its groups, and capacities
    as (numerator, denominator) pairs for integer-only rounding. Cached per model
    object (by identity: hashing a 1000-link model costs more than the tables)."""
    hit = _CAPACITY_CACHE.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    groups_of: dict[tuple[int, int], list[int]] = {}
    for index, group in enumerate(model.groups):
        for link in group.links:
            groups_of.setdefault(link, []).append(index)
    link_cap = {pair: (l.capacity.numerator, l.capacity.denominator)
                for pair, l in model.link.items()}
    group_cap = [(g.capacity.numerator, g.capacity.denominator) for g in model.groups]
    tables = ({k: tuple(v) for k, v in groups_of.items()}, link_cap, group_cap)
    if len(_CAPACITY_CACHE) > 32:
        _CAPACITY_CACHE.clear()
    _CAPACITY_CACHE[id(model)] = (model, tables)
    return tables


def scaled_rounds(model: LinkModel, load: Counter, lanes: int = 1) -> int:
    """min_rounds of a step whose load (chunks per link) is multiplied by `lanes`.

    The same rule as synth.topology.linkmodel.min_rounds, on counts instead of a pair
    list, so that trying many lane counts costs O(links used + groups) each.
    """
    return rounds_at(demand(model, load), lanes)


def demand(model: LinkModel, load: Counter) -> set[tuple[int, int]]:
    """What a step's load asks of its links and groups, as (chunks x capacity's
    denominator, capacity's numerator) pairs, the largest amount per numerator only
    (ceil(amount x lanes / numerator) grows with the amount): rounds_at prices them at
    any lane count, so a step's links and groups are read once for all lane counts (a
    512-rank exchange has 261,632 links and few distinct pairs). O(links used x their
    groups)."""
    groups_of, link_cap, group_cap = capacity_tables(model)
    most: dict[int, int] = {}
    group_load: Counter = Counter()
    for pair, count in load.items():
        num, den = link_cap[pair]
        most[num] = max(most.get(num, 0), count * den)
        for g in groups_of.get(pair, ()):
            group_load[g] += count
    for g, count in group_load.items():
        num, den = group_cap[g]
        most[num] = max(most.get(num, 0), count * den)
    return {(amount, num) for num, amount in most.items()}


def rounds_at(need: set[tuple[int, int]], lanes: int = 1) -> int:
    """The rounds a step of `need` (demand) takes `lanes` times wider: at least 1, and
    each link's and group's chunks over its capacity, rounded up."""
    return max([1] + [-(-amount * lanes // num) for amount, num in need])


# --- the same, for loads on most of a large machine's links, as arrays ---------------

_ARRAYS: dict = {}  # the last model's (orbits.last_made): at 4096 GPUs they are large


def capacity_arrays(model: LinkModel):
    """(index, link_num, link_den, members, group_num, group_den): each link's position
    in model.links, the links' and groups' capacities as integer arrays, and a groups x
    links matrix counting each group's members (scipy CSR). Made once for the last
    model asked (by identity)."""
    return last_made(_ARRAYS, "capacity arrays", (model,), lambda: _arrays(model))


def _arrays(model: LinkModel):
    from scipy.sparse import csr_matrix

    index = {(l.src, l.dst): i for i, l in enumerate(model.links)}
    rows = [g for g, group in enumerate(model.groups) for _ in group.links]
    cols = [index[link] for group in model.groups for link in group.links]
    members = csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)),
                         shape=(len(model.groups), len(model.links)))

    def ints(values):
        return np.array(list(values), dtype=np.int64)
    return (index, ints(l.capacity.numerator for l in model.links),
            ints(l.capacity.denominator for l in model.links), members,
            ints(g.capacity.numerator for g in model.groups),
            ints(g.capacity.denominator for g in model.groups))


def load_array(model: LinkModel, load: Counter) -> np.ndarray:
    """A load (chunks per link, by (src, dst)) as chunks per link in model.links order."""
    index = capacity_arrays(model)[0]
    out = np.zeros(len(model.links), dtype=np.int64)
    if load:
        at = np.fromiter((index[pair] for pair in load), dtype=np.int64, count=len(load))
        out[at] = np.fromiter(load.values(), dtype=np.int64, count=len(load))
    return out


def array_demand(model: LinkModel, chunks: np.ndarray) -> set[tuple[int, int]]:
    """demand() of a load given as load_array's: the same pairs, counted with arrays (a
    window of a 4096-GPU batch loads 2.1 million links: 2.5 s by dictionary)."""
    _, num, den, members, group_num, group_den = capacity_arrays(model)
    used = chunks > 0
    grouped = members @ chunks
    touched = grouped > 0
    amounts = np.concatenate((chunks[used] * den[used], grouped[touched] * group_den[touched]))
    nums = np.concatenate((num[used], group_num[touched]))
    if not len(nums):
        return set()
    order = np.argsort(nums, kind="stable")
    nums, amounts = nums[order], amounts[order]
    starts = np.flatnonzero(np.r_[True, nums[1:] != nums[:-1]])
    return {(int(a), int(n)) for a, n in zip(np.maximum.reduceat(amounts, starts),
                                             nums[starts])}


def best_lanes(model: LinkModel, moves: Moves, max_lanes: int = MAX_LANES
               ) -> tuple[int, Fraction]:
    """(w, rounds per lane): the lane count w <= max_lanes with the fewest total rounds
    per lane (ties: smallest w).

    Latency does not depend on w (the steps stay the same), so this is the bandwidth
    optimum over w. Cost: O(steps x (links + groups)) to read the steps' demands, then
    O(max_lanes x their distinct pairs).
    """
    needs = [demand(model, Counter(pairs(step))) for step in moves if step]
    best, best_ratio = 1, None
    for w in range(1, max_lanes + 1):
        ratio = Fraction(sum(rounds_at(need, w) for need in needs), w)
        if best_ratio is None or ratio < best_ratio:
            best, best_ratio = w, ratio
    return best, best_ratio


def assemble_widest(model: LinkModel, collective: str, chunks: int, root: int | None,
                    moves: Moves, info: dict) -> Schedule:
    """assemble() of the moves run in best_lanes() lanes: C = chunks x lanes, each move
    one send of its `lanes` consecutive chunks (the chunk numbering keeps them in one
    share), so a schedule of w lanes is no bigger than one of a single lane."""
    lanes, _ = best_lanes(model, moves)
    return assemble(model, collective, chunks * lanes, root, moves, dict(info, lanes=lanes),
                    lanes)


# --- moves -> Schedule ----------------------------------------------------------------

def assemble(model: LinkModel, collective: str, chunks: int, root: int | None,
             moves: Moves, info: dict, lanes: int = 1) -> Schedule:
    """The Schedule of `moves` for `collective` with C = `chunks`; empty steps dropped.
    With `lanes` w, the moves are run w times side by side (module docstring): move c
    becomes one send of chunks c w .. c w + w - 1.

    Each step's rounds are the fewest its load allows (scaled_rounds, the rule of
    synth.topology.linkmodel.min_rounds), so the schedule respects every link and group
    capacity by construction.
    """
    coll = make_collective(collective, model.ranks, chunks, root)
    steps = []
    for step in moves:
        if step:
            sends = tuple(Send(c * lanes, s, d, op, lanes) for c, s, d, op in step)
            steps.append(Step(scaled_rounds(model, Counter(pairs(step)), lanes), sends))
    return Schedule(coll, model, tuple(steps), dict(info))


# --- primitives: each returns a Moves over explicit chunk lists -----------------------
# `owned` maps a rank to the chunks it owns (allgather: starts with; reducescatter: ends
# with the full sum of). Ranks outside a primitive's `ranks` are never touched.

def ring_allgather(cycle, owned) -> Moves:
    """len(cycle) - 1 steps: in step s, cycle[i] forwards what cycle[i - s] owns."""
    n = len(cycle)
    return [[(c, cycle[i], cycle[(i + 1) % n], "copy")
             for i in range(n) for c in owned.get(cycle[(i - s) % n], ())]
            for s in range(n - 1)]


def ring_reducescatter(cycle, owned) -> Moves:
    """len(cycle) - 1 steps: the sum for cycle[t] starts at cycle[t + 1] and travels
    forward, each rank adding its contribution, until it reaches cycle[t]."""
    n = len(cycle)
    return [[(c, cycle[(t + 1 + s) % n], cycle[(t + 2 + s) % n], "reduce")
             for t in range(n) for c in owned.get(cycle[t], ())]
            for s in range(n - 1)]


def ring_allreduce(cycle, chunks) -> Moves:
    """Reducescatter then allgather on `cycle`; len(chunks) must be a multiple of its
    length (each rank owns an equal slice in between)."""
    n = len(cycle)
    per = len(chunks) // n
    owned = {cycle[t]: chunks[t * per:(t + 1) * per] for t in range(n)}
    return in_sequence(ring_reducescatter(cycle, owned), ring_allgather(cycle, owned))


def chain_broadcast(path, chunks) -> Moves:
    """Pipelined: chunk m crosses hop h (path[h] -> path[h+1]) in step m + h;
    len(chunks) + len(path) - 2 steps."""
    hops = len(path) - 1
    moves = [[] for _ in range(len(chunks) + hops - 1)] if hops else []
    for m, c in enumerate(chunks):
        for h in range(hops):
            moves[m + h].append((c, path[h], path[h + 1], "copy"))
    return moves


def chain_reduce(path, chunks) -> Moves:
    """Pipelined towards path[-1]: chunk m's partial sum crosses hop h in step m + h."""
    return [[(c, s, d, "reduce") for c, s, d, _ in step] for step in chain_broadcast(path, chunks)]


def direct_allgather(ranks, owned) -> Moves:
    """One step: every rank sends what it owns to every other rank."""
    return [[(c, s, d, "copy") for s in ranks for c in owned.get(s, ()) for d in ranks if d != s]]


def direct_reducescatter(ranks, owned) -> Moves:
    """One step: every rank adds its contribution into each owner's chunks."""
    return [[(c, s, d, "reduce") for d in ranks for c in owned.get(d, ()) for s in ranks if s != d]]


def direct_allreduce(ranks, chunks) -> Moves:
    """Direct reducescatter then direct allgather: two steps; len(chunks) a multiple of
    len(ranks)."""
    per = len(chunks) // len(ranks)
    owned = {r: chunks[i * per:(i + 1) * per] for i, r in enumerate(ranks)}
    return in_sequence(direct_reducescatter(ranks, owned), direct_allgather(ranks, owned))


def exchange_allreduce(ranks, chunks) -> Moves:
    """One step: every rank adds its whole value into every other rank's (the partial
    sums it holds must have disjoint contributors, as after a reducescatter per box)."""
    return [[(c, s, d, "reduce") for s in ranks for d in ranks if d != s for c in chunks]]


def direct_broadcast(root, ranks, chunks) -> Moves:
    return [[(c, root, d, "copy") for d in ranks if d != root for c in chunks]]


def direct_reduce(root, ranks, chunks) -> Moves:
    return [[(c, s, root, "reduce") for s in ranks if s != root for c in chunks]]


def tree_broadcast(children, root, chunks) -> Moves:
    """The mirror of tree_reduce: as late as possible, a node of height h receives in
    step height(root) - 1 - h, so two trees share links as rarely going down as going
    up; height(root) steps."""
    return [[(c, d, s, "copy") for c, s, d, _ in step]
            for step in reversed(tree_reduce(children, root, chunks))]


def tree_reduce(children, root, chunks) -> Moves:
    """As soon as possible: a node of height h (leaves 0) sends its subtree's sum to its
    parent in step h, after every child has sent; height(root) steps."""
    order, level = [], [root]
    while level:  # breadth-first, so children come after parents
        order.extend(level)
        level = [k for p in level for k in children.get(p, ())]
    height = {}
    for node in reversed(order):
        height[node] = 1 + max((height[k] for k in children.get(node, ())), default=-1)
    moves = [[] for _ in range(height[root])]
    for parent in order:
        for k in children.get(parent, ()):
            moves[height[k]].extend((c, k, parent, "reduce") for c in chunks)
    return moves
