#!/usr/bin/env python3
"""The user's own cluster, end to end: the goals of the issue, measured per topology.

    python bench/bench_end_to_end.py                      # 5 topologies, 30 s limits
    python bench/bench_end_to_end.py --time-limit 10 --topologies dgxh100x2
    python bench/bench_end_to_end.py --record             # bench/results/end-to-end-DATE

On each topology (default dgxh100x2, dgxa100x2, dgx2x2, dgxh100x4, ndv2x2) four
commands run one at a time, each a child process `python3 -m synth ...` of a snapshot of
HEAD taken at the start (bench_limits.snapshot, `git archive`, through PYTHONPATH; the
checkout is shared and others commit while the run lasts), with an empty solver cache of
its own and a temporary folder, with
`--time-limit L`:

- `synth allreduce --topo T --size 64MB --json --out DIR`
- `synth compare allreduce --topo T --json`
- `synth report allreduce --topo T -o DIR`
- `synth plan WORKLOAD --topo T -o DIR`, WORKLOAD a small YAML written here: 8
  allreduces of 64 MB on every GPU (`all`: 16 GPUs or more on each topology) and 32 of
  16 MB per box.

The goals, each met or not per topology (and per command where it applies):

1. in time: wall seconds around the child (interpreter start-up included, as a user's
   clock counts them) / L is at most 1;
2. no traceback: exit code 0 and no "Traceback" on stderr;
3. every schedule file a command wrote (a .json with `format` and `steps`, under its
   output folder) passes `synth verify`;
4. at least one loadable point per runtime: in allreduce's `--json`, a frontier point
   whose `loads` was asked (not null) and whose `not_loaded` does not name the runtime
   (MSCCL XML, MSCCL++);
5. dgxh100x2 only: at 64 MB, the best loadable point's predicted time (the `answer`'s
   fastest runtime file, cost model 2) over the best in-network point's (the answer's
   `fastest_us` when its method is in-network, else the fastest in-network row of
   `synth compare`'s 64MB column, matched to allreduce's in-network points by S, R, C);
   a figure to read, met when it is at most 1.10;
6. `synth export` of every frontier point of allreduce, to msccl-xml and to mscclpp,
   either writes a file accepted at each of SIZES (1 byte to 4 GiB, primes among them)
   or fails with exactly one line on stderr (and no traceback). `synth export` has no
   per-size check, so "accepted" is read from the written file with the exporters' own
   size contract (synth.export.units.unit_of: the file's nchunksperloop / chunks and
   size range; Unit.split(n, 1) cuts any n bytes into a bulk the file runs and a tail
   the runtime's own algorithm runs, and must account for all n bytes); the simulators
   already ran when the file was rendered. How many sizes the file itself runs a bulk
   of is recorded beside it.

A child still running after 4 x L + 60 s is killed with its group and recorded as
DNF. The default limit is 30 s (not 60): at 60 s the compare and report commands run
about twice their limit on a loaded 2-core machine and the whole run would pass 25
minutes. This is a benchmark, not a test: it asserts nothing; exit 0 when it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_limits import snapshot  # noqa: E402
from bench.machine import record_stem, recorded_machine  # noqa: E402

CODE = REPO  # the code the children import: main() sets a snapshot of HEAD
TOPOLOGIES = ["dgxh100x2", "dgxa100x2", "dgx2x2", "dgxh100x4", "ndv2x2"]
SIZES = [1, 2, 1000, 65537, 1048573, 1 << 20, 64 << 20, 1000000007, 2147483647, 4 << 30]
FORMATS = {"msccl-xml": ("MSCCL XML", ".xml"), "mscclpp": ("MSCCL++", ".mscclpp.json")}
RATIO_GOAL = 1.10
WORKLOAD = """\
name: end-to-end bench, every GPU and per box
communicators:
  world: all
  tp: {per: box}
collectives:
  - {communicator: world, collective: allreduce, size: 64MB, count: 8}
  - {communicator: tp, collective: allreduce, size: 16MB, count: 32}
"""


def child(args: list[str], cwd: Path, cache: Path, kill_after: float | None) -> dict:
    """One `python3 -m synth ARGS`: wall seconds, exit code (DNF when killed), output."""
    env = {**os.environ, "PYTHONPATH": str(CODE), "SYNTH_CACHE_DIR": str(cache)}
    out, err = cwd / f".out-{time.monotonic_ns()}", cwd / f".err-{time.monotonic_ns()}"
    load = os.getloadavg()[0]
    start = time.monotonic()
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "synth", *args], cwd=cwd, env=env,
                                stdout=o, stderr=e, start_new_session=True)
        try:
            code = proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = "DNF"
    wall = time.monotonic() - start
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    out.unlink()
    err.unlink()
    return {"args": args, "wall_s": round(wall, 2), "exit": code, "stdout": stdout,
            "stderr": stderr, "load_before": round(load, 1),
            "load_after": round(os.getloadavg()[0], 1)}


def schedule_files(folder: Path) -> list[Path]:
    """The schedule files under `folder`: JSON with `format` and `steps` at the top."""
    found = []
    for p in sorted(folder.rglob("*.json")) if folder.exists() else []:
        if p.name.endswith(".mscclpp.json"):
            continue
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "format" in doc and "steps" in doc:
            found.append(p)
    return found


def verify(files: list[Path], cwd: Path) -> dict:
    """`synth verify` over the files, 40 at a time: how many, how many failed, why."""
    bad, walls = [], 0.0
    for i in range(0, len(files), 40):
        batch = files[i:i + 40]
        done = child(["verify", *map(str, batch)], cwd, cwd / "cache-verify", 600)
        walls += done["wall_s"]
        if done["exit"] != 0:
            bad += [line for line in done["stderr"].splitlines() if line.strip()][:5] or \
                [f"exit {done['exit']}"]
    return {"files": len(files), "ok": not bad, "bad": bad, "wall_s": round(walls, 2)}


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def command(name: str, args: list[str], outdir: Path | None, work: Path, limit: float,
            kill_after: float) -> dict:
    done = child(args, work, work / f"cache-{name}", kill_after)
    tb = "Traceback" in done["stderr"]
    files = schedule_files(outdir) if outdir else []
    checked = verify(files, work) if files else {"files": 0, "ok": True, "bad": [],
                                                  "wall_s": 0.0}
    print(f"  {name}: {done['wall_s']} s / {limit:g} ({done['wall_s'] / limit:.2f}), exit "
          f"{done['exit']}{', TRACEBACK' if tb else ''}, {checked['files']} files "
          f"{'verify' if checked['ok'] else 'DO NOT verify'}; {last_line(done['stderr'])}",
          flush=True)
    return {"command": name, "argv": ["python3", "-m", "synth",
                                      *(a.replace(str(work), "DIR") for a in args)],
            "wall_s": done["wall_s"], "limit_s": limit,
            "wall_over_limit": round(done["wall_s"] / limit, 3), "exit": done["exit"],
            "traceback": tb, "stderr_tail": done["stderr"].strip().splitlines()[-40:] if tb
            else [last_line(done["stderr"])], "verify": checked,
            "load": f"{done['load_before']}-{done['load_after']}",
            "in_time": done["wall_s"] <= limit,
            "clean": done["exit"] == 0 and not tb, "_stdout": done["stdout"]}


def loadable(summary: dict | None) -> dict:
    """Per runtime: frontier points asked and loading, points asked."""
    out = {}
    points = (summary or {}).get("frontier", [])
    asked = [p for p in points if p.get("loads") is not None]
    for fmt in FORMATS:
        out[fmt] = sum(1 for p in asked if fmt not in p.get("not_loaded", {}))
    out["asked"], out["points"] = len(asked), len(points)
    return out


def accepted(fmt: str, text: str) -> dict:
    """The file's size contract at each of SIZES (module docstring, goal 6)."""
    from synth.export.units import unit_of

    unit = unit_of(fmt, text)
    ok, bulk, why = 0, 0, []
    for n in SIZES:
        try:
            split = unit.split(n, 1)
        except Exception as e:  # noqa: BLE001 - a size refused is the figure
            why.append(f"{n}: {e}")
            continue
        if split.bulk + split.tail == n:
            ok += 1
            bulk += split.bulk > 0
        else:
            why.append(f"{n}: bulk {split.bulk} + tail {split.tail}")
    return {"sizes_ok": ok, "sizes_with_bulk": bulk, "why": why[:3],
            "quantum": unit.quantum(1), "min_bytes": unit.min_bytes,
            "max_bytes": unit.max_bytes}


def exports(summary: dict | None, work: Path, deadline: float) -> list[dict]:
    rows = []
    for p in (summary or {}).get("frontier", []):
        if not p.get("file"):
            continue
        for fmt, (_, ext) in FORMATS.items():
            stem = Path(p["file"]).name[:-len(".json")]
            target = work / "exports" / f"{stem}{ext}"
            target.parent.mkdir(exist_ok=True)
            row = {"point": stem, "format": fmt}
            if time.monotonic() > deadline:
                rows.append({**row, "result": "skipped (the run's export budget spent)"})
                continue
            done = child(["export", p["file"], "--to", fmt, "-o", str(target)], work,
                         work / "cache-export", 300)
            lines = [x for x in done["stderr"].splitlines() if x.strip()]
            row.update(wall_s=done["wall_s"], exit=done["exit"])
            if done["exit"] == 0 and target.exists():
                row.update(accepted(fmt, target.read_text()))
                row["result"] = "file" if row["sizes_ok"] == len(SIZES) else "file, sizes refused"
                row["ok"] = row["sizes_ok"] == len(SIZES) and "Traceback" not in done["stderr"]
            else:
                one = len(lines) == 1 and "Traceback" not in done["stderr"] \
                    and done["exit"] not in (0, "DNF")
                row.update(result="refused" if one else "bad refusal", ok=one,
                           stderr=lines[:1] if one else lines[-10:])
            rows.append(row)
    return rows


def ratio(summary: dict | None, compare: dict | None) -> dict:
    """Goal 5 (module docstring)."""
    answer = (summary or {}).get("answer")
    if not answer:
        return {"ratio": None, "why": "allreduce printed no answer at 64 MB"}
    files = [(r["us"], fmt) for fmt, r in answer["runtimes"].items() if r.get("file")]
    best_loadable = min(files) if files else None
    net = None
    if answer.get("fastest_method", "").startswith("in-network"):
        net = (answer["fastest_us"], answer["fastest"], "answer")
    else:
        keys = {(p["steps"], p["rounds"], p["chunks"]) for p in summary["frontier"]
                if (p.get("method") or "").startswith("in-network")}
        rows = [(r["sizes"]["64MB"]["time_us"], r["name"]) for r in
                (compare or {}).get("rows", []) if r.get("kind") == "synth"
                and (r.get("steps"), r.get("rounds"), r.get("chunks")) in keys
                and "64MB" in r.get("sizes", {})]
        if rows:
            net = (*min(rows), "compare")
    out = {"best_loadable_us": best_loadable and best_loadable[0],
           "best_loadable_runtime": best_loadable and best_loadable[1],
           "best_loadable_file": best_loadable and
           Path(answer["runtimes"][best_loadable[1]]["file"]).name,
           "best_in_network_us": net and net[0], "best_in_network": net and net[1],
           "in_network_from": net and net[2], "fastest": answer.get("fastest"),
           "fastest_method": answer.get("fastest_method"),
           "reference": answer.get("reference"), "reference_us": answer.get("reference_us")}
    out["ratio"] = round(best_loadable[0] / net[0], 3) if best_loadable and net else None
    if out["ratio"] is None:
        out["why"] = "no loadable file" if not best_loadable else "no in-network point"
    return out


def parse_json(text: str) -> dict | None:
    try:
        return json.loads(text)
    except ValueError:
        return None


def topology(name: str, limit: float, kill_after: float, export_budget: float) -> dict:
    print(f"{name}:", flush=True)
    with tempfile.TemporaryDirectory(prefix="synth-e2e-") as tmp:
        work = Path(tmp)
        (work / "workload.yaml").write_text(WORKLOAD)
        lim = f"{limit:g}"
        cmds = [
            ("allreduce", ["allreduce", "--topo", name, "--size", "64MB", "--json",
                           "--time-limit", lim, "--out", str(work / "ar"), "--no-progress"],
             work / "ar"),
            ("compare", ["compare", "allreduce", "--topo", name, "--json",
                         "--time-limit", lim], None),
            ("report", ["report", "allreduce", "--topo", name, "-o", str(work / "report"),
                        "--time-limit", lim], work / "report"),
            ("plan", ["plan", str(work / "workload.yaml"), "--topo", name, "-o",
                      str(work / "plan"), "--time-limit", lim], work / "plan"),
        ]
        runs = [command(c, a, o, work, limit, kill_after) for c, a, o in cmds]
        summary = parse_json(runs[0]["_stdout"])
        compared = parse_json(runs[1]["_stdout"])
        for r in runs:
            del r["_stdout"]
        loads = loadable(summary)
        start = time.monotonic()
        exported = exports(summary, work, start + export_budget)
        print(f"  loadable points: MSCCL XML {loads['msccl-xml']}, MSCCL++ "
              f"{loads['mscclpp']} ({loads['asked']} of {loads['points']} asked); exports: "
              f"{sum(1 for e in exported if e.get('ok'))} of {len(exported)} ok, "
              f"{round(time.monotonic() - start, 1)} s", flush=True)
        out = {"topology": name, "commands": runs, "loadable": loads, "exports": exported,
               "export_wall_s": round(time.monotonic() - start, 2)}
        if name == "dgxh100x2":
            out["ratio_64MB"] = ratio(summary, compared)
            print(f"  64 MB: {out['ratio_64MB']}", flush=True)
        return out


def goals(t: dict) -> list[tuple[str, bool | None, str]]:
    """(goal, met, figures) rows of one topology."""
    rows = []
    for r in t["commands"]:
        v = r["verify"]
        met = r["in_time"] and r["clean"] and v["ok"]
        rows.append((r["command"], met,
                     f"{r['wall_s']} s / {r['limit_s']:g} s = {r['wall_over_limit']:.2f}; "
                     f"exit {r['exit']}{', traceback' if r['traceback'] else ''}; "
                     f"{v['files']} files {'verify' if v['ok'] else 'fail verify'}"))
    lo = t["loadable"]
    rows.append(("loadable per runtime", lo["msccl-xml"] > 0 and lo["mscclpp"] > 0,
                 f"MSCCL XML {lo['msccl-xml']}, MSCCL++ {lo['mscclpp']} of {lo['asked']} "
                 f"points asked ({lo['points']} on the frontier)"))
    if "ratio_64MB" in t:
        q = t["ratio_64MB"]
        rows.append(("64 MB loadable / in-network", None if q["ratio"] is None else
                     q["ratio"] <= RATIO_GOAL,
                     f"{q['ratio']}: {q.get('best_loadable_us')} us "
                     f"({q.get('best_loadable_runtime')} {q.get('best_loadable_file')}) / "
                     f"{q.get('best_in_network_us')} us ({q.get('best_in_network')}, from "
                     f"{q.get('in_network_from')})" if q["ratio"] is not None else q["why"]))
    ex = t["exports"]
    files = [e for e in ex if e.get("result", "").startswith("file")]
    refused = [e for e in ex if e.get("result") == "refused"]
    bad = [e for e in ex if e.get("ok") is False]
    skipped = [e for e in ex if e.get("result", "").startswith("skipped")]
    rows.append(("export every frontier point", not bad and not skipped and bool(ex),
                 f"{len(ex)} exports: {len(files)} files ("
                 f"{sum(1 for e in files if e['ok'])} accepted at all {len(SIZES)} sizes, "
                 f"{sum(e['sizes_with_bulk'] for e in files)} of {len(files) * len(SIZES)} "
                 "file-sizes run a bulk through the file), "
                 f"{len(refused)} one-line refusals, {len(bad)} bad, {len(skipped)} skipped; "
                 f"{t['export_wall_s']} s"))
    return rows


def markdown(record: dict) -> str:
    m = record["machine"]
    lines = [f"# The user's own cluster, end to end: {m['date']}", "",
             f"Commit {m['commit']}; {m['cpu']}, {m['memory_gib']} GiB, Python {m['python']}; "
             f"--time-limit {record['time_limit']:g} s; a shared 2-core machine (load "
             "averages per command in the JSON). Sizes of the export check: "
             + ", ".join(f"{n:,}" for n in SIZES) + ".", "",
             "## Goals", "", "| topology | goal | met | figures |", "| --- | --- | --- | --- |"]
    for t in record["topologies"]:
        for goal, met, figures in goals(t):
            mark = "-" if met is None else ("met" if met else "**not met**")
            lines.append(f"| {t['topology']} | {goal} | {mark} | {figures.replace('|', '/')} |")
    lines += ["", "## Commands", "", "| topology | command | wall s | wall / limit | exit | "
              "load | last line on stderr |", "| --- | --- | ---: | ---: | --- | --- | --- |"]
    for t in record["topologies"]:
        for r in t["commands"]:
            lines.append(f"| {t['topology']} | {r['command']} | {r['wall_s']} | "
                         f"{r['wall_over_limit']:.2f} | {r['exit']} | {r['load']} | "
                         f"{r['stderr_tail'][-1].replace('|', '/') if r['stderr_tail'] else ''} |")
    odd = [(t["topology"], e) for t in record["topologies"] for e in t["exports"]
           if e.get("ok") is False or e.get("result") == "refused"]
    if odd:
        lines += ["", "## Export refusals and failures", "",
                  "| topology | point | format | result | stderr / why |",
                  "| --- | --- | --- | --- | --- |"]
        for name, e in odd:
            why = "; ".join(e.get("stderr") or e.get("why") or [])[:300].replace("|", "/")
            lines.append(f"| {name} | {e['point']} | {e['format']} | {e['result']} | {why} |")
    tracebacks = [(t["topology"], r) for t in record["topologies"] for r in t["commands"]
                  if r["traceback"] or not r["in_time"]]
    if tracebacks:
        lines += ["", "## Overruns and tracebacks (to reproduce)", ""]
        for name, r in tracebacks:
            lines.append(f"- {name} {r['command']}: `{' '.join(r['argv'])}` "
                         f"({r['wall_s']} s, exit {r['exit']}"
                         f"{', traceback' if r['traceback'] else ''})")
    lines += ["", f"Total wall time {record['wall_s']} s."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--record", action="store_true",
                        help="write bench/results/end-to-end-DATE.md and .json")
    parser.add_argument("--export-budget", type=float, default=120.0, metavar="SECONDS",
                        help="seconds of exports per topology; the rest are skipped")
    args = parser.parse_args()
    machine = recorded_machine(REPO, "bench_end_to_end", recording=args.record)
    if machine is None:
        return 2
    global CODE
    start = time.monotonic()
    kill_after = 4 * args.time_limit + 60
    with tempfile.TemporaryDirectory(prefix="synth-e2e-code-") as code:
        CODE = snapshot("HEAD", Path(code) / "head")  # others commit while it runs
        sys.path.insert(0, str(CODE))
        topologies = [topology(t.strip(), args.time_limit, kill_after, args.export_budget)
                      for t in args.topologies.split(",") if t.strip()]
    record = {"machine": machine, "time_limit": args.time_limit, "sizes": SIZES,
              "topologies": topologies, "wall_s": round(time.monotonic() - start, 1)}
    text = markdown(record)
    print(text)
    if args.record:
        stem = record_stem(REPO, "end-to-end")
        Path(f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
        Path(f"{stem}.md").write_text(text)
        print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
