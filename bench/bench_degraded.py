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

import json
import sys
import tempfile
from pathlib import Path

from frontier_runs import (REPO, command_line, finish, frontier_run, ratio,  # bench/
                           sweep_parser)
from machine import recorded_machine  # bench/machine.py

# one of gpu3's 18 NVLinks down; box 1 without its NIC 2
MACHINES = [("dgxh100", "gpu3-nvswitch:1"), ("dgxh100x4", "box1.nic2")]
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall"]
GOAL = 1.05


def one_run(name: str, topo: str, edit: str, args, out: Path) -> dict:
    """One collective on one degraded machine: the frontier, then its files verified."""
    row, summary = frontier_run(name, topo, ["--without", edit], args.time_limit,
                                args.model, out)
    row["without"] = edit
    if summary is None:
        return row
    degraded = summary.get("degraded") or {}
    return row | {
        "healthy_bound": (degraded.get("healthy_bounds") or {}).get("rounds_per_chunk"),
        "bound_ratio": degraded.get("bound_ratio")}


def report(rows: list[dict], machine: dict, args) -> list[str]:
    met = [r for r in rows if r.get("best_ratio") is not None and r["best_ratio"] <= GOAL]
    lines = [f"# Degraded machines, {machine['date']}", "",
             f"`{command_line()}`, commit {machine['commit']}, {machine['cpu']}, "
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
        lines.append(f"| {r['topology']} without {r['without']} | {r['collective']} | "
                     f"{r['exit']} | {r['wall_s']} | {r['bound']} | {r['healthy_bound']} | "
                     f"{ratio(r['bound_ratio'])} | {ratio(r['best_ratio'])} | {r['best_method']} | {r['points']} | "
                     f"{r['verified']} of {r['files']} |")
    return lines


def main() -> int:
    args = sweep_parser(__doc__, 300.0, COLLECTIVES, "collectives").parse_args()
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
    return finish(rows, machine, report(rows, machine, args), args.out)


if __name__ == "__main__":
    sys.exit(main())
