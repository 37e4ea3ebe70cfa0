"""Every synthesized schedule through `synth run`, each in fresh processes: the full-size
form of tests/test_runner.py's check against torch.

    python bench/runner_sweep.py                          # ring:4 and dgx1, 64KB: ~6 min
    python bench/runner_sweep.py --topos dgx1 --sizes 64KB,4MB --last
    python bench/runner_sweep.py --out bench/results/NAME

For each topology and collective it synthesizes the frontier with the CLI (`synth
COLLECTIVE --topo T --json`, root 0 for rooted collectives), then runs every frontier
point (or with --last only the one with the most steps) with `synth run FILE --json` at
each size: the verifier, a spawn of one gloo process per rank, the schedule, torch's
own collective on the same data. The test suite runs every point too, but in one set
of worker processes per topology and only one file through the whole command; this
starts the processes and imports torch for every file, as a user's `synth run` does
(about 10 s a file for 4 ranks and 20 s for 8 on 2 loaded cores).

It records each run's outcome and wall time, writes NAME.json and NAME.md, and exits 1
if any schedule's result differed from torch's or a run failed. It asserts no time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import record_stem, recorded_machine  # bench/machine.py

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = {
    "ring:4": ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall"],
    "dgx1": ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall"],
}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}


def synth(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=timeout)


def frontier_files(topo: str, name: str, out: Path, time_limit: float) -> list[str]:
    root = ["--root", "0"] if name in ROOTED else []
    result = synth(name, "--topo", topo, *root, "--time-limit", str(time_limit), "--json",
                   "--no-progress", "--out", str(out))
    if result.returncode != 0:
        raise SystemExit(f"{topo} {name}: synthesis failed: {result.stderr.strip()[-500:]}")
    return [p["file"] for p in json.loads(result.stdout)["frontier"]]


def verdict(row: dict) -> str:
    if row["ok"]:
        return "yes"
    last = row["error"].splitlines()[-1] if row["error"] else f"exit {row['exit']}"
    return "NO: " + last.replace("|", "/")


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--topos", default=",".join(TOPOLOGIES),
                        help=f"comma-separated, of {', '.join(TOPOLOGIES)}")
    parser.add_argument("--sizes", default="64KB")
    parser.add_argument("--last", action="store_true",
                        help="only the frontier point with the most steps")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds for each frontier's synthesis")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    recorded = recorded_machine(REPO, "runner_sweep", True)
    if recorded is None:
        return 2
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for topo in args.topos.split(","):
            for name in TOPOLOGIES[topo]:
                files = frontier_files(topo, name, Path(tmp), args.time_limit)
                for path in files[-1:] if args.last else files:
                    for size in args.sizes.split(","):
                        start = time.monotonic()
                        out = synth("run", path, "--size", size, "--iters", "1", "--json")
                        wall = time.monotonic() - start
                        report = json.loads(out.stdout) if out.returncode == 0 else {}
                        ok = out.returncode == 0 and report.get("correct") is True \
                            and report.get("collective") == name
                        failed += not ok
                        rows.append({"topology": topo, "collective": name,
                                     "schedule": Path(path).stem, "size": size, "ok": ok,
                                     "exit": out.returncode, "wall_s": round(wall, 2),
                                     "error": "" if ok else out.stderr.strip()[-500:]})
                        print(f"{topo:7} {Path(path).stem:28} {size:>6}  "
                              f"{'ok' if ok else 'FAILED'}  {wall:5.1f} s", flush=True)
    info = {**recorded, "cores": os.cpu_count(),
            "date": subprocess.run(["date"], capture_output=True, text=True).stdout.strip()}
    stem = args.out or str(record_stem(Path(__file__).resolve().parent.parent, "runner-sweep"))
    Path(stem + ".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    lines = [f"# Runner sweep, {info['date']}", "",
             f"`python bench/runner_sweep.py --topos {args.topos} --sizes {args.sizes}"
             f"{' --last' if args.last else ''}`", "",
             f"Machine: {info['cpu']}, {info['cores']} cores; Python {info['python']}; "
             f"commit {info['commit']}.", "",
             f"{len(rows) - failed} of {len(rows)} runs matched torch.", "",
             "| topology | schedule | size | matches torch | wall s |",
             "| --- | --- | ---: | --- | ---: |"]
    lines += [f"| {r['topology']} | {r['schedule']} | {r['size']} | {verdict(r)} | "
              f"{r['wall_s']} |" for r in rows]
    Path(stem + ".md").write_text("\n".join(lines) + "\n")
    print(f"{len(rows) - failed} of {len(rows)} runs matched torch; wrote {stem}.md and .json")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
