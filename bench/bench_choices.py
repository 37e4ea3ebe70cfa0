#!/usr/bin/env python3
"""Choices: what the line-rate model and cost model 2 each choose, side by side.

    python bench/bench_choices.py [--out bench/results/choices-DATE] [--time-limit 60]

For each job below, one frontier (synth.frontier.synthesize) seen by both models
(synth.cost_choice.in_cost_model): the points each keeps, the fastest point at 1 KB, 1 MB,
64 MB and 1 GB with its time, and what each compares with there (the line-rate model's
NCCL-style ring or tree; cost model 2's NCCL 2.30.7 as it runs), with the speed-up,
rounded down. The README's "where choices changed" cites this record. A benchmark, not
a test: it asserts nothing. With --out it refuses to record from a tree with
uncommitted changes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from machine import recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from synth.answer import reference_at, timer  # noqa: E402
from synth.cost_choice import in_cost_model  # noqa: E402
from synth.frontier import synthesize  # noqa: E402
from synth.schedule.cost import format_size  # noqa: E402
from synth.search.pareto import Limits  # noqa: E402
from synth.topology.catalog import resolve  # noqa: E402

JOBS = [("dgx1", "allgather"), ("dgx1", "allreduce"), ("dgxa100", "allreduce"),
        ("dgxh100", "allreduce"), ("dgxh100x2", "allreduce")]
SIZES = (1 << 10, 1 << 20, 64 << 20, 1 << 30)


def name(p) -> str:
    return f"S{p.steps} R{p.rounds} C{p.chunks}"


def seen(result, topo, model: str) -> dict:
    r = in_cost_model(result, topo, model)
    out = {"points": [name(p) for p in r.points], "left_out": [name(p) for p in r.left_out],
           "at": {}}
    for n in SIZES:
        time_of = timer(r, n)
        best = min(r.points, key=lambda p: (time_of(p.schedule)[0], p.steps))
        us = time_of(best.schedule)[0]
        ref, ref_us, _ = reference_at(r, n)
        out["at"][format_size(n)] = {"fastest": name(best), "us": us, "reference": ref,
                                     "reference_us": ref_us,
                                     "speedup": math.floor(ref_us / us * 100) / 100}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", help="PREFIX for PREFIX.json and PREFIX.md")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()
    machine = recorded_machine(HERE.parent, "bench_choices", bool(args.out))
    if machine is None:
        return 2
    machine["time_limit"] = args.time_limit
    commit = machine["commit"]
    jobs = []
    for spec, coll in JOBS:
        topo = resolve(spec)
        result = synthesize(topo, coll, None, Limits(time_limit=args.time_limit))
        jobs.append({"topology": spec, "collective": coll,
                     "line-rate": seen(result, topo, "line-rate"),
                     "calibrated": seen(result, topo, "calibrated")})
    lines = [f"# Choices in the two cost models, {machine['date']}", "",
             f"`python3 bench/bench_choices.py`, commit {commit}, {machine['cpu']}, "
             f"--time-limit {args.time_limit:g} per frontier.", ""]
    for j in jobs:
        lr, c2 = j["line-rate"], j["calibrated"]
        lines += [f"## {j['collective']} on {j['topology']}", "",
                  f"line-rate frontier: {', '.join(lr['points'])}; cost model 2 leaves out "
                  f"{', '.join(c2['left_out']) or 'none'}.", "",
                  "| size | line-rate: fastest | us | vs | x | cost model 2: fastest | us | "
                  "vs | x |", "| --- | --- | ---: | --- | ---: | --- | ---: | --- | ---: |"]
        for size in lr["at"]:
            a, b = lr["at"][size], c2["at"][size]
            lines.append(f"| {size} | {a['fastest']} | {a['us']:.1f} | {a['reference']} | "
                         f"{a['speedup']:.2f} | {b['fastest']} | {b['us']:.1f} | "
                         f"{b['reference']} | {b['speedup']:.2f} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps({"machine": machine, "jobs": jobs},
                                                       indent=1) + "\n")
        Path(f"{args.out}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
