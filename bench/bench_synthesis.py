#!/usr/bin/env python3
"""Frontier-synthesis benchmark: every job under every solver configuration, one run.

    python bench/bench_synthesis.py                      # the full run (~20 min on 2 cores)
    python bench/bench_synthesis.py --quick              # dgx1 allgather, cpsat-4: a smoke test
    python bench/bench_synthesis.py --time-limit 60 --out bench/results/mine

The code measured is a snapshot taken at the start: by default the committed HEAD
(`git archive`), with --code worktree a copy of the working tree's synth/ and
topologies/. Other people edit synth/ while benchmarks run; without the snapshot one
run could mix versions. Each (job, configuration) pair runs
synth.frontier.synthesize from that snapshot in a child process of its own (a fresh
interpreter: no solver state or warm caches carried from one run to the next, and a
hard wall-clock cap in case a solver ignores its own time limit). The
results go to <out>.md (tables) and <out>.json (everything, including every solver
call), with the machine they ran on. This is a benchmark, not a test: it asserts
nothing, but it flags prominently any (S, R, C) instance on which two configurations
disagree about SAT/UNSAT, any pair of complete searches that disagree about the
frontier, and any point below the bandwidth bound. Each of those would be a bug.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

from machine import (Snapshot, content_sha256, record_stem, recorded_machine,  # bench/
                     version)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# (topology, collective, root)
JOBS = [
    ("dgx1", "allgather", None),
    ("dgx1", "reducescatter", None),
    ("dgx1", "allreduce", None),
    ("dgx1", "alltoall", None),
    ("dgx1", "broadcast", 0),
    ("ring:8", "allgather", None),
    ("hypercube:3", "allreduce", None),
    ("switch:4", "broadcast", 0),
]

# name -> (backend, CP-SAT workers); the first is the reference the ratios divide by
CONFIGS = {
    "cpsat-4": ("cpsat", 4),
    "cpsat-2": ("cpsat", 2),
    "cpsat-8": ("cpsat", 8),
    "z3": ("z3", 1),
}
REFERENCE = "cpsat-4"

DEFAULT_TIME_LIMIT = 120.0
Z3_CAP = 120.0  # Z3 is slow on some instances: never more than this per job
HARD_GRACE = 60.0  # the child is killed this long after its search's time limit

# Published figures, NOT measured here (SCCL, Cai et al., PPoPP 2021, as the issue
# quotes them): job -> (seconds, what they timed).
SCCL_QUOTED = {
    "dgx1 allgather": (23.0, "SCCL, full dgx1 allgather frontier"),
    "dgx1 allreduce": (480.0, "SCCL, dgx1 allreduce with 6 chunks and a hand-given bound"),
}


def job_name(job) -> str:
    topo, name, root = job
    return f"{topo} {name}" + (f" root={root}" if root not in (None, 0) else "")


# --- one (job, configuration) run, in a child process --------------------------------

def run_one(job, backend: str, workers: int, time_limit: float) -> dict:
    """Synthesize one frontier; everything about it as plain data."""
    from synth.bounds import bounds
    from synth.frontier import default_max_steps, synthesize
    from synth.search.pareto import Limits
    from synth.schedule.collectives import make_collective
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower_with_routes

    topo_name, name, root = job
    topo = resolve(topo_name)
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    # every default filled in: 8 chunks, 3 steps past the hop bound
    limits = Limits(default_max_steps(b), 8, time_limit, backend, workers=workers)
    timeline, part, start = [], [name], time.perf_counter()

    def on_event(kind, data):
        if kind == "search":
            part[0] = data
        elif kind == "point":
            timeline.append({"part": part[0], "t": round(time.perf_counter() - start, 3),
                             "S": data.steps, "R": data.rounds, "C": data.chunks,
                             "proven": data.proven})

    result = synthesize(topo, name, root, limits, on_event)
    wall = time.perf_counter() - start
    bound = result.bounds.rounds_per_chunk
    points = [{"S": p.steps, "R": p.rounds, "C": p.chunks, "ratio": str(p.ratio),
               "ratio_to_bound": str(p.ratio / bound),
               "ratio_to_bound_float": float(p.ratio / bound), "proven": p.proven}
              for p in result.points]
    best = min((p.ratio / bound for p in result.points), default=None)
    searches = {
        part_name: {"stopped": s.stopped, "complete": s.complete,
                    "points": [[p.steps, p.rounds, p.chunks, p.proven] for p in s.points],
                    "attempts": [[a.steps, a.rounds, a.chunks, a.status, round(a.seconds, 3),
                                  a.method] for a in s.attempts]}
        for part_name, s in result.searches.items()}
    out_of_time = any(s.stopped == "out of time" for s in result.searches.values())
    return {
        "status": "ok",
        "wall_seconds": round(wall, 3),
        "result_seconds": round(result.seconds, 3),
        "solver_calls": sum(len(s.attempts) for s in result.searches.values()),
        "solver_seconds": round(sum(a.seconds for s in result.searches.values()
                                    for a in s.attempts), 3),
        "complete": result.complete,
        "out_of_time": out_of_time,
        "finished": result.complete and not out_of_time,
        "limits": {"max_steps": limits.max_steps, "max_chunks": limits.max_chunks,
                   "time_limit": limits.time_limit, "backend": limits.backend,
                   "workers": limits.workers},
        "bounds": {"steps": result.bounds.steps, "rounds_per_chunk": str(bound)},
        "frontier": points,
        "best_ratio_to_bound": None if best is None else str(best),
        "best_ratio_to_bound_float": None if best is None else float(best),
        "reached_bandwidth_bound": best is not None and best == 1,
        "searches": searches,
        "timeline": timeline,
    }


def _orphan_watch(parent: int) -> None:
    """Exit if the benchmark that started this child dies: no stray solver runs."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _child(conn, code_dir, parent, job, backend, workers, time_limit):
    threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    try:
        sys.path.insert(0, code_dir)  # the snapshot, ahead of any installed synth
        import synth
        if not Path(synth.__file__).resolve().is_relative_to(Path(code_dir).resolve()):
            raise RuntimeError(f"imported synth from {synth.__file__}, not the snapshot")
        conn.send(run_one(job, backend, workers, time_limit))
    except BaseException as e:  # reported, not raised: the run goes on
        conn.send({"status": "error", "error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def run_isolated(code_dir: str, job, backend: str, workers: int, time_limit: float) -> dict:
    """run_one in a fresh process, killed (it alone) if it overruns its limit badly."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, code_dir, os.getpid(), job, backend,
                                            workers, time_limit))
    start = time.perf_counter()
    proc.start()
    send.close()
    hard = time_limit + HARD_GRACE
    out = None
    if recv.poll(hard):
        try:
            out = recv.recv()
        except EOFError:
            out = None
    if out is None:
        if proc.is_alive():
            proc.kill()
            out = {"status": "killed",
                   "error": f"no answer within {hard:.0f} s: killed by the benchmark"}
        else:
            out = {"status": "error", "error": f"child exited with code {proc.exitcode}"}
    proc.join(10)
    out["process_seconds"] = round(time.perf_counter() - start, 3)
    if out["status"] != "ok":
        out.update(wall_seconds=out["process_seconds"], finished=False, complete=False,
                   solver_calls=None, frontier=[], best_ratio_to_bound=None,
                   best_ratio_to_bound_float=None, searches={})
    return out


# --- the code measured ------------------------------------------------------------

CODE_PATHS = ("synth", "topologies")


def snapshot(kind: str, into: Path) -> dict:
    """Copy the code to measure into `into`; what it is, for the record."""
    commit = _cmd("git", "rev-parse", "--short", "HEAD") or "unknown"
    if kind == "head":
        archive = subprocess.run(["git", "archive", "HEAD", *CODE_PATHS], cwd=REPO,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        what = f"committed HEAD {commit} (git archive of {', '.join(CODE_PATHS)})"
    else:
        for name in CODE_PATHS:
            shutil.copytree(REPO / name, into / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        what = (f"working tree at the start, on top of {commit}, including uncommitted "
                f"changes")
    return {"kind": kind, "what": what, "commit": commit, "sha256": content_sha256(into)}


# --- the machine -----------------------------------------------------------------

def _cmd(*args) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, cwd=REPO,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(recorded: dict) -> dict:
    """recorded_machine's fields (bench/machine.py) with the cores, OS and solver
    versions; the date as `date` prints it."""
    return {
        **recorded,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "os": platform.platform(),
        "ortools": version("ortools"),
        "z3": version("z3"),
        "date": _cmd("date"),
        "git_commit": recorded["commit"],
        # others edit synth/ while benchmarks run: the commit alone may not be the code
        "git_uncommitted_code": recorded["uncommitted"],
    }


# --- checks across configurations ------------------------------------------------

def cross_check(job: str, runs: dict) -> list[str]:
    """Disagreements between configurations on one job; each one is a bug."""
    problems = []
    answers = {}  # (part, S, R, C) -> {config: status}
    for config, r in runs.items():
        for part, s in r.get("searches", {}).items():
            for steps, rounds, chunks, status, _, _ in s["attempts"]:
                if status in ("sat", "unsat"):
                    answers.setdefault((part, steps, rounds, chunks), {})[config] = status
    for (part, steps, rounds, chunks), by in sorted(answers.items()):
        if len(set(by.values())) > 1:
            problems.append(f"{job}: {part} (S={steps}, R={rounds}, C={chunks}) is "
                            + ", ".join(f"{s} for {c}" for c, s in sorted(by.items())))
    # a proven point at S with ratio r: no schedule with S steps has a smaller R / C
    # (C <= max_chunks), so no configuration may have one
    for config, r in runs.items():
        for part, s in r.get("searches", {}).items():
            for steps, rounds, chunks, proven in s["points"]:
                if not proven:
                    continue
                for other, o in runs.items():
                    cheaper = [a for a in o.get("searches", {}).get(part, {}).get(
                        "attempts", []) if a[0] == steps and a[3] == "sat"
                        and a[2] <= r["limits"]["max_chunks"]
                        and Fraction(a[1], a[2]) < Fraction(rounds, chunks)]
                    for a in cheaper:
                        problems.append(
                            f"{job}: {part} ({steps},{rounds},{chunks}) is proven by "
                            f"{config}, but {other} found (S={a[0]}, R={a[1]}, C={a[2]}) "
                            f"SAT, a smaller R/C")
    finished = {c: r for c, r in runs.items() if r.get("finished")}
    shapes = {c: sorted((p["S"], p["R"], p["C"]) for p in r["frontier"])
              for c, r in finished.items()}
    if len({tuple(v) for v in shapes.values()}) > 1:
        problems.append(f"{job}: complete searches disagree on the frontier: "
                        + "; ".join(f"{c}: {fmt_shape(v)}" for c, v in shapes.items()))
    for config, r in runs.items():
        for p in r.get("frontier", []):
            if Fraction(p["ratio_to_bound"]) < 1:
                problems.append(f"{job}: {config} found ({p['S']},{p['R']},{p['C']}) "
                                f"below the bandwidth bound")
    return problems


def fmt_shape(points) -> str:
    return " ".join(f"({s},{r},{c})" for s, r, c in points) or "-"


# --- reporting -------------------------------------------------------------------

def fmt_seconds(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status'].upper()} {r['wall_seconds']:.0f}"
    mark = "" if r["finished"] else " DNF-time" if r.get("out_of_time") else " DNF-call"
    return f"{r['wall_seconds']:.1f}{mark}"


def fmt_frontier(r: dict) -> str:
    if not r.get("frontier"):
        return "-" if r["status"] == "ok" else r.get("error", r["status"])
    return " ".join(f"({p['S']},{p['R']},{p['C']}){'*' if p['proven'] else ''}"
                    for p in r["frontier"])


def fmt_best(r: dict) -> str:
    b = r.get("best_ratio_to_bound")
    return "-" if b is None else (f"{b} (={float(Fraction(b)):.3f})" if "/" in b else b)


def speed_ratio(num: dict, den: dict) -> str:
    """num seconds / den seconds; '>' when only num stopped early, '<' when only den."""
    if num["wall_seconds"] is None or not den["wall_seconds"]:
        return "-"
    x = num["wall_seconds"] / den["wall_seconds"]
    if num["finished"] and den["finished"]:
        return f"{x:.2f}"
    if den["finished"]:
        return f">{x:.2f}"
    if num["finished"]:
        return f"<{x:.2f}"
    return f"~{x:.2f} (neither finished)"


def markdown(doc: dict) -> str:
    m, configs, jobs = doc["machine"], doc["configs"], doc["jobs"]
    lines = [f"# Synthesis benchmark, {m['date']}", "",
             f"`{shlex.join(['python', 'bench/bench_synthesis.py', *doc['argv']])}`",
             "", "## Machine", "",
             f"- CPU: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
             f"{m['memory_gib']} GiB memory",
             f"- {m['os']}; Python {m['python']}, OR-Tools {m['ortools']}, Z3 {m['z3']}",
             f"- git commit {m['git_commit']}; code measured: {doc['code']['what']}, "
             f"sha256 of the snapshot {doc['code']['sha256']}"
             + (f" (uncommitted changes in the working tree at the start, "
                f"{'not ' if doc['code']['kind'] == 'head' else ''}measured: "
                f"{', '.join(m['git_uncommitted_code'])})" if m["git_uncommitted_code"]
                else ""),
             f"- load average (1 min) at the start {doc['load_start']:.2f}, "
             f"at the end {doc['load_end']:.2f}; total run {doc['total_seconds']:.0f} s",
             "", "Caveats: " + " ".join(doc["caveats"]), "",
             "## Seconds per frontier", "",
             "Wall seconds of `synth.frontier.synthesize` (lowering, bounds, every solver "
             "call, decoding and verification), in a fresh process. Did not finish (the "
             "frontier below is what the search had, not proven complete): DNF-time, the "
             "search ran out of its time limit; DNF-call, it ended in time but at least "
             "one solver call hit its per-call cap (a fifth of the search's limit, at "
             "least 5 s) and was skipped. Calls: solver calls.", "",
             "| job | " + " | ".join(f"{c} s | calls" for c in configs) + " |",
             "| --- |" + " ---: | ---: |" * len(configs)]
    for job, runs in jobs.items():
        cells = []
        for c in configs:
            r = runs.get(c)
            cells += ["-", "-"] if r is None else [fmt_seconds(r), str(r["solver_calls"] or "-")]
        lines.append(f"| {job} | " + " | ".join(cells) + " |")
    lines += ["", "## Frontiers", "",
              "(S, R, C): steps, rounds, chunks per share; `*` marks a point proven "
              "Pareto-optimal (C <= max_chunks). Best/bound: the frontier's smallest "
              "R/C over the bandwidth bound (1 = at the bound).", "",
              "| job | config | complete | frontier | best/bound | stopped |",
              "| --- | --- | --- | --- | --- | --- |"]
    for job, runs in jobs.items():
        for c, r in runs.items():
            stopped = "; ".join(f"{p}: {s['stopped']}" if len(r["searches"]) > 1
                                else s["stopped"] for p, s in r["searches"].items())
            done = "yes" if r["finished"] else "**no**"
            lines.append(f"| {job} | {c} | {done} | {fmt_frontier(r)} | {fmt_best(r)} | "
                         f"{stopped or r.get('error', '')} |")
    others = [c for c in configs if c != REFERENCE]
    if REFERENCE in configs and others:
        lines += ["", f"## Ratios of seconds (config / {REFERENCE})", "",
                  "`>x`: only the reference finished, so the true ratio is larger; `<x`: "
                  "only the other one did.", "",
                  "| job | " + " | ".join(f"{c} / {REFERENCE}" for c in others) + " |",
                  "| --- |" + " ---: |" * len(others)]
        for job, runs in jobs.items():
            if REFERENCE in runs:
                lines.append(f"| {job} | " + " | ".join(
                    speed_ratio(runs[c], runs[REFERENCE]) if c in runs else "-"
                    for c in others) + " |")
    if doc["sccl"]:
        lines += ["", "## Against SCCL's published times (quoted, not measured here)", "",
                  "The SCCL seconds are quoted from the SCCL paper as the issue cites them, "
                  "on a different machine, solver and encoding; only our seconds were "
                  "measured here.", "",
                  "| job | SCCL (quoted) | what SCCL timed | ours (cpsat-4, measured) | "
                  "speed-up | our frontier |", "| --- | ---: | --- | ---: | ---: | --- |"]
        for row in doc["sccl"]:
            lines.append(f"| {row['job']} | {row['sccl_seconds']:.0f} s | {row['what']} | "
                         f"{row['ours']} | {row['speedup']} | {row['frontier']} |")
    lines += ["", "## Cross-checks between configurations", ""]
    if doc["problems"]:
        lines += ["**BUG: configurations disagree, or a run failed.**", ""] + [f"- {p}" for p in doc["problems"]]
    else:
        lines.append("No (S, R, C) instance got SAT from one configuration and UNSAT from "
                     "another; no configuration found a schedule cheaper (smaller R/C at the same S) "
                     "than a point another proved optimal; complete searches agree on every "
                     "frontier; no point lies below its bandwidth bound.")
    return "\n".join(lines) + "\n"


def sccl_rows(jobs: dict) -> list[dict]:
    rows = []
    for job, (seconds, what) in SCCL_QUOTED.items():
        r = jobs.get(job, {}).get(REFERENCE)
        if r is None or r["status"] != "ok":  # no speed-up from a run that failed
            continue
        ours = fmt_seconds(r)
        speedup = seconds / r["wall_seconds"] if r["wall_seconds"] else None
        rows.append({"job": job, "sccl_seconds": seconds, "what": what,
                     "ours": ours, "ours_seconds": r["wall_seconds"],
                     "ours_finished": r["finished"],
                     "speedup": "-" if speedup is None else
                     f"{speedup:.0f}x" + ("" if r["finished"] else " (ours did not finish)"),
                     "frontier": fmt_frontier(r)})
    return rows


def print_summary(doc: dict) -> None:
    configs = doc["configs"]
    width = max(len(j) for j in doc["jobs"]) + 2
    print()
    def cell(r):
        return "-" if r is None else f"{fmt_seconds(r)} s/{r['solver_calls'] or '-'}"

    print("job".ljust(width) + "".join(f"{c:>22}" for c in configs))
    for job, runs in doc["jobs"].items():
        print(job.ljust(width) + "".join(f"{cell(runs.get(c)):>22}" for c in configs))
    print("(seconds / solver calls; DNF-time: out of time; DNF-call: a solver call hit "
          "its cap)")
    for job, runs in doc["jobs"].items():
        shapes = {c: fmt_frontier(r) + ("" if r["finished"] else " [incomplete]")
                  for c, r in runs.items()}
        if len(set(shapes.values())) == 1:
            print(f"  {job}: {next(iter(shapes.values()))}  best/bound "
                  f"{fmt_best(next(iter(runs.values())))}")
        else:
            for c, s in shapes.items():
                print(f"  {job} [{c}]: {s}  best/bound {fmt_best(runs[c])}")
    if REFERENCE in configs and len(configs) > 1:
        print(f"\nseconds ratio to {REFERENCE}:")
        for job, runs in doc["jobs"].items():
            print("  " + job.ljust(width) + "  ".join(
                f"{c}: {speed_ratio(runs[c], runs[REFERENCE])}" for c in configs
                if c != REFERENCE and c in runs and REFERENCE in runs))
    for row in doc["sccl"]:
        print(f"\nSCCL (QUOTED from the SCCL paper via the issue, not measured here): "
              f"{row['job']}: {row['sccl_seconds']:.0f} s ({row['what']}); "
              f"ours {row['ours']} s measured -> speed-up {row['speedup']}")
    if doc["problems"]:
        print("\n!!! BUG: configurations disagree, or a run failed:")
        for p in doc["problems"]:
            print("!!!   " + p)
    else:
        print("\ncross-checks: no SAT/UNSAT disagreement, complete frontiers agree, "
              "nothing below a bound")


def render(js: Path) -> int:
    doc = json.loads(js.read_text())
    doc["problems"] = [p for job, runs in doc["jobs"].items() for p in cross_check(job, runs)]
    doc["sccl"] = sccl_rows(doc["jobs"])
    js.with_suffix(".md").write_text(markdown(doc))
    js.write_text(json.dumps(doc, indent=1) + "\n")
    print_summary(doc)
    print(f"\nrewrote {js.with_suffix('.md')}")
    return 1 if doc["problems"] else 0


# --- main ------------------------------------------------------------------------

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="only dgx1 allgather with cpsat-4 (a smoke test of this script)")
    ap.add_argument("--out", help="output path without suffix "
                    "(default bench/results/synthesis-DATE[-quick])")
    ap.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT,
                    help=f"seconds per search (default {DEFAULT_TIME_LIMIT:.0f}; "
                         f"Z3 is capped at {Z3_CAP:.0f})")
    ap.add_argument("--jobs", help="comma-separated subset of job names, e.g. "
                    "'dgx1 allgather,ring:8 allgather'")
    ap.add_argument("--code", choices=("head", "worktree"), default="head",
                    help="measure the committed HEAD (default) or the working tree; "
                    "either way a snapshot taken at the start")
    ap.add_argument("--render", metavar="JSON",
                    help="no run: rewrite the .md of a recorded JSON (after a change to "
                    "the report format) and print its summary")
    ap.add_argument("--configs", help=f"comma-separated subset of {','.join(CONFIGS)}")
    args = ap.parse_args(argv)

    if args.render:
        return render(Path(args.render))
    jobs = JOBS[:1] if args.quick else JOBS
    configs = [REFERENCE] if args.quick else list(CONFIGS)
    if args.jobs:
        wanted = [j.strip() for j in args.jobs.split(",")]
        jobs = [j for j in JOBS if job_name(j) in wanted]
        if len(jobs) != len(wanted):
            ap.error(f"unknown job in --jobs; known: {', '.join(job_name(j) for j in JOBS)}")
    if args.configs:
        configs = [c.strip() for c in args.configs.split(",")]
        if any(c not in CONFIGS for c in configs):
            ap.error(f"unknown config in --configs; known: {', '.join(CONFIGS)}")

    out = Path(args.out) if args.out else \
        record_stem(HERE.parent, f"synthesis{'-quick' if args.quick else ''}")
    if out.suffix in (".md", ".json"):
        out = out.with_suffix("")
    md, js = Path(f"{out}.md"), Path(f"{out}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    code_dir = Path(tempfile.mkdtemp(prefix="synth-bench-code-"))
    try:
        return _run(args, argv, jobs, configs, out, md, js, code_dir)
    finally:
        shutil.rmtree(code_dir, ignore_errors=True)


def _run(args, argv, jobs, configs, out, md, js, code_dir: Path) -> int:
    code = snapshot(args.code, code_dir)
    recorded = recorded_machine(REPO, "bench_synthesis", True, Snapshot(
        CODE_PATHS, code["sha256"], committed=code["kind"] == "head"))
    if recorded is None:
        return 2
    doc = {"benchmark": "synthesis", "argv": argv, "machine": machine(recorded),
           "code": code,
           "time_limit": args.time_limit, "z3_cap": Z3_CAP, "configs": configs,
           "config_meaning": {c: {"backend": CONFIGS[c][0], "workers": CONFIGS[c][1]}
                              for c in configs},
           "load_start": os.getloadavg()[0], "jobs": {}, "problems": [], "sccl": []}
    cores = doc["machine"]["cores_usable"]
    doc["caveats"] = [
        f"The machine has {cores} usable cores, so cpsat-4 and cpsat-8 oversubscribe them "
        "(their workers time-share; on a bigger machine they would run in parallel).",
        "Other developers may have been running tests on the same machine during the run "
        "(see the load averages), which slows every configuration unevenly.",
        "Z3 ignores the workers setting (one thread).",
        "One run per cell: no repetitions, so differences of a few tens of percent "
        "are within noise.",
    ]
    print(f"synthesis benchmark: {len(jobs)} jobs x {len(configs)} configs, "
          f"time limit {args.time_limit:.0f} s per search (z3 <= {Z3_CAP:.0f} s); "
          f"writing {out}.md/.json\ncode: {doc['code']['what']}", flush=True)
    start = time.perf_counter()

    def write():
        doc["total_seconds"] = time.perf_counter() - start
        doc["load_end"] = os.getloadavg()[0]
        doc["sccl"] = sccl_rows(doc["jobs"])
        js.write_text(json.dumps(doc, indent=1) + "\n")
        md.write_text(markdown(doc))

    for job in jobs:
        name = job_name(job)
        runs = doc["jobs"][name] = {}
        for config in configs:
            backend, workers = CONFIGS[config]
            limit = min(args.time_limit, Z3_CAP) if backend == "z3" else args.time_limit
            print(f"  {name:28} {config:8} ...", end="", flush=True)
            r = run_isolated(str(code_dir), job, backend, workers, limit)
            r["load_after"] = os.getloadavg()[0]
            runs[config] = r
            print(f" {fmt_seconds(r):>10} s  {r['solver_calls'] or '-':>4} calls  "
                  f"{fmt_frontier(r)}", flush=True)
            write()  # partial results survive an interrupted run
        doc["problems"] += cross_check(name, runs)
        doc["problems"] += [f"{name} [{c}]: {r['error']}" for c, r in runs.items()
                            if r["status"] == "error"]  # a crash is no result: exit 1
    write()
    print_summary(doc)
    print(f"\nwrote {md} and {js}")
    return 1 if doc["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
