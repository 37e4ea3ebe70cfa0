#!/usr/bin/env python3
"""The frontier against the baselines: best predicted time at 1 KB, 1 MB, 64 MB and 1 GB.

    python bench/bench_frontier.py                       # every job (52): ~10 min on 2 cores
    python bench/bench_frontier.py --jobs dgx1,'ring:8 allreduce'
    python bench/bench_frontier.py --time-limit 60 --out bench/results/mine

What it measures (issue 15: "a table per topology: best predicted time at 1 KB, 1 MB,
64 MB and 1 GB, for the frontier, the best baseline and NCCL-style ring and tree; the
frontier never slower"). For each topology (dgx1, ring:8, torus:4x4, hypercube:4,
dgxh100, dgxa100, dgx2, dgxh100x2, dgx2x2, dgx2x4) and each of allgather,
reducescatter, allreduce, broadcast and reduce (and alltoall on dgx1 and ring:8), it
runs in a child process

    python3 -m synth compare COLLECTIVE --topo TOPO [--root 0] \\
        --sizes 1KB,1MB,64MB,1GB --time-limit T --model line-rate --json

with --root 0 for the rooted collectives (broadcast, reduce) and T = 30 s. From the
rows it prints (kind "synth": the frontier's points; kind "baseline": ring, double
binary tree, recursive doubling, direct, hierarchical, whichever apply), it records
per size: the frontier's best time (the minimum over its points, and which point; a
point that is a baseline is named "synth S.. R.. C.. = NAME"), the best baseline's time
and name, the ring's time (the best baseline whose name starts with "ring"), the
double binary tree's time, and frontier / best baseline. All times are the alpha-beta
model's predictions (synth.schedule.cost), not measurements on hardware; the wall
seconds of each child are recorded but are not the point.

A cell (job, size) counts as a tie when the frontier is within 1e-9 (relative) of the
best baseline, as faster when it is below, as slower when it is above. A slower cell
is a bug (the baselines are candidates on the frontier) and the markdown says so at the
top. Jobs without a baseline (alltoall) are listed but not counted.

Jobs run one at a time (the machine has 2 cores). The code measured is a snapshot of
the committed HEAD (bench_scale.snapshot: `git archive HEAD synth topologies
pyproject.toml`, checked to be what the children import); every child gets an empty
solver cache of its own and runs in the snapshot's folder. A child still running
T + 120 s after it started is killed (with its process group) and recorded as DNF; a
child that fails is recorded with its exit code and the last line of its stderr.

Options:
    --time-limit T   seconds of synthesis per job (compare's --time-limit; default 30)
    --jobs A,B       only the jobs whose name ("TOPO COLLECTIVE", e.g. "dgx1 allreduce")
                     contains one of the substrings
    --out PREFIX     results go to PREFIX.json and PREFIX.md
                     (default bench/results/frontier-DATE, DATE from `date -u`)

This is a benchmark, not a test: it asserts nothing. The numbers mean something only
with the commit, machine and date recorded beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_readme import run
from bench_scale import REPO, committed, machine, snapshot
from machine import record_stem, recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent

TOPOLOGIES = ["dgx1", "ring:8", "torus:4x4", "hypercube:4", "dgxh100", "dgxa100", "dgx2",
              "dgxh100x2", "dgx2x2", "dgx2x4"]
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]
ALLTOALL_TOPOS = ["dgx1", "ring:8"]
ROOTED = {"broadcast", "reduce"}
SIZES = ["1KB", "1MB", "64MB", "1GB"]
DEFAULT_TIME_LIMIT = 30.0
GRACE = 120.0  # a child is killed this long after its time limit
REL_TOL = 1e-9  # frontier within this (relative) of the best baseline: a tie


# --- the jobs --------------------------------------------------------------------

def all_jobs() -> list[dict]:
    jobs = []
    for topo in TOPOLOGIES:
        colls = COLLECTIVES + (["alltoall"] if topo in ALLTOALL_TOPOS else [])
        for coll in colls:
            jobs.append({"topology": topo, "collective": coll,
                         "root": 0 if coll in ROOTED else None})
    return jobs


def job_name(job: dict) -> str:
    return f"{job['topology']} {job['collective']}"


# --- one job ---------------------------------------------------------------------

def run_job(job: dict, code: Path, time_limit: float) -> dict:
    """`synth compare --json` in a child (bench_readme.run, with an empty solver cache):
    wall seconds, exit code, the JSON it printed."""
    args = ["compare", job["collective"], "--topo", job["topology"]]
    if job["root"] is not None:
        args += ["--root", str(job["root"])]
    args += ["--sizes", ",".join(SIZES), "--time-limit", f"{time_limit:g}",
             "--model", "line-rate", "--json"]  # the alpha-beta model its records quote
    hard = time_limit + GRACE
    load_before = os.getloadavg()[0]
    cache = Path(tempfile.mkdtemp(prefix="synth-frontier-cache-"))  # empty: a cold run
    try:
        child = run(args, code, code, cache, limit=hard)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out, err = child["stdout"], child["stderr"]
    r = dict(job, command=shlex.join(["python3", "-m", "synth", *args]),
             wall_seconds=child["seconds"], exit_code=child["exit"], status="ok",
             load_before=round(load_before, 2), load_after=round(os.getloadavg()[0], 2))
    data = None
    if child["killed"]:
        r["status"] = "DNF"
        r["error"] = f"killed after {hard:g} s (time limit + {GRACE:g} s)"
    else:
        try:
            data = json.loads(out[out.find("{"):]) if "{" in out else None
        except json.JSONDecodeError:
            data = None
        if child["exit"] != 0 or data is None:
            r["status"] = "error"
            r["error"] = (err.strip().splitlines() or
                          [f"exit code {child['exit']}, no JSON on stdout"])[-1][:500]
    if r["status"] != "ok":
        r["stderr_tail"] = err
        r["cells"] = []
        return r
    r.update(complete=data.get("complete"), bounds=data.get("bounds"),
             winners=data.get("winners"), rows=data.get("rows", []),
             cells=cells(data.get("rows", [])))
    return r


def cells(rows: list[dict]) -> list[dict]:
    """Per size: the frontier's best, the best baseline, ring, tree and the verdict."""
    synth = [r for r in rows if r["kind"] == "synth"]
    base = [r for r in rows if r["kind"] == "baseline"]
    out = []
    for size in SIZES:
        def t(r):
            return r["sizes"][size]["time_us"]
        f = min(synth, key=t, default=None)
        b = min(base, key=t, default=None)
        rings = [r for r in base if r["name"].startswith("ring")]
        ring = min(rings, key=t, default=None)
        tree = next((r for r in base if r["name"] == "double binary tree"), None)
        c = {"size": size,
             "frontier_us": f and t(f), "frontier_point": f and f["name"],
             "frontier_points": len(synth),
             "best_baseline_us": b and t(b), "best_baseline": b and b["name"],
             "ring_us": ring and t(ring), "ring": ring and ring["name"],
             "tree_us": tree and t(tree),
             "baselines": {r["name"]: t(r) for r in base}}
        if f is None or b is None:
            c["ratio"] = None
            c["verdict"] = "no frontier" if f is None else "no baseline"
        else:
            c["ratio"] = t(f) / t(b)
            slower = [r["name"] for r in base if t(f) > t(r) * (1 + REL_TOL)]
            if slower:
                c["verdict"] = "slower"
                c["slower_than"] = slower
            elif t(f) < t(b) * (1 - REL_TOL):
                c["verdict"] = "faster"
            else:
                c["verdict"] = "tie"
        out.append(c)
    return out


# --- reporting -------------------------------------------------------------------

def us(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def point(name: str | None) -> str:
    return "-" if name is None else name.removeprefix("synth ")


def counts(runs: list[dict]) -> dict:
    verdicts = [c["verdict"] for r in runs for c in r["cells"]]
    return {"cells": sum(v in ("faster", "tie", "slower") for v in verdicts),
            "faster": verdicts.count("faster"), "tie": verdicts.count("tie"),
            "slower": verdicts.count("slower"),
            "no_baseline": verdicts.count("no baseline"),
            "no_frontier": verdicts.count("no frontier"),
            "jobs": len(runs), "jobs_ok": sum(r["status"] == "ok" for r in runs),
            "jobs_dnf": sum(r["status"] == "DNF" for r in runs),
            "jobs_error": sum(r["status"] == "error" for r in runs)}


def summary_line(n: dict) -> str:
    return (f"{n['cells']} (job, size) cells compared: frontier strictly faster than the "
            f"best baseline in {n['faster']}, tied in {n['tie']}, slower in {n['slower']}"
            + (f"; {n['no_baseline']} cells without a baseline" if n["no_baseline"] else "")
            + (f"; {n['no_frontier']} cells without a frontier" if n["no_frontier"] else "")
            + f". Jobs: {n['jobs']}, {n['jobs_ok']} ok, {n['jobs_dnf']} DNF, "
            f"{n['jobs_error']} failed.")


def markdown(doc: dict) -> str:
    m, runs = doc["machine"], doc["runs"]
    n = counts(runs)
    lines = ["# The frontier against the baselines: best predicted time per size", "",
             f"- Date: {m['date']}",
             f"- Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
             f"{m['memory_gib']} GiB; {m['os']}; Python {m['python']}, OR-Tools "
             f"{m['ortools']}, z3 {m['z3']}, networkx {m['networkx']}",
             f"- Code measured: {doc['code']['what']} \"{doc['code']['subject']}\"",
             f"- Command: `{doc['command']}`",
             f"- Per job: `python3 -m synth compare COLLECTIVE --topo TOPO [--root 0] "
             f"--sizes {','.join(SIZES)} --time-limit {doc['time_limit']:g} --json` in a "
             f"child process, empty solver cache, killed after time limit + {GRACE:g} s",
             f"- Wall time: {doc.get('total_seconds', 0) / 60:.1f} min; 1-minute load "
             f"{doc['load_start']:.1f} at the start, {doc.get('load_end', 0):.1f} at the end",
             "", "Times are the alpha-beta model's predictions in us (synth.schedule.cost), "
             "not hardware measurements. Frontier: the best of the synthesized frontier's "
             "points at that size. Ring: the best baseline named ring...; tree: the double "
             "binary tree. A tie is within 1e-9 relative.", "",
             f"**Summary:** {summary_line(n)}", ""]
    slow = [(r, c) for r in runs for c in r["cells"] if c["verdict"] == "slower"]
    if slow:
        lines += ["## !!! BUG: THE FRONTIER IS SLOWER THAN A BASELINE !!!", ""]
        for r, c in slow:
            lines.append(f"- **{job_name(r)} at {c['size']}**: frontier {c['frontier_us']!r} "
                         f"us ({c['frontier_point']}) > {', '.join(c['slower_than'])}; best "
                         f"baseline {c['best_baseline']} {c['best_baseline_us']!r} us "
                         f"(ratio {c['ratio']:.12f})")
        lines.append("")
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        lines += ["## Failed or killed jobs", ""]
        for r in bad:
            lines.append(f"- {job_name(r)}: {r['status']}, exit {r['exit_code']}, wall "
                         f"{r['wall_seconds']:.1f} s: `{r.get('error', '')}`")
        lines.append("")
    lines += ["## Per size", "",
              "| size | cells | faster | ties | slower | frontier / best baseline: median "
              "| min (job) | frontier / ring: median | frontier / tree: median |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for size in SIZES:
        cs = [(r, c) for r in runs for c in r["cells"] if c["size"] == size]
        rated = [(r, c) for r, c in cs if c["ratio"] is not None]
        vs = [c["verdict"] for _, c in cs]
        lo = min(rated, key=lambda rc: rc[1]["ratio"], default=None)
        ring = [c["frontier_us"] / c["ring_us"] for _, c in cs
                if c["ring_us"] and c["frontier_us"] is not None]
        tree = [c["frontier_us"] / c["tree_us"] for _, c in cs
                if c["tree_us"] and c["frontier_us"] is not None]
        med = statistics.median
        lines.append(f"| {size} | {len(rated)} | {vs.count('faster')} | {vs.count('tie')} "
                     f"| {vs.count('slower')} "
                     + (f"| {med([c['ratio'] for _, c in rated]):.4f} " if rated else "| - ")
                     + (f"| {lo[1]['ratio']:.4f} ({job_name(lo[0])}) " if lo else "| - ")
                     + (f"| {med(ring):.3f} " if ring else "| - ")
                     + (f"| {med(tree):.3f} |" if tree else "| - |"))
    for topo in dict.fromkeys(r["topology"] for r in runs):
        rs = [r for r in runs if r["topology"] == topo]
        lines += ["", f"## {topo}", "",
                  "| collective | size | frontier us | best baseline us (name) | ring us "
                  "| tree us | frontier / best baseline | frontier point |",
                  "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |"]
        for r in rs:
            if r["status"] != "ok":
                lines.append(f"| {r['collective']} | all | {r['status']} | - | - | - | - "
                             f"| {r.get('error', '')[:120]} |")
                continue
            for c in r["cells"]:
                ratio = "-" if c["ratio"] is None else f"{c['ratio']:.4f}"
                if c["verdict"] == "slower":
                    ratio = f"**{ratio} SLOWER**"
                elif c["verdict"] == "tie":
                    ratio += " (tie)"
                base = ("-" if c["best_baseline"] is None
                        else f"{us(c['best_baseline_us'])} ({c['best_baseline']})")
                lines.append(f"| {r['collective']} | {c['size']} | {us(c['frontier_us'])} "
                             f"| {base} | {us(c['ring_us'])} | {us(c['tree_us'])} | {ratio} "
                             f"| {point(c['frontier_point'])} |")
        extra = [f"{r['collective']}: {r['wall_seconds']:.1f} s"
                 + ("" if r.get("complete", True) else " (frontier incomplete)")
                 for r in rs]
        lines += ["", "Wall seconds per job: " + ", ".join(extra) + "."]
    lines += ["", "Every row of every comparison (all frontier points and baselines, their "
              "times and algbw per size) and the bounds are in the .json next to this file."]
    return "\n".join(lines) + "\n"


def write(doc: dict, out: Path) -> None:
    Path(f"{out}.json").write_text(json.dumps(doc, indent=1) + "\n")
    Path(f"{out}.md").write_text(markdown(doc))


def progress_line(i: int, n: int, r: dict) -> str:
    if r["status"] != "ok":
        return (f"[{i}/{n}] {job_name(r):28} {r['status']:5} exit {r['exit_code']:>3} "
                f"wall {r['wall_seconds']:6.1f} s  {r.get('error', '')}")
    verdicts = " ".join(f"{c['size']}:{c['verdict']}"
                        + ("" if c["ratio"] is None else f"({c['ratio']:.4f})")
                        for c in r["cells"])
    return (f"[{i}/{n}] {job_name(r):28} ok    wall {r['wall_seconds']:6.1f} s  "
            f"{len(r['rows'])} rows  {verdicts}")


# --- main ------------------------------------------------------------------------

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT,
                    help=f"seconds of synthesis per job (default {DEFAULT_TIME_LIMIT:g}); "
                    f"a child is killed {GRACE:g} s after it")
    ap.add_argument("--jobs", help="comma-separated substrings of job names "
                    "('TOPO COLLECTIVE'); jobs matching any are kept")
    ap.add_argument("--out", help="output prefix (default bench/results/frontier-DATE)")
    args = ap.parse_args(argv)

    jobs = all_jobs()
    if args.jobs:
        wanted = [w.strip() for w in args.jobs.split(",") if w.strip()]
        jobs = [j for j in jobs if any(w in job_name(j) for w in wanted)]
        if not jobs:
            ap.error("no job matches --jobs; names look like 'dgx1 allreduce'")
    out = Path(args.out) if args.out else record_stem(HERE.parent, "frontier")
    if out.suffix in (".md", ".json"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)

    code_dir = Path(tempfile.mkdtemp(prefix="synth-frontier-code-"))
    try:
        code = snapshot(code_dir)
        recorded = recorded_machine(REPO, "bench_frontier", True, committed(code))
        if recorded is None:
            return 2
        doc = {"benchmark": "frontier", "argv": argv,
               "command": shlex.join(["python", "bench/bench_frontier.py", *argv]),
               "machine": machine(recorded), "code": code, "sizes": SIZES,
               "time_limit": args.time_limit, "grace": GRACE, "rel_tol": REL_TOL,
               "load_start": os.getloadavg()[0], "runs": []}
        print(f"frontier benchmark: {len(jobs)} jobs, one at a time; time limit "
              f"{args.time_limit:g} s; writing {out}.json/.md\ncode: {doc['code']['what']}, "
              f"imported from {doc['code']['imported_from']}", flush=True)
        start = time.perf_counter()
        for i, job in enumerate(jobs, 1):
            r = run_job(job, code_dir, args.time_limit)
            doc["runs"].append(r)
            print(progress_line(i, len(jobs), r), flush=True)
            doc["total_seconds"] = time.perf_counter() - start
            doc["load_end"] = os.getloadavg()[0]
            write(doc, out)  # after every job, so that ^C keeps what was measured
    finally:
        shutil.rmtree(code_dir, ignore_errors=True)
    n = counts(doc["runs"])
    print("\n" + summary_line(n))
    if n["slower"]:
        print("!!! BUG: the frontier is slower than a baseline in "
              f"{n['slower']} cells; see {out}.md !!!")
    print(f"wrote {out}.json and {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
