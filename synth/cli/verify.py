"""`synth verify FILE...`: check schedule files with the independent simulator."""

from __future__ import annotations

import click

from synth.cli.app import cli
from synth.errors import SynthError


@cli.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--cost", "show_cost", is_flag=True, help="Also print each schedule's cost.")
@click.option("--sizes", default="1KB,1MB,64MB,1GB", show_default=True,
              help="Message sizes for --cost.")
@click.option("--topo", "spec", default=None, metavar="TOPOLOGY",
              help="The machine the files are for (default: the one each file names, "
                   "where synth knows it).")
@click.option("--boxes", type=click.IntRange(1, 4096), default=None,
              help="With --topo: K copies of that box.")
def verify(files, show_cost, sizes, spec, boxes):
    """Check schedule files with the independent simulator, and their machine: the
    model a file embeds must be the one synth derives from the topology it names.

    Exit 0 when every file is valid, 1 when one is invalid, 2 when one is not a schedule.
    """
    from synth.schedule.cost import format_size, parse_size, schedule_cost
    from synth.schedule.file import schedule_from_dict
    from synth.schedule.machine import check_machine
    from synth.schedule.verify import verify_file
    from synth.topology.catalog import resolve

    size_list = [parse_size(s) for s in sizes.split(",")] if show_cost else []
    topo = resolve(spec, boxes) if spec else None
    worst = 0
    for path in files:
        try:
            doc = verify_file(path)
            machine = check_machine(doc, topo)
            cost = schedule_cost(schedule_from_dict(doc)) if show_cost else None
        except SynthError as e:  # one line per file, whatever the name holds
            where = "" if str(e).startswith(str(path)) else f"{path}: "
            click.echo(" ".join(f"synth: {where}{e}".split()), err=True)
            worst = max(worst, e.exit_code)
            continue
        pipe = doc.get("pipeline")  # steps and rounds of the expanded schedule
        steps = len(doc["steps"]) + (pipe["batches"] - 1 if pipe else 0)
        rounds = sum(pipe["rounds"]) if pipe else sum(s["rounds"] for s in doc["steps"])
        name = " ".join(str(doc["topology"].get("name", "?")).split())
        line = (f"ok {' '.join(str(path).split())}: {doc['collective']} on {name}, "
                f"{steps} steps, {rounds} rounds, {doc['chunks']} chunks"
                + (f" (version {doc['version']}: a batch program of {len(doc['steps'])} "
                   f"steps in {pipe['batches']} batches)" if pipe else "")
                + (f" (version 4: written once per orbit, dims {sym['dims']} along axes "
                   f"{sym['axes']})" if (sym := doc.get("symmetry")) and doc["version"] == 4
                   else "") + f"; {machine}")
        if show_cost:
            times = "  ".join(f"{format_size(n)} {cost.time_us(n):.1f} us "
                              f"({cost.algbw_gbps(n):.1f} GB/s)" for n in size_list)
            line += f"\n   latency {cost.latency_us:.2f} us, {cost.us_per_byte * 1e6:.3f} us/MB;  {times}"
        click.echo(line)
    return worst
