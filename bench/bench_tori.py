#!/usr/bin/env python3
"""synth on 2-D tori against TACOS's published bar (issue 28).

    python bench/bench_tori.py                       # every job, one at a time
    python bench/bench_tori.py --jobs 16x16          # jobs whose name has a substring
    python bench/bench_tori.py --record              # also write bench/results/tori-DATE.*

Each job is one collective on one torus, with the generator's links (25 GB/s, 0.7 us),
run by `synthesize` (what `synth COLLECTIVE --topo torus:RxC` runs, without writing
files) in a fresh process, one at a time. Recorded per job:

- cpu_s: CPU seconds of the whole synthesis (making the topology, routing, bounds,
  greedy matching, trees, baselines, verification), counted after the imports, as the
  TACOS figures are (scipy.optimize's too, 0.4 s, which synth imports only once it
  packs trees: counted inside the clock in records before 2026-12-04; the topology's
  making outside it before 2026-12-05);
- first_cpu_s: CPU seconds until synthesize handed over its first verified frontier
  (on_event "frontier", what synth.anytime writes to disk at once); the bench's own
  handler of those events is not counted, here or in cpu_s (since 2026-12-05b);
- beats_tacos_cpu_s: CPU seconds until a frontier handed over was at least as fast as
  TACOS's fastest point at every message size (where TACOS's points are known:
  torus:8x8 allgather), its times lines in the line-rate model;
- greedy_cpu_s: CPU seconds of greedy matching's first schedule alone (one chunk a
  share, under the torus's translations as the frontier builds it: what TACOS's figure
  measures, one schedule, not verified), from the topology's making, in a process of
  its own;
- best / bound: the frontier's best rounds per chunk over the cut bound;
- us at 1 MiB, 64 MiB, 1 GiB: the frontier's fastest point in the line-rate model
  (latency + size x us/MB), the model TACOS's figures are in;
- peak memory (VmHWM of the job's process).

TACOS's side (astra-sim/tacos v1.3.0, measured on this kind of machine and quoted in
issue 28; not installable from the package registries, so not rerun here): torus:16x16
allgather 1.02 x the bound in 0.45-0.66 CPU s; torus:16x32 1.01 x in 6.1-6.7 CPU s;
torus:8x8 two points, 17 steps (11.9 us + 10.6 us/MB) and 32 steps (22.4 us + 10.0
us/MB), in 0.04 s. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import record_stem, recorded_machine  # noqa: E402

TORI = ("8x8", "16x16", "16x32", "32x32")
COLLECTIVES = ("allgather", "reducescatter", "allreduce")
SIZES = {"1MiB": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30}
TACOS = {("8x8", "allgather"): [(17, 11.9, 10.6), (32, 22.4, 10.0)]}  # steps, us, us/MB

JOB = r"""
import json, resource, sys, time
import scipy.optimize  # an import like the rest: synth imports it once it packs trees
from synth.frontier import synthesize
from synth.schedule.cost import schedule_cost
from synth.search.pareto import Limits
from synth.topology.catalog import resolve

spec, name, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
handed = []  # (CPU s, [(latency us, us per byte)] of the verified frontier handed over)
spent = 0.0  # CPU s of this handler: the bench's, not synth's


def on_event(kind, data):
    global spent
    if kind == "frontier" and data:
        now = time.process_time()
        costs = [schedule_cost(p.schedule) for p in data]
        handed.append((now - start - spent, [(c.latency_us, c.us_per_byte) for c in costs]))
        spent += time.process_time() - now


start = time.process_time()  # the topology's making counted too
topo = resolve(spec)
result = synthesize(topo, name, limits=Limits(time_limit=limit), on_event=on_event)
cpu = time.process_time() - start - spent
costs = [(p, schedule_cost(p.schedule)) for p in result.points]
best = min(p.ratio for p in result.points)
sizes = json.loads(sys.argv[4])
fastest = {k: min(c.time_us(n) for _, c in costs)
           for k, n in sizes.items()}
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"cpu_s": round(cpu, 3), "handed": handed,
                  "best_over_bound": float(best / result.bounds.rounds_per_chunk),
                  "points": [[p.steps, p.rounds, p.chunks, p.schedule.info.get("method")]
                             for p in result.points],
                  "us": {k: round(v, 1) for k, v in fastest.items()},
                  "peak_mib": round(hwm / 1024)}))
"""

# greedy matching's first schedule alone, in a process of its own (so that neither run
# warms the other's caches)
GREEDY_JOB = r"""
import sys, time
import scipy.optimize  # as in JOB: imports are not counted
from synth.construct.greedy import build
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower

start = time.process_time()
topo = resolve(sys.argv[1])
build(lower(topo), sys.argv[2], None, 1, dims=topo.translations)
print(round(time.process_time() - start, 3))
"""


def beats_tacos_cpu_s(handed: list, points: list) -> float | None:
    """CPU seconds until the frontier handed over was at least as fast as TACOS's
    fastest point at every message size (None: never). Times are lines (latency + size
    x slope): their lower envelopes are compared at 0, far out, and wherever two lines
    of either side cross."""
    theirs = [(us, per_mb / 1e6) for _, us, per_mb in points]
    for cpu, ours in handed:
        lines = ours + theirs
        xs = {0.0, 1e15}
        for a, b in lines:
            for c, d in lines:
                if b != d and (c - a) / (b - d) > 0:
                    xs.add((c - a) / (b - d))
        if all(min(a + b * x for a, b in ours) <= min(a + b * x for a, b in theirs) * (1 + 1e-9)
               for x in xs):
            return round(cpu, 3)
    return None


def run_job(torus: str, name: str, limit: float) -> dict:
    out = subprocess.run([sys.executable, "-c", JOB, f"torus:{torus}", name, str(limit),
                          json.dumps(SIZES)], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "SYNTH_CACHE": "0",
                              "PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    row = json.loads(out.stdout)
    greedy = subprocess.run([sys.executable, "-c", GREEDY_JOB, f"torus:{torus}", name],
                            capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    row["greedy_cpu_s"] = float(greedy.stdout) if greedy.returncode == 0 else None
    row["first_cpu_s"] = round(row["handed"][0][0], 3) if row["handed"] else None
    tacos, handed = TACOS.get((torus, name)), row.pop("handed")
    row["beats_tacos_cpu_s"] = beats_tacos_cpu_s(handed, tacos) if tacos else None
    return row


def tacos_us(torus: str, name: str) -> dict | None:
    points = TACOS.get((torus, name))
    if not points:
        return None
    return {k: round(min(us + n / 1e6 * per_mb for _, us, per_mb in points), 1)
            for k, n in SIZES.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", default="", help="only jobs whose name has one of these "
                        "comma-separated substrings ('8x8,16x16 allgather')")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    wanted = [w for w in args.jobs.split(",") if w]
    jobs = [(t, n) for t in TORI for n in COLLECTIVES
            if not wanted or any(w in f"torus:{t} {n}" for w in wanted)]
    if not jobs:
        parser.error(f"no job matches --jobs {args.jobs!r}")
    machine = recorded_machine(REPO, "bench_tori", args.record)
    if machine is None:
        return 2
    with open("/proc/loadavg") as f:
        machine["load_before"] = f.read().split()[:3]
    rows = []
    for torus, name in jobs:
        row = {"job": f"torus:{torus} {name}", **run_job(torus, name, args.time_limit),
               "tacos_us": tacos_us(torus, name)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.record:
        write_record(machine, rows, args.time_limit)
    return 0


def write_record(machine: dict, rows: list[dict], limit: float) -> None:
    stem = record_stem(REPO, "tori")  # never over an earlier record of the day
    stem.with_name(stem.name + ".json").write_text(
        json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")
    lines = [f"# Tori, {machine['date']}", "",
             f"`python3 bench/bench_tori.py --record`, commit {machine['commit']}, "
             f"{machine['cpu']}, {machine['memory_gib']} GiB, Python {machine['python']}, "
             f"load average before {' '.join(machine['load_before'])}; --time-limit {limit:g}; "
             "jobs one at a time in fresh processes.", "",
             "| job | cpu s | first point cpu s | beats TACOS cpu s | greedy cpu s "
             "| best / bound | 1 MiB us | 64 MiB us | 1 GiB us "
             "| TACOS 1 MiB / 64 MiB / 1 GiB us | peak MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['job']} | error: {r['error']} |||||||||")
            continue
        tacos = " / ".join(str(v) for v in r["tacos_us"].values()) if r["tacos_us"] else "-"
        beats = "-" if r["beats_tacos_cpu_s"] is None else r["beats_tacos_cpu_s"]
        lines.append(f"| {r['job']} | {r['cpu_s']} | {r['first_cpu_s']} | {beats} | "
                     f"{r['greedy_cpu_s']} | "
                     f"{r['best_over_bound']:.4f} | {r['us']['1MiB']} | {r['us']['64MiB']} | "
                     f"{r['us']['1GiB']} | {tacos} | {r['peak_mib']} |")
    stem.with_name(stem.name + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
