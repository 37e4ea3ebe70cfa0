"""Greedy link-chunk matching (synth.construct.greedy): every schedule passes the
independent verifier, and on graphs whose optimum is known by hand it reaches it.

The expected figures are derived here, not read from the code: a rank that lacks k
chunks and has d links in, each carrying one chunk a round, needs at least k / d rounds;
with one round a step, that is also a floor on the steps.
"""

import json
import time
from fractions import Fraction

import pytest

from synth.construct import greedy
from synth.construct.greedy import build, greedy_search
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import LinkModel, RankLink, lower
from synth.topology.symmetry import Translations, translations_of
from tests.in_process import synth_main


def model(spec):
    return lower(resolve(spec))


def check(schedule):
    """The independent verifier, on the schedule's file form."""
    verify_schedule(schedule_to_dict(schedule))


@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce", "broadcast",
                                  "reduce"])
@pytest.mark.parametrize("spec", ["ring:8", "hypercube:3", "torus:3x3", "switch:4", "dgx1"])
def test_every_greedy_schedule_verifies(spec, name):
    root = 0 if name in ("broadcast", "reduce") else None
    schedule = build(model(spec), name, root, 2)
    check(schedule)  # raises ScheduleInvalid when the schedule is wrong
    assert schedule.collective.name == name


def test_allgather_on_a_ring_of_8_reaches_its_optimum():
    # each rank lacks 7 chunks and has 2 links in: at least ceil(7 / 2) = 4 rounds
    schedule = build(model("ring:8"), "allgather", None, 1)
    assert (schedule.num_steps, schedule.rounds) == (4, 4)


def test_allgather_on_a_cube_reaches_its_optimum():
    # hypercube:3: 7 chunks to receive over 3 links in: ceil(7 / 3) = 3 rounds; the
    # diameter is 3 steps too
    schedule = build(model("hypercube:3"), "allgather", None, 1)
    assert (schedule.num_steps, schedule.rounds) == (3, 3)


def test_allgather_on_torus_8x8_with_4_chunks_reaches_the_cut_bound():
    # 63 shares of 4 chunks to receive over 4 links in: 63 rounds for 4 chunks a share
    schedule = build(model("torus:8x8"), "allgather", None, 4)
    check(schedule)
    assert Fraction(schedule.rounds, 4) == Fraction(63, 4)


def test_reducescatter_is_the_allgather_run_backwards():
    forward = build(model("torus:3x3"), "allgather", None, 1)
    backward = build(model("torus:3x3"), "reducescatter", None, 1)
    assert [len(s.sends) for s in backward.steps] == [len(s.sends) for s in forward.steps][::-1]
    assert all(x.op == "reduce" for s in backward.steps for x in s.sends)


def test_a_shared_port_caps_the_chunks_its_links_carry():
    # switch:4: each GPU's port into the switch carries 1 chunk a round for its 3 links,
    # so each rank sends one chunk a step and the 3 others need 3 steps
    schedule = build(model("switch:4"), "allgather", None, 1)
    check(schedule)
    assert (schedule.num_steps, schedule.rounds) == (3, 3)
    assert all(len({x.src for x in s.sends}) == len(s.sends) for s in schedule.steps)


def test_a_slow_link_gets_steps_long_enough_for_a_whole_chunk():
    # two ranks joined by links of half a chunk a round: one step of two rounds
    half = Fraction(1, 2)
    pair = LinkModel("pair", 25.0, 2, (RankLink(0, 1, half, 0.7), RankLink(1, 0, half, 0.7)))
    schedule = build(pair, "allgather", None, 1)
    check(schedule)
    assert (schedule.num_steps, schedule.rounds) == (1, 2)


def test_unreachable_ranks_give_no_schedule():
    one_way = LinkModel("one-way", 25.0, 2, (RankLink(0, 1, Fraction(1), 0.7),))
    assert build(one_way, "allgather", None, 1) is None
    search = greedy_search(one_way, "allgather", None, Limits())
    assert search.points == [] and search.stopped == "some rank cannot be reached"


def test_the_search_stops_at_the_bound_and_keeps_only_improvements():
    search = greedy_search(model("torus:8x8"), "allgather", None, Limits(),
                           bound=Fraction(63, 4))
    assert [p.chunks for p in search.points] == [1, 2, 4]
    assert search.stopped == "reached the bandwidth bound"
    assert search.points[-1].ratio == Fraction(63, 4)
    # ring:8: 7 C chunks over 2 links in need 7 C / 2 rounds: 4 for C = 1 (whole
    # rounds), 7 / 2 a chunk from C = 2 on; C = 4 and 8 only tie, so are not kept
    search = greedy_search(model("ring:8"), "allgather", None, Limits())
    assert [(p.chunks, p.ratio) for p in search.points] == [(1, 4), (2, Fraction(7, 2))]
    assert search.stopped == "built at 1, 2, 4, 8 chunks a share"
    # --max-chunks caps the counts tried
    search = greedy_search(model("ring:8"), "allgather", None, Limits(max_chunks=1))
    assert [p.chunks for p in search.points] == [1]


def test_a_count_that_does_worse_ends_the_search(monkeypatch):
    real = greedy.build

    def build(m, name, root, chunks, deadline=None, dims=()):
        # ring:4 with 1 chunk: 2 rounds a chunk (3 over 2 links); "2 chunks": ring:8's
        # 1-chunk schedule, 4 rounds a chunk
        return real(model("ring:4" if chunks == 1 else "ring:8"), name, root, 1)

    monkeypatch.setattr(greedy, "build", build)
    search = greedy_search(model("ring:4"), "allgather", None, Limits())
    assert [p.ratio for p in search.points] == [2]
    assert search.stopped == "2 chunks a share did worse than 1"


def test_the_search_keeps_what_it_built_when_time_runs_out(monkeypatch):
    real = greedy.build

    def build(m, name, root, chunks, deadline=None, dims=()):
        if chunks > 1:
            raise greedy.OutOfTime
        return real(m, name, root, chunks, deadline, dims)

    monkeypatch.setattr(greedy, "build", build)
    search = greedy_search(model("torus:8x8"), "allgather", None, Limits())
    assert [p.chunks for p in search.points] == [1]
    assert search.stopped == "out of time" and not search.complete


def test_a_count_that_would_overrun_the_deadline_is_not_begun():
    # torus:8x8, 1 chunk a share: 64 x 63 sends, about 0.05 s to build and verify
    search = greedy_search(model("torus:8x8"), "allgather", None, Limits(),
                           deadline=time.monotonic() + 0.01)
    assert search.points == [] and not search.complete
    assert search.stopped.startswith("out of time before 1 chunk a share: about 0.0")


def test_translations_are_checked_against_the_links():
    assert translations_of(model("torus:4x4"), (4, 4)) == Translations((4, 4))
    assert translations_of(model("hypercube:3"), (2, 2, 2)) == Translations((2, 2, 2))
    # a 4 x 4 mesh has no wrap-around links: shifting moves a corner's links off the grid
    assert translations_of(model("mesh:4x4"), (4, 4)) is None
    assert translations_of(model("ring:8"), (2, 4)) is None  # 1 -> 5 is no ring link
    assert translations_of(model("ring:8"), (4,)) is None  # 4 shifts, 8 ranks


@pytest.mark.parametrize("spec, steps", [
    # 15 chunks to receive over 4 links in: at least ceil(15 / 4) = 4 steps of a round
    ("torus:4x4", 4),
    # switch:5: a rank's port from the switch carries one chunk a round, 4 to receive
    ("switch:5", 4),
    # 255 chunks over 4 links in: ceil(255 / 4) = 64
    ("torus:16x16", 64),
])
def test_matching_under_translations_reaches_the_least_steps(spec, steps):
    topo = resolve(spec)
    schedule = build(lower(topo), "allgather", None, 1, dims=topo.translations)
    check(schedule)
    assert (schedule.num_steps, schedule.rounds) == (steps, steps)


def test_reducescatter_and_allreduce_under_translations_verify():
    topo = resolve("torus:4x4")
    for name in ("reducescatter", "allreduce"):
        schedule = build(lower(topo), name, None, 2, dims=topo.translations)
        check(schedule)
        assert schedule.collective.name == name


def test_greedy_matching_reaches_the_bound_on_a_torus():
    # torus:6x6: 35 chunks to receive over 4 links a GPU, at best 35/4 rounds a chunk
    search = greedy_search(model("torus:6x6"), "allgather", None, Limits(),
                           bound=Fraction(35, 4), dims=(6, 6))
    best = min(search.points, key=lambda p: p.ratio)
    assert best.ratio == Fraction(35, 4)
    check(best.schedule)


def test_the_frontier_of_a_torus_reaches_both_bounds_at_once(tmp_path):
    # torus:6x6: 35/4 rounds a chunk as above, and at least 6 steps (3 + 3 hops from a
    # rank to the farthest one); trees packed under the torus's shifts and turns meet
    # both in one point (the constructions alone: the exact search cannot reach 36 ranks)
    result = synth_main("allgather", "--topo", "torus:6x6", "--time-limit", "10",
                        "--method", "constructed", "--model", "line-rate", "--out",
                        tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)["frontier"]
    assert [(p["steps"], Fraction(p["rounds"], p["chunks"])) for p in points] == \
        [(6, Fraction(35, 4))]
    verified = synth_main("verify", *[p["file"] for p in points])
    assert verified.returncode == 0, verified.stderr


def test_asking_about_a_folded_point_is_priced_as_every_rank_it_unfolds_to():
    # greedy points on a torus hold one orbit's sends (symmetry); the exporters unfold
    # them to every rank's, so the work of asking is that of the unfolded schedule (priced
    # as one rank's, ring:1024's point was asked about for 15 s past a 5 s limit)
    from synth.construct.paced import export_size
    search = greedy_search(model("torus:4x4"), "allgather", None, Limits(), dims=(4, 4))
    folded = [p.schedule for p in search.points if p.schedule.symmetry is not None]
    assert folded
    for s in folded:
        assert export_size(s) == export_size(s.unfolded())
