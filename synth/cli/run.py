"""`synth run`: execute a schedule with torch.distributed (synth.run.distributed)."""

from __future__ import annotations

import json

import click

from synth.cli.app import cli
from synth.cli.options import Size, examples, json_option
from synth.errors import NoAnswer


@cli.command("run", short_help="Run a schedule with torch.distributed and check it.",
             epilog=examples("synth run allgather-s2-r3-c2.json --size 64MB",
                             "torchrun --nproc-per-node 8 -m synth run FILE.json --backend nccl"))
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--nproc", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="Processes to start here [the schedule's ranks]. Under torchrun, omit.")
@click.option("--size", "size", type=Size(), default="1MB", show_default=True,
              help="Message size n in bytes, exactly (nccl-tests' convention, binary "
                   "units: 64MB, 67108867).")
@click.option("--dtype", type=click.Choice(["auto", "float32", "int32", "uint8"]),
              default="auto", show_default=True,
              help="Element type; auto: float32 where every share is whole float32 "
                   "elements, else uint8.")
@click.option("--runtime", type=click.Choice(["mscclpp", "msccl-xml"]), default="mscclpp",
              show_default=True,
              help="Whose cut the call follows: the bulk through the schedule in 16-byte "
                   "units (mscclpp) or in whole loops of elements a share (msccl-xml), "
                   "the rest through torch's own collective.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo",
              show_default=True, help="torch.distributed backend: gloo on CPUs, nccl on "
                                      "GPUs.")
@click.option("--iters", type=click.IntRange(0, 10000), default=5, show_default=True,
              metavar="K",
              help="Timed runs of each (after one warm-up); 0: check only.")
@json_option()
@click.option("--no-verify", is_flag=True, hidden=True,
              help="Skip the verifier (to test the runner's numeric check).")
def run_command(path, nproc, size, dtype, runtime, backend, iters, as_json, no_verify):
    """Run FILE on N processes, check it against torch's collective, time both."""
    from synth.output import counted, rooted
    from synth.run.distributed import run

    report = run(path, nproc, size, iters, backend, check_first=not no_verify,
                 dtype=dtype, runtime=runtime)
    if not report:  # a torchrun worker other than rank 0
        return 0
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        click.echo(f"{rooted(report['collective'], report['root'])} on {report['ranks']} "
                   f"ranks ({report['backend']}), "
                   f"{_bytes(report['bytes'])} of {report['dtype']}, {report['iters']} "
                   f"timed iterations: {'correct' if report['correct'] else 'WRONG'}")
        click.echo(f"  {_bytes(report['bulk_bytes'])} through the schedule (its chunks in "
                   f"{report['cut']}), {report['tail_bytes']:,} through torch's "
                   f"{report['torch_reference']}")
        if report["synth_us"] is not None:  # None: not timed, or no byte through it
            click.echo(f"  synth schedule {report['synth_us']:10.1f} us "
                       f"{report['synth_algbw_gbps']:8.3f} GB/s  ({counted(report['steps'], 'step')})")
        if report["torch_us"] is not None:
            click.echo(f"  torch          {report['torch_us']:10.1f} us "
                       f"{report['torch_algbw_gbps']:8.3f} GB/s  ({report['torch_reference']})")
    if report["bulk_bytes"] == 0:  # the check then says nothing of the schedule
        click.echo(f"synth: note: {_bytes(report['bytes'])} is less than one cut of the "
                   f"schedule's chunks ({report['cut']}): all of it ran through torch's "
                   f"{report['torch_reference']}, so the schedule was not run; give a larger "
                   f"--size", err=True)
    if not report["correct"]:
        raise NoAnswer(f"the schedule's result differs from torch's: {report['mismatches']}")
    return 0


def _bytes(n: int) -> str:
    return f"{n:,} byte{'' if n == 1 else 's'}"
