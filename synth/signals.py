"""Signals held while work that must not be cut in two runs: Ctrl-C and SIGTERM wait
until the block is done (a frontier's files being written, a plan's folder, the workers
of `synth run` being started), and the block learns which came meanwhile."""

from __future__ import annotations

import signal
from contextlib import contextmanager


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
