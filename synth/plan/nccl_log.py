"""A workload from an NCCL_DEBUG=INFO log (NCCL_DEBUG_SUBSYS=INIT,COLL or ALL).

NCCL writes one line per collective call,

    host:pid:tid [dev] NCCL INFO AllReduce: opCount 3 sendbuff 0x7f.. recvbuff 0x7f..
        count 1048576 datatype 7 op 0 root 0 comm 0x55.. [nranks=8] stream 0x55..

(RCCL and MSCCL add `task T globalrank G`; whatever a logger puts before `host:pid:tid`
is skipped), and one line per communicator it creates,

    host:pid:tid [dev] NCCL INFO comm 0x55.. rank 3 nRanks 8 nNodes 1 localRanks 8
        localRank 3 MNNVL 0

A communicator's shape comes from its init line: one node is {per: box, size: nRanks},
one rank per node {across: boxes, size: nRanks}, every GPU `all`; a communicator
without an init line is placed by its size alone (every GPU, or one box), which the
workload's notes say. Communicators of one shape are one communicator of the plan.
Sizes are nccl-tests' n: count x the type's size, times nranks where count is per
rank (AllGather: what each rank sends; ReduceScatter: what it receives; AllToAll,
Gather, Scatter: per peer). Calls are counted per process and the most any process
made is taken (every rank of a communicator makes the same calls), divided by `steps`
(a call made less often than once a step counts a fraction). Send and Recv, and calls
on one-rank communicators (local copies), are counted and said, not planned. Strict: a
line that starts a collective or init record and does not parse, names an operation
NCCL does not have, or gives a size past 1 PB is an error naming its line; other lines
are skipped.
"""

from __future__ import annotations

import re
from collections import Counter

from synth.errors import BadInput
from synth.files import quote
from synth.plan.workload import Call, Workload, check_disjoint
from synth.schedule.cost import MAX_SIZE
from synth.topology.communicator import groups, local_ranks
from synth.topology.physical import Topology

# ncclDataType_t: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64,
# bfloat16, float8 e4m3, float8 e5m2
DTYPE_BYTES = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)
OPS = {"AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reducescatter",
       "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "alltoall",
       "AlltoAll": "alltoall", "Gather": "gather", "Scatter": "scatter"}
PER_RANK = {"allgather", "reducescatter", "alltoall", "gather", "scatter"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
P2P = ("Send", "Recv")

# what stands before " NCCL INFO ": HOST:PID:TID [DEVICE], after any prefix a launcher
# adds (mpirun --tag-output: "[1,0]<stdout>:"); matched on at most _HEAD_CHARS before it,
# so that a long line of colons and digits never makes the pattern backtrack for long
_HEAD = re.compile(r"(?P<proc>\S*?:\d+):\d+ \[\d+\]$")
_HEAD_CHARS = 256


def log_process(line: str) -> str | None:
    """The process (HOST:PID, with any launcher prefix) of an NCCL INFO line, else
    None. Linear in the line's length."""
    at = line.find(" NCCL INFO ")
    if at < 0:
        return None
    m = _HEAD.search(line, max(0, at - _HEAD_CHARS), at)
    return m["proc"] if m else None


def is_log(text: str) -> bool:
    """Whether any line of `text` is an NCCL INFO line. Linear in its length."""
    return any(log_process(line) is not None for line in text.splitlines()
               if "NCCL INFO" in line)
_PREFIX = r"NCCL INFO "
_CALL_START = re.compile(_PREFIX + r"(?P<op>[A-Za-z]+): opCount ")
_CALL = re.compile(
    _PREFIX + r"(?P<op>[A-Za-z]+): opCount [0-9a-fA-F]+ sendbuff (?:0x[0-9a-fA-F]+|\(nil\)) "
    r"recvbuff (?:0x[0-9a-fA-F]+|\(nil\)) count (?P<count>\d{1,18}) datatype "
    r"(?P<dtype>\d{1,3}) op \d{1,3} root (?P<root>-?\d{1,9}) comm (?P<comm>0x[0-9a-fA-F]+) "
    r"\[nranks=(?P<nranks>\d{1,6})\] stream (?:0x[0-9a-fA-F]+|\(nil\))"
    r"(?: task \d+ globalrank \d+)?\s*$")
_INIT_START = re.compile(_PREFIX + r"comm 0x[0-9a-fA-F]+ rank \d+ nRanks ")
_INIT = re.compile(
    _PREFIX + r"comm (?P<comm>0x[0-9a-fA-F]+) rank \d{1,6} nRanks (?P<nranks>\d{1,6}) "
    r"nNodes (?P<nodes>\d{1,6}) localRanks (?P<local>\d{1,6}) localRank \d{1,6}"
    r"(?: MNNVL \d+)?\s*$")


def parse_log(text: str, topo: Topology, source: str = "log", steps: int = 1) -> Workload:
    """The workload the log records (module docstring), `steps` training steps of it."""
    where = quote(source, 80)
    shapes: dict[tuple[str, str], tuple[int, int, int]] = {}  # (process, comm) -> shape
    per_process: dict[str, Counter] = {}
    p2p = local = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if "NCCL INFO" not in line:
            continue
        proc = log_process(line) or ""
        if _INIT_START.search(line):
            m = _INIT.search(line)
            if not m:
                raise BadInput(f"{where} line {lineno}: a communicator line that does not "
                               "parse")
            shapes[(proc, m["comm"])] = (int(m["nranks"]), int(m["nodes"]), int(m["local"]))
            continue
        start = _CALL_START.search(line)
        if not start:
            continue
        if start["op"] not in OPS and start["op"] not in P2P:
            raise BadInput(f"{where} line {lineno}: {quote(start['op'])} is not an NCCL "
                           "operation synth knows")
        m = _CALL.search(line)
        if not m:
            raise BadInput(f"{where} line {lineno}: a {start['op']} line that does not parse")
        if m["op"] in P2P:
            p2p += 1
            continue
        dtype, nranks = int(m["dtype"]), int(m["nranks"])
        if dtype >= len(DTYPE_BYTES):
            raise BadInput(f"{where} line {lineno}: datatype {dtype} is not one NCCL has")
        if nranks < 1:
            raise BadInput(f"{where} line {lineno}: a communicator of {nranks} ranks")
        shape = shapes.get((proc, m["comm"]), (nranks, None, None))
        if shape[0] != nranks:
            raise BadInput(f"{where} line {lineno}: comm {m['comm']} has {nranks} ranks here "
                           f"and {shape[0]} where it was created")
        if nranks == 1:
            local += 1
            continue
        coll = OPS[m["op"]]
        size = int(m["count"]) * DTYPE_BYTES[dtype] * (nranks if coll in PER_RANK else 1)
        if size > MAX_SIZE:
            raise BadInput(f"{where} line {lineno}: {size:,} bytes (at most 1 PB)")
        if size < 1:
            continue  # a call that moves nothing
        root = int(m["root"]) if coll in ROOTED else None
        if root is not None and not 0 <= root < nranks:
            raise BadInput(f"{where} line {lineno}: root {root} of a {nranks}-rank comm")
        per_process.setdefault(proc, Counter())[(shape, coll, size, root)] += 1
    if not per_process:
        raise BadInput(f"{where}: no collective calls (run with NCCL_DEBUG=INFO and "
                       "NCCL_DEBUG_SUBSYS=INIT,COLL)")
    most: Counter = Counter()
    for counts in per_process.values():
        for key, n in counts.items():
            most[key] = max(most[key], n)
    communicators, notes, merged = {}, [], Counter()
    for (shape, coll, size, root), n in sorted(most.items(), key=lambda e: str(e[0])):
        name, spec, note = _place(shape, topo, where)
        if name not in communicators:
            communicators[name] = groups(topo, spec, f"{where}: communicator {name}")
        if note and note not in notes:
            notes.append(note)
        merged[(name, coll, size, root)] += n  # one shape is one communicator
    calls = [Call(name, coll, size, size, n / steps, root)
             for (name, coll, size, root), n in sorted(merged.items(), key=str)]
    if p2p:
        notes.append(f"{p2p} Send/Recv calls (point to point) are not planned")
    if local:
        notes.append(f"{local} calls on one-rank communicators (local copies) are not "
                     "planned")
    check_disjoint(calls, where)
    return Workload(f"NCCL log {source}", communicators, tuple(calls), str(source),
                    tuple(notes))


def _place(shape, topo: Topology, where: str):
    """(name, communicator shape, note) of an NCCL communicator of (nRanks, nNodes,
    localRanks); the last two are None without an init line."""
    nranks, nodes, local = shape
    per_box = len(local_ranks(topo)[0])
    if nodes is None:
        if nranks == topo.ranks:
            return f"all_{nranks}", "all", None
        if per_box % nranks == 0:
            return (f"box_{nranks}", {"per": "box", "size": nranks},
                    f"a {nranks}-rank communicator without its init line is taken to be "
                    "inside one box")
        raise BadInput(f"{where}: a {nranks}-rank communicator without its init line "
                       "(log with NCCL_DEBUG_SUBSYS=INIT,COLL) that fits no shape")
    if nranks == topo.ranks:
        return f"all_{nranks}", "all", None
    if nodes == 1:
        return f"box_{nranks}", {"per": "box", "size": nranks}, None
    if local == 1:
        return f"across_{nranks}", {"across": "boxes", "size": nranks}, None
    raise BadInput(f"{where}: a communicator of {nranks} ranks on {nodes} nodes, "
                   f"{local} per node: only whole boxes, one rank per box, or every GPU are "
                   "planned")
