"""The dynamic half of the MSCCL++ plan simulator (synth.export.mscclpp_sim checks the
static rules, then runs this): two launches of a parsed plan back to back.

Dynamic checks, D1-D9, over two launches back to back (counters and semaphores are never
reset): thread blocks run their ops in order; wait blocks until the paired channel has
had more signals than waits (the k-th wait matches the k-th signal), sem_acquire until
the semaphore is positive (the k-th acquire matches the k-th release). Vector clocks
follow section 4.4: a data op's writes are published by a nop then a signal (or a nop
then a sem_release), seen after the matching wait (or sem_acquire) then a nop; relaxed
signals on memory channels only grant permission (and carry the previous launch's
completion); the end of a kernel orders a rank's launches.

Port channels (section 4.3): each port channel is a FIFO served in order by the host
proxy. put, pws and pwsf push one request per entry (thread i pushes entry i), signal
one per channel; requests pushed by different threads of a thread block since its last
nop may reach the FIFO in either order, so a signal only covers the requests before the
first one pushed by another thread since that nop. The proxy writes a put's data, then
raises the peer's counter for a later signal: the data is in flight (no one may read or
write it) until the peer waits on a signal that covers the put; from then on it counts
as written by that wait (seen by the peer's thread block after a nop, by others through
it). A put's source is read by the proxy, later: writing it again (by any thread block
of the rank, or by a peer) before the transfer is known complete is an error (D7);
known complete means ordered after the pwsf (or a flush that flushes: the kernel flushes
as many channels as the op has dst_buff entries, so a flush written the DSL's way
flushes nothing) that covers it, or after the receiver's wait on a signal that covers
it. pws and pwsf count as one signal each; signal and rlxsignal, wait and rlxwait are
the same on port channels. Every port put must be covered by a signal the peer waits
for in the same launch.

Errors: deadlock (D1), unbalanced signals and waits, or releases and acquires, per
launch (D2), reading data another thread block, rank or proxy wrote without such a
chain (D3), writing a slot before every earlier access of it is ordered before the
write, in this launch or the previous one (D4), two ops of one thread block touching the
same chunk, one writing, without a nop between them (D5, D6), a port put's source
written before its transfer is known complete, or a put no signal covers (D7), and wrong
results (D8: symbolic sums of (rank, chunk) contributions, a double count kept apart;
reading a slot that holds nothing; writing the input of an out-of-place plan), and a
peer's access to a rank's input outside its kernel (D9: the caller writes the input
before the kernel starts, so it counts as written then, and may write it again once the
kernel ends).
glres (switch channels) reads the range on every member of its source channel's group and
writes the sum to every member of its destination channel's group (the same group or
another, one of them perhaps the rank alone), all as its thread block. Only the ops synth emits and the port ops are
simulated: nop, signal, wait, rlxsignal, rlxwait, put, pws, pwsf, flush, copy, re, glres,
sem_acquire, sem_release; any other accepted op is reported as not simulated.
"""

from collections import deque, namedtuple
from functools import reduce

import numpy

from synth.errors import NoAnswer
from synth.export.mscclpp_proxy import _Proxy
from synth.export.sim_buffers import COMBINING, clock_type, combine, show


class PlanInvalid(NoAnswer):
    """The plan would not load, would hang, or would compute the wrong thing."""


def _fail(message):
    raise PlanInvalid(message)


# A thread block's clock as its last nop published it: the clock it had (an array never
# written once made, so shared, not copied) with its own entry raised to the nop's
# sequence number. At 256 ranks of 63 thread blocks a copy per nop held most of
# torus:16x16's 2.2 GB.
_Fenced = namedtuple("_Fenced", "clock gid seq")


def _join(a, b):
    """The element-wise latest of two vector clocks (numpy arrays: a plan of 16 GPUs on
    16 channels has thousands of thread blocks, and joining them as lists took most of
    a minute); `b` may be a _Fenced clock. A new array unless `b` is `a`: clocks are
    shared, never written in place."""
    if a is b:
        return a
    if isinstance(b, _Fenced):
        out = numpy.maximum(a, b.clock)
        out[b.gid] = max(out[b.gid], b.seq)
        return out
    return numpy.maximum(a, b)


def _clock_type(launches, tbs):
    """The narrowest integer that holds every clock entry: a thread block's count of its
    ops so far, one more a launch (the caller's writes). A vector clock has an entry per
    thread block of the plan and each thread block holds several: at 512 ranks of 38
    thread blocks, int64 clocks took most of 21 GB."""
    return clock_type(launches * (max((len(tb.ops) for tb in tbs), default=0) + 1))


def _canon(p, rank, buf, idx):
    """In place, i and o name the same memory: map both onto one name."""
    coll = p["coll"]
    if p["inplace"]:
        if coll in ("allgather", "gather") and buf == "i":
            return (rank, "o", rank * p["ic"] + idx)
        if coll in ("allreduce", "broadcast", "reduce") and buf == "i":
            return (rank, "o", idx)
        if coll in ("reducescatter", "scatter") and buf == "o":
            return (rank, "i", rank * p["oc"] + idx)
    return (rank, buf, idx)


class Launches:
    """The dynamic checks (D1-D9) of a parsed plan, launch after launch.

    Each launch: start it (the kernel boundary orders a rank's earlier launches), run
    thread blocks until none can move (a thread block that blocks is woken by the signal
    or release it waits for), then check that nothing is stuck (D1), that signals and
    waits, releases and acquires balance and every port put was covered (D2, D7), and
    that every result arrived and is right (D8). Reads and writes check visibility,
    permission and port-source reuse (D3-D7) as they happen.
    """

    def __init__(self, p, launches):
        self.p, self.tbs, self.flat, self.paired = p, p["tbs"], p["flat"], p["paired"]
        self.launches, self.clock = launches, _clock_type(launches, self.tbs)
        self.proxies = {(k, g): _Proxy(k, g) for k in range(p["n"])
                        for g in range(len(self.flat["port"][k]))}
        self.size = size = len(self.tbs)
        for tb in self.tbs:
            tb.vc, tb.perm = numpy.zeros(size, self.clock), numpy.zeros(size, self.clock)
            tb.pend_vc, tb.pend_perm = tb.vc, tb.perm
        self.by_rank = {}
        for tb in self.tbs:
            self.by_rank.setdefault(tb.rank, []).append(tb)
        self.incoming, self.access = {}, {}  # incoming: signals not yet waited for
        self.sem = {}  # (rank, id) -> [value, deque of release clocks (None: initial)]
        for k, values in enumerate(p["sems"]):
            for s, v in enumerate(values):
                self.sem[(k, s)] = [v, deque([None] * v)]
        self.combining = p["coll"] in COMBINING

    def run(self):
        for launch in range(self.launches):
            self.launch = launch
            self.start_launch()
            self.run_until_stuck()
            self.check_finished()
            self.check_balanced()
            self.check_results()

    # --- the phases of one launch ------------------------------------------------------

    def start_launch(self):
        self.value = dict(self.p["start"])
        self.sent, self.done = {}, {}
        self.puts = {}  # proxy -> last put seq of this launch
        zero = numpy.zeros(self.size, self.clock)
        for rank, tbs in self.by_rank.items():
            tbs[0].seq += 1  # the caller's writes of the input, before the kernel starts
            seen, allowed = zero, zero  # all the rank's threads knew when its kernel ended
            for tb in tbs:
                seen = _join(seen, _join(tb.vc, tb.pend_vc))
                allowed = _join(allowed, _join(tb.perm, tb.pend_perm))
            seen = seen.copy()
            for tb in tbs:
                seen[tb.gid] = max(seen[tb.gid], tb.seq)
            allowed = _join(allowed, seen)
            self.host_writes(rank, tbs[0], seen)
            for tb in tbs:  # the kernel boundary orders all of a rank's earlier launches
                tb.base = tb.vc = seen
                tb.fenced = _Fenced(seen, tb.gid, seen[tb.gid])
                tb.perm = allowed
                tb.fenced_perm = _Fenced(allowed, tb.gid, allowed[tb.gid])
                tb.pend_vc, tb.pend_perm, tb.dirty = zero, zero, False
                tb.pc, tb.epoch = 0, tb.epoch + 1
        self.sem_start = {key: s[0] for key, s in self.sem.items()}

    def host_writes(self, rank, first, seen):
        """The caller writes rank's input before its kernel starts (stream order): every
        access of it in the previous launch by another rank must be one this rank knew
        of when its kernel ended (a peer reading it later, through a switch, could read
        the next call's data); in this launch it counts as written at the kernel's start,
        so a peer reads it only after a signal chain from this rank."""
        for slot in self.p["inputs"][rank]:
            entry = self.access.get(slot)
            if entry is not None:
                for gid, seq, _, _, wrote, _ in filter(None, [entry[0], *entry[1].values()]):
                    if gid is not None and self.tbs[gid].rank != rank and seen[gid] < seq:
                        _fail(f"launch {self.launch}: {self.tbs[gid]} "
                              f"{'writes' if wrote else 'reads'} {slot[1]}[{slot[2]}] of gpu "
                              f"{rank}, an input, after gpu {rank}'s kernel may have ended (no "
                              f"signal from it that gpu waits for), while the caller may "
                              f"already write launch {self.launch + 1}'s input there")
            transfers = entry[2] if entry is not None else []
            self.access[slot] = [(first.gid, first.seq, self.launch, None, True, None), {},
                                 transfers]

    def run_until_stuck(self):
        self.parked = {}  # what a blocked thread block waits for -> thread blocks
        ready = deque(self.tbs)
        self.ready = ready
        while ready:
            tb = ready.popleft()
            while tb.pc < len(tb.ops):
                key = self.blocked(tb)
                if key is not None:
                    self.parked.setdefault(key, []).append(tb)
                    break
                self.step(tb)

    def wake(self, key):
        for tb in self.parked.pop(key, ()):
            self.ready.append(tb)

    def check_finished(self):
        stuck = [tb for tb in self.tbs if tb.pc < len(tb.ops)]
        if stuck:
            tb = stuck[0]
            what = "a semaphore release" if tb.ops[tb.pc][0] == "sem_acquire" else "a signal"
            _fail(f"deadlock in launch {self.launch + 1}: {len(stuck)} thread blocks never "
                  f"finish; {tb} waits at op {tb.pc} for {what} that never comes")

    def check_balanced(self):
        for (t, a, g), (peer, theirs) in self.paired.items():
            sent, done = self.sent.get((t, a, g), 0), self.done.get((t, peer, theirs), 0)
            if sent != done:
                _fail(f"launch {self.launch + 1}: gpu {a} signals {sent} times on its {t} "
                      f"channel {g} to gpu {peer}, which waits {done} times on the paired "
                      "channel")
        for (k, s), (value, _) in self.sem.items():
            if value != self.sem_start[(k, s)]:
                _fail(f"launch {self.launch + 1}: gpu {k}'s semaphore {s} ends at {value}, "
                      f"not {self.sem_start[(k, s)]} (releases and acquires do not balance)")
        for proxy, last in self.puts.items():
            if proxy.acked < last:
                _fail(f"launch {self.launch + 1}: a port put of gpu {proxy.rank} on channel "
                      f"{proxy.g} is not followed by a signal on that channel that gpu "
                      f"{self.flat['port'][proxy.rank][proxy.g]} waits for")

    def check_results(self):
        seen = {}  # (rank, gid) -> what the rank knows of gid when its kernel ends

        def known(rank, gid):
            if (rank, gid) not in seen:
                seen[(rank, gid)] = max(tb.seq if tb.gid == gid else max(tb.vc[gid],
                                                                          tb.pend_vc[gid])
                                        for tb in self.by_rank[rank])
            return seen[(rank, gid)]

        for slot, want in sorted(self.p["end"].items()):
            last = self.access.get(slot, [None])[0]
            if last and last[2] == self.launch and (last[0] is None or
                                                    known(slot[0], last[0]) < last[1]):
                who = "a port put" if last[0] is None else self.tbs[last[0]]
                _fail(f"launch {self.launch + 1}: gpu {slot[0]}'s result "
                      f"{slot[1]}[{slot[2]}], written by {who}, may not have "
                      f"arrived when gpu {slot[0]}'s kernel ends (no nop, signal, wait "
                      "chain)")
            got = self.value.get(slot)
            if got != want:
                _fail(f"launch {self.launch + 1}: gpu {slot[0]} ends with "
                      f"{slot[1]}[{slot[2]}] = {show(got)}, expected {show(want)}")

    # --- one op --------------------------------------------------------------------------

    def blocked(self, tb):
        """None if tb's next op can run, else what it waits for."""
        op = tb.ops[tb.pc]
        if op[0] == "wait":
            for g in op[3]:
                key = (op[1], tb.rank, g)
                if not self.incoming.get(key):
                    return key
        elif op[0] == "sem_acquire":
            for s in op[1]:
                if self.sem[(tb.rank, s)][0] <= 0:
                    return ("sem", tb.rank, s)
        return None

    def step(self, tb):
        op = tb.ops[tb.pc]
        tb.seq += 1
        where = f"launch {self.launch + 1}: {tb} op {tb.pc} ({op[0]})"
        getattr(self, f"op_{op[0]}")(tb, op, where)
        tb.pc += 1

    def op_nop(self, tb, op, where):
        if tb.dirty:  # a wait or acquire since the last nop
            tb.vc = _join(tb.vc, tb.pend_vc)
            tb.perm = _join(_join(tb.perm, tb.pend_perm), tb.vc)
            if numpy.array_equal(tb.perm, tb.vc):  # one array while they agree (no rlx)
                tb.perm = tb.vc
            # what was pending is in vc and perm now: the same clocks, not two more
            tb.pend_vc, tb.pend_perm = tb.vc, tb.perm
            tb.dirty = False
        tb.epoch += 1
        tb.fenced = _Fenced(tb.vc, tb.gid, tb.seq)
        tb.fenced_perm = _Fenced(tb.perm, tb.gid, tb.seq)

    def signal(self, tb, kind, g, record):
        peer, theirs = self.paired[(kind, tb.rank, g)]
        key = (kind, peer, theirs)
        self.incoming.setdefault(key, deque()).append(record)
        self.sent[(kind, tb.rank, g)] = self.sent.get((kind, tb.rank, g), 0) + 1
        self.wake(key)

    def flag(self, tb, g, thread):
        """A port signal pushed by thread: the peer's wait for it delivers the requests
        it covers."""
        proxy = self.proxies[(tb.rank, g)]
        covered = proxy.covered(thread, tb.epoch)
        proxy.push(thread, tb.epoch)
        self.signal(tb, "port", g, (tb.fenced, None, tb.fenced_perm, (proxy, covered)))
        return proxy, covered

    def op_signal(self, tb, op, where):
        kind, relaxed = op[1], op[2]
        for thread, g in enumerate(op[3]):
            if kind == "port":
                self.flag(tb, g, thread)
            else:
                self.signal(tb, kind, g, (tb.base if relaxed else tb.fenced, tb.base,
                                          tb.fenced_perm, None))

    def op_wait(self, tb, op, where):
        kind, relaxed = op[1], op[2]
        for g in op[3]:
            key = (kind, tb.rank, g)
            strong, base, perm, port = self.incoming[key].popleft()  # the k-th signal
            self.done[key] = self.done.get(key, 0) + 1
            tb.pend_vc = _join(tb.pend_vc, base if relaxed else strong)
            tb.pend_perm = _join(tb.pend_perm, perm)
            tb.dirty = True
            if port is not None:  # the data it covers arrived (its sources were read):
                proxy, covered = port  # from now on it is as if this wait had written it
                for transfer in proxy.complete(covered, (tb.gid, tb.seq), "wait"):
                    for slot in transfer["dst"]:
                        entry = self.access[slot]
                        if entry[0] is not None and entry[0][3] is transfer:
                            entry[0] = (tb.gid, tb.seq, self.launch, tb.epoch, True, tb.pc)
                proxy.acked = max(proxy.acked, covered)

    def op_put(self, tb, op, where):
        src, dst = op[2]
        if op[1] == "memory":
            for s, d in zip(src, dst):
                self.write(tb, d, self.read(tb, s, where), where)
            return
        for thread, (s, d, g) in enumerate(zip(src, dst, op[3])):
            self.port_put(tb, s, d, g, thread, where)

    def port_put(self, tb, src, dst, g, thread, where):
        """Thread pushes one request: the proxy reads src later, then writes dst (in
        flight until the receiver waits for a signal that covers it)."""
        proxy = self.proxies[(tb.rank, g)]
        # the proxy reads src: later writes wait for the transfer (D7), not for tb
        values = self.read(tb, src, where, record=False)
        transfer = {"done": [], "where": where, "dst": []}
        seq = proxy.push(thread, tb.epoch, transfer)
        self.puts[proxy] = seq
        self.write(tb, dst, values, where, proxy=(proxy, transfer))
        owner, buf, idx, n = src
        for i in range(n):
            slot = _canon(self.p, owner, buf, idx + i)
            self.access.setdefault(slot, [None, {}, []])[2].append(transfer)

    def op_pws(self, tb, op, where):
        src, dst = op[2]
        for thread, (s, d, g) in enumerate(zip(src, dst, op[3])):
            self.port_put(tb, s, d, g, thread, where)
            proxy, covered = self.flag(tb, g, thread)
            if op[0] == "pwsf":  # the pushing thread spins until the proxy has drained
                proxy.complete(covered, (tb.gid, tb.seq), "flush")

    op_pwsf = op_pws

    def op_flush(self, tb, op, where):
        for thread, g in enumerate(op[3]):
            proxy = self.proxies[(tb.rank, g)]
            proxy.complete(proxy.covered(thread, tb.epoch), (tb.gid, tb.seq), "flush")

    def op_sem_release(self, tb, op, where):
        for s in op[1]:
            sem = self.sem[(tb.rank, s)]
            sem[0] += 1
            sem[1].append((tb.fenced, tb.fenced_perm))
            self.wake(("sem", tb.rank, s))

    def op_sem_acquire(self, tb, op, where):
        for s in op[1]:
            sem = self.sem[(tb.rank, s)]
            sem[0] -= 1
            clocks = sem[1].popleft()
            if clocks is not None:
                tb.pend_vc = _join(tb.pend_vc, clocks[0])
                tb.pend_perm = _join(tb.pend_perm, clocks[1])
                tb.dirty = True

    def op_copy(self, tb, op, where):
        src, dst = op[2]
        self.write(tb, dst, self.read(tb, src[0], where), where)

    def op_re(self, tb, op, where):
        if not self.combining:
            _fail(f"{where}: reduces, but {self.p['coll']} does not combine")
        src, dst = op[2]
        parts = [self.read(tb, s, where) for s in src]
        self.write(tb, dst, [reduce(combine, vals) for vals in zip(*parts)], where)

    def op_glres(self, tb, op, where):
        """The switch loads the chunks of every member of the source group and sums them
        (one multimem load-reduce; of one member: its value), then stores the sum to
        every member of the destination group: reads and writes on the members' memory,
        all by this thread block."""
        if not self.combining:
            _fail(f"{where}: reduces, but {self.p['coll']} does not combine")
        src, dst = op[2]
        parts = [self.read(tb, s, where) for s in src]
        total = [reduce(combine, vals) for vals in zip(*parts)]
        for d in dst:
            self.write(tb, d, total, where)

    # --- memory, with the visibility and permission rules --------------------------------

    def read(self, tb, rng, where, record=True):
        owner, buf, idx, n = rng
        out = []
        for i in range(n):
            slot = _canon(self.p, owner, buf, idx + i)
            self.touch(tb, slot, False, where, record=record)
            if self.value.get(slot) is None:
                _fail(f"{where}: reads {slot[1]}[{slot[2]}] of gpu {slot[0]}, which holds "
                      f"no data in this launch")
            out.append(self.value[slot])
        return out

    def write(self, tb, rng, values, where, proxy=None):
        owner, buf, idx, n = rng
        for i in range(n):
            slot = _canon(self.p, owner, buf, idx + i)
            if slot[1] == "i" and not self.p["inplace"]:
                _fail(f"{where}: writes the input buffer i[{slot[2]}] of gpu {owner} in an "
                      f"out-of-place plan")
            self.touch(tb, slot, True, where, proxy)
            self.value[slot] = values[i]

    def knows(self, tb, gid, seq):
        """Whether tb may act after event (gid, seq): its own only after a nop."""
        return (tb.fenced.seq if gid == tb.gid else tb.perm[gid]) >= seq

    def touch(self, tb, slot, write, where, proxy=None, record=True):
        """Record an access (by tb, or by the proxy of a port put tb pushed: proxy =
        (its FIFO, the transfer)); fail if it is not ordered after the accesses it must
        follow. A port put's write is recorded as in flight (gid None) until a wait
        delivers it."""
        entry = self.access.get(slot)
        if entry is None:
            entry = self.access[slot] = [None, {}, []]
        if proxy is None:
            here = (tb.gid, tb.seq, self.launch, tb.epoch, write, tb.pc)
        else:
            here = (None, proxy[0], self.launch, proxy[1], write, tb.pc)
            proxy[1]["dst"].append(slot)
        earlier = ([entry[0]] if entry[0] else []) + (list(entry[1].values()) if write else [])
        what = f"{slot[1]}[{slot[2]}] of gpu {slot[0]}"
        for gid, seq, when, epoch, wrote, pc in earlier:
            if gid is None:  # a port put's data, not delivered yet
                if proxy is not None and seq is proxy[0]:
                    continue  # one FIFO's requests are served in order
                if not write:
                    _fail(f"{where}: reads {what}, written by a port put without a nop, "
                          "signal, wait, nop chain to this thread block (no wait for a "
                          "signal that covers the put)")
                _fail(f"{where}: writes {what}, which a port put may still be writing (no "
                      "wait for a signal that covers the put)")
            other = self.tbs[gid]
            if gid == tb.gid:
                if seq != tb.seq and epoch == tb.epoch and when == self.launch:
                    how = (f"which a port put wrote, delivered by op {pc} (wait)"
                           if tb.ops[pc][0] == "wait" else
                           f"which op {pc} {'wrote' if wrote else 'read'}")
                    _fail(f"{where}: touches {what}, {how} of the same thread block, with "
                          "no nop between them")
                continue
            if not write:  # read after write: the data must be visible
                if tb.vc[gid] < seq:
                    _fail(f"{where}: reads {what}, written by {other} without a nop, signal, "
                          f"wait, nop chain to this thread block")
            elif tb.perm[gid] < seq or (wrote and when == self.launch and tb.vc[gid] < seq):
                _fail(f"{where}: writes {what} before {other}'s earlier "
                      f"{'write' if wrote else 'read'} of it is ordered before this write")
        if write:
            for transfer in entry[2]:
                if not any(self.knows(tb, g, s) for g, s in transfer["done"]):
                    _fail(f"{where}: writes {what}, the source of a port put "
                          f"({transfer['where']}) that the proxy may not have read yet (no "
                          "pwsf or flush then nop, nor receiver's wait, ordered before it)")
            entry[0], entry[1], entry[2] = here, {}, []
        elif record:
            entry[1][here[0]] = here
