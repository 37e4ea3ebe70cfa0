"""Run a schedule with torch.distributed and check it against torch's own collective.

Each process (one per rank) runs one call of exactly the size asked for, cut as a
runtime cuts it (synth.run.calls, synth.export.units): the bulk, the largest part of
every share that the schedule's chunks cut whole (in 16-byte units, as the MSCCL++
executor needs, or in whole elements, as MSCCL does), runs the schedule (synth.run.p2p:
its point-to-point sends and receives, step by step); the tail, the rest of every share,
runs torch's own collective, as a runtime gives it to NCCL's. The result is compared
with torch's collective over the whole call on the same random data, and both are
timed. Data that no sum can overflow: floats in [0, 1), integers up to the largest
value over the ranks.

Version 2 files run as they are (synth.run.rank_plan: a pipeline's batches, shifted, in
the expanded step they run in; a ranged send is one message). Version 3 switch
operations run as the sends they stand for.

Two ways to start it:
- `synth run FILE --nproc N` spawns N processes on this machine (127.0.0.1 rendezvous).
- Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; one process per
  GPU), `synth run FILE` runs as one of the workers: env:// rendezvous.

Buffers (per rank; n bytes in nccl-tests' sense) are the exporters' out-of-place
layout, synth.export.layout: the same chunk lands in the same place whether MSCCL,
MSCCL++ or this runner moves it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from synth.errors import BadInput, NoAnswer
from synth.export import MAX_UNFOLDED_SENDS
from synth.export.units import Unit, parts_of
from synth.files import SCHEDULE_LIMIT, load_json
from synth.schedule.file import read_schedule, schedule_from_dict
from synth.schedule.machine import read_verified
from synth.signals import interrupts_deferred

DTYPES = {"float32": 4, "int32": 4, "uint8": 1}  # what --dtype names: element bytes
CUTS = {"mscclpp": "16-byte units, as the MSCCL++ executor cuts",
        "msccl-xml": "whole loops of elements in every share, as MSCCL cuts"}


@dataclass(frozen=True)
class Call:
    """The call each rank makes: n bytes (nccl-tests' n) of `dtype`, cut as `runtime`
    cuts a file's calls, timed over `iters` runs (0: checked, not timed)."""

    nbytes: int
    dtype: str
    runtime: str = "mscclpp"
    iters: int = 5


def element_type(dtype: str, nbytes: int, collective: str, ranks: int) -> str:
    """--dtype resolved for a call of nbytes: "auto" is float32 where every share is
    whole float32 elements, else uint8. BadInput where the size cannot be the call."""
    parts = parts_of(collective, ranks)
    if nbytes < 1:
        raise BadInput("--size must be at least 1 byte")
    if dtype == "auto":
        dtype = "float32" if nbytes % (parts * 4) == 0 else "uint8"
    if dtype not in DTYPES:
        raise BadInput(f"unknown --dtype {dtype!r} (expected auto, {', '.join(DTYPES)})")
    if nbytes % (parts * DTYPES[dtype]):
        shares = f"{parts} equal shares of " if parts > 1 else ""
        raise BadInput(f"--size {nbytes:,} bytes: {collective} on {ranks} ranks moves "
                       f"{shares}whole {dtype} elements, so the size must be a multiple "
                       f"of {parts * DTYPES[dtype]} bytes")
    return dtype


def run(path: str | Path, nproc: int | None, nbytes: int, iters: int, backend: str,
        check_first: bool = True, dtype: str = "auto", runtime: str = "mscclpp") -> dict:
    """Spawn the workers (or be one, under torchrun) and return rank 0's report.

    The schedule is verified first (an invalid one could deadlock the workers);
    check_first=False skips that, to test the runner's own numeric check."""
    # bad files fail here, before any process starts (an invalid one: exit 1)
    schedule = read_verified(path) if check_first else read_schedule(path)
    schedule.check_unfold(MAX_UNFOLDED_SENDS, "synth run")  # every rank's sends, in each worker
    coll = schedule.collective
    if runtime not in CUTS:
        raise BadInput(f"unknown runtime {runtime!r} (expected {', '.join(CUTS)})")
    call = asdict(Call(nbytes, element_type(dtype, nbytes, coll.name, coll.ranks),
                       runtime, iters))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
        if missing:
            raise BadInput(f"RANK and WORLD_SIZE are set, but not {' and '.join(missing)}: "
                           "start the workers with torchrun, or unset RANK to run here")
        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError:
            raise BadInput("RANK and WORLD_SIZE must be whole numbers") from None
        port = os.environ["MASTER_PORT"]
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            # torch would fail deep inside its rendezvous with a traceback
            raise BadInput(f"MASTER_PORT {port!r} is not a port number (1 to 65535)")
        if not 0 <= rank < world:
            raise BadInput(f"RANK {rank} is not below WORLD_SIZE {world}")
        if world != coll.ranks:
            raise BadInput(f"the schedule has {coll.ranks} ranks, but "
                           f"WORLD_SIZE is {world}")
        _torch_multiprocessing()
        report = _worker(rank, world, str(path), call, backend, "env://", None)
        return report or {}
    ranks = coll.ranks
    if nproc is None:
        nproc = ranks
    if nproc != ranks:
        raise BadInput(f"the schedule has {ranks} ranks, but --nproc is {nproc}")
    if backend == "gloo":
        _check_memory(nproc, nbytes)
    mp = _torch_multiprocessing()  # after the checks: importing torch takes seconds
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        init = f"tcp://127.0.0.1:{_free_port()}"
        # a signal raised inside multiprocessing's start left the workers started so far
        # running, and Python's exit then waited for them
        with interrupts_deferred() as caught:  # a signal while they start would orphan some
            context = mp.start_processes(_worker, args=(nproc, str(path), call, backend,
                                                        init, str(out)),
                                         nprocs=nproc, join=False,
                                         start_method=_start_method())
        try:
            if caught:
                raise KeyboardInterrupt
            while not context.join():
                pass
        except mp.ProcessRaisedException as e:
            last = str(e).strip().splitlines()[-1]
            raise NoAnswer(f"a worker failed: {last}") from None
        except BaseException:  # Ctrl-C or SIGTERM: no worker or server may outlive us
            _stop_everything(context.processes)
            raise
        return json.loads(out.read_text())


BUFFERS_PER_RANK = 6  # what a gloo worker holds per message (at most): its input and
# output, torch's reference output, the checked copy, the schedule's work buffer, and the
# bulk's copies where the parts are cut


def _check_memory(nproc: int, nbytes: int) -> None:
    """BadInput when the workers' buffers, all in this machine's memory under gloo,
    could not fit: refused by arithmetic before any process starts (a worker that asks
    for 1 TB dies in the allocator, its siblings are killed, the output is a page)."""
    need = nproc * BUFFERS_PER_RANK * max(nbytes, 1)
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    if need > have:
        raise BadInput(f"--size {nbytes:,} bytes: {nproc} gloo processes would hold about "
                       f"{need / 2**30:,.0f} GiB, more than this machine's "
                       f"{have / 2**30:,.0f} GiB")


STOP_GRACE_S = 5.0  # a worker's time to end on SIGTERM before SIGKILL


def _stop_everything(processes) -> None:
    """End the workers (SIGTERM, then SIGKILL after STOP_GRACE_S), and the forkserver
    and resource tracker that multiprocessing started for them: left alone, a worker
    waiting in a collective for a peer that is gone spins for ever."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(STOP_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join()
    for helper in (getattr(multiprocessing.forkserver, "_forkserver", None),
                   getattr(multiprocessing.resource_tracker, "_resource_tracker", None)):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            except (OSError, ChildProcessError):
                pass


def _torch_multiprocessing():
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise BadInput("synth run needs torch: pip install torch==2.13.0 (CPU build)") from None
    # a failed worker is one line of ours; torch's own "Terminating process" warnings for
    # its siblings would add a line each
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    return mp


def _start_method() -> str:
    """forkserver where there is one: the workers fork from a server that imported torch
    and this module once, instead of each importing torch afresh (a second or more of
    CPU each: 10-20 s for eight processes on two cores). The server imports nothing of
    CUDA, so forking from it is safe with nccl too."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", __name__])
    return "forkserver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, path, call: dict, backend, init, report_path):
    import torch
    import torch.distributed as dist

    if "OMP_NUM_THREADS" not in os.environ:
        # the cores shared out among the processes on this machine, as torchrun does for
        # several workers (OMP_NUM_THREADS=1): eight processes each adding 64 MB with a
        # thread per core spend most of their time waiting for each other (a dgx1
        # allreduce ran about 4x slower so on 2 cores)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
        here = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, cores // max(1, here)))
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        # the switch emulated on the host: a switch operation runs as the sends it stands
        # for (a multicast as copies, a switch_reduce as reductions into its dst), the
        # same data flow, so the numbers are checked alike; only its timing is not a
        # switch's
        # read once (verified before the workers started); its version is the file's own
        # word (a hand-written version 2 may hold no range)
        doc = load_json(path, SCHEDULE_LIMIT, "schedule file")
        schedule = schedule_from_dict(doc)
        report = _run_and_check(schedule.unfolded().as_sends(), rank, Call(**call))
        report["version"] = doc["version"]
        if schedule.in_network:
            report.update(switch="emulated on the host: each switch operation run as the "
                                 "sends it stands for")
        if rank == 0 and report_path:
            Path(report_path).write_text(json.dumps(report))
        return report if rank == 0 else None
    finally:
        dist.destroy_process_group()


def _run_and_check(schedule, rank: int, call: Call) -> dict:
    import torch
    import torch.distributed as dist

    from synth.export.layout import Layout
    from synth.run.calls import own_collective, run_split
    from synth.run.p2p import Program
    from synth.run.rank_plan import plan_rank

    coll = schedule.collective
    name, world = coll.name, coll.ranks
    dtype, e = getattr(torch, call.dtype), DTYPES[call.dtype]
    # the cut of a file with this schedule's chunks (a pipeline's: all its batches')
    split = Unit(call.runtime, coll.buffer_chunks, parts_of(name, world)).split(call.nbytes, e)
    layout = Layout(coll, inplace=False)
    part = split.part // e  # elements of one share (or of the whole buffer)
    inp_elems = layout.input_chunks // coll.chunks * part
    out_elems = layout.output_chunks // coll.chunks * part
    # nccl needs each process's tensors on its own GPU; gloo runs on the CPU
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    inp = _random_input(inp_elems, dtype, rank, world).to(device)

    program = None
    if split.bulk:  # once, outside the timed runs
        program = Program(plan_rank(schedule, rank, layout), split.bulk_part // e // coll.chunks,
                          dtype, device)
    out = torch.empty(out_elems, dtype=dtype, device=device)

    def bulk(i, o):
        o.copy_(program.run(i))

    def tail(i, o):
        own_collective(name, o, i, root=coll.root)

    def execute():
        run_split(split, inp, out, bulk, tail, rank)
        return out

    expected = torch.zeros(out_elems, dtype=dtype, device=device)

    def reference():
        own_collective(name, expected, inp, root=coll.root)
        return expected

    # every rank calls each exactly once
    got, wanted = execute().clone(), reference().clone()
    bad = []
    if any(r == rank for r, _, _ in coll.post_ranges()):  # its whole output is results
        same = torch.isclose(got, wanted, rtol=1e-4, atol=1e-5) if dtype.is_floating_point \
            else got == wanted
        bad = [int(i) for i in torch.nonzero(~same).flatten()[:5]]
    failures = [None] * world
    dist.all_gather_object(failures, bad)

    synth_s, torch_s = (_timed(execute, call.iters, dist), _timed(reference, call.iters, dist)) \
        if call.iters else (None, None)  # 0 iterations: the check alone
    if not split.bulk:  # all of it ran through torch: no time is the schedule's
        synth_s = None
    message = call.nbytes

    def us(s):
        return None if s is None else s * 1e6

    def gbps(s):
        return None if s is None else message / s / 1e9
    return {
        "collective": name, "root": coll.root, "ranks": coll.ranks, "chunks": coll.chunks,
        "steps": schedule.num_steps, "bytes": message, "dtype": call.dtype,
        "bulk_bytes": split.bulk, "tail_bytes": split.tail, "cut": CUTS[call.runtime],
        "iters": call.iters, "backend": dist.get_backend(),
        "correct": not any(failures),
        "mismatches": {str(r): f for r, f in enumerate(failures) if f},  # element indices
        "synth_us": us(synth_s), "torch_us": us(torch_s),
        "synth_algbw_gbps": gbps(synth_s), "torch_algbw_gbps": gbps(torch_s),
        "torch_reference": TORCH_NAMES.get(name, name),
        "messages": program.plan.messages if program else 0,  # rank 0's p2p operations per run
    }


def _random_input(elems: int, dtype, rank: int, world: int):
    """The rank's data: floats in [0, 1), or integers small enough that the sum over
    the ranks fits the type."""
    import torch

    gen = torch.Generator().manual_seed(1234 + rank)
    if dtype.is_floating_point:
        return torch.rand(elems, generator=gen, dtype=dtype)
    top = min(torch.iinfo(dtype).max // world, 1000)
    return torch.randint(0, top + 1, (elems,), generator=gen, dtype=dtype)


# what own_collective calls, by collective
TORCH_NAMES = {"allgather": "all_gather_single", "reducescatter": "reduce_scatter_single",
               "allreduce": "all_reduce", "alltoall": "all_to_all_single"}


def _timed(fn, iters, dist) -> float:
    fn()  # warm-up
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    dist.barrier()
    return (time.perf_counter() - start) / iters


