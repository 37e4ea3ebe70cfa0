"""`synth run` on a pipelined (version 2) dgx1 allreduce, before and after, beside torch.

    python bench/bench_runner_v2.py               # 64MB, 3 iterations, 3 repeats: ~15 min
    python bench/bench_runner_v2.py --code worktree --repeat 5 --batches 2,4,8
    python bench/bench_runner_v2.py --dgx2x2 --dgx2x2-size 4MB  # + 32 processes: heavy
    python bench/bench_runner_v2.py --out bench/results/NAME

What it runs, for each code version (`head`: `git archive HEAD synth topologies
pyproject.toml`; `head-omp1`: the same, with OMP_NUM_THREADS=1 in the environment,
which separates the effect of one torch thread per process from the rest; `worktree`:
a copy of the working tree's same paths; all taken at the start and imported through
PYTHONPATH, so that edits made meanwhile do not leak in):

1. `synth allreduce --topo dgx1` (the frontier, version 1 files), with the worktree code;
   its best point (least rounds per chunk, then fewest steps) is the bandwidth-optimal
   schedule s6-r14-c48.
2. A pipelined version 2 schedule built from it: the point's steps, consecutive chunks of
   one (src, dst, op) joined into ranged sends, are the program of batch 0, on chunks
   0..C0-1; P batches with stride C0 (so C = P x C0: allreduce has one share, the
   buffer); the rounds of expanded step t are the least that carry the loads of every
   batch active then (synth.construct.moves.scaled_rounds). `synth verify` must accept it.
3. `synth run FILE --size SIZE --iters N --json` for the version 1 point and each
   pipelined file, one run at a time: 8 gloo processes on this machine's CPU, the
   schedule checked against torch's all_reduce on the same data, and both timed in the
   same processes (the report's synth_us and torch_us, each the mean of N runs after a
   warm-up); synth / torch is their ratio. Every (code, file) pair runs --repeat times,
   the pairs taken in turn, so that a burst of load elsewhere hits all of them alike;
   the summary gives the median ratio and the range.
4. With --dgx2x2: the decomposed (version 2) dgx2x2 allreduce frontier's best point, on
   32 processes (on 2 cores: slow; a smaller size and one iteration are the default).

It writes NAME.json and NAME.md (default bench/results/runner-v2-DATE) with the machine,
the date, the commit, the files that differ from it (refused outside the snapshots'
paths), each snapshot's content hash, and the load average before and after (the
machine is shared: other people's jobs slow every number alike).
It asserts no time; it exits 1 if a run failed or a result differed from torch's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from machine import Snapshot, content_sha256, record_stem, recorded_machine  # bench/

REPO = Path(__file__).resolve().parent.parent
CODE_PATHS = ["synth", "topologies", "pyproject.toml"]


def _cmd(*args) -> str:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO).stdout.strip()


def snapshot(kind: str, into: Path) -> dict:
    """The code measured, copied into `into` (see the module docstring)."""
    into.mkdir(parents=True)
    if kind == "head":
        archive = subprocess.run(["git", "archive", "HEAD", *CODE_PATHS], cwd=REPO,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    else:
        for path in CODE_PATHS:
            source = REPO / path
            if source.is_dir():
                shutil.copytree(source, into / path,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, into / path)
    sha256 = content_sha256(into)
    found = subprocess.run([sys.executable, "-c", "import synth; print(synth.__file__)"],
                           env=child_env(into), cwd=into, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(into.resolve()):
        raise SystemExit(f"children would import synth from {found}, not {into}")
    return {"code": kind, "sha256": sha256}


def child_env(code: Path, omp1: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code))
    for name in ("PYTHONSTARTUP", "OMP_NUM_THREADS"):
        env.pop(name, None)
    if omp1:
        env["OMP_NUM_THREADS"] = "1"
    return env


def synth(code: Path, *args, omp1: bool = False, timeout=1800) -> subprocess.CompletedProcess:
    # cwd: the snapshot, since `python -m` puts the working directory first on sys.path
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, env=child_env(code, omp1), cwd=code, timeout=timeout)


def best_point(code: Path, topo: str, out: Path, *extra) -> Path:
    """The frontier's point with the least rounds per chunk (then the fewest steps)."""
    result = synth(code, "allreduce", "--topo", topo, *extra, "--time-limit", "120", "--json",
                   "--no-progress", "--out", str(out))
    if result.returncode != 0:
        raise SystemExit(f"{topo} allreduce: {result.stderr.strip()[-500:]}")
    points = json.loads(result.stdout)["frontier"]
    best = min(points, key=lambda p: (p["rounds"] / p["chunks"], p["steps"]))
    return Path(best["file"])


def pipelined(point: Path, batches: int, out: Path) -> Path:
    """Step 2 of the module docstring: the point's steps as the program of `batches`."""
    from synth.construct.decompose import ranged
    from synth.construct.moves import scaled_rounds
    from synth.schedule.collectives import make_collective
    from synth.schedule.file import read_schedule, write_schedule
    from synth.schedule.ir import Pipeline, Schedule, Step

    plain = read_schedule(point)
    coll, model = plain.collective, plain.model
    assert coll.name == "allreduce" and plain.pipeline is None
    share = coll.chunks  # allreduce: one share, the whole buffer
    steps = tuple(Step(step.rounds, ranged([(x.chunk, x.src, x.dst, x.op) for x in step.sends],
                                           share))
                  for step in plain.steps)
    loads = [Counter() for _ in steps]
    for load, step in zip(loads, steps):
        for x in step.sends:
            load[(x.src, x.dst)] += x.count
    rounds = []
    for t in range(len(steps) + batches - 1):
        active = Counter()
        for i in range(max(0, t - batches + 1), min(t, len(steps) - 1) + 1):
            active.update(loads[i])
        rounds.append(scaled_rounds(model, active))
    info = {"method": f"{point.stem} in a pipeline of {batches} batches (bench/bench_runner_v2.py)"}
    schedule = Schedule(make_collective("allreduce", coll.ranks, share * batches), model, steps,
                        info, Pipeline(batches, share, tuple(rounds)))
    return write_schedule(schedule, out / f"{point.stem}-p{batches}.json")


def run(code: Path, omp1: bool, path: Path, size: str, iters: int) -> dict:
    start = time.monotonic()
    result = synth(code, "run", str(path), "--size", size, "--iters", str(iters), "--json",
                   omp1=omp1)
    wall = time.monotonic() - start
    if result.returncode != 0:
        return {"ok": False, "wall_s": round(wall, 1), "error": result.stderr.strip()[-500:]}
    report = json.loads(result.stdout)
    return {"ok": report["correct"], "wall_s": round(wall, 1), **report,
            "synth_over_torch": report["synth_us"] / report["torch_us"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--size", default="64MB")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", default="4", help="comma-separated pipeline depths")
    parser.add_argument("--code", default="head,head-omp1,worktree",
                        help="comma-separated, of head, head-omp1, worktree")
    parser.add_argument("--dgx2x2", action="store_true",
                        help="also the decomposed dgx2x2 allreduce (32 processes)")
    parser.add_argument("--dgx2x2-size", default="4MB")
    parser.add_argument("--dgx2x2-iters", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    load_start = round(os.getloadavg()[0], 2)
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        variants = args.code.split(",")
        kinds = {v.removesuffix("-omp1") for v in variants}
        codes = {kind: tmp / f"code-{kind}" for kind in sorted(kinds)}
        snaps = [snapshot(kind, path) for kind, path in codes.items()]
        # the copy that may differ from HEAD is the one the record must name by its hash
        named = next((c for c in snaps if c["code"] != "head"), snaps[0])
        recorded = recorded_machine(REPO, "bench_runner_v2", True, Snapshot(
            tuple(CODE_PATHS), named["sha256"], committed=named["code"] == "head"))
        if recorded is None:
            return 2
        info = {**recorded, "cores": os.cpu_count(), "torch": torch.__version__,
                "date": _cmd("date"), "load_start": load_start, "codes": snaps}
        builder = codes.get("worktree", next(iter(codes.values())))
        sys.path.insert(0, str(builder))  # build the pipelined files with that code too
        files = [(best_point(builder, "dgx1", tmp / "frontier"), args.size, args.iters)]
        for batches in map(int, args.batches.split(",")):
            path = pipelined(files[0][0], batches, tmp)
            check = synth(builder, "verify", str(path))
            if check.returncode != 0:
                raise SystemExit(f"synth verify rejects {path.name}: {check.stdout}{check.stderr}")
            files.append((path, args.size, args.iters))
        if args.dgx2x2:
            files.append((best_point(builder, "dgx2x2", tmp / "frontier", "--method",
                                     "decomposed"), args.dgx2x2_size, args.dgx2x2_iters))
        for rep in range(args.repeat):
            for path, size, iters in files:
                for variant in variants:
                    code = codes[variant.removesuffix("-omp1")]
                    load = round(os.getloadavg()[0], 2)
                    row = {"code": variant, "schedule": path.stem, "size": size, "repeat": rep,
                           "file_version": json.loads(path.read_text())["version"],
                           "load": load, **run(code, variant.endswith("-omp1"), path, size,
                                              iters)}
                    failed += not row["ok"]
                    rows.append(row)
                    print(f"{variant:10} {path.stem:28} {size:>5}  load {load:5.2f}  "
                          + (f"synth {row['synth_us'] / 1e6:7.3f} s  torch "
                             f"{row['torch_us'] / 1e6:7.3f} s  ratio "
                             f"{row['synth_over_torch']:5.2f}"
                             f"  {'correct' if row['correct'] else 'WRONG'}"
                             if "synth_us" in row else f"FAILED: {row['error'][-200:]}"),
                          flush=True)
    info["load_end"] = round(os.getloadavg()[0], 2)
    stem = args.out or str(record_stem(REPO, "runner-v2"))
    Path(stem + ".json").write_text(json.dumps({"machine": info, "args": vars(args),
                                                "rows": rows}, indent=1))
    Path(stem + ".md").write_text(render(info, args, rows))
    print(f"wrote {stem}.md and .json")
    return 1 if failed else 0


def render(info: dict, args, rows: list) -> str:
    lines = [f"# `synth run` on version 2 schedules, {info['date']}", "",
             f"`python bench/bench_runner_v2.py --size {args.size} --iters {args.iters} "
             f"--repeat {args.repeat} --batches {args.batches} --code {args.code}"
             f"{' --dgx2x2' if args.dgx2x2 else ''}`", "",
             f"Machine: {info['cpu']}, {info['cores']} cores; Python {info['python']}, torch "
             f"{info['torch']}; commit {info['commit']}; 1-minute load average "
             f"{info['load_start']} at the start, {info['load_end']} at the end (8 of it is "
             "ours while a run goes on).", "",
             "Code: " + "; ".join(f"{c['code']} (sha256 of {', '.join(CODE_PATHS)}: "
                                  f"{c['sha256']})" for c in info["codes"])
             + (f"; uncommitted at the start: {', '.join(info['uncommitted'])}"
                if info["uncommitted"] else "") + ".", "",
             "Seconds per run: the mean of the timed iterations after a warm-up; synth's "
             "schedule and torch's all_reduce timed in the same 8 processes, one after the "
             "other.", "", "## Summary", "",
             "| code | schedule | version | steps | chunks | messages (rank 0) | synth s "
             "(median) | torch s (median) | synth / torch: median | min - max |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["code"], r["schedule"]), []).append(r)
    for (code, schedule), group in groups.items():
        done = [r for r in group if "synth_us" in r]
        if not done:
            lines.append(f"| {code} | {schedule} | | | | | | | FAILED | |")
            continue
        ratios = sorted(r["synth_over_torch"] for r in done)
        first = done[0]
        lines.append(
            f"| {code} | {schedule} | {first['file_version']} | {first['steps']} "
            f"| {first['chunks']} | {first.get('messages', '')} "
            f"| {statistics.median(r['synth_us'] for r in done) / 1e6:.3f} "
            f"| {statistics.median(r['torch_us'] for r in done) / 1e6:.3f} "
            f"| {statistics.median(ratios):.2f} | {ratios[0]:.2f} - {ratios[-1]:.2f} |")
    lines += ["", "## Every run", "",
              "| code | schedule | size | repeat | load | synth s | torch s | synth / torch "
              "| correct | wall s |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        if "synth_us" not in r:
            last = r["error"].splitlines()[-1] if r["error"] else ""
            lines.append(f"| {r['code']} | {r['schedule']} | {r['size']} | {r['repeat']} "
                         f"| {r['load']} | | | | FAILED: {last} | {r['wall_s']} |")
            continue
        lines.append(f"| {r['code']} | {r['schedule']} | {r['size']} | {r['repeat']} "
                     f"| {r['load']} | {r['synth_us'] / 1e6:.3f} | {r['torch_us'] / 1e6:.3f} "
                     f"| {r['synth_over_torch']:.2f} | {r['correct']} | {r['wall_s']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
