"""Where every value of an MSCCL++ plan lives: the slots of every send, reduction,
switch operation and final copy (synth.export.mscclpp's recipe, "Slots first"). It does
not depend on how the work is split into thread blocks, so the search over thread
block splits (synth.export.mscclpp.build) computes it once. Accesses logs, for one
split, which thread block touches each slot when: the hand-offs come from it.

Switch operations become glres, each run by one rank d: the switch sums the chunk's
slot on every member of the source group (one offset on all of them) and stores the
sum to one slot of every member of the destination group. A switch_reduce into d
followed in the next step by the multicast of its sum to its other sources is one
glres over the group (source and destination the same); a switch_reduce alone sums
into d only (destination: d alone); a multicast alone is the sum of d's value alone
(source: d alone) stored to d and its destinations (docs/runtimes.md, "Switch
channels").
"""

from __future__ import annotations

from collections import defaultdict

from synth.errors import BadInput
from synth.export.layout import Layout, Slot, drop_redundant

MIXED = -1  # the reads of a slot since its last write were by more than one peer


class _Flow:
    """Where every value lives: the slots of every send, reduction and final copy.

    steps: per step, (moves (chunk, src rank, dst rank, src slot, dst slot), reductions
    (rank, chunk, dst slot, src slots, first sender), switch operations (chunk, source
    group, destination group, rank d that runs the glres, src slot, out slot)); aligned:
    per step, the local copies (rank, chunk, from, to) before its switch operations;
    epilogue: the final copies (rank, chunk, from, to); written: per rank, its slots written in
    a launch, by the rank or a peer; scratch: the scratch slots per rank. A glres's
    members learn in the next step that it is done, so a switch operation in the last
    step is followed by one step with no moves (its hand-shakes only)."""

    def __init__(self, schedule, layout: Layout):
        places = _Places(layout, schedule.collective)
        self.steps = []  # per step: (moves, reductions, switch operations)
        self.aligned = []  # per step: (rank, chunk, from, to) copies before its glres
        switch = switch_operations(schedule)
        for t, sends in enumerate(drop_redundant(schedule.collective, schedule.steps)):
            moves, arrived = places.moves(t, sends)
            reductions = places.reductions(t, arrived)
            summed, aligned = places.switch_ops(t, switch.get(t, ()))
            self.steps.append((moves, reductions, summed))
            self.aligned.append(aligned)
        if switch.get(len(self.steps) - 1):  # its members learn of it one step later
            self.steps.append(([], [], []))
            self.aligned.append([])
        self.epilogue = places.final_copies(schedule.collective.post_ranges())
        self.scratch, self.written = places.scratch, places.written
        self._by_rank = None

    def of_rank(self, r):
        """Rank r's part alone, in order: per step where it has work, (t, the moves it
        sends or receives, its reductions, no switch operations), and its final copies.
        Indexed for every rank at the first call. Not for switch operations: those join
        ranks."""
        if self._by_rank is None:
            steps, epilogue = defaultdict(list), defaultdict(list)
            for t, (moves, reductions, _) in enumerate(self.steps):
                mine = defaultdict(lambda: ([], []))
                for move in moves:
                    mine[move[1]][0].append(move)
                    mine[move[2]][0].append(move)
                for reduction in reductions:
                    mine[reduction[0]][1].append(reduction)
                for rank, (its_moves, its_reductions) in mine.items():
                    steps[rank].append((t, its_moves, its_reductions, ()))
            for copy in self.epilogue:
                epilogue[copy[0]].append(copy)
            self._by_rank = (steps, epilogue)
        return self._by_rank[0].get(r, []), self._by_rank[1].get(r, [])


class _NoneIfMissing(dict):
    """A dict that reads None where it has no entry, as a list of Nones would."""

    def __missing__(self, key):
        return None


class _Places:
    """The work of placing values, step by step: where each (rank, chunk) value is now
    (loc, indexed rank x chunks + chunk, None where it is not), the slots each rank has
    touched (accessed), and per rank and slot the reads since its last write in the
    launch (since: see read). Ints and one pair where tuples and lists would do: a tree
    batch places 124,000 sends, and its tuples were most of an export's peak memory."""

    def __init__(self, lay: Layout, coll):
        self.lay = lay
        # loc: a list where the collective starts or ends with most (rank, chunk) pairs
        # held (all but gather, scatter, alltoall): a tree batch's dict and int keys took
        # 8.8 MiB, its list 1; else a dict (those hold few: a list costs ranks x more)
        held = max(sum(c for _, _, c in r) for r in (coll.pre_ranges(), coll.post_ranges()))
        self.loc = ([None] * (lay.n * lay.g) if 2 * held >= lay.n * lay.g
                    else _NoneIfMissing())
        self.accessed = defaultdict(set)
        for r in range(lay.n):
            for k in range(lay.g):
                slot = lay.init_slot(r, k)
                if slot is not None:
                    self.loc[r * lay.g + k] = slot
                    self.accessed[r].add(slot)
        self.scratch = defaultdict(int)
        self.since = defaultdict(dict)
        # rank -> its slots written in a launch, by the rank or a peer (a set per rank,
        # not of (rank, slot) pairs: a tree batch's 124,000 pairs took 7 MB)
        self.written = defaultdict(set)

    def read(self, rank, slot, peer, t):
        """Note a read of rank's slot at step t by `peer` (None: the rank itself). All
        that copy_slot asks of the reads since the last write is whether every one was
        by one peer, and the latest step: (that peer, or MIXED; the latest step)."""
        seen = self.since[rank].get(slot)
        self.since[rank][slot] = (peer, t) if seen is None else (
            seen[0] if seen[0] == peer else MIXED, max(seen[1], t))

    def fresh(self, rank):
        """A scratch slot of rank not used before in the launch."""
        self.scratch[rank] += 1
        slot = self.lay.interned(Slot("s", self.scratch[rank] - 1))
        self.accessed[rank].add(slot)
        return slot

    def copy_slot(self, rank, k, peer, t):
        """Where a copy of chunk k from peer lands at step t: the output slot if the
        rank has not touched it, or if the rank's only accesses since its last write
        are sends to that same peer in earlier steps (the peer has waited for their
        signals, so it may write the slot); else a fresh scratch slot."""
        out = self.lay.out_slot(rank, k)
        if out is not None and out not in self.accessed[rank]:
            self.accessed[rank].add(out)
            return out
        reads = self.since[rank].get(out)
        if out is not None and reads is not None and reads[0] == peer and reads[1] < t:
            return out
        return self.fresh(rank)

    def fresh_all(self, group):
        """One fresh scratch slot, the same index on every member of `group`."""
        slot = self.lay.interned(Slot("s", max(self.scratch[m] for m in group)))
        for m in group:
            self.scratch[m] = slot.idx + 1
            self.accessed[m].add(slot)
        return slot

    def aligned_slot(self, k, group):
        """Where the members of a switch reduction gather chunk k when it sits at
        different slots: its output slot, the same on every member, if every member that
        must copy into it has not touched it; else one fresh scratch slot for all."""
        lay, loc, accessed, g = self.lay, self.loc, self.accessed, self.lay.g
        out = {lay.out_slot(m, k) for m in group}
        out = out.pop() if len(out) == 1 else None
        if out is not None and all(loc[m * g + k] == out or out not in accessed[m]
                                   for m in group):
            for m in group:
                accessed[m].add(out)
            return out
        return self.fresh_all(group)

    def moves(self, t, sends):
        """The sends of step t placed: (moves (chunk, src, dst, src slot, dst slot),
        arrived {(rank, chunk): [(sender, scratch slot)]} of the reductions to sum)."""
        loc, since, g = self.loc, self.since, self.lay.g
        moves, moved, arrived = [], {}, defaultdict(list)
        for x in sends:
            held = loc[x.src * g + x.chunk]
            if held is None:  # synth verifies before it exports; a library caller may not
                raise BadInput(f"cannot export to MSCCL++: rank {x.src} sends chunk "
                               f"{x.chunk} in step {t} without holding it (not a valid "
                               "schedule: synth verify says more)")
            self.read(x.src, held, x.dst, t)
        # copies in chunk order, reductions per sender in chunk order: runs of
        # consecutive chunks get runs of consecutive slots (the key one int, not a
        # tuple: a tree batch's step sorts 31,000 sends)
        n = self.lay.n
        for x in sorted(sends, key=lambda x: ((x.dst * 2 + (x.op == "reduce")) * n
                                              + (x.src if x.op == "reduce" else 0)) * g
                        + x.chunk):
            src = loc[x.src * g + x.chunk]
            if x.op == "copy":
                dst = self.copy_slot(x.dst, x.chunk, x.src, t)
                moved[x.dst * g + x.chunk] = dst
            else:
                dst = self.fresh(x.dst)
                arrived[(x.dst, x.chunk)].append((x.src, dst))
            moves.append((x.chunk, x.src, x.dst, src, dst))
            self.written[x.dst].add(dst)
            since[x.dst].pop(dst, None)
        for key, slot in moved.items():
            loc[key] = slot
        return moves, arrived

    def reductions(self, t, arrived):
        """The sums of step t: per (rank, chunk) that received reductions, (rank, chunk,
        dst slot, src slots, first sender), one re summing all that arrived into the
        value (in place when the layout lets it be written; else into its output slot
        while untouched, or the first arrival's slot)."""
        lay, loc, accessed, since = self.lay, self.loc, self.accessed, self.since
        g = lay.g
        reductions = []
        for (d, k), got in sorted(arrived.items()):
            slots = [s for _, s in got]
            cur = loc[d * g + k]
            if lay.writable(d, k, cur):
                dst, srcs = cur, [cur, *slots]
            else:
                out = lay.out_slot(d, k)
                if out is not None and out not in accessed[d]:
                    accessed[d].add(out)
                    dst, srcs = out, [cur, *slots]
                else:
                    dst, srcs = slots[0], [slots[0], cur, *slots[1:]]
            loc[d * g + k] = dst
            reductions.append((d, k, dst, srcs, got[0][0]))
            self.written[d].add(dst)
            for slot in srcs:
                self.read(d, slot, None, t)
            since[d].pop(dst, None)
        return reductions

    def switch_ops(self, t, ops):
        """The switch operations of step t (`ops`: (chunk, source group, destination
        group, d) each): (summed (chunk, source group, destination group, d, src slot,
        out slot), aligned (rank, chunk, from, to): the local copies that first gather a
        chunk at one slot on every member of a source group)."""
        accessed, loc, since, g = self.accessed, self.loc, self.since, self.lay.g
        summed, aligned = [], []
        for k, readers, writers, d in ops:
            src = self.switch_source(t, k, readers, aligned)
            out = self.switch_target(k, readers, writers, d, src)
            for m in readers:
                self.read(m, src, d, t)
            for m in writers:
                accessed[m].add(out)
                loc[m * g + k] = out
                self.written[m].add(out)
                since[m].pop(out, None)
            summed.append((k, readers, writers, d, src, out))
        return summed, aligned

    def switch_source(self, t, k, readers, aligned):
        """The one slot a switch channel reads chunk k at on every reader (it reads one
        offset on every member): where k sits, or, where it sits at different slots, an
        aligned slot each reader whose value is elsewhere first copies it to (appended
        to `aligned`)."""
        loc, since, g = self.loc, self.since, self.lay.g
        src = {loc[m * g + k] for m in readers}
        if len(src) == 1:
            return src.pop()
        src = self.aligned_slot(k, readers)
        for m in readers:
            if loc[m * g + k] != src:  # a local copy, read here, written there
                aligned.append((m, k, loc[m * g + k], src))
                self.read(m, loc[m * g + k], None, t)
                loc[m * g + k] = src
                self.written[m].add(src)
                since[m].pop(src, None)
        return src

    def switch_target(self, k, readers, writers, d, src):
        """Where a glres of chunk k stores: one slot, the same index on every writer.
        A sum left on d (a switch_reduce alone) goes where a reduction's would: into
        src where d may write it, else d's output slot while untouched, else fresh
        scratch. Otherwise k's output slot when it is the same on every writer (for a
        glres over one group: and it is the source, or no member touched it), else one
        fresh scratch slot for all."""
        lay, accessed = self.lay, self.accessed
        if writers == (d,):
            out = lay.out_slot(d, k)
            if lay.writable(d, k, src):
                return src
            if out is not None and out not in accessed[d]:
                return out
            return self.fresh(d)
        out = {lay.out_slot(m, k) for m in writers}
        out = out.pop() if len(out) == 1 else None
        if out is None or (readers == writers and out != src
                           and any(out in accessed[m] for m in writers)):
            return self.fresh_all(writers)
        return out

    def final_copies(self, post):
        """(rank, chunk, from, to) of every result in `post` (sorted (rank, first chunk,
        count) runs: a tree batch's set of pairs took 14 MB) not in its output slot at
        the end, to be copied there."""
        epilogue, g = [], self.lay.g
        for r, k in ((r, k) for r, first, count in post for k in range(first, first + count)):
            out = self.lay.out_slot(r, k)
            if self.loc[r * g + k] not in (None, out):
                epilogue.append((r, k, self.loc[r * g + k], out))
                self.written[r].add(out)
        return epilogue


def switch_operations(schedule) -> dict:
    """{step: [(chunk, source group, destination group, d)]}: each switch operation as
    one glres by rank d (module docstring): a switch_reduce into d with the multicast of
    the sum from d to the other sources in the next step, fused: (group, group); a
    switch_reduce alone: (group, (d,)); a multicast alone: ((d,), d and its
    destinations). BadInput for an operation joining ranks of different boxes (switch
    channels are NVLS, inside one box), a multicast alone in a collective that does not
    combine (glres is a reduction), and a chunk that moves beside its switch operation
    (in its step, and in the next for a fused pair) or, in the step after a glres, is
    in another switch operation or sent by a rank it stored to (which learns of the
    store only in that step's waits): glres is the one switch operation every executor
    since v0.8 runs."""
    steps, boxes = schedule.steps, schedule.model.boxes
    found, fused = defaultdict(list), {}
    for t, step in enumerate(steps):
        for op in step.switch_ops:
            _one_box(op, boxes)
            if op.op == "switch_reduce":
                d, group = op.dsts[0], tuple(sorted({*op.srcs, op.dsts[0]}))
                spread = _its_multicast(steps, t, op, group)
                if spread is not None:
                    fused[id(spread)] = op
                found[t].append((op, group, (d,) if spread is None else group, d, spread))
    for t, step in enumerate(steps):
        for op in step.switch_ops:
            if op.op == "multicast" and id(op) not in fused:
                d = op.srcs[0]
                if not schedule.collective.combining:
                    _refuse(f"step {t} multicasts chunk {op.chunk} from rank {d} without a "
                            f"sum, and {schedule.collective.name} does not combine: a glres "
                            "of one operand is still a reduction, and a store alone, "
                            "gstore, came in v0.10.0")
                found[t].append((op, (d,), tuple(sorted({d, *op.dsts})), d, None))
    out = defaultdict(list)
    moving = _Moving(steps)
    for t in sorted(found):
        for op, readers, writers, d, spread in found[t]:
            _alone(moving, t, op, spread, readers, writers)
            out[t].append((op.chunk, readers, writers, d))
    return out


class _Moving:
    """Per step, its sends and switch operations by the chunks they move, indexed when
    first asked: _alone looks at one chunk's, not at every move of the step (at 512 GPUs
    an NVLS allreduce's thousands of operations each scanned every send: minutes)."""

    def __init__(self, steps):
        self.steps, self._index = steps, {}

    def __len__(self):
        return len(self.steps)

    def of(self, u: int, k: int) -> tuple[list, list]:
        """(the sends, the switch operations) of step u that move chunk k."""
        if u not in self._index:
            sends, ops = defaultdict(list), defaultdict(list)
            for x in self.steps[u].sends:
                for c in x.chunks():
                    sends[c].append(x)
            for x in self.steps[u].switch_ops:
                for c in x.chunks():
                    ops[c].append(x)
            self._index[u] = (sends, ops)
        sends, ops = self._index[u]
        return sends.get(k, []), ops.get(k, [])


def _refuse(why):
    raise BadInput(f"cannot export to MSCCL++: {why} (a glres sums a chunk of every member "
                   "of its source group and stores the sum to every member of its "
                   "destination group)")


def _one_box(op, boxes):
    """BadInput when switch operation `op` joins ranks of different boxes (`boxes`: the
    box of each rank; none: one node): MSCCL++ has no switch channel across nodes."""
    a = (op.dsts if op.op == "switch_reduce" else op.srcs)[0]
    other = next((m for m in sorted({*op.srcs, *op.dsts}) if boxes and boxes[m] != boxes[a]),
                 None)
    if other is not None:
        raise BadInput(f"cannot export to MSCCL++: a switch operation joins ranks {a} and "
                       f"{other} of different boxes; switch channels (NVLS) work inside one "
                       "box")


def _its_multicast(steps, t, op, group):
    """The multicast in step t + 1 of the sum switch_reduce `op` leaves in its rank d,
    from d to the other members of `group` through the same switch; None if there is
    none."""
    d = op.dsts[0]
    after = steps[t + 1].switch_ops if t + 1 < len(steps) else ()
    return next((x for x in after if x.op == "multicast" and x.chunk == op.chunk
                 and x.srcs == (d,) and x.via == op.via
                 and set(x.dsts) == set(group) - {d}), None)


def _alone(moving: _Moving, t, op, spread, readers, writers):
    """BadInput unless op's chunk moves in no other way on a member of its glres in its
    step (and in the next, with `spread`, the multicast it is fused with: its members
    learn in that step that the glres is done), and, after a glres alone, in the next
    step is in no switch operation on a member and sent by no writer but d (the one
    that ran it): the members learn of the glres in that step's waits, after its sends."""
    k, own, d = op.chunk, (op, spread), (op.dsts if op.op == "switch_reduce" else op.srcs)[0]
    members = {*readers, *writers}

    def touches(x):
        return not members.isdisjoint({*x.srcs, *x.dsts})

    for u in (t, t + 1) if spread is not None else (t,):
        sends, ops = moving.of(u, k)
        if any(members & {x.src, x.dst} for x in sends) or any(
                touches(x) and all(x is not y for y in own) for x in ops):
            _refuse(f"chunk {k} moves in step {u} beside its {op.op}")
    nxt = t + 1
    if spread is not None or nxt >= len(moving):
        return
    sends, ops = moving.of(nxt, k)
    if any(touches(x) for x in ops):
        _refuse(f"chunk {k} is in switch operations in steps {t} and {nxt} that are not a "
                "switch_reduce and the multicast of its sum (the members of a glres learn "
                "that it is done in the next step)")
    early = sorted({x.src for x in sends if x.src in writers and x.src != d})
    if early:
        _refuse(f"step {nxt} sends chunk {k} from rank {early[0]}, which learns only in that "
                f"step's waits that the glres of step {t} stored it there")


class Accesses:
    """The accesses of every slot of every rank, in program order, and the hand-offs
    they need: needs[(acquirer, releaser, acquire point)] = release point."""

    def __init__(self):
        self.log = {}  # (rank, slot) -> [(last writer, its release point) or None, {reader: point}]
        self.have = {}  # (acquirer, releaser) -> latest release point acquired
        self.needs = {}

    def need(self, y, x, p, q):
        """Thread block y acquires at q what x releases at p (unless it already has)."""
        if self.have.get((y, x), (-1, 0)) >= p:
            return
        self.have[(y, x)] = p
        self.needs[(y, x, q)] = p

    def access(self, tb, key, write, q, p):
        """tb reads or writes slot `key` (rank, slot): it acquires at q (None: it need
        not, the data arriving from a peer) every conflicting earlier access by another
        thread block, and releases at p."""
        entry = self.log.get(key)
        if entry is None:
            entry = self.log[key] = [None, {}]
        last, readers = entry
        if q is not None:
            if last is not None and last[0] is not tb:
                self.need(tb, last[0], last[1], q)
            if write:
                for other, point in readers.items():
                    if other is not tb:
                        self.need(tb, other, point, q)
        if write:
            entry[0], entry[1] = (tb, p), {}
        else:
            readers[tb] = max(readers.get(tb, p), p)


def most_peers(flow: _Flow, boxes) -> int:
    """The most peers of one channel type any rank exchanges with in the whole launch:
    at least as many as in any one lane, so a cap of that many groups as no cap does."""
    return max((len(p) for p in _peers(flow, boxes, 1).values()), default=0)


def thread_block_floor(flow: _Flow, boxes, lanes: int, most: int, ranks=None) -> int:
    """At least how many thread blocks the busiest rank (of `ranks`, default every one)
    gets in any split of `flow` into `lanes` lanes (chunk k in lane k mod lanes) with at
    most `most` peers a thread block: one per `most` peers of each (rank, lane, channel
    type). The split itself (synth.export.mscclpp) only adds to that: it also parts
    peers whose remote buffers do not fit one thread block, and gives local work one
    where a lane has none. One pass over the moves: what lets a search skip a try that
    cannot beat its best."""
    per_rank = defaultdict(int)
    counted = None if ranks is None else set(ranks)
    for (rank, _, _), them in _peers(flow, boxes, lanes).items():
        if counted is None or rank in counted:
            per_rank[rank] += -(-len(them) // most)
    return max(per_rank.values(), default=0)


def _peers(flow: _Flow, boxes, lanes: int) -> dict[tuple[int, int, str], set[int]]:
    """(rank, lane, channel type) -> the ranks it exchanges with there: sends, and the
    members of a switch operation with the rank that runs it (its hand-shakes)."""
    peers = defaultdict(set)
    for moves, _, summed in flow.steps:
        for k, a, b, _, _ in moves:
            kind = "port" if boxes and boxes[a] != boxes[b] else "memory"
            peers[(a, k % lanes, kind)].add(b)
            peers[(b, k % lanes, kind)].add(a)
        for k, readers, writers, d, _, _ in summed:
            for m in {*readers, *writers} - {d}:
                peers[(d, k % lanes, "memory")].add(m)
                peers[(m, k % lanes, "memory")].add(d)
    return peers
