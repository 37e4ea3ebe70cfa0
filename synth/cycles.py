"""Pausing Python's cycle collector while synth builds many small objects.

Schedules, programs and plans are millions of small objects (sends, steps, ops), few of
them in reference cycles. The cycle collector, which runs as allocations pile up, walks
every object still alive again and again: it took a third of synthesizing an allgather
on torus:32x32 (6.6 CPU s, 4.4 with it paused) and two thirds of building an MSCCL++
plan of a 16-GPU ring (28 s, 9 s paused). Reference counting still frees what is
dropped; only garbage in cycles waits, until the collector resumes.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def cycles_paused():
    """The cycle collector off inside (as it was, after): for code that allocates much
    and makes few cycles, not for a solver's long run."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
