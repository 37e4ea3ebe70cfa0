#!/usr/bin/env python3
"""Multi-node synthesis at scale: the `synth` CLI on 8 to 512 GPUs, one run at a time.

    python bench/bench_scale.py                        # the full run (~1-2 h on 2 cores)
    python bench/bench_scale.py --quick                # dgx2x2 + dgxh100x2 allgather (smoke test)
    python bench/bench_scale.py --out bench/results/mine --time-limit 300
    python bench/bench_scale.py --jobs dgxh100x8,'dgx2x4 allreduce'
    python bench/bench_scale.py --baseline ee83763 --jobs 'dgx2x4 allreduce,dgx2x16'
    python bench/bench_scale.py --alltoall              # issue 16: multi-node alltoall
    python bench/bench_scale.py --gateways              # issue 16: ndv2xK, GPUs behind gateways
    python bench/bench_scale.py --own-files             # issue 16: a box file and --boxes K
    python bench/bench_scale.py --render bench/results/scale-DATE.json

What it measures. For each topology (dgx2 and dgxh100 single boxes, and dgx2xK,
dgxh100xK for K up to 32 and 64, i.e. up to 512 GPUs) and each of allgather,
reducescatter and allreduce (at 512 GPUs allreduce only, unless --all-512), it runs in
a child process

    python3 -m synth COLLECTIVE --topo TOPO --method M --time-limit T --json \\
        --out TMPDIR --no-progress

with M = decomposed on K >= 2 boxes and M = auto on a single box (exact synthesis;
there is nothing to decompose), T = 600 s. For dgx2x2 and dgxh100x2 it also runs
M = exact with T = 300 s, so exact and decomposed synthesis can be compared where
exact synthesis still runs. Per run it records: the wall seconds around the child
(interpreter start-up, imports, synthesis, verification and writing the files), the
peak resident memory of that child alone (ru_maxrss from os.wait4), the exit code,
the size of the files written, their number and the largest of them, and from the JSON
summary on stdout: the GPU count, the bandwidth bound (rounds per chunk, us/MB), every
frontier point (steps, rounds, chunks, ratio to the bound, latency us, us/MB, method),
the best ratio to the bound and its steps, the ratio of the fewest-steps point, synth's
own "seconds" (synthesis without writing files) and why each search stopped. A child
still running T + 180 s after it started is killed and recorded as DNF; one whose
resident memory passes --max-rss-mb (default 12288, a guard for the shared machine) is
killed and recorded as MEM. TMPDIR is deleted after each run. Every child gets an empty
solver cache of its own (SYNTH_CACHE_DIR, deleted after the run): with the user's warm
~/.cache/synth, solver calls answered by earlier runs would cost nothing and the
seconds would mean little.

Runs go one at a time, from small to large (the machine has 2 cores; parallel runs
would distort each other's timings). The code measured is a snapshot of the committed
HEAD taken at the start (`git archive HEAD synth topologies pyproject.toml`), imported
through PYTHONPATH by every child; the script checks once that the snapshot, not the
editable install, is what `import synth` finds. Others edit synth/ while benchmarks run.

With --baseline REV, a second snapshot (`git archive REV ...`, its own temp folder,
the same check) is measured too: every selected job runs on both, back to back, the
order alternating from job to job (new then old, old then new, ...) so that the
machine's load falls on both alike. The old code gets the same time limit and the same
kill; whatever it does (a refusal, an error, a DNF) is recorded. The markdown then has
a side-by-side table: wall s, peak MB, largest file MB and best x bound, old and new,
and the ratios new/old. The goals are judged on the new code (HEAD), with the old
code's verdict beside them.

Options:
    --quick            only dgx2x2 and dgxh100x2 allgather (decomposed and exact), with
                       a 60 s time limit unless --time-limit is given: a smoke test
    --out PREFIX       results go to PREFIX.json, PREFIX.md and PREFIX.png
                       (default bench/results/scale-DATE, DATE from `date -u`)
    --time-limit T     seconds for the decomposed/auto runs (default 600); the exact
                       runs get min(300, T)
    --jobs A,B         only the runs whose name ("TOPO COLLECTIVE METHOD", e.g.
                       "dgx2x4 allreduce decomposed") contains one of the substrings
    --all-512          also allgather and reducescatter at 512 GPUs (dgx2x32,
                       dgxh100x64); by default only allreduce runs there
    --baseline REV     also measure commit REV (e.g. ee83763), alternating with HEAD
    --default-method   the multi-box runs with method auto (the command's default)
    --max-rss-mb M     kill a child whose resident memory passes M MiB (default 12288)
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

from machine import (Snapshot, content_sha256, record_stem, recorded_machine,  # bench/
                     version)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

BOX_GPUS = {"dgx2": 16, "dgxh100": 8, "ndv2": 8}
FAMILY_BOXES = {"dgx2": [1, 2, 4, 8, 16, 32], "dgxh100": [1, 2, 4, 8, 16, 32, 64]}
COLLECTIVES = ["allgather", "reducescatter", "allreduce"]
EXACT_TOPOS = ["dgx2x2", "dgxh100x2"]  # exact next to decomposed on these
LARGEST_GPUS = 512  # only allreduce here unless --all-512
DEFAULT_TIME_LIMIT = 600.0
EXACT_TIME_LIMIT = 300.0
QUICK_TIME_LIMIT = 60.0
GRACE = 180.0  # a child is killed this long after its time limit
DEFAULT_MAX_RSS_MB = 12288.0  # a child is killed above this resident memory (MiB)
CODE_PATHS = ["synth", "topologies", "pyproject.toml"]

# The goals of compact schedules (version 2), judged on the new code's runs. Units:
# seconds of wall time around the child, MiB (2**20 bytes) for files and memory.
GOALS = [
    {"what": "dgx2x4 allreduce: every frontier file <= 1 MB, the whole job <= 30 s",
     "topologies": ["dgx2x4"], "collectives": ["allreduce"], "wall_s": 30.0,
     "file_mb": 1.0},
    {"what": "256 GPUs, allgather, reducescatter and allreduce: best <= 1.03 x bound, "
     "each run <= 300 s", "topologies": ["dgx2x16", "dgxh100x32"],
     "collectives": COLLECTIVES, "wall_s": 300.0, "ratio": 1.03},
    {"what": "512 GPUs allreduce: best <= 1.03 x bound, <= 600 s, peak <= 4 GB "
     "(4096 MiB)", "topologies": ["dgxh100x64", "dgx2x32"],
     "collectives": ["allreduce"], "wall_s": 600.0, "ratio": 1.03, "peak_mb": 4096.0},
    # issue 16 (--alltoall): method auto, where the relayed alltoall joins the frontier
    {"what": "alltoall within 1.05 x the flow bound: dgx2x4 and dgxh100x8, each <= 60 s",
     "topologies": ["dgx2x4", "dgxh100x8"], "collectives": ["alltoall"], "method": "auto",
     "wall_s": 60.0, "ratio": 1.05},
    {"what": "alltoall within 1.05 x the flow bound at 256 and 512 GPUs (dgxh100x32, "
     "dgxh100x64): each <= 600 s, peak <= 4 GB (4096 MiB)",
     "topologies": ["dgxh100x32", "dgxh100x64"], "collectives": ["alltoall"],
     "method": "auto", "wall_s": 600.0, "ratio": 1.05, "peak_mb": 4096.0},
    # issue 28 (--at-4096): the command as a user runs it, method auto
    {"what": "4096 GPUs (dgxh100x512) allgather, reducescatter and allreduce: best <= 1.02 "
     "x bound, each <= 600 s, peak <= 4 GB (4096 MiB), every file <= 10 MB",
     "topologies": ["dgxh100x512"], "collectives": COLLECTIVES, "method": "auto",
     "wall_s": 600.0, "ratio": 1.02, "peak_mb": 4096.0, "file_mb": 10.0},
    {"what": "ndv2x4 (gateways) allgather, reducescatter and allreduce decomposed within "
     "1.10 x the bound, each <= 60 s", "topologies": ["ndv2x4"], "collectives": COLLECTIVES,
     "wall_s": 60.0, "ratio": 1.10},
]
ALLTOALL_TOPOLOGIES = [("dgx2", 4), ("dgxh100", 8), ("dgxh100", 32), ("dgxh100", 64)]
# issue 16 (--gateways): boxes whose GPUs reach the one NIC through GPUs 0 and 1
GATEWAY_TOPOLOGIES = [("ndv2", 4), ("ndv2", 8), ("ndv2", 16)]
GATEWAY_TIME_LIMIT = 60.0
# issue 16 (--own-files): a box's file repeated with --boxes K beside the built-in NAMExK
OWN_FILE_TOPOLOGIES = [("dgxh100", 8), ("dgx2", 4)]
OWN_FILE_COLLECTIVES = ["allgather", "allreduce"]


# --- the jobs --------------------------------------------------------------------

def topo_name(family: str, boxes: int) -> str:
    return family if boxes == 1 else f"{family}x{boxes}"


def all_jobs(time_limit: float, all_512: bool = False) -> list[dict]:
    """Every run, ordered by GPU count (then family, collective, method)."""
    jobs = []
    for family, counts in FAMILY_BOXES.items():
        for boxes in counts:
            topo = topo_name(family, boxes)
            gpus = boxes * BOX_GPUS[family]
            for coll in COLLECTIVES:
                if gpus >= LARGEST_GPUS and coll != "allreduce" and not all_512:
                    continue
                methods = [("auto" if boxes == 1 else "decomposed", time_limit)]
                if topo in EXACT_TOPOS:
                    methods.append(("exact", min(EXACT_TIME_LIMIT, time_limit)))
                for method, limit in methods:
                    jobs.append({"topology": topo, "family": family, "boxes": boxes,
                                 "gpus": gpus, "collective": coll,
                                 "method": method, "time_limit": limit})
    order = {f: i for i, f in enumerate(FAMILY_BOXES)}
    jobs.sort(key=lambda j: (j["gpus"], order[j["family"]], j["boxes"],
                             COLLECTIVES.index(j["collective"]), j["method"] == "exact"))
    return jobs


def job_name(job: dict) -> str:
    return f"{job['topology']} {job['collective']} {job['method']}"


def code_of(r: dict) -> str:
    """"new" (HEAD) or "old" (--baseline); runs recorded before --baseline are new."""
    return r.get("code", "new")


# --- the code measured -----------------------------------------------------------

def _cmd(*args, cwd=REPO) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, cwd=cwd,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def snapshot(into: Path, rev: str = "HEAD") -> dict:
    """git archive REV into `into`; check that children import synth from there."""
    full = _cmd("git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if not full:
        raise SystemExit(f"{rev!r} is not a commit of {REPO}")
    commit = _cmd("git", "rev-parse", "--short", full) or full[:7]
    subject = _cmd("git", "log", "-1", "--format=%s", full)
    archive = subprocess.run(["git", "archive", full, *CODE_PATHS], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    sha256 = content_sha256(into)
    # compile once here, so that the first run does not pay for it
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "synth")],
                   check=True)
    found = subprocess.run([sys.executable, "-c", "import synth; print(synth.__file__)"],
                           env=child_env(into), cwd=into, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(into.resolve()):
        raise SystemExit(f"children would import synth from {found}, not the snapshot "
                         f"{into}: refusing to measure the wrong code")
    label = "committed HEAD" if rev == "HEAD" else "commit"
    return {"commit": commit, "rev": rev, "subject": subject,
            "what": f"{label} {commit} (git archive {rev} {' '.join(CODE_PATHS)})",
            "imported_from": found, "sha256": sha256}


def committed(code: dict) -> Snapshot:
    """What recorded_machine needs to know of a snapshot() of HEAD: the code measured is
    the commit's, whatever the working tree holds under CODE_PATHS."""
    return Snapshot(tuple(CODE_PATHS), code["sha256"], committed=True)


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

def machine(recorded: dict) -> dict:
    """recorded_machine's fields (bench/machine.py) with the cores, OS and solver
    versions; the date as `date -u` prints it."""
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = f"{line.split('=', 1)[1].strip(chr(34))} ({platform.platform()})"
    except OSError:
        pass
    return {
        **recorded,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "os": os_name,
        "ortools": version("ortools"),
        "z3": version("z3"),
        "networkx": version("networkx"),
        "date": _cmd("date", "-u"),
        "git_commit": recorded["commit"],
        # not measured where the code is a snapshot of HEAD
        "git_uncommitted_code": recorded["uncommitted"],
    }


# --- one run ---------------------------------------------------------------------

def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the benchmark dies (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def dir_files(path: Path) -> dict:
    """Total bytes, number of files and the largest file under `path`."""
    files = [(f.stat().st_size, f) for f in path.rglob("*") if f.is_file()]
    size, largest = max(files, key=lambda x: x[0], default=(0, None))
    return {"bytes": sum(n for n, _ in files), "files": len(files),
            "largest_bytes": size,
            "largest": str(largest.relative_to(path)) if largest else None}


def group_rss_mb(session: int) -> float:
    """Resident MiB of every process in the child's session (its own group of
    processes: the CLI and anything it spawns)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) != session:  # fields: state ppid pgrp session ...
                continue
            for line in Path(f"/proc/{entry.name}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


def run_one(job: dict, code_dir: Path, code: str = "new",
            max_rss_mb: float = DEFAULT_MAX_RSS_MB) -> dict:
    """The CLI in a child process: wall seconds, peak memory, and its JSON summary."""
    out_dir = Path(tempfile.mkdtemp(prefix="synth-scale-out-"))
    logs = Path(tempfile.mkdtemp(prefix="synth-scale-log-"))
    cache = Path(tempfile.mkdtemp(prefix="synth-scale-cache-"))  # empty: a cold run
    topo = ([str(code_dir / job["file"]), "--boxes", str(job["boxes"])] if "file" in job
            else [job["topology"]])  # a box's own file repeated, or a name
    cmd = [sys.executable, "-m", "synth", job["collective"], "--topo", *topo,
           "--method", job["method"], "--time-limit", f"{job['time_limit']:g}", "--json",
           "--out", str(out_dir), "--no-progress", *job.get("options", [])]
    hard = job["time_limit"] + GRACE
    killed = []  # "time" or "memory"
    load_before = os.getloadavg()[0]
    started_utc = time.strftime("%H:%M:%S", time.gmtime())
    try:
        with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                    cwd=code_dir, env=child_env(code_dir, cache),
                                    start_new_session=True, preexec_fn=_die_with_parent)

            def kill(why="time"):
                killed.append(why)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's own group only
                except ProcessLookupError:
                    pass

            done = threading.Event()

            def watch_memory():
                while not done.wait(1.0):
                    if group_rss_mb(proc.pid) > max_rss_mb:
                        kill("memory")
                        return

            timer = threading.Timer(hard, kill)
            timer.start()
            watcher = threading.Thread(target=watch_memory, daemon=True)
            watcher.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:
                kill()
                os.wait4(proc.pid, 0)
                raise
            finally:
                timer.cancel()
                done.set()
                timer.join()  # no thread of ours left when the next child is forked
                watcher.join()
            wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        stdout = (logs / "stdout").read_text(errors="replace")
        stderr = (logs / "stderr").read_text(errors="replace")
        written = dir_files(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)

    r = dict(job, code=code,
             command=shlex.join(["python3", *cmd[1:]]).replace(str(out_dir), "TMPDIR"),
             wall_seconds=round(wall, 3), peak_mb=round(usage.ru_maxrss / 1024, 1),
             cpu_seconds=round(usage.ru_utime + usage.ru_stime, 3),
             exit_code=proc.returncode, output_mb=round(written["bytes"] / 2**20, 2),
             files=written["files"], largest_file=written["largest"],
             largest_file_bytes=written["largest_bytes"],
             largest_file_mb=round(written["largest_bytes"] / 2**20, 3),
             status="ok", started_utc=started_utc, load_before=round(load_before, 2),
             load_after=round(os.getloadavg()[0], 2))
    if killed and killed[0] == "memory":
        r["status"] = "MEM"
        r["error"] = f"killed: resident memory above {max_rss_mb:.0f} MiB (--max-rss-mb)"
    elif killed:
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
                                     "proven", "predicted_us")}
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


def fmt_div(a, b, digits=2) -> str:
    """a / b, or "-" when either is missing or b is 0."""
    return "-" if a is None or not b else f"{a / b:.{digits}f}"


def fmt_exit(r: dict) -> str:
    if r["status"] in ("DNF", "MEM"):
        return f"**{r['status']}**"
    if r["status"] != "ok":
        return f"**{r['exit_code']}** ({r.get('error', '')[:80]})"
    return str(r["exit_code"])


def fmt_stopped(r: dict) -> str:
    stopped = r.get("stopped") or {}
    reasons = list(dict.fromkeys(str(v) for v in stopped.values()))
    return "; ".join(reasons) if reasons else "-"


def fmt_file(r: dict) -> str:
    """Largest file in MiB, with its bytes when it is near the 1 MB mark."""
    mb = r.get("largest_file_mb")
    if mb is None:
        return "-"
    return f"{mb:.3f}" if mb < 100 else f"{mb:.0f}"


def check(r: dict, goal: dict) -> list[str]:
    """Why run r misses the goal (empty: it meets it)."""
    why = []
    if r["status"] != "ok" or r["exit_code"] != 0:
        why.append(f"exit {fmt_exit(r)}")
    if r["wall_seconds"] > goal["wall_s"]:
        why.append(f"wall {r['wall_seconds']:.1f} s > {goal['wall_s']:.0f} s")
    if "ratio" in goal and (r["best_ratio"] is None or r["best_ratio"] > goal["ratio"]):
        why.append(f"best x bound {fmt(r['best_ratio'], 3)} > {goal['ratio']}")
    if "file_mb" in goal and "largest_file_bytes" not in r:
        why.append("largest file not recorded")
    elif "file_mb" in goal and not r["files"]:
        why.append("no files written")
    elif "file_mb" in goal and r["largest_file_bytes"] > goal["file_mb"] * 2**20:
        why.append(f"largest file {fmt(r['largest_file_mb'], 3)} MB > "
                   f"{goal['file_mb']:g} MB")
    if "peak_mb" in goal and r["peak_mb"] > goal["peak_mb"]:
        why.append(f"peak {r['peak_mb']:.0f} MB > {goal['peak_mb']:.0f} MB")
    return why


def goal_runs(runs: list[dict], goal: dict, code: str) -> list[dict]:
    return [r for r in runs if code_of(r) == code and r["topology"] in goal["topologies"]
            and r["collective"] in goal["collectives"]
            and r["method"] == goal.get("method", "decomposed")]


def goal_verdict(rs: list[dict], goal: dict) -> str:
    expected = len(goal["topologies"]) * len(goal["collectives"])
    failed = [r for r in rs if check(r, goal)]
    if not rs:
        return "not measured"
    if failed:
        return "NOT met"
    if len(rs) < expected:
        return f"met by the {len(rs)} of {expected} runs measured (the rest were not run)"
    return "met"


def run_numbers(r: dict) -> str:
    return (f"wall {fmt(r['wall_seconds'])} s (synth {fmt(r.get('synth_seconds'))} s), "
            f"best x bound {fmt_ratio(r['best_ratio'], r['best_steps'])}, peak "
            f"{fmt(r['peak_mb'], 0)} MB, largest file {fmt_file(r)} MB "
            f"({r.get('largest_file_bytes', '-')} bytes) of {r.get('files', '-')} files, "
            f"exit {fmt_exit(r)}")


def goals(runs: list[dict], baseline: dict | None = None) -> list[str]:
    lines = []
    old = baseline and f"old code ({baseline['commit']})"
    unmeasured = []
    for goal in GOALS:
        rs = goal_runs(runs, goal, "new")
        if not rs:  # a run of another mode (--alltoall, --gateways, ...)
            unmeasured.append(goal["what"].split(":")[0])
            continue
        lines.append(f"- {goal['what']}: **{goal_verdict(rs, goal)}**"
                     + (" (new code)." if old else "."))
        for r in rs:
            why = check(r, goal)
            lines.append(f"  - {r['topology']} {r['collective']}: {run_numbers(r)}: "
                         + ("ok" if not why else "missed: " + ", ".join(why)))
        olds = goal_runs(runs, goal, "old") if old else []
        if olds:
            lines.append(f"  - {old}: {goal_verdict(olds, goal)}. " + "; ".join(
                f"{r['topology']} {r['collective']}: "
                + ("ok" if not check(r, goal) else ", ".join(check(r, goal)))
                for r in olds))
    if unmeasured:
        lines.append("- Not measured in this run: " + "; ".join(unmeasured) + ".")
    lines.append("- Wall seconds include interpreter start-up, imports and writing the "
                 "schedule files; the goals are judged on them, the stricter reading. "
                 "synth's own seconds are given beside them. MB here is MiB (2^20 bytes), "
                 "as in every column of this file.")
    return lines


def own_file_rows(runs: list[dict]) -> list[str]:
    """Per run of a file repeated with --boxes, whether its frontier is the built-in's."""
    def frontier(r):
        return [(p["steps"], p["rounds"], p["chunks"]) for p in r["points"]]
    rows = []
    for r in (r for r in runs if "file" in r and code_of(r) == "new"):
        twin = next((t for t in runs if "file" not in t and code_of(t) == "new"
                     and t["topology"] == topo_name(r["family"], r["boxes"])
                     and t["collective"] == r["collective"]), None)
        same = ("-" if twin is None or not r["points"] else
                "yes" if frontier(r) == frontier(twin) else "**no**")
        rows.append(f"| {r['topology']} | {twin['topology'] if twin else '-'} "
                    f"| {r['collective']} | {len(r['points'])} | {same} |")
    return rows


def comparison_rows(runs: list[dict]) -> list[str]:
    rows = []
    by = {(r["topology"], r["collective"], r["method"]): r for r in runs
          if code_of(r) == "new"}
    for topo in EXACT_TOPOS:
        for coll in COLLECTIVES:
            d, e = by.get((topo, coll, "decomposed")), by.get((topo, coll, "exact"))
            if d is None or e is None:
                continue
            t = fmt_div(e["wall_seconds"], d["wall_seconds"])
            x = fmt_div(e["best_ratio"], d["best_ratio"], 3)
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


def side_by_side_rows(runs: list[dict]) -> list[str]:
    """One row per job measured on both codes: old, new and new/old."""
    rows = []
    new = {job_name(r): r for r in runs if code_of(r) == "new"}
    old = {job_name(r): r for r in runs if code_of(r) == "old"}
    for name, n in new.items():
        o = old.get(name)
        if o is None:
            continue
        rows.append(
            f"| {n['topology']} | {n['gpus']} | {n['collective']} | {n['method']} "
            f"| {fmt(o['wall_seconds'])} | {fmt(n['wall_seconds'])} "
            f"| {fmt_div(n['wall_seconds'], o['wall_seconds'])} "
            f"| {fmt(o['peak_mb'], 0)} | {fmt(n['peak_mb'], 0)} "
            f"| {fmt_div(n['peak_mb'], o['peak_mb'])} "
            f"| {fmt_file(o)} | {fmt_file(n)} "
            f"| {fmt_div(n.get('largest_file_mb'), o.get('largest_file_mb'), 3)} "
            f"| {fmt_ratio(o['best_ratio'], o['best_steps'])} "
            f"| {fmt_ratio(n['best_ratio'], n['best_steps'])} "
            f"| {fmt_div(n['best_ratio'], o['best_ratio'], 3)} "
            f"| {len(o['points'])} / {len(n['points'])} "
            f"| {o.get('files', '-')} / {n.get('files', '-')} "
            f"| {fmt_exit(o)} / {fmt_exit(n)} |")
    return rows


def markdown(doc: dict) -> str:
    m, code, runs = doc["machine"], doc["code"], doc["runs"]
    base = doc.get("baseline")
    lines = [f"# Multi-node synthesis at scale, {m['date']}", "",
             f"`{shlex.join(['python3', 'bench/bench_scale.py', *doc['argv']])}`", "",
             "## Machine and code", "",
             f"- Date (`date -u`): {m['date']}",
             f"- CPU: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
             f"{m['memory_gib']} GiB memory",
             f"- OS: {m['os']}",
             f"- Python {m['python']}, OR-Tools {m['ortools']}, z3-solver {m['z3']}, "
             f"networkx {m['networkx']}",
             f"- Code measured{' (new)' if base else ''}: {code['what']}; children "
             f"imported `{code['imported_from']}`"]
    if base:
        lines.append(f"- Baseline (old): {base['what']}, \"{base.get('subject', '')}\"; "
                     f"children imported `{base['imported_from']}`. Every job ran on "
                     "both, back to back, the order alternating from job to job (new "
                     "first on the 1st, 3rd, ... job, old first on the others), with the "
                     "same time limit and kill")
    loads = [x for r in runs for x in (r.get("load_before"), r.get("load_after"))
             if x is not None]
    lines += ["- Solver cache: every child started with an empty SYNTH_CACHE_DIR of its "
              "own (cold runs; nothing answered from ~/.cache/synth)",
              "- Uncommitted changes in the snapshot's paths at the start (not "
              "measured): " + (", ".join(m["git_uncommitted_code"]) or "none"),
              f"- Load average (1 min) at the start {doc['load_start']:.2f}, at the end "
              f"{doc.get('load_end', 0):.2f}"
              + (f", between {min(loads):.2f} and {max(loads):.2f} around the runs"
                 if loads else "")
              + f"; total {doc.get('total_seconds', 0):.0f} s for {len(runs)} runs, one "
              "at a time", "",
              "## Goals (from the measured numbers only)", ""]
    lines += goals(runs, base)
    if any("file" in r for r in runs):
        lines += ["", "## A box's own file repeated against the built-in", "",
                  "Each point is (steps, rounds, chunks); the same frontier means the same "
                  "points in the same order.", "",
                  "| file | built-in | collective | points | same frontier |",
                  "| --- | --- | --- | ---: | --- |"]
        lines += own_file_rows(runs)
    if base:
        sbs = side_by_side_rows(runs)
        lines += ["", f"## Old ({base['commit']}) against new ({code['commit']})", "",
                  "Same job, same time limit, run back to back. new/old below 1: the new "
                  "code is faster, smaller or closer to the bound. Largest file: the "
                  "largest file the run wrote (MiB). Points and files: old / new.", "",
                  "| topology | GPUs | collective | method | old wall s | new wall s "
                  "| wall new/old | old peak MB | new peak MB | peak new/old "
                  "| old largest file MB | new largest file MB | file new/old "
                  "| old best x bound | new best x bound | best new/old | points "
                  "| files | exit old / new |",
                  "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: | ---: | ---: | --- | --- | ---: | --- | --- | --- |"]
        lines += sbs or ["| (no job finished on both) |"]
    lines += ["", "## Every run", "",
              "Method: each run's own (the table's column; without --default-method, "
              "`decomposed` on K >= 2 boxes, `auto` on one box), "
              f"time limit {doc['time_limit']:g} s; `exact` runs get "
              f"{min(EXACT_TIME_LIMIT, doc['time_limit']):g} s. Wall s: around the child "
              "process (start-up, imports, synthesis, verification, writing files). Synth s: "
              "the `seconds` of the JSON summary (synthesis, without writing files). CPU s: "
              "user + system seconds of the child (above wall s: more than one core "
              "busy). Peak MB: ru_maxrss of the child. Points: frontier points. Files, "
              "largest MB: files written and the largest of them. Best x bound: the "
              "smallest ratio of rounds per chunk to the bandwidth bound, with its steps; "
              "fewest-steps x bound: the ratio of the point with the fewest steps. Load: "
              "1-minute load average just before the run. DNF: killed "
              f"{GRACE:.0f} s after its time limit; MEM: killed above "
              f"{doc.get('max_rss_mb', DEFAULT_MAX_RSS_MB):.0f} MiB resident.", "",
              "| topology | GPUs | collective | method | code | wall s | synth s | CPU s "
              "| peak MB | files | largest MB | points | best x bound "
              "| fewest-steps x bound | load | exit | stopped |",
              "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: | --- | --- | ---: | --- | --- |"]
    commits = {"new": code["commit"], "old": base["commit"] if base else "?"}
    for r in runs:
        lines.append(
            f"| {r['topology']} | {r.get('ranks') or r['gpus']} | {r['collective']} "
            f"| {r['method']} | {code_of(r)} {commits[code_of(r)]} "
            f"| {fmt(r['wall_seconds'])} | {fmt(r.get('synth_seconds'))} "
            f"| {fmt(r.get('cpu_seconds'))} | {fmt(r['peak_mb'], 0)} "
            f"| {r.get('files', '-')} | {fmt_file(r)} | {len(r['points'])} "
            f"| {fmt_ratio(r['best_ratio'], r['best_steps'])} "
            f"| {fmt_ratio(r['fewest_ratio'], r['fewest_steps'])} "
            f"| {fmt(r.get('load_before'), 2)} | {fmt_exit(r)} | {fmt_stopped(r)} |")
    comp = comparison_rows(runs)
    if comp:
        lines += ["", "## Exact against decomposed (2 boxes" + (", new code)" if base
                                                                 else ")"), "",
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
    seen = {}
    for r in runs:
        b = r.get("bounds")
        key = (r["topology"], r["collective"])
        if not b or key in seen and seen[key] == b["rounds_per_chunk"]:
            continue
        note = f" ({code_of(r)} code differs)" if key in seen else ""
        seen[key] = b["rounds_per_chunk"]
        lines.append(f"| {r['topology']} | {r['collective']} | {b['rounds_per_chunk']}{note} "
                     f"| {fmt(b['us_per_mb'], 3)} | {b['steps']} |")
    errors = [r for r in runs if r["status"] != "ok"]
    if errors:
        lines += ["", "## Failures and DNFs", ""]
        for r in errors:
            tail = " ".join((r.get("stderr_tail") or "").strip().splitlines()[-3:])[-400:]
            lines.append(f"- {job_name(r)} ({code_of(r)} code): {r['status']}, exit "
                         f"{r['exit_code']}, wall {fmt(r['wall_seconds'])} s, peak "
                         f"{fmt(r['peak_mb'], 0)} MB: {r.get('error', '')}"
                         + (f" (stderr: `{tail}`)" if tail and tail not in r.get('error', '')
                            else ""))
    lines += ["", "The frontier points of every run (steps, rounds, chunks, ratio to the "
              "bound, latency us, us/MB, method) are in the .json next to this file."]
    return "\n".join(lines) + "\n"


def plot(doc: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    runs = doc["runs"]
    base = doc.get("baseline")
    fig, (ax_t, ax_x, ax_f) = plt.subplots(1, 3, figsize=(18, 5.5))
    colors = {"allgather": "tab:blue", "reducescatter": "tab:orange",
              "allreduce": "tab:green", "alltoall": "tab:red"}
    styles = {"dgx2": ("-", "o"), "dgxh100": ("--", "s"), "ndv2": (":", "^")}
    for code in ("new", "old"):
        for family in styles:
            for coll in colors:
                rs = sorted((r for r in runs if r["family"] == family
                             and r["collective"] == coll and r["method"] != "exact"
                             and code_of(r) == code), key=lambda r: r["gpus"])
                if not rs:
                    continue
                line, marker = styles[family]
                kw = dict(linestyle=line, marker=marker, color=colors[coll],
                          label=f"{family} {coll}")
                if code == "old":  # faded, thin, hollow; one legend entry for all
                    kw.update(alpha=0.45, linewidth=1, markerfacecolor="none", label=None)
                ax_t.plot([r["gpus"] for r in rs], [r["wall_seconds"] for r in rs], **kw)
                ok = [r for r in rs if r["best_ratio"] is not None]
                ax_x.plot([r["gpus"] for r in ok], [r["best_ratio"] for r in ok], **kw)
                fs = [r for r in rs if r.get("largest_file_bytes")]
                ax_f.plot([r["gpus"] for r in fs], [r["largest_file_mb"] for r in fs], **kw)
                for r in rs:
                    if r["status"] != "ok":
                        ax_t.annotate(f"{r['status']}" + (" (old)" if code == "old" else ""),
                                      (r["gpus"], r["wall_seconds"]),
                                      textcoords="offset points", xytext=(4, 4),
                                      fontsize=8, color="red")
    if base:
        ax_x.plot([], [], color="grey", alpha=0.45, marker="o", markerfacecolor="none",
                  label=f"old code {base['commit']} (faded, hollow)")
    # exact runs (2 boxes): unconnected markers, coloured by collective; dgxh100x2 and
    # dgx2x2 have different GPU counts. A ratio far above the lines is drawn at the top
    # of the panel with its value, so that it does not squash the lines.
    exact = [r for r in runs if r["method"] == "exact" and code_of(r) == "new"]
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
    log_labels = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    has_files = any(r.get("largest_file_bytes") for r in runs)
    if not has_files:  # recorded before the largest file was
        ax_f.text(0.5, 0.5, "largest file not recorded in this run", ha="center",
                  va="center", transform=ax_f.transAxes, fontsize=9, color="grey")
    for ax in (ax_t, ax_f) if has_files else (ax_t,):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(log_labels)
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_t.set_ylabel("wall seconds (child process)")
    ax_t.set_title("Synthesis wall time")
    ax_x.axhline(1.0, color="black", linewidth=0.8)
    for y in (1.03, 1.05, 1.10):
        ax_x.axhline(y, color="grey", linewidth=0.8, linestyle=":")
    ax_x.set_ylabel("best rounds-per-chunk / bandwidth bound")
    ax_x.set_title("Best frontier point against the bandwidth bound")
    ax_f.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax_f.set_ylabel("largest file written (MiB)")
    ax_f.set_title("Largest schedule file")
    for ax in (ax_t, ax_x, ax_f):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        gpus = sorted({r["gpus"] for r in runs})
        ax.set_xlim(gpus[0] / 1.25, gpus[-1] * 1.25)
        ax.set_xticks(gpus)
        ax.set_xticklabels([str(g) for g in gpus])
        ax.grid(True, which="both", alpha=0.3)
    ax_x.legend(fontsize=7, loc="best")
    m = doc["machine"]
    what = f"commit {doc['code']['commit']}" + (f" (old: {base['commit']}, faded)"
                                                if base else "")
    fig.suptitle(f"synth multi-node synthesis, {what}, "
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
    return (f"[{i}/{n}] {job_name(r):38} {code_of(r):3} {r['status']:5} exit "
            f"{r['exit_code']:>3}  wall {r['wall_seconds']:7.1f} s  synth "
            f"{fmt(r.get('synth_seconds')):>6} s  peak {r['peak_mb']:6.0f} MB  "
            f"{r.get('files', 0):3} files, largest {fmt_file(r)} MB  "
            f"{len(r['points']):2} points  best "
            f"{fmt_ratio(r['best_ratio'], r['best_steps'])}  fewest "
            f"{fmt_ratio(r['fewest_ratio'], r['fewest_steps'])}  load "
            f"{r.get('load_before', 0):.1f}"
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
    ap.add_argument("--all-512", action="store_true",
                    help=f"also allgather and reducescatter at {LARGEST_GPUS} GPUs "
                    "(default: allreduce only there)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also measure commit REV (git archive into its own folder), "
                    "alternating with HEAD job by job; adds an old/new table")
    ap.add_argument("--max-rss-mb", type=float, default=DEFAULT_MAX_RSS_MB,
                    help="kill a child whose resident memory passes this many MiB "
                    f"(default {DEFAULT_MAX_RSS_MB:g}; recorded as MEM)")
    ap.add_argument("--alltoall", action="store_true",
                    help="the alltoall runs instead (method auto: " + ", ".join(
                        topo_name(f, k) for f, k in ALLTOALL_TOPOLOGIES) + ")")
    ap.add_argument("--gateways", action="store_true",
                    help="the decomposed runs on boxes with gateways instead (" + ", ".join(
                        topo_name(f, k) for f, k in GATEWAY_TOPOLOGIES) + "; time limit "
                    f"{GATEWAY_TIME_LIMIT:g} s unless --time-limit)")
    ap.add_argument("--own-files", action="store_true",
                    help="topology files repeated with --boxes beside the built-in NAMExK "
                    "instead (" + ", ".join(f"topologies/{f}.yaml --boxes {k}" for f, k
                                            in OWN_FILE_TOPOLOGIES) + "), frontiers compared")
    ap.add_argument("--default-method", action="store_true",
                    help="the multi-box runs with method auto, the command's default (what "
                    "a user who gives no --method gets), instead of decomposed")
    ap.add_argument("--at-4096", action="store_true",
                    help="dgxh100x512 (4096 GPUs) allgather, reducescatter and allreduce "
                    "instead, method auto, --model line-rate (issue 28)")
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

    time_limit = args.time_limit or (QUICK_TIME_LIMIT if args.quick else GATEWAY_TIME_LIMIT
                                     if args.gateways or args.own_files
                                     else DEFAULT_TIME_LIMIT)
    jobs = all_jobs(time_limit, args.all_512)
    if args.alltoall:
        jobs = [{"topology": topo_name(f, k), "family": f, "boxes": k,
                 "gpus": k * BOX_GPUS[f], "collective": "alltoall", "method": "auto",
                 "time_limit": time_limit} for f, k in ALLTOALL_TOPOLOGIES]
    if args.at_4096:
        # in the line-rate model, the bound's own: cost model 2 lists the deepest
        # pipelines as left out (never the fastest up to 1 GB), their files written
        jobs = [{"topology": "dgxh100x512", "family": "dgxh100", "boxes": 512, "gpus": 4096,
                 "collective": c, "method": "auto", "time_limit": time_limit,
                 "options": ["--model", "line-rate"]} for c in COLLECTIVES]
    if args.own_files:
        jobs = [dict({"topology": topo_name(f, k), "family": f, "boxes": k,
                      "gpus": k * BOX_GPUS[f], "collective": c, "method": "decomposed",
                      "time_limit": time_limit}, **mine)
                for f, k in OWN_FILE_TOPOLOGIES for c in OWN_FILE_COLLECTIVES
                for mine in ({}, {"file": f"topologies/{f}.yaml",
                                  "topology": f"{f}.yaml --boxes {k}"})]
    if args.gateways:
        jobs = [{"topology": topo_name(f, k), "family": f, "boxes": k,
                 "gpus": k * BOX_GPUS[f], "collective": c, "method": "decomposed",
                 "time_limit": time_limit}
                for f, k in GATEWAY_TOPOLOGIES for c in COLLECTIVES]
    if args.default_method:  # after every list above: --gateways' and --own-files' too
        jobs = [dict(j, method="auto") if j["method"] == "decomposed" else j for j in jobs]
    if args.quick:
        jobs = [j for j in jobs if j["topology"] in EXACT_TOPOS
                and j["collective"] == "allgather"]
    if args.jobs:
        wanted = [w.strip() for w in args.jobs.split(",") if w.strip()]
        jobs = [j for j in jobs if any(w in job_name(j) for w in wanted)]
        if not jobs:
            example = "auto" if args.default_method else "decomposed"
            ap.error(f"no run matches --jobs; names look like 'dgx2x4 allreduce {example}'"
                     + ("" if args.all_512 else f" (at {LARGEST_GPUS} GPUs only allreduce "
                        "runs without --all-512)"))
    out = Path(args.out) if args.out else record_stem(HERE.parent, "scale")
    if out.suffix in (".md", ".json", ".png"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)

    code_dir = Path(tempfile.mkdtemp(prefix="synth-scale-code-"))
    base_dir = Path(tempfile.mkdtemp(prefix="synth-scale-base-")) if args.baseline else None
    try:
        code = snapshot(code_dir)
        recorded = recorded_machine(REPO, "bench_scale", True, committed(code))
        if recorded is None:
            return 2
        doc = {"benchmark": "scale", "argv": argv, "machine": machine(recorded),
               "code": code, "time_limit": time_limit,
               "exact_time_limit": min(EXACT_TIME_LIMIT, time_limit), "grace": GRACE,
               "max_rss_mb": args.max_rss_mb,
               "baseline": snapshot(base_dir, args.baseline) if base_dir else None,
               "load_start": os.getloadavg()[0], "runs": []}
        codes = [("new", code_dir)] + ([("old", base_dir)] if base_dir else [])
        n = len(jobs) * len(codes)
        print(f"scale benchmark: {n} runs ({len(jobs)} jobs x {len(codes)} codes), one at "
              f"a time; time limit {time_limit:g} s (exact {doc['exact_time_limit']:g} s); "
              f"writing {out}.json/.md/.png\ncode: {doc['code']['what']}, imported from "
              f"{doc['code']['imported_from']}", flush=True)
        if doc["baseline"]:
            print(f"baseline: {doc['baseline']['what']}, imported from "
                  f"{doc['baseline']['imported_from']}", flush=True)
        start = time.perf_counter()
        i = 0
        for k, job in enumerate(jobs):
            for code, where in (codes if k % 2 == 0 else codes[::-1]):
                i += 1
                r = run_one(job, where, code, args.max_rss_mb)
                doc["runs"].append(r)
                print(progress_line(i, n, r), flush=True)
                doc["total_seconds"] = time.perf_counter() - start
                doc["load_end"] = os.getloadavg()[0]
                Path(f"{out}.json").write_text(json.dumps(doc, indent=1) + "\n")  # ^C
                Path(f"{out}.md").write_text(markdown(doc))
        doc["total_seconds"] = time.perf_counter() - start
        doc["load_end"] = os.getloadavg()[0]
        write(doc, out)
    finally:
        shutil.rmtree(code_dir, ignore_errors=True)
        if base_dir:
            shutil.rmtree(base_dir, ignore_errors=True)
    print("\n".join(["", "goals:"] + goals(doc["runs"], doc["baseline"])))
    print(f"\nwrote {out}.json, {out}.md, {out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
