"""Plots of a plan (`synth plan --plots`), matplotlib's Agg backend.

    step_figure(plan)          one step's predicted time per communicator and collective,
                               plan against NCCL-style, and the totals
    sizes_figure(entry)        predicted time against message size: the plan's envelope,
                               NCCL-style's, the workload's sizes marked
    plan_figures(plan)         [(file name, bytes)]: step.png and COMM-COLL.png

Every number is the plan's cost model's (cost model 2 by default, where NCCL is its
tuner's choice at each size; or the line-rate model, where it is NCCL-style ring or
tree), as in the report.
"""

from __future__ import annotations

import textwrap

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from synth.pictures.plots import figure_bytes
from synth.plan.planner import Entry, Plan, typical
from synth.schedule.cost import format_size

KB, GB = 1 << 10, 1 << 30
PLAN, NCCL = "#1f77b4", "#7f7f7f"


def step_figure(plan: Plan) -> Figure:
    rows = []
    for e in plan.entries:
        n_plan = sum(c.count * e.best(typical(c)).time_us(typical(c)) for c in e.calls)
        n_nccl = sum(c.count * e.nccl(typical(c)).time_us(typical(c)) for c in e.calls)
        rows.append((f"{e.collective} on {e.communicator}", n_plan / 1e3, n_nccl / 1e3))
    rows.append(("one step, calls together", plan.step_time("overlapped") / 1e3,
                 plan.step_time("nccl overlapped") / 1e3))
    fig = Figure(figsize=(9, 1.5 + 0.55 * len(rows)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    ax.barh([y + 0.2 for y in ys], [r[2] for r in rows], height=0.38, color=NCCL,
            label=_nccl_words(plan.cost_model == "calibrated"))
    ax.barh([y - 0.2 for y in ys], [r[1] for r in rows], height=0.38, color=PLAN,
            label="plan")
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=9)
    ax.set_xlabel("predicted time per training step (ms)")
    ax.grid(True, axis="x", alpha=0.25)
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)  # off the bars
    model = "cost model 2" if plan.cost_model == "calibrated" else "line-rate model"
    # wrapped: a log's whole path as the workload's name was cut off at both sides
    title = f"{plan.workload.name} on {plan.topology}: {model}"
    ax.set_title("\n".join(textwrap.wrap(title, 90, break_on_hyphens=False)), fontsize=10)
    return fig


def _nccl_words(calibrated: bool) -> str:
    return ("NCCL as it runs (its tuner's choice at each size)" if calibrated
            else "NCCL-style (ring or tree)")


def sizes_figure(entry: Entry, smallest: int = KB, largest: int = GB) -> Figure:
    fig = Figure(figsize=(8, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    count = 96
    ratio = (largest / smallest) ** (1 / (count - 1))
    sizes = [smallest * ratio ** k for k in range(count)]
    ax.plot(sizes, [entry.best(round(n)).time_us(n) for n in sizes], "-", color=PLAN,
            linewidth=2, label="plan (the fastest candidate at each size)")
    ax.plot(sizes, [entry.nccl(round(n)).time_us(n) for n in sizes], "--", color=NCCL,
            linewidth=1.6, label=_nccl_words(entry.machine is not None))
    for call in entry.calls:
        n = typical(call)
        ax.axvline(n, color="#d62728", alpha=0.35, linewidth=1)
    ticks = [smallest << k for k in range(0, 64, 2) if smallest << k <= largest]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ticks, [format_size(n) for n in ticks], fontsize=8)
    ax.set_xlabel("message size (nccl-tests' n); red: the workload's sizes")
    ax.set_ylabel("predicted time (us)")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"{entry.collective} on {entry.communicator} ({entry.ranks} GPUs)",
                 fontsize=10)
    return fig


def plan_figures(plan: Plan, fmt: str = "png") -> list[tuple[str, bytes]]:
    """(file name, encoded figure): step.FMT and one COMM-COLL.FMT per entry."""
    out = [(f"step.{fmt}", figure_bytes(step_figure(plan), fmt))]
    for e in plan.entries:
        name = f"{e.communicator}-{e.collective}" + (f"-root{e.root}" if e.root is not None
                                                    else "")
        out.append((f"{name}.{fmt}", figure_bytes(sizes_figure(e), fmt)))
    return out
