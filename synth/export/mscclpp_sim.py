"""Independent checker for MSCCL++ execution plans (docs/runtimes.md, "What the plan
simulator checks").

Reads the plan (a dict, as loaded from JSON) and shares no code with the exporter: it
imports the standard library, numpy (the vector clocks), synth.errors, its own rooms,
and synth.export.sim_buffers,
the table of what each collective's buffers hold at the start and must hold at the end
(NCCL's layout, the same for both runtimes), which the MSCCL XML simulator checks too.

Static checks, S1-S9: key presence and types, gpus[k].id == k, chunk counts >= 1 and
equal on every rank (and as the collective needs), thread block ids, memory and port
channel peers in range and declared symmetrically per type, switch channels' rank
groups (holding the rank, alone or with others, declared in one order by any two ranks
they join), channel and remote-buffer
ids resolving through each thread block's tables per type, remote buffers listing the
access type, a port put's buffer owned by its channel's peer, op shapes (put pairs, one
source type per memory put, channel ids for port puts, pws/pwsf/flush on port channels
only, local operands for copy/re, glres with one source and one destination switch
entry, channel_type on every op with a buffer_id, semaphore ids), chunk ranges inside the owner's buffers, equal operand sizes, and the limits of
every release synth targets (v0.8.0 to v0.10.0: 64 ops per thread block, 16 channels
and 16 remote buffers per thread block and type, 8 channel ids per op, 8 entries per
list (v0.8.0's room), 16 semaphore ids per op, 1024 threads, a min_message_size that
fits a 32-bit int, a max_message_size whose chunks keep offsets within 32 bits); a
channel waited on by one thread block only, no channel twice in one wait; every port
channel used by one thread block only; every semaphore released by one thread block and
acquired by one; no peer i buffer in an in-place allgather. Given the ranks per node
(S10): memory channels inside a node, port channels between nodes only between local
ranks below 8 (the executor's InfiniBand devices IB0..IB7).

Each op's own checks (its shape, ids and ranges, the per-op limits):
synth.export.mscclpp_ops. Dynamic checks, D1-D9, and the host proxy's port channels:
synth.export.mscclpp_launches.

Cost: linear in the plan's ops and chunk accesses, plus, for the ops that synchronise,
the width of the vector clocks (one entry per thread block).
"""

from collections import Counter

import numpy

from synth.export.sim_buffers import COLLS, ROOTED, clock_type, layout
from synth.export.mscclpp_launches import Launches, PlanInvalid, _fail  # noqa: F401
from synth.export.mscclpp_ops import MAX_CHANNELS, MAX_OPS, TYPES, _int, _need, _op

MAX_MIN_MESSAGE = 2 ** 31 - 1  # every release reads min_message_size as a 32-bit int
MAX_OFFSET = 2 ** 32 - 1  # buffer offsets and sizes in bytes are 32-bit in every release
IB_TRANSPORTS = 8  # the executor's InfiniBand transports IB0..IB7, one per local rank


class _Tb:
    def __init__(self, rank, tid, ops, gid):
        self.rank, self.id, self.ops, self.gid = rank, tid, ops, gid
        self.pc = self.seq = self.epoch = 0

    def __str__(self):
        return f"gpu {self.rank} thread block {self.id}"


def _static(plan, root, ranks_per_node=None):
    """The plan read and checked before anything runs: its header, GPUs, channels
    (paired between peers), remote buffers and thread blocks with their ops."""
    coll, inplace, n, root, threads, gpus = _header(plan, root)
    counts, sems, c, ic, oc = _gpu_buffers(plan, gpus, coll, n)
    flat, paired = _channels(gpus, n, counts, ranks_per_node)
    remote = _remote_buffers(gpus, n, coll, inplace)
    ctx = dict(remote=remote, counts=counts, flat=flat, threads=threads, sems=sems)
    tbs = _threadblocks(gpus, ctx)
    _, _, start, end = layout(coll, n, c, root, inplace)
    inputs = [[] for _ in range(n)]
    for slot in sorted(start):
        inputs[slot[0]].append(slot)
    return dict(coll=coll, n=n, c=c, root=root, inplace=inplace, counts=counts, flat=flat,
                paired=paired, tbs=tbs, start=start, end=end, ic=ic, oc=oc, sems=sems,
                inputs=inputs)


def _header(plan, root):
    """(collective, in place, ranks, root, threads per block, gpus) of the plan's
    top-level fields, each checked as every release reads it."""
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

    return coll, inplace, n, root, threads, gpus


def _gpu_buffers(plan, gpus, coll, n):
    """(buffer chunk counts per GPU, semaphores' initial values per GPU, chunks C,
    input chunks, output chunks): the buffers' sizes fit the collective."""
    counts, sems = [], []
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
        semaphores = gpu.get("semaphores", [])
        if not isinstance(semaphores, list):
            _fail(f"{where}.semaphores: expected a list")
        sems.append([_need(sem, "init_value", int, f"{where}.semaphores[{i}]", "")
                     for i, sem in enumerate(semaphores)])
        if any(v < 0 for v in sems[-1]):
            _fail(f"{where}.semaphores: a negative init_value")
    if len({(c["i"], c["o"]) for c in counts}) != 1:
        _fail("input_chunks/output_chunks differ between GPUs")
    ic, oc = counts[0]["i"], counts[0]["o"]
    per = {"allgather": (1, n), "gather": (1, n), "reducescatter": (n, 1), "scatter": (n, 1),
           "allreduce": (1, 1), "broadcast": (1, 1), "reduce": (1, 1), "alltoall": (n, n)}[coll]
    c = ic // per[0]
    if c < 1 or (ic, oc) != (per[0] * c, per[1] * c):
        _fail(f"input_chunks={ic}, output_chunks={oc} do not fit {coll} on {n} ranks")
    _message_sizes(plan, coll, counts)

    return counts, sems, c, ic, oc


def _channels(gpus, n, counts, ranks_per_node):
    """(flat, paired): each GPU's peers per channel type in id order, and each
    memory/port channel's partner id at the peer (both ends list each other as often)."""
    flat = {t: [] for t in TYPES}  # type -> per gpu: peers, position = GPU-level id
    flat["switch"] = []  # per gpu: (buffer type, ranks, size) of each rank group
    for k, gpu in enumerate(gpus):
        peers = {t: [] for t in (*TYPES, "switch")}
        for i, ch in enumerate(gpu["channels"]):
            where = f"gpus[{k}].channels[{i}]"
            kind = _need(ch, "channel_type", str, where, "a string")
            if kind == "switch":
                peers[kind] += _switch_groups(ch, where, k, n, counts[k])
                continue
            if kind not in TYPES:
                _fail(f"{where}: {kind} channels are not simulated")
            for p in _need(ch, "connected_to", list, where, "a list"):
                if not _int(p) or not 0 <= p < n or p == k:
                    _fail(f"{where}: peer {p!r} is not another rank")
                peers[kind].append(p)
        for t in peers:
            flat[t].append(peers[t])
    _same_switch_order(flat["switch"])
    if ranks_per_node is not None:
        _transports(flat, n, ranks_per_node)
    paired = {}  # (type, rank, id) -> (peer, peer's paired id)
    for t in TYPES:
        pairs = Counter((a, b) for a in range(n) for b in flat[t][a])
        for (a, b), times in pairs.items():
            if pairs.get((b, a), 0) != times:
                _fail(f"{t} channels: gpu {a} lists gpu {b} {times} times, gpu {b} lists "
                      f"gpu {a} {pairs.get((b, a), 0)} times")
        mine = {}  # (rank, peer) -> that rank's ids to the peer, in order
        for a in range(n):
            for g, b in enumerate(flat[t][a]):
                mine.setdefault((a, b), []).append(g)
        for (a, b), ids in mine.items():
            for g, theirs in zip(ids, mine[(b, a)]):
                paired[(t, a, g)] = (b, theirs)
    return flat, paired


def _remote_buffers(gpus, n, coll, inplace):
    """Per GPU, its remote buffers as (owner, buffer type, access channel types)."""
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
            if not access or any(a not in TYPES for a in access):
                _fail(f"{where}: access_channel_types {access!r} (memory and/or port)")
            rbs.append((owner, kind, set(access)))
        remote.append(rbs)

    return remote


def _threadblocks(gpus, ctx):
    """Every thread block, its ops parsed; a channel waited on, a port channel used, a
    semaphore released or acquired by one thread block of a GPU only."""
    tbs, gid = [], 0
    owners = {"wait": {}, "port": {}, "sem_release": {}, "sem_acquire": {}}
    for k, gpu in enumerate(gpus):
        for j, tb in enumerate(gpu["threadblocks"]):
            where = f"gpus[{k}].threadblocks[{j}]"
            if _need(tb, "id", int, where, "") != j:
                _fail(f"{where}.id={tb['id']} (ids must be 0..n-1 in order)")
            chans, rbufs = _tb_references(tb, where, k, ctx["flat"], ctx["remote"])
            ops = _need(tb, "ops", list, where, "a list")
            if len(ops) > MAX_OPS:
                _fail(f"{where}: {len(ops)} ops (limit {MAX_OPS})")
            parsed = [_op(op, f"{where}.ops[{i}]", k, chans, rbufs, ctx)
                      for i, op in enumerate(ops)]
            for i, op in enumerate(parsed):
                _one_owner(op, f"{where}.ops[{i}]", k, j, owners)
            tbs.append(_Tb(k, j, parsed, gid))
            gid += 1
    return tbs


def _tb_references(tb, where, k, flat, remote):
    """(channel ids per channel type, remote buffer ids per access type) a thread block
    names, each one of gpu k's and within the executor's per-block limits."""
    chans, rbufs = {}, {}
    for e in _need(tb, "channels", list, where, "a list"):
        chans.setdefault(_need(e, "channel_type", str, where, ""), []).extend(
            _need(e, "channel_ids", list, where, "a list"))
    refs = tb.get("remote_buffer_refs", [])
    if not isinstance(refs, list):
        _fail(f"{where}.remote_buffer_refs: expected a list")
    for e in refs:
        rbufs.setdefault(_need(e, "access_channel_type", str, where, ""), []).extend(
            _need(e, "remote_buffer_ids", list, where, "a list"))
    for kind, ids in chans.items():
        if kind not in (*TYPES, "switch"):
            _fail(f"{where}: {kind} channels are not simulated")
        if len(ids) > MAX_CHANNELS:
            _fail(f"{where}: {len(ids)} {kind} channels (limit {MAX_CHANNELS})")
        for g in ids:
            if not _int(g) or not 0 <= g < len(flat[kind][k]):
                _fail(f"{where}: channel id {g!r} is not a {kind} channel of gpu {k}")
    for kind, ids in rbufs.items():
        if kind not in TYPES:
            _fail(f"{where}: remote buffers accessed through {kind} channels")
        if len(ids) > MAX_CHANNELS:
            _fail(f"{where}: {len(ids)} {kind} remote buffers (limit {MAX_CHANNELS})")
        for b in ids:
            if not _int(b) or not 0 <= b < len(remote[k]):
                _fail(f"{where}: remote buffer id {b!r} is not one of gpu {k}'s")
            if kind not in remote[k][b][2]:
                _fail(f"{where}: remote buffer {b} does not list access type {kind}")
    return chans, rbufs


def _one_owner(op, w, k, j, owners):
    """Thread block j of gpu k claims what op waits on, uses or signals; another block's
    earlier claim is a failure (the simulator, as the executor, orders one block's
    requests only)."""
    if op[0] == "wait":
        for g in op[3]:
            if owners["wait"].setdefault((op[1], k, g), j) != j:
                _fail(f"{w}: waits on {op[1]} channel {g}, which thread block "
                      f"{owners['wait'][(op[1], k, g)]} also waits on")
    if op[0] != "nop" and op[1] == "port":
        for g in op[3]:
            if owners["port"].setdefault((k, g), j) != j:
                _fail(f"{w}: uses port channel {g}, which thread block "
                      f"{owners['port'][(k, g)]} also uses (their requests would not be "
                      "ordered)")
    if op[0] in ("sem_release", "sem_acquire"):
        table = owners[op[0]]
        for s in op[1]:
            if table.setdefault((k, s), j) != j:
                _fail(f"{w}: semaphore {s} is {op[0][4:]}d by thread blocks "
                      f"{table[(k, s)]} and {j} (not simulated: one each)")


def _message_sizes(plan, coll, counts):
    """The size range as every release reads it: min_message_size as a 32-bit signed
    int (`obj.value("min_message_size", 0)` takes the type of its 0), and no size the
    range admits with a buffer offset or size past the executor's 32-bit fields (the
    largest admitted message, a multiple of 16 bytes x the chunks of the buffer the
    range measures, cut into chunks, times the largest chunk count)."""
    low = plan.get("min_message_size", 0)
    if low > MAX_MIN_MESSAGE:
        _fail(f"plan.min_message_size={low}: every MSCCL++ release (v0.8.0 to v0.10.0) reads "
              f"it as a 32-bit signed int, so it wraps (at most {MAX_MIN_MESSAGE})")
    if "max_message_size" not in plan:
        _fail("plan: no max_message_size (the executor would take any size, and its "
              "32-bit buffer offsets wrap for large ones)")
    per = counts[0]["o" if coll == "allgather" else "i"]
    largest = max(max(k.values()) for k in counts)
    chunk = plan["max_message_size"] // (16 * per) * 16  # of the largest size admitted
    if chunk * largest > MAX_OFFSET:
        top = MAX_OFFSET // largest // 16 * 16 * per
        _fail(f"plan.max_message_size={plan['max_message_size']}: a message that large has "
              f"{largest} chunks of {chunk} bytes in one buffer, past the 32-bit offsets of "
              f"every MSCCL++ release (at most {top})")


def _transports(flat, n, g):
    """S10: the connections the executor sets up on nodes of g ranks (rank r on node
    r // g, local rank r % g). A memory channel is CUDA IPC: inside a node. A port
    channel between nodes is InfiniBand, each end on device IB(its local rank) of a
    table of eight: local ranks 8 and up have none (docs/runtimes.md)."""
    if not _int(g) or g < 1 or n % g:
        _fail(f"plan: {n} ranks do not fill nodes of {g!r} ranks")
    for a in range(n):
        for b in flat["memory"][a]:
            if a // g != b // g:
                _fail(f"gpus[{a}]: a memory channel to gpu {b} on another node (nodes of {g} "
                      "ranks; CUDA IPC works inside a node)")
        for b in flat["port"][a]:
            for r in (a, b):
                if a // g != b // g and r % g >= IB_TRANSPORTS:
                    _fail(f"gpus[{a}]: a port channel to gpu {b} on another node, but gpu {r} "
                          f"is local rank {r % g} of its node, and the executor's InfiniBand "
                          f"transports IB0..IB{IB_TRANSPORTS - 1} serve local ranks 0-"
                          f"{IB_TRANSPORTS - 1} only")


def _switch_groups(ch, where, rank, n, counts):
    """The GPU-level switch channels of one `channels` entry: one per rank group, each
    binding the buffer of `buffer_type` on every rank of the group (NVLS multicast). A
    group holds the rank that declares it, and may hold it alone (the executor's set-up
    has no rule against a multicast of one device; docs/runtimes.md)."""
    buf = _need(ch, "buffer_type", str, where, "a string")
    if buf not in ("i", "o", "s"):
        _fail(f"{where}: buffer_type {buf!r} (expected i, o or s)")
    out = []
    for j, group in enumerate(_need(ch, "rank_groups", list, where, "a list")):
        w = f"{where}.rank_groups[{j}]"
        size = _need(group, "size", int, w, "")
        ranks = _need(group, "ranks", list, w, "a list")
        if any(not _int(r) or not 0 <= r < n for r in ranks) or len(set(ranks)) != len(ranks):
            _fail(f"{w}: ranks {ranks!r} are not distinct ranks 0..{n - 1}")
        if rank not in ranks:  # connectNvlsCollective: "rank is not among allRanks"
            _fail(f"{w}: a switch channel of gpu {rank} must join it (ranks {ranks}; a group "
                  "of one is the declaring rank alone)")
        if not 1 <= size <= counts[buf]:
            _fail(f"{w}: size {size} (1..{counts[buf]}, the chunks of {buf})")
        out.append((buf, tuple(sorted(ranks)), size))
    return out


def _same_switch_order(switch):
    """The members of a group set their NVLS connections up together, in the order they
    declare them [inferred]: every member must declare each switch channel of its
    group (a member that does not would leave the others waiting at setup), and any two
    ranks the switch channels that join them in the same order, with the same buffer
    types and sizes."""
    for a, mine in enumerate(switch):
        for key in mine:
            for b in key[1]:
                if b != a:
                    ours = [x for x in mine if b in x[1]]
                    theirs = [x for x in switch[b] if a in x[1]]
                    if ours != theirs:
                        _fail(f"switch channels: gpu {a} and gpu {b} do not declare the ones "
                              "joining them alike, in the same order (every member declares "
                              "each one)")


# bytes the check takes per byte of the plan's text: the parsed plan (5.4 at torus:16x16's
# tree point), then each op's and each slot's records (8 to 9 there and at torus:12x12)
PER_TEXT_BYTE = 14


def memory_needed(text_bytes: int, threadblocks: int, most_ops: int, launches: int = 2) -> int:
    """About the most bytes check_mscclpp_plan takes for a plan of `text_bytes` of JSON
    and `threadblocks` thread blocks of at most `most_ops` ops: the text's records, and
    two vector clocks a thread block (visibility and permission; an entry per thread
    block each, in the narrowest integer). torus:16x16's tree point (72 MB, 16,128
    thread blocks): about 1.5 GB, where the check took 1.35 GB above its imports."""
    width = numpy.dtype(clock_type(launches * (most_ops + 1))).itemsize
    return PER_TEXT_BYTE * text_bytes + 2 * threadblocks ** 2 * width


def check_mscclpp_plan(plan, root=None, launches=2, ranks_per_node=None):
    """Check a plan (a dict); return a summary dict or raise PlanInvalid. With
    `ranks_per_node` G (the ranks started on each node, in rank order), also the
    transports the executor gives each channel (S10); without, one node."""
    p = _static(plan, root, ranks_per_node)
    Launches(p, max(1, launches)).run()
    ops = {}
    for tb in p["tbs"]:
        for op in tb.ops:
            name = op[0]
            if name in ("signal", "wait"):
                name = ("rlx" if op[2] else "") + name
            if op[0] != "nop" and op[1] == "port":
                name += "(port)"
            ops[name] = ops.get(name, 0) + 1
    per_rank = Counter(tb.rank for tb in p["tbs"])
    return {"collective": p["coll"], "ranks": p["n"], "chunks": p["c"], "root": p["root"],
            "inplace": p["inplace"], "threadblocks": len(p["tbs"]),
            "max_threadblocks_per_rank": max(per_rank.values()),
            "max_ops_per_threadblock": max(len(tb.ops) for tb in p["tbs"]), "ops": ops,
            "channels": {t: sum(len(x) for x in p["flat"][t]) for t in (*TYPES, "switch")},
            "semaphores": sum(len(s) for s in p["sems"]),
            "scratch_chunks": max(c["s"] for c in p["counts"])}
