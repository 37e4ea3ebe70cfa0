"""Run a schedule with torch.distributed and check it against torch's own collective.

Each process (one per rank) cuts its buffers into chunks by the chunk numbering (docs/schedule-file.md),
then executes the schedule step by step: the step's point-to-point sends and
receives are posted together (batch_isend_irecv) and applied when all have arrived, so
every send reads the value its rank held at the start of the step, as the schedule's
semantics say. The result is compared with torch.distributed's collective on the same
random data, and both are timed.

Two ways to start it:
- `synth run FILE --nproc N` spawns N processes on this machine (127.0.0.1 rendezvous).
- Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; one process per
  GPU), `synth run FILE` runs as one of the workers: env:// rendezvous.

Buffers (per rank; n bytes in nccl-tests' sense, float32 elements) are the exporters'
out-of-place layout, synth.export.layout: the same chunk lands in the same place
whether MSCCL, MSCCL++ or this runner moves it.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from synth.errors import BadInput, NoAnswer
from synth.schedule.file import read_schedule, read_verified
from synth.schedule.ir import Schedule

ELEMENT_BYTES = 4  # float32


def run(path: str | Path, nproc: int | None, nbytes: int, iters: int, backend: str,
        check_first: bool = True) -> dict:
    """Spawn the workers (or be one, under torchrun) and return rank 0's report.

    The schedule is verified first (an invalid one could deadlock the workers);
    check_first=False skips that, to test the runner's own numeric check."""
    # bad files fail here, before any process starts (an invalid one: exit 1)
    schedule = read_verified(path) if check_first else read_schedule(path)
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise BadInput("synth run needs torch: pip install torch==2.13.0 (CPU build)") from None
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
        if missing:
            raise BadInput(f"RANK and WORLD_SIZE are set, but not {' and '.join(missing)}: "
                           "start the workers with torchrun, or unset RANK to run here")
        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError:
            raise BadInput("RANK and WORLD_SIZE must be whole numbers") from None
        if not 0 <= rank < world:
            raise BadInput(f"RANK {rank} is not below WORLD_SIZE {world}")
        if world != schedule.collective.ranks:
            raise BadInput(f"the schedule has {schedule.collective.ranks} ranks, but "
                           f"WORLD_SIZE is {world}")
        report = _worker(rank, world, str(path), nbytes, iters, backend, "env://", None)
        return report or {}
    ranks = schedule.collective.ranks
    if nproc is None:
        nproc = ranks
    if nproc != ranks:
        raise BadInput(f"the schedule has {ranks} ranks, but --nproc is {nproc}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        init = f"tcp://127.0.0.1:{_free_port()}"
        try:
            mp.spawn(_worker, args=(nproc, str(path), nbytes, iters, backend, init, str(out)),
                     nprocs=nproc, join=True)
        except mp.ProcessRaisedException as e:
            last = str(e).strip().splitlines()[-1]
            raise NoAnswer(f"a worker failed: {last}") from None
        return json.loads(out.read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, path, nbytes, iters, backend, init, report_path):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        schedule = read_schedule(path)
        report = _run_and_check(schedule, rank, world, nbytes, iters, torch, dist)
        if rank == 0 and report_path:
            Path(report_path).write_text(json.dumps(report))
        return report if rank == 0 else None
    finally:
        dist.destroy_process_group()


def _run_and_check(schedule: Schedule, rank, world, nbytes, iters, torch, dist) -> dict:
    schedule = schedule.expanded()
    from synth.export.layout import Layout

    coll = schedule.collective
    name = coll.name
    layout = Layout(coll, inplace=False)
    per_buffer = coll.buffer_chunks
    elems = max(1, -(-nbytes // (ELEMENT_BYTES * per_buffer)))  # per chunk, rounded up
    n_in, n_out = layout.input_chunks, layout.output_chunks
    # nccl needs each process's tensors on its own GPU; gloo runs on the CPU
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    gen = torch.Generator().manual_seed(1234 + rank)
    inp = torch.rand(n_in * elems, generator=gen).to(device)

    mine = sorted(k for r, k in coll.pre if r == rank)
    wanted = sorted(k for r, k in coll.post if r == rank)

    def chunk_of(buf, index):
        return buf[index * elems:(index + 1) * elems]

    def execute():
        state = {k: chunk_of(inp, layout.init_slot(rank, k).idx).clone() for k in mine}
        for step in schedule.steps:
            ops, arriving = [], []
            for x in sorted(step.sends, key=lambda x: (x.src, x.dst, x.chunk)):
                if x.src == rank:
                    ops.append(dist.P2POp(dist.isend, state[x.chunk], x.dst, tag=x.chunk))
                if x.dst == rank:
                    buf = torch.empty(elems, device=device)
                    ops.append(dist.P2POp(dist.irecv, buf, x.src, tag=x.chunk))
                    arriving.append((x, buf))
            if ops:
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
            for x, buf in arriving:  # applied after the step: sends read start values
                state[x.chunk] = buf if x.op == "copy" else state[x.chunk] + buf
        out = torch.zeros(n_out * elems, device=device)
        for k in wanted:
            chunk_of(out, layout.out_slot(rank, k).idx).copy_(state[k])
        return out

    reference, how = _reference(name, coll.root, rank, world, inp, n_out * elems, torch, dist,
                                device)
    got, expected = execute(), reference()  # every rank calls each exactly once
    bad = [k for k in wanted if not torch.allclose(
        chunk_of(got, layout.out_slot(rank, k).idx),
        chunk_of(expected, layout.out_slot(rank, k).idx), rtol=1e-4, atol=1e-5)]
    failures = [None] * world
    dist.all_gather_object(failures, bad)

    synth_s = _timed(execute, iters, dist)
    torch_s = _timed(reference, iters, dist)
    message = per_buffer * elems * ELEMENT_BYTES
    report = {
        "collective": name, "ranks": coll.ranks, "chunks": coll.chunks,
        "steps": schedule.num_steps,
        "bytes": message, "iters": iters, "backend": dist.get_backend(),
        "correct": not any(failures),
        "mismatches": {str(r): f[:5] for r, f in enumerate(failures) if f},
        "synth_us": synth_s * 1e6, "torch_us": torch_s * 1e6,
        "synth_algbw_gbps": message / synth_s / 1e9, "torch_algbw_gbps": message / torch_s / 1e9,
        "torch_reference": how,
    }
    return report


def _timed(fn, iters, dist) -> float:
    fn()  # warm-up
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    dist.barrier()
    return (time.perf_counter() - start) / iters


def _reference(name, root, rank, world, inp, out_elems, torch, dist, device):
    """(a function running torch's own collective, what it runs)."""
    gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def allgather():
        out = torch.empty(out_elems, device=device)
        gather_single(out, inp)
        return out

    def reducescatter():  # gloo has no reduce_scatter: all_reduce, keep our share
        full = inp.clone()
        dist.all_reduce(full)
        return full.view(world, -1)[rank].clone()

    def allreduce():
        out = inp.clone()
        dist.all_reduce(out)
        return out

    def broadcast():
        out = inp.clone()
        dist.broadcast(out, src=root)
        return out

    def reduce():
        out = inp.clone()
        dist.reduce(out, dst=root)
        return out if rank == root else torch.zeros(out_elems, device=device)

    def gather():
        out = torch.zeros(out_elems, device=device)
        parts = list(out.view(world, -1).unbind()) if rank == root else None
        dist.gather(inp, gather_list=parts, dst=root)
        return out

    def scatter():
        out = torch.empty(out_elems, device=device)
        parts = list(inp.view(world, -1).unbind()) if rank == root else None
        dist.scatter(out, scatter_list=parts, src=root)
        return out

    def alltoall():
        out = torch.empty(out_elems, device=device)
        dist.all_to_all_single(out, inp)
        return out

    functions = {"allgather": allgather, "reducescatter": reducescatter,
                 "allreduce": allreduce, "broadcast": broadcast, "reduce": reduce,
                 "gather": gather, "scatter": scatter, "alltoall": alltoall}
    hows = {"reducescatter": "all_reduce + slice (gloo has no reduce_scatter)",
            "allgather": gather_single.__name__, "alltoall": "all_to_all_single"}
    return functions[name], hows.get(name, name)
