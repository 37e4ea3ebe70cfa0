#!/usr/bin/env python3
"""Packed trees against the cut bound: how close, how fast.

    python bench/bench_trees.py                      # every job: ~10 min on 2 cores
    python bench/bench_trees.py --jobs dgx1,torus    # jobs whose name has a substring
    python bench/bench_trees.py --out bench/results/mine
    python bench/bench_trees.py --scale              # 128-512 GPUs: ~10 min on 2 cores

What it measures (issue 15: "bandwidth end exactly at the cut bound ... on every
built-in, every generator up to 64 GPUs, and dgx2xK, dgxh100xK"). For each topology and
each of allgather, broadcast (root 0), allreduce and gather (root 0: paths of a flow;
reduce, reducescatter and scatter are the same on the reversed links), one call of synth.construct.tree_schedules.tree_search,
the construction `synth COLLECTIVE --method auto` runs (given the bound, as there), with
a deadline of T seconds (default 300). Recorded per job:

- seconds: the whole call (splitting, packing, 11 pipelines built and verified);
- steady / bound: rounds per chunk of a step where every level of the pipeline is busy
  (the deepest pipeline's middle step, over its stride), against the physical cut bound
  (synth.bounds). 1 exactly (a Fraction equal) means the trees reach the bound and only
  the pipeline's fill stands between;
- best / bound: the best point's R/C (1024 batches: the fill included);
- depth (program steps of one batch) and the packing's summary (trees per root, how
  many distinct).

Jobs run one at a time, in this process, on the working tree's code (the commit is
recorded; a tree with uncommitted changes is refused). This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_scale import machine  # noqa: E402
from bench.machine import record_stem, recorded_machine  # noqa: E402
from synth.bounds import bounds  # noqa: E402
from synth.construct.tree_schedules import (steady_rounds_per_chunk,  # noqa: E402
                                            tree_search)
from synth.schedule.collectives import make_collective  # noqa: E402
from synth.search.pareto import Limits  # noqa: E402
from synth.topology.catalog import resolve  # noqa: E402
from synth.topology.linkmodel import lower_with_routes  # noqa: E402

TOPOLOGIES = ["dgx1", "dgx2", "dgxa100", "dgxh100", "ndv2", "ring:8", "line:8", "fc:8",
              "switch:8", "torus:4x4", "torus:8x8", "hypercube:4", "hypercube:6",
              "mesh:4x4", "dgx2x2", "dgx2x4", "dgxh100x2", "dgxh100x4", "dgxh100x8",
              "dgxa100x4", "ndv2x4"]
COLLECTIVES = [("allgather", None), ("broadcast", 0), ("allreduce", None), ("gather", 0)]
# --scale: past 64 GPUs trees are packed under the symmetry of the boxes
# (synth.construct.symmetric); gather's paths are one max-flow at any size
AT_SCALE = [f"{box}x{k}" for box in ("dgx2", "dgxh100", "dgxa100") for k in (8, 16, 32)] \
    + ["dgxh100x64"]


def run_job(topo: str, name: str, root, seconds: float) -> dict:
    start = time.monotonic()
    lowering = lower_with_routes(resolve(topo))
    model = lowering.model
    b = bounds(lowering, make_collective(name, model.ranks, 1, root))
    bound_seconds = time.monotonic() - start
    start = time.monotonic()
    search = tree_search(model, name, root, Limits(time_limit=seconds),
                         start + seconds, b.rounds_per_chunk)
    took = time.monotonic() - start
    row = {"job": f"{topo} {name}", "ranks": model.ranks, "seconds": round(took, 2),
           "bound_seconds": round(bound_seconds, 2), "stopped": search.stopped,
           "bound": str(b.rounds_per_chunk)}
    if not search.points:
        return row
    best = min(search.points, key=lambda p: p.ratio)
    row.update(best_over_bound=float(best.ratio / b.rounds_per_chunk),
               depth=len(best.schedule.steps), batches=best.schedule.batches)
    # the best steady state among the deepest pipelines (allreduce builds several)
    most = max(p.schedule.batches for p in search.points)
    steady = min((s for p in search.points if p.schedule.batches == most
                  and (s := steady_rounds_per_chunk(p.schedule)) is not None), default=None)
    if steady is not None:
        row.update(steady=str(steady), steady_over_bound=float(steady / b.rounds_per_chunk),
                   at_bound=steady == b.rounds_per_chunk)
    return row


def markdown(doc: dict) -> str:
    lines = ["# Packed trees against the cut bound", "",
             f"- Date: {doc['date']}", f"- Machine: {_machine(doc['machine'])}",
             f"- Code measured: {doc['code']}", f"- Command: `{doc['command']}`",
             f"- Deadline per job: {doc['seconds']} s", "",
             "steady / bound: rounds per chunk of a pipeline step with every level busy, "
             "over the physical cut bound (1 exactly: a Fraction equal to it). best / "
             "bound: the best point, 1024 batches, fill included.", "",
             f"**Summary:** {doc['summary']}", "",
             "seconds: the tree search (packing, then 11 pipelines built and verified); "
             "lowering + bound: before it, not counted in it.", "",
             "| job | ranks | seconds | lowering + bound s | steady / bound | "
             "exactly at the bound | best / bound | depth | trees |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for r in doc["rows"]:
        lines.append(
            f"| {r['job']} | {r['ranks']} | {r['seconds']:.1f} | "
            f"{r.get('bound_seconds', float('nan')):.1f} | "
            f"{r.get('steady_over_bound', float('nan')):.4f} | "
            f"{'yes' if r.get('at_bound') else 'no'} | "
            f"{r.get('best_over_bound', float('nan')):.4f} | {r.get('depth', '-')} | "
            f"{r['stopped']} |")
    return "\n".join(lines) + "\n"


def _machine(m: dict) -> str:
    return (f"{m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
            f"{m['memory_gib']} GiB; {m['os']}; Python {m['python']}, "
            f"networkx {m['networkx']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", default="")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--out", default="")
    parser.add_argument("--scale", action="store_true",
                        help="the 128-512 GPU jobs instead")
    args = parser.parse_args(argv)
    wanted = [w for w in args.jobs.split(",") if w]
    if wanted and not any(w in f"{t} {n}" for t in (AT_SCALE if args.scale else TOPOLOGIES)
                          for n, _ in COLLECTIVES for w in wanted):
        parser.error(f"no job matches --jobs {args.jobs!r}")
    recorded = recorded_machine(REPO, "bench_trees", True)
    if recorded is None:
        return 2
    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    rows = []
    for topo in AT_SCALE if args.scale else TOPOLOGIES:
        for name, root in COLLECTIVES:
            job = f"{topo} {name}"
            if wanted and not any(w in job for w in wanted):
                continue
            rows.append(run_job(topo, name, root, args.seconds))
            r = rows[-1]
            print(f"{job}: {r['seconds']:.1f} s, steady/bound "
                  f"{r.get('steady_over_bound', float('nan')):.4f}, best/bound "
                  f"{r.get('best_over_bound', float('nan')):.4f}, {r['stopped']}",
                  flush=True)
    exact = sum(1 for r in rows if r.get("at_bound"))
    doc = {"date": date, "machine": machine(recorded), "code": head,
           "command": "python bench/bench_trees.py " + shlex.join(argv or sys.argv[1:]),
           "seconds": args.seconds, "rows": rows,
           "summary": f"{len(rows)} jobs; steady state exactly at the bound in {exact}; "
                      f"slowest {max((r['seconds'] for r in rows), default=0):.1f} s"}
    out = Path(args.out) if args.out else record_stem(REPO, f"trees{'-scale' * args.scale}")
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(doc["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
