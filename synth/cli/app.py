"""The command line's frame: the `synth` group, the `topo` group, and `main`, which turns
every error into one line on stderr and an exit code: 0 done, 1 the answer is no, 2 bad
input, 3 an internal error (a bug: SYNTH_TRACEBACK=1 shows its traceback), 130
interrupted (Ctrl-C or SIGTERM).

The commands live in the modules beside this one, one per kind of work, and register
themselves on this group when synth.cli imports them.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

import click

from synth import signals
from synth.cli.options import examples
from synth.deadline import start_job, timed_job
from synth.errors import REPORT, SynthError


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=True, epilog=examples(
                 "synth allreduce --topo dgx2x4             # the frontier, under out/",
                 "synth allreduce --topo my-box.yaml --size 1MB",
                 "synth topo import my-box.txt -o my-box.yaml",
                 "synth plan examples/3d-parallel-dgxh100x8.yaml --topo dgxh100x8 -o plan",
                 "synth report allgather --topo dgx1 -o report",
                 "synth COMMAND --help                      # its options and examples"))
@click.version_option(package_name="synth", prog_name="synth")
@click.pass_context
def cli(ctx):
    """Synthesize collective communication algorithms for GPU clusters.

    Every command writes with -o/--out, takes sizes with units (64MB) and has the same
    --time-limit default; docs/cli.md is the contract.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@cli.group(invoke_without_command=True,
           short_help="List, show, draw and import topologies.", epilog=examples(
               "synth topo list",
               "synth topo show dgxh100x2",
               "synth topo draw dgx1 -o dgx1.svg",
               "synth topo import my-box.txt -o my-box.yaml"))
@click.pass_context
def topo(ctx):
    """List, show, draw and import topologies."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _terminated(signum, frame):
    signals.SEEN.append(signum)
    raise KeyboardInterrupt  # SIGTERM is handled like Ctrl-C: keep what was found


def _unraisable(unraisable) -> None:
    """Python's report of an exception it could not raise, but for a Ctrl-C raised in
    a destructor: that one is in signals.SEEN, and the command stops at its next wait on a
    solver (synth.signals), without the traceback on stderr."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _ctrl_c(signum, frame):
    """Python's own Ctrl-C, remembered: an interrupt that lands inside a native
    module's import comes out as ImportError ("initialization failed"), not as
    KeyboardInterrupt, and is still the user's Ctrl-C."""
    signals.SEEN.append(signum)
    raise KeyboardInterrupt


def main(argv=None) -> None:
    start_job(with_process=argv is None)  # --time-limit counts from here (the program's start)
    terminated = signal.signal(signal.SIGTERM, _terminated)
    signals.SEEN.clear()
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable
    given = signal.getsignal(signal.SIGINT)
    if given is signal.default_int_handler:
        signal.signal(signal.SIGINT, _ctrl_c)  # not where a shell has it ignored
    args = sys.argv[1:] if argv is None else list(argv)
    failed = None  # the exception, kept until os._exit below
    try:
        # make_context + invoke is click's main without its own handling of errors,
        # Ctrl-C and closed pipes, which this function does in its own way
        with cli.make_context("synth", args) as ctx:
            code = cli.invoke(ctx)
        sys.stdout.flush()
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        click.echo(f"synth: error: {_one_line(e.format_message())}", err=True)
        code = 2
    except (KeyboardInterrupt, click.exceptions.Abort) as e:
        failed = e
        click.echo("synth: interrupted", err=True)
        code = 130
    except SynthError as e:
        failed = e
        click.echo(f"synth: error: {_one_line(str(e))}", err=True)
        code = e.exit_code
    except BrokenPipeError:  # the reader stopped reading (synth topo list | head -1)
        _stdout_open()
        code = 0
    except MemoryError as e:
        failed = e
        click.echo("synth: error: out of memory (try a smaller topology or instance)",
                   err=True)
        code = 2
    except OSError as e:  # a file or pipe failed where no one expected it
        failed = e
        click.echo(f"synth: error: {_one_line(e.strerror or str(e))}", err=True)
        code = 2
    except Exception as e:  # noqa: BLE001 -- a bug: one line, exit 3, unless asked
        failed = e
        if signals.SEEN:  # what a Ctrl-C or SIGTERM broke on its way (_ctrl_c's docstring)
            click.echo("synth: interrupted", err=True)
            code = 130
        elif os.environ.get("SYNTH_TRACEBACK"):
            raise
        else:
            click.echo(f"synth: error: internal error: "
                       f"{_one_line(f'{type(e).__name__}: {e}')} "
                       f"({REPORT}; SYNTH_TRACEBACK=1 shows where)", err=True)
            code = 3
    finally:
        _stdout_open()
        # the command's handlers and its record of Ctrl-C end with it, however it ends:
        # a caller in this process (a test) that solves on would otherwise be stopped by
        # this command's Ctrl-C or a later SIGTERM (synth.signals)
        signal.signal(signal.SIGINT, given)
        signal.signal(signal.SIGTERM, terminated)
        signals.SEEN.clear()
        sys.unraisablehook = hook
    if argv is None and timed_job():
        # run as the program under a time limit: the limit counts the exit too, and
        # tearing down the interpreter (freeing every route and schedule) takes seconds on
        # a busy machine at scale. Every file is written whole and closed: run the exit
        # handlers, flush, and skip the rest (as after Ctrl-C below). A stage that failed
        # is still held by `failed` (its traceback's frames): freeing a 1049-GPU lowering
        # took 0.6 s past the limit.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 0)
    if argv is None and "ortools" in sys.modules and (code == 130 or _left_behind()):
        # run as the program, after Ctrl-C or a solver that did not stop at its time
        # limit: a stopped CP-SAT solve can leave native threads that abort the process
        # in C++ teardown at exit (134, "terminate called without an active
        # exception"). Every file is already written whole (or not at all) and the
        # streams are flushed, so skip the teardown. Only where CP-SAT was loaded:
        # `synth run` must still wait for its workers.
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code if isinstance(code, int) else 0)


def _left_behind() -> bool:
    """Whether a solver thread was left running past its time limit (still running)."""
    from synth.search.constraints import left_behind
    return left_behind()


def _one_line(text: str, width: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _stdout_open() -> bool:
    """Flush stdout; a reader that went away (a closed pipe) is not an error: stdout is
    pointed at /dev/null so that Python's own flush at exit stays quiet."""
    try:
        sys.stdout.flush()
        return True
    except (BrokenPipeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return False
