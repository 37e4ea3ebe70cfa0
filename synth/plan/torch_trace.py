"""A workload from a PyTorch profiler trace (the Chrome-trace JSON that
torch.profiler's export_chrome_trace and tensorboard traces write).

PyTorch records every collective of a process group as a `record_param_comms` event
(and copies the same arguments onto the NCCL kernel's event):

    {"name": "record_param_comms", "cat": "cpu_op", "ts": ..., "args": {
        "Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": 1048576,
        "Out msg nelems": 1048576, "Group size": 8, "Process Group Ranks": "[0, ..., 7]"}}

The `record_param_comms` events are read (the kernels' copies only where there are
none, so nothing is counted twice); a trace saved as a bare JSON array of events is
read too. Sizes are nccl-tests' n, the larger per-rank buffer: the larger of the input
and output element counts x the type's size. A group's ranks place it
on the topology: one box's GPUs are {per: box}, one GPU of each box {across: boxes},
every GPU `all`, anything else its explicit ranks; a list PyTorch cut short ("...")
is rebuilt from "Global rank start" and "Global rank stride". Point-to-point calls and
barriers, and groups of one rank, are counted but not planned. Strict: an event with collective arguments that
do not parse is an error naming its index in traceEvents.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from synth.errors import BadInput
from synth.files import parse_json, quote
from synth.plan.workload import Call, Workload, check_disjoint
from synth.schedule.cost import MAX_SIZE
from synth.topology.communicator import groups
from synth.topology.physical import Topology

NAMES = {"allreduce": "allreduce", "allreduce_coalesced": "allreduce",
         "allgather": "allgather", "_allgather_base": "allgather",
         "allgather_into_tensor_coalesced": "allgather", "all_gather": "allgather",
         "reduce_scatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
         "reduce_scatter_tensor_coalesced": "reducescatter",
         "all_to_all": "alltoall", "all_to_allv": "alltoall", "alltoall": "alltoall",
         "alltoall_base": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
         "gather": "gather", "scatter": "scatter"}
SKIPPED = {"send", "recv", "recvAnySource", "barrier", "init", "wait", "coalesced"}
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8,
               "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1,
               "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
               "ComplexFloat": 8, "ComplexDouble": 16, "UInt16": 2, "UInt32": 4,
               "UInt64": 8}
_RANKS = re.compile(r"^\[\s*(\d+(?:\s*,\s*(?:\d+|\.\.\.))*)?\s*\]$")


def parse_trace(text: str, topo: Topology, source: str = "trace", steps: int = 1) -> Workload:
    """The workload the trace records (module docstring), `steps` training steps of it."""
    where = quote(source, 80)
    doc = parse_json(text, where)
    events = doc if isinstance(doc, list) else (doc.get("traceEvents") if isinstance(
        doc, dict) else None)
    if not isinstance(events, list):
        raise BadInput(f"{where}: no traceEvents list")
    comms = [(i, e) for i, e in enumerate(events) if isinstance(e, dict)
             and e.get("name") == "record_param_comms"]
    if not comms:  # the kernels' copies of the same arguments
        comms = [(i, e) for i, e in enumerate(events) if isinstance(e, dict)
                 and e.get("cat") == "kernel" and isinstance(e.get("args"), dict)
                 and "Collective name" in e["args"]]
    counts, skipped, places, single, uneven = Counter(), 0, {}, 0, 0
    for i, event in comms:
        at = f"{where}: traceEvents[{i}]"
        args = event.get("args")
        if not isinstance(args, dict) or not isinstance(args.get("Collective name"), str):
            raise BadInput(f"{at}: a collective event without a Collective name")
        name = args["Collective name"]
        if name in SKIPPED:
            skipped += 1
            continue
        if name not in NAMES:
            raise BadInput(f"{at}: unknown collective {quote(name)}")
        coll = NAMES[name]
        uneven += coll == "alltoall" and _uneven(args)
        dtype = args.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise BadInput(f"{at}: unknown dtype {quote(dtype)}")
        nelems = 0
        for key in ("In msg nelems", "Out msg nelems"):
            value = args.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadInput(f"{at}: {key} {quote(value)} is not a count")
            nelems = max(nelems, value)
        if nelems * DTYPE_BYTES[dtype] > MAX_SIZE:
            raise BadInput(f"{at}: {nelems:,} elements (at most 1 PB)")
        if nelems == 0:
            continue
        ranks = tuple(_ranks(args, at, topo.ranks))
        if len(ranks) == 1:
            single += 1
            continue
        if ranks not in places:
            places[ranks] = _place(ranks, topo, at)
        root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None
        counts[(places[ranks][0], coll, nelems * DTYPE_BYTES[dtype], root)] += 1
    if not counts:
        raise BadInput(f"{where}: no collective calls (record_param_comms events) in it")
    communicators = {}
    for name, spec in places.values():
        communicators.setdefault(name, groups(topo, spec, f"{where}: communicator {name}"))
    calls = tuple(Call(comm, coll, size, size, n / steps, root)
                  for (comm, coll, size, root), n in sorted(counts.items(), key=str))
    check_disjoint(calls, where)
    notes = (f"{skipped} point-to-point or barrier calls are not planned",) if skipped else ()
    notes += (f"{single} calls on one-rank groups (local copies) are not planned",) \
        if single else ()
    notes += ("roots of rooted collectives are not in the trace: rank 0 is assumed",) \
        if any(c.root is not None for c in calls) else ()
    notes += (f"{uneven} alltoall calls with uneven splits (all_to_allv) are planned as "
              "even alltoalls of the same total",) if uneven else ()
    return Workload(f"profiler trace {source}", communicators, calls, str(source), notes)


def _ranks(args: dict, at: str, gpus: int) -> list[int]:
    text, size = args.get("Process Group Ranks"), args.get("Group size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BadInput(f"{at}: Group size {quote(size)} is not a count")
    if size > gpus:
        raise BadInput(f"{at}: Group size {size} is more GPUs than the topology has ({gpus})")
    if isinstance(text, str) and len(text) > 16 * gpus + 64:
        raise BadInput(f"{at}: Process Group Ranks is longer than {gpus} ranks can be")
    if not isinstance(text, str) or not _RANKS.match(text.strip()):
        raise BadInput(f"{at}: Process Group Ranks {quote(text)} is not a list of ranks")
    if "..." not in text:
        ranks = [int(x) for x in re.findall(r"\d+", text)]
    else:  # cut short: rebuild it from the first rank and the stride
        start, stride = args.get("Global rank start"), args.get("Global rank stride")
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                   for x in (start, stride)) or stride < 1:
            raise BadInput(f"{at}: Process Group Ranks is cut short and the global rank "
                           "start and stride are missing")
        ranks = [start + i * stride for i in range(size)]
    if len(ranks) != size or len(set(ranks)) != size:
        raise BadInput(f"{at}: Process Group Ranks {quote(text)} does not hold Group size "
                       f"{size} distinct ranks")
    return ranks


def _place(ranks: tuple[int, ...], topo: Topology, at: str):
    """(communicator name, shape) of a process group's global ranks."""
    if any(r >= topo.ranks for r in ranks):
        raise BadInput(f"{at}: rank {max(ranks)} is outside the topology "
                       f"(0..{topo.ranks - 1})")
    n = len(ranks)
    if n == topo.ranks:
        return f"all_{n}", "all"
    for name, shape in ((f"box_{n}", {"per": "box", "size": n}),
                        (f"across_{n}", {"across": "boxes", "size": n})):
        try:
            made = groups(topo, shape)
        except BadInput:
            continue
        if list(ranks) in made:
            return name, shape
    digest = hashlib.sha256(repr(ranks).encode()).hexdigest()[:8]
    return f"ranks_{'_'.join(map(str, ranks[:4]))}_{digest}", {"ranks": [list(ranks)]}


def _uneven(args: dict) -> bool:
    """Whether an alltoall event's split sizes differ from one another (all_to_allv's
    "In split size" / "Out split size"; an even one gives them empty or all alike)."""
    for key in ("In split size", "Out split size"):
        splits = args.get(key)
        if isinstance(splits, list) and len(set(map(str, splits))) > 1:
            return True
    return False
