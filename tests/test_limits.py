"""Limits that hold (the trust issue, item 3): a time limit stops the job, which keeps
what it found and says so; memory is bounded by arithmetic, not by the machine.

Nothing here reads a stopwatch: how long a run takes depends on how fast and how busy
the machine is. A stage is made late by a sleep (a sleep lasts at least what it was
asked for on any machine), or work is made too dear to fit by its size; what is checked
is what the run says and leaves: the exit code, the one line on stderr, the files and
that they verify. Memory is checked as a child process's peak (VmHWM), against bounds
derived from the input's size.
"""

import json
import math
import re
import threading
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth.construct.tree_schedules
import synth.cost_choice
import synth.frontier
import synth.output
from synth.construct.in_network import reducing_switch
from synth.deadline import Deadline, OutOfTime, Pace
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search import constraints
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main
from tests.test_reliability import _peak_memory_mib, _sleep_past


# --- the deadline ------------------------------------------------------------------

def test_a_deadline_shares_its_time_and_what_it_holds_ends_every_share_sooner():
    second = Pace(1.0)
    second.record(1, 1.0)  # a unit of this work takes a second, as measured
    job = Deadline.after(100).holding()
    part = job.within(50)  # a stage's share: at most 50 s of the 100
    assert 49 < part.left() <= 50 and 99 < job.left() <= 100
    job.hold(second, 70)  # a point found: 70 s of work set aside to write it
    assert 29 < job.left() <= 30 and 29 < part.left() <= 30  # the share ends sooner too
    assert part.affords(20) and not part.affords(40)
    assert Deadline.after(100).reserving(100).passed()
    # a point that another beats on both costs (latency, rounds per chunk) will not be
    # written: what it held is free again
    job = Deadline.after(100).holding()
    job.hold(second, 10, (5.0, 2))
    job.hold(second, 20, (9.0, 1))  # slower to start, faster per byte: both held
    assert 69 < job.left() <= 70
    job.hold(second, 5, (4.0, 1))  # beats both: only it is held
    assert 94 < job.left() <= 95
    job.hold(second, 30, (6.0, 3))  # beaten: nothing more is held
    assert 94 < job.left() <= 95
    second.record(1, 2.0)  # the work turns out slower: what is held follows the pace
    assert 89 < job.left() <= 90
    plain = Deadline.after(100)
    plain.hold(second, 70)  # a deadline that holds nothing (not .holding()) ignores it
    assert plain.left() > 99
    with pytest.raises(OutOfTime):
        Deadline(time.monotonic()).check("a loop")
    assert Deadline().left() == float("inf") and Deadline.of(None) == Deadline()


def test_an_unmeasured_pace_is_guessed_from_the_middle_measured_slowdown_not_the_worst():
    # on dgx2x2 the decomposition's builds ran 14 x their prior while everything else ran
    # at its prior; taking the worst made every export look 14 x dearer, and no runtime
    # was asked about any point within a 30 s limit
    guessed = Pace(2.0)
    usual, odd = Pace(1.0), Pace(1.0)
    assert guessed.seconds(10) == 10 * 2.0 * 1.5  # nothing measured: prior x UNMEASURED
    usual.record(1, 1.0)
    odd.record(1, 14.0)
    assert guessed.seconds(10) == 10 * 2.0 * 1 * 1.5  # middle (lower) of [1, 14]
    Pace(1.0).record(1, 3.0)
    assert guessed.seconds(10) == 10 * 2.0 * 3 * 1.5  # middle of [1, 3, 14]
    fast = Pace(1.0)
    fast.record(1, 0.5)  # a machine never counts as faster than its priors
    assert guessed.seconds(10) == 10 * 2.0 * 1 * 1.5  # middle (lower) of [0.5, 1, 3, 14]
    assert odd.seconds(10) == 140.0  # a measured pace is what it measured


def test_a_guess_at_writing_that_alone_blocks_a_point_is_measured_first(monkeypatch):
    # dgx2x32's alltoall: verifying its first point fitted, but the unmeasured guess at
    # writing it (8 x the real pace) did not, and every point was dropped at any limit
    import synth.deadline
    from synth.construct import paced
    from synth.construct.baselines import baselines

    monkeypatch.setattr(synth.deadline, "_PACES", [])  # no pace here outlives the test
    schedule = baselines(lower_with_routes(resolve("ring:4")).model, "allgather",
                         None)[0].schedule
    monkeypatch.setattr(paced, "VERIFY", Pace(1e-9))  # verifying: nothing to speak of
    dear = Pace(3600.0, least=1)  # writing guessed at an hour a unit, unmeasured
    monkeypatch.setattr(paced, "WRITE", {**paced.WRITE, "json": dear})
    kept = paced.verified_within(schedule, Deadline.after(600).holding())
    assert kept is schedule and dear.measured  # measured (a text made), then kept
    # where even verifying does not fit, nothing is measured: out of time at once
    monkeypatch.setattr(paced, "VERIFY", Pace(3600.0))
    other = Pace(3600.0, least=1)
    monkeypatch.setattr(paced, "WRITE", {**paced.WRITE, "json": other})
    with pytest.raises(OutOfTime):
        paced.verified_within(schedule, Deadline.after(600))
    assert not other.measured


def test_a_solver_that_ignores_its_stop_is_left_behind_with_no_answer():
    release = threading.Event()
    told = []

    def stubborn():  # what CP-SAT's presolve did: no look at its limit or its stop
        release.wait(30)
        return "late answer"

    try:
        answer = constraints._interruptible(stubborn, lambda: told.append(1), 0.05)
        assert answer is None and told == [1]  # told once, then left: "unknown"
        assert constraints.left_behind()
    finally:
        release.set()
    for thread in constraints._LEFT_BEHIND:
        thread.join(30)
    assert not constraints.left_behind()
    # one that stops when told gives its answer as usual
    assert constraints._interruptible(lambda: 42, lambda: None, 10) == 42


# --- the job stops at the limit, keeps what it found and says so ---------------------

def _trees_then_late(monkeypatch):
    """The trees get the whole time, are built, and then take it all (a sleep past their
    deadline): every stage after them finds the time gone."""
    real = synth.frontier.tree_search

    def late(*args):
        search = real(*args)
        _sleep_past(args[4])
        return search

    monkeypatch.setattr(synth.frontier, "TREES_SHARE", 1.0)
    monkeypatch.setattr(synth.frontier, "tree_search", late)


def test_the_time_limit_keeps_the_points_found_writes_them_and_says_so(tmp_path,
                                                                       monkeypatch):
    _trees_then_late(monkeypatch)
    result = synth_main("allgather", "--topo", "mesh:2x4", "--time-limit", "6", "--model",
                        "line-rate", "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["out_of_time"] and not summary["complete"]
    stopped = summary["stopped"]
    assert stopped["allgather"] == "out of time"  # the exact search found no time left
    assert stopped["baselines"].endswith(" on the frontier")  # cheap: built first
    assert stopped["trees"].startswith("2 trees per root")  # built before the sleep
    # the points are what was built before the limit (mesh:2x4: no shifts map it onto
    # itself, so its trees miss the step bound and the exact search has work left; on
    # ring:8 the trees packed under its shifts meet both bounds, and nothing is left)
    points = summary["frontier"]
    assert points and all(p["method"].startswith(("greedy", "trees", "baseline: "))
                          for p in points)
    written = [p["file"] for p in points if p["file"]]
    kept = f": {len(points)} point{'s' * (len(points) != 1)} kept"
    unwritten = len(points) - len(written)
    # the test's clock ran out at once: the line says the searches' share ended early
    said = re.fullmatch(r"synth: stopped at the time limit \(6 s\) at ([\d.]+) s, the "
                        r"searches' share of it spent(.*)\n", result.stderr)
    assert said and float(said[1]) < 6, result.stderr
    assert said[2] == kept + (f", {unwritten} of them not written" if unwritten else "")
    assert written and synth_main("verify", *written).returncode == 0


def test_a_file_the_time_left_cannot_afford_is_not_written_and_no_old_file_is_removed(
        tmp_path, monkeypatch):
    # a point's file is written only when the time left affords it at the measured pace:
    # here the points of more than 5 steps are made a trillion units large
    real = synth.output.size
    monkeypatch.setattr(synth.output, "size",
                        lambda s: real(s) if s.num_steps <= 5 else 10 ** 12)
    folder = tmp_path / "ring_4" / "broadcast"
    folder.mkdir(parents=True)
    old = folder / "broadcast-root0-s3-r9-c9.json"  # an earlier run's, in the steps searched
    old.write_text("{}")
    args = ("broadcast", "--topo", "ring:4", "--max-chunks", "2", "--model", "line-rate")
    result = synth_main(*args, "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)["frontier"]
    assert {p["steps"] <= 5 for p in points} == {True, False}  # some of each kind
    for p in points:
        assert (p["file"] is not None) == (p["steps"] <= 5)
    written = [p["file"] for p in points if p["file"]]
    # the job ends in seconds, the files set aside: the line says when, not "at the limit"
    assert re.fullmatch(rf"synth: cut short by the time limit \(300 s\) at [\d.]+ s: "
                        rf"{len(points)} points kept, {len(points) - len(written)} of "
                        r"them not written\n", result.stderr), result.stderr
    assert old.read_text() == "{}"  # a run that could not write everything removes nothing
    assert synth_main("verify", *written).returncode == 0
    # and when no file can be written at all, the answer is no (exit 1), in one line
    monkeypatch.setattr(synth.output, "size", lambda s: 10 ** 12)
    none = synth_main(*args, "--out", tmp_path / "none")
    assert none.returncode == 1 and none.stderr.count("\n") == 1
    assert "left no time to write any of the" in none.stderr
    assert not list((tmp_path / "none").rglob("*.json"))


def test_topo_show_and_bounds_stop_at_their_time_limit(monkeypatch):
    import synth.topology.linkmodel
    import synth.topology.report

    real = synth.topology.linkmodel.lower_with_routes

    def late(topo, deadline=None):  # the limit passes before routing starts
        _sleep_past(deadline)
        return real(topo, deadline)

    monkeypatch.setattr(synth.topology.report, "lower_with_routes", late)
    shown = synth_main("topo", "show", "dgx1", "--time-limit", "0.1")
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr == ("synth: error: the time limit (0.1 s) ran out while lowering "
                            "dgx1 (8 GPUs)\n")
    monkeypatch.setattr(synth.topology.linkmodel, "lower_with_routes", late)
    bound = synth_main("bounds", "allgather", "--topo", "dgx1", "--time-limit", "0.1")
    assert bound.returncode == 1 and bound.stdout == ""
    assert bound.stderr == ("synth: error: no bound: the time limit (0.1 s) ran out while "
                            "lowering dgx1 (8 GPUs)\n")


# --- memory by arithmetic ----------------------------------------------------------

def test_no_switch_means_no_list_of_every_rank_pair():
    # ring:1024 has no switch at all: finding a reducing one must not list its million
    # rank pairs (ring:4096's 16 million took 2 GB)
    model = lower_with_routes(resolve("ring:1024")).model
    tracemalloc.start()
    try:
        assert reducing_switch(model) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # a million pairs would take over 100 MB


def scattered_pipeline(batches=25_000, per_batch=500):
    """A valid version 2 file of about 97 KB: allgather on 2 ranks, each batch moving
    `per_batch` chunks of a share that lie `batches` apart, batch b the same shifted by
    b (stride 1): the batches tile every share of per_batch x batches chunks."""
    chunks = per_batch * batches
    sends = [{"chunk": r * chunks + j * batches, "src": r, "dst": 1 - r, "op": "copy"}
             for r in range(2) for j in range(per_batch)]
    return {"format": "synth.schedule", "version": 2, "collective": "allgather",
            "root": None, "ranks": 2, "chunks": chunks, "num_chunks": 2 * chunks,
            "topology": {"name": "pair", "unit_gbps": 25, "groups": [],
                         "links": [[0, 1, per_batch], [1, 0, per_batch]]},
            "pre": [[r, r * chunks, chunks] for r in range(2)],
            "post": [[r, 0, 2 * chunks] for r in range(2)],
            "steps": [{"rounds": 1, "sends": sends}],
            "pipeline": {"batches": batches, "stride": 1, "rounds": [1] * batches}}


def test_a_version_2_file_verifies_in_memory_that_grows_with_its_program(tmp_path):
    # 25,000 batches of 500 chunks a share: 25 million (rank, chunk) pairs if unrolled
    # (4.3 GB once); the file is about 97 KB
    path = tmp_path / "scattered.json"
    path.write_text(json.dumps(scattered_pipeline(), separators=(",", ":")))
    size_mib = path.stat().st_size / (1 << 20)
    result, peak = _peak_memory_mib(["verify", str(path)], tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("ok "), result.stderr
    # the start-up (the interpreter and the command line: about 40 MiB) and the file
    # read into Python objects, generously 200 times its size
    assert peak < 128 + 200 * size_mib, peak


# --- the verifier's pipeline checks against a brute force ---------------------------

def _brute_force(spans, stride, batches, per):
    """(least chunk two batches touch, the batches touching it) and the first chunk of
    the share no batch touches, by listing every batch's chunks (test-sized only)."""
    touched = {}
    for b in range(batches):
        for lo, hi in spans:
            for k in range(lo + b * stride, hi + b * stride):
                touched.setdefault(k, []).append(b)
    clashes = sorted(k for k, bs in touched.items() if len(bs) > 1)
    clash = (clashes[0], touched[clashes[0]]) if clashes else None
    gap = next((k for k in range(per) if k not in touched), None)
    return clash, gap


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 6)), min_size=1, max_size=6),
       st.integers(0, 9), st.integers(1, 6), st.data())
def test_batches_that_meet_or_leave_gaps_are_found_without_unrolling(runs, stride, batches,
                                                                    data):
    # allgather on 2 ranks: each batch sends the chunks `spans` of rank 0's share (and
    # the same of rank 1's), shifted by stride a batch; the shares are large enough that
    # no batch leaves its own
    spans = []
    for start, length in sorted(runs):
        lo = max(start, spans[-1][1] + data.draw(st.integers(0, 3))) if spans else start
        spans.append((lo, lo + length))
    per = spans[-1][1] + (batches - 1) * stride + data.draw(st.integers(0, 3))
    clash, gap = _brute_force(spans, stride, batches, per)
    sends = [{"chunk": r * per + lo, "count": hi - lo, "src": r, "dst": 1 - r, "op": "copy"}
             for r in range(2) for lo, hi in spans]
    doc = {"format": "synth.schedule", "version": 2, "collective": "allgather", "root": None,
           "ranks": 2, "chunks": per, "num_chunks": 2 * per,
           "topology": {"name": "pair", "unit_gbps": 25, "groups": [],
                        "links": [[0, 1, 10 ** 6], [1, 0, 10 ** 6]]},
           "pre": [[0, 0, per], [1, per, per]], "post": [[0, 0, 2 * per], [1, 0, 2 * per]],
           "steps": [{"rounds": 1, "sends": sends}],
           "pipeline": {"batches": batches, "stride": stride, "rounds": [1] * batches}}
    try:
        verify_schedule(doc)
        verdict = None
    except ScheduleInvalid as e:
        verdict = e.message
    if clash is not None:  # the least chunk two batches touch, and two of them
        chunk, who = clash
        words = (verdict or "").split()
        assert words[:6] == ["batches", "0", "and", words[3], "both", "touch"], verdict
        assert words[7] == str(chunk) and 0 in who and int(words[3]) in who, (verdict, who)
    elif gap is not None:  # rank 1 lacks rank 0's first chunk no batch moves
        assert verdict == f"after the last step rank 1 does not hold chunk {gap} (no " \
                          "batch moves it)", verdict
    else:
        assert verdict is None


# --- sizes counted before anything is built -----------------------------------------

def test_baselines_past_2048_ranks_are_refused_by_counting():
    from types import SimpleNamespace

    from synth.construct.baselines import baselines_within

    built, why = baselines_within(SimpleNamespace(ranks=4096), "allgather", None,
                                  Deadline.after(3600))
    assert built == [] and why == ("not built: 4096 ranks make 16,777,216 rank pairs, "
                                   "over the 4,194,304 whose schedules fit in memory")


@pytest.mark.parametrize("spec", ["dgxh100x2", "ndv2x2"])
def test_a_batch_is_counted_before_it_is_listed(spec):
    # the count must be what listing the batch gives (no fewer, where GPUs cross through
    # gateways: counted generously), for both phases of an allreduce
    from synth.construct.baselines import baselines
    from synth.construct.batches import Levels, batch_moves, batch_size, batch_steps
    from synth.topology.hierarchy import find_hierarchy
    from synth.topology.linkmodel import restrict

    lowering = lower_with_routes(resolve(spec))
    hierarchy, _ = find_hierarchy(lowering)
    model = lowering.model
    across = baselines(restrict(model, hierarchy.peers[hierarchy.gateways[0]]), "allgather")
    inside = baselines(restrict(model, hierarchy.boxes[0]), "allgather")
    levels = (Levels(across[0].schedule, inside[0].schedule),) * 2
    base = math.lcm(across[0].schedule.collective.chunks, inside[0].schedule.collective.chunks)
    for pieces in (base, 2 * base):  # as the decomposition lists them: whole level chunks
        moves = batch_moves("allreduce", hierarchy, levels, pieces, 0, pieces)
        listed = sum(len(step) for step in moves)
        counted = batch_size(hierarchy, levels, pieces)
        assert counted == listed if not hierarchy.proxy else counted >= listed
        # and its steps, where no gateway adds any (else: not counted)
        steps = batch_steps(hierarchy, levels)
        assert steps == len(moves) if not hierarchy.proxy else steps is None


def test_a_decomposition_too_large_to_list_says_so(monkeypatch, tmp_path):
    import synth.construct.decompose

    monkeypatch.setattr(synth.construct.decompose, "MAX_BATCH_MOVES", 1)
    result = synth_main("allgather", "--topo", "dgx2x2", "--method", "decomposed",
                        "--out", tmp_path, "--json")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    stopped = json.loads(result.stdout)["stopped"]["decomposed"]
    assert stopped.startswith("not built: a batch of about ")
    assert stopped.endswith(" moves, over the 1 a build can hold in memory")


def test_points_whose_timing_would_not_fit_are_kept_untimed_and_counted(tmp_path,
                                                                      monkeypatch):
    # timing the points of more than 2 steps in cost model 2 is made a trillion units
    # of work: the job ends long before its limit, with those points kept but untimed,
    # and its last line says how many (not only that the limit was reached)
    real = synth.cost_choice.timing_size
    monkeypatch.setattr(synth.cost_choice, "timing_size",
                        lambda s: real(s) if s.num_steps <= 2 else 10 ** 12)
    result = synth_main("allgather", "--topo", "ring:8", "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)["frontier"]
    untimed = [p for p in points if p["steps"] > 2]
    assert untimed and all(p["file"] for p in points)
    assert all(not p.get("predicted_us") for p in untimed), untimed[0]
    assert all(p.get("predicted_us") for p in points if p["steps"] <= 2)
    kept = f"{len(points)} point{'s' * (len(points) != 1)} kept"
    assert re.fullmatch(rf"synth: cut short by the time limit \(300 s\) at [\d.]+ s: "
                        rf"{kept}, {len(untimed)} not timed in cost "
                        r"model 2 \(it would not fit\)\n", result.stderr), result.stderr


@pytest.mark.parametrize("command, searches_end, choosing_end", [
    (["compare", "allreduce", "--topo", "ring:4"], 0.7, 0.9),
    (["report", "allreduce", "--topo", "ring:4", "-o", "{out}"], 0.5, 0.65)])
def test_compare_and_report_hand_their_stages_shares_of_the_limit(
        command, searches_end, choosing_end, tmp_path, monkeypatch):
    # compare and report ran 2-4 x their --time-limit (bench/results/end-to-end-
    # 2026-12-02.md): the searches had the whole limit and what followed none
    import synth.deadline
    import synth.export.loads

    seen = {}
    real_synthesize, real_chosen = synth.frontier.synthesize, synth.export.loads.chosen

    def synthesize(*args, **kwargs):
        seen["searches"] = args[7] if len(args) > 7 else kwargs["deadline"]
        return real_synthesize(*args, **kwargs)

    def chosen(result, topo, cost_model, deadline=None):
        seen["choosing"] = deadline
        return real_chosen(result, topo, cost_model, deadline)

    monkeypatch.setattr(synth.frontier, "synthesize", synthesize)
    monkeypatch.setattr(synth.export.loads, "chosen", chosen)
    args = [a.format(out=tmp_path / "page") for a in command]
    done = synth_main(*args, "--time-limit", "40")
    assert done.returncode == 0, done.stderr
    start = synth.deadline._job_start
    assert seen["searches"].end - start == pytest.approx(40 * searches_end, abs=1e-6)
    assert seen["choosing"].end - start == pytest.approx(40 * choosing_end, abs=1e-6)


def test_asking_about_a_pipeline_costs_its_batch_program_not_every_batch():
    # the exporters build a pipeline's batch program once (the runtime repeats it over
    # slices of the buffer): 3 chunks a share cross each way in one step, 4 batches
    from synth.construct.paced import export_size
    from synth.schedule.file import schedule_from_dict

    pipeline = schedule_from_dict(scattered_pipeline(batches=4, per_batch=3))
    assert pipeline.batches == 4
    assert export_size(pipeline) == 2 * 3 + 1  # six sends of one chunk, one step
