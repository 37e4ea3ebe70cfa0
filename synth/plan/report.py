"""report.md: a plan in words and tables for the engineer who runs it: the step's time
against NCCL's, per call the choice, what runs together, the fastest candidate at each
size, the runtime files and the nccl-tests commands that check the figures.
"""

from __future__ import annotations

import math

from synth.plan.document import (call_doc, model_text, ranks_per_node, runnable,
                                  runtime_steps)
from synth.plan.planner import Plan, typical
from synth.predict.nccl import as_it_runs
from synth.schedule.cost import format_size
from synth.topology.several_routes import routes_lines

PERF = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
        "reducescatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
        "reduce": "reduce_perf", "alltoall": "alltoall_perf", "gather": "gather_perf",
        "scatter": "scatter_perf"}


def report_text(plan: Plan, runtime: dict | None = None, loaded: dict | None = None
                ) -> str:
    """report.md; `loaded`: runtime_steps, where made already."""
    loaded = runtime_steps(plan, runtime) if loaded is None else loaded
    w = plan.workload
    lines = _headline(plan, loaded)
    if w.notes:
        lines += ["Read from the workload: " + "; ".join(w.notes) + ".", ""]
    for note in plan.notes:
        lines += [f"Planned: {note}.", ""]
    for line in routes_lines(plan.routes):
        lines += [f"{line[0].upper()}{line[1:]}.", ""]
    lines += _calls_table(plan) + _overlaps(plan) + _fastest(plan)
    if runtime:
        lines += _runtime_files(runtime)
    lines += _measuring(plan, runtime)
    return "\n".join(lines) + "\n"


def _headline(plan: Plan, loaded: dict) -> list[str]:
    """The title, the step's time against NCCL's, and with each runtime's files alone."""
    w = plan.workload
    plan_us, nccl_us = plan.step_time("plan"), plan.step_time("nccl")
    both_us, nccl_both_us = plan.step_time("overlapped"), plan.step_time("nccl overlapped")
    lines = [f"# Communication plan: {w.name} on {plan.topology}", "",
             f"These are model predictions ({model_text(plan)}), not measurements. Check "
             "them on the hardware with the nccl-tests commands below, with and without "
             "the plan's files loaded.", ""]
    if plan_us:
        lines += [f"Communication of one training step: **{_us(both_us)}** with the plan "
                  f"against **{_us(nccl_both_us)}** {nccl_text(plan)}: "
                  f"**{_down(nccl_both_us / both_us)} x**, the calls of "
                  f"each overlap tag running together. Every call one after the other: "
                  f"{_us(plan_us)} against {_us(nccl_us)} ({_down(nccl_us / plan_us)} x).", ""]
    for fmt, (t, fallback) in loaded.items():
        lines += [f"With the {fmt} files alone (what that runtime can run of the plan, "
                  f"every call one after the other): {_us(t)}, {_down(nccl_us / t)} x."
                  + (f" NCCL's own algorithm runs for {', '.join(fallback)}: no file "
                     "that cuts it into whole chunks (" + ("MSCCL: loops of nchunksperloop "
                                                           "chunks of whole elements"
                                                           if fmt == "msccl-xml" else
                                                           "MSCCL++: chunks of 16-byte "
                                                           "units") + ") beats it there."
                     if fallback else ""), ""]
    return lines


def _calls_table(plan: Plan) -> list[str]:
    """Per call: the plan's choice and time against NCCL's; where groups share links."""
    nccl = "NCCL" if plan.cost_model == "calibrated" else "NCCL-style"
    lines = [f"| communicator | collective | GPUs | size | calls | plan | us | {nccl} "
              "| us | x |", "| --- | --- | ---: | ---: | ---: | --- | ---: | --- | ---: "
              "| ---: |"]
    shared = []
    for e in plan.entries:
        for c in e.calls:
            d = call_doc(e, c)
            size = format_size(c.low) if c.low == c.high else \
                f"{format_size(c.low)}..{format_size(c.high)}"
            lines.append(f"| {e.communicator} | {e.collective} | {e.ranks} | {size} | "
                         f"{d['count']:g} | {d['algorithm']} | {d['us']:.1f} | {d['nccl']} | "
                         f"{d['nccl_us']:.1f} | {_down(d['speedup'])} |")
            if d["groups_share_links"] > 1.0001:
                shared.append(f"{e.collective} on {e.communicator} "
                              f"({d['groups_share_links']:.2f} x)")
    if shared:
        lines += ["", "The groups of a communicator run at once, and where their traffic "
                  "meets on a physical link each takes longer than alone: "
                  + ", ".join(shared) + " (in the times above)."]
    return lines


def _overlaps(plan: Plan) -> list[str]:
    """A section per overlap tag: the calls that run together and what that costs."""
    lines = []
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
    return lines


def _fastest(plan: Plan) -> list[str]:
    """Per entry: the fastest candidate at each size."""
    w = plan.workload
    lines = ["", "## The fastest candidate at each size", "",
             "(a line's us/MB is per 10^6 bytes; sizes are in binary units, 1 MB = 2^20 "
             "bytes)", ""]
    for e in plan.entries:
        lines += [f"{e.collective} on {e.communicator} ({e.ranks} GPUs, "
                  f"{len(w.communicators[e.communicator])} groups, planned on "
                  f"{e.topology} in {e.seconds:.1f} s):", ""]
        lines += [f"- {_range(s.low, s.high)}: {s.candidate.label} "
                  f"({s.candidate.latency_us:.2f} us + {s.candidate.us_per_byte * 1e6:.3f} "
                  "us/MB)" for s in e.spans]
        lines.append("")
    return lines


def _runtime_files(runtime: dict) -> list[str]:
    """The files of each runtime, their ranges, and how the runtimes load them."""
    lines = ["## Runtime files", ""]
    for fmt, entries in runtime.items():
        for r in entries:
            ranges = ", ".join(f"{_range(f['min_bytes'], f['max_bytes'])} "
                               + (f"`{f['file']}` ({f['unit'].chunks} chunks)"
                                  if f["file"] else f["algorithm"])
                               for f in r["files"])
            lines.append(f"- {fmt}, {r['collective']} on {r['communicator']}: {ranges}")
    lines += ["", "MSCCL reads one folder per process (`MSCCL_ALGO_DIR`) and picks a "
              "file by GPU count, collective and size only: copy the files of every "
              "communicator a process uses into one folder; where two communicators "
              "have the same GPU count and collective, their files overlap and only "
              "one set can be loaded. For MSCCL++, `mscclpp/register.py` registers "
              "a communicator's plans with the NCCL shim (v0.9 and later) before the "
              "communicator is created, with the process's rank in it; synth's "
              "selector tells communicators apart by size, ranks per node and that "
              "rank (docs/runtimes.md, \"Running a plan\"). Each file's upper bound "
              "(`maxBytes`, `max_message_size`) is one byte past its range above: "
              "microsoft/msccl and MSCCL++ v0.8.0's shim read it as exclusive, the "
              "others as inclusive, and run the file for that byte too, as they run "
              "the next range's file there, whichever they loaded first; no "
              "workload size is on such a byte unless the file is the one for it.",
              ""]
    return lines


def _measuring(plan: Plan, runtime: dict | None) -> list[str]:
    """The nccl-tests commands that check the figures."""
    lines = ["## Measuring it", "", "```"]
    xml = {(r["communicator"], r["collective"], r["root"]): r["files"]
           for r in (runtime or {}).get("msccl-xml", [])}
    for e in plan.entries:
        per_box = ranks_per_node(e)
        place = f"-npernode {per_box} " if per_box else ""  # none fits scattered boxes
        ranges = xml.get((e.communicator, e.collective, e.root))
        for c in e.calls:
            lines.append(f"mpirun -np {e.ranks} {place}./build/"
                         f"{PERF[e.collective]} -b {c.low} -e {c.high} -f 2 -g 1 -n 50"
                         + _xml_folder(ranges, e.communicator, c))
    lines += ["```", "", "nccl-tests' -b/-e are its message size n, the same n as here. "
              "It times every size out of place and in place: the plan's allreduce and "
              "allgather files are in place (PyTorch's form), so read the in-place "
              "columns for them, the out-of-place ones for the others."]
    return lines


def _xml_folder(ranges: list | None, communicator: str, call) -> str:
    """The comment on a measuring line: the MSCCL XML folder to load where a file of
    it runs one of the call's sizes, else that NCCL's own runs them ('' with no XML)."""
    if ranges is None:
        return ""
    sizes = {call.low, call.high, typical(call)}
    if any(f["file"] and runnable(f, n) for f in ranges for n in sizes):
        return f"   # MSCCL_ALGO_DIR=msccl/{communicator}"
    return "   # no MSCCL XML file runs it: NCCL's own does"


def _range(low: int, high: int | None) -> str:
    return f"{low}..{'' if high is None else high} B"


def nccl_text(plan: Plan) -> str:
    if plan.cost_model == "calibrated":
        figures = next((e.machine.figures for e in plan.entries if e.machine), None)
        return f"with {as_it_runs(figures)} (its tuner's choice at each size)"
    return "NCCL-style (ring or tree, whichever is faster at each size)"


def _down(ratio: float) -> str:
    """A speed-up rounded down to 2 decimals: never shown larger than it is."""
    return f"{math.floor(ratio * 100) / 100:.2f}"


def _us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"
