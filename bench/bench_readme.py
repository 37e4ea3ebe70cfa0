#!/usr/bin/env python3
"""The figures README.md quotes, measured in one run on the committed HEAD.

    python bench/bench_readme.py                  # about 3 minutes on 2 cores
    python bench/bench_readme.py --out bench/results/readme-mine

Every figure README.md gives about a command (its wall time, peak memory, the size of
what it writes, the table it prints) comes from this script's latest record in
bench/results/readme-DATE.md, which names the commit and the machine; re-run it when the
code it measures changes. Each command runs as a child process of its own, with an
empty solver cache, on a snapshot of HEAD (bench_scale.snapshot: `git archive HEAD`,
compiled once, imported through PYTHONPATH), one at a time:

- the main job, `synth allreduce --topo dgx2x4`: wall seconds, peak resident memory,
  the files written (count, total and largest size), the table;
- `synth allreduce --topo dgx1` and `synth allgather --topo dgx1` (exact synthesis on
  one box; allgather is SCCL's headline frontier, 23.3 s in SCCL), best of three;
- `synth export` of the main job's point closest to the bound, to MSCCL XML and to an
  MSCCL++ plan: wall seconds, peak memory, output size, or the one-line refusal;
- `synth draw` of that point to SVG (a PNG of its 128 steps would be 102 x 80 inches,
  which draw refuses, saying to write SVG): wall seconds, peak memory, bytes, and the
  refusal where there is one;
- "Your cluster in": `synth topo import` of an `nvidia-smi topo -m` of an 8-GPU H100 box
  (MY_BOX, saved as `my-box.txt`), then `synth allreduce --topo my-box.yaml --size 1MB`
  and, for two such boxes, `... --boxes 2 --size 1MB --time-limit 60`: wall seconds,
  stderr's last line, the table and the answer.

This is a benchmark, not a test: it asserts nothing.
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
import threading
import time
from pathlib import Path

from bench_scale import REPO, _die_with_parent, child_env, committed, machine, snapshot
from machine import record_stem, recorded_machine  # bench/machine.py

MY_BOX = "tests/fixtures/topologies/topo-m-sglang30401-h100-8nic.txt"
SCCL_DGX1_ALLGATHER = 23.3  # seconds, SCCL on this kind of machine (the reliability issue)


def run(args: list[str], code: Path, cwd: Path, cache: Path,
        limit: float | None = None) -> dict:
    """One child: wall seconds, its own peak resident MB (os.wait4), exit code, output
    (through files, so that waiting on the pid is ours). A child still running after
    `limit` seconds is killed, with its group, and marked "killed"."""
    logs = Path(tempfile.mkdtemp(prefix="synth-readme-log-"))
    killed = []

    def kill():
        killed.append(True)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    with open(logs / "out", "wb") as so, open(logs / "err", "wb") as se:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "synth", *args], cwd=cwd,
                                env=child_env(code, cache), stdout=so, stderr=se,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                start_new_session=True)
        timer = threading.Timer(limit, kill) if limit else None
        if timer:
            timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            if timer:
                timer.cancel()
                timer.join()
        wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
    out = (logs / "out").read_text(errors="replace")
    err = (logs / "err").read_text(errors="replace")
    shutil.rmtree(logs, ignore_errors=True)
    return {"args": args, "seconds": round(wall, 2), "peak_mb": round(usage.ru_maxrss / 1024, 1),
            "exit": proc.returncode, "killed": bool(killed), "stdout": out,
            "stderr": err.strip()[-500:]}


def files_of(folder: Path) -> dict:
    """The schedule and runtime files: not synth's own bookkeeping (.topology-name, and
    since 2026-12-05 .written-by-synth)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    sizes = [p.stat().st_size for p in files]
    return {"count": len(files), "total_mb": round(sum(sizes) / 1e6, 2),
            "largest_mb": round(max(sizes, default=0) / 1e6, 3)}


def measure(code: Path, work: Path) -> dict:
    cache = work / "cache"
    out = work / "out"
    doc = {}
    main = run(["allreduce", "--topo", "dgx2x4", "--out", str(out), "--json",
                "--no-progress"], code, work, cache)
    summary = json.loads(main["stdout"]) if main["exit"] == 0 else {}
    table = run(["verify", *[p["file"] for p in summary.get("frontier", [])]], code, work,
                cache)
    doc["main_job"] = {**{k: main[k] for k in ("seconds", "peak_mb", "exit", "stderr")},
                       "files": files_of(out / "dgx2x4" / "allreduce"),
                       "frontier": [{k: p[k] for k in ("steps", "rounds", "chunks",
                                                       "ratio_to_bound", "latency_us",
                                                       "us_per_mb", "method")}
                                    for p in summary.get("frontier", [])],
                       "synthesis_seconds": summary.get("seconds"),
                       "all_verify": table["exit"] == 0}
    text = run(["allreduce", "--topo", "dgx2x4", "--out", str(work / "again")], code, work,
               work / "cache2")
    doc["main_job"]["table"] = text["stdout"]
    best = min(summary.get("frontier", []), key=lambda p: p["ratio_to_bound"], default=None)
    if best:
        for fmt, suffix in (("msccl-xml", ".xml"), ("mscclpp", ".mscclpp.json")):
            target = work / f"best{suffix}"
            r = run(["export", best["file"], "--to", fmt, "-o", str(target)], code, work,
                    cache)
            doc[f"export_{fmt}"] = {**{k: r[k] for k in ("seconds", "peak_mb", "exit")},
                                    "point": {k: best[k] for k in ("steps", "chunks",
                                                                   "ratio_to_bound")},
                                    "output_mb": round(target.stat().st_size / 1e6, 2)
                                    if target.exists() else None,
                                    "message": (r["stdout"] or r["stderr"]).strip()[-400:]}
        picture = work / "best.svg"
        r = run(["draw", best["file"], "-o", str(picture)], code, work, cache)
        doc["draw_svg"] = {**{k: r[k] for k in ("seconds", "peak_mb", "exit", "stderr")},
                           "bytes": picture.stat().st_size if picture.exists() else None}
    for name in ("allreduce", "allgather"):
        runs = [run([name, "--topo", "dgx1", "--out", str(work / f"dgx1-{i}")], code, work,
                    work / f"cache-{name}-{i}") for i in range(3)]
        fastest = min(runs, key=lambda r: r["seconds"])
        doc[f"dgx1_{name}"] = {"seconds": [r["seconds"] for r in runs],
                               "best_seconds": fastest["seconds"],
                               "peak_mb": fastest["peak_mb"], "table": fastest["stdout"]}
    doc["own_box"] = own_box(code, work)
    doc["dgx1_allgather"]["sccl_seconds"] = SCCL_DGX1_ALLGATHER
    doc["dgx1_allgather"]["speedup_vs_sccl"] = round(
        SCCL_DGX1_ALLGATHER / doc["dgx1_allgather"]["best_seconds"], 1)
    return doc


def own_box(code: Path, work: Path) -> dict:
    """README's "Your cluster in": an imported box, its answer at 1 MB, and two of them."""
    shutil.copy(REPO / MY_BOX, work / "my-box.txt")
    doc = {"import": run(["topo", "import", "my-box.txt", "-o", "my-box.yaml"], code, work,
                         work / "cache-own")}
    for key, extra in (("one", []), ("two", ["--boxes", "2", "--time-limit", "60"])):
        doc[key] = run(["allreduce", "--topo", "my-box.yaml", *extra, "--size", "1MB"],
                       code, work, work / f"cache-own-{key}")
    return {key: {k: r[k] for k in ("seconds", "peak_mb", "exit", "stdout", "stderr")}
            for key, r in doc.items()}


def markdown(doc: dict) -> str:
    m, res = doc["machine"], doc["results"]
    lines = [f"# README figures, {m['date']}", "",
             f"Code: {doc['code']['what']}. Machine: {m['cpu']}, {m['cores_usable']} cores "
             f"usable, {m['memory_gib']} GiB, {m['os']}, Python {m['python']}, OR-Tools "
             f"{m['ortools']}. Every command ran alone, as a child process with an empty "
             "solver cache; seconds are wall time of the whole command.", ""]
    mj = res["main_job"]
    lines += ["## `synth allreduce --topo dgx2x4` (the main job)", "",
              f"{mj['seconds']} s wall ({mj['synthesis_seconds']} s of synthesis), peak "
              f"{mj['peak_mb']} MB; {mj['files']['count']} files, {mj['files']['total_mb']} MB "
              f"in all, the largest {mj['files']['largest_mb']} MB; every file verifies: "
              f"{mj['all_verify']}.", "", "```", mj["table"].rstrip(), "```", ""]
    for fmt in ("msccl-xml", "mscclpp"):
        e = res.get(f"export_{fmt}")
        if e:
            lines += [f"`synth export` of the point at {e['point']['ratio_to_bound']:.3f} x "
                      f"the bound ({e['point']['steps']} steps, {e['point']['chunks']} "
                      f"chunks) `--to {fmt}`: exit {e['exit']}, {e['seconds']} s, peak "
                      f"{e['peak_mb']} MB, {e['output_mb']} MB written. {e['message']}", ""]
    if "draw_svg" in res:
        d = res["draw_svg"]
        said = f" ({d['stderr'].strip()})" if d["exit"] else ""
        lines += [f"`synth draw` of that point to SVG: exit {d['exit']}{said}, "
                  f"{d['seconds']} s, peak {d['peak_mb']} MB, {d['bytes']} bytes.", ""]
    for name in ("allreduce", "allgather"):
        r = res[f"dgx1_{name}"]
        lines += [f"## `synth {name} --topo dgx1`", "",
                  f"Best of three: {r['best_seconds']} s (all: {r['seconds']}), peak "
                  f"{r['peak_mb']} MB."
                  + (f" SCCL: {r['sccl_seconds']} s for the same frontier, so "
                     f"{r['speedup_vs_sccl']}x." if "sccl_seconds" in r else ""),
                  "", "```", r["table"].rstrip(), "```", ""]
    own = res.get("own_box")
    if own:
        lines += ["## Your cluster in: `synth topo import my-box.txt -o my-box.yaml`", "",
                  f"exit {own['import']['exit']}, {own['import']['seconds']} s: "
                  f"{own['import']['stdout'].strip() or own['import']['stderr'].strip()}", ""]
        for key, title in (("one", "--size 1MB"), ("two", "--boxes 2 --size 1MB "
                                                          "--time-limit 60")):
            r = own[key]
            last = r["stderr"].strip().splitlines()[-1:] or [""]
            lines += [f"## `synth allreduce --topo my-box.yaml {title}`", "",
                      f"exit {r['exit']}, {r['seconds']} s wall, peak {r['peak_mb']} MB; "
                      f"last line on stderr: `{last[0]}`", "", "```", r["stdout"].rstrip(),
                      "```", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output prefix (default bench/results/readme-DATE)")
    args = ap.parse_args(argv)
    prefix = Path(args.out) if args.out else record_stem(REPO, "readme")
    with tempfile.TemporaryDirectory(prefix="synth-bench-readme-") as tmp:
        code = Path(tmp) / "code"
        code.mkdir()
        snap = snapshot(code)
        recorded = recorded_machine(REPO, "bench_readme", True, committed(snap))
        if recorded is None:
            return 2
        doc = {"machine": machine(recorded), "code": snap}
        work = Path(tmp) / "work"
        work.mkdir()
        doc["results"] = measure(code, work)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    prefix.with_suffix(".md").write_text(markdown(doc) + "\n")
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
