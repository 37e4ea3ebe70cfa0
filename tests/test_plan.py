"""synth plan: workloads from YAML, NCCL logs and profiler traces; the fastest candidate
per size (spans that tile every size); runtime files that load; collectives planned to
run together on the residual capacity; bad input with one line."""

import json
import py_compile
import re
from dataclasses import replace
from pathlib import Path

import pytest

from synth.errors import BadInput, NoAnswer
from synth.frontier import synthesize
from synth.export.msccl_sim import check_msccl_xml
from synth.export.mscclpp_sim import check_mscclpp_plan
from synth.plan.nccl_log import parse_log
from synth.plan.make import make_plan
from synth.plan.planner import envelope, runtime_variants
from synth.topology.lanes import power_of_two_lanes
from synth.plan.torch_trace import parse_trace
from synth.plan.traffic import bandwidth, physical_use
from synth.plan.reading import load_workload
from synth.plan.workload import parse_workload
from synth.predict.timing import prices, schedule_lines
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.communicator import groups, view
from synth.topology.linkmodel import lower
from tests.in_process import synth_main
from tests.test_reliability import one_line, synth_cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
TOPO = resolve("dgxh100x2")

TOGETHER = {  # tp allreduce and ep alltoall share the NVSwitch ports of every GPU
    "name": "two per box, at once",
    "communicators": {"tp": {"per": "box"}, "ep": {"per": "box"}, "dp": {"across": "boxes"}},
    "collectives": [
        {"communicator": "tp", "collective": "allreduce", "size": "32MB", "count": 4,
         "overlap": "fwd"},
        {"communicator": "ep", "collective": "alltoall", "size": "32MB", "count": 2,
         "overlap": "fwd"},
        {"communicator": "dp", "collective": "reducescatter", "range": ["1MB", "64MB"]}]}


@pytest.fixture(scope="module")
def together():
    # in the line-rate model, where synth's schedules take both calls (in cost model 2
    # NCCL's own NVLS takes the tp allreduce, and its stand-in's traffic hides the
    # alltoall inside the allreduce's time: nothing for the residual to show)
    work = parse_workload(TOGETHER, TOPO, "together")
    return make_plan(work, TOPO, Limits(time_limit=60), cost_model="line-rate")


# the sizes of the tp allreduce tests below in the default cost model (64MB is the
# range's end): planned once, each test reads what it needs of it
TP_ALLREDUCE = {"communicators": {"tp": {"per": "box"}}, "collectives": [
    {"communicator": "tp", "collective": "allreduce", "size": 1},
    {"communicator": "tp", "collective": "allreduce", "size": 4},
    {"communicator": "tp", "collective": "allreduce", "size": 4500000000},
    {"communicator": "tp", "collective": "allreduce", "range": ["1MB", "64MB"]}]}


@pytest.fixture(scope="module")
def tp_allreduce():
    """The plan of TP_ALLREDUCE: one entry, the tp allreduce with all its calls."""
    plan = make_plan(parse_workload(TP_ALLREDUCE, TOPO, "tp"), TOPO, Limits(time_limit=20))
    (entry,) = plan.entries
    assert {(c.low, c.high) for c in entry.calls} == {
        (1, 1), (4, 4), (4500000000, 4500000000), (1 << 20, 1 << 26)}
    return plan


def only_calls(plan, *sizes):
    """A copy of the one-entry `plan` whose entry has calls of these sizes only (each
    size a workload call adds is a range of the runtime files, its file exported)."""
    from dataclasses import replace

    (entry,) = plan.entries
    calls = [replace(entry.calls[0], low=n, high=n, count=1) for n in sizes]
    return replace(plan, entries=[replace(entry, calls=calls)])


def test_communicator_shapes_make_the_groups_a_framework_builds():
    assert groups(TOPO, {"per": "box"}) == [list(range(8)), list(range(8, 16))]
    assert groups(TOPO, {"across": "boxes"})[3] == [3, 11]
    assert groups(TOPO, {"per": "box", "size": 4})[1] == [4, 5, 6, 7]
    assert groups(TOPO, "all") == [list(range(16))]
    sub = view(TOPO, [3, 11])  # one GPU of each box: the network between them stays
    assert sub.ranks == 2 and sub.gpus == ["n0.gpu3", "n1.gpu3"]
    assert not any("gpu4" in v.name for v in sub.vertices)


def test_a_yaml_workload_reads_sizes_ranges_counts_and_tags():
    work = parse_workload(TOGETHER, TOPO, "together")
    tp, ep, dp = work.calls
    assert (tp.low, tp.high, tp.count, tp.overlap) == (32 << 20, 32 << 20, 4, "fwd")
    assert (dp.low, dp.high) == (1 << 20, 64 << 20)
    assert work.communicators["dp"] == [[r, r + 8] for r in range(8)]


def test_the_nccl_log_and_the_trace_give_the_calls_they_record():
    log = load_workload(str(EXAMPLES / "nccl-debug-dgxh100x2.log"), TOPO)
    calls = {(c.communicator, c.collective, c.low): c.count for c in log.calls}
    # 64 MiB bf16 allreduces inside a box: 3 by rank 0, 2 by rank 1 (the most is kept);
    # AllGather and ReduceScatter counts are per rank: n is count x 2 bytes x 2 ranks
    assert calls == {("box_8", "allreduce", 64 << 20): 3, ("box_8", "allreduce", 16384): 1,
                     ("across_2", "reducescatter", 384 << 20): 1,
                     ("across_2", "allgather", 384 << 20): 1}
    assert log.communicators["across_2"][0] == [0, 8]
    assert any("Send/Recv" in n for n in log.notes)
    trace = load_workload(str(EXAMPLES / "profiler-trace-dgxh100x2.json"), TOPO, steps=1)
    calls = {(c.communicator, c.collective, c.low): c.count for c in trace.calls}
    # the kernel's copy of the first allreduce is not counted again
    assert calls == {("box_8", "allreduce", 64 << 20): 2, ("box_8", "alltoall", 32 << 20): 1,
                     ("across_2", "reducescatter", 384 << 20): 1,
                     ("across_2", "allgather", 384 << 20): 1}
    assert not any("uneven" in n for n in trace.notes)
    # an all_to_allv with uneven splits is planned as an even alltoall, and said so
    events = json.loads((EXAMPLES / "profiler-trace-dgxh100x2.json").read_text())
    for e in events["traceEvents"] if isinstance(events, dict) else events:
        if e.get("args", {}).get("Collective name") == "all_to_allv":  # even there
            e["args"].update({"In split size": list(range(1, 9)),
                              "Out split size": list(range(1, 9))})
    uneven = parse_trace(json.dumps(events), TOPO, "v.json")
    assert any(n.startswith("1 alltoall calls with uneven splits (all_to_allv) are planned "
                            "as even") for n in uneven.notes)


def test_the_spans_tile_every_size_with_the_fastest_candidate(together):
    for entry in together.entries:
        spans = envelope(entry.candidates, 0)
        assert spans[0].low == 0 and spans[-1].high is None
        for a, b in zip(spans, spans[1:]):
            assert b.low == a.high + 1
        for span in spans:
            for n in (span.low, span.high or span.low * 4 + 1):
                fastest = min(c.time_us(n) for c in entry.candidates)
                assert span.candidate.time_us(n) == pytest.approx(fastest, rel=1e-12)


def test_collectives_that_run_together_share_the_links_on_the_residual(together):
    (both,) = together.overlaps
    assert [e.communicator for e, _ in both.members] == ["tp", "ep"]  # longest first
    # both use every GPU's NVSwitch port: together they take longer than either alone,
    # less than one after the other
    assert max(both.alone_us) < both.overlapped_us < both.sequential_us
    # the second was planned again on what the first leaves: slower there than alone,
    # its schedule verified on those reduced capacities ...
    second = both.choices[1].schedule
    assert both.residual_us[1] > both.alone_us[1]
    verify_schedule(schedule_to_dict(second))
    full = min(l.capacity for l in together.entries[1].candidates[0].schedule.model.links)
    assert min(l.capacity for l in second.model.links) < full
    # ... and on the full links together with the first: no link over its bandwidth
    assert 0.5 < max(both.utilisation.values()) <= 1 + 1e-9
    tp = together.entries[0]
    use = physical_use(TOPO, tp.groups, both.choices[0].schedule, 32 << 20)
    bw = bandwidth(TOPO)
    busiest = max(use, key=lambda hop: use[hop] / bw[hop])
    assert busiest[0].endswith("nvswitch") or busiest[1].endswith("nvswitch")
    # the step: the tagged pair together, the range entry at its geometric middle
    assert together.step_time("overlapped") < together.step_time("plan")
    assert together.step_time("nccl overlapped") <= together.step_time("nccl")


def test_synth_plan_writes_runtime_files_that_load(tmp_path):
    out = tmp_path / "plan"
    done = synth_main("plan", EXAMPLES / "nccl-debug-dgxh100x2.log", "--topo",
                      "dgxh100x2", "-o", out, "--time-limit", "10", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    # what the log holds that the plan leaves out is said on the terminal too
    assert "synth: note: 1 Send/Recv calls (point to point) are not planned" in done.stderr
    doc = json.loads(done.stdout)
    # (NCCL's side is derived by hand in test_nccl_as_it_runs_is_derived_by_hand_...)
    step = doc["step_us"]
    assert step["speedup"] == pytest.approx(step["nccl_overlapped"] / step["plan_overlapped"],
                                            abs=1e-4)
    assert doc["model"].startswith("cost model 2")
    assert json.loads((out / "plan.json").read_text())["step_us"] == doc["step_us"]
    report = (out / "report.md").read_text()
    assert "model predictions" in report and "all_reduce_perf -b 67108864" in report
    # a measuring line names the MSCCL XML folder only where a file there runs its size
    for line in (l for l in report.splitlines() if l.startswith("mpirun ")):
        n = int(re.search(r" -b (\d+) ", line).group(1))
        folder = re.search(r"MSCCL_ALGO_DIR=(\S+)", line)
        runs = folder is not None and any(
            int(lo) <= n < int(hi) for xml in (out / folder.group(1)).glob("*.xml")
            for lo, hi in re.findall(r'minBytes="(\d+)" maxBytes="(\d+)"', xml.read_text()))
        assert runs == (folder is not None), line
        assert (folder is None) == line.endswith("no MSCCL XML file runs it: NCCL's own does")
    for fmt in ("msccl-xml", "mscclpp"):
        for entry in doc["runtimes"][fmt]:
            ranges = entry["files"]  # files, and NCCL's own where nothing beats it
            assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] is None
            for a, b in zip(ranges, ranges[1:]):
                assert b["min_bytes"] == a["max_bytes"] + 1  # no gap, no overlap
            calls = next(e["calls"] for e in doc["entries"]
                         if (e["communicator"], e["collective"])
                         == (entry["communicator"], entry["collective"]))
            for f in ranges:
                # a workload size is never given to a file that cannot cut it whole
                for c in calls:
                    n = c["min_bytes"]
                    if f["file"] and f["min_bytes"] <= n <= (f["max_bytes"] or n):
                        unit = f["chunks"] * (4 if fmt == "msccl-xml" else 16)
                        assert n % unit == 0
                if not f["file"]:
                    assert f["algorithm"].startswith("NCCL's own")
                    continue
                text = (out / f["file"]).read_text()
                # its schedule is written and named (the folders number their files
                # apart, and a power-of-two-lanes variant's had no schedule at all): a
                # valid schedule of the file's chunks
                schedule = json.loads((out / f["schedule"]).read_text())
                verify_schedule(schedule)
                if fmt == "msccl-xml":  # the file is that schedule's: its loop's chunks
                    from synth.export import render
                    from synth.schedule.file import schedule_from_dict

                    again = render(schedule_from_dict(schedule), fmt, True)[0]
                    loop = r'nchunksperloop="(\d+)"'
                    assert re.search(loop, again).group(1) == re.search(loop, text).group(1)
                # in place where PyTorch calls it so (allreduce, allgather): SynthComm
                # and the runtimes take a file only in the call's form
                inplace = entry["collective"] in ("allreduce", "allgather")
                if fmt == "msccl-xml":
                    # the upper bound one past the range: microsoft/msccl's is exclusive
                    lo, hi = re.search(r'minBytes="(\d+)" maxBytes="(\d+)"', text).groups()
                    assert (int(lo), int(hi)) == (f["min_bytes"], f["max_bytes"] + 1)
                    assert f'inplace="{int(inplace)}"' in text
                    check_msccl_xml(text)
                else:
                    plan = json.loads(text)
                    assert plan["inplace"] is inplace
                    assert plan["min_message_size"] == f["min_bytes"]
                    # one past the range (v0.8.0's shim reads it as exclusive), or the
                    # range ends at the plan's 32-bit limit
                    assert plan["max_message_size"] - f["max_bytes"] in (0, 1)
                    check_mscclpp_plan(plan)
    # per call, what to load: each runtime's range holding the call's size names the
    # file (none where NCCL's own runs it), no slower there than NCCL as it runs
    for e in doc["entries"]:
        for c in e["calls"]:
            n = c["load"]["bytes"]
            assert c["min_bytes"] <= n <= c["max_bytes"]
            assert set(c["load"]["runtimes"]) == {"msccl-xml", "mscclpp"}
            for fmt, load in c["load"]["runtimes"].items():
                ranges = next(r["files"] for r in doc["runtimes"][fmt]
                              if (r["communicator"], r["collective"])
                              == (e["communicator"], e["collective"]))
                (f,) = [f for f in ranges
                        if f["min_bytes"] <= n <= (f["max_bytes"] or n)]
                assert (load["file"], load["algorithm"]) == (f["file"], f["algorithm"])
                assert load["us"] <= c["nccl_us"] + 1e-3
    py_compile.compile(str(out / "mscclpp" / "register.py"), doraise=True)
    schedules = sorted(str(p) for p in (out / "schedules").rglob("*.json"))
    checked = synth_cli("verify", *schedules)  # one command for all: each line its file
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert sum(line.startswith("ok ") for line in checked.stdout.splitlines()) \
        == len(schedules) > 0


def test_the_plan_ends_with_what_to_load_per_call():
    from synth.cli.plan import load_line

    entry = {"collective": "allreduce", "communicator": "dp"}
    call = {"nccl": "NCCL nvls_tree/Simple", "nccl_us": 405.51, "load": {
        "bytes": 67108864, "runtimes": {
            "msccl-xml": {"file": None, "algorithm": "NCCL's own (ring)", "us": 405.51},
            "mscclpp": {"file": "mscclpp/dp/allreduce-0.mscclpp.json", "algorithm": "x",
                        "us": 395.04}}}}
    assert load_line(entry, call, "NCCL", "plan") == (
        "load for allreduce on dp at 67,108,864 B: MSCCL XML no file (NCCL's own runs it); "
        "MSCCL++ plan/mscclpp/dp/allreduce-0.mscclpp.json (395.0 us); NCCL "
        "nvls_tree/Simple: 405.5 us")
    # with --model line-rate the reference is NCCL-style, named so
    call["nccl"] = "ring"
    assert load_line(entry, call, "NCCL-style", "plan").endswith("; NCCL-style ring: 405.5 us")


def test_a_communicator_slower_than_the_machines_unit_gets_files_for_its_sizes(tmp_path):
    # mi300xx2's data parallel pairs (GPU 0 and 8) meet over 50 GB/s NICs; the machine's
    # unit is an xGMI link's 64 GB/s, which the view leaves out. In that unit the
    # schedules came in 7 chunks, no runtime file cut 1 KiB or 1 MiB, and the call lines
    # showed speed-ups nothing ran
    work = tmp_path / "dp.yaml"
    work.write_text("name: dp\ncommunicators:\n  dp: {across: boxes}\ncollectives:\n"
                    "  - {communicator: dp, collective: allreduce, size: 1MB, count: 8}\n"
                    "  - {communicator: dp, collective: allreduce, size: 1KB, count: 8}\n")
    out = tmp_path / "p"
    done = synth_cli("plan", str(work), "--topo", "mi300xx2", "-o", str(out),
                     "--time-limit", "60")
    assert done.returncode == 0, done.stderr
    assert "model only" not in done.stdout
    for n in ("1,048,576", "1,024"):
        line = next(l for l in done.stdout.splitlines() if l.startswith(
            f"load for allreduce on dp at {n} B"))
        assert re.search(r"MSCCL XML \S+\.xml \(", line), line
    doc = json.loads((out / "plan.json").read_text())
    schedule = json.loads((out / "schedules/dp/allreduce-0.json").read_text())
    assert schedule["topology"]["unit_gbps"] == 50.0
    # the bound in GB/s terms is the NICs': 2 x 1 MB each way of a 2-rank allreduce's
    # ... at 50 GB/s, 20 us a MB, whatever the unit
    assert doc["entries"][0]["bound_us_per_mb"] == pytest.approx(20.0)
    for f in (out / "schedules/dp").glob("*.json"):
        verify_schedule(json.loads(f.read_text()))


def test_a_call_no_runtime_file_runs_says_its_time_is_the_models():
    from synth.cli.plan import _model_only

    nothing = {"file": None, "algorithm": "NCCL's own (ring)", "us": 63.0}
    call = {"algorithm": "exact [LL128]", "load": {"runtimes": {
        "msccl-xml": dict(nothing), "mscclpp": dict(nothing)}}}
    assert _model_only(call) == "  model only: no runtime's file runs this size"
    call["load"]["runtimes"]["mscclpp"]["file"] = "mscclpp/dp/allreduce-0.mscclpp.json"
    assert _model_only(call) == ""
    call = {"algorithm": "NCCL's own (ring)", "load": {"runtimes": {"msccl-xml": nothing}}}
    assert _model_only(call) == ""


# NCCL as it runs on switch:4 (4 GPUs, one 25 GB/s NVLink lane each into a switch;
# a generator: Ampere's figures), derived by hand from docs/cost-model.md and NCCL
# 2.30.7's tuning.cc, without synth.predict. Allreduce, N = 4: 2(N - 1) = 6 ring steps.
# NCCL's own view: 25 GB/s x 0.8 (topo.h's 20 of 25) = 20 GB/s a GPU; its ring search
# takes the first speed of the sm80 ladder at or below 20 GB/s, 20, and 20 / 20 = 1
# channel (not doubled: below 25 GB/s); the communicator has 2 x 1 = 2 channels.
# Ring bandwidth (bus x N / steps): LL min(87.7, 20 x 0.5) x 4/6; LL128 min(20 x 0.92,
# 20) x 4/6; Simple 20 x 4/6. Latency: base + 6 x the NVLink hop: LL 6.6 + 6 x 0.6,
# LL128 14 + 6 x 1.9, Simple 8.4 + 6 x 3.4.
RING_LL_US, RING_LL128_US, RING_SIMPLE_US = 6.6 + 6 * 0.6, 14 + 6 * 1.9, 8.4 + 6 * 3.4
TUNER_GBPS = {"LL": 10 * 4 / 6, "LL128": 18.4 * 4 / 6, "Simple": 20 * 4 / 6}
# Tree: bus min(20 x 0.92, 24) = 18.4 (LL / 3.8, LL128 x 7/9, Simple as is), x 0.5;
# latency base + 2 x (N - 1) x the hop: LL 6.8 + 6 x 0.6, LL128 14 + 6 x 1.25,
# Simple 8.4 + 6 x 4; at 1 KB (64 B x 2^4) the correction factors are .9, 1, .9, at
# 1 MB (64 B x 2^14) .5, .6, .5.
TREE = {"LL": (6.8 + 6 * 0.6, 18.4 / 3.8 * 0.5, 0.9, 0.5),
        "LL128": (14 + 6 * 1.25, 18.4 * 7 / 9 * 0.5, 1.0, 0.6),
        "Simple": (8.4 + 6 * 4.0, 18.4 * 0.5, 0.9, 0.5)}
# On the hardware the chosen algorithm's formulas take 25 x 0.77 (Ampere's NVLink
# efficiency) = 19.25 GB/s for the search's one channel, times the share of the
# communicator's 2 channels NCCL launches for n: ring LL one per 512 threads x 8 B x 4
# ranks = 16 KB (1 KB: 1 of 2), Simple one per 512 x 64 B = 32 KB (1 MB: 2 of 2); plus
# the call's 2.2 us; and no call is faster than the host's launch of it, 4.2 us (one
# process per GPU; "A call as nccl-tests times it").
CALL_US, LAUNCH_US = 2.2, 4.2
NCCL_1KB_US = max(CALL_US + RING_LL_US + 1024 / (1e3 * 19.25 * 0.5 * 4 / 6 * 1 / 2),
                  LAUNCH_US)
NCCL_1MB_US = max(CALL_US + RING_SIMPLE_US + (1 << 20) / (1e3 * 19.25 * 4 / 6), LAUNCH_US)
# synth's own schedules there (docs/cost-model.md, "synth's own schedules"): the call's
# 2.2 us, per step the NVLink ring hop of its protocol and 0.5 us per round, the busiest
# port's bytes at 19.25 GB/s x the protocol's factor, and at least the 4.2 us launch.
# Recursive doubling (2 steps of 1 round, the whole buffer each) in LL; direct (C = 4:
# each port carries 3 of 4 chunks in a reducescatter step of 3 rounds, then in an
# allgather step of 3) in Simple.
RECURSIVE_DOUBLING_LL_1KB_US = max(
    CALL_US + 2 * 0.6 + 2 * 0.5 + 2 * 1024 / (1e3 * 19.25 * 0.5), LAUNCH_US)
DIRECT_SIMPLE_1MB_US = max(
    CALL_US + 2 * 3.4 + 6 * 0.5 + 2 * 0.75 * (1 << 20) / (1e3 * 19.25), LAUNCH_US)


def test_nccl_as_it_runs_is_derived_by_hand_on_a_small_switch(tmp_path):
    # NCCL's tuner picks ring LL at 1 KB and ring Simple at 1 MB (its own model's times)
    def tuner_us(n, proto, algo):
        if algo == "ring":
            base = {"LL": RING_LL_US, "LL128": RING_LL128_US, "Simple": RING_SIMPLE_US}
            return base[proto] + n / (1e3 * TUNER_GBPS[proto])
        lat, gbps, at_1kb, at_1mb = TREE[proto]
        return lat + n / (1e3 * gbps * (at_1kb if n == 1024 else at_1mb))

    for n, pick in ((1024, ("LL", "ring")), (1 << 20, ("Simple", "ring"))):
        times = {(p, a): tuner_us(n, p, a) for p in TREE for a in ("ring", "tree")}
        assert min(times, key=times.get) == pick
    workload = tmp_path / "w.yaml"
    workload.write_text("communicators: {world: all}\ncollectives:\n"
                        "  - {communicator: world, collective: allreduce, size: 1024, "
                        "count: 3}\n"
                        "  - {communicator: world, collective: allreduce, size: 1048576, "
                        "count: 2}\n")
    out = tmp_path / "plan"
    done = synth_main("plan", workload, "--topo", "switch:4", "-o", out, "--time-limit",
                      "20", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    (entry,) = doc["entries"]
    small, large = entry["calls"]
    assert (small["nccl"], large["nccl"]) == ("NCCL ring/LL", "NCCL ring/Simple")
    assert small["nccl_us"] == pytest.approx(NCCL_1KB_US, abs=1e-3)  # 12.719
    assert large["nccl_us"] == pytest.approx(NCCL_1MB_US, abs=1e-3)  # 112.707
    nccl_step = 3 * NCCL_1KB_US + 2 * NCCL_1MB_US
    assert doc["step_us"]["nccl"] == pytest.approx(nccl_step, abs=1e-3)
    # the plan takes a schedule at least as fast as the two above at each size: a
    # speed-up of at least 263.572 / 201.253 over NCCL
    assert small["us"] <= RECURSIVE_DOUBLING_LL_1KB_US + 1e-3  # 4.613
    assert large["us"] <= DIRECT_SIMPLE_1MB_US + 1e-3  # 93.707
    mine = 3 * RECURSIVE_DOUBLING_LL_1KB_US + 2 * DIRECT_SIMPLE_1MB_US
    assert doc["step_us"]["plan"] <= mine + 1e-3
    assert doc["step_us"]["speedup"] >= round(nccl_step / mine, 4) - 1e-4  # 1.3096
    # each workload size goes to a file that cuts it whole, read from the file itself
    for fmt, runtime in doc["runtimes"].items():
        (files,) = runtime
        for n in (1024, 1 << 20):
            (f,) = [f for f in files["files"]
                    if f["min_bytes"] <= n <= (f["max_bytes"] or n)]
            if f["file"] is None:
                continue
            assert cut_whole(fmt, (out / f["file"]).read_text(), n), (fmt, n, f)
    # the summary says what each runtime's files alone make of the step, by the
    # document's own times per call: NCCL's own where a runtime has no file for a call
    text = synth_main("plan", workload, "--topo", "switch:4", "-o", tmp_path / "again",
                      "--time-limit", "20").stdout
    (line,) = [x for x in text.splitlines() if "files alone" in x]
    for fmt, runtime in doc["runtimes"].items():
        (files,) = runtime
        alone = sum(c["count"] * c["load"]["runtimes"][fmt]["us"] for c in entry["calls"])
        assert doc["step_us"][f"{fmt}_files"] == pytest.approx(alone, abs=1e-2)
        assert f"{fmt} {doc['step_us'][f'{fmt}_files']:.1f} us" in line
    assert line.endswith(f"against {nccl_step:.1f} us NCCL")


@pytest.mark.parametrize("change, message", [
    (lambda d: d["collectives"][0].update(communicator="pp"), "unknown communicator 'pp'"),
    (lambda d: d["communicators"].update(tp={"ranks": [[0, 99]]}), "outside the topology"),
    (lambda d: d["collectives"].append({"communicator": "dp", "collective": "reducescatter",
                                        "range": ["32MB", "1GB"]}), "overlap"),
    (lambda d: d["collectives"][1].update(root=2), "takes no root"),
    (lambda d: d["communicators"].update(tp={"per": "rack"}), "per: box or across: boxes"),
    # its files' machine, NAME:clos, read as that fabric
    (lambda d: d["communicators"].update(clos={"per": "box"}), "'clos' is a fabric's"),
    # which file and entry, as for every other workload error (a trial's: it said neither)
    (lambda d: d["collectives"][1].update(size="-1MB"),
     r"^'w.yaml': collectives\[1\]: size '-1MB': expected a number"),
])
def test_bad_workloads_get_one_line(change, message):
    doc = json.loads(json.dumps(TOGETHER))
    change(doc)
    with pytest.raises(BadInput, match=message):
        parse_workload(doc, TOPO, "w.yaml")


def test_a_log_line_that_does_not_parse_is_named_by_its_line(tmp_path):
    lines = (EXAMPLES / "nccl-debug-dgxh100x2.log").read_text().splitlines()
    lines[14] = lines[14].replace("count 33554432", "count lots")
    with pytest.raises(BadInput, match="line 15: a AllReduce line that does not parse"):
        parse_log("\n".join(lines), TOPO, "x.log")
    bad = tmp_path / "bad.log"
    bad.write_text("\n".join(lines) + "\n")
    refused = synth_cli("plan", str(bad), "--topo", "dgxh100x2", "-o", str(tmp_path / "p"))
    assert "line 15" in one_line(refused, 2)
    assert not (tmp_path / "p").exists()
    trace = json.loads((EXAMPLES / "profiler-trace-dgxh100x2.json").read_text())
    trace["traceEvents"][4]["args"]["Process Group Ranks"] = "[0, 1, two]"
    with pytest.raises(BadInput, match=r"traceEvents\[4\]: Process Group Ranks"):
        parse_trace(json.dumps(trace), TOPO, "t.json")


def test_plots_of_a_plan(together):
    from synth.pictures.plan_plots import plan_figures

    figures = plan_figures(together)
    assert sorted(name for name, _ in figures) == ["dp-reducescatter.png", "ep-alltoall.png",
                                                  "step.png", "tp-allreduce.png"]
    assert all(data.startswith(b"\x89PNG") for _, data in figures)


def test_an_alltoall_plan_in_cost_model_2_is_timed_and_plotted_at_every_size():
    # NCCL's grouped sends change protocol with the size (p2p/LL at 1 KB), and the
    # reference keeps one line per algorithm: --plots, which times every size, stopped
    # on StopIteration (exit 3) on the guide's own trace
    from synth.pictures.plan_plots import plan_figures
    from synth.predict.nccl import choose

    topo = resolve("dgxh100")
    work = parse_workload({"communicators": {"tp": {"per": "box"}}, "collectives": [
        {"communicator": "tp", "collective": "alltoall", "size": "32MB"}]}, topo)
    plan = make_plan(work, topo, Limits(time_limit=30))
    (entry,) = plan.entries
    for n in (1 << 10, 1 << 20, 32 << 20):  # one group: nothing shared, NCCL's own time
        assert entry.nccl(n).time_us(n) == pytest.approx(
            choose(entry.machine, "alltoall", n).predicted_us)
    assert "step.png" in [name for name, _ in plan_figures(plan)]


def test_groups_that_share_a_nic_take_turns_on_it():
    # dgx2: two GPUs behind each NIC, so the data-parallel groups of GPUs 2r and 2r+1
    # meet on it; each group's own view does not show that
    topo = resolve("dgx2x2")
    work = parse_workload({"communicators": {"dp": {"across": "boxes"}}, "collectives": [
        {"communicator": "dp", "collective": "allreduce", "size": "64MB"}]}, topo)
    entry = make_plan(work, topo, Limits(time_limit=30)).entries[0]
    best = entry.best(64 << 20)
    assert best.shared == pytest.approx(2, rel=0.01)  # the NIC carries both groups
    # and NCCL's ring, run by both groups at once, meets there as well
    assert entry.nccl(64 << 20).shared == pytest.approx(2, rel=0.01)


def _dp_allgather(topo, dp=None, time_limit=20):
    """The plan of one 64 MB allgather on communicator dp (default: across the boxes)."""
    work = parse_workload({"communicators": {"dp": dp or {"across": "boxes"}},
                           "collectives": [{"communicator": "dp", "collective": "allgather",
                                            "size": "64MB"}]}, topo)
    return make_plan(work, topo, Limits(time_limit=time_limit))


def _dp_allgather_plan(edits=(), name="dgxh100x2"):
    topo = resolve(name, edits=edits)
    return topo, _dp_allgather(topo)


def _serves_every_group(entry, topo) -> bool:
    """Whether the entry has schedules, each valid on every group's own links."""
    schedules = [c.schedule for c in entry.candidates if c.schedule is not None]
    return bool(schedules) and not any(_fails_on(s, topo, g) for s in schedules
                                       for g in entry.groups)


def _fails_on(schedule, topo, group) -> bool:
    """Whether the verifier rejects `schedule` on `group`'s own links in `topo`, in the
    schedule's capacity unit (the plan's view may have its own)."""
    sub = replace(view(topo, group), unit_gbps=schedule.model.unit_gbps)
    try:
        verify_schedule(schedule_to_dict(replace(schedule, model=lower(sub))))
    except ScheduleInvalid:
        return True
    return False


def test_a_degraded_group_is_planned_on_and_its_files_serve_every_group():
    # box 1's GPU 2 reaches its NIC at half width: data-parallel group [2, 10] is the
    # slowest; planned on it, every schedule holds on every group's own links
    topo, plan = _dp_allgather_plan(("box1.gpu2-nic2=0.5",))
    assert plan.planned_on == {"dp": [[2, 10]]}
    assert "planned on group [2, 10]" in plan.notes[0]
    (entry,) = plan.entries
    assert _serves_every_group(entry, topo)
    # the healthy machine's plan does not: its schedules overrun [2, 10]'s NIC link
    _, healthy = _dp_allgather_plan()
    best = healthy.entries[0].best(64 << 20).schedule
    assert _fails_on(best, topo, [2, 10]) and not _fails_on(best, topo, [0, 8])
    # NCCL, run on the slowest group, is slowed by it too (32 GB/s against 50)
    n = 64 << 20
    assert entry.nccl(n).time_us(n) > 1.5 * healthy.entries[0].nccl(n).time_us(n)
    assert plan.entries[0].best(n).time_us(n) <= entry.nccl(n).time_us(n)


def test_groups_degraded_apart_are_planned_on_each_links_slowest():
    # two groups, each slowed in a different box: neither carries the other (group 2's
    # rank 1 is slow, group 5's rank 3), so the plan takes every link at its slowest in
    # any group
    edits = ("box1.gpu2-nic2=0.5", "box3.gpu5-nic5=0.5")
    topo, plan = _dp_allgather_plan(edits, "dgxh100x4")
    # (the healthy groups carry both, so they add no slow link: not named)
    assert plan.planned_on == {"dp": [[2, 10, 18, 26], [5, 13, 21, 29]]}
    assert "at its slowest in groups [2, 10, 18, 26], [5, 13, 21, 29]" in plan.notes[0]
    (entry,) = plan.entries
    assert _serves_every_group(entry, topo)
    # the schedule chosen runs on every group's own links in no more than the plan says
    n = 64 << 20
    best = entry.best(n)
    assert best.schedule is not None
    assert max(_priced_on(best, topo, g, n) for g in entry.groups) <= (
        best.time_us(n) * (1 + 1e-9))


def test_synth_plan_on_a_degraded_machine_says_which_group_it_planned_on(tmp_path):
    workload = tmp_path / "dp.yaml"
    workload.write_text("communicators: {dp: {across: boxes}}\n"
                        "collectives: [{communicator: dp, collective: allgather, "
                        "size: 64MB}]\n")
    out = tmp_path / "plan"
    done = synth_main("plan", workload, "--topo", "dgxh100x2", "--degrade",
                      "box1.gpu2-nic2=0.5", "-o", out, "--time-limit", "20", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    said = ("communicator dp: its groups see the machine differently (a degraded "
            "machine); planned on group [2, 10]")
    assert f"synth: note: {said}" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["communicators"]["dp"]["planned_on"] == [[2, 10]]
    assert doc["communicators"]["dp"]["groups"][2] == [2, 10]
    assert any(note.startswith(said) for note in doc["notes"])
    assert f"Planned: {said}" in (out / "report.md").read_text()


def _priced_on(candidate, topo, group, n: int) -> float:
    """The candidate's schedule, in its protocol, on `group`'s own links (cost model 2)."""
    sub = view(topo, group)
    lines = schedule_lines(replace(candidate.schedule, model=lower(sub)), prices(sub))
    return next(l for l in lines if l.protocol == candidate.protocol).time_us(n)


def test_groups_listed_in_another_box_order_meet_all_the_same():
    # the same two degraded groups as above, one listed from box 1 first: the meet
    # matched vertices by their place in each view, and refused it
    edits = ("box1.gpu2-nic2=0.5", "box3.gpu5-nic5=0.5")
    topo = resolve("dgxh100x4", edits=edits)
    groups = [[2, 10, 18, 26], [13, 5, 21, 29]]
    plan = _dp_allgather(topo, {"ranks": groups})
    assert plan.planned_on == {"dp": groups}
    assert _serves_every_group(plan.entries[0], topo)


def test_a_group_slower_only_at_its_links_efficiency_is_not_taken_for_the_faster():
    # group [3, 11]'s network link at half width (25 GB/s line rate, at the NIC's
    # efficiency 0.95) against [2, 10]'s PCIe link at 0.45 (28.8 GB/s, at PCIe's 0.75):
    # by line rates [2, 10] carries [3, 11], by what they achieve the other way round, so
    # neither carries the other; the schedule chosen runs on each group's own links in
    # no more than the plan says
    edits = ("box1.gpu2-nic2=0.45", "box1.nic3-rail3=0.5")
    topo, plan = _dp_allgather_plan(edits)
    assert plan.planned_on == {"dp": [[2, 10], [3, 11]]}
    n = 64 << 20
    best = plan.entries[0].best(n)
    assert best.schedule is not None and best.protocol == "Simple"
    on_each = [_priced_on(best, topo, g, n) for g in ([2, 10], [3, 11], [0, 8])]
    assert max(on_each) <= best.time_us(n) * (1 + 1e-9)
    # and the slowest of them, [2, 10] at 28.8 x 0.75 = 21.6 GB/s, is what it says: each
    # GPU sends half of 64 MiB
    assert best.time_us(n) == pytest.approx(best.latency_us + (n / 2) / 21.6e3, rel=1e-9)


SHARED_NIC_BOX = """
name: sh
gpus: 2
switches: [{name: ps, kind: pcie_switch}]
nics: [nic0]
links:
  - {between: [gpu0, ps], gbps: 32}
  - {between: [gpu1, ps], gbps: 32}
  - {between: [ps, nic0], gbps: 50}
network: {fabric: single-switch, gbps: 50}
"""


def test_a_group_is_not_carried_past_a_shared_nic_it_lacks(tmp_path):
    # 4 boxes of 2 GPUs behind one PCIe switch and NIC; group A = boxes 0 and 1 (GPU
    # links at 0.3: too slow to share anything), group B = boxes 2 and 3 (box 2's NIC
    # link at 0.25, shared by its 2 GPUs). A's links are each faster in B, but B's NIC
    # binds tighter than anything in A: A was taken as carried, and every one of its
    # schedules overran B's NIC
    path = tmp_path / "sh.yaml"
    path.write_text(SHARED_NIC_BOX)
    edits = ("box0.gpu0-ps=0.3", "box0.gpu1-ps=0.3", "box1.gpu0-ps=0.3",
             "box1.gpu1-ps=0.3", "box2.ps-nic0=0.25")
    topo = resolve(str(path), 4, edits=edits)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    plan = _dp_allgather(topo, {"ranks": groups}, time_limit=30)
    assert plan.planned_on["dp"] != [groups[0]]
    assert _serves_every_group(plan.entries[0], topo)


def test_a_degraded_first_group_is_said_as_any_other():
    # the slowest group is the first: still noted, as the groups differ
    _, plan = _dp_allgather_plan(("box0.gpu0-nic0=0.5",))
    assert plan.planned_on == {"dp": [[0, 8]]}
    assert plan.notes and "planned on group [0, 8]" in plan.notes[0]
    # groups that differ on a healthy machine are not called degraded, nor on a machine
    # degraded where none of them is (box 1's GPU 7)
    for topo in (TOPO, resolve("dgxh100x2", edits=("box1.gpu7-nic7=0.5",))):
        work = parse_workload({"communicators": {"m": {"ranks": [[1, 2], [0, 8]]}},
                               "collectives": [{"communicator": "m",
                                                "collective": "allreduce",
                                                "size": "1MB"}]}, topo)
        (note,) = make_plan(work, topo, Limits(time_limit=10)).notes
        assert note.startswith("communicator m: its groups see the machine differently; "
                               "planned on group [0, 8]"), note


def test_groups_of_another_structure_are_refused():
    # [0, 1, 2] meet on their NVSwitch; in [3, 11, 12] GPU 3 reaches 11 over rail 3 and
    # 12 only through 11: neither carries the other, and they are not one structure
    work = parse_workload({"communicators": {"trios": {"ranks": [[0, 1, 2], [3, 11, 12]]}},
                           "collectives": [{"communicator": "trios",
                                            "collective": "allreduce", "size": "1MB"}]}, TOPO)
    with pytest.raises(BadInput, match=r"communicator trios: group \[3, 11, 12\] sees the "
                                       r"topology differently from group \[0, 1, 2\], and "
                                       r"no group, nor every link at its slowest in them, "
                                       r"is carried by all"):
        make_plan(work, TOPO, Limits(time_limit=10))


def test_without_an_nccl_style_algorithm_the_plan_is_its_own_reference():
    # dgx1's alltoall has no NCCL-style model, as dgxh100x2's across its 16 GPUs: the
    # same path, planned in a second instead of 18
    topo = resolve("dgx1")
    work = parse_workload({"communicators": {"world": "all"}, "collectives": [
        {"communicator": "world", "collective": "alltoall", "size": "1MB"}]}, topo)
    plan = make_plan(work, topo, Limits(time_limit=20))
    entry = plan.entries[0]
    assert not entry.modelled_nccl and entry.machine is None
    # its own candidates stand in: a ratio of exactly 1, not a made-up NCCL
    assert entry.reference == entry.candidates
    assert plan.step_time("nccl") == plan.step_time("plan") > 0


LINE = ("node0:7:7 [0] NCCL INFO {op}: opCount 0 sendbuff 0x1 recvbuff 0x2 count {count} "
        "datatype {dtype} op 0 root 0 comm 0xa [nranks={nranks}] stream 0x3")


@pytest.mark.parametrize("line, message", [
    (LINE.format(op="AllReduce", count=8, dtype=7, nranks=0), "a communicator of 0 ranks"),
    (LINE.format(op="Teleport", count=8, dtype=7, nranks=8), "not an NCCL operation"),
    (LINE.format(op="AllReduce", count=10 ** 17, dtype=8, nranks=8), "at most 1 PB"),
    (LINE.format(op="AllReduce", count=8, dtype=42, nranks=8), "datatype 42"),
])
def test_hostile_log_lines_get_one_line(line, message):
    with pytest.raises(BadInput, match=message):
        parse_log(line + "\n", TOPO, "x.log")


def test_log_lines_behind_a_timestamp_alltoall_and_one_rank_comms_are_read():
    text = "\n".join([
        "2026-12-01T04:00:00Z " + LINE.format(op="AlltoAll", count=1024, dtype=9, nranks=8),
        LINE.format(op="AllReduce", count=1024, dtype=7, nranks=1),
        LINE.format(op="AllReduce", count=1024, dtype=7, nranks=8).replace("0xa", "0xb")])
    work = parse_log(text, TOPO, "x.log", steps=2)
    calls = {(c.collective, c.low): c.count for c in work.calls}
    # alltoall's count is per peer: n = 1024 x 2 bytes x 8 ranks; half a call a step
    assert calls == {("alltoall", 16384): 0.5, ("allreduce", 4096): 0.5}
    assert any("one-rank" in n for n in work.notes)


def test_hostile_trace_events_get_one_line():
    trace = json.loads((EXAMPLES / "profiler-trace-dgxh100x2.json").read_text())
    for change, message in [
        (lambda a: a.update(dtype=["x"]), "unknown dtype"),
        (lambda a: a.update({"Group size": 10 ** 8, "Process Group Ranks": "[0, 1, ...]"}),
         "more GPUs than the topology"),
        (lambda a: a.update({"In msg nelems": 10 ** 30}), "at most 1 PB")]:
        doc = json.loads(json.dumps(trace))
        change(doc["traceEvents"][1]["args"])
        with pytest.raises(BadInput, match=message):
            parse_trace(json.dumps(doc), TOPO, "t.json")
    events = json.dumps(trace["traceEvents"])  # a bare array of events is a trace too
    assert len(parse_trace(events, TOPO, "t.json").calls) == 4


def test_names_and_tiny_groups_that_cannot_be_planned_are_refused():
    for comms, message in [({"tpé": {"per": "box"}}, "ASCII"),
                           ({"solo": {"per": "box", "size": 1}}, "one GPU")]:
        name = next(iter(comms))
        with pytest.raises(BadInput, match=message):
            parse_workload({"communicators": comms, "collectives": [
                {"communicator": name, "collective": "allreduce", "size": "1MB"}]}, TOPO)


def test_runtime_files_tile_from_zero_and_a_new_plan_removes_the_old_ones(
        tp_allreduce, tmp_path):
    from dataclasses import replace

    from synth.plan.output import render_plan, runtime_files, write_files

    def write_plan(plan, out):  # as synth plan does: everything rendered, then written
        texts, doc = render_plan(plan)
        write_files(out, texts, doc["files"])
        return doc

    ring = next(c for c in tp_allreduce.entries[0].candidates if c.label.startswith("ring"))
    # two lines a float's width apart at 0 bytes: no file of 0..0 (maxBytes 0 is "no
    # limit" to MSCCL); on a copy of the entry (the plan is shared with other tests)
    # with one call of 64MB
    entry = replace(only_calls(tp_allreduce, 1 << 26).entries[0], candidates=[
        replace(ring, label="B", latency_us=0.35000000000000003, us_per_byte=1e-6),
        replace(ring, label="A", latency_us=0.35, us_per_byte=2e-6)])
    files = runtime_files(entry, "msccl-xml")
    assert files[0]["min_bytes"] == 0 and files[0]["max_bytes"] > 0
    assert all(b["min_bytes"] == a["max_bytes"] + 1 for a, b in zip(files, files[1:]))
    # a plan of small calls writes its files in a second (the tp allreduce's files, of
    # more sizes and candidates, take half a minute to export and simulate)
    def small(collective):
        return make_plan(parse_workload({"communicators": {"tp": {"per": "box"}},
                                         "collectives": [{"communicator": "tp",
                                                          "collective": collective,
                                                          "size": "1MB"}]}, TOPO),
                         TOPO, Limits(time_limit=5))

    first = write_plan(small("allgather"), tmp_path)
    old = [f for f in first["files"] if f.startswith(("mscclpp/tp/", "msccl/tp/"))]
    second = write_plan(small("alltoall"), tmp_path)
    assert old and not any((tmp_path / f).exists() for f in old)
    assert all((tmp_path / f).exists() for f in second["files"])


def test_an_earlier_plans_files_are_removed_only_inside_the_folder(tmp_path):
    from synth.output_folder import record
    from synth.plan.output import write_files

    out, outside = tmp_path / "plan", tmp_path / "precious"
    (out / "msccl").mkdir(parents=True)
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (out / "linked").symlink_to(outside)
    (out / "msccl" / "old.xml").write_text("stale")
    record(out, [out / "msccl" / "old.xml"])  # synth's as it wrote it: removed when stale
    listed = ["msccl/old.xml", str(outside / "keep.txt"), "../precious/keep.txt",
              "linked/keep.txt", "msccl/../../precious/keep.txt", 5]
    (out / "plan.json").write_text(json.dumps({"format": "synth.plan", "files": listed}))
    write_files(out, {Path("report.md"): "new"}, ["report.md", "plan.json"])
    assert not (out / "msccl" / "old.xml").exists()
    assert (outside / "keep.txt").read_text() == "mine"
    (out / "plan.json").write_text('{"files": 5}')  # unreadable listings are ignored
    write_files(out, {Path("report.md"): "again"}, ["report.md"])


def test_mscclpp_plans_leave_out_the_sizes_they_would_fail_on():
    from synth.plan.output import render_plan

    work = parse_workload({"communicators": {"tp": {"per": "box"}}, "collectives": [
        {"communicator": "tp", "collective": "allreduce", "size": "64MB"},
        {"communicator": "tp", "collective": "allreduce", "size": 4}]}, TOPO)
    # in the line-rate model, where synth's NVLS schedule is the fastest at 64 MiB (in
    # cost model 2 NCCL's own NVLS-tree is, and no file is needed there)
    plan = make_plan(work, TOPO, Limits(time_limit=20), cost_model="line-rate")
    _, doc = render_plan(plan, ("mscclpp",))
    files = doc["runtimes"]["mscclpp"][0]["files"]

    def at(n):
        (f,) = [f for f in files if f["min_bytes"] <= n <= (f["max_bytes"] or n)]
        return f

    assert at(4)["file"] is None  # 4 B: no plan cuts it; NCCL's own runs
    big = at(64 << 20)
    assert ((64 << 20) // 16) % big["chunks"] == 0
    assert "power-of-two lanes" in big["algorithm"] and "NVLS" in big["algorithm"]


def test_ranges_keep_to_the_32_bit_limit_and_the_sizes_of_a_range_call(tp_allreduce):
    from synth.plan.output import protected_sizes, runtime_files

    entry = tp_allreduce.entries[0]
    assert {1 << 20, 1 << 22, 1 << 26, 1, 4500000000} <= set(protected_sizes(entry))
    for fmt in ("msccl-xml", "mscclpp"):
        ranges = runtime_files(entry, fmt)
        assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] is None
        assert all(b["min_bytes"] == a["max_bytes"] + 1 for a, b in zip(ranges, ranges[1:]))
        for f in ranges:
            if f["candidate"] is None:
                continue
            assert f["max_bytes"] != 0  # 0 would read as "no limit"
            if fmt == "mscclpp":  # within the plan's 32-bit offsets
                assert f["max_bytes"] <= json.loads(f["text"])["max_message_size"]
            for n in protected_sizes(entry):
                if f["min_bytes"] <= n <= (f["max_bytes"] or n):
                    assert cut_whole(fmt, f["text"], n), (fmt, n, f["min_bytes"])


def test_a_workload_size_goes_to_the_faster_of_the_files_and_what_nccl_runs_there():
    # cost model 2: NCCL's options at full channels are faster than what its tuner runs
    # at a size (one H100 box, 64 MiB: nvls/Simple's line 267.9 us, NCCL's choice 328.1),
    # so a 303.9 us file lost the size to NCCL's own until 2026-12-05
    from synth.export import render
    from synth.plan.output import runtime_files

    work = parse_workload({"communicators": {"tp": {"per": "box"}}, "collectives": [
        {"communicator": "tp", "collective": "allreduce", "size": "64MB"}]}, TOPO)
    (entry,) = make_plan(work, TOPO, Limits(time_limit=20)).entries
    n = 64 << 20
    theirs = entry.nccl(n).time_us(n)
    fmt = "mscclpp"  # the runtime of the case at hand (rendering every candidate: 4 s)
    runs = []  # the times of the files this runtime loads that run n bytes
    for c in entry.candidates:
        try:
            text = render(c.schedule, fmt, protocol=c.protocol)[0]
        except BadInput:
            continue
        fits = n <= json.loads(text)["max_message_size"]  # the plan's 32-bit offsets
        if cut_whole(fmt, text, n) and fits:
            runs.append(c.time_us(n))
    (f,) = [f for f in runtime_files(entry, fmt)
            if f["min_bytes"] <= n <= (f["max_bytes"] or n)]
    chosen = theirs if f["candidate"] is None else f["candidate"].time_us(n)
    assert chosen == pytest.approx(min(runs + [theirs])), fmt
    assert f["candidate"] is not None and chosen < theirs  # a plan beats NCCL there


def cut_whole(fmt, text, n):
    """Whether the allreduce file `text` runs an n-byte message (both buffers n bytes),
    read from the file as docs/runtimes.md says the runtime does (not with
    synth.export.units): MSCCL whole loops of nchunksperloop elements of every type up
    to 4 bytes; MSCCL++ 16-byte units cut into each GPU's input_chunks and
    output_chunks."""
    if fmt == "msccl-xml":
        loop = int(re.search(r'nchunksperloop="(\d+)"', text).group(1))
        return n > 0 and n % (4 * loop) == 0
    gpus = json.loads(text)["gpus"]
    return n % 16 == 0 and all((n // 16) % g[key] == 0 for g in gpus
                               for key in ("input_chunks", "output_chunks"))


def test_a_plan_with_no_time_left_says_so_and_plans_nothing():
    # no floor of a second a collective: with nothing left before the first is planned,
    # the plan stops at once, saying how many it planned (18 collectives at a floor of
    # 1 s each ran a 10 s plan to 15 s)
    # (here while the groups of the first communicator were compared)
    with pytest.raises(NoAnswer, match=r"^no plan: the search's share of the time limit "
                                       r"\(0 s\) ran out with 0 of the workload's 3 "
                                       r"collectives planned \(while comparing the groups "
                                       r"of communicator tp \(0 of 2\)\)$"):  # tp, ep, dp
        make_plan(parse_workload(TOGETHER, TOPO, "together"), TOPO, Limits(time_limit=0))


def test_runtime_variants_out_of_time_are_left_out_not_fatal():
    # the power-of-two-lanes variants are extras: a search for them that the time limit
    # stops leaves the plan without them (it raised NoAnswer, and the plan failed)
    sub = view(TOPO, list(range(8)), "box")
    result = synthesize(sub, "allreduce", None, Limits(time_limit=30))
    assert power_of_two_lanes(sub) is not None  # 18 NVLink lanes: there is a variant
    assert runtime_variants(sub, result, Limits(time_limit=0)) == []


def test_every_search_of_a_plan_uses_the_method_asked_for(monkeypatch):
    # the power-of-two-lanes variants and the calls planned again on the residual links
    # searched with auto whatever --method said (a reviewer's finding)
    import synth.frontier
    import synth.plan.make
    import synth.plan.overlap
    import synth.plan.planner

    seen, real = [], synth.frontier.synthesize

    def recording(*args, method="auto", **kwargs):
        seen.append(method)
        return real(*args, method=method, **kwargs)

    for module in (synth.plan.make, synth.plan.overlap, synth.plan.planner):
        monkeypatch.setattr(module, "synthesize", recording)
    work = parse_workload(TOGETHER, TOPO, "together")
    plan = make_plan(work, TOPO, Limits(time_limit=60), cost_model="line-rate",
                     method="constructed")
    assert plan.overlaps and set(seen) == {"constructed"}
    # the plan's three collectives, a variant of 18 NVLink lanes, a call planned again
    assert len(seen) >= 5


def test_calls_together_with_no_time_left_keep_their_own_schedules(together):
    # no floor of a second a tag (nor for planning again on the residual links): with no
    # time, each later call keeps a candidate of its own, priced on the residual links
    from synth.plan.overlap import overlap
    done = overlap(together, TOPO, "fwd", Limits(time_limit=0))
    assert len(done.choices) == 2
    ep = next(e for e in together.entries if e.communicator == "ep")
    assert done.choices[1].schedule in [c.schedule for c in ep.candidates]


def test_a_ranges_summary_line_names_the_size_its_time_is_for(tmp_path):
    # a call over 64 KiB .. 1 MiB is timed at its geometric middle, 256 KiB; its line
    # named 65536 B beside that time
    workload = tmp_path / "w.yaml"
    workload.write_text("communicators: {world: all}\ncollectives:\n"
                        "  - {communicator: world, collective: allgather, "
                        "range: [65536, 1048576]}\n")
    done = synth_main("plan", workload, "--topo", "switch:4", "-o", tmp_path / "plan",
                      "--time-limit", "20")
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [x for x in done.stdout.splitlines() if x.lstrip().startswith("allgather on")]
    assert "  262144 B x" in line and "65536 B" not in line


def test_a_file_faster_than_nccl_around_a_workload_size_runs_those_sizes_too():
    # dgxh100's tp allreduce at 80 MB: the MSCCL++ NVLS file beats what NCCL runs at
    # 80 MB and at 64 MB, but its range was 80 MB alone (the envelope's lines are NCCL's
    # options at full channels, faster than NCCL runs), and 64 MB went to NCCL
    from synth.plan.output import runtime_files

    box = resolve("dgxh100")
    work = {"name": "tp", "communicators": {"tp": {"per": "box"}},
            "collectives": [{"communicator": "tp", "collective": "allreduce",
                             "size": "80MB", "count": 8}]}
    (entry,) = make_plan(parse_workload(work, box, "tp"), box, Limits(time_limit=60)).entries
    files = runtime_files(entry, "mscclpp")
    at = next(f for f in files if f["min_bytes"] <= 80 << 20 <= (f["max_bytes"] or 1 << 60))
    assert at["candidate"] is not None and at["min_bytes"] <= 64 << 20
    # the sizes it gained, it runs faster than NCCL does there
    for n in (64 << 20, at["min_bytes"], at["max_bytes"]):
        assert at["candidate"].time_us(n) < entry.nccl(n).time_us(n)


def test_a_files_bound_never_lands_on_a_workload_size_it_cannot_cut():
    # ring:8's allgather at 3,000,000 B: an MSCCL++ plan's range ended at 2,999,999, its
    # bound (one past) at 3,000,000, which the inclusive readers ran it at, and the
    # executor threw: the plan does not cut it
    from synth.plan.output import _after_overlaps

    pieces = [(0, 2_999_999, "file"), (3_000_000, None, "nccl")]
    def is_file(c):
        return c == "file"
    assert _after_overlaps(pieces, [3_000_000], is_file, lambda c, n: False) == [
        (0, 2_999_998, "file"), (2_999_999, None, "nccl")]
    # one it cuts is given to it, as before
    assert _after_overlaps(pieces, [3_000_000], is_file, lambda c, n: True) == [
        (0, 3_000_000, "file"), (3_000_001, None, "nccl")]


def test_on_rccl_an_xml_file_runs_a_size_only_where_every_share_is_whole_loops():
    # RCCL (and msccl-executor-nccl before 2024-09) asks whole loops of a call's per-rank
    # count; the plan judged MI300X's files by the whole buffer's, and gave them sizes
    # RCCL would not select them for
    from synth.export.units import Unit
    from synth.plan.output import runtime_files

    nccl, rccl = Unit("msccl-xml", 16, 8), Unit("msccl-xml", 16, 8, per_share=True)
    assert nccl.cuts(16 * 4) and not rccl.cuts(16 * 4) and rccl.cuts(16 * 4 * 8)
    box = resolve("mi300x")
    work = {"name": "ag", "communicators": {"tp": {"per": "box"}},
            "collectives": [{"communicator": "tp", "collective": "allgather",
                             "size": 32 * 3073, "count": 1}]}
    (entry,) = make_plan(parse_workload(work, box, "ag"), box, Limits(time_limit=30)).entries
    assert entry.library == "rccl"
    n = 32 * 3073  # whole loops of an 8-chunk file in the buffer, not in each share
    for f in runtime_files(entry, "msccl-xml"):
        if f["candidate"] is not None and f["min_bytes"] <= n <= (f["max_bytes"] or n):
            assert f["unit"].per_share and (n // 8) % (f["unit"].chunks * 4) == 0


def test_max_steps_caps_every_candidate_of_the_plan():
    # the baselines (recursive doubling, 3 steps; direct, 2) and the NVLS pipelines were
    # offered past --max-steps 1, and the plan chose them
    box = resolve("dgxh100")
    workload = parse_workload({"communicators": {"tp": {"per": "box"}}, "collectives": [
        {"communicator": "tp", "collective": "allreduce", "size": "1MB"}]}, box, "tp")
    free = make_plan(workload, box, Limits(time_limit=20))
    assert max(c.schedule.num_steps for c in free.entries[0].candidates) > 1
    plan = make_plan(workload, box, Limits(max_steps=1, time_limit=20))
    (entry,) = plan.entries
    assert entry.candidates
    for c in entry.candidates:
        assert c.schedule.num_steps <= 1, c.label
        verify_schedule(schedule_to_dict(c.schedule))


def test_max_steps_under_a_collectives_bound_is_exit_1_naming_it(tmp_path):
    # it was exit 2, "no candidate schedule to plan with"
    workload = tmp_path / "w.yaml"
    workload.write_text("communicators:\n  tp: {per: box}\ncollectives:\n"
                        "  - {communicator: tp, collective: allgather, size: 1MB}\n")
    result = synth_main("plan", workload, "--topo", "ring:4", "--max-steps", "1",
                        "--time-limit", "30", "-o", tmp_path / "p")
    assert one_line(result, 1) == ("synth: error: no plan: allgather on tp: --max-steps 1 "
                                   "is under its bound of 2 steps\n")
    assert not (tmp_path / "p").exists()


def test_files_of_equal_times_share_one_range_not_a_one_byte_one():
    # dgxh100x2's across-boxes allgather: direct, greedy, ring and recursive doubling are
    # one step of the same line, which NCCL's own LL crosses at 275,500 bytes. The
    # envelope gave the sizes above to one of them (its tie rule), the workload's size
    # to another (the first of the list), and the ranges split there: a one-byte range
    # at 275,500 B (a trial's plan, stop 59)
    from synth.plan.output import runtime_files

    work = parse_workload({"communicators": {"dp": {"across": "boxes"}}, "collectives": [
        {"communicator": "dp", "collective": "allgather", "size": "384MB"}]}, TOPO)
    (entry,) = make_plan(work, TOPO, Limits(time_limit=20)).entries
    ranges = [f for f in runtime_files(entry, "mscclpp") if f["candidate"] is not None]
    n = 384 << 20
    (f,) = [f for f in ranges if f["min_bytes"] <= n <= f["max_bytes"]]
    tied = [c for c in entry.candidates if c.time_us(n) == f["candidate"].time_us(n)]
    assert len(tied) > 1  # the case at hand: a tie at the workload's size
    # of equals, the smaller slope, the fewer steps, the label (docs/cli.md, synth plan)
    assert f["candidate"] is min(tied, key=lambda c: (c.us_per_byte, c.schedule.num_steps,
                                                      c.label))
    assert ranges == [f] and f["min_bytes"] < n // 1000  # one range, from far below n
