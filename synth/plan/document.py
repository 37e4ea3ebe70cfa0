"""plan.json's document, and what each runtime runs of a plan: per call its file for
the call's size or NCCL's own algorithm, and one training step's time with the files
of one runtime alone.
"""

from __future__ import annotations

from synth.plan.planner import Entry, Plan, typical
from synth.topology.linkmodel import ranks_per_box

def within_range(low: int, high: int | None, n: int) -> bool:
    return low <= n and (high is None or n <= high)


def runnable(f: dict, n: int) -> bool:
    """Whether range `f` (a runtime_files entry) runs a call of n bytes: within it, and
    cut whole by its file (NCCL's own ranges take any size)."""
    return within_range(f["min_bytes"], f["max_bytes"], n) and (f["unit"] is None
                                                          or f["unit"].cuts(n))


def runtime_steps(plan: Plan, runtime: dict | None) -> dict:
    """{format: runtime_step's (time, calls NCCL's own runs)}."""
    return {fmt: runtime_step(plan, fmt, entries) for fmt, entries in (runtime or {}).items()}


def plan_document(plan: Plan, runtime: dict | None = None, loaded: dict | None = None
                  ) -> dict:
    """plan.json's document; `loaded`: runtime_steps, where made already."""
    loaded = runtime_steps(plan, runtime) if loaded is None else loaded
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
            "calls": [call_doc(e, c, runtime) for c in e.calls]})
    steps = {k: plan.step_time(k) for k in ("plan", "nccl", "overlapped",
                                            "nccl overlapped")}
    runtime_doc = {fmt: [{**r, "files": [{**{k: v for k, v in f.items()
                                              if k not in ("candidate", "unit")},
                                           "chunks": f["unit"] and f["unit"].chunks}
                                          for f in r["files"]]} for r in entries_]
                   for fmt, entries_ in (runtime or {}).items()}
    overlaps = [{"tag": o.tag,
                 "calls": [{"communicator": e.communicator, "collective": e.collective,
                            "min_bytes": c.low, "max_bytes": c.high,
                            "count": round(c.count, 6)}
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
            "notes": list(w.notes) + plan.notes, "topology": plan.topology, **plan.routes,
            "communicators": {n: {"ranks": len(gs[0]), "groups": gs,
                                  "planned_on": plan.planned_on.get(n, gs[:1])}
                              for n, gs in w.communicators.items()},
            "step_us": {"plan": round(steps["plan"], 3), "nccl": round(steps["nccl"], 3),
                        "plan_overlapped": round(steps["overlapped"], 3),
                        "nccl_overlapped": round(steps["nccl overlapped"], 3),
                        "speedup": round(steps["nccl overlapped"] / steps["overlapped"], 4)
                        if steps["overlapped"] else None,
                        **{f"{fmt}_files": round(t, 3) for fmt, (t, _) in loaded.items()}},
            "overlaps": overlaps, "entries": entries, "runtimes": runtime_doc,
            "seconds": round(plan.seconds, 2),
            "model": model_text(plan) + ", not "
                     "measurements"}


def call_doc(e: Entry, call, runtime: dict | None = None) -> dict:
    n = typical(call)
    best, nccl = e.best(n), e.nccl(n)
    mine, theirs = best.time_us(n), nccl.time_us(n)
    return {"min_bytes": call.low, "max_bytes": call.high, "count": round(call.count, 6),
            "overlap": call.overlap or None, "algorithm": best.label,
            "us": round(mine, 3), "nccl": nccl.label, "nccl_us": round(theirs, 3),
            "speedup": round(theirs / mine, 4),
            "groups_share_links": round(best.shared, 4),
            "load": {"bytes": n, "runtimes": {fmt: _load(e, entries, n) for fmt, entries
                                              in (runtime or {}).items()}}}


def _load(e: Entry, entries: list[dict], n: int) -> dict:
    """What a runtime runs at size n (the call's typical size): its file for that size
    and the file's predicted time, or NCCL's own algorithm (file None) and its time."""
    f = next((f for f in _files_of(entries, e) if runnable(f, n)), None)
    if f is None or f["candidate"] is None:
        own = e.nccl(n)
        return {"file": None, "algorithm": f["algorithm"] if f else f"NCCL's own ({own.label})",
                "us": round(own.time_us(n), 3)}
    return {"file": f["file"], "algorithm": f["algorithm"],
            "us": round(f["candidate"].time_us(n), 3)}


def runtime_step(plan: Plan, fmt: str, entries: list[dict]) -> tuple[float, list[str]]:
    """(one step's time, every call one after the other, with what the runtime runs
    from its files: the file for the call's size, or NCCL's own algorithm where none
    runs; the calls NCCL's own runs)."""
    total, fallback = 0.0, []
    for e in plan.entries:
        files = _files_of(entries, e)
        for call in e.calls:
            n = typical(call)
            f = next((f for f in files if runnable(f, n)), None)
            if f is None or f["candidate"] is None:
                fallback.append(f"{e.collective} on {e.communicator} at {n} B")
            total += call.count * (f["candidate"] if f and f["candidate"] else
                                   e.nccl(n)).time_us(n)
    return total, fallback


def _files_of(entries: list[dict], e: Entry) -> list[dict]:
    return next(r["files"] for r in entries if (r["communicator"], r["collective"],
                                                r["root"]) == (e.communicator, e.collective,
                                                               e.root))


def ranks_per_node(e: Entry) -> int | None:
    """GPUs of the communicator's group per box (nccl-tests' -npernode, MSCCL++'s
    ranks per node); None where its boxes are not runs of equally many consecutive
    ranks (no MSCCL++ plan is written for it then: synth.export.relays)."""
    return ranks_per_box(e.spans[0].candidate.schedule.model)


def model_text(plan: Plan) -> str:
    if plan.cost_model == "calibrated":
        return "cost model 2: the topology's figures, docs/cost-model.md"
    return "line-rate alpha-beta, from the topology's link figures"
