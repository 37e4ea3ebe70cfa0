"""`synth calibrate LOG... --topo T -o FILE.yaml`: fit cost model 2 to nccl-tests output."""

from __future__ import annotations

import click

from synth.cli.app import cli
from synth.cli.options import BOXES, DEGRADED, TOPO, examples, out_option


@cli.command(short_help="Fit cost model 2 to nccl-tests output.", epilog=examples(
    "synth calibrate all_reduce_perf.log --topo dgxa100 -o dgxa100-fitted.yaml",
    "synth calibrate ar.log ag.log --topo my-box.yaml --boxes 2 -o fitted.yaml"))
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@TOPO
@BOXES
@DEGRADED
@out_option("output", "FILE.yaml", "The calibrated topology file (written whole or not at "
            "all).", required=True)
@click.option("--collective", type=click.Choice(["allreduce", "allgather", "reducescatter",
                                                 "alltoall", "broadcast", "reduce"]),
              help="What the logs measured, where neither they nor their names say.")
def calibrate(logs, spec, boxes, without, degrade, routes, output, collective):
    """Fit the call cost, NCCL's latencies and the link efficiencies of cost model 2 to
    nccl-tests output measured on TOPO (least squares on log time), print the fit per
    row and write the topology with its fitted `costs:` section: a file every command
    takes (docs/cost-model.md).

    Exit 0 done, 2 a log that cannot be read or does not match the topology.
    """
    from dataclasses import replace

    import yaml

    from synth.errors import BadInput
    from synth.files import write_atomic
    from synth.predict.calibrate import RATIOS, TIMES, Sample, at_bound, figures_for, fit
    from synth.topology.figures import defaults
    from synth.predict.machine import machine_of
    from synth.predict.nccl_tests import read_log
    from synth.topology.catalog import box_and_boxes, resolve
    from synth.topology.physical import topology_to_dict

    topo = resolve(spec, boxes, without + degrade, routes=routes)
    if topo.several_routes:  # its file could not say so, and NCCL's times are one route's
        raise BadInput(f"{topo.name}: calibrate fits NCCL's measured times, which run on one "
                       "route per GPU pair; calibrate the machine without --routes several "
                       "and give the option with the file it writes")
    machine = machine_of(topo)
    samples = []
    for path in logs:
        log = read_log(path, collective)
        if log.ranks != topo.ranks:
            raise BadInput(f"{path}: measured on {log.ranks} GPUs, {topo.name} has "
                           f"{topo.ranks}")
        other = _other_gpus(log, machine)
        if other:
            click.echo(f"synth: note: {path}: {other}", err=True)
        samples += [Sample(machine, log.collective, r.nbytes, r.time_us, log.algorithm,
                           log.protocol, log.launches) for r in log.rows]
    theta, fitted = fit(samples, topo.figures or defaults(machine.arch))
    to_stdout = output == "-"  # the file on standard output, the fit beside it on stderr

    def say(text):
        click.echo(text, err=to_stdout)

    figures = replace(figures_for(machine, theta),
                      source=f"synth calibrate on {', '.join(logs)} ({len(samples)} rows)")
    say(f"{'collective':<14}{'size':>12}{'measured us':>13}{'fitted us':>11}"
        f"{'error':>8}  NCCL runs")
    for f in fitted:
        s = f.sample
        say(f"{s.collective:<14}{s.nbytes:>12}{s.time_us:>13.1f}"
            f"{f.choice.predicted_us:>11.1f}{f.error:>+8.1%}  {f.choice.name}")
    errors = sorted(abs(f.error) for f in fitted)
    say(f"median error {errors[len(errors) // 2]:.1%}, worst {errors[-1]:.1%}")
    start = topo.figures or defaults(machine.arch)
    bounded = at_bound(machine, theta)
    for name in TIMES + RATIOS:
        say(f"  {name:<17} {getattr(start, name):>9.4g} -> {getattr(figures, name):.4g}"
            + ("  (at its bound: the rows would take it further)"
               if name in bounded else ""))
    box, k = box_and_boxes(spec, boxes)
    # the machine measured: the healthy box, K of it, and every edit, a file's first
    doc = topology_to_dict(replace(box.healthy or box, figures=figures, repeat=k,
                                   edits=box.edits + without + degrade, healthy=None))
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    text = f"# {topo.name} calibrated by synth calibrate (docs/cost-model.md)\n" + text
    if to_stdout:
        click.echo(text, nl=False)
        return
    write_atomic(output, text)
    click.echo(f"wrote {output}")


def _other_gpus(log, machine) -> str:
    """What is amiss where the log's GPUs are not the topology's kind ("" where they
    are, or synth does not know them): an A100 log fitted dgxh100's figures."""
    from synth.predict.nccl_tests import device_kind

    theirs = {device_kind(name) for name in log.devices} - {None}
    ours = (machine.arch, machine.figures.library)
    if not theirs or ours in theirs:
        return ""
    names = ", ".join(sorted(log.devices))
    return (f"measured on {names} ({', '.join(f'{a}, {lib}' for a, lib in sorted(theirs))}), "
            f"but {machine.name}'s GPUs are {ours[0]}, {ours[1]}: the fit is of the machine "
            "given")
