#!/usr/bin/env python3
"""Topology import: every fixture under tests/fixtures/topologies/, timed.

    python bench/bench_import.py [--out bench/results/import-DATE]

Per source (NCCL topology XML or nvidia-smi topo -m output; SOURCES.md there names each
one's origin): the seconds `import_source` + `topology_from_dict` take (best of 5 in
this process, and the first), what came out (GPUs, NICs, switches, links, inferred
parts, assumptions) or the one line it was refused with. Issue 17's goal: every
fixture imports in under a second. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from machine import recorded_machine  # bench/machine.py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from synth.errors import BadInput  # noqa: E402
from synth.topology.catalog import imported  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures" / "topologies"
GPU_OF = {"azure-ndv4-topo.xml": "a100-sxm", "azure-ndv5-topo.xml": "h100-sxm",
          "azure-ndv2-topo.xml": "v100-sxm", "topo-m-deepep590-b300-cx8.txt": "b200-sxm"}
REPEATS = 5


def measure(path: Path) -> dict:
    gpu = GPU_OF.get(path.name)
    row = {"source": path.name, "gpu": gpu, "bytes": path.stat().st_size}
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        try:
            topo = imported(str(path), gpu=gpu)
        except BadInput as e:
            topo, row["refused"] = None, str(e)
        times.append(time.perf_counter() - start)
    row.update(first_s=round(times[0], 4), best_s=round(min(times), 4))
    if topo is not None:
        kinds = [v.kind for v in topo.vertices]
        row.update(gpus=topo.ranks, nics=kinds.count("nic"),
                   switches=sum(k not in ("gpu", "nic") for k in kinds),
                   links=len(topo.links) // 2,
                   inferred=sum(bool(v.inferred) for v in topo.vertices)
                   + sum(bool(l.inferred) for l in topo.links) // 2,
                   assumptions=len(topo.assumptions))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", help="PREFIX for PREFIX.json and PREFIX.md")
    args = ap.parse_args()
    machine = recorded_machine(HERE.parent, "bench_import", bool(args.out))
    if machine is None:
        return 2
    date = machine["date"] = subprocess.run(["date", "-u"], capture_output=True,
                                            text=True).stdout.strip()
    commit = machine["commit"]
    rows = [measure(p) for p in sorted(FIXTURES.iterdir()) if p.suffix in (".xml", ".txt")]
    slowest = max(r["first_s"] for r in rows)
    lines = [f"# Topology import, {date}", "",
             f"`python3 bench/bench_import.py`, commit {commit}, {machine['cpu']}, "
             f"{machine['memory_gib']} GiB, Python {machine['python']}.", "",
             f"Goal (issue 17): every fixture imports in under a second: "
             f"**{'met' if slowest < 1 else 'missed'}** (slowest first import "
             f"{slowest * 1000:.0f} ms).", "",
             "| source | --gpu | first ms | best of 5 ms | GPUs | NICs | switches | links "
             "| inferred | assumptions | refused |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['gpu'] or '-'} | {r['first_s'] * 1000:.1f} "
                     f"| {r['best_s'] * 1000:.1f} | {r.get('gpus', '-')} | {r.get('nics', '-')} "
                     f"| {r.get('switches', '-')} | {r.get('links', '-')} "
                     f"| {r.get('inferred', '-')} | {r.get('assumptions', '-')} "
                     f"| {r.get('refused', '')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps({"machine": machine, "rows": rows},
                                                       indent=1) + "\n")
        Path(f"{args.out}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
