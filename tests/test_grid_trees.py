"""Trees on a grid written once per orbit (synth.construct.grid_trees): rank 0's sends
are the plain schedule folded, they pass the independent verifier, and past 64 ranks a
torus gets a point at both bounds."""

from dataclasses import replace
from fractions import Fraction

import pytest

from synth.construct import grid_trees
from synth.construct.grid_trees import grid_packing, grid_schedule, grid_symmetry, on_grid
from synth.construct.packing import Packing, Tree
from synth.construct.tree_schedules import allgather_schedule, tree_search
from synth.schedule.file import schedule_to_dict
from synth.schedule.transform import written_per_orbit
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from synth.topology.symmetry import Translations


def every_root(packing: Packing, dims) -> Packing:
    """Rank 0's trees moved onto every rank, spelled out here by the shifts alone."""
    grid = Translations(dims)
    trees = tuple(Tree(r, {grid.shift(v, r): grid.shift(u, r) for v, u in t.parent.items()},
                       t.weight)
                  for r in range(grid.order) for t in packing.trees)
    return replace(packing, trees=trees, roots=tuple(range(grid.order)))


@pytest.mark.parametrize("spec, rate", [("torus:8x8", Fraction(4, 63)),
                                        ("hypercube:5", Fraction(5, 31))])
@pytest.mark.parametrize("batches", [1, 3])
def test_rank_zeros_sends_are_the_plain_schedule_folded(spec, rate, batches):
    topo = resolve(spec)
    model = lower(topo)
    packed = grid_packing(model, topo.translations, None, rate)
    assert packed[0].rate == rate and packed[0].roots == (0,)
    mine = grid_schedule(model, "allgather", packed, batches)
    plain = allgather_schedule(model, every_root(packed[0], topo.translations), batches)
    folded = written_per_orbit(plain, packed[1])
    assert folded.symmetry == mine.symmetry == packed[1]
    assert [(s.rounds, s.sends) for s in mine.steps] == \
        [(s.rounds, s.sends) for s in folded.steps]
    assert mine.pipeline == folded.pipeline
    verify_schedule(schedule_to_dict(mine))


@pytest.mark.parametrize("name, steps, ratio", [
    # torus:16x16: 255 chunks to receive over 4 links in, at best 255/4 rounds a chunk,
    # and 8 + 8 hops to the farthest rank; allreduce twice both (its 256 shares' rounds
    # per chunk: 2 x 255 / (4 x 256))
    ("allgather", 16, Fraction(255, 4)), ("reducescatter", 16, Fraction(255, 4)),
    ("allreduce", 32, Fraction(255, 512))])
def test_past_64_ranks_a_torus_gets_trees_at_both_bounds(name, steps, ratio):
    topo = resolve("torus:16x16")
    model = lower(topo)
    bound = Fraction(255, 4) if name != "allreduce" else ratio
    search = tree_search(model, name, None, Limits(), None, bound, topo.translations)
    # beside it, one tree a root (test_balanced_trees), in as many steps, over the bound
    best = min(search.points, key=lambda p: (p.ratio, p.steps))
    assert (best.steps, best.ratio) == (steps, ratio)
    assert min(p.steps for p in search.points) == steps
    schedule = best.schedule
    # written once: rank 0 takes from each of the 255 other roots its 4 trees' edges
    assert schedule.symmetry is not None
    assert sum(len(s.sends) for s in schedule.steps) <= 1020 * (2 if name == "allreduce"
                                                              else 1)
    verify_schedule(schedule_to_dict(schedule))


def test_a_send_missing_from_rank_zeros_is_caught():
    topo = resolve("torus:8x8")
    model = lower(topo)
    packed = grid_packing(model, topo.translations, None, Fraction(4, 63))
    schedule = grid_schedule(model, "allgather", packed, 1)
    last = schedule.steps[-1]
    broken = replace(schedule, steps=schedule.steps[:-1] + (
        replace(last, sends=last.sends[1:]),))
    with pytest.raises(ScheduleInvalid):
        verify_schedule(schedule_to_dict(broken))


def test_a_grid_whose_shifts_times_links_are_too_many_is_not_packed(monkeypatch):
    # the program names each link's orbit over every shift: torus:16x16, 256 shifts of
    # 1,024 links (fc:512 would be 134 million, gigabytes)
    topo = resolve("torus:16x16")
    model = lower(topo)
    assert on_grid(model, "allgather", topo.translations)
    monkeypatch.setattr(grid_trees, "MAX_GRID_WORK", 256 * 1024 - 1)
    assert not on_grid(model, "allgather", topo.translations)
    assert grid_symmetry(model, list(range(256)), topo.translations) is None
    search = tree_search(model, "allgather", None, Limits(), None, Fraction(255, 4),
                         topo.translations)
    assert search.points == [] and search.stopped.startswith("not packed: 256 ranks")
