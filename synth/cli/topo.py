"""`synth topo list`, `show` and `import` (`synth topo draw` is in synth.cli.pictures)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from synth.cli.app import topo
from synth.cli.options import BOXES, DEGRADED, TIME_LIMIT, examples, json_option, out_option


@topo.command("list", short_help="Built-in topologies, generators and other forms.")
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
    click.echo("  NAMExK:FABRIC,...        joined by clos or fat-tree leaves, a spine and "
               "pods (dgxh100x128:clos,pod=16,over=7)")
    click.echo("files:\n  PATH.yaml | PATH.json      a topology file (format: "
               "docs/guide/02-your-cluster.md); --boxes K repeats its box")
    click.echo("imported:\n  PATH.xml | PATH.txt        NCCL topology XML or nvidia-smi topo "
               "-m output (synth topo import)")


@topo.command("show", short_help="A topology's parts, links, groups and bandwidth.",
              epilog=examples("synth topo show dgxh100", "synth topo show dgx2x2 --json",
                              "synth topo show dgxh100x2 --without box1.nic2",
                              "synth topo show dgxh100x16:clos,pod=4,over=7"))
@click.argument("spec", metavar="TOPO")
@BOXES
@DEGRADED
@TIME_LIMIT
@json_option()
def topo_show(spec, boxes, without, degrade, routes, time_limit, as_json):
    """GPUs, switches, NICs, links, groups, per-GPU bandwidth, hop diameter."""
    from synth.deadline import job_deadline
    from synth.errors import NoAnswer
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import TimeLimit
    from synth.topology.report import format_summary, topology_summary

    deadline = job_deadline(time_limit)
    try:
        summary = topology_summary(resolve(spec, boxes, without + degrade, deadline, routes),
                                   deadline)
    except TimeLimit as e:
        raise NoAnswer(f"the time limit ({time_limit:g} s) ran out while {e}") from None
    if not as_json:
        click.echo(format_summary(summary))
        return
    # json.dumps(summary, indent=1), looking at the deadline as it goes: the 29 MB of a
    # 1024-GPU machine's rank links and groups took two seconds past the limit
    text = []
    for i, piece in enumerate(json.JSONEncoder(indent=1).iterencode(summary)):
        if i % 65536 == 0 and deadline.passed():
            raise NoAnswer(f"the time limit ({time_limit:g} s) ran out while writing "
                           f"{summary['name']} as JSON ({summary['ranks']} GPUs)")
        text.append(piece)
    click.echo("".join(text))



@topo.command("import", short_help="An NCCL topology XML or nvidia-smi matrix as a file.",
              epilog=examples("nvidia-smi topo -m > my-box.txt",
                              "synth topo import my-box.txt -o my-box.yaml",
                              "synth topo import nccl-topo.xml --gpu h100-sxm -o my-box.yaml"))
@click.argument("source", metavar="SOURCE")
@out_option("output", "FILE.yaml",
            "Write the topology file here (whole or not at all); default: print it.")
@click.option("--gpu", metavar="MODEL", help="The GPU model, for what the source does not "
              "say: a partial NCCL_TOPO_FILE's NVLinks, the generation of a matrix "
              "(v100-sxm, a100-sxm, h100-sxm, h200-sxm, b200-sxm, b300-sxm).")
@click.option("--nic-gbps", type=click.FloatRange(0.001, 1e6), metavar="GB/s",
              help="Every NIC's speed, GB/s per direction (default: read, else assumed "
              "and said so).")
@click.option("--fabric", type=click.Choice(["single-switch", "rails"]),
              help="How --boxes K joins copies of the box (default: rails with 2+ NICs).")
@click.option("--name", metavar="NAME", help="The topology's name (default: the file's).")
def topo_import(source, output, gpu, nic_gbps, fabric, name):
    """Import SOURCE (NCCL topology XML, full dump or partial NCCL_TOPO_FILE, or
    `nvidia-smi topo -m` output) as a topology file, every number with a comment saying
    where it came from."""
    from synth.files import parse_yaml, write_atomic
    from synth.errors import BadInput
    from synth.topology.importing import import_source
    from synth.topology.physical import topology_from_dict

    draft = import_source(source, gpu, nic_gbps, fabric, name)
    text = draft.to_yaml()
    try:  # the file reads back as written, through the reader every command uses
        topo = topology_from_dict(parse_yaml(text, "the imported topology"))
    except BadInput as e:
        raise BadInput(f"{Path(source).name}: imported, but {e}") from None
    inferred = sum(1 for v in topo.vertices if v.inferred) + sum(
        1 for l in topo.links if l.inferred) // 2
    said = (f"imported {topo.ranks} GPUs, {len(topo.vertices) - topo.ranks} switches and "
            f"NICs, {len(topo.links) // 2} links ({inferred} parts inferred, "
            f"{len(topo.assumptions)} assumptions)")
    if output and output != "-":  # -: standard output, as without -o
        write_atomic(output, text)
        click.echo(f"{said}: wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
        click.echo(said, err=True)
