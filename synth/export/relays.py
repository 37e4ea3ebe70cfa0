"""Cross-box sends the MSCCL++ executor can carry: relays for GPUs without InfiniBand.

The executor gives rank r of a node of G ranks the InfiniBand transport IB(r mod G), from
a table of eight (IB0..IB7): local ranks 8 and up have none, and a port channel between
nodes needs one at both ends (docs/runtimes.md, "A multi-node plan"). Which NIC device
k is, the user says (MSCCLPP_HCA_DEVICES); any two devices connect. `ib_relayed`
rewrites a schedule so that every cross-box send joins two GPUs of local rank below 8,
the way NCCL's PXN reaches a NIC another GPU owns: a GPU without a transport hands its
send inside its box to one with (the one of the destination's local rank mod 8 first,
so that the send stays on its rail where the network has rails, then of its own), and a
send to such a GPU arrives at a GPU of its box first (the source's local rank first).

Steps. A step t with sends to reroute becomes up to three: `pre` (hops into relays in
the sources' boxes), `main` (step t's other sends and switch operations, and the hops
across), `post` (hops out of relays in the destinations' boxes). Each rerouted send
still carries the value its source held when step t began, and lands before step t + 1.

Relays. A schedule holds one value per (rank, chunk), so a relay carries chunk k in its
own slot of k. That is allowed only where it changes nothing the schedule relies on:
the relay already holds that value (then it sends its own, and the hop into it is left
out; in a non-combining collective every copy of a chunk is one value), or, in a
combining one, the slot's old value is dead: not read from step t on (a relay written
in `main` may be read in step t, before the write lands, but not written there) until a
copy overwrites it, and not part of the result. A slot relays at most one value between
two steps. A send no candidate can carry is refused (BadInput, one line). The result is
checked by the independent verifier.

Chunks. A relay carries chunk k in a slot of chunk k, so each chunk whose sends cross
where a GPU lacks a device is rerouted by itself, over its own slots; the steps are then
put together as the whole schedule's rerouting would put them (whole-schedule tables of
every slot held 45 MB at once on dgx2x2's tree pipelines).

Cost: O(sends) to find and index the chunks to reroute, then per such chunk O(its
sends) to follow its values and at most 8 candidates per rerouted send, each O(steps
that touch its slots: a few), tried again while another send's relay opens a way (the
built-ins' schedules take one pass); small next to the export and its simulation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from synth.errors import BadInput
from synth.schedule.file import verified
from synth.schedule.ir import Schedule, Send, Step
from synth.topology.linkmodel import ranks_per_box, switch_rounds

IB_TRANSPORTS = 8  # the executor's table of InfiniBand transports, IB0..IB7
READ, WRITE = 1, 2  # how a step touches a slot; a reduction into it does both
PRE, MAIN, POST = range(3)  # the steps one step becomes; a relay waits before MAIN or POST


def ranks_per_node(model) -> int:
    """G, the ranks per node the executor must count: the box size, where every box is
    G consecutive ranks (the executor takes rank r to be on node r // G); BadInput
    otherwise. Without boxes, one node."""
    g = ranks_per_box(model)
    if g is None:
        raise BadInput("cannot export to MSCCL++: the executor takes rank r to be on node "
                       "r // G (G ranks per node), and this schedule's boxes are not runs of "
                       "equally many consecutive ranks")
    return g


def large_node_note(g: int) -> str:
    """The export summary's note for a plan on nodes of g ranks, "" for g <= 8: the
    releases v0.8.0 to v0.10.0 index their table of eight transports with every local
    rank when they register buffers, on any host with InfiniBand devices
    (docs/runtimes.md, "A multi-node plan")."""
    if g <= IB_TRANSPORTS:
        return ""
    return (f"; nodes of {g} ranks: MSCCL++ v0.8.0 to v0.10.0 read past their "
            f"{IB_TRANSPORTS} InfiniBand transports for local ranks {IB_TRANSPORTS} and up "
            "when they register buffers, on any host with InfiniBand devices, single-node "
            "plans included: there only MSCCL++ main since 2c4cc6f sets this plan up")


def ib_device(rank: int, g: int) -> int | None:
    """The InfiniBand device index the executor gives `rank`, None past its table."""
    return rank % g if rank % g < IB_TRANSPORTS else None


class _Slots:
    """Which steps touch each slot of one chunk, and how; and the slots of the result."""

    def __init__(self, events, collective):
        # slot -> [t0, how0, t1, how1, ...], steps ascending: a flat list, since a dict
        # per slot and a sorted copy of its keys took 68 MB for dgx2x2's relayed trees
        self.touches = {}
        for t, sends, _, ops in events:
            for x in sends:
                self._touch((x.src, x.chunk), t, READ)
                self._touch((x.dst, x.chunk), t, WRITE | (READ if x.op == "reduce" else 0))
            for op in ops:
                into = WRITE | (READ if op.op == "switch_reduce" else 0)
                for k in op.chunks():
                    for r in op.srcs:
                        self._touch((r, k), t, READ)
                    for r in op.dsts:
                        self._touch((r, k), t, into)
        self.collective = collective  # its result, listed when first asked

    def _touch(self, slot, t, how):
        seen = self.touches.get(slot)
        if seen is None:
            self.touches[slot] = [t, how]
        elif seen[-2] == t:
            seen[-1] |= how
        else:
            seen += (t, how)

    def at(self, slot, t) -> int:
        seen = self.touches.get(slot, ())
        for i in range(0, len(seen), 2):
            if seen[i] >= t:
                return seen[i + 1] if seen[i] == t else 0
        return 0

    def dead_after(self, slot, t) -> bool:
        """Whether the value the slot holds after step t is never read: the next step to
        touch it only overwrites it (a copy), or none does and it is not in the result."""
        seen = self.touches.get(slot, ())
        for i in range(0, len(seen), 2):
            if seen[i] > t:
                return seen[i + 1] == WRITE
        return slot not in self.collective.post


def _run(state: dict, sends, ops=()) -> None:
    """One step on state {(rank, chunk): contributors as a bit mask}: every read at the
    start, copies replace, reductions add."""
    writes = [((x.dst, x.chunk), x.op, state[(x.src, x.chunk)]) for x in sends]
    for op in ops:
        for k in op.chunks():
            if op.op == "multicast":
                writes += [((d, k), "copy", state[(op.srcs[0], k)]) for d in op.dsts]
            else:
                value = 0
                for s in op.srcs:
                    value |= state[(s, k)]
                writes.append(((op.dsts[0], k), "reduce", value))
    for slot, how, value in writes:
        state[slot] = value if how == "copy" else state.get(slot, 0) | value


def _paths(a: int, b: int, g: int):
    """Candidate routes from a to b in another box, crossing once between two GPUs with
    InfiniBand devices. Relays of one local rank in both boxes keep a send on its rail
    where the network has rails: the other end's local rank first, then its own (mod 8)."""
    la, lb, first_a, first_b = a % g, b % g, a - a % g, b - b % g
    devices = range(min(g, IB_TRANSPORTS))

    def order(*first):
        return dict.fromkeys((*(x % IB_TRANSPORTS for x in first), *devices))

    if ib_device(b, g) is not None:  # a has none: to a GPU of its box with one first
        yield from ((a, first_a + k, b) for k in order(lb, la))
    elif ib_device(a, g) is not None:  # b has none: arrive at a GPU of its box with one
        yield from ((a, first_b + k, b) for k in order(la, lb))
    else:
        yield from ((a, first_a + k, first_b + k, b) for k in order(la, lb))


class _Step:
    """The rerouting of one step t of one chunk: the relay slots it claims."""

    def __init__(self, t, sends, kept, slots: _Slots, state: dict, combining: bool, links):
        self.t, self.slots, self.state, self.combining, self.links = (t, slots, state,
                                                                      combining, links)
        self.claims = {}  # (gap, slot) -> the value it relays then; gap: MAIN or POST
        # slot -> the value it holds after MAIN where step t writes it once, by a copy
        # that needs no relay (the only writes known before the rerouting)
        self.writes = writes = Counter((x.dst, x.chunk) for x in sends)
        self.landed = {(x.dst, x.chunk): state[(x.src, x.chunk)] for x in kept
                       if x.op == "copy" and writes[(x.dst, x.chunk)] == 1}

    def value_before(self, gap, slot):
        """What slot holds when stage `gap` begins (None: not known here)."""
        if (gap, slot) in self.claims:
            return self.claims[(gap, slot)]
        if gap == POST:
            if self.slots.at(slot, self.t) & WRITE:
                return self.landed.get(slot)
            gap = MAIN
        return self.claims.get((MAIN, slot), self.state.get(slot))

    def may_write(self, gap, slot) -> bool:
        """Whether a relay may put a new value in slot before stage `gap`."""
        if (gap, slot) in self.claims:
            return False
        here = self.slots.at(slot, self.t)
        if gap == POST and here & WRITE:
            return False  # written in step t too: two writes at once
        if not self.combining:
            return True  # every copy of a chunk is one value
        if gap == MAIN and here & READ:
            return False  # step t reads the old value after the relay wrote it
        return (gap == MAIN and here == WRITE) or self.slots.dead_after(slot, self.t)

    def reroute(self, x: Send, g: int) -> list[tuple[int, Send]] | None:
        """The hops that carry x, each with its stage, its relay slots claimed; None
        where no candidate route can."""
        value = self.state[(x.src, x.chunk)]
        for path in _paths(x.src, x.dst, g):
            cross = next(i for i in range(len(path) - 1) if path[i] // g != path[i + 1] // g)
            stage = [MAIN + i - cross for i in range(len(path) - 1)]  # of hop i
            start = 0
            for j in range(len(path) - 2, 0, -1):  # the relay nearest b that holds it
                if self.value_before(stage[j], (path[j], x.chunk)) == value:
                    start = j
                    break
            if any((u, v) not in self.links for u, v in zip(path[start:], path[start + 1:])):
                continue
            relays = [(stage[j], (path[j], x.chunk)) for j in range(start + 1, len(path) - 1)]
            if not all(self.may_write(*r) for r in relays):
                continue
            if start:
                self.claims[(stage[start], (path[start], x.chunk))] = value
            for r in relays:
                self.claims[r] = value
            end = (x.dst, x.chunk)
            if stage[-1] == MAIN and x.op == "copy" and self.writes[end] == 1:
                self.landed[end] = value  # a relay after MAIN may start from it
            return [(stage[j], Send(x.chunk, path[j], path[j + 1],
                                    x.op if j == len(path) - 2 else "copy"))
                    for j in range(start, len(path) - 1)]
        return None


def _refusal(x: Send, t: int, g: int) -> str:
    lacks = [r for r in (x.src, x.dst) if ib_device(r, g) is None]
    return (f"cannot export to MSCCL++: step {t} sends chunk {x.chunk} from rank {x.src} to "
            f"rank {x.dst} in another box, but rank {lacks[0]} is local rank {lacks[0] % g} "
            f"of its node, past the executor's InfiniBand devices IB0..IB{IB_TRANSPORTS - 1}, "
            "and no GPU of their boxes can relay it without a link it lacks or overwriting "
            "a value the schedule still needs")


def _events(schedule: Schedule, chunks: set) -> dict[int, list]:
    """chunk -> its steps [(t, its sends, where each is in step t's sends, its switch
    operations)], steps ascending, for each chunk in `chunks`; a switch operation over
    several chunks is cut into one per chunk."""
    events = {k: [] for k in chunks}

    def at(k, t):
        mine = events[k]
        if not mine or mine[-1][0] != t:
            mine.append((t, [], [], []))
        return mine[-1]

    for t, step in enumerate(schedule.steps):
        for i, x in enumerate(step.sends):
            if x.chunk in chunks:
                _, sends, where, _ = at(x.chunk, t)
                sends.append(x)
                where.append(i)
        for op in step.switch_ops:
            for k in op.chunks():
                if k in chunks:
                    at(k, t)[3].append(replace(op, chunk=k, count=1))
    return events


class _Rerouting:
    """The rerouting of a schedule, chunk by chunk: the hops that replace each step's
    sends that cross where a GPU lacks a device, and the first send none can carry."""

    def __init__(self, schedule: Schedule, g: int, connects):
        self.coll, self.g, self.connects = schedule.collective, g, connects
        self.links = set(schedule.model.link)
        self.ranks = schedule.model.ranks
        # (t, stage) -> [((pass, index in step t's sends, hop), hop)]: sorted, the order
        # in which rerouting the whole schedule at once appends them
        self.hops = {}
        self.failed = None  # (t, index, send): the earliest send none carries

    def chunk(self, k: int, events) -> None:
        coll, pre = self.coll, self.coll.pre
        slots = _Slots(events, coll)
        state = {(r, k): (1 << r if coll.combining else 1) for r in range(self.ranks)
                 if (r, k) in pre}
        for t, sends, where, ops in events:
            if self.failed and t > self.failed[0]:
                return
            away = [(i, x) for i, x in zip(where, sends) if not self.connects(x.src, x.dst)]
            if not away:
                _run(state, sends, ops)
                continue
            kept = [x for x in sends if self.connects(x.src, x.dst)]
            here = _Step(t, sends, kept, slots, state, coll.combining, self.links)
            hops = self._step(t, here, away)
            if hops is None:
                return
            for stage in (PRE, MAIN, POST):
                _run(state, (kept if stage == MAIN else []) + hops[stage],
                     ops if stage == MAIN else ())

    def _step(self, t, here: _Step, away: list[tuple[int, Send]]):
        """A chunk's hops in step t per stage, kept for the schedule; None where a send
        (i: where it is in step t's sends) cannot be carried (the failure, where it is
        the earliest)."""
        pending = away
        hops, tried = {PRE: [], MAIN: [], POST: []}, 0
        while pending:  # a send may relay from where an earlier one lands
            left = []
            for i, x in pending:
                carried = here.reroute(x, self.g)
                if carried is None:
                    left.append((i, x))
                    continue
                for j, (stage, hop) in enumerate(carried):
                    hops[stage].append(hop)
                    self.hops.setdefault((t, stage), []).append(((tried, i, j), hop))
            if len(left) == len(pending):
                i, x = left[0]
                if self.failed is None or (t, i) < self.failed[:2]:
                    self.failed = (t, i, x)
                return None
            pending, tried = left, tried + 1
        return hops


def ib_relayed(schedule: Schedule) -> tuple[Schedule, str]:
    """(the schedule with every cross-box send between GPUs the executor gives InfiniBand
    devices, a note for the export summary; "" when nothing moved). Takes a schedule in
    runtime form (version 1 or 3: one send per chunk, no pipeline); BadInput when it
    cannot be rerouted."""
    model, coll = schedule.model, schedule.collective
    g = ranks_per_node(model)

    def connects(a, b):
        return a // g == b // g or (ib_device(a, g) is not None and ib_device(b, g) is not None)

    if all(connects(x.src, x.dst) for step in schedule.steps for x in step.sends):
        return schedule, ""
    if schedule.compact:
        raise ValueError("ib_relayed takes a schedule in runtime form")
    crossing = {t for t, step in enumerate(schedule.steps)
                if not all(connects(x.src, x.dst) for x in step.sends)}
    chunks = {x.chunk for t in crossing for x in schedule.steps[t].sends
              if not connects(x.src, x.dst)}
    rerouting = _Rerouting(schedule, g, connects)
    for k, events in sorted(_events(schedule, chunks).items()):
        rerouting.chunk(k, events)
    if rerouting.failed:
        t, _, x = rerouting.failed
        raise BadInput(_refusal(x, t, g))
    steps, moved = [], 0
    for t, step in enumerate(schedule.steps):
        if t not in crossing:
            steps.append(step)
            continue
        kept = [x for x in step.sends if connects(x.src, x.dst)]
        moved += len(step.sends) - len(kept)
        for stage in (PRE, MAIN, POST):
            ops = step.switch_ops if stage == MAIN else ()
            hops = [hop for _, hop in sorted(rerouting.hops.get((t, stage), ()),
                                             key=lambda keyed: keyed[0])]
            if hops or ops or stage == MAIN:
                sends = tuple((kept if stage == MAIN else []) + hops)
                steps.append(Step(switch_rounds(model, ops, sends), sends, ops))
    added = len(steps) - len(schedule.steps)
    info = {**schedule.info, "relayed": {"sends": moved, "steps_added": added}}
    relayed = Schedule(coll, model, tuple(steps), info)
    verified(relayed.ranged())  # the same sends, as ranges: a tenth of the memory
    return relayed, (f"; {moved} cross-box send{'s' if moved > 1 else ''} relayed inside "
                     f"their boxes ({added} step{'s' if added > 1 else ''} added): port "
                     f"channels only between local ranks 0-{IB_TRANSPORTS - 1}, which the "
                     "executor gives InfiniBand devices")
