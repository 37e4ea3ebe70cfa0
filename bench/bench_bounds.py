#!/usr/bin/env python3
"""Bounds before and after orbits: the old module and synth.bounds, side by side.

    python bench/bench_bounds.py                     # the table, printed
    python bench/bench_bounds.py --record            # ... and bench/results/bounds-DATE.md
    python bench/bench_bounds.py --machines dgxh100x8 --collectives allgather
    python bench/bench_bounds.py --check             # values only, every machine below

The old code is synth/bounds.py as commit OLD (default 0343916, the last before the
orbits) held it, read with `git show` and loaded beside the current package, so one
process times both on the same lowering: one max-flow per GPU against one per orbit
(synth/bounds/orbits.py). Per machine and collective (rooted ones at root 0): the
seconds of `collective_bounds` each way, their ratio, and whether every field of the
two Bounds is equal. The lowering is timed once, apart (both share it).

--check compares the values alone on every built-in, NAMExK for K = 2 and 4 of every
built-in with a network, and the generators, every collective, roots 0, N-1 and
N/2+1; it exits 1 on any difference. A benchmark, not a test: it asserts nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import record_stem, recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from synth.bounds import collective_bounds  # noqa: E402
from synth.schedule.collectives import COLLECTIVES  # noqa: E402
from synth.topology.catalog import builtin_names, resolve  # noqa: E402
from synth.topology.linkmodel import lower_with_routes  # noqa: E402

OLD = "0343916"
MACHINES = ["dgxh100x8", "dgx2x4", "torus:16x16", "gb200nvl72x4", "dgxh100x64"]
COLLECTIVES_TIMED = ["allgather", "reducescatter", "allreduce", "alltoall", "broadcast"]
GENERATORS = ["ring:8", "ring:7", "line:5", "fc:6", "mesh:3x5", "mesh:4x4", "torus:4x4",
              "torus:3x4", "torus:2x3x4", "hypercube:4", "switch:6"]
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def old_module(commit: str):
    """synth/bounds.py as `commit` held it, loaded as the module synth_bounds_old."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:synth/bounds.py"],
                          capture_output=True, text=True, check=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="bench_bounds_"))
    path = folder / "synth_bounds_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("synth_bounds_old", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["synth_bounds_old"] = module
    spec.loader.exec_module(module)
    return module


def timed(function, *args):
    start = time.perf_counter()
    out = function(*args)
    return out, time.perf_counter() - start


def measure(old, spec: str, names: list[str]) -> list[dict]:
    lowering, lower_s = timed(lower_with_routes, resolve(spec))
    rows = []
    for name in names:
        root = 0 if name in ROOTED else None
        a, old_s = timed(old.collective_bounds, lowering, name, root)
        b, new_s = timed(collective_bounds, lowering, name, root)
        rows.append({"machine": spec, "gpus": lowering.model.ranks, "collective": name,
                     "lower_s": lower_s, "old_s": old_s, "new_s": new_s,
                     "same": dataclasses.astuple(a) == dataclasses.astuple(b),
                     "rounds_per_chunk": str(b.rounds_per_chunk)})
        print(f"  {spec} {name}: old {old_s:.2f} s, new {new_s:.2f} s"
              f"{'' if rows[-1]['same'] else '  VALUES DIFFER'}", flush=True)
    return rows


def check(old) -> int:
    """Every value, old against new (module docstring); 1 on any difference."""
    boxes = [f"{n}x{k}" for n in builtin_names() for k in (2, 4)
             if resolve(n).network is not None]
    differ = cases = 0
    for spec in builtin_names() + GENERATORS + boxes:
        lowering = lower_with_routes(resolve(spec))
        n = lowering.model.ranks
        for name in COLLECTIVES:
            for root in dict.fromkeys((0, n - 1, n // 2 + 1) if name in ROOTED else (None,)):
                a = old.collective_bounds(lowering, name, root)
                b = collective_bounds(lowering, name, root)
                cases += 1
                if dataclasses.astuple(a) != dataclasses.astuple(b):
                    differ += 1
                    print(f"DIFFER {spec} {name} root={root}:\n  old {a}\n  new {b}",
                          flush=True)
        print(f"{spec}: checked", flush=True)
    print(f"{cases} cases, {differ} differ")
    return 1 if differ else 0


def table(rows: list[dict], machine: dict, old: str, loads) -> str:
    lines = [f"# Bounds per GPU and per orbit, {machine['date']}", "",
             f"`python3 bench/bench_bounds.py`, commit {machine['commit']} against "
             f"synth/bounds.py at {old}; {machine['cpu']}, {machine['memory_gib']} GiB, "
             f"Python {machine['python']}; load average {loads[0]:.2f} at the start, "
             f"{loads[1]:.2f} at the end.", "",
             "Seconds of `collective_bounds` (rooted collectives at root 0); lowering "
             "timed apart, shared by both. `same`: every field of the two Bounds equal.", "",
             "| machine | GPUs | collective | lowering s | old s | new s | old / new | same "
             "| rounds per chunk |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['machine']} | {r['gpus']} | {r['collective']} | "
                     f"{r['lower_s']:.2f} | {r['old_s']:.2f} | {r['new_s']:.2f} | "
                     f"{r['old_s'] / r['new_s']:.1f} | {'yes' if r['same'] else 'NO'} | "
                     f"{r['rounds_per_chunk']} |")
    old_s, new_s = sum(r["old_s"] for r in rows), sum(r["new_s"] for r in rows)
    lines += ["", f"In all: old {old_s:.1f} s, new {new_s:.1f} s ({old_s / new_s:.1f} x); "
              f"{sum(not r['same'] for r in rows)} rows with values that differ."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--record", action="store_true",
                    help="write bench/results/bounds-DATE.md (a clean tree only)")
    ap.add_argument("--old", default=OLD, help=f"the commit of the old module [{OLD}]")
    ap.add_argument("--machines", default=",".join(MACHINES))
    ap.add_argument("--collectives", default=",".join(COLLECTIVES_TIMED))
    ap.add_argument("--check", action="store_true", help="values only, every machine")
    args = ap.parse_args()
    machine = recorded_machine(REPO, "bench_bounds", args.record)
    if machine is None:
        return 2
    old = old_module(args.old)
    if args.check:
        return check(old)
    loads = [os.getloadavg()[0]]
    rows = [row for spec in args.machines.split(",")
            for row in measure(old, spec, args.collectives.split(","))]
    loads.append(os.getloadavg()[0])
    text = table(rows, machine, args.old, loads)
    print(text)
    if args.record:
        out = record_stem(REPO, "bounds").with_suffix(".md")
        out.write_text(text)
        print(f"wrote {out.relative_to(REPO)}")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
