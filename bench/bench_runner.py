"""The torch.distributed runner against torch's built-in collectives, side by side.

    python bench/bench_runner.py [--sizes 1MB,64MB] [--iters 5] [--out bench/results/NAME]

For dgx1 allgather and allreduce it synthesizes the frontier, then runs the first
(fewest steps) and last (least bandwidth) point with `synth run` on 8 gloo processes
on this machine, at each size, and records both times and their ratio. On CPU
processes this measures the runner's overhead against gloo's own algorithms, not
NVLink: the schedule was made for a DGX-1, the processes share this machine's cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import record_stem, recorded_machine  # bench/machine.py

REPO = Path(__file__).resolve().parent.parent
JOBS = [("dgx1", "allgather"), ("dgx1", "allreduce")]


def machine(recorded: dict) -> dict:
    import os

    import torch

    return {**recorded, "cores": os.cpu_count(), "torch": torch.__version__,
            "date": subprocess.run(["date"], capture_output=True, text=True).stdout.strip()}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--sizes", default="1MB,64MB")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    recorded = recorded_machine(REPO, "bench_runner", True)
    if recorded is None:
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for topo, name in JOBS:
            subprocess.run([sys.executable, "-m", "synth", name, "--topo", topo, "--out", tmp,
                            "--time-limit", "120"], check=True, capture_output=True)
            files = sorted((Path(tmp) / topo / name).glob("*.json"),
                           key=lambda p: int(p.stem.split("-s")[1].split("-")[0]))
            for path in dict.fromkeys([files[0], files[-1]]):
                for size in args.sizes.split(","):
                    start = time.monotonic()
                    out = subprocess.run([sys.executable, "-m", "synth", "run", str(path),
                                          "--size", size, "--iters", str(args.iters), "--json"],
                                         capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(f"{path.name} {size}: {out.stderr.strip()[-500:]}")
                    report = json.loads(out.stdout)
                    rows.append({"topology": topo, "collective": name, "schedule": path.stem,
                                 "size": size, "synth_us": report["synth_us"],
                                 "torch_us": report["torch_us"],
                                 "torch_reference": report["torch_reference"],
                                 "synth_over_torch": report["synth_us"] / report["torch_us"],
                                 "correct": report["correct"],
                                 "wall_s": time.monotonic() - start})
                    print(f"{path.stem:28} {size:>6}  synth {report['synth_us']:10.0f} us  "
                          f"torch {report['torch_us']:10.0f} us  "
                          f"ratio {rows[-1]['synth_over_torch']:.2f}", flush=True)
    info = machine(recorded)
    stem = args.out or str(record_stem(Path(__file__).resolve().parent.parent, "runner"))
    Path(stem + ".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    lines = [f"# Runner benchmark, {info['date']}", "",
             "`python bench/bench_runner.py` (8 gloo processes on this machine's CPU cores)", "",
             f"Machine: {info['cpu']}, {info['cores']} cores; Python {info['python']}, "
             f"torch {info['torch']}; commit {info['commit']}.", "",
             "| schedule | size | synth us | torch us | torch runs | synth / torch | correct |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['schedule']} | {r['size']} | {r['synth_us']:.0f} | {r['torch_us']:.0f} "
                     f"| {r['torch_reference']} | {r['synth_over_torch']:.2f} | {r['correct']} |")
    Path(stem + ".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
