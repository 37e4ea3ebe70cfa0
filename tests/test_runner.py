"""`synth run`: schedules execute on gloo processes and match torch's collectives."""

import json
import subprocess
import sys
import time

import pytest

from synth.bounds import bounds
from synth.frontier import default_limits, synthesize
from synth.schedule.collectives import ROOTED, make_collective
from synth.schedule.file import read_schedule, write_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes


def synth_cli(*args):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=300)


def frontier_files(spec, name, directory):
    topo = resolve(spec)
    root = 0 if name in ROOTED else None
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    result = synthesize(topo, name, root, default_limits(b, time_limit=60))
    return [write_schedule(p.schedule, directory / f"{name}-{i}.json")
            for i, p in enumerate(result.points)]


def _run_each(rank, world, paths, nbytes, inits, reports):
    """One worker process: every schedule in turn, each exactly as `synth run` runs it
    (synth.run.distributed._worker: its own process group, run, check, report, close)."""
    from synth.run.distributed import _worker

    for path, init, report in zip(paths, inits, reports):
        _worker(rank, world, path, nbytes, 1, "gloo", init, report)


def run_in_one_spawn(paths, directory, nbytes=64 << 10):
    """Rank 0's report for each schedule, all run by one set of worker processes: the
    runner's own worker, minus starting the processes (and importing torch) per file.

    The processes are forked from a forkserver that imports torch and the runner once
    for the whole session (importing torch costs each fresh process over a second of
    CPU: 10-20 s for eight on two cores); `synth run` itself spawns fresh processes,
    which test_synth_run_prints_a_correct_json_report runs end to end."""
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(["torch.distributed", "synth.run.distributed",
                                            __name__])
    world = read_schedule(paths[0]).collective.ranks
    assert all(read_schedule(p).collective.ranks == world for p in paths)
    # each process group meets through a file of its own: ports picked ahead for later
    # groups could be taken meanwhile (as the local end of an earlier group's connection)
    inits = [f"file://{directory / f'{p.stem}.rendezvous'}" for p in paths]
    reports = [directory / f"{p.stem}.report.json" for p in paths]
    workers = mp.start_processes(_run_each, args=(world, [str(p) for p in paths], nbytes,
                                                  inits, [str(r) for r in reports]),
                                 nprocs=world, join=False, start_method="forkserver")
    deadline = time.monotonic() + 300  # as synth_cli's timeout: a hang fails, not blocks
    while not workers.join(timeout=1):  # raises if a worker failed
        if time.monotonic() > deadline:
            for process in workers.processes:
                process.kill()
            pytest.fail("the workers did not finish within 300 s")
    return [json.loads(r.read_text()) for r in reports]


@pytest.mark.parametrize("spec, names", [
    ("ring:4", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
                "scatter", "alltoall"]),
    ("dgx1", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall"]),
])
def test_synthesized_schedules_match_torch(spec, names, tmp_path):
    # every frontier point, from the fewest steps to the most steps and chunks; starting
    # the processes costs far more than running a schedule, so all run in one set of them
    paths = [path for name in names for path in frontier_files(spec, name, tmp_path)]
    for path, report in zip(paths, run_in_one_spawn(paths, tmp_path), strict=True):
        schedule = read_schedule(path)
        assert report["correct"] and not report["mismatches"], path.name
        assert (report["collective"], report["chunks"], report["steps"]) == \
            (schedule.collective.name, schedule.collective.chunks, schedule.num_steps)
        assert report["synth_us"] > 0 and report["torch_us"] > 0
    assert {read_schedule(path).collective.name for path in paths} == set(names)


def test_synth_run_prints_a_correct_json_report(tmp_path):
    # the whole command once: verify, spawn, run, check, report
    path = frontier_files("ring:4", "allreduce", tmp_path)[-1]
    result = synth_cli("run", str(path), "--size", "64KB", "--iters", "1", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["correct"] and report["collective"] == "allreduce"
    assert (report["ranks"], report["chunks"]) == (4, read_schedule(path).collective.chunks)
    assert report["synth_us"] > 0 and report["torch_us"] > 0


def test_a_wrong_schedule_is_caught_by_the_numbers(tmp_path):
    path = frontier_files("ring:4", "allreduce", tmp_path)[0]
    doc = json.loads(path.read_text())
    # a reduction turned into a copy: the program runs, but a contribution is lost
    send = next(x for step in doc["steps"] for x in step["sends"] if x["op"] == "reduce")
    send["op"] = "copy"
    path.write_text(json.dumps(doc))
    assert synth_cli("verify", str(path)).returncode == 1  # the verifier sees it too
    result = synth_cli("run", str(path), "--size", "4KB", "--iters", "1", "--no-verify")
    assert result.returncode == 1 and "WRONG" in result.stdout, result.stderr[-2000:]
    assert "differs from torch" in result.stderr


def test_nproc_must_match_the_schedule(tmp_path):
    path = frontier_files("ring:4", "allgather", tmp_path)[0]
    result = synth_cli("run", str(path), "--nproc", "3")
    assert result.returncode == 2 and "4 ranks" in result.stderr
