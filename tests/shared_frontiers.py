"""Frontiers several test modules check, synthesized once per test session.

test_runner runs every dgx1 frontier schedule under torch, test_export exports each
one, test_synthesis checks dgx1 allreduce against the bound: the same synthesis three
times cost about 20 s of the suite. The searches finish (proven) well within the time
limit, so one result serves all of them.

Under pytest-xdist each worker is a process of its own: the first worker to need a
frontier synthesizes it and leaves it (pickled) in the session's shared temporary
folder, a worker that needs it meanwhile waits for it there (a lock per frontier), so
the suite synthesizes dgx1 allreduce (18 s on an idle core) once, not once per worker.
"""

import fcntl
import os
import pickle
from functools import cache
from pathlib import Path

from synth.bounds import bounds
from synth.frontier import Result, default_max_steps, synthesize
from synth.schedule.collectives import ROOTED, make_collective
from synth.topology.catalog import resolve
from synth.search.pareto import Limits
from synth.topology.linkmodel import lower_with_routes

def default_limits(b, max_steps=None, max_chunks=None, time_limit=None,
                   backend="cpsat") -> Limits:
    """Limits with every default filled in (8 chunks, 5 minutes, 3 steps past the hop
    bound: synth.frontier.default_max_steps)."""
    return Limits(max_steps or default_max_steps(b), max_chunks or 8, time_limit or 300.0,
                  backend)


# a guard against a hang, not a speed target: idle, these searches finish proven in
# seconds; a busy machine (two other synth jobs on two cores) must get the same answer
TIME_LIMIT = 900

STORE: Path | None = None  # the folder the session's workers share (conftest sets it)


def share_between_workers(folder: Path | None) -> None:
    global STORE
    STORE = folder


def _synthesize(spec: str, name: str) -> Result:
    topo = resolve(spec)
    root = 0 if name in ROOTED else None
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    return synthesize(topo, name, root, default_limits(b, time_limit=TIME_LIMIT))


@cache
def synthesized(spec: str, name: str) -> Result:
    if STORE is None:
        return _synthesize(spec, name)
    stem = STORE / f"{spec.replace(':', '_').replace('/', '_')}-{name}"
    path = stem.with_suffix(".pickle")
    with open(stem.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if path.exists():
            return pickle.loads(path.read_bytes())
        result = _synthesize(spec, name)
        part = stem.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(pickle.dumps(result))
        os.replace(part, path)
        return result
