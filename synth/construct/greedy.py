"""Greedy link-chunk matching: fast schedules on any graph (TACOS's idea, in synth's steps).

Every rank v that still lacks chunks takes, on each link into it, as many chunks as the
link carries in a step (one round, or the few in which the slowest link carries a whole
chunk), each one the link's source holds, v lacks, and no other link brings v in the
same step; of those, the rarest (fewest holders), the lowest-numbered on ties. A rank's
links are matched fewest choices first, so that a link with few candidates is not left
idle by one that had many. Groups (shared ports, NICs) cap the
chunks their links carry in the step. Nothing is searched: a collective's schedule
comes out of one pass, and on a uniform graph it needs about (N - 1) C / (in-degree)
steps for C chunks per share (torus:16x16, C = 1: 65 steps, 1.02 x the bound).

Built directly: allgather and broadcast. Reducescatter and reduce are the same on the
reversed links, run backwards (the duality of synth.schedule.transform: exact here, as
a rank receives each chunk once and its holders never receive it back); allreduce is
reducescatter then allgather.

Cost: per step and link, a few operations on bitsets of N x C bits (chunks kept by how
many ranks hold them, so the rarest candidate is a few ANDs away): O(steps x links x
N C / 64) word operations; torus:32x32 (1024 ranks, C = 1) takes seconds.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

from synth.schedule.collectives import make_collective
from synth.schedule.file import verified
from synth.schedule.ir import Schedule, Send, Step
from synth.schedule.transform import compose_allreduce, reverse_model, reverse_schedule
from synth.search.pareto import Limits, Point, Search
from synth.topology.linkmodel import LinkModel, switch_rounds

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
CHUNKS = (1, 2, 4, 8)  # chunks per share tried, in order, while time and size allow
MAX_SENDS = 2_200_000  # in one schedule: about 0.3 GB as Python objects, verified in ~1 min


class OutOfTime(Exception):
    """The deadline passed while a schedule was being built."""


def greedy_search(model: LinkModel, name: str, root: int | None, limits: Limits,
                  deadline: float | None = None, bound: Fraction | None = None) -> Search:
    """`name` by greedy matching at each chunk count of CHUNKS in turn, each schedule
    verified; None is `proven`. More chunks pipeline better, up to a point: it stops
    when a count does not beat the last in rounds per chunk, at `bound` (rounds per
    chunk), at MAX_SENDS or the step limit, and at the deadline, keeping what it built."""
    search = Search()
    if name not in COLLECTIVES:
        search.stopped = f"{name} is not built greedily (only {', '.join(COLLECTIVES)})"
        return search
    search.stopped = f"built at {', '.join(map(str, CHUNKS))} chunks a share"
    last = None  # rounds per chunk of the last schedule built
    for chunks in CHUNKS:
        if _sends(model.ranks, name, chunks) > MAX_SENDS:
            search.stopped = f"stopped before {chunks} chunks a share: over {MAX_SENDS:,} sends"
            break
        try:
            schedule = build(model, name, root, chunks, deadline)
        except OutOfTime:
            search.stopped, search.complete = "out of time", False
            break
        except KeyboardInterrupt:
            search.stopped, search.complete = "interrupted", False
            break
        if schedule is None:
            search.stopped = "some rank cannot be reached"
            break
        point = Point(schedule, proven=False)
        if limits.max_steps and point.steps > limits.max_steps:
            search.stopped = f"past the step limit at {chunks} chunks a share"
            break
        if last is not None and point.ratio >= last:
            search.stopped = f"{chunks} chunks a share did no better than {chunks // 2}"
            break
        last = point.ratio
        if point.steps >= limits.min_steps:  # the range asked for (--steps)
            search.points.append(replace(point, schedule=verified(schedule)))
        if bound is not None and point.ratio <= bound:
            search.stopped = "reached the bandwidth bound"
            break
    return search


def _sends(ranks: int, name: str, chunks: int) -> int:
    """Sends a schedule of `name` holds: each rank receives each chunk it lacks once."""
    per_phase = (ranks - 1) * chunks * (ranks if name in ("allgather", "reducescatter",
                                                          "allreduce") else 1)
    return 2 * per_phase if name == "allreduce" else per_phase


def build(model: LinkModel, name: str, root: int | None, chunks: int,
          deadline: float | None = None) -> Schedule | None:
    """The greedy schedule of `name` with `chunks` chunks per share (allreduce: per rank
    and phase, so N x chunks in all), or None when some rank cannot be reached."""
    if name == "allreduce":
        rs = build(model, "reducescatter", None, chunks, deadline)
        ag = rs and build(model, "allgather", None, chunks, deadline)
        if ag is None:
            return None
        schedule = compose_allreduce(rs, ag)
        return replace(schedule, info={"method": f"greedy, {chunks} chunk(s) a share",
                                       "greedy": chunks})
    dual = name in ("reducescatter", "reduce")
    spread = {"reducescatter": "allgather", "reduce": "broadcast"}.get(name, name)
    on = reverse_model(model) if dual else model
    coll = make_collective(spread, model.ranks, chunks, root)
    steps = _match(on, coll.pre_ranges(), coll.post_ranges(), deadline)
    if steps is None:
        return None
    schedule = Schedule(coll, on, steps, {"method": f"greedy, {chunks} chunk(s) a share",
                                          "greedy": chunks})
    return reverse_schedule(schedule, model) if dual else schedule


def _match(model: LinkModel, pre, post, deadline) -> tuple[Step, ...] | None:
    """Steps that take every rank from `pre` to `post` ((rank, first chunk, count)
    runs) by greedy matching; None when a step moves nothing before every rank is done."""
    n = model.ranks
    have, want = [0] * n, [0] * n
    for rank, first, count in pre:
        have[rank] |= ((1 << count) - 1) << first
    for rank, first, count in post:
        want[rank] |= ((1 << count) - 1) << first
    rarity = _Rarity(have)
    into, budget, groups_of, span = _links(model)
    steps = []
    while any(want[v] & ~have[v] for v in range(n)):
        if deadline is not None and time.monotonic() > deadline:
            raise OutOfTime
        left = dict(budget["group"])
        sends = []
        for v in range(n):
            if want[v] & ~have[v]:
                sends += _fill(v, into[v], have, want[v], rarity, budget["link"], left,
                               groups_of)
        if not sends:
            return None
        for x in sends:
            have[x.dst] |= 1 << x.chunk
            rarity.one_more(x.chunk)
        # in one-round steps every link carries at most its whole chunks a round
        rounds = 1 if span == 1 else switch_rounds(model, (), tuple(sends))
        steps.append(Step(rounds, tuple(sends)))
    return tuple(steps)


class _Rarity:
    """The chunks by how many ranks hold them: one bitset per count, so that the rarest
    of a set is found by a few ANDs (lowest count first), not a scan of the set."""

    def __init__(self, have: list[int]):
        self.count: dict[int, int] = {}
        for h in have:
            while h:
                low = h & -h
                chunk = low.bit_length() - 1
                self.count[chunk] = self.count.get(chunk, 0) + 1
                h ^= low
        self.level = [0] * (len(have) + 2)
        for chunk, c in self.count.items():
            self.level[c] |= 1 << chunk
        self.lowest = min(self.count.values(), default=0)  # no chunk is rarer: counts only grow

    def one_more(self, chunk: int) -> None:
        c = self.count[chunk] = self.count.get(chunk, 0) + 1
        self.level[c - 1] &= ~(1 << chunk)
        self.level[c] |= 1 << chunk
        while self.lowest < len(self.level) - 1 and not self.level[self.lowest]:
            self.lowest += 1

    def rarest(self, candidates: int) -> int | None:
        """The lowest-numbered of the candidates held by the fewest ranks."""
        if not candidates:
            return None
        for c in range(self.lowest, len(self.level)):
            found = candidates & self.level[c]
            if found:
                return (found & -found).bit_length() - 1
        return None


def _fill(v, sources, have, wanted, rarity, link_budget, left, groups_of):
    """The sends into v this step (module docstring: fewest choices first, rarest)."""
    lacking = wanted & ~have[v]
    options = sorted(((have[u] & lacking).bit_count(), u) for u in sources)
    taken, sends = 0, []
    for _, u in options:
        for _ in range(link_budget[u, v]):
            groups = groups_of.get((u, v), ())
            if any(left[g] <= 0 for g in groups):
                break
            chunk = rarity.rarest(have[u] & lacking & ~taken)
            if chunk is None:
                break
            taken |= 1 << chunk
            for g in groups:
                left[g] -= 1
            sends.append(Send(chunk, u, v))
    return sends


def _links(model: LinkModel):
    """Per rank its sources; the whole chunks each link and group carries in a step of
    `span` rounds, the fewest in which the slowest link carries one; each link's
    groups; span."""
    span = max(1, math.ceil(1 / min((l.capacity for l in model.links), default=1)))
    into, links = defaultdict(list), {}
    for l in model.links:
        into[l.dst].append(l.src)
        links[l.src, l.dst] = math.floor(l.capacity * span)
    groups, groups_of = {}, defaultdict(list)
    for g in model.groups:
        groups[g.name] = math.floor(g.capacity * span)
        for link in g.links:
            groups_of[link].append(g.name)
    return into, {"link": links, "group": groups}, groups_of, span
