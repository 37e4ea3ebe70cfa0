"""Run a schedule with torch.distributed and check it against torch's own collective.

Each process (one per rank) cuts its buffers into chunks by the chunk numbering (docs/schedule-file.md),
then executes the schedule step by step: the step's point-to-point sends and
receives are posted together (batch_isend_irecv) and applied when all have arrived, so
every send reads the value its rank held at the start of the step, as the schedule's
semantics say. The result is compared with torch.distributed's collective on the same
random data, and both are timed.

Version 2 files run as they are: the expanded steps are taken from the compact form
(a pipeline's batches, shifted, in the expanded step they run in), and a ranged send is
one message, one slice of the buffer. What a rank does in every run is worked out once,
before the first (plan_rank): one preallocated buffer per rank, and per step its
messages (one per run of chunks contiguous at both ends, runs of one send joined) and
what to apply after them.

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
import logging
import os
import socket
import tempfile
import time
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from synth.errors import BadInput, NoAnswer
from synth.schedule.file import read_schedule
from synth.schedule.machine import read_verified
from synth.schedule.ir import Schedule

ELEMENT_BYTES = 4  # float32


def run(path: str | Path, nproc: int | None, nbytes: int, iters: int, backend: str,
        check_first: bool = True) -> dict:
    """Spawn the workers (or be one, under torchrun) and return rank 0's report.

    The schedule is verified first (an invalid one could deadlock the workers);
    check_first=False skips that, to test the runner's own numeric check."""
    # bad files fail here, before any process starts (an invalid one: exit 1)
    schedule = read_verified(path) if check_first else read_schedule(path)
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
        if world != schedule.collective.ranks:
            raise BadInput(f"the schedule has {schedule.collective.ranks} ranks, but "
                           f"WORLD_SIZE is {world}")
        _torch_multiprocessing()
        report = _worker(rank, world, str(path), nbytes, iters, backend, "env://", None)
        return report or {}
    ranks = schedule.collective.ranks
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
        context = mp.start_processes(_worker, args=(nproc, str(path), nbytes, iters,
                                                    backend, init, str(out)),
                                     nprocs=nproc, join=False, start_method=_start_method())
        try:
            while not context.join():
                pass
        except mp.ProcessRaisedException as e:
            last = str(e).strip().splitlines()[-1]
            raise NoAnswer(f"a worker failed: {last}") from None
        except BaseException:  # Ctrl-C or SIGTERM: no worker or server may outlive us
            _stop_everything(context.processes)
            raise
        return json.loads(out.read_text())


BUFFERS_PER_RANK = 4  # what a gloo worker holds per message: its input and output,
                     # torch's reference output and the checked copy (at most)


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


def _worker(rank, world, path, nbytes, iters, backend, init, report_path):
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
        schedule = read_schedule(path)
        report = _run_and_check(schedule.as_sends(), rank, world, nbytes, iters, torch, dist)
        if schedule.in_network:
            report.update(version=3, switch="emulated on the host: each switch operation "
                                            "run as the sends it stands for")
        if rank == 0 and report_path:
            Path(report_path).write_text(json.dumps(report))
        return report if rank == 0 else None
    finally:
        dist.destroy_process_group()


def _run_and_check(schedule: Schedule, rank, world, nbytes, iters, torch, dist) -> dict:
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

    plan = plan_rank(schedule, rank, layout)  # once, outside the timed runs
    execute = _executor(plan, inp, elems, torch, dist, device)
    wanted = [k for r, first, count in coll.post_ranges() if r == rank
              for k in range(first, first + count)]

    def chunk_of(buf, index):
        return buf[index * elems:(index + 1) * elems]

    reference, how = _reference(name, coll.root, rank, world, inp, n_out * elems, torch, dist,
                                device)
    # every rank calls each exactly once; execute() returns a view of its own buffer,
    # which the next run overwrites
    got, expected = execute().clone(), reference()
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
        "version": 2 if schedule.compact else 1,
        "messages": plan.messages,  # rank 0's point-to-point operations per run
    }
    return report


# --- the plan: what one rank does, in chunks, worked out once before any run ----------
#
# A rank keeps every chunk it touches in one work buffer: first the output buffer of the
# layout (the chunks it must end with, in their output slots), then scratch for the
# chunks it only relays or accumulates, numbered in chunk order. Every send of a step
# becomes one message per run of chunks that is contiguous in both the sender's and the
# receiver's work buffer (a ranged send is one message: synth's layout keeps a share in
# consecutive output slots, and scratch is contiguous over every range a rank touches;
# a layout that does not is cut into runs), and runs of one (src, dst, op) that
# continue each other at both ends are joined into one message. Both ends compute
# the same messages in the same order, so tags match. A received copy lands in place
# unless the rank reads or writes that part of its buffer elsewhere in the step; other
# receives go to a temporary buffer and are applied (added, or copied) after every
# message of the step has arrived, so every send reads its rank's start-of-step value.


@dataclass
class StepPlan:
    step: int  # of the expanded schedule
    sends: list  # (peer, work slot, chunks, tag)
    recvs: list  # (peer, work slot or temp slot, chunks, tag, into temp)
    applies: list  # (op, work slot, chunks, temp slot): after the step's messages


@dataclass
class RankPlan:
    rank: int
    work_chunks: int  # output region (the layout's output buffer), then scratch
    out_chunks: int
    out_segments: list  # (first chunk, end chunk, first work slot): the rank's results
    load: list  # (work slot, input slot, chunks): the rank's starting values
    steps: list  # StepPlan per expanded step where the rank sends or receives
    temp_chunks: int

    @property
    def messages(self) -> int:
        return sum(len(s.sends) + len(s.recvs) for s in self.steps)


class _Slots:
    """Where one rank keeps chunks: sorted, disjoint segments (first chunk, end chunk,
    first slot), the slot affine in the chunk inside each."""

    def __init__(self, segments, size: int = 0):
        self.size = size  # slots in all
        merged = []
        for a, b, s in sorted(segments):
            if merged and merged[-1][1] == a and merged[-1][2] + a - merged[-1][0] == s:
                merged[-1][1] = b
            else:
                merged.append([a, b, s])
        self.segments = merged
        self._starts = [m[0] for m in merged]

    def pieces(self, lo: int, hi: int, strict: bool = True) -> list[tuple[int, int, int]]:
        """Chunks lo..hi-1 as (first, end, slot) pieces, each contiguous in slots.
        strict: every chunk must have a place; otherwise those without are left out."""
        out = []
        i = max(0, bisect_right(self._starts, lo) - 1)
        while lo < hi:
            if i < len(self.segments) and self.segments[i][1] <= lo:
                i += 1
                continue
            if i >= len(self.segments) or self.segments[i][0] > lo:
                if strict:
                    raise ValueError(f"chunk {lo} has no place")
                if i >= len(self.segments):
                    break
                lo = min(hi, self.segments[i][0])
                continue
            a, b, s = self.segments[i]
            end = min(hi, b)
            out.append((lo, end, s + lo - a))
            lo = end
        return out


def _merged(intervals) -> list[list[int]]:
    """Sorted, disjoint [lo, hi) intervals covering the given ones."""
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _minus(intervals, holes) -> list[tuple[int, int]]:
    """intervals minus holes, both sorted and disjoint."""
    out, j = [], 0
    for lo, hi in intervals:
        while j < len(holes) and holes[j][1] <= lo:
            j += 1
        k = j
        while lo < hi:
            if k < len(holes) and holes[k][0] < hi:
                if holes[k][0] > lo:
                    out.append((lo, holes[k][0]))
                lo = max(lo, holes[k][1])
                k += 1
            else:
                out.append((lo, hi))
                break
    return out


def _runs(slot_of, first: int, count: int) -> list[list[int]]:
    """Chunks first .. first+count-1 as [first, end, slot] runs of consecutive slots.
    synth's layout keeps a share in consecutive slots, so this is one run per share; a
    layout that does not is followed chunk by chunk (and each run is then one message)."""
    out = []
    for k in range(first, first + count):
        slot = slot_of(k)
        if out and out[-1][2] + k - out[-1][0] == slot:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1, slot])
    return out


def _out_segments(layout, rank: int) -> list[tuple[int, int, int]]:
    """(first chunk, end chunk, output slot) of the chunks rank must end with."""
    coll, out = layout.coll, []
    for r, first, count in coll.post_ranges():
        if r == rank:
            out += [tuple(run) for run in _runs(lambda k: layout.out_slot(rank, k).idx,
                                                first, count)]
    return out


def _rank_slots(layout, rank: int, touched) -> _Slots:
    """rank's work buffer: its results in their output slots, every other chunk it sends
    or receives in scratch after them, in chunk order."""
    out = _out_segments(layout, rank)
    scratch = _minus(_merged(touched), _merged((a, b) for a, b, _ in out))
    segments, cursor = list(out), layout.output_chunks
    for lo, hi in scratch:
        segments.append((lo, hi, cursor))
        cursor += hi - lo
    return _Slots(segments, cursor)


def _both(src_pieces, dst_pieces):
    """Two piece lists of the same chunks cut where either is: (first, end, src slot,
    dst slot)."""
    i = j = 0
    lo = src_pieces[0][0]
    while i < len(src_pieces) and j < len(dst_pieces):
        (a, b, s), (c, d, t) = src_pieces[i], dst_pieces[j]
        hi = min(b, d)
        yield lo, hi, s + lo - a, t + lo - c
        lo = hi
        i += b == hi
        j += d == hi


def _exclusive(intervals) -> list[bool]:
    """For each [lo, hi) interval: whether it overlaps none of the others."""
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    alone = [True] * len(intervals)
    reach = None  # the largest end before the current interval
    for pos, i in enumerate(order):
        lo, hi = intervals[i]
        if reach is not None and reach > lo:
            alone[i] = False
        if pos + 1 < len(order) and intervals[order[pos + 1]][0] < hi:
            alone[i] = False
        reach = hi if reach is None else max(reach, hi)
    return alone


def plan_rank(schedule: Schedule, rank: int, layout) -> RankPlan:
    """What `rank` does in every run of `schedule`, in chunk units (synth.export.layout's
    out-of-place layout). The expanded steps are read from the compact form, one at a
    time: the sends of Schedule.step_sends(t), taken from the program steps active in t
    (Schedule.active) with their batch's shift, ranges kept; never unrolled chunk by
    chunk, nor into Send objects per batch."""
    coll = schedule.collective
    stride = schedule.pipeline.stride if schedule.pipeline else 0
    # the chunk intervals each rank sends or receives: batch 0's, then every batch's
    program = [[] for _ in range(coll.ranks)]
    for step in schedule.steps:
        for x in step.sends:
            program[x.src].append((x.chunk, x.chunk + x.count))
            program[x.dst].append((x.chunk, x.chunk + x.count))

    def touched(r: int) -> list:
        batch0 = _merged(program[r])
        if schedule.batches == 1 or not stride:
            return batch0
        return _merged((lo + b * stride, hi + b * stride) for b in range(schedule.batches)
                       for lo, hi in batch0)

    # per program step, the sends rank takes part in
    involved = [[x for x in step.sends if rank in (x.src, x.dst)] for step in schedule.steps]
    mine = [[(x.src, x.dst, x.op, x.chunk + b * stride, x.count)
             for b, i in schedule.active(t) for x in involved[i]]
            for t in range(schedule.num_steps)]

    slots: dict[int, _Slots] = {}

    def slots_of(r: int) -> _Slots:
        if r not in slots:
            slots[r] = _rank_slots(layout, r, touched(r))
        return slots[r]

    me = slots_of(rank)
    load = []
    for r, first, count in coll.pre_ranges():
        if r != rank:
            continue
        for c, d, i in _runs(lambda k: layout.init_slot(rank, k).idx, first, count):
            for lo, hi, w in me.pieces(c, d, strict=False):  # chunks it never uses: left
                if load and load[-1][0] + load[-1][2] == w \
                        and load[-1][1] + load[-1][2] == i + lo - c:
                    load[-1][2] += hi - lo
                else:
                    load.append([w, i + lo - c, hi - lo])

    steps, temp_chunks = [], 0
    for t, here in enumerate(mine):
        if not here:
            continue
        runs = defaultdict(list)  # (src, dst, op) -> [src slot, dst slot, chunks]
        for src, dst, op, chunk, count in here:
            for lo, hi, s, d in _both(slots_of(src).pieces(chunk, chunk + count),
                                      slots_of(dst).pieces(chunk, chunk + count)):
                runs[(src, dst, op)].append((s, d, hi - lo))
        sends, recvs = [], []  # (peer, slot, chunks, tag, op)
        tags = defaultdict(int)
        for (src, dst, op), pieces in sorted(runs.items()):
            joined = []
            for s, d, n in sorted(pieces):
                if joined and joined[-1][0] + joined[-1][2] == s \
                        and joined[-1][1] + joined[-1][2] == d:
                    joined[-1][2] += n
                else:
                    joined.append([s, d, n])
            for s, d, n in joined:
                tag = tags[(src, dst)]
                tags[(src, dst)] += 1
                if src == rank:
                    sends.append((dst, s, n, tag))
                if dst == rank:
                    recvs.append((src, d, n, tag, op))
        # a received copy may land in place when nothing else of the step reads or
        # writes that part of the buffer
        intervals = [(s, s + n) for _, s, n, _ in sends] + [(d, d + n) for _, d, n, _, _
                                                             in recvs]
        alone = _exclusive(intervals)[len(sends):]
        step = StepPlan(t, sends, [], [])
        cursor = 0
        for (src, d, n, tag, op), free in zip(recvs, alone):
            if op == "copy" and free:
                step.recvs.append((src, d, n, tag, False))
            else:
                step.recvs.append((src, cursor, n, tag, True))
                step.applies.append((op, d, n, cursor))
                cursor += n
        temp_chunks = max(temp_chunks, cursor)
        steps.append(step)
    return RankPlan(rank, me.size, layout.output_chunks, _out_segments(layout, rank),
                    [tuple(x) for x in load], steps, temp_chunks)


def _executor(plan: RankPlan, inp, elems: int, torch, dist, device):
    """execute(): one run of the plan on tensors allocated here, once; it returns the
    output buffer (a view of the work buffer: the next run overwrites it)."""
    # NaN where a value is yet to arrive: a wrong schedule that reads a chunk its rank
    # never received shows in the numbers; output slots the rank has no result in: 0
    work = torch.full((plan.work_chunks * elems,), float("nan"), device=device)
    temp = torch.empty(plan.temp_chunks * elems, device=device)
    results = _merged((s, s + b - a) for a, b, s in plan.out_segments)
    for lo, hi in _minus([(0, plan.out_chunks)], results):
        work[lo * elems:hi * elems].zero_()

    def view(buf, slot, n):
        return buf[slot * elems:(slot + n) * elems]

    loads = [(view(work, w, n), view(inp, i, n)) for w, i, n in plan.load]
    program = []
    for step in plan.steps:
        # receives first: a message whose receive is posted lands in place, one that
        # arrives before it is buffered by gloo and copied again
        ops = [dist.P2POp(dist.irecv, view(temp if into_temp else work, s, n), peer, tag=tag)
               for peer, s, n, tag, into_temp in step.recvs]
        ops += [dist.P2POp(dist.isend, view(work, s, n), peer, tag=tag)
                for peer, s, n, tag in step.sends]
        applies = [(op == "reduce", view(work, d, n), view(temp, t, n))
                   for op, d, n, t in step.applies]
        program.append((ops, applies))
    out = work[:plan.out_chunks * elems]

    def execute():
        for target, source in loads:
            target.copy_(source)
        for ops, applies in program:
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            for add, target, source in applies:  # after the step: sends read start values
                if add:
                    target.add_(source)
                else:
                    target.copy_(source)
        return out

    return execute


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
