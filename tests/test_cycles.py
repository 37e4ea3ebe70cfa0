"""The cycle collector paused while synth builds schedules (synth/cycles.py), and kept
running through the exact search's long solver runs."""

import gc

import pytest

import synth.frontier as frontier
from synth.cycles import cycles_paused
from synth.frontier import synthesize
from synth.search.pareto import Limits
from synth.topology.catalog import resolve


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_inside_and_restored_after_even_on_error(collector_on):
    with cycles_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), cycles_paused():
        raise ValueError("inside")
    assert gc.isenabled()
    gc.disable()
    with cycles_paused():
        pass
    assert not gc.isenabled()  # off before, off after: not turned on behind a caller


def test_synthesis_pauses_it_to_build_not_for_the_exact_search(collector_on, monkeypatch):
    seen = {}

    def watch(key, wrapped):
        def call(*args, **kwargs):
            seen[key] = gc.isenabled()
            return wrapped(*args, **kwargs)
        monkeypatch.setattr(frontier, key, call)

    for key in ("bounds", "_constructions", "_exact_searches", "decompose"):
        watch(key, getattr(frontier, key))
    assert synthesize(resolve("ring:4"), "allgather", limits=Limits(time_limit=20)).points
    assert seen == {"bounds": False, "_constructions": False, "_exact_searches": True}
    assert synthesize(resolve("dgxh100x2"), "allgather", method="decomposed",
                      limits=Limits(time_limit=20)).points
    assert seen["decompose"] is False
    assert gc.isenabled()
