"""The command line's frame: the `synth` group, the `topo` group, and `main`, which turns
every error into one line on stderr and an exit code (0 done, 1 the answer is no, 2 bad
input, 130 interrupted).

The commands live in the modules beside this one, one per kind of work, and register
themselves on this group when synth.cli imports them.
"""

from __future__ import annotations

import sys

import click

from synth.errors import SynthError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="synth", prog_name="synth")
def cli():
    """Synthesize collective communication algorithms for GPU clusters."""


@cli.group()
def topo():
    """List, show and draw topologies."""


SOLVER_CHOICE = {
    "auto": ("cpsat", "auto: CP-SAT solved every instance in bench/ faster than Z3"),
    "cpsat": ("cpsat", "asked for"),
    "z3": ("z3", "asked for"),
}


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

