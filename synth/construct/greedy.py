"""Greedy link-chunk matching: fast schedules on any graph (TACOS's idea, in synth's steps).

Every rank v that still lacks chunks takes, on each link into it, as many chunks as the
link carries in a step (one round, or the few in which the slowest link carries a whole
chunk), each one the link's source holds, v lacks, and no other link brings v in the
same step; of those, the rarest (fewest holders), the lowest-numbered on ties. A rank's
links are matched fewest choices first, so that a link with few candidates is not left
idle by one that had many. Groups (shared ports, NICs) cap the chunks their links carry
in the step. Nothing is searched: a collective's schedule comes out of one pass, and on
a uniform graph it needs about (N - 1) C / (in-degree) steps for C chunks per share.

Where the topology's translations map the graph onto itself (synth.topology.symmetry:
rings, tori, hypercubes, one switch), allgather is matched for rank 0 alone and shifted
onto every rank: what rank e holds is what rank 0 holds shifted by e. That is faster
(the choices cost O(N C) per step, not O(N^2 C)) and on tori better: torus:16x16 with
one chunk a share in 64 steps, the least any schedule needs (255 chunks over 4 links
in), where the plain matching takes 65. Such a schedule is kept as rank 0's receives
and the translations (synth.schedule.orbits, version 4 of the file): its size grows
with N C, not N^2 C.

Built directly: allgather and broadcast. Reducescatter and reduce are the same on the
reversed links, run backwards (the duality of synth.schedule.transform: exact here, as
a rank receives each chunk once and its holders never receive it back); allreduce is
reducescatter then allgather.

Cost: per step and link, a few operations on bitsets of N x C bits (chunks kept by how
many ranks hold them, so the rarest candidate is a few ANDs away): O(steps x links x
N C / 64) word operations; with translations, O(N C x in-links x log) for the choices;
the N^2 C sends written out by the plain matching, N C with translations.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

from synth.schedule.collectives import make_collective
from synth.construct.paced import verified_within
from synth.deadline import Deadline, OutOfTime
from synth.schedule.ir import Schedule, Send, Step
from synth.schedule.orbits import KEPT, Orbits
from synth.schedule.transform import compose_allreduce, reverse_model, reverse_schedule
from synth.search.pareto import Limits, Point, Search
from synth.topology.linkmodel import LinkModel, switch_rounds
from synth.topology.symmetry import Translations, translations_of

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
CHUNKS = (1, 2, 4, 8)  # chunks per share tried, in order, while time and size allow
BOTH_UP_TO = 64  # ranks: with translations, the plain matching is tried too up to here
MAX_SENDS = 2_200_000  # in one schedule: about 0.3 GB as Python objects
# CPU seconds per send to build and verify a schedule (torus:32x32 allgather, 1M sends:
# 1.9 s built, 9.2 s verified): a count whose estimate passes the deadline is not begun
SEND_SECONDS = 1.2e-5


def greedy_search(model: LinkModel, name: str, root: int | None, limits: Limits,
                  deadline: Deadline | float | None = None, bound: Fraction | None = None,
                  dims: tuple[int, ...] = (), on_point=None) -> Search:
    """`name` by greedy matching at each chunk count of CHUNKS in turn, each schedule
    verified; None is `proven`. on_point(points), if given, is called with the points so
    far as each one is verified (anytime: the first often beats every baseline); a true
    answer ends the search as Ctrl-C does. More chunks pipeline better, up to a point: a count
    that only ties the last is not kept, one that does worse ends the search, as do
    `bound` (rounds per chunk), MAX_SENDS, `limits.max_chunks`, the step limit and the
    deadline (keeping what it built; a count whose building and verifying would
    overrun it by SEND_SECONDS is not begun). `dims`: the topology's translations
    (build)."""
    search, deadline = Search(), Deadline.of(deadline)
    if name not in COLLECTIVES:
        search.stopped = f"{name} is not built greedily (only {', '.join(COLLECTIVES)})"
        return search
    counts = [c for c in CHUNKS if c <= limits.max_chunks]
    search.stopped = f"built at {', '.join(map(str, counts))} chunks a share"
    last = None  # rounds per chunk of the last schedule built
    translated = name in KEPT["blocks"] and translations_of(model, dims) is not None
    written = model.ranks if translated else 1  # translated: rank 0's sends are written
    for chunks in counts:
        sends = _sends(model.ranks, name, chunks) // written
        if sends > MAX_SENDS:
            search.stopped = f"stopped before {_a_share(chunks)}: over {MAX_SENDS:,} sends"
            break
        need = SEND_SECONDS * sends
        if not deadline.affords(need):
            search.stopped = (f"out of time before {_a_share(chunks)}: about "
                              f"{need:.1f} s needed, {deadline.left():.1f} s left for the searches")
            search.complete = False
            break
        try:
            schedule = build(model, name, root, chunks, deadline, dims)
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
            search.stopped = f"past the step limit at {_a_share(chunks)}"
            break
        if last is not None and point.ratio > last:
            search.stopped = f"{_a_share(chunks)} did worse than {chunks // 2}"
            break
        better, last = last is None or point.ratio < last, point.ratio
        if better and point.steps >= limits.min_steps:  # the range asked for (--steps)
            try:  # verified if that and writing its file fit (synth.construct.paced)
                search.points.append(replace(point, schedule=verified_within(schedule,
                                                                             deadline)))
            except OutOfTime:
                search.stopped, search.complete = "out of time", False
                break
            except KeyboardInterrupt:  # the points verified before are kept
                search.stopped, search.complete = "interrupted", False
                break
            if on_point is not None and on_point(search.points):
                search.stopped, search.complete = "interrupted", False
                break
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
          deadline: Deadline | float | None = None,
          dims: tuple[int, ...] = ()) -> Schedule | None:
    """The greedy schedule of `name` with `chunks` chunks per share (allreduce: per rank
    and phase, so N x chunks in all), or None when some rank cannot be reached. `dims`:
    the topology's translations (synth.topology.symmetry); where they are symmetries of
    the links, allgather (and reducescatter) is matched for rank 0 alone and shifted."""
    deadline = Deadline.of(deadline)
    if name == "allreduce":
        rs = build(model, "reducescatter", None, chunks, deadline, dims)
        ag = rs and build(model, "allgather", None, chunks, deadline, dims)
        if ag is None:
            return None
        schedule = compose_allreduce(rs, ag)
        return replace(schedule, info={"method": f"greedy, {chunks} chunk(s) a share",
                                       "greedy": chunks})
    dual = name in ("reducescatter", "reduce")
    spread = {"reducescatter": "allgather", "reduce": "broadcast"}.get(name, name)
    on = reverse_model(model) if dual else model
    coll = make_collective(spread, model.ranks, chunks, root)
    shifts = translations_of(on, dims) if spread == "allgather" else None
    steps, orbits = None, None
    if shifts is not None:
        steps = _match_translated(on, shifts, chunks, deadline)
        orbits = Orbits(shifts.dims, tuple(range(len(shifts.dims))))
    if steps is None or model.ranks <= BOTH_UP_TO:  # small: keep the better of the two
        plain = _match(on, coll.pre_ranges(), coll.post_ranges(), deadline)
        if plain is not None and (steps is None or (sum(s.rounds for s in plain), len(plain))
                                  < (sum(s.rounds for s in steps), len(steps))):
            steps, orbits = plain, None
    if steps is None:
        return None
    schedule = Schedule(coll, on, steps, {"method": f"greedy, {chunks} chunk(s) a share",
                                          "greedy": chunks}, symmetry=orbits)
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
        deadline.check("greedy matching")
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


def _match_translated(model: LinkModel, shifts: Translations, chunks: int,
                      deadline) -> tuple[Step, ...] | None:
    """Allgather steps invariant under `shifts`: rank 0's receives chosen greedily
    (rank e holds what rank 0 holds shifted by e), then shifted onto every rank. Rarity
    tells nothing here (every chunk has as many holders), so a link takes the candidate
    that came last to its source (it keeps chunks flowing on), the lowest on ties. A
    group caps the sum over its links, each link's load being that of the link into
    rank 0 from the same offset. Each link's candidates are kept as chunks arrive, in a
    heap: O(N C x in-links x log) for the choices. The steps hold rank 0's receives
    only (synth.schedule.orbits: the translations give every other rank's)."""
    n = model.ranks
    into, budget, _, span = _links(model)
    sources = into[0]
    caps = _offset_caps(model, shifts, budget["group"])
    share_shift = {e: [shifts.shift(u, e) for u in range(n)] for e in sources}
    held: set[int] = set()
    waiting = {e: [] for e in sources}  # heaps of (-arrival at e, chunk) e could send 0

    def arrive(k: int, t: int) -> None:
        held.add(k)
        for e in sources:
            moved = share_shift[e][k // chunks] * chunks + k % chunks
            if moved not in held:
                heapq.heappush(waiting[e], (-t, moved))

    for k in range(chunks):
        arrive(k, -1)
    program = []
    while len(held) < n * chunks:
        deadline.check("greedy matching")
        for heap in waiting.values():  # drop what 0 has received since
            while heap and heap[0][1] in held:
                heapq.heappop(heap)
        load, picks, taken = defaultdict(int), [], set()
        for e in sources:
            put_back = []
            while waiting[e] and load[e] < budget["link"][e, 0]:
                item = heapq.heappop(waiting[e])
                if item[1] in held or item[1] in taken:
                    if item[1] in taken:
                        put_back.append(item)
                    continue
                if any(sum(c * (load[o] + (o == e)) for o, c in cap.items()) > limit
                       for cap, limit in caps.get(e, ())):
                    put_back.append(item)
                    break
                load[e] += 1
                taken.add(item[1])
                picks.append((item[1], e))
            for item in put_back:
                heapq.heappush(waiting[e], item)
        if not picks:
            return None
        t = len(program)
        for k, _ in picks:
            arrive(k, t)
        program.append(picks)
    quotient = Orbits(shifts.dims, tuple(range(len(shifts.dims)))).quotient(model)
    return tuple(_received(quotient, picks, span) for picks in program)


def _offset_caps(model: LinkModel, shifts: Translations, group_budget: dict) -> dict:
    """Per offset e, the groups' caps it takes part in: (Counter of offsets, budget),
    one per distinct constraint. Link (a, b) is link (a - b, 0) shifted by b."""
    seen, caps = set(), defaultdict(list)
    for g in model.groups:
        offsets = defaultdict(int)
        for a, b in g.links:
            offsets[shifts.back(a, b)] += 1
        key = (tuple(sorted(offsets.items())), group_budget[g.name])
        if key in seen:
            continue
        seen.add(key)
        for e in offsets:
            caps[e].append((dict(offsets), group_budget[g.name]))
    return caps


def _received(quotient: LinkModel, picks, span) -> Step:
    """Rank 0's receives as a step of the whole schedule: its rounds are the fewest in
    which every rank receives its shifted picks (priced on the quotient model, where
    rank 0's sends load each link and group as the whole step does)."""
    sends = tuple(Send(k, e, 0) for k, e in picks)
    return Step(1 if span == 1 else switch_rounds(quotient, (), sends), sends)


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


def _a_share(chunks: int) -> str:
    return f"{chunks} chunk{'s' * (chunks != 1)} a share"
