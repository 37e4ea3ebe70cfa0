#!/usr/bin/env python3
"""Limits that hold: does `--time-limit` hold at scale, and how much memory does a job take?

    python bench/bench_limits.py                          # the default jobs, HEAD only
    python bench/bench_limits.py --baseline 2685954       # and the old code, interleaved
    python bench/bench_limits.py --jobs 'allgather ring:4096 5,verify'
    python bench/bench_limits.py --out bench/results/limits-DATE

What it measures. Each job runs in a child process, `python3 -m synth ARGS --out TMP
--no-progress` (a job is COLLECTIVE TOPO SECONDS, or `verify`: a valid 97 KB version 2
file of 25,000 batches, tests/test_limits.scattered_pipeline), with an empty solver
cache of its own. Per run: the wall seconds around the child (interpreter start-up
included, as a user's clock counts them), its CPU seconds and peak resident memory
(os.wait4's rusage), the exit code, the last line on stderr, wall / limit, the
files the job wrote (how many, the largest in MiB), and from its `--json` summary how
many frontier points a runtime was asked about (not `?` in the table) and how many
one loads. The
machine is shared (2 cores, other jobs running): the load average before and after each
run is recorded beside it, since wall seconds on a loaded machine say as much about
the load as about the code; CPU seconds and peak memory say more about the code.

The code measured is a snapshot of the committed HEAD (`git archive`), and with
--baseline REV a snapshot of REV too: each job runs on both, back to back, the order
alternating from job to job so that the load falls on both alike. A child still running
`--kill-after` seconds (default 900) after it started is killed and recorded as DNF;
one whose resident memory passes --max-rss-mb (default 8192, a guard for the shared
machine) is killed and recorded as MEM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import recorded_machine  # noqa: E402

JOBS = ["allgather ring:1024 5", "allgather ring:4096 5", "allreduce dgxh100x16 30",
        "allreduce dgxh100x32 30", "allreduce dgxh100x64 30", "allreduce dgxh100x128 30",
        "verify"]


def snapshot(rev: str, into: Path) -> Path:
    """The code of `rev` (synth, topologies), to import through PYTHONPATH; checked to
    be what a child started in a folder of its own imports (not the worktree's, nor an
    editable install)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "synth", "topologies",
                              "pyproject.toml"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    found = subprocess.run([sys.executable, "-c", "import synth; print(synth.__file__)"],
                           env={**os.environ, "PYTHONPATH": str(into)}, cwd=into.parent,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not found.startswith(str(into)):
        raise SystemExit(f"bench_limits: the child imports {found}, not the snapshot {into}")
    return into


def verify_file(folder: Path) -> Path:
    from tests.test_limits import scattered_pipeline

    path = folder / "scattered.json"
    path.write_text(json.dumps(scattered_pipeline(), separators=(",", ":")))
    return path


def run(job: str, code: Path, work: Path, kill_after: float, max_rss_mb: int) -> dict:
    """One child: its wall, CPU, peak memory, exit and last stderr line."""
    out = work / "out"
    if job == "verify":
        args, limit = ["verify", str(verify_file(work))], None
    else:
        collective, topo, seconds = job.split()
        args = [collective, "--topo", topo, "--time-limit", seconds, "--out", str(out),
                "--no-progress", "--json"]
        limit = float(seconds)
    env = {**os.environ, "PYTHONPATH": str(code), "SYNTH_CACHE_DIR": str(work / "cache")}
    load = os.getloadavg()[0]
    start = time.monotonic()
    summary = open(work / "summary.json", "w+")  # a file: a full pipe would stall the child
    proc = subprocess.Popen([sys.executable, "-m", "synth", *args], env=env, cwd=work,
                            stdout=summary, stderr=subprocess.PIPE, text=True)
    verdict = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > kill_after:
            verdict = "DNF"
        elif _rss_mb(proc.pid) > max_rss_mb:
            verdict = "MEM"
        if verdict:
            proc.send_signal(signal.SIGKILL)
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.2)
    wall = time.monotonic() - start
    err = proc.stderr.read().strip().splitlines()
    sizes = [f.stat().st_size for f in out.rglob("*") if f.is_file()] if out.exists() else []
    shutil.rmtree(out, ignore_errors=True)
    summary.seek(0)
    answered = _answered(summary.read())
    summary.close()
    return {**answered, "job": job, "limit_s": limit, "wall_s": round(wall, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mb": round(usage.ru_maxrss / 1024), "exit": verdict or
            os.waitstatus_to_exitcode(status), "last_line": err[-1][:200] if err else "",
            "wall_over_limit": round(wall / limit, 3) if limit else None,
            "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1),
            "files": len(sizes), "largest_file_mb": round(max(sizes, default=0) / 2**20, 2)}


def _answered(stdout: str) -> dict:
    """From the job's --json summary: its frontier points, how many of them some runtime
    was asked about (`loads` not null: the table's column is not `?`), and how many a
    runtime loads."""
    try:
        frontier = json.loads(stdout)["frontier"]
    except (ValueError, KeyError, TypeError):
        return {}
    asked = [p["loads"] for p in frontier if p.get("loads") is not None]
    return {"points": len(frontier), "asked": len(asked),
            "loaded": sum(x != "neither" for x in asked)}


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _files(run: dict) -> str:
    """The files written and the largest, in MiB ('-' in records made before they were
    counted)."""
    if "files" not in run:
        return "-"
    return f"{run['files']}, {run['largest_file_mb']}"


def _asked(run: dict) -> str:
    """'K of N, L load': points asked about of the frontier's, and loaded by a runtime."""
    if "asked" not in run:
        return "-"
    return f"{run['asked']} of {run['points']}, {run['loaded']} load"


def markdown(record: dict) -> str:
    m = record["machine"]
    lines = [f"# Limits that hold: {m['date']}", "",
             f"Commit {m['commit']}" + (f", baseline {record['baseline']}"
                                         if record.get("baseline") else "")
             + f"; {m['cpu']}, {m['memory_gib']} GiB, Python {m['python']}; "
             "a shared machine (the load average of its 2 cores is recorded per run).", "",
             "| job | code | limit s | wall s | wall / limit | CPU s | peak MB | exit | "
             "load | files, largest MB | points asked, loaded | last line on stderr |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in record["runs"]:
        lines.append(f"| {r['job']} | {r['code']} | {r['limit_s'] or '-'} | {r['wall_s']} | "
                     f"{r['wall_over_limit'] or '-'} | {r['cpu_s']} | {r['peak_mb']} | "
                     f"{r['exit']} | {r['load_before']}-{r['load_after']} | "
                     f"{_files(r)} | {_asked(r)} | {r['last_line'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--baseline", default=None, metavar="REV")
    parser.add_argument("--out", default=None, metavar="PREFIX")
    parser.add_argument("--kill-after", type=float, default=900.0)
    parser.add_argument("--max-rss-mb", type=int, default=8192)
    args = parser.parse_args()
    machine = recorded_machine(REPO, "bench_limits", recording=args.out is not None)
    if machine is None:
        return 2
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        codes = {"HEAD": snapshot("HEAD", Path(tmp) / "head")}
        if args.baseline:
            codes[args.baseline] = snapshot(args.baseline, Path(tmp) / "base")
        for i, job in enumerate(j.strip() for j in args.jobs.split(",")):
            order = list(codes.items())
            for name, code in (order if i % 2 == 0 else order[::-1]):
                with tempfile.TemporaryDirectory(dir=tmp) as work:
                    result = {"code": name, **run(job, code, Path(work), args.kill_after,
                                                  args.max_rss_mb)}
                runs.append(result)
                print(json.dumps(result), flush=True)
    record = {"machine": machine, "baseline": args.baseline, "runs": runs}
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(record, indent=1) + "\n")
        Path(args.out + ".md").write_text(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
