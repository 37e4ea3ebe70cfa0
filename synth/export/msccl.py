"""Lower a Schedule to an MSCCL XML algorithm (msccl, msccl-executor-nccl, RCCL).

Buffers follow synth.export.layout: chunk k of the collective sits in the slot the
layout gives each rank; a value a rank relays without a slot of its own, and a value
received while the rank still reads the old one in the same step, goes to a fresh
scratch slot (scratch slots are never reused within a launch). nchunksperloop is the
chunk count of the larger per-rank buffer (G of docs/schedule-file.md, except alltoall:
its N*N*C global chunks are the N*C chunks of each rank's buffers).

The program, per rank:
- Channels are chunk lanes: chunk k travels on channel k mod K, K the fewest channels
  that keep every threadblock within the strictest runtime's 64 steps (and at most 64
  threadblocks per GPU, 32 per channel, 32 channels, 1024 XML elements per rank for
  msccl-executor-nccl's parser, buffers of at most 2^15 chunks for the runtimes' int16
  offsets); otherwise BadInput.
- Per channel, each threadblock has one receive peer and one send peer. Receive peers
  are matched with send peers so that the most receives can be fused with the send they
  feed: a chunk received and later forwarded unchanged becomes one rcs step; a reduction
  received and forwarded becomes rrcs (or rrs when the rank never needs the sum again).
- Each threadblock runs its steps in schedule order ("virtual time"): a transfer takes
  its step and (chunk, src, dst) as its time; a fused forward takes the time of the
  receive that feeds it, and so does its downstream receive (allowed only when the
  downstream rank touches that chunk nowhere in between). Every dependency then points
  to an earlier time, so the transfer with the least unfinished time can always run:
  no deadlock, with any amount of buffering down to one message per connection.
- A rank that reads a chunk in the same step as it receives a new value of it gets the
  new value in scratch and folds it in (re or cpy) once the step's sends of the old value
  are done. Dependencies (depid/deps, hasdep, extra ones as nop steps) order every
  cross-threadblock read-after-write, write-after-read and write-after-write on a slot.

The ops and their slots are placed by synth.export.msccl_flow, and the limits' values
and what the transfers alone tell of them are synth.export.msccl_limits; here, the
channels, threadblocks, fusion, order and dependencies, the limits' checks on a program,
and the XML text.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from synth.deadline import Deadline
from synth.errors import BadInput
from synth.export.layout import Layout, drop_redundant
from synth.export.msccl_flow import _TB, place_ops
from synth.export.msccl_limits import (MAX_BUFFER, MAX_BYTES, MAX_CHANNELS, MAX_NODES,
                                       MAX_STEPS, MAX_TBS, MAX_TBS_PER_CHANNEL,
                                       lane_threadblocks, surely_over, transfer_array)


@dataclass(eq=False)
class _X:
    """One send of the schedule."""
    idx: int
    step: int
    chunk: int
    src: int
    dst: int
    op: str

    @property
    def key(self):
        return (self.chunk, self.src, self.dst)


class _NotOrdered(Exception):
    """A dependency would point forward in virtual time (never expected; retried unfused)."""


def _lane_tbs(rank, chan, in_peers, out_peers, pair_counts):
    """Threadblocks of one rank on one channel: receive peers matched with send peers,
    the pairs with most fusable transfers first, the rest paired in order."""
    tbs, free_in, free_out = [], set(in_peers), set(out_peers)
    for (a, e), _ in sorted(pair_counts.items(), key=lambda item: (-item[1], item[0])):
        if a in free_in and e in free_out:
            tbs.append(_TB(rank, chan, a, e))
            free_in.discard(a)
            free_out.discard(e)
    ins, outs = sorted(free_in), sorted(free_out)
    for i in range(max(len(ins), len(outs))):
        tbs.append(_TB(rank, chan, ins[i] if i < len(ins) else -1,
                       outs[i] if i < len(outs) else -1))
    return tbs


class _Program:
    """The ops of every rank for one choice of channel count, before XML; their order
    and waits come with order(), which check_limits need not wait for where the ops
    alone break a limit (ordering takes seconds and gigabytes at 512 GPUs)."""

    def __init__(self, schedule, layout: Layout, channels: int, fuse: bool):
        self.coll, self.layout, self.k = schedule.collective, layout, channels
        xs, steps = [], drop_redundant(schedule.collective, schedule.steps)
        for t, sends in enumerate(steps):
            for s in sorted(sends, key=lambda s: (s.chunk, s.src, s.dst)):
                xs.append(_X(len(xs), t, s.chunk, s.src, s.dst, s.op))
        self.xs, self.nsteps = xs, len(steps)
        # accesses of (rank, chunk) in schedule order: (step, "r"|"w", transfer)
        self.acc = defaultdict(list)
        for x in xs:
            self.acc[(x.src, x.chunk)].append((x.step, "r", x))
            self.acc[(x.dst, x.chunk)].append((x.step, "w", x))
        self.staged = {x.idx for x in xs
                       if any(t == x.step and kind == "r" for t, kind, _ in self.acc[(x.dst, x.chunk)])}
        self.tbs = []
        self._threadblocks(self._candidates() if fuse else [])
        self._fuse()
        self.scratch = place_ops(self)
        self.steps = None  # per threadblock, its steps with their waits: order()

    def lane(self, chunk: int) -> int:
        return chunk % self.k

    # --- fusion -----------------------------------------------------------------

    def _candidates(self):
        """(receive x, the send S it feeds, step type): x is the only write of its
        chunk on its rank in its step, the rank reads nothing of it in that step, and S is
        the first read after it, before any other write."""
        out = []
        for x in self.xs:
            if x.idx in self.staged:
                continue
            acc = self.acc[(x.dst, x.chunk)]
            if sum(1 for t, kind, _ in acc if t == x.step and kind == "w") != 1:
                continue
            later = [a for a in acc if a[0] > x.step]
            reads = []
            for t, kind, y in later:
                if kind == "w":
                    break
                reads.append(y)
            if not reads:
                continue
            if x.op == "copy":
                kind = "rcs"
            elif len(later) == 1 and (x.dst, x.chunk) not in self.coll.post:
                kind = "rrs"
            else:
                kind = "rrcs"
            out.append((x, reads[0], kind))
        return out

    def _threadblocks(self, candidates):
        ins, outs = _lane_peers(self.xs, self.k)
        pairs = defaultdict(lambda: defaultdict(int))
        for x, s, _ in candidates:
            pairs[(x.dst, self.lane(x.chunk))][(x.src, s.dst)] += 1
        self.recv_tb, self.send_tb = {}, {}
        for key in sorted(set(ins) | set(outs)):
            rank, chan = key
            for tb in _lane_tbs(rank, chan, ins[key], outs[key], pairs[key]):
                self.tbs.append(tb)
                if tb.recv >= 0:
                    self.recv_tb[(rank, chan, tb.recv)] = tb
                if tb.send >= 0:
                    self.send_tb[(rank, chan, tb.send)] = tb
        self.candidates = candidates

    def _fuse(self):
        self.tau = {x.idx: (x.step, 0, x.key) for x in self.xs}
        self.fused, self.fused_by = {}, {}  # receive idx -> (send, kind); send idx -> receive
        for x, s, kind in self.candidates:
            lane = self.lane(x.chunk)
            if self.recv_tb[(x.dst, lane, x.src)] is not self.send_tb[(x.dst, lane, s.dst)]:
                continue
            t0 = self.tau[x.idx][0]
            if any(y is not s and t0 <= t <= s.step for t, _, y in self.acc[(s.dst, s.chunk)]):
                continue  # the downstream rank touches the chunk while it would arrive early
            self.fused[x.idx] = (s, kind)
            self.fused_by[s.idx] = x
            self.tau[s.idx] = self.tau[x.idx]

    # --- order and dependencies (the ops: synth.export.msccl_flow) -----------------

    def order(self):
        """Sort each threadblock by virtual time; turn dependencies into depid/deps, one
        per step, extra ones as nop steps before it; mark what is waited on."""
        by_rank = defaultdict(list)
        for tb in self.tbs:
            by_rank[tb.rank].append(tb)
        for rank, tbs in by_rank.items():
            tbs.sort(key=lambda tb: (tb.chan, tb.recv < 0, tb.recv, tb.send < 0, tb.send))
            for i, tb in enumerate(tbs):
                tb.id = i
        self.tbs = [tb for rank in sorted(by_rank) for tb in by_rank[rank]]
        pos = {}
        for tb in self.tbs:
            tb.ops.sort(key=lambda op: op.order)
            for i, op in enumerate(tb.ops):
                pos[op] = i
        plans = self._plan_waits(pos)
        # final step numbers, counting the nops
        index = {}
        for tb in self.tbs:
            n = 0
            for op, need in plans[tb]:
                n += max(len(need) - 1, 0)
                index[(tb, pos[op])] = n
                n += 1
        self.steps = {}
        for tb in self.tbs:
            out = []
            for op, need in plans[tb]:
                waits = [(t.id, index[(t, p)]) for t, p in need]
                for t, s in waits[1:]:
                    out.append(("nop", None, None, 1, t, s))
                dep = waits[0] if waits else (-1, -1)
                out.append((op.kind, op.src, op.dst, op.cnt, dep[0], dep[1]))
            self.steps[tb] = out
        self.hasdep = {(tb.rank, t, s) for tb in self.tbs for *_, t, s in self.steps[tb] if t >= 0}

    def _plan_waits(self, pos):
        """For each op, the (threadblock, position) steps it must wait on explicitly:
        its dependencies minus those already implied by program order, earlier waits
        and received messages (vector clocks, visiting ops so that each comes after its
        threadblock predecessor and its sender; virtual time guarantees an order). An
        op's clock is dropped once every op that reads it is visited: kept for every op,
        they took 1.7 GB at 128 ranks."""
        index = {tb: i for i, tb in enumerate(self.tbs)}
        size = len(self.tbs)
        clock, done, readers = {}, set(), _readers(self.tbs)
        plans = {tb: [] for tb in self.tbs}
        nxt = {tb: 0 for tb in self.tbs}

        def read(op):
            readers[op] -= 1
            return clock.pop(op) if readers[op] == 0 else clock[op]

        pending = sorted(self.tbs, key=lambda tb: index[tb])
        while pending:
            progressed = False
            for tb in pending:
                while nxt[tb] < len(tb.ops):
                    op = tb.ops[nxt[tb]]
                    if (op.sender is not None and op.sender not in done) \
                            or any(dep not in done for dep in op.deps):
                        break
                    now = (read(tb.ops[nxt[tb] - 1]).copy() if nxt[tb]
                           else np.zeros(size, dtype=np.int32))
                    if op.sender is not None:
                        np.maximum(now, read(op.sender), out=now)
                    need = []
                    for dep in sorted(op.deps, key=lambda d: d.order, reverse=True):
                        if dep.order >= op.order:
                            raise _NotOrdered()
                        seen = read(dep)
                        if dep.tb is tb or now[index[dep.tb]] > pos[dep]:
                            continue
                        need.append((dep.tb, pos[dep]))
                        np.maximum(now, seen, out=now)
                    now[index[tb]] = pos[op] + 1
                    done.add(op)
                    if readers[op]:
                        clock[op] = now
                    plans[tb].append((op, sorted(need, key=lambda item: (item[0].id, item[1]))))
                    nxt[tb] += 1
                    progressed = True
            pending = [tb for tb in pending if nxt[tb] < len(tb.ops)]
            if pending and not progressed:
                raise _NotOrdered()
        return plans

    def check_limits(self):
        """None when the runtimes' limits hold, else why not. Before order() a
        threadblock's ops stand for its steps: the nops that carry its extra waits come
        with the order, so a limit broken then is broken after."""
        ordered = self.steps is not None
        steps = (lambda tb: len(self.steps[tb])) if ordered else (lambda tb: len(tb.ops))
        least = "" if ordered else "at least "
        per_gpu, per_chan = defaultdict(int), defaultdict(int)
        for tb in self.tbs:
            per_gpu[tb.rank] += 1
            per_chan[(tb.rank, tb.chan)] += 1
            if steps(tb) > MAX_STEPS:
                return (f"a threadblock of rank {tb.rank} needs {least}{steps(tb)} steps "
                        f"(limit {MAX_STEPS})")
        if per_gpu and max(per_gpu.values()) > MAX_TBS:
            return f"a rank needs {max(per_gpu.values())} threadblocks (limit {MAX_TBS})"
        nodes = defaultdict(lambda: 1 + self.layout.n)
        for tb in self.tbs:
            nodes[tb.rank] += 1 + steps(tb)
        if nodes and max(nodes.values()) > MAX_NODES:
            return (f"a rank's part of the XML has {least}{max(nodes.values())} elements "
                    f"(the parser takes {MAX_NODES})")
        if per_chan and max(per_chan.values()) > MAX_TBS_PER_CHANNEL:
            return (f"a channel needs {max(per_chan.values())} threadblocks "
                    f"(limit {MAX_TBS_PER_CHANNEL})")
        chunks = max(self.layout.i_chunks, self.layout.o_chunks, *self.scratch.values())
        if chunks > MAX_BUFFER:
            return (f"a buffer of {chunks} chunks (the runtimes keep a step's offsets in 16 "
                    f"bits: at most {MAX_BUFFER})")
        return None


def _readers(tbs) -> Counter:
    """{op: how many visits read its clock}: its successor in its threadblock, its
    message's receiver, the ops that depend on it."""
    readers = Counter()
    for tb in tbs:
        for op in tb.ops[:-1]:
            readers[op] += 1
        for op in tb.ops:
            if op.sender is not None:
                readers[op.sender] += 1
            readers.update(op.deps)
    return readers


def _lane_peers(transfers, k: int):
    """Per (rank, channel) on k channels (chunk c on channel c mod k): the ranks it
    receives from and the ranks it sends to."""
    ins, outs = defaultdict(set), defaultdict(set)
    for x in transfers:
        ins[(x.dst, x.chunk % k)].add(x.src)
        outs[(x.src, x.chunk % k)].add(x.dst)
    return ins, outs


def refuse_collective(schedule) -> None:
    """BadInput for gather and scatter: no XML runtime runs them as synth means them."""
    if schedule.collective.name in ("gather", "scatter"):
        raise BadInput(f"cannot export {schedule.collective.name} to MSCCL XML: no runtime "
                       "runs such a file as synth means it (NCCL has no gather or scatter "
                       "call; RCCL counts one share: docs/runtimes.md, \"Gather and scatter "
                       "XML\"); export it to MSCCL++")


def build(schedule, inplace: bool = False, deadline: Deadline = Deadline()):
    """The _Program with the fewest channels that fits the runtimes' limits. Channel
    counts whose threadblocks alone break a limit are ruled out before any is built
    (a big schedule's program takes seconds and gigabytes per try), and a program whose
    ops alone break one before it is ordered (the dearer half); OutOfTime when the
    deadline passes before a try. BadInput for a collective no XML runtime runs as synth
    means it (here too, as synth.export.loads asks this, not to_msccl_xml)."""
    refuse_collective(schedule)
    layout = Layout(schedule.collective, inplace)
    most = max(1, min(schedule.collective.num_chunks, MAX_CHANNELS))
    why = first = None
    steps = drop_redundant(schedule.collective, schedule.steps)
    # the most chunks one rank receives from one peer: on k channels some threadblock
    # has at least that over k steps (surely_over's bound, counted once for every k)
    pairs = Counter((x.dst, x.src) for sends in steps for x in sends)
    most_from_one = max(pairs.values(), default=0)
    busiest = min((min(pair) for pair, n in pairs.items() if n == most_from_one), default=0)
    transfers = None  # made at the first channel count the bound above leaves open
    for k in range(1, most + 1):
        first = first or why  # why one channel did not do: often the real reason
        if -(-most_from_one // k) > MAX_STEPS:
            why = (f"a threadblock of rank {busiest} needs at least "
                   f"{-(-most_from_one // k)} steps (limit {MAX_STEPS})")
            continue
        deadline.check("exporting to MSCCL XML")  # each try below takes seconds at scale
        if transfers is None:
            transfers = transfer_array(steps)
        need = lane_threadblocks(transfers, k)
        per_gpu, per_chan = int(need.sum(axis=1).max()), int(need.max())
        if per_gpu > MAX_TBS:
            why = f"a rank needs {per_gpu} threadblocks (limit {MAX_TBS})"
            continue
        if per_chan > MAX_TBS_PER_CHANNEL:
            why = f"a channel needs {per_chan} threadblocks (limit {MAX_TBS_PER_CHANNEL})"
            continue
        short = surely_over(transfers, k, layout.n, need.sum(axis=1))
        if short:
            why = short
            continue
        deadline.check("exporting to MSCCL XML")
        program = _Program(schedule, layout, k, fuse=True)
        why = program.check_limits()
        if why is not None:  # over before its order: over after it (check_limits)
            continue
        try:
            program.order()
        except _NotOrdered:
            program = _Program(schedule, layout, k, fuse=False)
            program.order()
        why = program.check_limits()
        if why is None:
            return program
    if first is None or most == 1:
        raise BadInput(f"cannot export to MSCCL XML: even on {most} channel"
                       f"{'s' if most > 1 else ''} {why}")
    raise BadInput(f"cannot export to MSCCL XML: on 1 channel {first}, and on up to "
                   f"{most} channels {why}")


def to_msccl_xml(schedule, inplace: bool = False, name: str | None = None,
                 min_bytes: int = 0, max_bytes: int = 0, protocol: str = "Simple",
                 program=None) -> str:
    """The XML text of the schedule's algorithm. BadInput when it cannot be expressed.
    A compact schedule (ranged sends, a pipeline) is lowered in its runtime form
    (synth.export.form.runtime_form), as `synth export` does. `program`: build's, when the
    caller has it (synth.export.loads.lowered)."""
    # quoteattr here, not at the top: it imports urllib.request and ssl (1.2 MB), which
    # a job that only asks whether the runtime loads a schedule does not need
    from xml.sax.saxutils import quoteattr

    from synth.export.form import runtime_form

    name = name or default_name(schedule, inplace)  # after the schedule asked for
    if max(min_bytes, max_bytes) > MAX_BYTES:
        raise BadInput(f"cannot export to MSCCL XML with a message size above {MAX_BYTES} "
                       "bytes (the runtimes read minBytes and maxBytes as 64-bit ints)")
    if min_bytes > max_bytes == 0:
        raise BadInput(f"cannot export to MSCCL XML with --min-bytes {min_bytes} and no "
                       "--max-bytes: microsoft/msccl reads maxBytes=\"0\" as 0 and refuses a "
                       "file whose minBytes is above it; give --max-bytes")
    refuse_collective(schedule)
    schedule = runtime_form(schedule)[0]
    program = program or build(schedule, inplace)
    lay, coll = program.layout, schedule.collective
    head = (f'<algo name={quoteattr(name)} proto="{protocol}" nchannels="{program.k}" '
            f'nchunksperloop="{lay.loop_chunks}" ngpus="{lay.n}" coll="{coll.name}" '
            f'inplace="{int(inplace)}" outofplace="{int(not inplace)}" '
            f'minBytes="{int(min_bytes)}" maxBytes="{int(max_bytes)}">')
    info = (f"<!-- synth: {lay.describe()}"
            + (f", root {coll.root}" if coll.root is not None else "")
            + f", {schedule.num_steps} steps, {schedule.rounds} rounds"
            + f", topology {schedule.model.name} -->")
    lines = [info, head]
    by_rank = defaultdict(list)
    for tb in program.tbs:
        by_rank[tb.rank].append(tb)
    for r in range(lay.n):
        lines.append(f'  <gpu id="{r}" i_chunks="{lay.i_chunks}" o_chunks="{lay.o_chunks}" '
                     f's_chunks="{program.scratch[r]}">')
        for tb in by_rank[r]:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" '
                         f'chan="{tb.chan}">')
            for s, (kind, src, dst, cnt, depid, deps) in enumerate(program.steps[tb]):
                src = src or dst
                dst = dst or src
                sb, so = (src.buf, src.idx) if src else ("i", -1)
                db, do = (dst.buf, dst.idx) if dst else ("o", -1)
                hasdep = int((r, tb.id, s) in program.hasdep)
                lines.append(f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" '
                             f'dstbuf="{db}" dstoff="{do}" cnt="{cnt}" depid="{depid}" '
                             f'deps="{deps}" hasdep="{hasdep}"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def default_name(schedule, inplace: bool) -> str:
    coll = schedule.collective
    root = f"-root{coll.root}" if coll.root is not None else ""
    return (f"synth-{coll.name}{root}-{schedule.model.name}-s{schedule.num_steps}"
            f"-r{schedule.rounds}-c{coll.chunks}-{'inplace' if inplace else 'outofplace'}")
