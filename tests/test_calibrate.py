"""`synth calibrate`: nccl-tests logs in, a fitted topology file out.

The synthetic logs are printed the way nccl-tests prints them, with times made from
known figures by a formula written out here (a ring allreduce and allgather on 8 A100:
the figures' call cost, NCCL's latencies scaled, achieved bandwidth), so the fit must
recover those figures.
"""

from __future__ import annotations

import pytest
import yaml

from synth.errors import BadInput
from synth.predict.calibrate import TIMES, Sample, fit
from synth.predict.machine import machine_of
from synth.predict.nccl_tests import parse_log
from synth.topology.catalog import resolve
from tests.in_process import synth_main

HEADER = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
          "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
COLUMNS = ("#       size         count      type   redop    root     time   algbw   busbw "
           "#wrong     time   algbw   busbw #wrong")
CALL, SCALE, NVLINK = 14.0, 1.3, 0.7  # the truth the logs are made from
LAUNCH = 5.0  # us per GPU one thread launches (a -g 8 log)


def rank_lines(n: int, gpu: str = "NVIDIA A100-SXM4-80GB") -> list[str]:
    return [f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on    node0 device {r:2d} [0x{r:02x}] {gpu}"
            for r in range(n)]


def ring_time_us(coll: str, proto: str, n: int) -> float:
    """Ring on 8 A100 as NCCL 2.30.7 runs it, by hand: 24 channels (the search's 12,
    doubled); 2(N-1) = 14 steps (allreduce) or 7 (allgather); per hop 0.6 / 3.4 us
    (LL / Simple) after a base of 6.6 / 8.4; LL at its one-node cap of 87.7 GB/s,
    Simple at 12 NVLinks x 25 GB/s x NVLINK; one channel more per 32 KB (512 threads
    x 8 B x 8 ranks for LL, x 64 B for Simple)."""
    steps = 14 if coll == "allreduce" else 7
    ratio = 8 / steps  # bus bandwidth to algorithm bandwidth
    if proto == "LL":
        lat, gbps = 6.6 + steps * 0.6, 87.7 * ratio
    else:
        lat, gbps = 8.4 + steps * 3.4, 300 * NVLINK * ratio
    channels = max(1, min(24, n // (32 * 1024)))
    return CALL + SCALE * lat + n / (1e3 * gbps * channels / 24)


def log_text(coll: str, proto: str = "Simple", ranks: int = 8, program: str | None = None) -> str:
    program = program or {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf"}[coll]
    rows = []
    for k in range(3, 34, 2):
        n = 1 << k
        t = ring_time_us(coll, proto, n)
        alg = n / t / 1e3
        rows.append(f"{n:12d} {n // 4:13d}     float     sum      -1 {t:9.2f} {alg:7.2f} "
                    f"{alg:7.2f}      0 {t:9.2f} {alg:7.2f} {alg:7.2f}    N/A")
    debug = [f"node0:4000:4000 [0] NCCL INFO NCCL_{key} set by environment to {value}"
             for key, value in (("ALGO", "Ring"), ("PROTO", proto))]
    return "\n".join([f"# Collective test starting: {program}", *HEADER, *rank_lines(ranks),
                      "#", COLUMNS, *debug, *rows, "# Avg bus bandwidth    : 87.1", ""])


def test_calibrate_recovers_the_figures_a_log_was_made_from(tmp_path):
    logs = []
    for coll in ("allreduce", "allgather"):
        for proto in ("LL", "Simple"):
            path = tmp_path / f"{coll}-{proto}.log"
            path.write_text(log_text(coll, proto))
            logs.append(str(path))
    out = tmp_path / "dgxa100-calibrated.yaml"
    done = synth_main("calibrate", *logs, "--topo", "dgxa100", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "allreduce" in done.stdout and "ring/Simple" in done.stdout
    costs = yaml.safe_load(out.read_text())["costs"]
    assert costs["call_us"] == pytest.approx(CALL, rel=0.05)
    assert costs["latency_scale"] == pytest.approx(SCALE, rel=0.05)
    assert costs["nvlink"] == pytest.approx(NVLINK, rel=0.03)
    # the file is a topology every command takes: same machine, new figures
    topo = resolve(str(out))
    assert (topo.ranks, topo.figures.arch) == (8, "ampere")
    assert topo.figures.nvlink == pytest.approx(NVLINK, rel=0.03)
    shown = synth_main("topo", "show", str(out))
    assert shown.returncode == 0 and "GPUs 8" in shown.stdout


def test_a_calibrated_cluster_file_keeps_its_boxes(tmp_path):
    path = tmp_path / "all_reduce_perf.txt"
    text = log_text("allreduce", "Simple", 16).replace("# Collective test starting: all_reduce_perf\n", "")
    path.write_text(text)  # the collective comes from the file's name
    out = tmp_path / "x2.yaml"
    done = synth_main("calibrate", str(path), "--topo", "dgxa100x2", "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["boxes"] == 2 and doc["gpus"] == [f"gpu{i}" for i in range(8)]
    assert resolve(str(out)).ranks == 16


def test_the_parser_reads_rows_ranks_and_forced_algorithm():
    log = parse_log(log_text("allgather"), "x.log")
    assert (log.collective, log.ranks, log.algorithm, log.protocol) == ("allgather", 8, "ring",
                                                                        "Simple")
    assert log.rows[0].nbytes == 8 and len(log.rows) == 16
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in log_text("allreduce").splitlines())
    assert parse_log(tagged, "t.log").ranks == 8


def test_the_parser_reads_gpus_per_thread_and_a_list_of_algorithms():
    text = log_text("allreduce").replace("nGpus 1", "nGpus 8").replace("to Ring", "to Ring,Tree")
    log = parse_log(text, "g8.log")
    assert (log.gpus_per_thread, log.algorithm) == (8, "ring,tree")
    assert parse_log(log_text("allreduce"), "g1.log").gpus_per_thread == 1
    # an exclusion leaves NCCL its choice
    assert parse_log(log_text("allreduce").replace("to Ring", "to ^Tree"), "x.log").algorithm == ""


@pytest.mark.parametrize("header, gpus, launches", [
    ("nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
     "agg iters: 1 validation: 1 graph: 0", 1, 1),
    ("nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
     "agg iters: 1 validation: 1 graph: 0", 8, 8),      # -g 8: 8 launches a call
    ("nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
     "agg iters: 1 validation: 1 graph: 20", 8, 0),     # -g 8 -G 20: a CUDA graph replays
    ("nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
     "agg iters: 1 validation: 1 graph: 1 unalign: 0", 1, 0),  # later releases add unalign
])
def test_the_parser_reads_the_launches_a_call_waits_for(header, gpus, launches):
    text = log_text("allreduce").replace(HEADER[0], "# nThread 1 " + header)
    log = parse_log(text, "x.log")
    assert (log.gpus_per_thread, log.launches) == (gpus, launches)


def test_the_fit_recovers_the_hosts_launch_cost_from_a_one_thread_log():
    # one thread launching 8 GPUs (-g 8): each call takes the longer of the GPU's part
    # (ring_time_us) and 8 launches of LAUNCH us, which binds below about 64 KB
    machine = machine_of(resolve("dgxa100"))
    samples = [Sample(machine, coll, 1 << k, max(8 * LAUNCH, ring_time_us(coll, proto, 1 << k)),
                      "ring", proto, launches=8)
               for coll in ("allreduce", "allgather") for proto in ("LL", "Simple")
               for k in range(3, 34, 3)]
    theta, fitted = fit(samples)
    assert theta[TIMES.index("launch_us")] == pytest.approx(LAUNCH, rel=0.03)
    assert max(abs(f.error) for f in fitted) < 0.05


def _first_row_sized(text: str, size: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip()[:1].isdigit())
    lines[i] = lines[i].replace(lines[i].split()[0], size, 1)
    return "\n".join(lines)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace("     float     sum", "     float     sum  x", 1), "line 1[0-9]: not a result row"),
    # rows whose size is not a size were skipped in silence, the fit run on the rest
    (lambda t: _first_row_sized(t, "-1048576"), r"line \d+: expected a size from 1 B"),
    (lambda t: _first_row_sized(t, "abc1"), r"line \d+: not a result row"),
    (lambda t: "\n".join(l for l in t.splitlines() if "Rank" not in l), "no '#  Rank N Group"),
    (lambda t: t.replace("all_reduce_perf", "my_test"), "cannot tell which collective"),
    (lambda t: "\n".join(l for l in t.splitlines() if not l[:12].strip().isdigit()), "no result rows"),
    (lambda t: t.replace("to Ring", "to Star"), "NCCL_ALGO/NCCL_PROTO 'Star'"),
])
def test_bad_logs_are_one_line_naming_the_problem(change, message):
    with pytest.raises(BadInput, match=message):
        parse_log(change(log_text("allreduce")), "my.log")


def test_a_log_of_several_runs_is_refused_and_file_names_name_the_collective():
    # an LL and a Simple run in one file were fitted as Simple throughout (34% off at
    # the median), an allreduce and an allgather run as allreduce, without a word
    both = log_text("allreduce", "LL") + log_text("allreduce", "Simple")
    with pytest.raises(BadInput, match=r"more than one nccl-tests run in one log: 2 "
                                       r"headers \(lines 2, \d+\); 2 NCCL_PROTO values "
                                       r"\(LL, Simple\); give each run its own file"):
        parse_log(both, "both.log")
    with pytest.raises(BadInput, match=r"2 program values \(allgather, allreduce\)"):
        parse_log(log_text("allreduce") + log_text("allgather"), "both.log")
    # the collective from a file name with more around its program ("_" is a word
    # character: nccl_all_reduce_perf.log named none)
    unnamed = log_text("allgather").replace("all_gather_perf", "my_test")
    for name, coll in (("nccl_all_gather_perf.log", "allgather"),
                       ("all_reduce_perf_8gpu.log", "allreduce"),
                       ("reduce_scatter_perf-h100.log", "reducescatter")):
        assert parse_log(unnamed, name).collective == coll
    with pytest.raises(BadInput, match="cannot tell which collective"):
        parse_log(unnamed, "myall_reduce_perfx.log")


def test_a_log_of_other_gpus_than_the_topologys_is_noted(tmp_path):
    # the A100 rings of log_text fitted to dgxh100 moved its NVLink efficiency to 0.42
    # with no word that the log's GPUs were not the machine's
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(log_text("allreduce"))
    done = synth_main("calibrate", str(path), "--topo", "dgxh100", "-o", str(tmp_path / "h.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"synth: note: {path}: measured on NVIDIA A100-SXM4-80GB (ampere, "
                           "nccl), but dgxh100's GPUs are hopper, nccl: the fit is of the "
                           "machine given\n")
    done = synth_main("calibrate", str(path), "--topo", "dgxa100", "-o", str(tmp_path / "a.yaml"))
    assert done.returncode == 0 and done.stderr == ""
    # and a figure the machine has none of (NVLS before Hopper) is not "at its bound"
    nvls = next(l for l in done.stdout.splitlines() if l.split()[:1] == ["nvls"])
    assert "bound" not in nvls


def test_cli_refuses_a_log_of_another_machine_or_a_malformed_one(tmp_path):
    path = tmp_path / "ar.log"
    path.write_text(log_text("allreduce", "Simple", 16))
    out = tmp_path / "o.yaml"
    done = synth_main("calibrate", str(path), "--topo", "dgxa100", "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        f"synth: error: {path}: measured on 16 GPUs, dgxa100 has 8"]
    path.write_text("garbage\n  8  2 float sum -1 oops\n")
    done = synth_main("calibrate", str(path), "--topo", "dgxa100", "-o", str(out),
                      "--collective", "allreduce")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "line 2: not a result row" in done.stderr and not out.exists()


def test_dash_writes_the_calibrated_file_on_standard_output(tmp_path, monkeypatch):
    # -o - is standard output, as for synth export: it wrote a file named '-' in the
    # current folder; the fit goes to stderr so that stdout is the file alone
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(log_text("allreduce", "Simple"))
    monkeypatch.chdir(tmp_path)
    done = synth_main("calibrate", str(path), "--topo", "dgxa100", "-o", "-")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "-").exists()
    assert yaml.safe_load(done.stdout)["costs"]["call_us"] > 0
    assert "median error" in done.stderr


def test_a_slow_switch_is_found_where_its_effect_is_flat_near_the_defaults():
    # two H100 boxes whose NVLS runs at half its default efficiency: at 0.85 x 0.5 the
    # large allreduces are up to a third slower, but near the default a change in the
    # ratio barely moves them (NCCL's per-channel caps bind first), and least squares
    # started at the defaults stayed there (here 43% off at worst; 36% on a real log)
    from dataclasses import replace

    from synth.predict.nccl import choose

    machine = machine_of(resolve("dgxh100x2"))
    slow = replace(machine, figures=replace(machine.figures, nvls=machine.figures.nvls / 2))
    samples = [Sample(machine, "allreduce", 1 << k,
                      choose(slow, "allreduce", 1 << k).predicted_us)
               for k in range(10, 35, 3)]
    _, fitted = fit(samples, machine.figures)
    errors = sorted(abs(f.choice.predicted_us / f.sample.time_us - 1) for f in fitted)
    assert errors[-1] < 0.02


def test_a_figure_the_rows_push_past_its_bound_is_said_to_be_there(tmp_path):
    # one H100 box measured 4 x faster than the A100 rings the log is made from: its
    # NVLink efficiency would go past 1, and the fit stops it there; the list said
    # "nvlink 0.82 -> 1" like any other figure, and a time at 0 was written as 3e-13
    rows = []
    for line in log_text("allreduce").replace("NVIDIA A100-SXM4-80GB",
                                              "NVIDIA H100 80GB HBM3").splitlines():
        parts = line.split()
        if "set by environment" in line:
            continue  # NCCL chooses: NVLS too
        if parts and parts[0].isdigit():
            line = line.replace(parts[5], f"{float(parts[5]) / 4:.2f}")
        rows.append(line)
    log = tmp_path / "h100.log"
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "h100.yaml"
    done = synth_main("calibrate", str(log), "--topo", "dgxh100", "-o", str(out))
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0]: line for line in done.stdout.splitlines()
              if line.startswith("  ") and "->" in line}
    assert listed["nvlink"].endswith("-> 1  (at its bound: the rows would take it further)")
    assert "bound" not in listed["call_us"] and "bound" not in listed["nic"]
    assert yaml.safe_load(out.read_text())["costs"]["nvlink"] == 1.0
