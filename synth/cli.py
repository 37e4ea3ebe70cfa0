"""The command line (DESIGN.md, "The command line").

Every error reaches the user as one line on stderr and an exit code: 0 done, 1 the
answer is no, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import json
import sys

import click

from synth.errors import SynthError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="synth", prog_name="synth")
def cli():
    """Synthesize collective communication algorithms for GPU clusters."""


# --- topologies -------------------------------------------------------------------

@cli.group()
def topo():
    """List, show and draw topologies."""


@topo.command("list")
def topo_list():
    """Built-in topologies, generators and the multi-node form."""
    from synth.catalog import GENERATORS, builtin_names, resolve

    click.echo("built-in:")
    for name in builtin_names():
        t = resolve(name)
        click.echo(f"  {name:<10} {t.ranks:>3} GPUs  {t.description}")
    click.echo("generators:")
    for text in GENERATORS.values():
        spec, _, what = text.partition("  ")
        click.echo(f"  {spec:<24} {what}")
    click.echo("multi-node:\n  NAMExK                   K boxes of NAME joined by their NICs "
               "(dgx2x4, dgxh100x8, ...)")
    click.echo("files:\n  PATH.yaml | PATH.json      a topology file (format: README.md)")


@topo.command("show")
@click.argument("spec", metavar="TOPO")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def topo_show(spec, as_json):
    """GPUs, switches, NICs, links, groups, per-GPU bandwidth, hop diameter."""
    from synth.catalog import resolve
    from synth.topology_report import format_summary, topology_summary

    summary = topology_summary(resolve(spec))
    click.echo(json.dumps(summary, indent=1) if as_json else format_summary(summary))


# --- bounds -----------------------------------------------------------------------

@cli.command("bounds")
@click.argument("collective", metavar="COLLECTIVE")
@click.option("--topo", "spec", required=True, help="Topology name, generator or file.")
@click.option("--root", type=int, default=None, help="Root rank of rooted collectives.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bounds_command(collective, spec, root, as_json):
    """Lower bounds on steps and bandwidth for COLLECTIVE on TOPO."""
    from synth.bounds import collective_bounds
    from synth.catalog import resolve

    b = collective_bounds(resolve(spec), collective, root)
    summary = {"collective": b.collective, "topology": spec, "ranks": b.ranks,
               "steps": b.steps, "rounds_per_chunk": str(b.rounds_per_chunk),
               "latency_us": b.latency_us, "us_per_mb": b.us_per_mb,
               "algbw_gbps_max": 1 / (b.us_per_byte * 1e3), "note": b.note}
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"{collective} on {spec} ({b.ranks} ranks)")
    click.echo(f"  steps            >= {b.steps}  (latency >= {b.latency_us:.2f} us)")
    click.echo(f"  rounds per chunk >= {b.rounds_per_chunk}  ({b.us_per_mb:.3f} us/MB, "
               f"algbw <= {summary['algbw_gbps_max']:.1f} GB/s)")
    if b.note:
        click.echo(f"  note: {b.note}")


# --- schedules --------------------------------------------------------------------

@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--cost", "show_cost", is_flag=True, help="Also print each schedule's cost.")
@click.option("--sizes", default="1KB,1MB,64MB,1GB", show_default=True,
              help="Message sizes for --cost.")
def verify(files, show_cost, sizes):
    """Check schedule files with the independent simulator.

    Exit 0 when every file is valid, 1 when one is invalid, 2 when one is not a schedule.
    """
    from synth.cost import format_size, parse_size, schedule_cost
    from synth.schedule import schedule_from_dict
    from synth.verify import verify_file

    size_list = [parse_size(s) for s in sizes.split(",")] if show_cost else []
    worst = 0
    for path in files:
        try:
            doc = verify_file(path)
        except SynthError as e:
            click.echo(f"synth: {path}: {e}", err=True)
            worst = max(worst, e.exit_code)
            continue
        line = (f"ok {path}: {doc['collective']} on {doc['topology'].get('name', '?')}, "
                f"{len(doc['steps'])} steps, "
                f"{sum(s['rounds'] for s in doc['steps'])} rounds, {doc['chunks']} chunks")
        if show_cost:
            cost = schedule_cost(schedule_from_dict(doc))
            times = "  ".join(f"{format_size(n)} {cost.time_us(n):.1f} us "
                              f"({cost.algbw_gbps(n):.1f} GB/s)" for n in size_list)
            line += f"\n   latency {cost.latency_us:.2f} us, {cost.us_per_byte * 1e6:.3f} us/MB;  {times}"
        click.echo(line)
    return worst


def main(argv=None) -> None:
    try:
        code = cli.main(args=argv, prog_name="synth", standalone_mode=False)
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        click.echo(f"synth: error: {e.format_message()}", err=True)
        code = 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("synth: interrupted", err=True)
        code = 130
    except SynthError as e:
        click.echo(f"synth: error: {e}", err=True)
        code = e.exit_code
    sys.exit(code if isinstance(code, int) else 0)



