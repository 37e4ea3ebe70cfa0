#!/usr/bin/env python3
"""In-network reduction (NVLS): allreduce on dgxh100 with and without the switch's help.

    python bench/bench_in_network.py [--out bench/results/in-network-DATE] [--time-limit 60]

Runs `synth allreduce --topo T --model line-rate --json` in a child process (the
line-rate model, whose frontier keeps the bandwidth-optimal points cost model 2 leaves
out where they are never fastest) for T = dgxh100 (its NVSwitch
declares `can: [reduce, multicast]`) and for the same file with that line removed, side
by side in one run. Records per run: wall seconds, the bounds (with and without
in-network reduction), the best frontier point with switch operations and the best
without (ratio to the in-network bound, algbw in the model at 1 GB), and the speed-up
between them; then the other collectives a switch computes in one step (allgather,
reducescatter, broadcast, reduce) against the same box without the capability. Issue
18's goals: the NVLS end within 1.02 x the in-network bound, at
least 1.7 x the algbw of the best schedule without it, and synthesis no slower than
without switch operations. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

from machine import recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GB = 1 << 30
REPEATS = 5


def run(topo: str, time_limit: float, out: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "synth", "allreduce", "--topo", topo,
                           "--time-limit", f"{time_limit:g}", "--model", "line-rate", "--json",
                           "--no-progress",
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    summary = json.loads(done.stdout)
    points = summary["frontier"]

    def algbw(p):  # GB/s at n = 1 GB in the model: n / (latency + us/MB x n)
        seconds = (p["latency_us"] + p["us_per_mb"] * GB / 1e6) * 1e-6
        return GB / seconds / 1e9

    nvls = [p for p in points if p["method"].startswith("in-network")]
    plain = [p for p in points if not p["method"].startswith("in-network")]
    best = lambda ps: max(ps, key=algbw) if ps else None  # noqa: E731  (at 1 GB)
    b_nvls, b_plain = best(nvls), best(plain)
    return {"topology": topo, "wall_s": round(wall, 2), "exit": done.returncode,
            "synth_s": summary["seconds"], "points": len(points),
            "bound": summary["bounds"]["rounds_per_chunk"],
            "bound_without": summary["bounds"].get("without_in_network"),
            "best_nvls": b_nvls and {k: b_nvls[k] for k in ("steps", "ratio_to_bound", "method")}
            | {"algbw_1gb": round(algbw(b_nvls), 1)},
            "best_plain": b_plain and {k: b_plain[k] for k in ("steps", "ratio_to_bound",
                                                               "method")}
            | {"algbw_1gb": round(algbw(b_plain), 1)},
            "nvls_64_batches": next((p["ratio_to_bound"] for p in nvls
                                     if p["method"].endswith("64 batches")), None),
            "nvls_closest": min((p["ratio_to_bound"] for p in nvls), default=None)}


ACROSS = ["dgxh100x2", "dgxh100x4", "dgxh100x8", "dgxh100x32"]
SHARP = [("dgxh100", 4), ("dgx2", 4)]  # the box file with network sharp: true, K boxes


def across_boxes(spec: str, boxes: int | None = None) -> dict:
    """The in-network construction across boxes at every depth, against the bounds."""
    sys.path.insert(0, str(REPO))
    from synth.bounds import bounds
    from synth.construct.in_network import nvls_search
    from synth.schedule.collectives import make_collective
    from synth.search.pareto import Limits
    from synth.topology.catalog import resolve
    from synth.topology.hierarchy import find_hierarchy
    from synth.topology.linkmodel import lower_with_routes

    start = time.perf_counter()
    lowering = lower_with_routes(resolve(spec, boxes))
    h, _ = find_hierarchy(lowering)
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks))
    built = time.perf_counter()
    search = nvls_search(lowering.model, Limits(max_steps=1100), None, h)
    done = time.perf_counter()
    ratio: dict[int, float] = {}  # the best at each depth: several families share one
    for p in search.points:
        r = float(p.ratio / b.rounds_per_chunk)
        ratio[p.schedule.batches] = min(r, ratio.get(p.schedule.batches, r))
    best_rpc = min((p.ratio for p in search.points), default=None)
    return {"topology": lowering.model.name, "how": search.stopped,
            "gpus": lowering.model.ranks, "bound": str(b.rounds_per_chunk),
            "without": str(b.without_in_network), "best": min(ratio.values()),
            "at_64": ratio.get(64), "setup_s": round(built - start, 1),
            "build_s": round(done - built, 1), "best_ratio_rpc": str(best_rpc)}


ONE_STEP = [("allgather", None), ("reducescatter", None), ("broadcast", 0), ("reduce", 0)]


def one_step(name: str, root, topo: str, time_limit: float, out: Path) -> dict:
    """The frontier of `name` on `topo`: its in-network points, the fewest steps any
    other point needs to come within 1.02 x the bound, and the best one-step point."""
    args = ["--root", str(root)] if root is not None else []
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "synth", name, "--topo", topo, *args,
                           "--time-limit", f"{time_limit:g}", "--model", "line-rate", "--json",
                           "--no-progress",
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    points = json.loads(done.stdout)["frontier"]
    nvls = [p for p in points if p["method"].startswith("in-network")]
    plain = [p for p in points if not p["method"].startswith("in-network")]
    near = [p["steps"] for p in plain if p["ratio_to_bound"] <= 1.02]
    one = [p["ratio_to_bound"] for p in plain if p["steps"] == 1]
    return {"collective": name, "topology": Path(topo).stem, "wall_s": round(wall, 1),
            "nvls": [(p["steps"], p["ratio_to_bound"]) for p in nvls],
            "plain_steps_within_1.02": min(near, default=None),
            "plain_one_step_ratio": min(one, default=None)}


def without_sharp(spec: str) -> Fraction:
    """The allreduce bound (rounds per chunk) of `spec` as it is, without SHARP."""
    from synth.bounds import bounds
    from synth.schedule.collectives import make_collective
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower_with_routes

    lowering = lower_with_routes(resolve(spec))
    return bounds(lowering, make_collective("allreduce", lowering.model.ranks)).rounds_per_chunk


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", help="PREFIX for PREFIX.json and PREFIX.md")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()
    machine = recorded_machine(REPO, "bench_in_network", bool(args.out))
    if machine is None:
        return 2
    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    commit = machine["commit"]
    with tempfile.TemporaryDirectory() as tmp:
        plain_file = Path(tmp) / "dgxh100-no-nvls.yaml"
        text = (REPO / "topologies" / "dgxh100.yaml").read_text()
        plain_file.write_text(text.replace(", can: [reduce, multicast]", "")
                              .replace("name: dgxh100", "name: dgxh100-no-nvls"))
        # REPEATS of each, alternating, so the machine's load falls on both alike; the
        # median wall time of each is compared
        pairs = [(run("dgxh100", args.time_limit, Path(tmp) / f"a{i}"),
                  run(str(plain_file), args.time_limit, Path(tmp) / f"b{i}"))
                 for i in range(REPEATS)]
        ones = [one_step(name, root, topo, args.time_limit, Path(tmp) / f"{name}-{j}")
                for name, root in ONE_STEP for j, topo in enumerate(("dgxh100",
                                                                     str(plain_file)))]
    runs = list(pairs[0])
    for r, k in zip(runs, (0, 1)):
        for key in ("wall_s", "synth_s"):
            r[key] = sorted(p[k][key] for p in pairs)[REPEATS // 2]
        r["synths"] = [p[k]["synth_s"] for p in pairs]
    nv, pl = runs
    speedup = nv["best_nvls"]["algbw_1gb"] / pl["best_plain"]["algbw_1gb"]
    within = nv["nvls_64_batches"]
    lines = [f"# In-network reduction (NVLS), {date}", "",
             f"`python3 bench/bench_in_network.py`, commit {commit}, {machine['cpu']}, "
             f"{machine['memory_gib']} GiB, Python {machine['python']}; `synth allreduce "
             f"--time-limit {args.time_limit:g}` in a child process, the two runs one after "
             "the other.", "",
             "## Goals (issue 18)", "",
             f"- NVLS end within 1.02 x the in-network bound: **"
             f"{'met' if within is not None and within <= 1.02 else 'missed'}** (64 batches: "
             f"{within}; closest: {nv['nvls_closest']:.4f})",
             f"- at least 1.7 x the algbw of the best schedule without it (model, 1 GB): **"
             f"{'met' if speedup >= 1.7 else 'missed'}** ({speedup:.3f} x: "
             f"{nv['best_nvls']['algbw_1gb']} against {pl['best_plain']['algbw_1gb']} GB/s)",
             f"- synthesis no slower than without switch operations: **"
             f"{'met' if nv['synth_s'] <= pl['synth_s'] * 1.05 else 'missed'}** (synth's own "
             f"seconds, median of {REPEATS}: {nv['synth_s']} s against {pl['synth_s']} s, "
             f"ratio {nv['synth_s'] / pl['synth_s']:.2f}, 5% allowed for noise; all runs "
             f"{nv['synths']} and {pl['synths']}. Wall time, which includes writing "
             f"{nv['points']} frontier files against {pl['points']}: {nv['wall_s']} s "
             f"against {pl['wall_s']} s)",
             "", "Best point: the one with the highest algbw at 1 GB in the model.", "",
             "| topology | wall s | bound (rounds/chunk) | bound without | best point | "
             "x bound | algbw at 1 GB |", "| --- | ---: | --- | --- | --- | ---: | ---: |"]
    for r in runs:
        for key in ("best_nvls", "best_plain"):
            p = r[key]
            if p:
                lines.append(f"| {Path(r['topology']).stem} | {r['wall_s']} | {r['bound']} | "
                             f"{r['bound_without'] or '-'} | {p['method']} ({p['steps']} "
                             f"steps) | {p['ratio_to_bound']:.4f} | {p['algbw_1gb']} |")
    lines += ["", "## Across boxes: NVLS in each, direct across (`nvls_search`, in this "
              "process)", "",
              "| topology | GPUs | bound with (without) | best x bound | at 64 batches | "
              "seconds (lowering + bounds, construction) |", "| --- | ---: | --- | ---: | ---: | --- |"]
    across = [across_boxes(spec) for spec in ACROSS]
    with tempfile.TemporaryDirectory() as tmp:  # the box files with network sharp: true
        for box, k in SHARP:
            path = Path(tmp) / f"{box}-sharp.yaml"
            path.write_text((REPO / "topologies" / f"{box}.yaml").read_text().replace(
                "alpha_us: 2.6}", "alpha_us: 2.6, sharp: true}").replace(
                f"name: {box}\n", f"name: {box}-sharp\n"))
            across.append(across_boxes(str(path), k))
            # against the bound of the same boxes without SHARP: no schedule there beats
            # it, so this is the least the network's reduction buys
            across[-1]["speedup"] = round(float(without_sharp(f"{box}x{k}")
                                                / Fraction(across[-1]["best_ratio_rpc"])), 3)
    for a in across:
        lines.append(f"| {a['topology']} | {a['gpus']} | {a['bound']} ({a['without']}) | "
                     f"{a['best']:.4f} | {a['at_64']:.4f} | {a['setup_s']}, {a['build_s']} |"
                     + (f" SHARP: at least {a['speedup']} x faster than any schedule without it |"
                        if "speedup" in a else ""))
    lines += ["", "## The other collectives through the switch (one switch operation per "
              "share)", "",
              "`synth NAME --topo T` on dgxh100 and on the same box without the capability "
              f"(time limit {args.time_limit:g} s): the in-network points (steps, x bound), "
              "and of the other points the fewest steps within 1.02 x the bound and the best "
              "one-step ratio. The bound is the same with and without the switch for these "
              "four (a port must still carry what the collective brings it).", "",
              "| collective | topology | in-network (steps, x bound) | other points: fewest "
              "steps within 1.02 x | best one-step x bound | wall s |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for o in ones:
        lines.append(f"| {o['collective']} | {o['topology']} | {o['nvls'] or '-'} | "
                     f"{o['plain_steps_within_1.02'] or '-'} | {o['plain_one_step_ratio'] or '-'}"
                     f" | {o['wall_s']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps({"date": date, "commit": commit,
                                                        "runs": runs, "across": across,
                                                        "one_step": ones},
                                                       indent=1) + "\n")
        Path(f"{args.out}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
