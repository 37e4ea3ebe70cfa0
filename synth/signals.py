"""Signals held while work that must not be cut in two runs: Ctrl-C and SIGTERM wait
until the block is done (a frontier's files being written, a plan's folder, the workers
of `synth run` being started), and the block learns which came meanwhile. And the
record of every Ctrl-C and SIGTERM the command's handlers saw (synth.cli.app), so that
one whose KeyboardInterrupt was swallowed still stops the command."""

from __future__ import annotations

import signal
from contextlib import contextmanager

# Ctrl-C and SIGTERM seen during this command (synth.cli.app's handlers append, and
# clear it as a command starts). A KeyboardInterrupt raised inside a destructor is
# swallowed by Python ("Exception ignored in ... __del__"): z3's objects free themselves
# that way by the thousand while a model is built, and a Ctrl-C lost there left a
# minutes-long solve running (tests/test_interrupt.py, on a busy machine)
SEEN: list[int] = []


def interrupt_seen() -> bool:
    """Whether a Ctrl-C or SIGTERM came during this command: work about to wait on a
    solver asks first, and stops (KeyboardInterrupt) where one did."""
    return bool(SEEN)


@contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM wait until the block is done: yields a list that holds the
    signals that came meanwhile; the handlers before it are given back after it."""
    caught = []
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
