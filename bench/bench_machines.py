#!/usr/bin/env python3
"""The machines of 2026 (issue 29): allgather, reducescatter, allreduce and alltoall on
DGX B200, GB200 NVL72, MI300X and MI250, one box and several, against each machine's bound.

    python bench/bench_machines.py [--out bench/results/machines-DATE] [--time-limit 300]
                                   [--model line-rate|calibrated] [--only dgxb200,...]

Runs `synth COLLECTIVE --topo T --json` in a child process per machine and collective,
then `synth verify` on every file it wrote (bench/frontier_runs.py). The bound is the
one synth prints: with in-network reduction where the machine's switches reduce (NVLS),
else without. Issue 29's goals: allgather, reducescatter and allreduce at most 1.02 x
the bound, alltoall at most 1.05 x, every file verified, within 5 minutes each (10
minutes past 1024 GPUs). The line-rate model by default (its frontier keeps the point
closest to the bound). A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from frontier_runs import (REPO, command_line, finish, frontier_run, ratio,  # bench/
                           sweep_parser)
from machine import recorded_machine  # bench/machine.py

MACHINES = ["dgxb200", "dgxb200x8", "gb200nvl72", "gb200nvl72x4", "mi300x", "mi300xx8",
            "mi250", "mi250x4"]
GOALS = {"allgather": 1.02, "reducescatter": 1.02, "allreduce": 1.02, "alltoall": 1.05}


def report(rows: list[dict], machine: dict, args) -> list[str]:
    met = [r for r in rows if r.get("best_ratio") is not None
           and r["best_ratio"] <= GOALS[r["collective"]] and r["verified"] == r["files"]]
    lines = [f"# The machines of 2026, {machine['date']}", "",
             f"`{command_line()}`, commit {machine['commit']}, {machine['cpu']}, "
             f"{machine['memory_gib']} GiB, Python {machine['python']}; each run in a child "
             "process, one after the other, then `synth verify` on its files.", "",
             "## Goals (issue 29)", "",
             "- allgather, reducescatter, allreduce at most 1.02 x the bound, alltoall at "
             f"most 1.05 x, every file verified: **{'met' if len(met) == len(rows) else 'missed'}**"
             f" ({len(met)} of {len(rows)} runs)",
             f"- within the time limit of {args.time_limit:g} s (the goal's 5 minutes when it "
             "is 300)", "",
             "| machine | collective | exit | wall s | bound | closest x bound | its method "
             "| points | verified |",
             "| --- | --- | ---: | ---: | --- | ---: | --- | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['topology']} | {r['collective']} | {r['exit']} | "
                         f"{r['wall_s']} | {' '.join(r['error'])} |||||")
            continue
        lines.append(f"| {r['topology']} | {r['collective']} | {r['exit']} | {r['wall_s']} "
                     f"| {r['bound']} | {ratio(r['best_ratio'])} | {r['best_method']} | {r['points']} | "
                     f"{r['verified']} of {r['files']} |")
    return lines


def main() -> int:
    args = sweep_parser(__doc__, 300.0, MACHINES, "machines").parse_args()
    machine = recorded_machine(REPO, "bench_machines", bool(args.out))
    if machine is None:
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for topo in [m for m in args.only.split(",") if m]:
            for name in GOALS:
                row, _ = frontier_run(name, topo, [], args.time_limit, args.model,
                                      Path(tmp) / "out")
                rows.append(row)
                print(json.dumps(row), flush=True)
    return finish(rows, machine, report(rows, machine, args), args.out)


if __name__ == "__main__":
    sys.exit(main())
