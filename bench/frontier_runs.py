"""One collective's frontier on one machine, as a user runs it, for the benchmarks that
sweep machines (bench_degraded.py, bench_machines.py): `synth COLLECTIVE --json` in a
child process, then `synth verify` on every file it wrote."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTED = {"broadcast", "reduce", "gather", "scatter"}


def synth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, cwd=REPO)


def frontier_run(name: str, topo: str, machine_args: list[str], time_limit: float,
                 model: str, out: Path) -> tuple[dict, dict | None]:
    """(the row every sweep records: wall seconds, exit, bound, the closest point to it
    and its method, points, files verified; the --json summary, or None when the run
    printed none). Rooted collectives at root 0; `machine_args` (e.g. --without EDIT)
    go to the run and to verify, which derives the machine again."""
    root = ["--root", "0"] if name in ROOTED else []
    start = time.perf_counter()
    done = synth(name, "--topo", topo, *machine_args, *root, "--json", "--no-progress",
                 "--time-limit", f"{time_limit:g}", "--model", model, "--out", str(out))
    row = {"collective": name, "topology": topo, "exit": done.returncode,
           "wall_s": round(time.perf_counter() - start, 1)}
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError:
        return row | {"error": done.stderr.strip().splitlines()[-1:]}, None
    points = summary["frontier"]
    files = [p["file"] for p in points if p["file"]]
    checked = synth("verify", *files, "--topo", topo, *machine_args) if files else None
    closest = min(points, key=lambda p: p["ratio_to_bound"]) if points else None
    return row | {
        "bound": summary["bounds"]["rounds_per_chunk"],
        "best_ratio": closest and closest["ratio_to_bound"],
        "best_method": closest and closest["method"],
        "points": len(points), "files": len(files),
        "verified": 0 if checked is None else sum(
            line.startswith("ok ") for line in checked.stdout.splitlines()),
        "verify_exit": None if checked is None else checked.returncode,
        "verify_said": None if checked is None or checked.returncode == 0 else
        checked.stderr.strip().splitlines()[-1:],
        "synth_s": summary["seconds"], "out_of_time": summary["out_of_time"],
        "stopped": summary.get("stopped")}, summary


def sweep_parser(doc: str, time_limit: float, only: list[str], what: str
                 ) -> argparse.ArgumentParser:
    """The options every sweep takes: --out PREFIX, --time-limit, --model, and --only
    (a comma-separated subset of `only`, the `what` it sweeps)."""
    ap = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    ap.add_argument("--out", type=_prefix, help="PREFIX for PREFIX.json and PREFIX.md "
                    "(its folder must exist)")
    ap.add_argument("--time-limit", type=float, default=time_limit)
    ap.add_argument("--model", choices=["line-rate", "calibrated"], default="line-rate")
    ap.add_argument("--only", default=",".join(only),
                    help=f"comma-separated {what} (default: all {len(only)})")
    return ap


def _prefix(text: str) -> str:
    """--out checked before the sweep (a missing folder lost the record at its end)."""
    if not Path(text).parent.is_dir():
        raise argparse.ArgumentTypeError(f"no folder {Path(text).parent} for {text}")
    return text


def command_line() -> str:
    """The command as run, for a record's header (a subset's --only included)."""
    return " ".join(["python3", f"bench/{Path(sys.argv[0]).name}",
                     *map(shlex.quote, sys.argv[1:])])


def ratio(x: float | None) -> str:
    """A table's x-bound figure: 4 decimals, or - where there is none."""
    return "-" if x is None else f"{x:.4f}"


def finish(rows: list[dict], machine: dict, lines: list[str], prefix: str | None) -> int:
    """Print the record's page; with --out, write PREFIX.json (machine and runs) and
    PREFIX.md (the page)."""
    print("\n".join(lines))
    if prefix:
        Path(f"{prefix}.json").write_text(json.dumps({"machine": machine, "runs": rows},
                                                     indent=1))
        Path(f"{prefix}.md").write_text("\n".join(lines) + "\n")
    return 0
