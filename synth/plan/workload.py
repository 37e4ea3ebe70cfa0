"""A workload: the communicators of a training job and the collectives one step issues.

Read from a YAML file of our own, an NCCL_DEBUG=INFO log (synth.plan.nccl_log) or a
PyTorch profiler trace (synth.plan.torch_trace); `load_workload` (synth.plan.reading)
tells them apart by their content. The YAML form (README, "Planning a training step"):

    name: 3-D parallel step
    communicators:
      tp: {per: box}                  # shapes: synth.topology.communicator
      dp: {across: boxes}
    collectives:
      - {communicator: tp, collective: allreduce, size: 64MB, count: 96}
      - {communicator: dp, collective: reducescatter, size: 1GB, overlap: grads}
      - {communicator: dp, collective: allgather, range: [1MB, 64MB], count: 4}

`size` is nccl-tests' message size n (the larger per-rank buffer); `range: [lo, hi]`
stands for messages anywhere in it (the plan then covers the whole range); `count`
calls per step (default 1); `root` for broadcast, reduce, gather and scatter; calls with
the same `overlap` tag run at the same time. Entries of one communicator and collective
must not overlap in size (two entries of one size, or overlapping ranges, say the same
thing twice and are refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from synth.errors import BadInput
from synth.files import quote
from synth.schedule.collectives import COLLECTIVES, ROOTED
from synth.schedule.cost import parse_size
from synth.topology.communicator import groups
from synth.topology.physical import FABRICS, Topology

MAX_CALLS = 10_000  # entries of a workload (a log's calls are summed per size first)


@dataclass(frozen=True)
class Call:
    communicator: str
    collective: str
    low: int  # bytes, nccl-tests' n; low == high for one size
    high: int
    count: float = 1  # calls per step (a log's or trace's calls / its steps: may be < 1)
    root: int | None = None
    overlap: str = ""  # calls with the same tag run at the same time


@dataclass(frozen=True)
class Workload:
    name: str
    communicators: dict[str, list[list[int]]]  # name -> groups of global ranks
    calls: tuple[Call, ...]
    source: str  # what it was read from
    notes: tuple[str, ...] = field(default=())  # what the reader assumed


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def parse_workload(doc, topo: Topology, source: str = "workload") -> Workload:
    """The YAML form (module docstring), as a dict."""
    where = quote(source, 80)
    if not isinstance(doc, dict):
        raise BadInput(f"{where}: expected a mapping with communicators and collectives")
    unknown = set(doc) - {"name", "communicators", "collectives"}
    if unknown:
        raise BadInput(f"{where}: unknown key {quote(sorted(unknown)[0])} (expected name, "
                       "communicators, collectives)")
    comms = doc.get("communicators")
    if not isinstance(comms, dict) or not comms:
        raise BadInput(f"{where}: communicators: expected a mapping of names to shapes")
    communicators = {}
    for name, shape in comms.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise BadInput(f"{where}: communicator name {quote(name)}: use up to 64 ASCII "
                           "letters, digits and _, not starting with a digit")
        if name in FABRICS:  # its files' machine, NAME:clos, would read as that fabric
            raise BadInput(f"{where}: communicator name {quote(name)} is a fabric's "
                           f"(NAME:{name} names that fabric); name it otherwise")
        communicators[name] = groups(topo, shape, f"{where}: communicator {name}")
        if len(communicators[name][0]) < 2:
            raise BadInput(f"{where}: communicator {name} has groups of one GPU: nothing to "
                           "plan")
    entries = doc.get("collectives")
    if not isinstance(entries, list) or not entries:
        raise BadInput(f"{where}: collectives: expected a non-empty list")
    if len(entries) > MAX_CALLS:
        raise BadInput(f"{where}: {len(entries):,} collectives (at most {MAX_CALLS:,})")
    calls = tuple(_call(e, f"{where}: collectives[{i}]", communicators)
                  for i, e in enumerate(entries))
    check_disjoint(calls, where)
    name = doc.get("name", "workload")
    if not isinstance(name, str):
        raise BadInput(f"{where}: name must be a string")
    return Workload(name, communicators, calls, str(source))


def _call(entry, where: str, communicators: dict) -> Call:
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: expected a mapping")
    unknown = set(entry) - {"communicator", "collective", "size", "range", "count", "root",
                            "overlap"}
    if unknown:
        raise BadInput(f"{where}: unknown key {quote(sorted(unknown)[0])}")
    comm = entry.get("communicator")
    if comm not in communicators:
        raise BadInput(f"{where}: unknown communicator {quote(comm)} (declared: "
                       f"{', '.join(communicators)})")
    coll = entry.get("collective")
    if coll not in COLLECTIVES:
        raise BadInput(f"{where}: unknown collective {quote(coll)} (expected one of "
                       f"{', '.join(COLLECTIVES)})")
    if ("size" in entry) == ("range" in entry):
        raise BadInput(f"{where}: give size or range (one of them)")
    if "size" in entry:
        low = high = _bytes(entry["size"], where)
    else:
        pair = entry["range"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise BadInput(f"{where}: range: expected [low, high]")
        low, high = (_bytes(x, where) for x in pair)
        if low > high:
            raise BadInput(f"{where}: range {quote(pair)} runs backwards")
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10 ** 9:
        raise BadInput(f"{where}: count {quote(count)}: expected an integer from 1")
    size = len(communicators[comm][0])
    root = entry.get("root")
    if coll in ROOTED:
        root = 0 if root is None else root
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < size:
            raise BadInput(f"{where}: root {quote(root)} is not a rank of the communicator "
                           f"(0..{size - 1})")
    elif root is not None:
        raise BadInput(f"{where}: {coll} takes no root")
    overlap = entry.get("overlap", "")
    if not isinstance(overlap, str):
        raise BadInput(f"{where}: overlap must be a tag (a string)")
    return Call(comm, coll, low, high, count, root, overlap)


def _bytes(value, where: str) -> int:
    if isinstance(value, bool):
        raise BadInput(f"{where}: size {quote(value)} is not a size")
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise BadInput(f"{where}: size {quote(value)}: expected bytes or a size like 64MB")
    try:
        return parse_size(value)
    except BadInput as e:  # which entry of which file, as every other workload error
        raise BadInput(f"{where}: {e}") from None


def check_disjoint(calls, where: str) -> None:
    """Entries of one communicator, collective and root may not cover a size twice."""
    spans: dict = {}
    for c in calls:
        spans.setdefault((c.communicator, c.collective, c.root), []).append((c.low, c.high))
    for (comm, coll, _), ranges in spans.items():
        ranges.sort()
        for (a, b), (c, d) in zip(ranges, ranges[1:]):
            if c <= b:
                raise BadInput(f"{where}: {coll} on {comm}: the size ranges {a}..{b} and "
                               f"{c}..{d} bytes overlap (one entry per size)")
