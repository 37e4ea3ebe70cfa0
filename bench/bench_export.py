#!/usr/bin/env python3
"""Export of a big multi-node schedule: MSCCL XML and the MSCCL++ plan, old code against new.

    python bench/bench_export.py                          # dgx2x4 allreduce, HEAD vs ee83763
    python bench/bench_export.py --baseline REV --topo dgx2x16 --limit 600
    python bench/bench_export.py --topo torus:16x16 --collective allgather \
        --method constructed --baseline REV  # REV: a commit that has --method constructed

What it measures. For each code (a `git archive` snapshot of HEAD, and of --baseline
REV; see bench_scale.py for how snapshots are made and checked), in child processes:

    python3 -m synth COLLECTIVE --topo TOPO --method METHOD --json --out TMPDIR
    python3 -m synth export POINT --to msccl-xml -o TMPDIR/out.xml
    python3 -m synth export POINT --to mscclpp   -o TMPDIR/out.json

where POINT is that code's own frontier point closest to the bound (the file the
README's user would export), or with --steps S its point of S steps. Per export: wall seconds around the child, its peak
resident memory (ru_maxrss from os.wait4), the exit code, the size written and the
last line of stderr (the exporter's summary, or why it refused). An export still
running after --limit seconds (default 300) is killed and recorded as DNF. The two
codes run back to back, old first, then new, and the markdown puts them side by side.

The goal (issue 14): each export of the dgx2x4 allreduce point closest to the bound
at most 30 s and 1 GB. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench_readme import run
from bench_scale import REPO, committed, machine, snapshot
from machine import record_stem, recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
GOAL_SECONDS, GOAL_MB = 30.0, 1024.0
FORMATS = {"msccl-xml": "out.xml", "mscclpp": "out.mscclpp.json"}


def measure(code: Path, label: str, job: tuple[str, str, str], limit: float,
            work: Path, steps: int | None = None) -> dict:
    collective, topo, method = job
    cache = work / "cache"  # empty at the start: a cold run
    synth = run([collective, "--topo", topo, "--method", method, "--json",
                 "--no-progress", "--out", str(work / "frontier")], code, work, cache)
    if synth["exit"] != 0:
        raise SystemExit(f"{label}: synthesis failed: {synth['stderr']}")
    frontier = json.loads(synth["stdout"])["frontier"]
    best = min(frontier, key=lambda p: (p["ratio_to_bound"], p["steps"]))
    if steps is not None:  # the point of those steps instead
        best = next((p for p in frontier if p["steps"] == steps), None)
        if best is None:
            raise SystemExit(f"{label}: no point of {steps} steps on the frontier")
    point = {k: best[k] for k in ("steps", "rounds", "chunks", "ratio_to_bound", "method")}
    point["file_mb"] = round(Path(best["file"]).stat().st_size / 2**20, 3)
    exports = {}
    for fmt, name in FORMATS.items():
        out = work / name
        r = run(["export", best["file"], "--to", fmt, "-o", str(out)], code, work, cache,
                limit)
        status = "DNF" if r["killed"] else "ok" if r["exit"] == 0 else "refused/error"
        last = (r["stdout"] + "\n" + r["stderr"]).strip().splitlines() or [""]
        exports[fmt] = {"wall_seconds": r["seconds"], "peak_mb": r["peak_mb"],
                        "exit_code": r["exit"], "status": status,
                        "last_line": last[-1][:400],
                        "output_mb": round(out.stat().st_size / 2**20, 2)
                        if out.exists() else None}
        print(f"{label} {fmt}: {status}, {r['seconds']} s, {r['peak_mb']} MB", flush=True)
    return {"code": label, "synthesis_seconds": synth["seconds"], "point": point,
            "exports": exports}


def markdown(doc: dict) -> str:
    m = doc["machine"]
    which = (f"{doc['steps']}-step point" if doc.get("steps")
             else "point closest to the bound")
    lines = [f"# Export of the {doc['topology']} {doc.get('collective', 'allreduce')} "
             f"{which} (--method {doc.get('method', 'decomposed')}), "
             f"{m['date']}", "", f"`{doc['command']}`", "",
             f"- CPU: {m['cpu']}, {m['cores_usable']} cores usable, "
             f"{m['memory_gib']:.1f} GiB; Python {m['python']}",
             f"- new: {doc['new']['what']}; old: {doc['old']['what']}",
             f"- an export is killed after {doc['limit']:g} s (DNF)", "",
             "| code | point (S, R, C) | x bound | schedule file MB | format | wall s | "
             "peak MB | output MB | exit | last line printed |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |"]
    for one in doc["runs"]:
        p = one["point"]
        for fmt, r in one["exports"].items():
            lines.append(
                f"| {one['code']} | {p['steps']}, {p['rounds']}, {p['chunks']} | "
                f"{p['ratio_to_bound']:.3f} | {p['file_mb']} | {fmt} | {r['wall_seconds']} |"
                f" {r['peak_mb']:.0f} | {r['output_mb'] if r['output_mb'] is not None else '-'}"
                f" | {r['status']} ({r['exit_code']}) | "
                f"{r['last_line'].replace('|', '/')[:200]} |")
    old, new = doc["runs"]
    lines += ["", "Ratios new/old (wall, peak) where both finished:", ""]
    for fmt in FORMATS:
        a, b = old["exports"][fmt], new["exports"][fmt]
        if a["status"] == b["status"] == "ok":
            lines.append(f"- {fmt}: wall {b['wall_seconds'] / a['wall_seconds']:.3f}, "
                         f"peak {b['peak_mb'] / a['peak_mb']:.3f}")
        else:
            lines.append(f"- {fmt}: old {a['status']}, new {b['status']}")
    met = all(r["status"] == "ok" and r["wall_seconds"] <= GOAL_SECONDS
              and r["peak_mb"] <= GOAL_MB for r in new["exports"].values())
    lines += ["", f"Goal (each export <= {GOAL_SECONDS:g} s and <= {GOAL_MB:g} MiB, new "
              f"code): **{'met' if met else 'NOT met'}**.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--topo", default="dgx2x4", help="the topology")
    ap.add_argument("--collective", default="allreduce", help="the collective")
    ap.add_argument("--method", default="decomposed", help="synth's --method")
    ap.add_argument("--baseline", default="ee83763", help="the old code's commit")
    ap.add_argument("--steps", type=int, default=None, help="export the frontier's point "
                    "of these steps (default: the point closest to the bound)")
    ap.add_argument("--limit", type=float, default=300.0,
                    help="seconds each synthesis and export may take (then DNF)")
    ap.add_argument("--out", default=None, help="PREFIX of the record "
                    "(default: bench/results/export-DATE, never over an earlier one)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else record_stem(HERE.parent, "export")
    doc = {"topology": args.topo, "collective": args.collective, "method": args.method,
           "limit": args.limit, "steps": args.steps,
           "command": "python3 bench/bench_export.py " + " ".join(argv or sys.argv[1:]),
           "runs": []}
    with tempfile.TemporaryDirectory() as new_dir, tempfile.TemporaryDirectory() as old_dir:
        doc["new"] = snapshot(Path(new_dir))
        recorded = recorded_machine(REPO, "bench_export", True, committed(doc["new"]))
        if recorded is None:
            return 2
        doc["machine"] = machine(recorded)
        doc["old"] = snapshot(Path(old_dir), args.baseline)
        for label, code in (("old", old_dir), ("new", new_dir)):
            with tempfile.TemporaryDirectory(prefix="synth-export-bench-") as work:
                job = (args.collective, args.topo, args.method)
                doc["runs"].append(measure(Path(code), label, job, args.limit, Path(work),
                                           args.steps))
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(doc, indent=1) + "\n")
    Path(f"{out}.md").write_text(markdown(doc))
    print(f"wrote {out}.json and {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
