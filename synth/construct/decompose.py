"""Multi-node synthesis by decomposition: across the boxes, inside them, pipelined.

Exact synthesis cannot hold a 64-GPU instance (synth.search.instance refuses it), and
needs no sketch to be told what a multi-node machine looks like:
synth.topology.hierarchy finds the identical boxes and the peer groups (local rank i of
every box) from the link model. Each level is then a small problem of its own, solved
exactly (synth.search.pareto's frontier on the level's link model, with the baselines as
a fallback):

    across   an allgather among the K ranks of one peer group (on dgx2xK: through the
             NICs and the InfiniBand switch; on dgxh100xK: along one rail)
    inside   an allgather among the g ranks of box 0 (NVSwitch, NVLink)

Allgather, one batch of data: every peer group runs the across schedule on the batch's
pieces of its members' shares (one peer group per local index, all at once); then each
box runs the inside schedule once per box of origin, spreading the K shares each member
now holds. A box's own pieces need nothing from the network: where the inside schedule
has no more steps than the crossing, they spread beside it (batches.home_beside). Where only some GPUs reach the network (gateways: ndv2xK), a local rank's
pieces first go to its proxy gateway, cross in the gateway's peer group, and arrive at
the same local rank of the other boxes along a path from their gateway; the rest is the
same, and a piece a rank already holds is not sent to it again (first_receipts), so
every rank receives each piece once and the duality below still holds. Batches are
pipelined: batch b starts at step b, so while batch b crosses the network, batch b - 1
spreads inside the boxes, and only the first and last steps carry one batch alone
(the first its crossing and its boxes' own pieces, the last its other pieces). Each step's rounds come from everything it carries
(synth.topology.linkmodel.min_rounds), so sharing (two GPUs on one NIC, a GPU's port
used by both levels) is priced exactly, and every composed schedule is verified whole.

Reducescatter: the same construction on the reversed links, run backwards (SCCL's
duality). Allreduce: each batch's reducescatter, then its allgather, all in one
pipeline, so one batch's reducescatter overlaps an earlier batch's allgather.

Written once per box: where the boxes are numbered box by box and shifting the box index
is a symmetry of the links (alike boxes on rails or a switch), a batch program that the
shift maps onto itself (each level's schedule runs alike in every peer group and box)
is written as box 0's receives and that shift (synth.schedule.orbits, version 4 of the
schedule file): a K-th of the sends.

Choosing the depth: every batch carries the same (src, dst) pairs, so the rounds of any
depth P and pieces per batch are sums over the loads of the ~2s windows of one batch's s
steps (synth.construct.moves.scaled_rounds): all designs are priced without building
any, and only the Pareto-optimal ones are built, the cheapest in steps and in bandwidth
first.

Long because: at 1024 GPUs pricing designs from their levels' loads, listing box 0's
moves and writing one box's program (issue 29's fabric) were added beside the design
search they serve; they should move to a module of their own (a note for the next
change here), but were merged as they were measured.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

import numpy as np

from synth.bounds import step_bound
from synth.construct.batches import (MAX_BATCH_MOVES, Levels, batch_loads, batch_moves,
                                     batch_size, batch_steps)
from synth.construct.moves import Moves, array_demand, load_array, rounds_at
from synth.construct.paced import WRITE, held, machine_size
from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.collectives import make_collective
from synth.schedule.file import topology_kept, topology_text, verified
from synth.schedule.ir import Pipeline, Schedule, Send, Step
from synth.schedule.orbits import Orbits, box_grid
from synth.schedule.transform import reverse_model, same_both_ways
from synth.search.pareto import Limits, Point, Search, frontier
from synth.topology.hierarchy import Hierarchy
from synth.topology.linkmodel import LinkModel, restrict

COLLECTIVES = ("allgather", "reducescatter", "allreduce")
# pipeline depths priced (more halve the fill's share); a pipeline is one batch's program
# and a count, so depth costs nothing to build: only --max-steps bounds it
DEPTHS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MAX_LANES = 4  # pieces per batch: up to this many times the levels' common chunk count
MAX_STEPS = 128  # default cap on a composed schedule's steps
WORTH = Fraction(1, 100)  # a design with more sends must gain this much bandwidth
# seconds to build and verify a schedule, per move its batch lists (Design.sends at the
# levels' chunks, times the lanes; a K-th where box 0's are listed alone) and per link
# and group member of the machine, as measured (the prior: an idle core's, 3 us;
# dgxh100x16's 585,216 moves took 1.8 s); a design that would not fit is not started
BUILD = Pace(3e-6, least=1000)
LEVEL_SHARE = 0.2  # of the time limit, at most, for all the levels' exact frontiers
LEVEL_SECONDS = 60.0  # and never more than this
LEVEL_CANDIDATES = 4  # schedules kept per level, fewest steps first


@dataclass(frozen=True)
class Design:
    """A priced candidate. chunks: per rank share (allreduce: of the buffer)."""

    levels: tuple[Levels, ...]  # one for allgather / reducescatter; (rs, ag) for allreduce
    batches: int
    pieces: int  # chunks of each share in one batch
    steps: int
    rounds: int
    chunks: int
    sends: int  # moves of one batch at the levels' own chunk count: the program's size

    @property
    def ratio(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)


def decompose(model: LinkModel, hierarchy: Hierarchy, name: str, limits: Limits,
              on_event: Callable[[str, object], None] | None = None,
              depths: tuple[int, ...] | None = None, deadline: Deadline | None = None,
              first_by: Deadline | None = None) -> Search:
    """Composed schedules for `name` on `model`, the Pareto-optimal ones over the
    pipeline depths (default DEPTHS) and pieces per batch, each verified. Anytime: the
    designs are built smallest program first, then the least bandwidth, then the rest;
    one that would not be built and verified before the deadline (default:
    limits.time_limit from now) at the pace measured so far (BUILD) is skipped, so a
    time limit too short for any leaves none; the first may be built by `first_by`
    instead, where the job has no point yet (dgx2x32's first took 6 s, past its share
    of a 30 s limit, and the job ended with nothing); Ctrl-C keeps what was built. Cost: the
    level frontiers (LEVEL_SHARE of the time), pricing (O(steps of a batch) window loads
    per lane count), then O(sends of one batch) per schedule."""
    on_event = on_event or (lambda kind, data: None)
    deadline = deadline or Deadline.after(limits.time_limit)
    search = Search(complete=False)  # nothing here is proven optimal
    orbits = box_orbits(model, hierarchy)
    refused = []
    try:
        designs = _designs(model, hierarchy, name, limits, on_event, depths or DEPTHS,
                           deadline, refused, fill=depths is None, orbits=orbits)
        if not designs:
            search.stopped = ("out of time" if deadline.passed() else
                              _too_many(min(refused)) if refused else
                              f"no pipeline fits in --max-steps "
                              f"{limits.max_steps or MAX_STEPS}")
        machine = machine_size(model)
        if designs and not topology_kept(model, orbits):
            # every file holds the machine: its text, made once for all of them, measures
            # what writing takes here (at 1024 GPUs behind a spine a million links: a
            # guess at the prior, with room for a guess, came to minutes, and no design
            # looked affordable)
            with WRITE["json"].timing(machine):
                topology_text(model, orbits)
        for design in _build_order(designs):
            # the moves listed: box 0's alone where _box_zero applies
            listed = _listed(hierarchy, design.levels, orbits, _whole(design))
            if listed > MAX_BATCH_MOVES:
                search.stopped = search.stopped or _too_many(listed)
                continue
            # building and verifying it, then writing it (its ranged sends are fewer):
            # the moves listed and the machine, which the verifier reads (at 1024 GPUs
            # behind a spine it is most of the work: paced by the moves alone, the first
            # build's minute made every other design look too long to start)
            by = first_by if first_by is not None and not search.points else deadline
            if not by.affords(BUILD.seconds(machine + listed)
                              + WRITE["json"].seconds(listed)):
                search.stopped = "out of time"
                continue
            on_event("build", (design.steps, design.rounds, design.chunks))
            started = time.monotonic()
            try:
                with BUILD.timing(machine + listed):
                    built = _build(model, hierarchy, name, design, by, orbits)
            except _TooMany as e:
                search.stopped = search.stopped or _too_many(e.moves)
                continue
            built.info["solve_seconds"] = round(time.monotonic() - started, 3)  # build+verify
            held(built, deadline)
            search.points.append(Point(built, proven=False))
            on_event("point", search.points[-1])
    except OutOfTime:
        search.stopped = "out of time"
    except KeyboardInterrupt:
        search.stopped = "interrupted"
    search.points.sort(key=lambda p: p.steps)
    search.stopped = search.stopped or (f"{len(search.points)} pipelined schedules over "
                                        f"{hierarchy.describe()}")
    return search


# --- levels --------------------------------------------------------------------------

def level_allgathers(sub: LinkModel, limits: Limits, deadline: Deadline,
                     on_event=lambda kind, data: None) -> list[Schedule]:
    """Allgather schedules for one level's link model: its exact frontier, once with up
    to limits.max_chunks chunks and once with one (a level runs side by side many times
    in the composition, so its fewest-chunk form often packs best), the two sharing
    the time to `deadline`; and the baselines (the fallback when the level is too
    large).
    Those no other beats on steps, rounds per chunk and chunks, at most
    LEVEL_CANDIDATES. Ctrl-C in a search is raised again (KeyboardInterrupt)."""
    from synth.construct.baselines import \
        baselines_within  # the baselines import synth.moves; keep it lazy

    coll = make_collective("allgather", sub.ranks, 1)
    hops = step_bound(sub, coll)
    schedules = [b.schedule for b in baselines_within(sub, "allgather", None, deadline)[0]]
    for i, max_chunks in enumerate(dict.fromkeys((limits.max_chunks, 1))):
        found = frontier(sub, "allgather", None, hops, _allgather_floor(sub),
                         Limits(hops + 2, max_chunks, 0.0, limits.backend,
                                workers=limits.workers), on_event,
                         deadline=deadline.share(0.5) if i == 0 else deadline)
        if found.stopped == "interrupted":
            raise KeyboardInterrupt
        schedules += [p.schedule for p in found.points]

    def key(s):
        return (s.num_steps, Fraction(s.rounds, s.collective.chunks), s.collective.chunks)
    kept = []
    for s in sorted(schedules, key=key):  # a schedule that dominates s sorts before it
        if not any(all(a <= b for a, b in zip(key(k), key(s))) for k in kept):
            kept.append(s)
    return kept[:LEVEL_CANDIDATES]


def _allgather_floor(sub: LinkModel) -> Fraction:
    """R / C >= (n - 1) / in-capacity of any rank: it must receive (n - 1) C chunks. A
    rank's in-capacity: its links' capacities, or a group holding all of them. O(links
    + group members): a group holds all of r's in-links when it holds as many of them
    as r has (at 512 ranks, testing each group against each rank took 16 s)."""
    into = defaultdict(list)
    for l in sub.links:
        into[l.dst].append(l.capacity)
    cap = {r: sum(caps) for r, caps in into.items()}
    for g in sub.groups:
        held = Counter(b for a, b in set(g.links) if (a, b) in sub.link)
        for r, count in held.items():
            if count == len(into[r]):
                cap[r] = min(cap[r], g.capacity)
    return max(((sub.ranks - 1) / c for c in cap.values()), default=Fraction(0))


def _level_options(model: LinkModel, hierarchy: Hierarchy, limits: Limits,
                   deadline: Deadline, on_event) -> list[Levels]:
    """Every pairing of the two levels' candidates; the first level gets half the time
    to `deadline`, the second the rest."""
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    on_event("search", f"allgather across boxes ({k} ranks)")
    group = hierarchy.peers[hierarchy.gateways[0]]
    sub = restrict(shared_out(model, hierarchy), group, f"{model.name} across")
    share = deadline.share(0.5)
    across = level_allgathers(sub, limits, share.share(0.5) if hierarchy.pods else share,
                              on_event)
    if hierarchy.pods:  # the pods' own, and the fewest steps: the others cross the
        # oversubscribed tier more, and pricing each pairing takes half a minute at 512
        # GPUs
        across = _across_pods(sub, hierarchy.pods, limits, share, on_event) + across[:1]
    on_event("search", f"allgather inside a box ({g} ranks)")
    inside = level_allgathers(restrict(model, hierarchy.boxes[0], f"{model.name} box"),
                              limits, deadline, on_event)
    return [Levels(a, i) for a in across for i in inside]


def _across_pods(sub: LinkModel, pods, limits: Limits, deadline: Deadline,
                 on_event) -> list[Schedule]:
    """Across-level allgathers for a peer group whose boxes sit in pods behind an
    oversubscribed tier: decomposed again, the pods as boxes (their boxes' ranks in
    `sub`), so that each piece enters every pod once and spreads inside it there,
    which is as little as the pod's cut allows; one batch, the least bandwidth. None
    where the pods differ in size or are single boxes (the across level is then the
    pods' level itself)."""
    if len({len(p) for p in pods}) > 1 or len(pods) < 2 or len(pods[0]) < 2:
        return []
    on_event("search", f"allgather across {len(pods)} pods of {len(pods[0])} boxes")
    # one chunk a share at both levels: a batch of the whole machine is then as small as
    # the plain across level's (at 512 GPUs, the 10 pieces of 2 and 5 chunk levels made
    # every design too large to build in time)
    found = decompose(sub, Hierarchy(tuple(tuple(p) for p in pods)), "allgather",
                      replace(limits, max_chunks=1), on_event, depths=(1,),
                      deadline=deadline)
    if not found.points:
        return []

    def ratio(p):
        return Fraction(p.schedule.rounds, p.schedule.collective.chunks)
    # the fewest chunks within WORTH of the least bandwidth, as _pareto keeps: the outer
    # batch takes the lcm of its levels' chunks, so a hair's gain in many chunks (a
    # baseline's 17 lanes) made every outer design many times larger to price and build
    least = min(map(ratio, found.points))
    return [min((p for p in found.points if ratio(p) <= least * (1 + WORTH)),
                key=lambda p: (p.schedule.collective.chunks, ratio(p), p.steps)).schedule]


def shared_out(model: LinkModel, hierarchy: Hierarchy) -> LinkModel:
    """`model` with each uplink's group (a link between network switches: Hierarchy)
    divided among the peer groups whose links across boxes it carries: every peer group
    runs the across level at once, alike, so one peer group has that share of a spine's
    or a pod's uplink (an oversubscribed tier: the across level must see it, or it
    crosses the cut as if alone there)."""
    local = {r: i for box in hierarchy.boxes for i, r in enumerate(box)}
    box_of = {r: b for b, box in enumerate(hierarchy.boxes) for r in box}
    uplinks = set(hierarchy.uplinks)
    if not uplinks:
        return model
    groups = []
    for g in model.groups:
        peers = {local[a] for a, b in g.links if local[a] == local[b]
                 and box_of[a] != box_of[b]} if g.name in uplinks else ()
        groups.append(replace(g, capacity=g.capacity / len(peers)) if len(peers) > 1 else g)
    return replace(model, groups=tuple(groups))


# --- pricing -------------------------------------------------------------------------

class _Priced:
    """The loads of one batch's steps, from which any depth is priced.

    In a pipeline of P batches, expanded step t runs the batch steps max(0, t-P+1) ..
    min(s-1, t) together. When P >= s only three kinds of window occur: a prefix 0..t
    while the pipeline fills, all s steps in the steady state, a suffix while it drains;
    so any depth costs O(s) window prices, each priced once per lane count."""

    def __init__(self, moves: Moves | None = None, loads: list[Counter] | None = None,
                 sends: int = 0):
        """From one batch's moves, or from its `loads` per step and `sends` in all."""
        if moves is not None:
            loads = [Counter((s, d) for _, s, d, _ in step) for step in moves]
            sends = sum(len(step) for step in moves)
        self.loads, self.steps, self.sends = loads, len(loads), sends
        self._needs: dict[tuple[int, int], set] = {}  # a window's demand, any lanes
        self._model = None  # the one model priced on: the loads become arrays on it

    def window(self, model: LinkModel, lo: int, hi: int, lanes: int) -> int:
        """Rounds of batch steps lo..hi running together, each `lanes` times wider.
        Summed and priced as arrays over the links (at 4096 GPUs a step loads 2.1
        million: pricing an allreduce's designs by dictionary took 2 minutes)."""
        key = (lo, hi)
        if key not in self._needs:
            if self._model is None:
                self._model = model
                self.loads = [load_array(model, load) for load in self.loads]
            assert model is self._model, "a batch is priced on one model"
            self._needs[key] = array_demand(model, sum(
                self.loads[lo:hi + 1], np.zeros(len(model.links), dtype=np.int64)))
        return rounds_at(self._needs[key], lanes)

    def rounds_per_step(self, model: LinkModel, depth: int, lanes: int) -> list[int]:
        s = self.steps
        if depth < s:  # short pipelines: every window is its own
            return [self.window(model, max(0, t - depth + 1), min(s - 1, t), lanes)
                    for t in range(depth + s - 1)]
        fill = [self.window(model, 0, t, lanes) for t in range(s - 1)]
        drain = [self.window(model, u, s - 1, lanes) for u in range(1, s)]
        return fill + [self.window(model, 0, s - 1, lanes)] * (depth - s + 1) + drain

    def rounds(self, model: LinkModel, depth: int, lanes: int) -> int:
        """Total rounds of `depth` batches in a pipeline, each `lanes` times wider."""
        s = self.steps
        if depth < s:
            return sum(self.rounds_per_step(model, depth, lanes))
        return (sum(self.window(model, 0, t, lanes) for t in range(s - 1))
                + (depth - s + 1) * self.window(model, 0, s - 1, lanes)
                + sum(self.window(model, u, s - 1, lanes) for u in range(1, s)))


def _price(name: str, hierarchy: Hierarchy, levels: tuple[Levels, ...], pieces: int,
           deadline: Deadline) -> _Priced:
    """One batch of `pieces` a share priced: from the levels' loads (batch_loads), or
    where GPUs cross through gateways from its moves listed."""
    if not hierarchy.proxy:
        loads, sends = batch_loads(name, hierarchy, levels, pieces)
        return _Priced(loads=loads, sends=sends)
    return _Priced(batch_moves(name, hierarchy, levels, pieces, 0, pieces, deadline))


def _designs(model: LinkModel, hierarchy: Hierarchy, name: str, limits: Limits,
             on_event, depths: tuple[int, ...] = DEPTHS,
             deadline: Deadline = Deadline(), refused: list | None = None,
             fill: bool = False, orbits: Orbits | None = None) -> list[Design]:
    """Every design within the step limit, priced until `deadline`; the Pareto-optimal
    ones. A level pairing whose batch would list more than MAX_BATCH_MOVES moves (box
    0's alone where the box `orbits` fold it) is not priced (its size goes to
    `refused`)."""
    max_steps = limits.max_steps or MAX_STEPS
    # then allreduce's reducescatter levels are allgather's (only allreduce asks: at 4096
    # GPUs it takes 9 s)
    alike = name == "allreduce" and same_both_ways(model)
    # all level searches: LEVEL_SHARE of the time left, at most LEVEL_SECONDS
    level_end = deadline.within(min(LEVEL_SECONDS, LEVEL_SHARE * deadline.left()))
    ag = rs = []
    if name != "reducescatter":
        ag = _level_options(model, hierarchy, limits, level_end if alike or name == "allgather"
                            else level_end.share(0.5), on_event)
    if name != "allgather":
        rs = (ag if ag and alike else
              _level_options(reverse_model(model), hierarchy, limits, level_end, on_event))
    # allreduce pairs the i-th options of both parts (alike when the links are symmetric)
    options = {"allgather": [(a,) for a in ag], "reducescatter": [(r,) for r in rs],
               "allreduce": [(r, a) for r, a in zip(rs, ag)]}[name]
    if not options and level_end.passed():  # not "no pipeline fits": none was tried
        raise OutOfTime("searching the levels")
    designs = []
    share = model.ranks if name == "allreduce" else 1  # allreduce: C = N x share chunks
    for levels in options:
        base = _base(levels)
        if deadline.passed():
            break
        steps = batch_steps(hierarchy, levels)
        if steps is not None and steps + min(depths) - 1 > max_steps:
            continue  # no depth fits: not worth listing (1024 GPUs: millions of moves)
        size = _listed(hierarchy, levels, orbits, batch_size(hierarchy, levels, base))
        if size > MAX_BATCH_MOVES:
            if refused is not None:
                refused.append(size)
            continue
        try:
            priced = _price(name, hierarchy, levels, base, deadline)
        except OutOfTime:
            break
        # and, unless the depths were asked for, the one whose pipeline fills the step
        # limit exactly: the fill's share is least there (dgxh100x128:clos,pod=16,over=7
        # allgather, 3 steps a batch: 126 batches, where DEPTHS' deepest within 128
        # steps, 96, gave 1.0195 x the bound)
        deepest = max_steps - priced.steps + 1
        for depth in (sorted(set(depths) | {deepest}) if fill and deepest > 0 else depths):
            if deadline.passed():
                return _pareto(designs)  # the designs priced so far
            for lanes in range(1, MAX_LANES + 1):
                steps = depth + priced.steps - 1
                if steps > max_steps:
                    continue
                designs.append(Design(levels, depth, base * lanes, steps,
                                      priced.rounds(model, depth, lanes),
                                      share * depth * base * lanes, priced.sends))
    return _pareto(designs)


def _base(levels: tuple[Levels, ...]) -> int:
    """The pieces of a share in one batch of the narrowest design: every level's chunks."""
    return math.lcm(*(c for lv in levels for c in (lv.across.collective.chunks,
                                                   lv.inside.collective.chunks)))


def _whole(design: Design) -> int:
    """The moves of the design's whole batch (its levels' at its pieces, not folded)."""
    return design.sends * design.pieces // _base(design.levels)


class _TooMany(Exception):
    """A design whose whole batch must be listed (box 0's did not fold) and is over
    MAX_BATCH_MOVES: not built."""

    def __init__(self, moves: int):
        super().__init__(moves)
        self.moves = moves


def _too_many(moves: int) -> str:
    return (f"not built: a batch of about {moves:,} moves, over the {MAX_BATCH_MOVES:,} a "
            "build can hold in memory")


def _pareto(designs: list[Design]) -> list[Design]:
    """Per step count, the fewest chunks within WORTH of the least rounds per chunk there
    (a hair's gain is not worth chunks twice as small); then, by steps, each that beats
    every one with fewer steps."""
    by_steps = defaultdict(list)
    for d in designs:
        by_steps[d.steps].append(d)
    kept = []
    for steps in sorted(by_steps):
        group = [d for d in by_steps[steps] if not kept or d.ratio < kept[-1].ratio]
        if group:
            least = min(d.ratio for d in group)
            kept.append(min((d for d in group if d.ratio <= least * (1 + WORTH)),
                            key=lambda d: (d.chunks, d.ratio)))
    return kept


def _build_order(designs: list[Design]) -> list[Design]:
    """The smallest program (the quickest to build, so there is an answer), the least
    bandwidth, then the rest by steps: with little time, the ends come first."""
    if len(designs) <= 2:
        return sorted(designs, key=lambda d: (d.sends, d.chunks))
    first = min(designs, key=lambda d: (d.sends, d.chunks))
    rest = [d for d in designs if d is not first]
    return [first, rest[-1]] + rest[:-1]


# --- building ------------------------------------------------------------------------

def box_orbits(model: LinkModel, hierarchy: Hierarchy) -> Orbits | None:
    """Translations moving whole boxes (synth.schedule.orbits.box_grid: the shifts of
    the box index, or behind pods or leaf groups those of the runs of boxes and of the
    box within each run), where ranks are numbered box by box and they are symmetries
    of the links and groups; else None."""
    k, g = len(hierarchy.boxes), len(hierarchy.boxes[0])
    if hierarchy.boxes != tuple(tuple(range(b * g, (b + 1) * g)) for b in range(k)):
        return None
    return box_grid(model, k, len(hierarchy.pods[0]) if hierarchy.pods else None)


def _build(model: LinkModel, hierarchy: Hierarchy, name: str, design: Design,
           deadline: Deadline = Deadline(), orbits: Orbits | None = None) -> Schedule:
    """The design's schedule, verified: one batch's program, its moves of consecutive
    chunks joined into ranged sends, and a pipeline of design.batches copies (version 2
    of the schedule file), whose rounds per expanded step come from the loads of the
    batch steps running in it. Where the box `orbits` map the program onto itself,
    only box 0's receives are kept (version 4)."""
    batches = f"{design.batches} batch{'es' if design.batches > 1 else ''}"
    info = {"method": f"decomposed, {batches}",
            "decomposition": {"hierarchy": hierarchy.describe(), "batches": design.batches,
                              "pieces": design.pieces,
                              "levels": [_level_info(lv) for lv in design.levels]}}
    share_chunks = design.batches * design.pieces
    coll = make_collective(name, model.ranks, design.chunks)
    steps = _box_zero(model, hierarchy, name, design, coll, deadline, orbits)
    if steps is not None:
        steps, priced = steps
        return verified(Schedule(coll, model, steps, info, _pipeline(model, design, priced),
                                 orbits))
    if _whole(design) > MAX_BATCH_MOVES:  # counted as box 0's (_listed): they did not fold
        raise _TooMany(_whole(design))
    moves = batch_moves(name, hierarchy, design.levels, share_chunks, 0, design.pieces,
                        deadline)
    moves = [step for step in moves if step]
    priced = _Priced(moves)
    steps = _folded(moves, priced, model, coll, orbits)
    if steps is None:
        orbits = None
        steps = tuple(Step(priced.window(model, i, i, 1), ranged(step, coll.share_chunks))
                      for i, step in enumerate(moves))
    return verified(Schedule(coll, model, steps, info, _pipeline(model, design, priced),
                             orbits))


def _pipeline(model: LinkModel, design: Design, priced: _Priced) -> Pipeline | None:
    if design.batches == 1:
        return None
    return Pipeline(design.batches, design.pieces,
                    tuple(priced.rounds_per_step(model, design.batches, 1)))


def _box_zero(model: LinkModel, hierarchy: Hierarchy, name: str, design: Design, coll,
              deadline: Deadline, orbits: Orbits | None
              ) -> tuple[tuple[Step, ...], _Priced] | None:
    """The program's steps as the sends into box 0 alone, listed alone (a K-th of the
    moves: at 1024 GPUs about a million a piece, whose listing, folding and checking
    took a minute and more a design), with each step's rounds from the whole batch's
    loads (batch_loads); and its pricing. Where `orbits` move whole boxes and the
    across levels move with them (the inside level runs alike in every box, for every
    box of origin, so it does), the whole program is the orbits' images of those sends.
    None where that does not hold or GPUs cross through gateways."""
    if not _folds(hierarchy, design.levels, orbits):
        return None
    loads, sends = batch_loads(name, hierarchy, design.levels, design.pieces)
    moves = batch_moves(name, hierarchy, design.levels, design.batches * design.pieces, 0,
                        design.pieces, deadline, into=0)
    if len(moves) != len(loads) or not all(moves):
        return None
    priced = _Priced(loads=loads, sends=sends)
    return tuple(Step(priced.window(model, i, i, 1), ranged(step, orbits.block(
        coll.num_chunks))) for i, step in enumerate(moves)), priced


def _folds(hierarchy: Hierarchy, levels: tuple[Levels, ...], orbits: Orbits | None
           ) -> bool:
    """Whether _box_zero builds a design of these levels from box 0's moves alone."""
    return orbits is not None and not hierarchy.proxy and all(
        _moves_with(orbits, lv.across) for lv in levels)


def _listed(hierarchy: Hierarchy, levels: tuple[Levels, ...], orbits: Orbits | None,
            moves: int) -> int:
    """The moves a build lists of a batch of `moves`: a K-th where it folds (_folds;
    4096 GPUs' one-step exchange across 512 boxes makes 33.5 million moves a batch, and
    box 0's 65,520 are what is built)."""
    return moves // len(hierarchy.boxes) if _folds(hierarchy, levels, orbits) else moves


_MOVES_WITH: dict[tuple[int, int], tuple[Orbits, Schedule, bool]] = {}


def _moves_with(orbits: Orbits, across: Schedule) -> bool:
    """Whether the across level (on the K boxes' ranks of one peer group) is mapped onto
    itself by `orbits` acting on the boxes alone (its dims but the GPUs'). Remembered
    per (orbits, level) object: every design of a level asks (across 512 boxes the fold
    takes 3 s, and 16 asks took 49)."""
    key = (id(orbits), id(across))
    hit = _MOVES_WITH.get(key)
    if hit is not None and hit[0] is orbits and hit[1] is across:
        return hit[2]
    boxes = Orbits(orbits.dims[:-1], orbits.axes, "blocks")
    num = across.collective.num_chunks
    moves = boxes.ranks == across.collective.ranks and all(
        boxes.fold(step.sends, num) is not None for step in across.expanded().steps)
    if len(_MOVES_WITH) > 64:
        _MOVES_WITH.clear()
    _MOVES_WITH[key] = (orbits, across, moves)
    return moves


def _folded(moves, priced, model, coll, orbits) -> tuple[Step, ...] | None:
    """The program's steps as the sends into box 0, each step's rounds the whole
    step's, if `orbits` map every step onto itself (ranges cut at blocks, which the
    shift moves whole); else None."""
    if orbits is None:
        return None
    block = orbits.block(coll.num_chunks)
    steps = []
    for i, step in enumerate(moves):
        sends = orbits.fold(ranged(step, block), coll.num_chunks)
        if sends is None:
            return None
        steps.append(Step(priced.window(model, i, i, 1), sends))
    return tuple(steps)


def ranged(moves, share: int) -> tuple[Send, ...]:
    """One step's moves as sends, consecutive chunks of one (src, dst, op) and one share
    joined into a range."""
    chunks = defaultdict(list)
    for c, s, d, op in moves:
        chunks[(s, d, op)].append(c)
    sends = []
    for (s, d, op), cs in chunks.items():
        cs.sort()
        start = prev = cs[0]
        for c in cs[1:] + [None]:
            if c is not None and c == prev + 1 and c // share == start // share:
                prev = c
                continue
            sends.append(Send(start, s, d, op, prev - start + 1))
            if c is not None:
                start = prev = c
    return tuple(sorted(sends, key=lambda x: (x.chunk, x.src, x.dst)))


def _level_info(levels: Levels) -> dict:
    return {level: {"ranks": s.collective.ranks, "steps": s.num_steps, "rounds": s.rounds,
                    "chunks": s.collective.chunks, "method": s.info.get("method")
                    or s.info.get("algorithm")}
            for level, s in (("across", levels.across), ("inside", levels.inside))}
