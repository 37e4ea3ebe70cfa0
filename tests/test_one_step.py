"""One-step instances answered by arithmetic (synth.search.one_step) against the exact
encoding and CP-SAT on the same instances: the same status, the same fewest rounds, and
a schedule the independent verifier accepts. Where the answer is not forced (switches
that compute, combining collectives), the encoding still answers."""

import pytest

from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import verify_schedule
from synth.search import instance as solving
from synth.search.constraints import SAT, UNSAT
from synth.search.encoding import Instance
from synth.search.one_step import one_step
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower


def _encoded(model, coll, rounds, floor=0):
    """The encoding's answer, with the arithmetic switched off: (status, rounds)."""
    out = solving._solve(Instance(model, coll, 1, rounds, minimize=True,
                                  rounds_floor=floor), "cpsat", 60.0, 2)
    assert out.status in (SAT, UNSAT) and (out.status == UNSAT or out.optimal)
    return out.status, out.schedule.rounds if out.schedule else None


CASES = [("switch:4", "allgather", None, 3), ("switch:4", "broadcast", 0, 2),
         ("fc:4", "alltoall", None, 2), ("fc:4", "gather", 1, 1),
         ("fc:4", "scatter", 2, 3), ("ring:4", "allgather", None, 1),
         ("dgx1", "allgather", None, 2), ("dgx1", "broadcast", 3, 1),
         ("dgx2", "allgather", None, 2), ("dgxa100", "alltoall", None, 1)]


@pytest.mark.parametrize("topo,name,root,chunks", CASES)
def test_the_arithmetic_answers_as_the_encoding_does(monkeypatch, topo, name, root,
                                                     chunks):
    model = lower(resolve(topo))
    coll = make_collective(name, model.ranks, chunks, root)
    forced = one_step(model, coll, 10_000)
    assert forced is not None
    monkeypatch.setattr(solving, "one_step", lambda *args: None)
    status, rounds = _encoded(model, coll, 10_000)
    assert forced[0] == status
    if status == SAT:
        schedule = forced[1]
        assert schedule.rounds == rounds and schedule.num_steps == 1
        verify_schedule(schedule_to_dict(schedule))
        # one round fewer is refused by both
        assert one_step(model, coll, rounds - 1) == (UNSAT, None)
        assert _encoded(model, coll, rounds - 1)[0] == UNSAT


def test_a_floor_above_the_least_rounds_is_kept_and_a_cap_below_it_refused():
    model = lower(resolve("switch:4"))
    coll = make_collective("allgather", 4, 1, None)
    status, schedule = one_step(model, coll, 100, rounds_floor=7)
    assert status == SAT and schedule.rounds == 7
    verify_schedule(schedule_to_dict(schedule))
    assert one_step(model, coll, 6, rounds_floor=7) == (UNSAT, None)


def test_what_is_not_forced_is_left_to_the_encoding():
    nvls = lower(resolve("dgxh100"))  # its NVSwitch multicasts: a choice in one step
    assert nvls.switches
    assert one_step(nvls, make_collective("allgather", 8, 1, None), 100) is None
    ring = lower(resolve("ring:4"))
    assert one_step(ring, make_collective("allreduce", 4, 1, None), 100) is None


def test_solve_instance_answers_one_step_allgather_without_a_solver(monkeypatch):
    monkeypatch.setattr(solving, "solve", lambda *a, **k: pytest.fail("a solver ran"))
    monkeypatch.setattr(solving.cache, "load", lambda key: None)
    monkeypatch.setattr(solving.cache, "store", lambda key, entry: None)
    model = lower(resolve("dgx2"))
    # reducescatter goes through its dual, allgather on the reversed links
    out = solving.solve_instance(model, make_collective("reducescatter", 16, 2, None), 1,
                                 1000, minimize=True)
    assert out.status == SAT and out.optimal and out.method == "dual of allgather"
    assert out.schedule.num_steps == 1
    verify_schedule(schedule_to_dict(out.schedule))
