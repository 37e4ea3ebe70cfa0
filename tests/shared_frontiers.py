"""Frontiers several test modules check, synthesized once per test session.

test_runner runs every dgx1 frontier schedule under torch, test_export exports each
one, test_synthesis checks dgx1 allreduce against the bound: the same synthesis three
times cost about 20 s of the suite. The searches finish (proven) well within the time
limit, so one result serves all of them.
"""

from functools import cache

from synth.bounds import bounds
from synth.frontier import Result, default_limits, synthesize
from synth.schedule.collectives import ROOTED, make_collective
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes

# a guard against a hang, not a speed target: idle, these searches finish proven in
# seconds; a busy machine (two other synth jobs on two cores) must get the same answer
TIME_LIMIT = 900


@cache
def synthesized(spec: str, name: str) -> Result:
    topo = resolve(spec)
    root = 0 if name in ROOTED else None
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    return synthesize(topo, name, root, default_limits(b, time_limit=TIME_LIMIT))
