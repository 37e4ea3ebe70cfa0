"""A plan's files: per runtime a loadable set of algorithms whose size ranges tile every
message size, the chosen schedules, plan.json and report.md.

    DIR/plan.json                     the plan (machine-readable)
    DIR/report.md                     the report: per call the choice against NCCL's
    DIR/schedules/COMM/COLL-I.json    each chosen schedule (synth verify reads them)
    DIR/msccl/COMM/COLL-I.xml         MSCCL XML, minBytes..maxBytes per file
    DIR/mscclpp/COMM/COLL-I.mscclpp.json, DIR/mscclpp/register.py
                                      MSCCL++ plans and their registration

Each runtime gets the lower envelope of the candidates it can load (a schedule a format
cannot express, such as switch operations in MSCCL XML, leaves that format's envelope),
so its files tile 0 bytes .. no limit with no gap or overlap; the envelope in plan.json
is over every candidate (what the model predicts). Every file is written whole or not at
all (synth.files.write_atomic).
"""

from __future__ import annotations

import json
from pathlib import Path

from synth.errors import BadInput
from synth.export import render
from synth.files import write_atomic
from synth.plan.planner import Entry, Plan, Span, envelope, typical
from synth.schedule.cost import format_size
from synth.schedule.file import schedule_json, schedule_to_dict

RUNTIMES = {"msccl-xml": ("msccl", ".xml"), "mscclpp": ("mscclpp", ".mscclpp.json")}
PERF = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
        "reducescatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
        "reduce": "reduce_perf", "alltoall": "alltoall_perf", "gather": "gather_perf",
        "scatter": "scatter_perf"}


def runtime_spans(entry: Entry, fmt: str) -> list[tuple[Span, str]]:
    """(span, file text) tiling 0 .. no limit with the fastest candidates `fmt` can
    express; BadInput if none can."""
    cands, texts = list(entry.candidates), {}
    while cands:
        spans = envelope(cands, 0)
        failed = None
        for i, span in enumerate(spans):
            c = span.candidate
            key = (id(c), span.low, span.high)
            try:
                texts[key] = render(c.schedule, fmt, name=_name(entry, i, fmt),
                                    min_bytes=span.low, max_bytes=_max(span, fmt))[0]
            except BadInput:
                failed = c
                break
        if failed is None:
            return [(s, texts[(id(s.candidate), s.low, s.high)]) for s in spans]
        cands.remove(failed)
    raise BadInput(f"no candidate for {entry.collective} on {entry.communicator} can be "
                   f"written as {fmt}")


def _max(span: Span, fmt: str):
    if span.high is None:
        return 0 if fmt == "msccl-xml" else None  # XML: 0 is no limit
    return span.high


def _name(entry: Entry, i: int, fmt: str) -> str:
    return f"synth-plan-{entry.communicator}-{entry.collective}-{i}"


def write_plan(plan: Plan, out: Path, formats=tuple(RUNTIMES)) -> dict:
    """Write the plan's files under `out` (module docstring); plan.json's document."""
    out = Path(out)
    runtime = {}
    for e in plan.entries:
        for i, span in enumerate(envelope(e.candidates, 0)):
            doc = schedule_to_dict(span.candidate.schedule)
            write_atomic(out / "schedules" / e.communicator / f"{e.collective}-{i}.json",
                         schedule_json(doc))
        for fmt in formats:
            folder, ext = RUNTIMES[fmt]
            files = []
            for i, (span, text) in enumerate(runtime_spans(e, fmt)):
                path = out / folder / e.communicator / f"{e.collective}-{i}{ext}"
                write_atomic(path, text)
                files.append({"file": str(path.relative_to(out)), "min_bytes": span.low,
                              "max_bytes": span.high, "algorithm": span.candidate.label})
            runtime.setdefault(fmt, []).append({"communicator": e.communicator,
                                                "collective": e.collective, "files": files})
    if "mscclpp" in runtime:
        write_atomic(out / "mscclpp" / "register.py", _register(plan, runtime["mscclpp"]))
    doc = plan_document(plan, runtime)
    write_atomic(out / "plan.json", json.dumps(doc, indent=1) + "\n")
    write_atomic(out / "report.md", report_text(plan, runtime))
    return doc


def plan_document(plan: Plan, runtime: dict | None = None) -> dict:
    w = plan.workload
    entries = []
    for e in plan.entries:
        entries.append({
            "communicator": e.communicator, "collective": e.collective, "root": e.root,
            "ranks": e.ranks, "groups": len(w.communicators[e.communicator]),
            "topology": e.topology, "seconds": round(e.seconds, 2),
            "bound_us_per_mb": round(e.bounds.us_per_mb, 6),
            "candidates": len(e.candidates),
            "spans": [{"min_bytes": s.low, "max_bytes": s.high,
                       "algorithm": s.candidate.label,
                       "latency_us": round(s.candidate.latency_us, 6),
                       "us_per_mb": round(s.candidate.us_per_byte * 1e6, 6)}
                      for s in e.spans],
            "calls": [_call_doc(e, c) for c in e.calls]})
    steps = {k: plan.step_time(k) for k in ("plan", "nccl", "overlapped",
                                            "nccl overlapped")}
    overlaps = [{"tag": o.tag,
                 "calls": [{"communicator": e.communicator, "collective": e.collective,
                            "min_bytes": c.low, "max_bytes": c.high, "count": c.count}
                           for e, c in o.members],
                 "alone_us": [round(x, 3) for x in o.alone_us],
                 "on_residual_us": [round(x, 3) for x in o.residual_us],
                 "algorithms": [c.label for c in o.choices],
                 "sequential_us": round(o.sequential_us, 3),
                 "overlapped_us": round(o.overlapped_us, 3),
                 "nccl_sequential_us": round(sum(o.nccl_alone_us), 3),
                 "nccl_overlapped_us": round(o.nccl_overlapped_us, 3),
                 "busiest_link_share": round(max(o.utilisation.values(), default=0), 6)}
                for o in plan.overlaps]
    return {"format": "synth.plan", "version": 1, "workload": w.name, "source": w.source,
            "notes": list(w.notes), "topology": plan.topology,
            "communicators": {n: {"ranks": len(gs[0]), "groups": gs}
                              for n, gs in w.communicators.items()},
            "step_us": {"plan": round(steps["plan"], 3), "nccl": round(steps["nccl"], 3),
                        "plan_overlapped": round(steps["overlapped"], 3),
                        "nccl_overlapped": round(steps["nccl overlapped"], 3),
                        "speedup": round(steps["nccl overlapped"] / steps["overlapped"], 4)
                        if steps["overlapped"] else None},
            "overlaps": overlaps, "entries": entries, "runtimes": runtime or {},
            "seconds": round(plan.seconds, 2),
            "model": "alpha-beta predictions from the topology's link figures, not "
                     "measurements"}


def _call_doc(e: Entry, call) -> dict:
    n = typical(call)
    best, nccl = e.best(n), e.nccl(n)
    return {"min_bytes": call.low, "max_bytes": call.high, "count": call.count,
            "overlap": call.overlap or None, "algorithm": best.label,
            "us": round(best.time_us(n), 3), "nccl": nccl.label,
            "nccl_us": round(nccl.time_us(n), 3),
            "speedup": round(nccl.time_us(n) / best.time_us(n), 4)}


def report_text(plan: Plan, runtime: dict | None = None) -> str:
    w = plan.workload
    plan_us, nccl_us = plan.step_time("plan"), plan.step_time("nccl")
    both_us, nccl_both_us = plan.step_time("overlapped"), plan.step_time("nccl overlapped")
    lines = [f"# Communication plan: {w.name} on {plan.topology}", "",
             "These are model predictions (alpha-beta, from the topology's link figures), "
             "not measurements. Check them on the hardware with the nccl-tests commands "
             "below, with and without the plan's files loaded.", ""]
    if plan_us:
        lines += [f"Communication of one training step: **{_us(both_us)}** with the plan "
                  f"against **{_us(nccl_both_us)}** NCCL-style (ring or tree, whichever is "
                  f"faster at each size): **{nccl_both_us / both_us:.2f} x**, the calls of "
                  f"each overlap tag running together. Every call one after the other: "
                  f"{_us(plan_us)} against {_us(nccl_us)} ({nccl_us / plan_us:.2f} x).", ""]
    if w.notes:
        lines += ["Read from the workload: " + "; ".join(w.notes) + ".", ""]
    lines += ["| communicator | collective | GPUs | size | calls | plan | us | NCCL-style "
              "| us | x |", "| --- | --- | ---: | ---: | ---: | --- | ---: | --- | ---: "
              "| ---: |"]
    for e in plan.entries:
        for c in e.calls:
            d = _call_doc(e, c)
            size = format_size(c.low) if c.low == c.high else \
                f"{format_size(c.low)}..{format_size(c.high)}"
            lines.append(f"| {e.communicator} | {e.collective} | {e.ranks} | {size} | "
                         f"{c.count} | {d['algorithm']} | {d['us']:.1f} | {d['nccl']} | "
                         f"{d['nccl_us']:.1f} | {d['speedup']:.2f} |")
    for o in plan.overlaps:
        names = " and ".join(f"{e.collective} on {e.communicator}" for e, _ in o.members)
        lines += ["", f"## Running together: {o.tag}", "",
                  f"{names}: {_us(o.overlapped_us)} together against "
                  f"{_us(o.sequential_us)} one after the other (each alone: "
                  + ", ".join(_us(x) for x in o.alone_us) + "); NCCL-style "
                  f"{_us(o.nccl_overlapped_us)} together, {_us(sum(o.nccl_alone_us))} one "
                  "after the other. The first runs as planned; each next one was planned "
                  "again on the bandwidth the ones before it leave ("
                  + ", ".join(f"{c.label}: {_us(d)}" for c, d in zip(o.choices[1:],
                                                                   o.residual_us[1:]))
                  + f"); the busiest physical link is {max(o.utilisation.values()):.0%} "
                  "in use."]
    lines += ["", "## The fastest candidate at each size", ""]
    for e in plan.entries:
        lines += [f"{e.collective} on {e.communicator} ({e.ranks} GPUs, "
                  f"{len(w.communicators[e.communicator])} groups, planned on "
                  f"{e.topology} in {e.seconds:.1f} s):", ""]
        lines += [f"- {_range(s.low, s.high)}: {s.candidate.label} "
                  f"({s.candidate.latency_us:.2f} us + {s.candidate.us_per_byte * 1e6:.3f} "
                  "us/MB)" for s in e.spans]
        lines.append("")
    if runtime:
        lines += ["## Runtime files", ""]
        for fmt, entries in runtime.items():
            for r in entries:
                ranges = ", ".join(f"{_range(f['min_bytes'], f['max_bytes'])} "
                                   f"`{f['file']}`" for f in r["files"])
                lines.append(f"- {fmt}, {r['collective']} on {r['communicator']}: {ranges}")
        lines += ["", "MSCCL picks a file by GPU count, collective and size only: two "
                  "communicators of the same size running the same collective would share "
                  "one directory's files, so point `MSCCL_ALGO_DIR` at one communicator's "
                  "folder per process group where they differ. For MSCCL++, "
                  "`mscclpp/register.py` registers every plan with the NCCL shim (v0.9 "
                  "and later) before the communicator is created.", ""]
    lines += ["## Measuring it", "", "```"]
    for e in plan.entries:
        per_box = _per_node(e)
        for c in e.calls:
            lines.append(f"mpirun -np {e.ranks} -npernode {per_box} ./build/"
                         f"{PERF[e.collective]} -b {c.low} -e {c.high} -f 2 -g 1 -n 50"
                         + (f"   # MSCCL_ALGO_DIR=msccl/{e.communicator}" if runtime
                            and "msccl-xml" in runtime else ""))
    lines += ["```", "", "nccl-tests' -b/-e are its message size n, the same n as here."]
    return "\n".join(lines) + "\n"


def _per_node(e: Entry) -> int:
    """GPUs of the communicator's group per box (nccl-tests' -npernode, MSCCL++'s
    ranks per node)."""
    boxes = e.spans[0].candidate.schedule.model.boxes
    return e.ranks // len(set(boxes)) if boxes else e.ranks


def _register(plan: Plan, entries: list[dict]) -> str:
    rows = []
    for r in entries:
        e = next(x for x in plan.entries if (x.communicator, x.collective)
                 == (r["communicator"], r["collective"]))
        per_node = _per_node(e)
        for f in r["files"]:
            rows.append(f"    ({str(Path(f['file']).relative_to('mscclpp'))!r}, {e.ranks}, "
                        f"{per_node}),")
    return "\n".join([
        '"""Register this plan\'s MSCCL++ execution plans with the NCCL shim (MSCCL++',
        "v0.9 and later), before the communicator is created:",
        "",
        "    LD_PRELOAD=.../libmscclpp_nccl.so python train.py   # with, in train.py:",
        "    import register; register.register(rank)",
        "",
        "Each plan carries its own message-size range; the shim picks one whose world",
        'size, ranks per node and size range match the call."""',
        "",
        "from pathlib import Path",
        "",
        "HERE = Path(__file__).resolve().parent",
        "PLANS = [  # (file, world size, ranks per node)",
        *rows,
        "]",
        "",
        "",
        "def register(rank):",
        "    import mscclpp",
        "    import mscclpp.ext",
        "",
        "    builder = mscclpp.ext.AlgorithmCollectionBuilder()",
        "    for file, world, per_node in PLANS:",
        "        plan = mscclpp.ExecutionPlan(str(HERE / file), rank)",
        "        algo = mscclpp.Algorithm(id=Path(file).stem, execution_plan=plan,",
        "                                 constraint=mscclpp.Algorithm.Constraint(",
        "                                     world_size=world, n_ranks_per_node=per_node))",
        "        builder.add_algorithm_builder(algo)",
        ""])


def _range(low: int, high: int | None) -> str:
    return f"{low}..{'' if high is None else high} B"


def _us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"
