#!/usr/bin/env python3
"""When the best point is on disk, against ForestColl's published bar (issue 28).

    python bench/bench_answer_time.py                  # every job, one at a time
    python bench/bench_answer_time.py --jobs dgx2x2    # jobs whose name has a substring
    python bench/bench_answer_time.py --record         # also bench/results/answer-time-DATE.*
    python bench/bench_answer_time.py --method constructed --record   # ...-DATE-constructed.*

Each job is `synth allgather --topo T --model line-rate --method M -o DIR --json` as a
user runs it (M: auto, or constructed, which leaves out the exact search), in a fresh
process with the answer cache off (SYNTH_CACHE=0), one at a time. The line-rate model is
ForestColl's (GB/s of algorithmic bandwidth); in cost model 2 the frontier leaves out
points that are never the fastest at any size (on dgx2x2 the packed trees' pipelines of
500 chunks and more, whose pieces cost more than they save). The script watches DIR
every 0.05 s: synth writes the frontier in hand as the search goes on
(synth/anytime.py), so a file can be there long before the job ends. Recorded per job:

- best_s: seconds from the start until the file of the final frontier's best point (in
  rounds per chunk; a pipeline's fill keeps it a little above the cut bound) was on
  disk; within_1pct_s: until some file within 1.01 x the bound was;
- end_s: when the job ended (it goes on searching for points with fewer steps);
- best / bound: the best point of the final frontier, and its algbw in GB/s (the bound's
  over that, rounded down);
- steady GB/s: the algbw of the frontier's deepest pipeline with every level busy (its
  steady step's rounds per chunk, the fill left out), the measure ForestColl reports: its
  figure is its trees' optimal algbw (1 / the runtime formula of its packing), not a
  schedule's with a fill; "-" where no pipeline on the frontier has such a step;
- peak MiB: the job's peak resident memory (GNU time's %M).

ForestColl's side (its public Python, measured on this kind of machine and quoted in
issue 28; not installable from the package registries, so not rerun here): ndv2x4
13-16 s; DGX-1 x 4 with its NICs (dgx1ibx4) 47-59 s; dgx2x2 94-122 s (161.29 GB/s) in
40 MB; dgxa100x4 55-61 s. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import recorded_machine  # noqa: E402

# dgx2x2-several-routes: --routes several (docs/cli.md), the shared PCIe switches too
JOBS = ("ndv2x4", "dgx1ibx4", "dgx2x2", "dgx2x2-several-routes", "dgxa100x4")
FORESTCOLL = {"ndv2x4": "13-16 s", "dgx1ibx4": "47-59 s", "dgx2x2": "94-122 s, 40 MB",
              "dgx2x2-several-routes": "171.35 GB/s", "dgxa100x4": "55-61 s"}


def bound_of(topo: str) -> tuple[Fraction, float]:
    """The allgather bound in rounds per chunk, and the algbw (GB/s) it allows."""
    out = subprocess.run([sys.executable, "-m", "synth", "bounds", "allgather", "--topo",
                          topo, "--json"], capture_output=True, text=True, check=True,
                         cwd=REPO)
    said = json.loads(out.stdout)
    return Fraction(said["rounds_per_chunk"]), said["algbw_gbps_max"]


def ratio_of(path: Path, bound: Fraction) -> Fraction | None:
    """A schedule file's rounds per chunk over the bound; None while it cannot be read."""
    try:
        cost = json.loads(path.read_text())["cost"]
    except (OSError, ValueError, KeyError):
        return None
    return Fraction(cost["rounds"], cost["chunks"]) / bound


def steady_of(path: Path) -> Fraction | None:
    """A pipelined schedule file's rounds per chunk in a step with every level busy (the
    rounds of expanded step D - 1, D the program's steps, over a batch's chunks); None
    without a pipeline or with fewer batches than levels."""
    doc = json.loads(path.read_text())
    pipe, depth = doc.get("pipeline"), len(doc["steps"])
    if pipe is None or pipe["batches"] < depth:
        return None
    return Fraction(pipe["rounds"][depth - 1] * pipe["batches"], doc["chunks"])


def run_job(topo: str, limit: float, method: str = "auto") -> dict:
    bound, most_gbps = bound_of(topo)
    with tempfile.TemporaryDirectory() as out:
        command = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "synth", "allgather",
                   "--topo", topo, "--time-limit", f"{limit:g}", "--model", "line-rate",
                   "--method", method, "-o", out, "--json"]
        env = {**os.environ, "SYNTH_CACHE": "0"}
        start = time.monotonic()
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO, env=env)
        within = None
        seen: dict[str, float] = {}  # file name -> when first seen whole
        while job.poll() is None:
            for path in Path(out).rglob("allgather-*.json"):
                if path.name in seen:
                    continue
                ratio = ratio_of(path, bound)
                if ratio is None:
                    continue  # being written: looked at again
                seen[path.name] = round(time.monotonic() - start, 2)
                if ratio <= Fraction(101, 100) and within is None:
                    within = seen[path.name]
            time.sleep(0.05)
        end = round(time.monotonic() - start, 2)
        stdout, stderr = job.communicate()
        if job.returncode != 0:
            return {"error": f"exit {job.returncode}: {stderr.strip().splitlines()[-1:]}"}
        summary = json.loads(stdout)
        steady = [s for p in summary["frontier"] if p["file"]
                  and (s := steady_of(Path(p["file"]))) is not None]
    best = min(summary["frontier"], key=lambda p: Fraction(p["rounds"], p["chunks"]))
    written = Path(best["file"]).name if best["file"] else None  # None: never written
    over = Fraction(best["rounds"], best["chunks"]) / bound
    return {"best_s": seen.get(written, end), "within_1pct_s": within,
            "end_s": end, "best_over_bound": float(over),
            "best_gbps": most_gbps / float(over),
            "steady_gbps": most_gbps / float(min(steady) / bound) if steady else None,
            "points": len(summary["frontier"]),
            "peak_mib": round(int(stderr.strip().splitlines()[-1]) / 1024)}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", default="", help="only jobs whose name has one of these "
                        "comma-separated substrings ('ndv2x4,dgx2x2')")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--method", default="auto", choices=("auto", "constructed"))
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    wanted = [w for w in args.jobs.split(",") if w]
    topos = [t for t in JOBS if not wanted or any(w in t for w in wanted)]
    if not topos:
        parser.error(f"no job matches --jobs {args.jobs!r}")
    machine = recorded_machine(REPO, "bench_answer_time", args.record)
    if machine is None:
        return 2
    machine["load_before"] = [f"{x:.2f}" for x in os.getloadavg()]
    rows = []
    for topo in topos:
        row = {"job": f"{topo} allgather", **run_job(topo, args.time_limit, args.method),
               "forestcoll": FORESTCOLL[topo]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    machine["load_after"] = [f"{x:.2f}" for x in os.getloadavg()]
    if args.record:
        write_record(machine, rows, args.time_limit, args.method, args.jobs)
    return 0


def write_record(machine: dict, rows: list[dict], limit: float, method: str,
                 jobs: str) -> None:
    # a subset of the jobs is named for it: it must not overwrite the day's whole record;
    # nor a second record of a day its first (the docs may cite it): -DATEb, -DATEc, ...
    folder = REPO / "bench" / "results"
    rest = (f"-{jobs}" if jobs else "") + ("" if method == "auto" else f"-{method}")
    day = time.strftime("%Y-%m-%d")
    name = next(f"answer-time-{day}{suffix}{rest}" for suffix in ["", *"bcdefghijklmn"]
                if not (folder / f"answer-time-{day}{suffix}{rest}.md").exists())
    (folder / f"{name}.json").write_text(
        json.dumps({"machine": machine, "method": method, "rows": rows}, indent=1) + "\n")
    lines = [f"# Time to the best point on disk, {machine['date']}", "",
             f"`python3 bench/bench_answer_time.py {' '.join(sys.argv[1:])}`, commit "
             f"{machine['commit']}, "
             f"{machine['cpu']}, {machine['memory_gib']} GiB, Python {machine['python']}, "
             f"load average before {' '.join(machine['load_before'])}, after "
             f"{' '.join(machine['load_after'])}; --time-limit {limit:g}; --method {method}; "
             "the answer cache "
             "off; --model line-rate; jobs one at a time in fresh processes.", "",
             "| job | best point on disk s | within 1% s | job ends s | best / bound "
             "| best GB/s | steady GB/s | points | peak MiB | ForestColl (issue 28) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['job']} | error: {r['error']} ||||||||| ")
            continue
        lines.append(f"| {r['job']} | {r['best_s']}"
                     f" | {r['within_1pct_s'] if r['within_1pct_s'] is not None else '-'} | "
                     f"{r['end_s']} | {r['best_over_bound']:.4f} | "
                     f"{_down(r['best_gbps'])} | {_down(r.get('steady_gbps'))} | {r['points']} | "
                     f"{r['peak_mib']} | {r['forestcoll']} |")
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")


def _down(gbps: float | None) -> str:
    """GB/s rounded down to two decimals (against synth), or "-"."""
    return "-" if gbps is None else f"{math.floor(gbps * 100) / 100:.2f}"


if __name__ == "__main__":
    sys.exit(main())
