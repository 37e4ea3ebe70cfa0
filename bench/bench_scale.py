#!/usr/bin/env python3
"""Multi-node synthesis at scale: the `synth` CLI on 8 to 256 GPUs, one run at a time.

    python bench/bench_scale.py                        # the full run (~30-60 min on 2 cores)
    python bench/bench_scale.py --quick                # dgx2x2 + dgxh100x2 allgather (smoke test)
    python bench/bench_scale.py --out bench/results/mine --time-limit 300
    python bench/bench_scale.py --jobs dgxh100x8,'dgx2x4 allreduce'
    python bench/bench_scale.py --render bench/results/scale-DATE.json

What it measures. For each topology (dgx2 and dgxh100 single boxes, and dgx2xK,
dgxh100xK for K up to 16 and 32, i.e. up to 256 GPUs) and each of allgather,
reducescatter and allreduce, it runs in a child process

    python3 -m synth COLLECTIVE --topo TOPO --method M --time-limit T --json \\
        --out TMPDIR --no-progress

with M = decomposed on K >= 2 boxes and M = auto on a single box (exact synthesis;
there is nothing to decompose), T = 600 s. For dgx2x2 and dgxh100x2 it also runs
M = exact with T = 300 s, so exact and decomposed synthesis can be compared where
exact synthesis still runs. Per run it records: the wall seconds around the child
(interpreter start-up, imports, synthesis, verification and writing the files), the
peak resident memory of that child alone (ru_maxrss from os.wait4), the exit code,
the size of the files written, and from the JSON summary on stdout: the GPU count,
the bandwidth bound (rounds per chunk, us/MB), every frontier point (steps, rounds,
chunks, ratio to the bound, latency us, us/MB, method), the best ratio to the bound
and its steps, the ratio of the fewest-steps point, synth's own "seconds" (synthesis
without writing files) and why each search stopped. A child still running T + 180 s
after it started is killed and recorded as DNF. TMPDIR is deleted after each run.
Every child gets an empty solver cache of its own (SYNTH_CACHE_DIR, deleted after the
run): with the user's warm ~/.cache/synth, solver calls answered by earlier runs would
cost nothing and the seconds would mean little.

Runs go one at a time, from small to large (the machine has 2 cores; parallel runs
would distort each other's timings). The code measured is a snapshot of the committed
HEAD taken at the start (`git archive HEAD synth topologies pyproject.toml`), imported
through PYTHONPATH by every child; the script checks once that the snapshot, not the
editable install, is what `import synth` finds. Others edit synth/ while benchmarks run.

Options:
    --quick            only dgx2x2 and dgxh100x2 allgather (decomposed and exact), with
                       a 60 s time limit unless --time-limit is given: a smoke test
    --out PREFIX       results go to PREFIX.json, PREFIX.md and PREFIX.png
                       (default bench/results/scale-DATE, DATE from `date -u`)
    --time-limit T     seconds for the decomposed/auto runs (default 600); the exact
                       runs get min(300, T)
    --jobs A,B         only the runs whose name ("TOPO COLLECTIVE METHOD", e.g.
                       "dgx2x4 allreduce decomposed") contains one of the substrings
    --render JSON      run nothing: rewrite the .md and .png of a recorded .json

This is a benchmark, not a test: it asserts nothing. The numbers mean something only
with the machine and date recorded beside them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from machine import cpu_name, memory_gib, version  # bench/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

BOX_GPUS = {"dgx2": 16, "dgxh100": 8}
FAMILY_BOXES = {"dgx2": [1, 2, 4, 8, 16], "dgxh100": [1, 2, 4, 8, 16, 32]}
COLLECTIVES = ["allgather", "reducescatter", "allreduce"]
EXACT_TOPOS = ["dgx2x2", "dgxh100x2"]  # exact next to decomposed on these
DEFAULT_TIME_LIMIT = 600.0
EXACT_TIME_LIMIT = 300.0
QUICK_TIME_LIMIT = 60.0
GRACE = 180.0  # a child is killed this long after its time limit
CODE_PATHS = ["synth", "topologies", "pyproject.toml"]

GOAL_SMALL = ("dgx2x4", "allreduce", 60.0, 1.05)
GOAL_LARGE = (["dgx2x16", "dgxh100x32"], 600.0, 1.10)


# --- the jobs --------------------------------------------------------------------

def topo_name(family: str, boxes: int) -> str:
    return family if boxes == 1 else f"{family}x{boxes}"


def all_jobs(time_limit: float) -> list[dict]:
    """Every run, ordered by GPU count (then family, collective, method)."""
    jobs = []
    for family, counts in FAMILY_BOXES.items():
        for boxes in counts:
            topo = topo_name(family, boxes)
            for coll in COLLECTIVES:
                methods = [("auto" if boxes == 1 else "decomposed", time_limit)]
                if topo in EXACT_TOPOS:
                    methods.append(("exact", min(EXACT_TIME_LIMIT, time_limit)))
                for method, limit in methods:
                    jobs.append({"topology": topo, "family": family, "boxes": boxes,
                                 "gpus": boxes * BOX_GPUS[family], "collective": coll,
                                 "method": method, "time_limit": limit})
    order = {f: i for i, f in enumerate(FAMILY_BOXES)}
    jobs.sort(key=lambda j: (j["gpus"], order[j["family"]], j["boxes"],
                             COLLECTIVES.index(j["collective"]), j["method"] == "exact"))
    return jobs


def job_name(job: dict) -> str:
    return f"{job['topology']} {job['collective']} {job['method']}"


# --- the code measured -----------------------------------------------------------

def _cmd(*args, cwd=REPO) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, cwd=cwd,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def snapshot(into: Path) -> dict:
    """git archive HEAD into `into`; check that children import synth from there."""
    commit = _cmd("git", "rev-parse", "--short", "HEAD") or "unknown"
    archive = subprocess.run(["git", "archive", "HEAD", *CODE_PATHS], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    # compile once here, so that the first run does not pay for it
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "synth")],
                   check=True)
    found = subprocess.run([sys.executable, "-c", "import synth; print(synth.__file__)"],
                           env=child_env(into), cwd=into, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(into.resolve()):
        raise SystemExit(f"children would import synth from {found}, not the snapshot "
                         f"{into}: refusing to measure the wrong code")
    return {"commit": commit, "what": f"committed HEAD {commit} "
            f"(git archive HEAD {' '.join(CODE_PATHS)})", "imported_from": found}


def child_env(code_dir: Path, cache_dir: Path | None = None) -> dict:
    """PYTHONPATH = the snapshot; synth's solver cache in an empty folder of this run's
    own (a warm ~/.cache/synth would answer solver calls from earlier runs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code_dir)
    env.pop("PYTHONSTARTUP", None)
    env.pop("SYNTH_CACHE", None)
    if cache_dir is not None:
        env["SYNTH_CACHE_DIR"] = str(cache_dir)
    return env


# --- the machine -----------------------------------------------------------------

def machine() -> dict:
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = f"{line.split('=', 1)[1].strip(chr(34))} ({platform.platform()})"
    except OSError:
        pass
    dirty = _cmd("git", "status", "--porcelain", "synth", "topologies").splitlines()
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": memory_gib(),
        "os": os_name,
        "python": platform.python_version(),
        "ortools": version("ortools"),
        "z3": version("z3"),
        "networkx": version("networkx"),
        "date": _cmd("date", "-u"),
        "git_commit": _cmd("git", "rev-parse", "--short", "HEAD") or "unknown",
        "git_uncommitted_code": dirty,  # not measured: the snapshot is HEAD
    }


# --- one run ---------------------------------------------------------------------

def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the benchmark dies (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_one(job: dict, code_dir: Path) -> dict:
    """The CLI in a child process: wall seconds, peak memory, and its JSON summary."""
    out_dir = Path(tempfile.mkdtemp(prefix="synth-scale-out-"))
    logs = Path(tempfile.mkdtemp(prefix="synth-scale-log-"))
    cache = Path(tempfile.mkdtemp(prefix="synth-scale-cache-"))  # empty: a cold run
    cmd = [sys.executable, "-m", "synth", job["collective"], "--topo", job["topology"],
           "--method", job["method"], "--time-limit", f"{job['time_limit']:g}", "--json",
           "--out", str(out_dir), "--no-progress"]
    hard = job["time_limit"] + GRACE
    killed = []
    try:
        with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                    cwd=code_dir, env=child_env(code_dir, cache),
                                    start_new_session=True, preexec_fn=_die_with_parent)

            def kill():
                killed.append(True)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's own group only
                except ProcessLookupError:
                    pass

            timer = threading.Timer(hard, kill)
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:
                kill()
                os.wait4(proc.pid, 0)
                raise
            finally:
                timer.cancel()
            wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        stdout = (logs / "stdout").read_text(errors="replace")
        stderr = (logs / "stderr").read_text(errors="replace")
        written = dir_bytes(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)

    r = dict(job, command=shlex.join(["python3", *cmd[1:]]).replace(str(out_dir), "TMPDIR"),
             wall_seconds=round(wall, 3), peak_mb=round(usage.ru_maxrss / 1024, 1),
             cpu_seconds=round(usage.ru_utime + usage.ru_stime, 3),
             exit_code=proc.returncode, output_mb=round(written / 2**20, 2),
             status="ok", load_after=round(os.getloadavg()[0], 2))
    if killed:
        r["status"] = "DNF"
        r["error"] = f"killed after {hard:.0f} s (time limit + {GRACE:.0f} s)"
    summary = None
    start = stdout.find("{")
    if start >= 0:
        try:
            summary = json.loads(stdout[start:])
        except json.JSONDecodeError:
            summary = None
    if summary is None:
        if r["status"] == "ok":
            r["status"] = "error"
        r.setdefault("error", (stderr.strip().splitlines() or ["no JSON on stdout"])[-1][:500])
        r["stderr_tail"] = stderr[-2000:]
        r.update(points=[], best_ratio=None, best_steps=None, fewest_ratio=None,
                 fewest_steps=None)
        return r
    if proc.returncode != 0:
        r["status"] = "error"
        r["error"] = (stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1][:500]
        r["stderr_tail"] = stderr[-2000:]
    b = summary.get("bounds", {})
    points = [{k: p.get(k) for k in ("steps", "rounds", "chunks", "rounds_per_chunk",
                                     "ratio_to_bound", "latency_us", "us_per_mb", "method",
                                     "proven")}
              for p in summary.get("frontier", [])]
    best = min(points, key=lambda p: (p["ratio_to_bound"], p["steps"]), default=None)
    fewest = min(points, key=lambda p: (p["steps"], p["ratio_to_bound"]), default=None)
    r.update(ranks=summary.get("ranks"),
             bounds={"steps": b.get("steps"), "rounds_per_chunk": b.get("rounds_per_chunk"),
                     "us_per_mb": b.get("us_per_mb")},
             points=points,
             best_ratio=best and best["ratio_to_bound"], best_steps=best and best["steps"],
             fewest_ratio=fewest and fewest["ratio_to_bound"],
             fewest_steps=fewest and fewest["steps"],
             synth_seconds=summary.get("seconds"), stopped=summary.get("stopped"),
             complete=summary.get("complete"), solver_calls=summary.get("solver_calls"))
    if r["ranks"] is not None and r["ranks"] != job["gpus"]:
        r["note"] = f"expected {job['gpus']} GPUs, synth reports {r['ranks']}"
    return r


# --- reporting -------------------------------------------------------------------

def fmt(x, digits=1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_ratio(ratio, steps) -> str:
    return "-" if ratio is None else f"{ratio:.3f} (S={steps})"


def fmt_exit(r: dict) -> str:
    if r["status"] == "DNF":
        return "**DNF**"
    if r["status"] != "ok":
        return f"**{r['exit_code']}** ({r.get('error', '')[:80]})"
    return str(r["exit_code"])


def fmt_stopped(r: dict) -> str:
    stopped = r.get("stopped") or {}
    reasons = list(dict.fromkeys(str(v) for v in stopped.values()))
    return "; ".join(reasons) if reasons else "-"


def finished(r: dict, seconds: float, ratio: float) -> bool:
    return (r["status"] == "ok" and r["exit_code"] == 0 and r["wall_seconds"] <= seconds
            and r["best_ratio"] is not None and r["best_ratio"] <= ratio)


def goals(runs: list[dict]) -> list[str]:
    lines = []
    topo, coll, limit_s, limit_x = GOAL_SMALL
    small = [r for r in runs if r["topology"] == topo and r["collective"] == coll
             and r["method"] == "decomposed"]
    if not small:
        lines.append(f"- {topo} {coll} in <= {limit_s:.0f} s with best x bound <= "
                     f"{limit_x}: **not measured** in this run.")
    for r in small:
        ok = finished(r, limit_s, limit_x)
        lines.append(
            f"- {topo} {coll} (decomposed) in <= {limit_s:.0f} s with best x bound <= "
            f"{limit_x}: **{'met' if ok else 'NOT met'}**. Wall {fmt(r['wall_seconds'])} s "
            f"(synth's own {fmt(r.get('synth_seconds'))} s), best x bound "
            f"{fmt_ratio(r['best_ratio'], r['best_steps'])}, exit {fmt_exit(r)}.")
    topos, limit_s, limit_x = GOAL_LARGE
    large = [r for r in runs if r["topology"] in topos and r["method"] == "decomposed"]
    expected = len(topos) * len(COLLECTIVES)
    failed = [r for r in large if not finished(r, limit_s, limit_x)]
    if not large:
        lines.append(f"- every 256-GPU run in <= {limit_s:.0f} s with best x bound <= "
                     f"{limit_x}: **not measured** in this run.")
    else:
        verdict = ("met" if not failed and len(large) == expected else
                   "NOT met" if failed else f"met by the {len(large)} of {expected} runs "
                   "measured (the rest were not run)")
        lines.append(f"- every 256-GPU run ({', '.join(topos)}; {len(large)} of {expected} "
                     f"measured) in <= {limit_s:.0f} s with best x bound <= {limit_x}: "
                     f"**{verdict}**.")
        for r in large:
            ok = finished(r, limit_s, limit_x)
            why = []
            if r["status"] != "ok" or r["exit_code"] != 0:
                why.append(f"exit {fmt_exit(r)}")
            if r["wall_seconds"] > limit_s:
                why.append(f"wall {r['wall_seconds']:.0f} s > {limit_s:.0f} s")
            if r["best_ratio"] is None or r["best_ratio"] > limit_x:
                why.append(f"best x bound {fmt(r['best_ratio'], 3)} > {limit_x}")
            lines.append(f"  - {r['topology']} {r['collective']}: wall "
                         f"{fmt(r['wall_seconds'])} s (synth {fmt(r.get('synth_seconds'))} s), "
                         f"best x bound {fmt_ratio(r['best_ratio'], r['best_steps'])}, peak "
                         f"{fmt(r['peak_mb'], 0)} MB: {'ok' if ok else 'missed: ' + ', '.join(why)}")
    lines.append("- Wall seconds include interpreter start-up, imports and writing the "
                 "schedule files; the goals are judged on them, the stricter reading. "
                 "synth's own seconds are given beside them.")
    return lines


def comparison_rows(runs: list[dict]) -> list[str]:
    rows = []
    by = {(r["topology"], r["collective"], r["method"]): r for r in runs}
    for topo in EXACT_TOPOS:
        for coll in COLLECTIVES:
            d, e = by.get((topo, coll, "decomposed")), by.get((topo, coll, "exact"))
            if d is None or e is None:
                continue
            t = (f"{e['wall_seconds'] / d['wall_seconds']:.2f}"
                 if d["wall_seconds"] else "-")
            x = (f"{e['best_ratio'] / d['best_ratio']:.3f}"
                 if e["best_ratio"] and d["best_ratio"] else "-")
            rows.append(
                f"| {topo} | {d.get('ranks') or d['gpus']} | {coll} "
                f"| {fmt(d['wall_seconds'])} | {fmt(e['wall_seconds'])} | {t} "
                f"| {fmt(d.get('synth_seconds'))} | {fmt(e.get('synth_seconds'))} "
                f"| {len(d['points'])} | {len(e['points'])} "
                f"| {fmt_ratio(d['best_ratio'], d['best_steps'])} "
                f"| {fmt_ratio(e['best_ratio'], e['best_steps'])} | {x} "
                f"| {fmt_ratio(d['fewest_ratio'], d['fewest_steps'])} "
                f"| {fmt_ratio(e['fewest_ratio'], e['fewest_steps'])} "
                f"| {fmt_exit(d)} / {fmt_exit(e)}; exact stopped: {fmt_stopped(e)} |")
    return rows


def markdown(doc: dict) -> str:
    m, code, runs = doc["machine"], doc["code"], doc["runs"]
    lines = [f"# Multi-node synthesis at scale, {m['date']}", "",
             f"`{shlex.join(['python3', 'bench/bench_scale.py', *doc['argv']])}`", "",
             "## Machine and code", "",
             f"- Date (`date -u`): {m['date']}",
             f"- CPU: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
             f"{m['memory_gib']} GiB memory",
             f"- OS: {m['os']}",
             f"- Python {m['python']}, OR-Tools {m['ortools']}, z3-solver {m['z3']}, "
             f"networkx {m['networkx']}",
             f"- Code measured: {code['what']}; children imported `{code['imported_from']}`",
             "- Solver cache: every child started with an empty SYNTH_CACHE_DIR of its "
             "own (cold runs; nothing answered from ~/.cache/synth)",
             "- Uncommitted changes under synth/ and topologies/ at the start (not "
             "measured): " + (", ".join(m["git_uncommitted_code"]) or "none"),
             f"- Load average (1 min) at the start {doc['load_start']:.2f}, at the end "
             f"{doc.get('load_end', 0):.2f}; total {doc.get('total_seconds', 0):.0f} s "
             f"for {len(runs)} runs, one at a time", "",
             "## Goals (from the measured numbers only)", ""]
    lines += goals(runs)
    lines += ["", "## Every run", "",
              "Method: `decomposed` on K >= 2 boxes, `auto` on one box (exact synthesis), "
              f"time limit {doc['time_limit']:g} s; `exact` runs get "
              f"{min(EXACT_TIME_LIMIT, doc['time_limit']):g} s. Wall s: around the child "
              "process (start-up, imports, synthesis, verification, writing files). Synth s: "
              "the `seconds` of the JSON summary (synthesis, without writing files). Peak "
              "MB: ru_maxrss of the child. Points: frontier points. Best x bound: the "
              "smallest ratio of rounds per chunk to the bandwidth bound, with its steps; "
              "fewest-steps x bound: the ratio of the point with the fewest steps. DNF: "
              f"killed {GRACE:.0f} s after its time limit.", "",
              "| topology | GPUs | collective | method | wall s | synth s | peak MB | points "
              "| best x bound | fewest-steps x bound | exit | stopped |",
              "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"]
    for r in runs:
        lines.append(
            f"| {r['topology']} | {r.get('ranks') or r['gpus']} | {r['collective']} "
            f"| {r['method']} | {fmt(r['wall_seconds'])} | {fmt(r.get('synth_seconds'))} "
            f"| {fmt(r['peak_mb'], 0)} | {len(r['points'])} "
            f"| {fmt_ratio(r['best_ratio'], r['best_steps'])} "
            f"| {fmt_ratio(r['fewest_ratio'], r['fewest_steps'])} | {fmt_exit(r)} "
            f"| {fmt_stopped(r)} |")
    comp = comparison_rows(runs)
    if comp:
        lines += ["", "## Exact against decomposed (2 boxes)", "",
                  "Same topology and collective; exact runs with "
                  f"{min(EXACT_TIME_LIMIT, doc['time_limit']):g} s, decomposed with "
                  f"{doc['time_limit']:g} s. Time ratio: exact wall / decomposed wall. "
                  "Best ratio: exact best x bound / decomposed best x bound (below 1: "
                  "exact found the better schedule).", "",
                  "| topology | GPUs | collective | decomposed wall s | exact wall s "
                  "| time exact/dec | decomposed synth s | exact synth s | dec points "
                  "| exact points | decomposed best x bound | exact best x bound "
                  "| best exact/dec | decomposed fewest-steps | exact fewest-steps "
                  "| exit dec / exact |",
                  "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| --- | --- | ---: | --- | --- | --- |"]
        lines += comp
    lines += ["", "## Bounds", "",
              "| topology | collective | bound rounds per chunk | bound us/MB | bound steps |",
              "| --- | --- | --- | ---: | ---: |"]
    seen = set()
    for r in runs:
        key = (r["topology"], r["collective"])
        if key in seen or not r.get("bounds"):
            continue
        seen.add(key)
        b = r["bounds"]
        lines.append(f"| {r['topology']} | {r['collective']} | {b['rounds_per_chunk']} "
                     f"| {fmt(b['us_per_mb'], 3)} | {b['steps']} |")
    errors = [r for r in runs if r["status"] != "ok"]
    if errors:
        lines += ["", "## Failures and DNFs", ""]
        for r in errors:
            lines.append(f"- {job_name(r)}: {r['status']}, exit {r['exit_code']}: "
                         f"{r.get('error', '')}")
    lines += ["", "The frontier points of every run (steps, rounds, chunks, ratio to the "
              "bound, latency us, us/MB, method) are in the .json next to this file."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    runs = doc["runs"]
    fig, (ax_t, ax_x) = plt.subplots(1, 2, figsize=(13, 5))
    colors = {"allgather": "tab:blue", "reducescatter": "tab:orange",
              "allreduce": "tab:green"}
    styles = {"dgx2": ("-", "o"), "dgxh100": ("--", "s")}
    for family in FAMILY_BOXES:
        for coll in COLLECTIVES:
            rs = sorted((r for r in runs if r["family"] == family and r["collective"] == coll
                         and r["method"] != "exact"), key=lambda r: r["gpus"])
            if not rs:
                continue
            line, marker = styles[family]
            kw = dict(linestyle=line, marker=marker, color=colors[coll],
                      label=f"{family} {coll}")
            ax_t.plot([r["gpus"] for r in rs], [r["wall_seconds"] for r in rs], **kw)
            ok = [r for r in rs if r["best_ratio"] is not None]
            ax_x.plot([r["gpus"] for r in ok], [r["best_ratio"] for r in ok], **kw)
            for r in rs:
                if r["status"] != "ok":
                    ax_t.annotate(r["status"], (r["gpus"], r["wall_seconds"]),
                                  textcoords="offset points", xytext=(4, 4), fontsize=8,
                                  color="red")
    # exact runs (2 boxes): unconnected markers, coloured by collective; dgxh100x2 and
    # dgx2x2 have different GPU counts. A ratio far above the lines is drawn at the top
    # of the panel with its value, so that it does not squash the lines.
    exact = [r for r in runs if r["method"] == "exact"]
    lined = [r["best_ratio"] for r in runs if r["method"] != "exact"
             and r["best_ratio"] is not None]
    top = max([1.2] + [x * 1.05 for x in lined])
    off_scale = {}  # gpus -> [run], the exact runs whose ratio is above the panel
    for r in exact:
        kw = dict(marker="x", color=colors[r["collective"]], linestyle="none", markersize=9,
                  markeredgewidth=2)
        ax_t.plot([r["gpus"]], [r["wall_seconds"]], **kw)
        if r["best_ratio"] is not None:
            y = min(r["best_ratio"], top * 0.98)
            ax_x.plot([r["gpus"]], [y], **kw)
            if r["best_ratio"] > top * 0.98:
                off_scale.setdefault(r["gpus"], []).append(r)
    for gpus, rs in off_scale.items():
        for k, r in enumerate(rs):
            ax_x.annotate(f"{r['topology']} exact {r['collective']}: {r['best_ratio']:.2f} "
                          "(off scale)", (gpus, top * 0.98), textcoords="offset points",
                          xytext=(-8, -12 - 10 * k), fontsize=7, ha="right",
                          color=colors[r["collective"]])
    if exact:
        ax_x.plot([], [], marker="x", color="black", linestyle="none", markeredgewidth=2,
                  label="exact, 2 boxes (colour: collective)")
    ax_x.set_ylim(0.97, top)
    limit = doc["time_limit"]
    ax_t.axhline(limit, color="grey", linewidth=0.8, linestyle=":")
    ax_t.annotate(f"time limit {limit:g} s", (0.02, limit), xycoords=("axes fraction", "data"),
                  textcoords="offset points", xytext=(0, 3), fontsize=8, color="grey")
    ax_t.set_yscale("log")
    label = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax_t.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
    ax_t.yaxis.set_major_formatter(label)
    ax_t.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_t.set_ylabel("wall seconds (child process)")
    ax_t.set_title("Synthesis wall time")
    ax_x.axhline(1.0, color="black", linewidth=0.8)
    for y in (1.05, 1.10):
        ax_x.axhline(y, color="grey", linewidth=0.8, linestyle=":")
    ax_x.set_ylabel("best rounds-per-chunk / bandwidth bound")
    ax_x.set_title("Best frontier point against the bandwidth bound")
    for ax in (ax_t, ax_x):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        gpus = sorted({r["gpus"] for r in runs})
        ax.set_xticks(gpus)
        ax.set_xticklabels([str(g) for g in gpus])
        ax.grid(True, which="both", alpha=0.3)
    ax_x.legend(fontsize=7, loc="best")
    m = doc["machine"]
    fig.suptitle(f"synth multi-node synthesis, commit {doc['code']['commit']}, "
                 f"{m['cpu']} ({m['cores']} cores), {m['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def write(doc: dict, out: Path) -> None:
    Path(f"{out}.json").write_text(json.dumps(doc, indent=1) + "\n")
    Path(f"{out}.md").write_text(markdown(doc))
    if doc["runs"]:
        plot(doc, Path(f"{out}.png"))


def progress_line(i: int, n: int, r: dict) -> str:
    return (f"[{i}/{n}] {job_name(r):38} {r['status']:5} exit {r['exit_code']:>3}  "
            f"wall {r['wall_seconds']:7.1f} s  synth {fmt(r.get('synth_seconds')):>6} s  "
            f"peak {r['peak_mb']:6.0f} MB  {len(r['points']):2} points  best "
            f"{fmt_ratio(r['best_ratio'], r['best_steps'])}  fewest "
            f"{fmt_ratio(r['fewest_ratio'], r['fewest_steps'])}"
            + (f"  [{r['error']}]" if r.get("error") else ""))


# --- main ------------------------------------------------------------------------

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="only dgx2x2 and dgxh100x2 allgather (decomposed and exact), "
                    f"time limit {QUICK_TIME_LIMIT:g} s unless --time-limit is given")
    ap.add_argument("--out", help="output prefix (default bench/results/scale-DATE)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help=f"seconds per decomposed/auto run (default {DEFAULT_TIME_LIMIT:g}); "
                    f"exact runs get min({EXACT_TIME_LIMIT:g}, this)")
    ap.add_argument("--jobs", help="comma-separated substrings of run names "
                    "('TOPO COLLECTIVE METHOD'); runs matching any are kept")
    ap.add_argument("--render", metavar="JSON",
                    help="run nothing: rewrite the .md and .png of a recorded .json")
    args = ap.parse_args(argv)

    if args.render:
        js = Path(args.render)
        doc = json.loads(js.read_text())
        out = js.with_suffix("")
        Path(f"{out}.md").write_text(markdown(doc))
        if doc["runs"]:
            plot(doc, Path(f"{out}.png"))
        print(f"rewrote {out}.md and {out}.png")
        return 0

    time_limit = args.time_limit or (QUICK_TIME_LIMIT if args.quick else DEFAULT_TIME_LIMIT)
    jobs = all_jobs(time_limit)
    if args.quick:
        jobs = [j for j in jobs if j["topology"] in EXACT_TOPOS
                and j["collective"] == "allgather"]
    if args.jobs:
        wanted = [w.strip() for w in args.jobs.split(",") if w.strip()]
        jobs = [j for j in jobs if any(w in job_name(j) for w in wanted)]
        if not jobs:
            ap.error("no run matches --jobs; names look like 'dgx2x4 allreduce decomposed'")
    stamp = _cmd("date", "-u", "+%Y-%m-%d") or time.strftime("%Y-%m-%d", time.gmtime())
    out = Path(args.out) if args.out else HERE / "results" / f"scale-{stamp}"
    if out.suffix in (".md", ".json", ".png"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)

    code_dir = Path(tempfile.mkdtemp(prefix="synth-scale-code-"))
    try:
        doc = {"benchmark": "scale", "argv": argv, "machine": machine(),
               "code": snapshot(code_dir), "time_limit": time_limit,
               "exact_time_limit": min(EXACT_TIME_LIMIT, time_limit), "grace": GRACE,
               "load_start": os.getloadavg()[0], "runs": []}
        print(f"scale benchmark: {len(jobs)} runs, one at a time; time limit "
              f"{time_limit:g} s (exact {doc['exact_time_limit']:g} s); writing "
              f"{out}.json/.md/.png\ncode: {doc['code']['what']}, imported from "
              f"{doc['code']['imported_from']}", flush=True)
        start = time.perf_counter()
        for i, job in enumerate(jobs, 1):
            r = run_one(job, code_dir)
            doc["runs"].append(r)
            print(progress_line(i, len(jobs), r), flush=True)
            doc["total_seconds"] = time.perf_counter() - start
            doc["load_end"] = os.getloadavg()[0]
            Path(f"{out}.json").write_text(json.dumps(doc, indent=1) + "\n")  # survives ^C
        doc["total_seconds"] = time.perf_counter() - start
        doc["load_end"] = os.getloadavg()[0]
        write(doc, out)
    finally:
        shutil.rmtree(code_dir, ignore_errors=True)
    print("\n".join(["", "goals:"] + goals(doc["runs"])))
    print(f"\nwrote {out}.json, {out}.md, {out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
