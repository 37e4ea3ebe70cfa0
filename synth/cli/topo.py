"""`synth topo list` and `synth topo show` (`synth topo draw` is in synth.cli.pictures)."""

from __future__ import annotations

import json

import click

from synth.cli.app import BOXES, topo


@topo.command("list")
def topo_list():
    """Built-in topologies, generators and the multi-node form."""
    from synth.topology.catalog import GENERATORS, builtin_names, resolve

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
    click.echo("files:\n  PATH.yaml | PATH.json      a topology file (format: README.md); "
               "--boxes K repeats its box")


@topo.command("show")
@click.argument("spec", metavar="TOPO")
@BOXES
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def topo_show(spec, boxes, as_json):
    """GPUs, switches, NICs, links, groups, per-GPU bandwidth, hop diameter."""
    from synth.topology.catalog import resolve
    from synth.topology.report import format_summary, topology_summary

    summary = topology_summary(resolve(spec, boxes))
    click.echo(json.dumps(summary, indent=1) if as_json else format_summary(summary))

