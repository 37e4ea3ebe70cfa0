"""Synthesized schedules against baselines and NCCL: predicted time per message size.

Every schedule is timed in one cost model: cost model 2 (synth.predict.timing, the
topology's figures), or the line-rate alpha-beta model (synth.schedule.cost) whose
bounds (synth.bounds) say how far each is from the best possible. In cost model 2 the
table also has NCCL as it runs there (synth.predict.nccl): its choice at each size, why,
and its time, which the speed-ups are against.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

from synth.bounds import Bounds
from synth.predict.machine import machine_of
from synth.predict.nccl import COLLECTIVES, as_it_runs, choose
from synth.predict.timing import schedule_lines
from synth.schedule.cost import Cost, format_size, per_chunk, schedule_cost
from synth.schedule.ir import Schedule


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # "synth" or "baseline"
    schedule: Schedule
    cost: Cost  # line-rate
    lines: tuple = ()  # cost model 2's per protocol (synth.predict.timing); () line-rate

    def time_us(self, n: int) -> float:
        if self.lines:
            return min(line.time_us(n) for line in self.lines)
        return self.cost.time_us(n)


def make_rows(synthesized: list[Schedule], baselines: list[tuple[str, Schedule]],
              prices=None) -> list[Row]:
    """Rows timed in cost model 2 with `prices` (synth.predict.timing.prices), else in
    the line-rate model."""
    def row(name, kind, s):
        lines = tuple(schedule_lines(s, prices)) if prices is not None else ()
        return Row(name, kind, s, schedule_cost(s), lines)

    rows = [row(f"synth S{s.num_steps} R{s.rounds} C{s.collective.chunks}"
                + (f" = {s.info['baseline']}" if "baseline" in s.info else ""), "synth", s)
            for s in synthesized]
    return rows + [row(name, "baseline", s) for name, s in baselines]


def nccl_choices(topo, collective: str, sizes: list[int]) -> dict:
    """{size label: NCCL's choice there} in cost model 2; {} where NCCL has no such
    collective (gather, scatter)."""
    if collective not in COLLECTIVES:
        return {}
    m = machine_of(topo)
    return {format_size(n): choose(m, collective, n) for n in sizes}


def comparison(rows: list[Row], b: Bounds, sizes: list[int], nccl: dict | None = None,
               said: str | None = None) -> dict:
    """The machine-readable comparison: per row its costs, per size the winner, and in
    cost model 2 NCCL's choice and the winner's speed-up over it (rounded down), `said`
    naming it (synth.predict.nccl.as_it_runs)."""
    out_rows = []
    for row in rows:
        out_rows.append({
            "name": row.name, "kind": row.kind, "steps": row.schedule.num_steps,
            "rounds": row.schedule.rounds, "chunks": row.schedule.collective.chunks,
            "latency_us": row.cost.latency_us, "us_per_mb": row.cost.us_per_byte * 1e6,
            "bandwidth_to_bound": round(row.cost.us_per_byte / b.us_per_byte, 12),
            "steps_to_bound": row.schedule.num_steps / b.steps if b.steps else None,
            "sizes": {format_size(n): {"time_us": row.time_us(n),
                                       "algbw_gbps": n / row.time_us(n) / 1e3} for n in sizes},
        })
    winners, against = {}, {}
    for n in sizes:
        best = min(rows, key=lambda r: r.time_us(n))
        winners[format_size(n)] = best.name
        if nccl:
            c = nccl[format_size(n)]
            against[format_size(n)] = {"nccl_runs": c.name, "nccl_us": c.predicted_us,
                                       "why": c.reason, "fastest": best.name,
                                       "speedup": math.floor(c.predicted_us / best.time_us(n)
                                                             * 100) / 100}
    return {"cost_model": "calibrated" if rows and rows[0].lines else "line-rate",
            "nccl": against, "nccl_said": said or as_it_runs(None), "bounds": {"steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
                       "us_per_mb": b.us_per_mb, "latency_us": b.latency_us}
            | ({"without_in_network": str(b.without_in_network)}
               if b.without_in_network is not None else {}),
            "rows": out_rows, "winners": winners}


def format_comparison(title: str, data: dict, sizes: list[int]) -> str:
    labels = [format_size(n) for n in sizes]
    head = ["schedule", "S", "bw x bound"] + [f"{l} us (GB/s)" for l in labels]
    table = [head]
    for r in data["rows"]:
        cells = [r["name"], str(r["steps"]), f"{r['bandwidth_to_bound']:.2f}"]
        for l in labels:
            t = r["sizes"][l]
            cells.append(f"{t['time_us']:.1f} ({t['algbw_gbps']:.1f})")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [title]
    for row in table:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    b = data["bounds"]
    lines.append(f"bounds: {b['steps']} step{'s' * (b['steps'] != 1)}, "
                 f"{per_chunk(b['rounds_per_chunk'])} "
                 f"({b['us_per_mb']:.3f} us/MB)")
    lines.append("fastest: " + ", ".join(f"{l} {data['winners'][l]}" for l in labels))
    if data["nccl"]:
        lines.append(f"{data['nccl_said']} (cost model 2):")
        for label in labels:
            v = data["nccl"][label]
            lines.append(f"  {label}: {v['nccl_runs']} {v['nccl_us']:.1f} us; the fastest "
                         f"here {v['speedup']:.2f} x that ({v['why']})")
    else:
        lines.append(f"costs: {data['cost_model']}")
    return "\n".join(lines)
