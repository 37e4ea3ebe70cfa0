#!/usr/bin/env python3
"""Degraded machines (issue 29): every collective on a dgxh100 with one NVLink of one
GPU down and on a dgxh100x4 with one NIC missing, against the degraded machine's own
bound.

    python bench/bench_degraded.py [--out bench/results/degraded-DATE] [--time-limit 300]
                                   [--model line-rate|calibrated] [--only allgather,...]

Runs `synth COLLECTIVE --topo T --without EDIT --json` in a child process per machine
and collective (rooted ones at root 0), then `synth verify` on every file it wrote, on
the degraded machine derived again. Records per run: wall seconds, exit code, the
degraded bound (rounds per chunk) and its distance to the healthy machine's, the
frontier's closest point to the bound (x bound), its points, and files verified.
Issue 29's goal: every collective's frontier within 1.05 x the degraded machine's own
bound. The line-rate model by default: its frontier keeps every point no other beats
on latency and bandwidth, so the closest to the bound is on it (cost model 2 keeps only
points that are the fastest at some size). A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# one of gpu3's 18 NVLinks down; box 1 without its NIC 2
MACHINES = [("dgxh100", "gpu3-nvswitch:1"), ("dgxh100x4", "box1.nic2")]
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall"]
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
GOAL = 1.05


def synth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, cwd=REPO)


def one_run(name: str, topo: str, edit: str, args, out: Path) -> dict:
    """One collective on one degraded machine: the frontier, then its files verified."""
    root = ["--root", "0"] if name in ROOTED else []
    start = time.perf_counter()
    done = synth(name, "--topo", topo, "--without", edit, *root, "--json", "--no-progress",
                 "--time-limit", f"{args.time_limit:g}", "--model", args.model,
                 "--out", str(out))
    wall = time.perf_counter() - start
    row = {"collective": name, "topology": topo, "without": edit, "exit": done.returncode,
           "wall_s": round(wall, 1)}
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError:
        return row | {"error": done.stderr.strip().splitlines()[-1:]}
    points = summary["frontier"]
    degraded = summary.get("degraded") or {}
    files = [p["file"] for p in points if p["file"]]
    checked = synth("verify", *files, "--topo", topo, "--without", edit) if files else None
    return row | {
        "bound": summary["bounds"]["rounds_per_chunk"],
        "healthy_bound": (degraded.get("healthy_bounds") or {}).get("rounds_per_chunk"),
        "bound_ratio": degraded.get("bound_ratio"),
        "best_ratio": min((p["ratio_to_bound"] for p in points), default=None),
        "best_method": min(points, key=lambda p: p["ratio_to_bound"])["method"]
        if points else None,
        "points": len(points), "files": len(files),
        "verified": 0 if checked is None else sum(
            line.startswith("ok ") for line in checked.stdout.splitlines()),
        "verify_exit": None if checked is None else checked.returncode,
        "synth_s": summary["seconds"], "out_of_time": summary["out_of_time"]}


def report(rows: list[dict], machine: dict, args) -> list[str]:
    met = [r for r in rows if r.get("best_ratio") is not None and r["best_ratio"] <= GOAL]
    lines = [f"# Degraded machines, {machine['date']}", "",
             f"`python3 bench/bench_degraded.py --time-limit {args.time_limit:g} --model "
             f"{args.model}`, commit {machine['commit']}, {machine['cpu']}, "
             f"{machine['memory_gib']} GiB, Python {machine['python']}; each run in a child "
             "process, one after the other, then `synth verify` on its files.", "",
             "## Goal (issue 29)", "",
             f"- every collective's frontier within {GOAL} x the degraded machine's own "
             f"bound: **{'met' if len(met) == len(rows) else 'missed'}** ({len(met)} of "
             f"{len(rows)} runs)", "",
             "| machine | collective | exit | wall s | bound | healthy bound | degraded / "
             "healthy | closest x bound | its method | points | verified |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['topology']} without {r['without']} | {r['collective']} | "
                         f"{r['exit']} | {r['wall_s']} | {' '.join(r['error'])} |||||||")
            continue
        ratio = "-" if r["bound_ratio"] is None else f"{r['bound_ratio']:.4f}"
        best = "-" if r["best_ratio"] is None else f"{r['best_ratio']:.4f}"
        lines.append(f"| {r['topology']} without {r['without']} | {r['collective']} | "
                     f"{r['exit']} | {r['wall_s']} | {r['bound']} | {r['healthy_bound']} | "
                     f"{ratio} | {best} | {r['best_method']} | {r['points']} | "
                     f"{r['verified']} of {r['files']} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="PREFIX for PREFIX.json and PREFIX.md")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--model", choices=["line-rate", "calibrated"], default="line-rate")
    ap.add_argument("--only", default=",".join(COLLECTIVES),
                    help="comma-separated collectives (default: all eight)")
    args = ap.parse_args()
    machine = recorded_machine(REPO, "bench_degraded", bool(args.out))
    if machine is None:
        return 2
    wanted = [c for c in args.only.split(",") if c]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for topo, edit in MACHINES:
            for name in wanted:
                rows.append(one_run(name, topo, edit, args, Path(tmp) / "out"))
                print(json.dumps(rows[-1]), flush=True)
    lines = report(rows, machine, args)
    print("\n".join(lines))
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps({"machine": machine, "runs": rows},
                                                       indent=1))
        Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
