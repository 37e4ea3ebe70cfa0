"""Synthesized schedules against NCCL-style baselines: predicted time per message size.

Every schedule is costed with the same alpha-beta model (synth.schedule.cost) and measured
against the same lower bounds (synth.bounds), so the table says both who wins at each
size and how far each one is from the best possible.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.bounds import Bounds
from synth.schedule.cost import Cost, format_size, schedule_cost
from synth.schedule.ir import Schedule


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # "synth" or "baseline"
    schedule: Schedule
    cost: Cost


def make_rows(synthesized: list[Schedule], baselines: list[tuple[str, Schedule]]) -> list[Row]:
    rows = [Row(f"synth S{s.num_steps} R{s.rounds} C{s.collective.chunks}"
                + (f" = {s.info['baseline']}" if "baseline" in s.info else ""), "synth", s,
                schedule_cost(s)) for s in synthesized]
    rows += [Row(name, "baseline", s, schedule_cost(s)) for name, s in baselines]
    return rows


def comparison(rows: list[Row], b: Bounds, sizes: list[int]) -> dict:
    """The machine-readable comparison: per row its costs, per size the winner."""
    out_rows = []
    for row in rows:
        out_rows.append({
            "name": row.name, "kind": row.kind, "steps": row.schedule.num_steps,
            "rounds": row.schedule.rounds, "chunks": row.schedule.collective.chunks,
            "latency_us": row.cost.latency_us, "us_per_mb": row.cost.us_per_byte * 1e6,
            "bandwidth_to_bound": row.cost.us_per_byte / b.us_per_byte,
            "steps_to_bound": row.schedule.num_steps / b.steps if b.steps else None,
            "sizes": {format_size(n): {"time_us": row.cost.time_us(n),
                                       "algbw_gbps": row.cost.algbw_gbps(n)} for n in sizes},
        })
    winners = {}
    for n in sizes:
        best = min(rows, key=lambda r: r.cost.time_us(n))
        winners[format_size(n)] = best.name
    return {"bounds": {"steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
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
    lines.append(f"bounds: {b['steps']} steps, {b['rounds_per_chunk']} rounds per chunk "
                 f"({b['us_per_mb']:.3f} us/MB)")
    lines.append("fastest: " + ", ".join(f"{l} {data['winners'][l]}" for l in labels))
    return "\n".join(lines)
