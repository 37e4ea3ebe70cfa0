"""`synth verify FILE...`: check schedule files with the independent simulator."""

from __future__ import annotations

import click

from synth.cli.app import cli
from synth.cli.options import BOXES, DEGRADED, SIZES, examples
from synth.errors import BadInput, SynthError


@cli.command(short_help="Check schedule files with the independent checker.",
             epilog=examples("synth verify out/dgx1/allgather/*.json",
                             "synth verify FILE.json --cost --sizes 1MB,1GB --topo dgx1"))
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--cost", "show_cost", is_flag=True, help="Also print each schedule's cost.")
@SIZES
@click.option("--topo", "spec", default=None, metavar="TOPO",
              help="The machine the files are for (default: the one each file names, "
                   "where synth knows it).")
@BOXES
@DEGRADED
def verify(files, show_cost, sizes, spec, boxes, without, degrade, routes):
    """Check schedule files with the independent simulator, and their machine: the
    model a file embeds must be the one synth derives from the topology it names.

    Exit 0 when every file is valid, 1 when one is invalid, 2 when one is not a schedule.
    """
    from synth.output import rooted
    from synth.schedule.cost import format_size, schedule_cost
    from synth.schedule.file import schedule_from_dict
    from synth.schedule.machine import check_machine
    from synth.schedule.verify import verify_file
    from synth.topology.catalog import resolve

    size_list = sizes if show_cost else []
    if (without or degrade) and not spec:
        raise BadInput("--without and --degrade edit the machine --topo names: give --topo")
    topo = resolve(spec, boxes, without + degrade, routes=routes) if spec else None
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
        coll = rooted(doc["collective"], doc.get("root"))
        line = (f"ok {' '.join(str(path).split())}: {coll} on {name}, "
                f"{_count(steps, 'step')}, {_count(rounds, 'round')}, "
                f"{_count(doc['chunks'], 'chunk')}"
                + (f" (version {doc['version']}: a batch program of {len(doc['steps'])} "
                   f"steps in {pipe['batches']} batches)" if pipe else "")
                + (f" (version 4: written once per orbit, dims {sym['dims']} along axes "
                   f"{sym['axes']})" if (sym := doc.get("symmetry")) and doc["version"] == 4
                   else "") + f"; {machine}")
        if show_cost:
            times = "  ".join(f"{format_size(n)} {cost.time_us(n):.1f} us "
                              f"({cost.algbw_gbps(n):.1f} GB/s)" for n in size_list)
            line += (f"\n   line-rate model: latency {cost.latency_us:.2f} us, "
                     f"{cost.us_per_byte * 1e6:.3f} us/MB;  {times}")
        click.echo(line)
    return worst


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"
