"""The ops of an MSCCL XML program and where every value lives (synth.export.msccl
builds the program: its threadblocks, fusion and virtual times, then these ops, then
their order and dependencies).

Step by step, in schedule order: each send is an s op (or the fused receive that feeds
it); each receive an r, rrc or fused rcs/rrs/rrcs op, its value put where the layout
wants it (synth.export.layout) when that slot is free, else in a fresh scratch slot
(never reused within a launch); a value received while the rank still reads the old one
in the same step goes to scratch and is folded in (re or cpy) after the step's sends.
Last, each result not in its output slot is copied there. Every op records the ops it
must follow on the slots it touches (read after write, write after read and write);
synth.export.msccl turns them into depid/deps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from synth.export.layout import Slot, coalesce

MAX_CNT = 71            # 0 < cnt < 72


@dataclass(eq=False)
class _Op:
    kind: str
    rank: int
    order: tuple
    src: Slot | None = None
    dst: Slot | None = None
    cnt: int = 1
    deps: set = field(default_factory=set)
    tb: "_TB | None" = None
    sender: "_Op | None" = None  # the op whose send this op receives


@dataclass(eq=False)
class _TB:
    rank: int
    chan: int
    recv: int = -1
    send: int = -1
    ops: list = field(default_factory=list)
    id: int = -1


class _Values:
    """Where every value of one program lives while its ops are placed: the slot of each
    (rank, chunk), the scratch slots handed out per rank, and per slot its last writer
    and the readers since (the ops a later access must follow)."""

    def __init__(self, lay):
        self.lay = lay
        self.loc = {}  # (rank, chunk) -> Slot of its current value
        for r in range(lay.n):
            for k in range(lay.g):
                slot = lay.init_slot(r, k)
                if slot is not None:
                    self.loc[(r, k)] = slot
        self.scratch = defaultdict(int)
        self.used = defaultdict(set)  # rank -> output slots handed out
        # (rank, slot) -> [last writer, readers since]
        self.state = defaultdict(lambda: [None, []])

    def read(self, op, rank, slot):
        """op reads slot: it follows the slot's last writer."""
        w, readers = self.state[(rank, slot)]
        if w is not None and w is not op:
            op.deps.add(w)
        readers.append(op)

    def write(self, op, rank, slot):
        """op writes slot: it follows the last writer and every reader since."""
        entry = self.state[(rank, slot)]
        op.deps.update(o for o in [entry[0], *entry[1]] if o is not None and o is not op)
        entry[0], entry[1] = op, []

    def fresh(self, rank):
        """A scratch slot of rank not used before."""
        self.scratch[rank] += 1
        return self.lay.interned(Slot("s", self.scratch[rank] - 1))

    def new_slot(self, rank, k):
        """Chunk k's output slot on rank, the first time it is asked for; else a fresh
        scratch slot."""
        out = self.lay.out_slot(rank, k)
        if out is not None and out not in self.used[rank]:
            self.used[rank].add(out)
            return out
        return self.fresh(rank)

    def target(self, rank, k):
        """Where a new value of chunk k on rank goes: where the current one is, when the
        layout lets it be written there; else a new slot."""
        cur = self.loc.get((rank, k))
        if cur is not None and self.lay.writable(rank, k, cur):
            return cur
        return self.new_slot(rank, k)


def _place(op, tb):
    """op, appended to threadblock tb."""
    op.tb = tb
    tb.ops.append(op)
    return op


def place_ops(program) -> defaultdict:
    """Every op of `program` (a synth.export.msccl._Program whose threadblocks and
    fusion are decided), appended to its threadblock with the ops it must follow; returns
    the scratch slots each rank uses."""
    values = _Values(program.layout)
    sender_of = {}  # transfer idx -> the op that sends it
    by_step = defaultdict(list)
    for x in program.xs:
        by_step[x.step].append(x)
    for t in range(program.nsteps):
        folds = []
        for x in by_step[t]:
            if x.idx not in program.fused_by:  # a plain send
                lane = program.lane(x.chunk)
                src = values.loc[(x.src, x.chunk)]
                op = _place(_Op("s", x.src, program.tau[x.idx], src=src),
                            program.send_tb[(x.src, lane, x.dst)])
                values.read(op, x.src, op.src)
                sender_of[x.idx] = op
            op = _receive(program, values, x, sender_of, folds)
            op.sender = sender_of[x.idx]
        for x, recv in folds:  # after the step's sends of the old value
            _fold(values, t, x, recv)
    _epilogue(program, values)
    return values.scratch


def _receive(program, values, x, sender_of, folds):
    """The op by which x's receiver takes it: fused with the send it feeds, staged in
    scratch (its fold appended to `folds`), reduced into the current value, or copied
    where the value goes."""
    d, k = x.dst, x.chunk
    tb = program.recv_tb[(d, program.lane(k), x.src)]
    loc = values.loc
    if x.idx in program.fused:
        kind = program.fused[x.idx][1]
        op = _place(_Op(kind, d, program.tau[x.idx]), tb)
        sender_of[program.fused[x.idx][0].idx] = op
        if kind != "rcs":
            op.src = loc[(d, k)]
            values.read(op, d, op.src)
        if kind != "rrs":
            op.dst = values.target(d, k)
            values.write(op, d, op.dst)
            loc[(d, k)] = op.dst
    elif x.idx in program.staged:
        op = _place(_Op("r", d, program.tau[x.idx], dst=values.fresh(d)), tb)
        values.write(op, d, op.dst)
        folds.append((x, op))
    elif x.op == "reduce":
        op = _place(_Op("rrc", d, program.tau[x.idx], src=loc[(d, k)]), tb)
        values.read(op, d, op.src)
        op.dst = values.target(d, k)
        values.write(op, d, op.dst)
        loc[(d, k)] = op.dst
    else:
        op = _place(_Op("r", d, program.tau[x.idx], dst=values.target(d, k)), tb)
        values.write(op, d, op.dst)
        loc[(d, k)] = op.dst
    return op


def _fold(values, t, x, recv):
    """The new value of x's chunk, received into scratch by `recv` in step t, folded
    into the current one (cpy or re, on recv's threadblock), or left in scratch as the
    value; returns nothing."""
    lay, loc = values.lay, values.loc
    d, k, q = x.dst, x.chunk, recv.dst
    cur = loc[(d, k)]
    order = (t, 1, x.key)
    if x.op == "copy" and not lay.writable(d, k, cur):
        loc[(d, k)] = q  # the new value simply lives in scratch
        return
    if x.op == "copy":
        op = _place(_Op("cpy", d, order, src=q, dst=cur), recv.tb)
        values.read(op, d, q)
    elif lay.writable(d, k, cur):
        op = _place(_Op("re", d, order, src=q, dst=cur), recv.tb)
        values.read(op, d, q)
        values.read(op, d, cur)
    else:
        op = _place(_Op("re", d, order, src=cur, dst=q), recv.tb)
        values.read(op, d, cur)
        values.read(op, d, q)
        loc[(d, k)] = q
    values.write(op, d, op.dst)


def _epilogue(program, values):
    """Copy each result that is not yet in its output slot there: right after the
    step that produced it, or first thing when it is the rank's untouched input."""
    lay, early = program.layout, defaultdict(list)
    for r, k in sorted(program.coll.post):
        cur, out = values.loc.get((r, k)), lay.out_slot(r, k)
        if cur is None or cur == out:
            continue
        writer = values.state[(r, cur)][0]
        if writer is None:
            early[(r, program.lane(k))].append((cur, out))
            continue
        op = _Op("cpy", r, writer.order + (1, k), src=cur, dst=out)
        values.read(op, r, cur)
        values.write(op, r, out)
        op.tb = writer.tb
        writer.tb.ops.append(op)
    for (r, lane), copies in sorted(early.items()):
        tb = next((tb for tb in program.tbs if tb.rank == r and tb.chan == lane), None) \
            or next((tb for tb in program.tbs if tb.rank == r), None)
        if tb is None:
            tb = _TB(r, lane)
            program.tbs.append(tb)
        for n, (src, dst, cnt) in enumerate(coalesce(copies, MAX_CNT)):
            op = _Op("cpy", r, (-1, n), src=src, dst=dst, cnt=cnt)
            op.tb = tb
            tb.ops.append(op)
