"""`synth ARGS` run in the test's own process: synth.cli.main with stdin, stdout and
stderr captured, the exit code it ends with, the working folder and environment as
asked; a subprocess.CompletedProcess like the subprocess helpers' (synth_cli).

For the many tests of one fact about bad input (one line on stderr, a documented exit
code, nothing written): starting a fresh Python and importing synth costs each command
about a second of CPU on a busy two-core machine, hundreds of them a minute or two of
the suite. What is about the process (the `python -m synth` entry point, signals,
memory caps, warnings printed once per process, imports at start-up) stays a real
subprocess: test_reliability.synth_cli, test_bad_input's subprocess cases, and the
command-line tests of the other modules.
"""

import os
import signal
import subprocess
from contextlib import contextmanager

from click.testing import CliRunner

from synth.cli import main


@contextmanager
def _folder(cwd):
    if cwd is None:
        yield
        return
    old = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old)


def synth_main(*args, cwd=None, env=None, stdin=None) -> subprocess.CompletedProcess:
    args = [str(a) for a in args]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    runner = CliRunner()
    code = 0
    try:
        with runner.isolation(input=stdin, env=env) as streams, _folder(cwd):
            try:
                main(args)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            out, err = streams[0].getvalue(), streams[1].getvalue()
    finally:
        for s, handler in handlers.items():  # main points SIGTERM at its own handler
            signal.signal(s, handler)
    return subprocess.CompletedProcess(["synth", *args], code,
                                       out.decode("utf-8", "replace"),
                                       err.decode("utf-8", "replace"))
