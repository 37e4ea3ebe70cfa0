"""Where every value of an MSCCL++ plan lives: the slots of every send, reduction,
switch reduction and final copy (synth.export.mscclpp's recipe, "Slots first"). It does
not depend on how the work is split into thread blocks, so the search over thread
block splits (synth.export.mscclpp.build) computes it once.
"""

from __future__ import annotations

from collections import defaultdict

from synth.errors import BadInput
from synth.export.layout import Layout, Slot, drop_redundant


class _Flow:
    """Where every value lives: the slots of every send, reduction and final copy.

    steps: per step, (moves (chunk, src rank, dst rank, src slot, dst slot), reductions
    (rank, chunk, dst slot, src slots, first sender), switch reductions (chunk, ranks,
    rank summed into, src slot, out slot)); aligned: per step, the local copies
    (rank, chunk, from, to) before its switch reductions; epilogue: the final copies
    (rank, chunk, from, to); written: (rank, slot) written in a launch, by the rank or a
    peer; scratch: the scratch slots per rank."""

    def __init__(self, schedule, layout: Layout):
        places = _Places(layout)
        self.steps = []  # per step: (moves, reductions, switch reductions)
        self.aligned = []  # per step: (rank, chunk, from, to) copies before its glres
        fused = _fused_switch_ops(schedule)
        for t, sends in enumerate(drop_redundant(schedule.collective, schedule.steps)):
            moves, arrived = places.moves(t, sends)
            reductions = places.reductions(t, arrived)
            summed, aligned = places.switch_reductions(t, fused.get(t, ()))
            self.steps.append((moves, reductions, summed))
            self.aligned.append(aligned)
        self.epilogue = places.final_copies(schedule.collective.post)
        self.scratch, self.written = places.scratch, places.written


class _Places:
    """The work of placing values, step by step: where each (rank, chunk) value is now
    (loc), the slots each rank has touched (accessed), and per (rank, slot) every read
    since its last write in the launch, as (peer, step) of the sends that read it (peer
    None for a local read)."""

    def __init__(self, lay: Layout):
        self.lay = lay
        self.loc, self.accessed = {}, defaultdict(set)
        for r in range(lay.n):
            for k in range(lay.g):
                slot = lay.init_slot(r, k)
                if slot is not None:
                    self.loc[(r, k)] = slot
                    self.accessed[r].add(slot)
        self.scratch = defaultdict(int)
        self.since = defaultdict(list)
        self.written = set()  # (rank, slot) written in a launch, by the rank or a peer

    def fresh(self, rank):
        """A scratch slot of rank not used before in the launch."""
        self.scratch[rank] += 1
        slot = Slot("s", self.scratch[rank] - 1)
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
        reads = self.since.get((rank, out))
        if out is not None and reads and all(p == peer and s < t for p, s in reads):
            return out
        return self.fresh(rank)

    def fresh_all(self, group):
        """One fresh scratch slot, the same index on every member of `group`."""
        slot = Slot("s", max(self.scratch[m] for m in group))
        for m in group:
            self.scratch[m] = slot.idx + 1
            self.accessed[m].add(slot)
        return slot

    def aligned_slot(self, k, group):
        """Where the members of a switch reduction gather chunk k when it sits at
        different slots: its output slot, the same on every member, if every member that
        must copy into it has not touched it; else one fresh scratch slot for all."""
        lay, loc, accessed = self.lay, self.loc, self.accessed
        out = {lay.out_slot(m, k) for m in group}
        out = out.pop() if len(out) == 1 else None
        if out is not None and all(loc[(m, k)] == out or out not in accessed[m]
                                   for m in group):
            for m in group:
                accessed[m].add(out)
            return out
        return self.fresh_all(group)

    def moves(self, t, sends):
        """The sends of step t placed: (moves (chunk, src, dst, src slot, dst slot),
        arrived {(rank, chunk): [(sender, scratch slot)]} of the reductions to sum)."""
        loc, since = self.loc, self.since
        moves, moved, arrived = [], {}, defaultdict(list)
        for x in sends:
            since[(x.src, loc[(x.src, x.chunk)])].append((x.dst, t))
        # copies in chunk order, reductions per sender in chunk order: runs of
        # consecutive chunks get runs of consecutive slots
        for x in sorted(sends, key=lambda x: (x.dst, x.op == "reduce",
                                              x.src if x.op == "reduce" else 0, x.chunk)):
            src = loc[(x.src, x.chunk)]
            if x.op == "copy":
                dst = self.copy_slot(x.dst, x.chunk, x.src, t)
                moved[(x.dst, x.chunk)] = dst
            else:
                dst = self.fresh(x.dst)
                arrived[(x.dst, x.chunk)].append((x.src, dst))
            moves.append((x.chunk, x.src, x.dst, src, dst))
            self.written.add((x.dst, dst))
            since[(x.dst, dst)] = []
        loc.update(moved)
        return moves, arrived

    def reductions(self, t, arrived):
        """The sums of step t: per (rank, chunk) that received reductions, (rank, chunk,
        dst slot, src slots, first sender), one re summing all that arrived into the
        value (in place when the layout lets it be written; else into its output slot
        while untouched, or the first arrival's slot)."""
        lay, loc, accessed, since = self.lay, self.loc, self.accessed, self.since
        reductions = []
        for (d, k), got in sorted(arrived.items()):
            slots = [s for _, s in got]
            cur = loc[(d, k)]
            if lay.writable(d, k, cur):
                dst, srcs = cur, [cur, *slots]
            else:
                out = lay.out_slot(d, k)
                if out is not None and out not in accessed[d]:
                    accessed[d].add(out)
                    dst, srcs = out, [cur, *slots]
                else:
                    dst, srcs = slots[0], [slots[0], cur, *slots[1:]]
            loc[(d, k)] = dst
            reductions.append((d, k, dst, srcs, got[0][0]))
            self.written.add((d, dst))
            for slot in srcs:
                since[(d, slot)].append((None, t))
            since[(d, dst)] = []
        return reductions

    def switch_reductions(self, t, fused):
        """The switch reductions of step t (`fused`: (chunk, ranks, d) each):
        (summed (chunk, ranks, d, src slot, out slot), aligned (rank, chunk, from, to):
        the local copies that first gather a chunk at one slot on every member)."""
        lay, loc, accessed, since = self.lay, self.loc, self.accessed, self.since
        summed, aligned = [], []
        for k, group, d in fused:
            src = {loc[(m, k)] for m in group}
            if len(src) != 1:  # a switch channel reads one offset on every member
                src = self.aligned_slot(k, group)
                for m in group:
                    if loc[(m, k)] != src:  # a local copy, read here, written there
                        aligned.append((m, k, loc[(m, k)], src))
                        since[(m, loc[(m, k)])].append((None, t))
                        loc[(m, k)] = src
                        self.written.add((m, src))
                        since[(m, src)] = []
            else:
                src = src.pop()
            out = {lay.out_slot(m, k) for m in group}
            out = out.pop() if len(out) == 1 else None
            if out is None or (out != src and any(out in accessed[m] for m in group)):
                out = Slot("s", max(self.scratch[m] for m in group))  # one for all
                for m in group:
                    self.scratch[m] = out.idx + 1
            for m in group:
                accessed[m].add(out)
                since[(m, src)].append((d, t))
                loc[(m, k)] = out
                self.written.add((m, out))
                since[(m, out)] = []
            summed.append((k, group, d, src, out))
        return summed, aligned

    def final_copies(self, post):
        """(rank, chunk, from, to) of every result in `post` not in its output slot at
        the end, to be copied there."""
        epilogue = []
        for r, k in sorted(post):
            out = self.lay.out_slot(r, k)
            if self.loc.get((r, k)) not in (None, out):
                epilogue.append((r, k, self.loc[(r, k)], out))
                self.written.add((r, out))
        return epilogue


def _fused_switch_ops(schedule) -> dict:
    """{step: [(chunk, ranks, d)]}: each switch_reduce of a chunk into d, with the
    multicast of the sum from d to the other sources in the next step, as one glres (the
    switch sums every member's chunk and stores the sum to every member). BadInput for
    switch operations that do not pair up so, or that share a chunk with other moves in
    those two steps: glres is the one switch operation every executor since v0.8 runs."""
    steps = schedule.steps
    fused, paired = defaultdict(list), set()

    def refuse(why):
        raise BadInput(f"cannot export to MSCCL++: {why} (a switch channel's glres sums a "
                       "chunk of every member and stores the sum to every member)")

    for t, step in enumerate(steps):
        for op in step.switch_ops:
            if op.op != "switch_reduce":
                continue
            d, k = op.dsts[0], op.chunk
            group = tuple(sorted({*op.srcs, d}))
            after = steps[t + 1].switch_ops if t + 1 < len(steps) else ()
            spread = [x for x in after if x.op == "multicast" and x.chunk == k
                      and x.srcs == (d,) and x.via == op.via
                      and set(x.dsts) == set(group) - {d}]
            if not spread:
                refuse(f"step {t} sums chunk {k} into rank {d} in switch {op.via}, and step "
                       f"{t + 1} does not multicast it to the other {len(group) - 1} ranks")
            for u in (t, t + 1):
                busy = [x for x in steps[u].sends if k in x.chunks()]
                busy += [x for x in steps[u].switch_ops if k in x.chunks()
                         and x is not op and x is not spread[0]]
                if busy:
                    refuse(f"chunk {k} moves in step {u} beside its switch reduction")
            paired.add((t + 1, id(spread[0])))
            fused[t].append((k, group, d))
    for t, step in enumerate(steps):
        for op in step.switch_ops:
            if op.op == "multicast" and (t, id(op)) not in paired:
                refuse(f"step {t} multicasts chunk {op.chunk} from rank {op.srcs[0]} without "
                       "summing it in the switch the step before")
    return fused
