"""synth's files in a PyTorch job: a SynthComm per communicator (process group) a
process belongs to, used by a DDP comm hook (`allreduce_hook`) and by FSDP2's custom
collectives (`FsdpAllGather`, `FsdpReduceScatter`); examples/pytorch/ shows both and
docs/runtimes.md ("PyTorch") is the contract.

Every call is cut as the runtime cuts it (synth.run.calls.run_split, synth.export.units):
the bulk, the largest part of every share the file runs, through the file; the tail
through the runtime's own algorithm. Three ways to run them (`via`):

- "mscclpp": GPUs, NCCL backend, the MSCCL++ NCCL shim preloaded (v0.9.0 and later).
  The plans are registered for this communicator, with the process's own rank in it
  (synth.run.mscclpp_shim); bulk and tail are torch.distributed's collective on the
  group, the shim's selector giving the bulk to the plan and the tail to the shim's own
  algorithms. The bulk sits in buffers of their own allocation (mscclpp.RawGpuBuffer,
  kept per size): offset 0, the same on every rank, as the executor needs.
- "msccl": GPUs, NCCL backend, msccl-executor-nccl's libnccl loaded, its MSCCL_ALGO_DIR
  holding the XML files: bulk and tail are torch.distributed's collective; MSCCL picks
  the file for the bulk by its element count and NCCL's own algorithm runs the tail.
- "schedule": any backend (gloo on CPUs): the schedule files run as torch.distributed
  point-to-point messages (synth.run.p2p, what `synth run` checks), the tail through the
  backend's own collective.

Sums only (the runtimes ignore or refuse other reductions): an average is a sum and a
division here. Calls are synchronous for the host under gloo; under NCCL they are
ordered on the current CUDA stream (torch's synchronous collectives).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from synth.errors import BadInput
from synth.export import MAX_UNFOLDED_SENDS
from synth.export.units import Unit, header_of, parts_of

VIAS = ("mscclpp", "msccl", "schedule")
# the in-place form of the calls PyTorch makes: DDP's all_reduce, FSDP2's all-gather (its
# input a view of its output) are in place; FSDP2's reduce-scatter is not
TORCH_IN_PLACE = {"allreduce": True, "allgather": True, "reducescatter": False}


class SynthComm:
    """synth's files for the collectives of one process group (module docstring).

    files: schedule files (.json) for via="schedule", MSCCL++ plans (.mscclpp.json) for
    "mscclpp", MSCCL XML (.xml) for "msccl"; a collective without a file runs the
    backend's own. Create it before the group's first collective (the shim copies the
    plans registered so far into a communicator when NCCL creates it)."""

    def __init__(self, files, group=None, via: str = "schedule",
                 ranks_per_node: int | None = None, runtime: str = "mscclpp"):
        import torch.distributed as dist

        if via not in VIAS:
            raise BadInput(f"unknown via {via!r} (expected {', '.join(VIAS)})")
        self.group, self.via = group, via
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.routes: dict[str, list] = {}  # collective -> [(Unit, in place, schedule)]
        self._programs, self._staging = {}, {}
        # bytes by (collective, "file" | "own"): what went through synth's files and what
        # through the backend's own collective (tails, calls no file takes)
        self.moved: Counter = Counter()
        paths = [Path(f) for f in files]
        if via == "schedule":
            self._add_schedules(paths, runtime)
        else:
            fmt = "mscclpp" if via == "mscclpp" else "msccl-xml"
            for path in paths:
                unit, inplace, name = _file_unit(path, fmt, self.size)
                self.routes.setdefault(name, []).append((unit, inplace, None))
        for name, routes in self.routes.items():
            for _, inplace, _ in routes:
                if name in TORCH_IN_PLACE and inplace != TORCH_IN_PLACE[name]:
                    mode = "in place" if TORCH_IN_PLACE[name] else "out of place"
                    raise BadInput(f"the {name} file is {'in' if inplace else 'out of'} "
                                   f"place, but PyTorch calls {name} {mode}: export it "
                                   f"with --{'inplace' if TORCH_IN_PLACE[name] else 'out-of-place'}")
        if via == "mscclpp":  # only files it will call: the shim's table is the process's
            from synth.run.mscclpp_shim import register

            register(paths, self.rank, self.size, _ranks_per_node(group, ranks_per_node),
                     tag=_group_tag(group))

    def _add_schedules(self, paths, runtime):
        from synth.schedule.machine import read_verified

        for path in paths:
            schedule = read_verified(path)  # an invalid schedule could deadlock the group
            coll = schedule.collective
            if coll.ranks != self.size:
                raise BadInput(f"{path}: the schedule has {coll.ranks} ranks, the group "
                               f"{self.size}")
            if coll.name in self.routes:
                raise BadInput(f"{path}: a second {coll.name} schedule for one group")
            unit = Unit(runtime, coll.buffer_chunks, parts_of(coll.name, coll.ranks))
            self.routes[coll.name] = [(unit, TORCH_IN_PLACE.get(coll.name, False),
                                       schedule.unfolded(MAX_UNFOLDED_SENDS,
                                                         "synth's backend").as_sends())]

    # --- the collectives, in NCCL's layout (synth.run.calls), sums --------------------

    def all_reduce(self, tensor) -> None:
        self.call("allreduce", tensor, tensor)

    def all_gather(self, out, inp) -> None:
        self.call("allgather", out, inp)

    def reduce_scatter(self, out, inp) -> None:
        self.call("reducescatter", out, inp)

    def call(self, name: str, out, inp, root: int | None = None) -> None:
        """One call of `name` from inp into out, of any size."""
        from synth.run.calls import own_collective, run_split

        def own(i, o):
            own_collective(name, o, i, self.group, root)

        n = max(inp.nbytes, out.nbytes)
        route = next((r for r in self.routes.get(name, ()) if r[0].within(n)), None)
        if route is None:
            own(inp, out)
            self.moved[(name, "own")] += n
            return
        unit, _, schedule = route
        split = unit.split(n, inp.element_size())
        self.moved[(name, "file")] += split.bulk
        self.moved[(name, "own")] += split.tail
        if schedule is not None:
            bulk = self._schedule_bulk(schedule, split, inp)
        else:
            bulk = own  # the runtime picks the file by the bulk's size
        stage = None
        if self.via == "mscclpp":  # buffers per collective: their calls run on other streams
            def stage(key, numel, like):
                return self._stage((name, key), numel, like)
        run_split(split, inp, out, bulk, own, self.rank, stage)

    def _schedule_bulk(self, schedule, split, like):
        from synth.export.layout import Layout
        from synth.run.p2p import Program
        from synth.run.rank_plan import plan_rank

        coll = schedule.collective
        elems = split.bulk_part // like.element_size() // coll.chunks
        key = (coll.name, elems, like.dtype, like.device)
        if key not in self._programs and elems:
            plan = plan_rank(schedule, self.rank, Layout(coll, inplace=False))
            self._programs[key] = Program(plan, elems, like.dtype, like.device, self.group)
        program = self._programs.get(key)

        def bulk(i, o):
            o.copy_(program.run(i))
        return bulk

    def _stage(self, key, numel, like):
        """A buffer of its own CUDA allocation for the bulk (offset 0 on every rank),
        kept per (use, size, type): the executor sets a new buffer up again, a blocking
        step every rank takes part in. The shim's selector gives plans only calls on
        such buffers (synth.run.mscclpp_shim.stage_buffer)."""
        slot = (key, numel, like.dtype)
        if slot not in self._staging:
            import mscclpp
            import torch.utils.dlpack

            from synth.run.mscclpp_shim import stage_buffer

            raw = mscclpp.RawGpuBuffer(numel * like.element_size())
            tensor = torch.utils.dlpack.from_dlpack(raw.to_dlpack(data_type=str(like.dtype)))
            self._staging[slot] = (raw, tensor)  # the tensor must not outlive its buffer
            stage_buffer(tensor.data_ptr(), tensor.nbytes)  # kept with this SynthComm
        return self._staging[slot][1]


def _file_unit(path: Path, fmt: str, size: int):
    """(Unit, in place, collective) of an exported file, checked against the group."""
    try:
        head = header_of(fmt, path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: not a synth {fmt} export ({e})") from None
    if head.ranks != size:
        raise BadInput(f"{path}: the file is for {head.ranks} ranks, the group has {size}")
    return head.unit, head.inplace, head.collective


def _ranks_per_node(group, given: int | None) -> int:
    import torch.distributed as dist

    if given is not None:
        return given
    whole = group is None or dist.get_world_size(group) == dist.get_world_size()
    if whole and os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():
        return int(os.environ["LOCAL_WORLD_SIZE"])  # torchrun's processes per node
    raise BadInput("give ranks_per_node: the group's processes on each node")


def _group_tag(group) -> str:
    import torch.distributed as dist

    g = group or dist.group.WORLD
    return str(getattr(g, "group_name", "") or "world")


# --- DDP and FSDP2 ------------------------------------------------------------------


def allreduce_hook(comm: SynthComm, bucket):
    """DDP comm hook: the bucket's gradients summed through `comm`, then averaged.
    ddp_model.register_comm_hook(comm, allreduce_hook)."""
    import torch

    tensor = bucket.buffer()
    comm.all_reduce(tensor)
    tensor.div_(comm.size)
    # on GPUs the future records the current stream, which the collectives were
    # ordered on, so that DDP's use of the result waits for them
    future = torch.futures.Future(devices=[tensor.device] if tensor.is_cuda else None)
    future.set_result(tensor)
    return future


class FsdpAllGather:
    """FSDP2's all-gather through `comm`: fsdp_module.set_custom_all_gather(...)."""

    def __init__(self, comm: SynthComm):
        self.comm = comm

    def allocate(self, size, *, dtype, device):
        import torch

        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        _same_group(self.comm, group)
        self.comm.all_gather(output_tensor, input_tensor)
        return None  # done (gloo) or ordered on the stream (NCCL): no Work to wait for


class FsdpReduceScatter(FsdpAllGather):
    """FSDP2's reduce-scatter through `comm` (sums; an average is divided here):
    fsdp_module.set_custom_reduce_scatter(...)."""

    def __call__(self, output_tensor, input_tensor, group, op=None, async_op: bool = False):
        import torch.distributed as dist

        _same_group(self.comm, group)
        self.comm.reduce_scatter(output_tensor, input_tensor)
        if op == dist.ReduceOp.AVG:
            output_tensor.div_(self.comm.size)
        elif op not in (None, dist.ReduceOp.SUM):
            raise ValueError(f"synth's reduce-scatter sums; FSDP asked for {op} (call "
                             "set_force_sum_reduction_for_comms(True))")
        return None


def _same_group(comm: SynthComm, group) -> None:
    import torch.distributed as dist

    if dist.get_world_size(group) != comm.size or dist.get_rank(group) != comm.rank:
        raise ValueError("FSDP's group is not the SynthComm's")
