"""Independent checker for MSCCL++ execution plans (docs/runtimes.md, "What the plan
simulator checks").

Reads the plan (a dict, as loaded from JSON) and shares no code with the exporter: it
imports the standard library, synth.errors, and from synth.export.msccl_sim only the
table of what each collective's buffers hold at the start and must hold at the end
(NCCL's layout, the same for both runtimes).

Static checks, S1-S9: key presence and types, gpus[k].id == k, chunk counts >= 1 and
equal on every rank (and as the collective needs), thread block ids, channel peers in
range and declared symmetrically, channel and remote-buffer ids resolving through each
thread block's tables, remote buffers listing the access type, op shapes (put pairs,
one source type per memory put, local operands for copy/re, channel_type on every op
with a buffer_id), chunk ranges inside the owner's buffers, equal operand sizes, and
the limits (64 ops per thread block, 16 channels and 16 remote buffers per thread block
and type, 8 channel ids per op, 10 entries per list, 1024 threads); a channel waited on
by one thread block only; no peer i buffer in an in-place allgather.

Dynamic checks, D1-D8, over two launches back to back (counters are never reset):
thread blocks run their ops in order; wait blocks until the paired channel has had
more signals than waits (the k-th wait matches the k-th signal). Vector clocks follow
the rules of section 4.4: a data op's writes are published by a nop then a signal, seen
after the matching wait then a nop; relaxed signals only grant permission (and carry the
previous launch's completion); the end of a kernel orders a rank's launches. Errors:
deadlock (D1), unbalanced signals and waits per launch (D2), reading data another
thread block or rank wrote without such a chain (D3), writing a slot before every
earlier access of it is ordered before the write, in this launch or the previous one
(D4), two ops of one thread block touching the same chunk, one writing, without a nop
between them (D5, D6), and wrong results (D8: symbolic multisets of (rank, chunk)
contributions; reading a slot that holds nothing; writing the input of an out-of-place
plan). Only the ops synth emits are simulated: nop, signal, wait, rlxsignal, rlxwait,
put, copy, re on memory channels; any other accepted op is reported as not simulated.
"""

from synth.errors import NoAnswer
from synth.export.msccl_sim import COLLS, COMBINING, ROOTED, layout

ACCEPTED = {"nop", "barrier", "signal", "wait", "rlxsignal", "rlxwait", "put", "pws", "pwsf",
            "get", "flush", "copy", "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt",
            "upkt", "repkt", "recpkt", "respkt", "recspkt", "glres", "gstore", "gstorepkt",
            "pipeline", "sem_acquire", "sem_release"}
SIMULATED = {"nop", "signal", "wait", "rlxsignal", "rlxwait", "put", "copy", "re"}
MAX_OPS, MAX_CHANNELS, MAX_IDS, MAX_ENTRIES = 64, 16, 8, 10


class PlanInvalid(NoAnswer):
    """The plan would not load, would hang, or would compute the wrong thing."""


def _fail(message):
    raise PlanInvalid(message)


def _need(obj, key, kind, where, name):
    if not isinstance(obj, dict) or key not in obj:
        _fail(f"{where}: missing {key!r}")
    value = obj[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        _fail(f"{where}.{key}: expected an integer")
    if kind is not int and not isinstance(value, kind):
        _fail(f"{where}.{key}: expected {name}")
    return value


def _join(a, b):
    return [max(x, y) for x, y in zip(a, b)]


class _Tb:
    def __init__(self, rank, tid, ops, gid, chans, rbufs):
        self.rank, self.id, self.ops, self.gid = rank, tid, ops, gid
        self.chans, self.rbufs = chans, rbufs
        self.pc = self.seq = self.epoch = 0

    def __str__(self):
        return f"gpu {self.rank} thread block {self.id}"


def _static(plan, root):
    if not isinstance(plan, dict):
        _fail("plan: expected a JSON object")
    for key in ("name", "collective", "protocol"):
        _need(plan, key, str, "plan", "a string")
    _need(plan, "inplace", bool, "plan", "a JSON boolean")
    gpus = _need(plan, "gpus", list, "plan", "a list")
    for key in ("num_threads_per_block", "buffer_alignment", "min_message_size",
                "max_message_size"):
        if key in plan:
            _need(plan, key, int, "plan", "")
            if plan[key] < 0:
                _fail(f"plan.{key}: negative")
    threads = plan.get("num_threads_per_block", 1024)
    if threads > 1024:
        _fail(f"plan.num_threads_per_block={threads} (at most 1024)")
    align = plan.get("buffer_alignment", 16)
    if align <= 0 or align % 16:
        _fail(f"plan.buffer_alignment={align} (a positive multiple of 16)")
    if plan.get("min_message_size", 0) > plan.get("max_message_size", 2 ** 64 - 1):
        _fail("plan: min_message_size is above max_message_size")
    if plan["protocol"] == "LL":
        _fail("plan: LL (packet) plans are not simulated")
    if plan.get("reuse_resources", False):
        _fail("plan: reuse_resources would make remote i/o references stale")
    if plan.get("use_double_scratch_buffer", False):
        _fail("plan: use_double_scratch_buffer with Simple makes writer and reader "
              "use different scratch halves")
    coll, inplace, n = plan["collective"], plan["inplace"], len(gpus)
    if coll not in COLLS:
        _fail(f"plan.collective={coll!r}: the simulator knows {', '.join(COLLS)}")
    if n < 1:
        _fail("plan.gpus: empty")
    if coll in ROOTED:
        root = root if root is not None else (plan.get("synth") or {}).get("root")
        if not isinstance(root, int) or not 0 <= root < n:
            _fail(f"{coll} needs its root (a rank 0..{n - 1})")
    else:
        root = None
    if inplace and coll == "alltoall":
        _fail("alltoall in place is not simulated")

    counts = []
    for k, gpu in enumerate(gpus):
        where = f"gpus[{k}]"
        if _need(gpu, "id", int, where, "") != k:
            _fail(f"{where}.id={gpu['id']} (GPU rank does not match)")
        ic, oc = _need(gpu, "input_chunks", int, where, ""), _need(gpu, "output_chunks", int, where, "")
        sc = _need(gpu, "scratch_chunks", int, where, "")
        if ic < 1 or oc < 1 or sc < 0:
            _fail(f"{where}: input_chunks and output_chunks must be >= 1, scratch_chunks >= 0")
        counts.append({"i": ic, "o": oc, "s": sc})
        for key in ("channels", "remote_buffers", "threadblocks"):
            _need(gpu, key, list, where, "a list")
        if not gpu["threadblocks"]:
            _fail(f"{where}.threadblocks: empty (give an idle rank a nop)")
        for i, sem in enumerate(gpu.get("semaphores", [])):
            _need(sem, "init_value", int, f"{where}.semaphores[{i}]", "")
    if len({(c["i"], c["o"]) for c in counts}) != 1:
        _fail("input_chunks/output_chunks differ between GPUs")
    ic, oc = counts[0]["i"], counts[0]["o"]
    per = {"allgather": (1, n), "gather": (1, n), "reducescatter": (n, 1), "scatter": (n, 1),
           "allreduce": (1, 1), "broadcast": (1, 1), "reduce": (1, 1), "alltoall": (n, n)}[coll]
    c = ic // per[0]
    if c < 1 or (ic, oc) != (per[0] * c, per[1] * c):
        _fail(f"input_chunks={ic}, output_chunks={oc} do not fit {coll} on {n} ranks")

    flat = []
    for k, gpu in enumerate(gpus):
        peers = []
        for i, ch in enumerate(gpu["channels"]):
            where = f"gpus[{k}].channels[{i}]"
            kind = _need(ch, "channel_type", str, where, "a string")
            if kind != "memory":
                _fail(f"{where}: {kind} channels are not simulated")
            for p in _need(ch, "connected_to", list, where, "a list"):
                if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n or p == k:
                    _fail(f"{where}: peer {p!r} is not another rank")
                peers.append(p)
        flat.append(peers)
    for a in range(n):
        for b in range(a + 1, n):
            if flat[a].count(b) != flat[b].count(a):
                _fail(f"memory channels: gpu {a} lists gpu {b} {flat[a].count(b)} times, "
                      f"gpu {b} lists gpu {a} {flat[b].count(a)} times")
    remote = []
    for k, gpu in enumerate(gpus):
        rbs = []
        for i, rb in enumerate(gpu["remote_buffers"]):
            where = f"gpus[{k}].remote_buffers[{i}]"
            owner = _need(rb, "rank", int, where, "")
            kind = _need(rb, "type", str, where, "a string")
            access = _need(rb, "access_channel_types", list, where, "a list")
            if not 0 <= owner < n or owner == k:
                _fail(f"{where}: rank {owner} is not another rank")
            if kind not in ("i", "o", "s"):
                _fail(f"{where}: type {kind!r} (expected i, o or s)")
            if inplace and coll == "allgather" and kind == "i":
                _fail(f"{where}: a peer's input buffer in an in-place allgather")
            rbs.append((owner, kind, set(access)))
        remote.append(rbs)

    tbs, gid, waiters = [], 0, {}
    for k, gpu in enumerate(gpus):
        for j, tb in enumerate(gpu["threadblocks"]):
            where = f"gpus[{k}].threadblocks[{j}]"
            if _need(tb, "id", int, where, "") != j:
                _fail(f"{where}.id={tb['id']} (ids must be 0..n-1 in order)")
            chans, rbufs = {}, {}
            for e in _need(tb, "channels", list, where, "a list"):
                chans.setdefault(_need(e, "channel_type", str, where, ""), []).extend(
                    _need(e, "channel_ids", list, where, "a list"))
            for e in tb.get("remote_buffer_refs", []):
                rbufs.setdefault(_need(e, "access_channel_type", str, where, ""), []).extend(
                    _need(e, "remote_buffer_ids", list, where, "a list"))
            for kind, ids in chans.items():
                if kind != "memory":
                    _fail(f"{where}: {kind} channels are not simulated")
                if len(ids) > MAX_CHANNELS:
                    _fail(f"{where}: {len(ids)} memory channels (limit {MAX_CHANNELS})")
                for g in ids:
                    if not isinstance(g, int) or not 0 <= g < len(flat[k]):
                        _fail(f"{where}: channel id {g!r} is not a memory channel of gpu {k}")
            for kind, ids in rbufs.items():
                if len(ids) > MAX_CHANNELS:
                    _fail(f"{where}: {len(ids)} remote buffers (limit {MAX_CHANNELS})")
                for b in ids:
                    if not isinstance(b, int) or not 0 <= b < len(remote[k]):
                        _fail(f"{where}: remote buffer id {b!r} is not one of gpu {k}'s")
                    if kind not in remote[k][b][2]:
                        _fail(f"{where}: remote buffer {b} does not list access type {kind}")
            ops = _need(tb, "ops", list, where, "a list")
            if len(ops) > MAX_OPS:
                _fail(f"{where}: {len(ops)} ops (limit {MAX_OPS})")
            parsed = [_op(op, f"{where}.ops[{i}]", k, chans, rbufs, remote, counts, flat,
                          threads) for i, op in enumerate(ops)]
            for op in parsed:
                if op[0] == "wait":
                    for g in op[2]:
                        if waiters.setdefault((k, g), (k, j)) != (k, j):
                            _fail(f"{where}: waits on memory channel {g}, which thread "
                                  f"block {waiters[(k, g)][1]} also waits on")
            tbs.append(_Tb(k, j, parsed, gid, chans, rbufs))
            gid += 1
    _, _, start, end = layout(coll, n, c, root, inplace)
    return dict(coll=coll, n=n, c=c, root=root, inplace=inplace, counts=counts, flat=flat,
                tbs=tbs, start=start, end=end, ic=ic, oc=oc)


def _range(entry, where, owner, counts):
    for key in ("index", "size"):
        if key not in entry or isinstance(entry[key], bool) or not isinstance(entry[key], int):
            _fail(f"{where}: missing or non-integer {key!r}")
    buf, idx, size = entry["type"], entry["index"], entry["size"]
    if size < 1:
        _fail(f"{where}: size {size} (data ops move at least one chunk)")
    if idx < 0 or idx + size > counts[owner][buf]:
        _fail(f"{where}: {buf}[{idx}..{idx + size - 1}] is outside gpu {owner}'s {buf} "
              f"buffer ({counts[owner][buf]} chunks)")
    return (owner, buf, idx, size)


def _local(entry, where, rank, counts):
    if not isinstance(entry, dict) or entry.get("type") not in ("i", "o", "s") \
            or "buffer_id" in entry:
        _fail(f"{where}: expected a local entry {{type, index, size}}")
    return _range(entry, where, rank, counts)


def _op(op, where, rank, chans, rbufs, remote, counts, flat, threads):
    name = _need(op, "name", str, where, "a string")
    if name not in ACCEPTED:
        _fail(f"{where}: Invalid operation type: {name}")
    if name not in SIMULATED:
        _fail(f"{where}: op {name} is not simulated")
    for key in ("src_buff", "dst_buff", "channel_ids"):
        if key in op and (not isinstance(op[key], list) or len(op[key]) > MAX_ENTRIES):
            _fail(f"{where}.{key}: expected a list of at most {MAX_ENTRIES} entries")
    if name == "nop":
        return ("nop",)
    if name in ("signal", "wait", "rlxsignal", "rlxwait"):
        if op.get("channel_type") != "memory":
            _fail(f"{where}: {name} needs channel_type memory (port is not simulated; "
                  f"without a type it does nothing)")
        ids = _need(op, "channel_ids", list, where, "a list")
        if not ids or len(ids) > MAX_IDS or len(ids) > threads:
            _fail(f"{where}: {len(ids)} channel ids (1..{MAX_IDS}, and at most one per thread)")
        table = chans.get("memory", [])
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < len(table):
                _fail(f"{where}: channel id {i!r} is not in the thread block's table "
                      f"({len(table)} memory channels)")
        return ("signal" if "signal" in name else "wait", name.startswith("rlx"),
                [table[i] for i in ids])
    srcs, dsts = op.get("src_buff"), op.get("dst_buff")
    if not srcs or not dsts:
        _fail(f"{where}: {name} needs src_buff and dst_buff")
    if name == "put":
        if op.get("channel_type") != "memory":
            _fail(f"{where}: put needs channel_type memory (port is not simulated)")
        if len(srcs) != len(dsts):
            _fail(f"{where}: put with {len(srcs)} sources and {len(dsts)} destinations")
        src = [_local(e, f"{where}.src_buff[{i}]", rank, counts) for i, e in enumerate(srcs)]
        if len({s[1] for s in src}) > 1:
            _fail(f"{where}: memory put sources of more than one buffer type")
        table = rbufs.get("memory", [])
        dst = []
        for i, e in enumerate(dsts):
            w = f"{where}.dst_buff[{i}]"
            if not isinstance(e, dict) or "buffer_id" not in e or "type" in e:
                _fail(f"{w}: expected a remote entry {{buffer_id, index, size}}")
            b = e["buffer_id"]
            if not isinstance(b, int) or not 0 <= b < len(table):
                _fail(f"{w}: buffer_id {b!r} is not in the thread block's remote table "
                      f"({len(table)} memory entries)")
            owner, kind, _ = remote[rank][table[b]]
            dst.append(_range(dict(e, type=kind), w, owner, counts))
        for s, d in zip(src, dst):
            if s[3] != d[3]:
                _fail(f"{where}: put pair sizes {s[3]} and {d[3]} differ")
        return ("put", src, dst)
    if name == "copy" and (len(srcs) != 1 or len(dsts) != 1):
        _fail(f"{where}: copy takes one source and one destination")
    if name == "re" and len(dsts) != 1:
        _fail(f"{where}: re takes one destination")
    src = [_local(e, f"{where}.src_buff[{i}]", rank, counts) for i, e in enumerate(srcs)]
    dst = _local(dsts[0], f"{where}.dst_buff[0]", rank, counts)
    if any(s[3] != dst[3] for s in src):
        _fail(f"{where}: {name} operands of different sizes")
    return (name, src, dst)


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


class _Simulation:
    """The dynamic checks (D1-D8) of a parsed plan, launch after launch.

    Each launch: start it (the kernel boundary orders a rank's earlier launches), run
    every thread block until none can move, then check that nothing is stuck (D1), that
    signals and waits balance (D2), and that every result arrived and is right (D8).
    Reads and writes check visibility and permission (D3-D6) as they happen.
    """

    def __init__(self, p):
        self.p, self.tbs, self.flat = p, p["tbs"], p["flat"]
        size = len(self.tbs)
        self.size = size
        for tb in self.tbs:
            tb.vc, tb.perm = [0] * size, [0] * size
        self.incoming, self.waited, self.access = {}, {}, {}
        self.combining = p["coll"] in COMBINING

    def run(self, launches):
        for launch in range(launches):
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
        finals = {}
        for tb in self.tbs:
            clock = list(tb.vc)
            clock[tb.gid] = tb.seq
            finals[tb.rank] = _join(finals.get(tb.rank, [0] * self.size), clock)
        for tb in self.tbs:  # the kernel boundary orders all of a rank's earlier launches
            tb.base = list(finals[tb.rank])
            tb.vc, tb.perm, tb.fenced = list(tb.base), list(tb.base), list(tb.base)
            tb.pend_vc, tb.pend_perm = [0] * self.size, [0] * self.size
            tb.pc, tb.epoch = 0, tb.epoch + 1

    def run_until_stuck(self):
        moved = True
        while moved:
            moved = False
            for tb in self.tbs:
                while tb.pc < len(tb.ops) and not self.blocked(tb):
                    self.step(tb)
                    moved = True

    def check_finished(self):
        stuck = [tb for tb in self.tbs if tb.pc < len(tb.ops)]
        if stuck:
            tb = stuck[0]
            _fail(f"deadlock in launch {self.launch + 1}: {len(stuck)} thread blocks never "
                  f"finish; {tb} waits at op {tb.pc} for a signal that never comes")

    def check_balanced(self):
        for a in range(self.p["n"]):
            for g in range(len(self.flat[a])):
                peer, theirs = self.paired(a, g)
                sent, done = self.sent.get((a, g), 0), self.done.get((peer, theirs), 0)
                if sent != done:
                    _fail(f"launch {self.launch + 1}: gpu {a} signals {sent} times on its "
                          f"channel {g} to gpu {peer}, which waits {done} times on the "
                          "paired channel")

    def check_results(self):
        seen = {}  # what each rank knows when its kernel ends (all its threads synchronise)
        for tb in self.tbs:
            clock = _join(tb.vc, tb.pend_vc)
            clock[tb.gid] = tb.seq
            seen[tb.rank] = _join(seen.get(tb.rank, [0] * self.size), clock)
        for slot, want in sorted(self.p["end"].items()):
            last = self.access.get(slot, [None])[0]
            if last and last[2] == self.launch and seen[slot[0]][last[0]] < last[1]:
                _fail(f"launch {self.launch + 1}: gpu {slot[0]}'s result "
                      f"{slot[1]}[{slot[2]}], written by {self.tbs[last[0]]}, may not have "
                      f"arrived when gpu {slot[0]}'s kernel ends (no nop, signal, wait "
                      "chain)")
            got = self.value.get(slot)
            if got != want:
                _fail(f"launch {self.launch + 1}: gpu {slot[0]} ends with "
                      f"{slot[1]}[{slot[2]}] = {_show(got)}, expected {_show(want)}")

    # --- one op --------------------------------------------------------------------------

    def blocked(self, tb):
        op = tb.ops[tb.pc]
        return op[0] == "wait" and any(
            len(self.incoming.get((tb.rank, g), [])) <= self.waited.get((tb.rank, g), 0)
            for g in op[2])

    def step(self, tb):
        op = tb.ops[tb.pc]
        tb.seq += 1
        where = f"launch {self.launch + 1}: {tb} op {tb.pc} ({op[0]})"
        getattr(self, f"op_{op[0]}")(tb, op, where)
        tb.pc += 1

    def op_nop(self, tb, op, where):
        tb.vc = _join(tb.vc, tb.pend_vc)
        tb.perm = _join(_join(tb.perm, tb.pend_perm), tb.vc)
        tb.epoch += 1
        tb.fenced = list(tb.vc)
        tb.fenced[tb.gid] = tb.seq

    def op_signal(self, tb, op, where):
        relaxed = op[1]
        record = (tb.base if relaxed else list(tb.fenced), tb.base, list(tb.fenced))
        for g in op[2]:
            peer, theirs = self.paired(tb.rank, g)
            self.incoming.setdefault((peer, theirs), []).append(record)
            self.sent[(tb.rank, g)] = self.sent.get((tb.rank, g), 0) + 1

    def op_wait(self, tb, op, where):
        relaxed = op[1]
        for g in op[2]:
            n = self.waited.get((tb.rank, g), 0)
            strong, base, perm = self.incoming[(tb.rank, g)][n]
            self.waited[(tb.rank, g)] = n + 1
            self.done[(tb.rank, g)] = self.done.get((tb.rank, g), 0) + 1
            tb.pend_vc = _join(tb.pend_vc, base if relaxed else strong)
            tb.pend_perm = _join(tb.pend_perm, perm)

    def op_put(self, tb, op, where):
        for src, dst in zip(op[1], op[2]):
            self.write(tb, dst, self.read(tb, src, where), where)

    def op_copy(self, tb, op, where):
        self.write(tb, op[2], self.read(tb, op[1][0], where), where)

    def op_re(self, tb, op, where):
        if not self.combining:
            _fail(f"{where}: reduces, but {self.p['coll']} does not combine")
        parts = [self.read(tb, s, where) for s in op[1]]
        self.write(tb, op[2], [tuple(sorted(sum(vals, ()))) for vals in zip(*parts)], where)

    # --- memory, with the visibility and permission rules --------------------------------

    def paired(self, rank, g):
        """The peer of rank's memory channel g, and the peer's channel paired with it."""
        peer = self.flat[rank][g]
        k = self.flat[rank][:g].count(peer)
        return peer, [i for i, q in enumerate(self.flat[peer]) if q == rank][k]

    def read(self, tb, rng, where):
        owner, buf, idx, n = rng
        out = []
        for i in range(n):
            slot = _canon(self.p, owner, buf, idx + i)
            self.touch(tb, slot, False, where)
            if self.value.get(slot) is None:
                _fail(f"{where}: reads {slot[1]}[{slot[2]}] of gpu {slot[0]}, which holds "
                      f"no data in this launch")
            out.append(self.value[slot])
        return out

    def write(self, tb, rng, values, where):
        owner, buf, idx, n = rng
        for i in range(n):
            slot = _canon(self.p, owner, buf, idx + i)
            if slot[1] == "i" and not self.p["inplace"]:
                _fail(f"{where}: writes the input buffer i[{slot[2]}] of gpu {owner} in an "
                      f"out-of-place plan")
            self.touch(tb, slot, True, where)
            self.value[slot] = values[i]

    def touch(self, tb, slot, write, where):
        """Record an access; fail if it is not ordered after the accesses it must follow."""
        entry = self.access.setdefault(slot, [None, {}])
        here = (tb.gid, tb.seq, self.launch, tb.epoch, write, tb.pc)
        earlier = ([entry[0]] if entry[0] else []) + (list(entry[1].values()) if write else [])
        for gid, seq, when, epoch, wrote, pc in earlier:
            what = f"{slot[1]}[{slot[2]}] of gpu {slot[0]}"
            other = self.tbs[gid]
            if gid == tb.gid:
                if seq != tb.seq and epoch == tb.epoch and when == self.launch:
                    _fail(f"{where}: touches {what}, which op {pc} of the same thread "
                          f"block {'wrote' if wrote else 'read'}, with no nop between them")
                continue
            if not write:  # read after write: the data must be visible
                if tb.vc[gid] < seq:
                    _fail(f"{where}: reads {what}, written by {other} without a nop, signal, "
                          f"wait, nop chain to this thread block")
            elif tb.perm[gid] < seq or (wrote and when == self.launch and tb.vc[gid] < seq):
                _fail(f"{where}: writes {what} before {other}'s earlier "
                      f"{'write' if wrote else 'read'} of it is ordered before this write")
        if write:
            entry[0], entry[1] = here, {}
        else:
            entry[1][tb.gid] = here


def _show(v):
    if v is None:
        return "nothing"
    return "{" + ", ".join(f"{r}:{k}" for r, k in v) + "}"


def check_mscclpp_plan(plan, root=None, launches=2):
    """Check a plan (a dict); return a summary dict or raise PlanInvalid."""
    p = _static(plan, root)
    _Simulation(p).run(max(1, launches))
    ops = {}
    for tb in p["tbs"]:
        for op in tb.ops:
            name = op[0] if op[0] in ("nop", "put", "copy", "re") else \
                ("rlx" if op[1] else "") + op[0]
            ops[name] = ops.get(name, 0) + 1
    return {"collective": p["coll"], "ranks": p["n"], "chunks": p["c"], "root": p["root"],
            "inplace": p["inplace"], "threadblocks": len(p["tbs"]),
            "max_ops_per_threadblock": max(len(tb.ops) for tb in p["tbs"]), "ops": ops,
            "scratch_chunks": max(c["s"] for c in p["counts"])}
