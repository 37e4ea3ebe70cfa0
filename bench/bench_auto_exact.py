#!/usr/bin/env python3
"""What the exact search adds to the default job (issue 28: its time and memory).

    python bench/bench_auto_exact.py                   # every job
    python bench/bench_auto_exact.py --jobs dgxh100x2  # jobs whose name has a substring
    python bench/bench_auto_exact.py --record          # also bench/results/auto-exact-DATE.*

Each job is `synth COLLECTIVE --topo T --json` as a user runs it, twice, back to back in
child processes on a snapshot of the committed HEAD (bench/bench_scale.py's: `git archive`,
imported through PYTHONPATH, an empty solver cache each): first `--method constructed`
(every construction, no exact search over the whole machine), then `--method auto` (the
default: the same, then the exact search in the time left). The time limit is the
default's, 300 s. Recorded per run: wall seconds, peak resident memory (MiB), the frontier
(cost model 2, the default: the points fastest at some size); per job: the points auto
has that constructed lacks, and the fastest predicted time at 1 KB, 1 MB and 1 GB of each
with their ratio (constructed over auto: above 1, the exact search's point is faster).

Since auto leaves the exact search out past 16 GPUs (synth/exact.py, 2026-12-06), the
two runs of a larger job do the same work; records made at commits before that show
what the exact search added there. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench_scale import committed, run_one, snapshot  # bench/
from machine import record_stem, recorded_machine  # bench/

REPO = Path(__file__).resolve().parent.parent
# 16 GPUs (two boxes), then 32 (two or four); allreduce where its exact search differs
JOBS = [("dgxh100x2", "allgather"), ("dgxh100x2", "allreduce"), ("ndv2x2", "allreduce"),
        ("dgxh100x4", "allgather"), ("dgxh100x4", "allreduce"), ("dgx2x2", "allgather"),
        ("ndv2x4", "allgather"), ("dgxa100x4", "allgather")]
GPUS = {"dgxh100x2": 16, "ndv2x2": 16, "dgxh100x4": 32, "dgx2x2": 32, "ndv2x4": 32,
        "dgxa100x4": 32}
SIZES = ("1KB", "1MB", "1GB")
TIME_LIMIT = 300.0


def fastest(run: dict, size: str) -> float | None:
    """The least predicted time (us) at `size` over the run's frontier."""
    times = [p["predicted_us"][size]["us"] for p in run["points"]
             if p.get("predicted_us") and size in p["predicted_us"]]
    return min(times, default=None)


def only_in(auto: dict, constructed: dict) -> list[str]:
    """auto's frontier points that constructed's lacks, as 'S R C method'."""
    mine = {(p["steps"], p["rounds"], p["chunks"]) for p in constructed["points"]}
    return [f"S{p['steps']} R{p['rounds']} C{p['chunks']} {p['method']}"
            for p in auto["points"] if (p["steps"], p["rounds"], p["chunks"]) not in mine]


def row(topo: str, coll: str, runs: dict) -> str:
    c, a = runs["constructed"], runs["auto"]
    ratios = []
    for size in SIZES:
        tc, ta = fastest(c, size), fastest(a, size)
        ratios.append(f"{tc:.1f} / {ta:.1f} = {tc / ta:.3f}" if tc and ta else "-")
    gpus = a.get("ranks") or "?"
    return (f"| {topo} {coll} | {gpus} | {c['wall_seconds']:.1f} / {a['wall_seconds']:.1f} | "
            f"{c['peak_mb']:.0f} / {a['peak_mb']:.0f} | {len(c['points'])} / "
            f"{len(a['points'])} | " + " | ".join(ratios) + " | "
            + ("; ".join(only_in(a, c)) or "none") + " |")


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [f"# What the exact search adds to the default job, {m['date']}", "",
             f"`python3 bench/bench_auto_exact.py{doc['args']}`, commit {m['commit']}, "
             f"{m['cpu']}, {m['memory_gib']} GiB, Python {m['python']}; load average "
             f"before {doc['load'][0]}, after {doc['load'][1]}; time limit "
             f"{TIME_LIMIT:g} s; each job constructed then auto, one run at a time, cold "
             "solver cache; times predicted in cost model 2 (the default).", "",
             "| job | GPUs | wall s (constructed / auto) | peak MiB | points | 1KB us "
             "(constructed / auto = ratio) | 1MB us | 1GB us | auto's points constructed "
             "lacks |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += [row(j["topology"], j["collective"], j["runs"]) for j in doc["jobs"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", help="comma-separated substrings of 'TOPO COLLECTIVE'")
    ap.add_argument("--record", action="store_true",
                    help="write bench/results/auto-exact-DATE.md and .json")
    args = ap.parse_args(argv)
    wanted = args.jobs.split(",") if args.jobs else None
    jobs = [(t, c) for t, c in JOBS if not wanted or any(w in f"{t} {c}" for w in wanted)]
    with tempfile.TemporaryDirectory(prefix="synth-auto-exact-") as code_dir:
        code = snapshot(Path(code_dir))
        machine = recorded_machine(REPO, "bench_auto_exact", args.record, committed(code))
        if machine is None:
            return 2
        load = [round(os.getloadavg()[0], 2)]
        done = []
        for topo, coll in jobs:
            runs = {}
            for method in ("constructed", "auto"):
                job = {"topology": topo, "collective": coll, "method": method,
                       "time_limit": TIME_LIMIT, "gpus": GPUS[topo]}
                runs[method] = run_one(job, Path(code_dir))
                r = runs[method]
                print(f"{topo} {coll} {method}: {r['status']} {r['wall_seconds']:.1f} s "
                      f"{r['peak_mb']:.0f} MiB {len(r['points'])} points", flush=True)
            done.append({"topology": topo, "collective": coll, "runs": runs})
        load.append(round(os.getloadavg()[0], 2))
    doc = {"machine": machine, "code": code, "load": load, "jobs": done,
           "args": "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))}
    print(markdown(doc))
    if args.record:
        stem = record_stem(REPO, "auto-exact")
        Path(f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
        Path(f"{stem}.md").write_text(markdown(doc))
        print(f"recorded {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
