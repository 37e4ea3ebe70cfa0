"""Register synth's MSCCL++ plans with the MSCCL++ NCCL shim (libmscclpp_nccl.so,
v0.9.0 and later), one registration per communicator a process belongs to, with the
process's own rank in it. Needs the `mscclpp` Python package of the same release.

What the shim does, read in its sources (v0.9.0, v0.10.0; not run here: no GPU):
- A process has one algorithm collection builder (mscclpp.ext.AlgorithmCollectionBuilder).
  When NCCL creates a communicator (ncclCommInitRank, also under ncclCommSplit), the
  shim copies every algorithm registered so far, keyed by plan name, and the selector
  set so far into that communicator.
- A call asks the selector first, then the shim's own selection: a registered plan
  whose collective, constraint (world size, ranks per node), in-place flag and size
  range match, without looking at whether its chunks cut the size (the executor then
  throws), else its own kernels, else NCCL (MSCCLPP_NCCL_LIB_PATH).
- A plan runs as the rank it was loaded for (ExecutionPlan(path, rank)), whatever rank
  the process has in the communicator that calls it.

- The request carries no reduction operator, and the executor sums: a plan given an
  all_reduce(op=MAX) would sum. A plan also needs every rank's buffers at the same
  offset of their CUDA allocations, which PyTorch's caching allocator does not give.

So each plan is registered under a name of its own (a copy of the file, kept for the
life of the process: the executor reads it again at setup and for each new size), with
the default constraint, which the shim's own selection never matches; and one selector
picks a plan only for its communicator's shape (collective, world size, ranks per
node), the rank it was loaded for, its in-place flag, its size range and a size its
chunks cut (synth.export.units), and only for a call whose input and output lie in
buffers recorded with `stage_buffer`: synth.run.pytorch's staging buffers (allocations
of their own, calls that sum). Every other call goes on to the shim's own selection.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from synth.errors import BadInput
from synth.export.units import Unit, header_of


@dataclass(frozen=True)
class Registered:
    name: str  # the copy's plan name: the collection's key
    unit: Unit
    inplace: bool
    tag: str  # the communicator it was registered for


# (collective, world size, ranks per node, rank) -> plans registered for it
_TABLE: dict[tuple, list[Registered]] = {}
_FOLDER: list[Path] = []  # where the renamed copies live, made on first use
_STAGED: dict[int, int] = {}  # start address -> bytes of the buffers a plan may run on


def register(paths, rank: int, world: int, per_node: int, tag: str) -> list[Registered]:
    """Register the plans at `paths` for one communicator (`tag` names it): `world`
    ranks, `per_node` of them on each node, this process being `rank` in it. Before
    NCCL creates that communicator."""
    import mscclpp
    import mscclpp.ext

    builder = mscclpp.ext.AlgorithmCollectionBuilder()
    entries = record(paths, rank, world, per_node, tag)
    for copy, entry in entries:
        plan = mscclpp.ExecutionPlan(str(copy), rank)
        builder.add_algorithm_builder(mscclpp.Algorithm(id=entry.name, execution_plan=plan))
    builder.set_algorithm_selector(select)  # one selector for every communicator
    return [entry for _, entry in entries]


def record(paths, rank: int, world: int, per_node: int, tag: str
           ) -> list[tuple[Path, Registered]]:
    """The selector's side of `register` (no mscclpp needed): each plan copied under a
    name of its own and entered in the table; (copy, entry) for those not entered
    before. BadInput if another communicator of this process has the same shape and
    rank (the shim could not tell their calls apart)."""
    out = []
    for path in paths:
        text = Path(path).read_text()
        head = header_of("mscclpp", text)
        if head.ranks != world:
            raise BadInput(f"{path}: the plan is for {head.ranks} ranks, the "
                           f"communicator has {world}")
        key = (head.collective, world, per_node, rank)
        others = {r.tag for r in _TABLE.get(key, ())} - {tag}
        if others:
            raise BadInput(f"{path}: another communicator of this process "
                           f"({sorted(others)[0]}) has {world} ranks, {per_node} a node and "
                           f"rank {rank} too: the shim cannot tell their calls apart")
        name = re.sub(r"[^A-Za-z0-9_.:+-]", "_", f"{head.name}@{tag}.rank{rank}")
        if any(r.name == name for r in _TABLE.get(key, ())):
            continue  # registered already
        doc = json.loads(text)
        doc["name"] = name
        copy = _folder() / f"{name}.mscclpp.json"
        copy.write_text(json.dumps(doc))
        entry = Registered(name, head.unit, head.inplace, tag)
        _TABLE.setdefault(key, []).append(entry)
        out.append((copy, entry))
    return out


def stage_buffer(address: int, nbytes: int) -> None:
    """Let plans run calls on the `nbytes` at `address`: a buffer of an allocation of its
    own (the same offset on every rank), kept while calls use it, whose calls sum
    (synth.run.pytorch's staging buffers)."""
    _STAGED[address] = nbytes


def _staged(address: int) -> bool:
    return any(start <= address < start + n for start, n in _STAGED.items())


def chosen(collective: str, world: int, per_node: int, rank: int, message_bytes: int,
           inplace: bool, input_buffer: int, output_buffer: int) -> Registered | None:
    """The plan a call takes: `message_bytes` as the shim's request counts it (the
    per-rank bytes for allgather, the input for the others); none unless both buffers
    (addresses) lie in staged ones (`stage_buffer`)."""
    if not (_staged(input_buffer) and _staged(output_buffer)):
        return None  # another caller's call: maybe not a sum, maybe any offset
    n = message_bytes * (world if collective == "allgather" else 1)
    return next((r for r in _TABLE.get((collective, world, per_node, rank), ())
                 if r.inplace == inplace and r.unit.cuts(n)), None)


def select(algorithms, request):
    """The shim's selector (set_algorithm_selector): a registered plan, or None for the
    shim's own selection."""
    from mscclpp._mscclpp import CppCollectiveBufferMode

    inplace = request.buffer_mode() == CppCollectiveBufferMode.IN_PLACE
    found = chosen(request.collective, request.world_size, request.n_ranks_per_node,
                   request.rank, request.message_size, inplace, request.input_buffer,
                   request.output_buffer)
    if found is None:
        return None
    return algorithms.get(request.collective, {}).get(found.name)  # None: registered late


def _folder() -> Path:
    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="synth-mscclpp-")))
        atexit.register(shutil.rmtree, _FOLDER[0], ignore_errors=True)
    return _FOLDER[0]
