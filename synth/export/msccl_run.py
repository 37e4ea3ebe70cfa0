"""The dynamic half of the MSCCL XML simulator (synth.export.msccl_sim reads the file
and checks the loaders' rules, then runs this): the algorithm run once.

Simulation: every threadblock is a process running its steps in order. A step waits for
its dependency; a receive waits until its connection (sender, receiver, channel) holds a
message, and a send until the connection has room (`slots` messages; MSCCL's Simple
protocol buffers two one-chunk sends, the default of one is stricter). A fused step
(rcs, rrs, rrcs) streams: it takes its message, then sends on once there is room. The k-th send on
a connection is the k-th receive. No process able to move while some are unfinished is a
deadlock. Data is symbolic: each slot holds the (rank, chunk) contributions it sums
(synth.export.sim_buffers; a double count shows). Reading a slot never written,
reducing in a collective that does not combine, writing the input buffer of an
out-of-place call, and two threadblocks touching a slot (one writing) without a chain of
program order, dependencies and messages between them (vector clocks) are errors. At the
end every connection is empty and each output slot holds exactly what the collective
requires (the table in synth.export.sim_buffers, which both simulators share).

Part of the independent checker: it imports the standard library, NumPy (its vector
clocks are arrays), synth.errors and the buffers' table (synth.export.sim_buffers).
"""

from collections import deque

import numpy as np

from synth.errors import NoAnswer
from synth.export.sim_buffers import COMBINING, clock_type, combine, show

# step type: (reads src, writes dst, receives, sends, reduces)
TYPES = {
    "s": (True, False, False, True, False),
    "r": (False, True, True, False, False),
    "rcs": (False, True, True, True, False),
    "rrs": (True, False, True, True, True),
    "rrc": (True, True, True, False, True),
    "rrcs": (True, True, True, True, True),
    "cpy": (True, True, False, False, False),
    "re": (True, True, False, False, True),
    "nop": (False, False, False, False, False),
}


class MscclInvalid(NoAnswer):
    """The XML would not load, would hang, or would compute the wrong thing."""


def _fail(message):
    raise MscclInvalid(message)


class _Tb:
    """One threadblock as a process: its steps, the next one (pc), its vector clock."""

    def __init__(self, gpu, tid, send, recv, chan, steps, gid):
        self.gpu, self.id, self.send, self.recv, self.chan = gpu, tid, send, recv, chan
        self.steps, self.gid, self.pc = steps, gid, 0
        self.clock = None
        self.history = {}  # clock after each finished step that others depend on
        self.partial = None  # a fused step's message, taken before it can send on

    def __str__(self):
        return f"gpu {self.gpu} threadblock {self.id}"


def _joined(a, b):
    return np.maximum(a, b)


def _simulate(p, slots):
    """Run the parsed algorithm `p` with `slots` messages of room per connection; the
    threadblocks in file order, each run to its end. MscclInvalid at the first race,
    wrong value, deadlock, message left unreceived or wrong result."""
    run = _Run(p, slots)
    run.until_stuck()
    run.check_finished()
    run.check_results()
    return run.order


class _Run:
    """One simulation: every threadblock a process, every (sender, receiver, channel) a
    connection of messages, every slot's value and its last accesses (vector clocks)."""

    def __init__(self, p, slots):
        self.p, self.tbs, self.slots = p, p["tbs"], slots
        self.order = sorted(self.tbs.values(), key=lambda tb: tb.gid)
        # vector clocks as arrays (joins are the simulator's inner loop) of the narrowest
        # integer a threadblock's step count fits: at 128 ranks int32 clocks took 0.8 GB
        kind = clock_type(max((len(tb.steps) for tb in self.order), default=0) + 1)
        for tb in self.order:
            tb.clock = np.zeros(len(self.order), dtype=kind)
        self.value = dict(p["start"])
        # (gpu, buf, idx) -> [last write (gid, seq) or None, {gid: seq} reads since]
        self.access = {}
        self.conns = {}  # (src gpu, dst gpu, chan) -> deque of (values, clock)
        self.combining = p["coll"] in COMBINING

    def until_stuck(self):
        """Run every threadblock that can move until none can; returns nothing."""
        moved = True
        while moved:
            moved = False
            for tb in self.order:
                while tb.pc < len(tb.steps) and self.ready(tb):
                    self.run(tb)
                    moved = True

    def touch(self, tb, slot, write, where):
        """Record tb's access of slot; fail unless every earlier access it must follow
        (the last write; for a write, every read since) is ordered before it."""
        entry = self.access.setdefault(slot, [None, {}])
        earlier = ([entry[0]] if entry[0] else []) + (list(entry[1].items()) if write else [])
        for gid, seq in earlier:
            if gid != tb.gid and tb.clock[gid] < seq:
                other = self.order[gid]
                _fail(f"{where}: {'writes' if write else 'reads'} {slot[1]}[{slot[2]}] "
                      f"unordered with gpu {other.gpu} tb {other.id} step {seq - 1} "
                      f"(no dependency or message chain between them)")
        if write:
            entry[0], entry[1] = (tb.gid, tb.pc + 1), {}
        else:
            entry[1][tb.gid] = tb.pc + 1

    def get(self, tb, slot, where):
        """The value tb reads in slot (there must be one)."""
        self.touch(tb, slot, False, where)
        v = self.value.get(slot)
        if v is None:
            _fail(f"{where}: reads {slot[1]}[{slot[2]}], which holds no data yet")
        return v

    def put(self, tb, slot, v, where):
        """tb writes v into slot (never the input of an out-of-place call)."""
        if slot[1] == "i" and not self.p["inplace"]:
            _fail(f"{where}: writes the input buffer i[{slot[2]}] of an out-of-place call")
        self.touch(tb, slot, True, where)
        self.value[slot] = v

    def ready(self, tb):
        """Can tb's current step move: start (dependency met, message in), or, a fused
        step that has taken its message, finish (room to send on)?"""
        st = tb.steps[tb.pc]
        _, _, receives, sends, _ = TYPES[st["type"]]
        if tb.partial is None:
            if st["depid"] >= 0 and self.tbs[(tb.gpu, st["depid"])].pc <= st["deps"]:
                return False
            if receives and not self.conns.get((tb.recv, tb.gpu, tb.chan)):
                return False
            if receives and sends:
                return True  # takes the message now, sends when there is room
        if sends and len(self.conns.get((tb.gpu, tb.send, tb.chan), ())) >= self.slots:
            return False
        return True

    def run(self, tb):
        """Move tb's current step: take its message (a fused step then waits for room
        on its own), or finish it; returns nothing."""
        st = tb.steps[tb.pc]
        where = f"gpu {tb.gpu} tb {tb.id} step {tb.pc} ({st['type']})"
        _, _, receives, sends, reduces = TYPES[st["type"]]
        if reduces and not self.combining:
            _fail(f"{where}: reduces, but {self.p['coll']} does not combine")
        if tb.partial is None:
            if st["depid"] >= 0:
                tb.clock = _joined(tb.clock,
                                   self.tbs[(tb.gpu, st["depid"])].history[st["deps"]])
            if receives:
                incoming, clock = self.conns[(tb.recv, tb.gpu, tb.chan)].popleft()
                if len(incoming) != st["cnt"]:
                    _fail(f"{where}: receives {st['cnt']} chunks, but the matching send "
                          f"from gpu {tb.recv} has {len(incoming)}")
                tb.clock = _joined(tb.clock, clock)
                tb.partial = incoming
                if sends:
                    return  # streaming: the forward waits for room on its own
        self.finish(tb, st, where)

    def finish(self, tb, st, where):
        """The data of tb's current step st: its reads, result, writes and message out;
        then the next step. Returns nothing."""
        reads, writes, receives, sends, reduces = TYPES[st["type"]]
        incoming, tb.partial = tb.partial, None
        tb.clock[tb.gid] = tb.pc + 1
        cnt, g = st["cnt"], tb.gpu
        src = [self.get(tb, (g, st["src"][0], st["src"][1] + i), where) for i in range(cnt)] \
            if reads else None
        if st["type"] in ("re",):
            dst_now = [self.get(tb, (g, st["dst"][0], st["dst"][1] + i), where)
                       for i in range(cnt)]
            result = [combine(a, b) for a, b in zip(dst_now, src)]
        elif reduces:
            result = [combine(a, b) for a, b in zip(incoming, src)]
        elif receives:
            result = list(incoming)
        else:
            result = src
        if writes:
            for i in range(cnt):
                self.put(tb, (g, st["dst"][0], st["dst"][1] + i), result[i], where)
        if sends:
            self.conns.setdefault((g, tb.send, tb.chan), deque()).append(
                (result, tb.clock.copy()))
        if st["hasdep"]:  # only such steps are depended on (msccl_sim checks that first)
            tb.history[tb.pc] = tb.clock.copy()
        tb.pc += 1

    def check_finished(self):
        """Fail on a deadlock (a threadblock left unfinished, and why the first one
        waits); returns nothing."""
        stuck = [tb for tb in self.order if tb.pc < len(tb.steps)]
        if not stuck:
            return
        tb = stuck[0]
        st = tb.steps[tb.pc]
        if tb.partial is None and st["depid"] >= 0 \
                and self.tbs[(tb.gpu, st["depid"])].pc <= st["deps"]:
            why = f"waits on tb {st['depid']} step {st['deps']}"
        elif tb.partial is None and TYPES[st["type"]][2] \
                and not self.conns.get((tb.recv, tb.gpu, tb.chan)):
            why = f"waits for a message from gpu {tb.recv} on channel {tb.chan}"
        else:
            why = f"waits for room to send to gpu {tb.send} on channel {tb.chan}"
        _fail(f"deadlock: {len(stuck)} threadblocks cannot finish; {tb} at step {tb.pc} "
              f"({st['type']}) {why}")

    def check_results(self):
        """Fail on a message no step receives, or an output slot that does not hold what
        the collective requires; returns nothing."""
        for (a, b, chan), q in sorted(self.conns.items()):
            if q:
                _fail(f"gpu {a} sends {len(q)} message(s) to gpu {b} on channel {chan} that "
                      f"no step receives")
        for (r, buf, idx), want in sorted(self.p["end"].items()):
            got = self.value.get((r, buf, idx))
            if got != want:
                _fail(f"gpu {r} ends with {buf}[{idx}] = {show(got)}, expected {show(want)}")
