"""`synth export FILE --to msccl-xml|mscclpp|json -o PATH` (docs/cli.md).

Registered on the `synth` group when synth.cli imports this module.
"""

from __future__ import annotations

import click

from synth.cli.app import cli
from synth.cli.options import Size, examples, out_option
from synth.errors import BadInput
from synth.export import FORMATS


@cli.command("export", short_help="Write a schedule as MSCCL XML, an MSCCL++ plan or JSON.",
             epilog=examples(
                 "synth export out/dgx1/allgather/allgather-s2-r3-c2.json --to msccl-xml "
                 "-o ag.xml",
                 "synth export FILE.json --to mscclpp --max-bytes 64MB -o ag.mscclpp.json",
                 "synth export FILE.json --to msccl-xml -o -"))
@click.argument("file")
@click.option("--to", "fmt", required=True, type=click.Choice(FORMATS),
              help="msccl-xml: MSCCL/RCCL algorithm; mscclpp: MSCCL++ execution plan; "
                   "json: the schedule file.")
@out_option("path", "FILE", "File to write (whole or not at all); - for standard output.",
            required=True)
@click.option("--inplace/--out-of-place", default=False, show_default=True,
              help="Buffer layout of the calls the algorithm serves.")
@click.option("--name", default=None, metavar="NAME",
              help="Algorithm / plan name [synth-COLL-TOPO-sS-rR-cC-MODE].")
@click.option("--min-bytes", type=Size(bound=True), default=0, show_default=True,
              help="Smallest message the runtime may select it for (units as 64MB).")
@click.option("--max-bytes", type=Size(bound=True), default=None,
              help="Largest message (units as 64MB) [XML: no limit; MSCCL++: the largest "
                   "whose offsets fit 32 bits].")
def export_command(file, fmt, path, inplace, name, min_bytes, max_bytes):
    """Write a schedule file as MSCCL XML, an MSCCL++ plan, or schedule JSON.

    The schedule is verified first (exit 1 when it is invalid); the XML or plan is
    checked by its runtime simulator before it is written. Exit 2 when the schedule
    cannot be expressed.
    """
    from synth.export import render
    from synth.export.units import header_of
    from synth.files import write_atomic
    from synth.schedule.machine import read_verified
    from synth.topology.several_routes import SUFFIX as SEVERAL_ROUTES

    given = [opt for opt, v in (("--inplace", inplace), ("--name", name),
                                ("--min-bytes", min_bytes), ("--max-bytes", max_bytes))
             if v not in (False, None, 0)]
    if fmt == "json" and given:  # the schedule file has no layout, name or sizes
        raise BadInput(f"{', '.join(given)}: for msccl-xml and mscclpp only, not --to json")
    schedule = read_verified(file)
    text, summary = render(schedule, fmt, inplace, name, min_bytes, max_bytes, once=True)
    # the sizes the file runs (docs/runtimes.md, "Any message size"), read once: a plan's
    # header is its whole text; the schedule format runs any size under `synth run`
    header = None if fmt == "json" else header_of(fmt, text)
    if header is not None:
        _runs_some_size(header.unit)
    sizes = header.contract() if header is not None else ""
    if fmt != "json" and SEVERAL_ROUTES in schedule.model.name:
        click.echo(f"synth: note: made for {schedule.model.name}, whose GPU pairs may use two "
                   f"routes at once; {fmt} sends each pair's chunks over one, so this may "
                   "run slower than the schedule's times (docs/cli.md, \"Several routes\")",
                   err=True)
    if path == "-":  # standard output: the file's text there, the summary on stderr
        click.echo(text, nl=False)
        click.echo(f"wrote standard output ({fmt}): {summary}", err=True)
        if sizes:
            click.echo(sizes, err=True)
        return
    write_atomic(path, text)
    click.echo(f"wrote {path} ({fmt}): {summary}")
    if sizes:
        click.echo(sizes)


def _runs_some_size(unit) -> None:
    """BadInput where --min-bytes and --max-bytes hold no size the file (its Unit) runs:
    the runtime would never pick it."""
    if not unit.runs_some_size():
        raise BadInput(f"no size from {unit.min_bytes:,} to {unit.max_bytes:,} bytes is one "
                       f"the file runs (multiples of {unit.quantum(1):,} bytes), so no call "
                       "would ever pick it: widen --min-bytes and --max-bytes")
