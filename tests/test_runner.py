"""`synth run`: schedules execute on gloo processes and match torch's collectives."""

import json
import random
import subprocess
import sys
import time
from collections import Counter
from functools import cache

import pytest

from synth.construct.decompose import ranged
from synth.construct.moves import scaled_rounds
from synth.export.layout import Layout, Slot
from synth.run.rank_plan import plan_rank
from synth.schedule.collectives import make_collective
from synth.schedule.file import read_schedule, write_schedule
from synth.schedule.machine import read_verified
from synth.schedule.ir import Pipeline, Schedule, Step
from synth.schedule.verify import ScheduleInvalid
from tests.in_process import synth_main
from tests.shared_frontiers import synthesized
from tests.test_in_network import nvls_doc


def synth_cli(*args):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=300)


@cache  # several tests run the same frontier: synthesized once
def frontier(spec, name):
    return tuple(p.schedule for p in synthesized(spec, name).points)


def frontier_files(spec, name, directory):
    return [write_schedule(schedule, directory / f"{name}-{i}.json")
            for i, schedule in enumerate(frontier(spec, name))]


def pipelined(schedule, batches):
    """A version 2 schedule of the same collective with batches x C chunks: `schedule`'s
    steps are the program of batch 0, on pieces 0..C-1 of every share, consecutive
    chunks of one (src, dst, op) joined into ranged sends; batch b moves pieces
    b C .. b C + C - 1 (stride C); each expanded step gets the rounds that the loads of
    its active batches need."""
    coll, model = schedule.collective, schedule.model
    share = coll.share_chunks  # C, or G = C for allreduce, broadcast and reduce

    def piece(k):  # chunk k of the schedule: the same piece of its share, batch 0
        return k // share * share * batches + k % share

    steps = tuple(Step(step.rounds, ranged([(piece(x.chunk), x.src, x.dst, x.op)
                                            for x in step.sends], share * batches))
                  for step in schedule.steps)
    loads = [Counter() for _ in steps]
    for load, step in zip(loads, steps):
        for x in step.sends:
            load[(x.src, x.dst)] += x.count
    rounds = tuple(scaled_rounds(model, sum((loads[i] for i in range(len(steps))
                                             if 0 <= t - i < batches), Counter()))
                   for t in range(len(steps) + batches - 1))
    bigger = make_collective(coll.name, coll.ranks, coll.chunks * batches, coll.root)
    return Schedule(bigger, model, steps, {"method": "pipelined by tests/test_runner.py"},
                    Pipeline(batches, share, rounds))


def broken(path, out):
    """The file at `path` with its first reduce turned into a copy: it runs, but one
    contribution is lost."""
    doc = json.loads(path.read_text())
    send = next(x for step in doc["steps"] for x in step["sends"] if x["op"] == "reduce")
    send["op"] = "copy"
    out.write_text(json.dumps(doc))
    return out


def _run_each(rank, world, paths, calls, inits, reports):
    """One worker process: every schedule in turn, each exactly as `synth run` runs it
    (synth.run.distributed._worker: its own process group, run, check, report, close)."""
    from synth.run.distributed import _worker

    for path, call, init, report in zip(paths, calls, inits, reports):
        _worker(rank, world, path, call, "gloo", init, report)


def run_in_one_spawn(paths, directory, nbytes=64 << 10, calls=None):
    """Rank 0's report for each schedule, all run by one set of worker processes: the
    runner's own worker, minus starting the processes (and importing torch) per file.

    The processes are forked from a forkserver that imports torch and the runner once
    for the whole session (importing torch costs each fresh process over a second of
    CPU: 10-20 s for eight on two cores); `synth run` itself spawns fresh processes,
    which test_synth_run_prints_a_correct_json_report runs end to end. `calls`: a
    synth.run.distributed.Call per path (default: nbytes of float32, MSCCL++'s cut)."""
    import multiprocessing
    from dataclasses import asdict

    from synth.run.distributed import Call

    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(["torch.distributed", "synth.run.distributed",
                                            __name__])
    world = read_schedule(paths[0]).collective.ranks
    assert all(read_schedule(p).collective.ranks == world for p in paths)
    # each process group meets through a file of its own: ports picked ahead for later
    # groups could be taken meanwhile (as the local end of an earlier group's connection)
    inits = [f"file://{directory / f'{i}-{p.stem}.rendezvous'}" for i, p in enumerate(paths)]
    reports = [directory / f"{i}-{p.stem}.report.json" for i, p in enumerate(paths)]
    calls = [asdict(c) for c in calls or [Call(nbytes, "float32", iters=1) for _ in paths]]
    workers = mp.start_processes(_run_each, args=(world, [str(p) for p in paths], calls,
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
    # exactly 64 KiB of float32, whole 16-byte units of the chunks: no tail
    assert (report["bytes"], report["dtype"], report["tail_bytes"]) == (65536, "float32", 0)
    assert (report["ranks"], report["chunks"]) == (4, read_schedule(path).collective.chunks)
    assert report["synth_us"] > 0 and report["torch_us"] > 0
    assert report["root"] is None


def test_synth_run_names_a_rooted_collectives_root(tmp_path):
    run = synth_main("broadcast", "--topo", "ring:4", "--root", "3", "--out", str(tmp_path),
                     "--json", "--time-limit", "20")
    assert run.returncode == 0, run.stderr
    path = json.loads(run.stdout)["frontier"][0]["file"]
    text = synth_main("run", path, "--size", "4KB", "--iters", "1")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("broadcast (root 3) on 4 ranks (gloo)")
    report = json.loads(synth_main("run", path, "--size", "4KB", "--iters", "0",
                                   "--json").stdout)
    assert report["root"] == 3 and report["correct"]


def test_a_wrong_schedule_is_caught_by_the_numbers(tmp_path):
    # a version 2 file (ranged sends and a pipeline) with a reduction turned into a copy:
    # the program runs, but a contribution is lost (a version 1 one: the compact test)
    best = read_schedule(frontier_files("ring:4", "allreduce", tmp_path)[-1])
    path = broken(write_schedule(pipelined(best, 2), tmp_path / "compact.json"),
                  tmp_path / "broken.json")
    assert json.loads(path.read_text())["version"] == 2
    assert synth_cli("verify", str(path)).returncode == 1  # the verifier sees it too
    result = synth_cli("run", str(path), "--size", "4KB", "--iters", "1", "--no-verify")
    assert result.returncode == 1 and "WRONG" in result.stdout, result.stderr[-2000:]
    assert "differs from torch" in result.stderr


def test_nproc_must_match_the_schedule(tmp_path):
    path = frontier_files("ring:4", "allgather", tmp_path)[0]
    result = synth_cli("run", str(path), "--nproc", "3")
    assert result.returncode == 2 and "4 ranks" in result.stderr


def test_compact_schedules_match_torch(tmp_path):
    # version 2 files run as they are: the best points of four ring:4 frontiers as the
    # program of a pipeline of 2 batches, with ranged sends
    paths = []
    for name in ("allgather", "reducescatter", "allreduce", "alltoall"):
        best = read_schedule(frontier_files("ring:4", name, tmp_path)[-1])
        paths.append(write_schedule(pipelined(best, 2), tmp_path / f"{name}-compact.json"))
        read_verified(paths[-1])  # synth verify accepts it
    # and two wrong ones, a reduction turned into a copy, version 1 and 2: the numbers
    # differ (the runner's own check; nothing verifies them here)
    wrong = [broken(frontier_files("ring:4", "allreduce", tmp_path)[0], tmp_path / "v1.json"),
             broken(paths[2], tmp_path / "v2.json")]
    # and the switch emulated on the host: the hand-built NVLS allreduce (switch reduce,
    # then multicast, version 3) runs as the sends its operations stand for, and gives
    # torch's numbers; with a reduction's operand dropped it does not
    switched = [tmp_path / "nvls.json", tmp_path / "nvls-wrong.json"]
    switched[0].write_text(json.dumps(nvls_doc()))
    doc = nvls_doc()
    doc["steps"][0]["sends"][0]["srcs"] = [0, 1, 2]  # rank 3's part of chunk 0 is lost
    switched[1].write_text(json.dumps(doc))
    reports = run_in_one_spawn(paths + wrong + switched, tmp_path)
    nvls, nvls_wrong = reports[-2:]
    assert nvls["correct"] and nvls["version"] == 3 and "emulated" in nvls["switch"]
    assert not nvls_wrong["correct"] and nvls_wrong["mismatches"]
    reports = reports[:-2]
    for path, report in zip(wrong, reports[len(paths):]):
        with pytest.raises(ScheduleInvalid):
            read_verified(path)
        assert not report["correct"] and report["mismatches"], path.name
    ranged_sends = chunk_sends = 0
    for path, report in zip(paths, reports[:len(paths)], strict=True):
        schedule = read_schedule(path)
        assert schedule.compact and report["version"] == 2
        assert report["correct"] and not report["mismatches"], path.name
        assert (report["collective"], report["chunks"], report["steps"]) == \
            (schedule.collective.name, schedule.collective.chunks, schedule.num_steps)
        # rank 0 moves each ranged send it takes part in as one message (or fewer: runs
        # that continue each other are joined), never one per chunk
        mine = [x for t in range(schedule.num_steps) for x in schedule.step_sends(t)
                if 0 in (x.src, x.dst)]
        assert report["messages"] <= len(mine), path.name
        ranged_sends += len(mine)
        chunk_sends += sum(x.count for x in mine)
    assert ranged_sends < chunk_sends  # some sends did carry ranges


# --- the plan alone, without torch: every rank's messages, run together in Python -------

def simulate(schedule, layout):
    """Every rank's plan (synth.run.distributed.plan_rank) run together with one number
    per chunk: the messages of each expanded step matched by (src, dst, tag) and their
    sizes checked, sends reading the values of the start of the step. Returns the
    (rank, chunk) pairs of the postcondition whose value is wrong, and the plans."""
    coll = schedule.collective
    rng = random.Random(7)
    inputs = [[rng.random() for _ in range(layout.input_chunks)] for _ in range(coll.ranks)]
    plans = [plan_rank(schedule, r, layout) for r in range(coll.ranks)]
    work = [[float("nan")] * p.work_chunks for p in plans]
    for p in plans:
        for w, i, n in p.load:
            work[p.rank][w:w + n] = inputs[p.rank][i:i + n]
    by_step = {}
    for p in plans:
        for step in p.steps:
            by_step.setdefault(step.step, []).append((p.rank, step))
    for t in sorted(by_step):
        sent = {(r, peer, tag): work[r][s:s + n] for r, step in by_step[t]
                for peer, s, n, tag in step.sends}
        assert len(sent) == sum(len(step.sends) for _, step in by_step[t]), "tags reused"
        for r, step in by_step[t]:
            temp = {}
            for peer, s, n, tag, into_temp in step.recvs:
                data = sent.pop((peer, r, tag))
                assert len(data) == n, (t, peer, r, tag)
                if into_temp:
                    temp[s] = data
                else:
                    work[r][s:s + n] = data
            for op, d, n, at in step.applies:
                old = work[r][d:d + n]
                work[r][d:d + n] = [a + b for a, b in zip(old, temp[at])] \
                    if op == "reduce" else temp[at]
        assert not sent, f"step {t}: sent but never received: {sorted(sent)[:3]}"

    def value(k):
        holders = coll.holders(k)
        return sum(inputs[h][layout.init_slot(h, k).idx] for h in holders)

    wrong = [(r, k) for r, first, count in coll.post_ranges()
             for k in range(first, first + count)
             if not abs(work[r][layout.out_slot(r, k).idx] - value(k)) < 1e-9]
    return wrong, plans


class Interleaved(Layout):
    """The out-of-place layout with each share's output slots interleaved (its even
    pieces first, then its odd ones): consecutive chunks are never next to each other
    in an output buffer, so a range is contiguous only where both ends interleave alike."""

    def out_slot(self, rank, k):
        slot = super().out_slot(rank, k)
        if slot is None:
            return None
        share = min(self.coll.share_chunks, self.output_chunks)
        base, j = slot.idx // share * share, slot.idx % share
        return Slot(slot.buf, base + (j // 2 if j % 2 == 0 else (share + 1) // 2 + j // 2))


@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce", "broadcast",
                                  "alltoall"])
def test_every_ranks_plan_does_the_collective(name, tmp_path):
    # no torch: plain and compact schedules through the plans of all ranks at once, in
    # the runner's layout and in one that scatters every range
    plain = read_schedule(frontier_files("ring:4", name, tmp_path)[-1])
    for schedule in (plain, pipelined(plain, 2), pipelined(plain, 3)):
        layout = Layout(schedule.collective, inplace=False)
        wrong, plans = simulate(schedule, layout)
        assert not wrong, (schedule.compact, wrong[:5])
        mine = [x for t in range(schedule.num_steps) for x in schedule.step_sends(t)
                if 0 in (x.src, x.dst)]
        assert plans[0].messages <= len(mine)  # one message per ranged send at most
        wrong, scattered = simulate(schedule, Interleaved(schedule.collective, inplace=False))
        assert not wrong, (schedule.compact, wrong[:5])
        if schedule.compact and name in ("allgather", "reducescatter"):
            # their ranges reach output slots, where the interleaving cuts them in runs
            assert sum(p.messages for p in scattered) > sum(p.messages for p in plans)
    # and the numbers see a broken plan: a reduce turned into a copy loses a contribution
    compact = pipelined(plain, 2)
    if any(x.op == "reduce" for step in compact.steps for x in step.sends):
        path = broken(write_schedule(compact, tmp_path / "compact.json"), tmp_path / "b.json")
        with pytest.raises(ScheduleInvalid):
            read_verified(path)
        wrong, _ = simulate(read_schedule(path), Layout(compact.collective, inplace=False))
        assert wrong

