"""The MSCCL++ plan's split searched on a sample of ranks past 64 (synth.export.mscclpp_search):
the same plan as the search over every rank, checked by the plan simulator."""

import synth.export.mscclpp as mscclpp
import synth.export.mscclpp_search as search
from synth.export.mscclpp import to_mscclpp_plan
from synth.export.mscclpp_sim import check_mscclpp_plan
from synth.frontier import synthesize
from synth.search.pareto import Limits
from synth.topology.catalog import resolve


def test_the_sample_is_the_first_box_and_one_rank_of_every_box_at_its_own_place():
    boxes = [r // 8 for r in range(72)]  # dgxh100x9: 9 boxes of 8
    # box b gives its member b mod 8: 8 + 1 = 9, 16 + 2 = 18, ..., 56 + 7 = 63, 64 + 0
    assert search.sample_ranks(72, boxes) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 18, 27, 36, 45,
                                              54, 63, 64]
    assert search.sample_ranks(64, boxes[:64]) is None  # up to 64: every rank
    assert search.sample_ranks(80, None) == list(range(0, 80, 2))  # no boxes: spread
    assert search.sample_ranks(72, [0] * 72) is None  # one box: the sample is every rank


def _plans(schedule, monkeypatch):
    """(the plan searched on the sample, the plan searched on every rank)."""
    sampled = to_mscclpp_plan(schedule)
    monkeypatch.setattr(search, "SAMPLE_PAST", 10 ** 9)
    return sampled, to_mscclpp_plan(schedule)


def test_a_cluster_of_alike_boxes_gets_the_plan_of_the_whole_search(monkeypatch):
    result = synthesize(resolve("dgxh100x9"), "allgather", limits=Limits(time_limit=30),
                        method="decomposed")
    schedule = min(result.points, key=lambda p: p.steps).schedule
    sampled, whole = _plans(schedule, monkeypatch)
    assert sampled == whole
    check_mscclpp_plan(sampled, ranks_per_node=8)


def test_a_split_that_fits_the_sample_but_not_every_rank_is_searched_again(monkeypatch):
    # gather to rank 5 on a ring of 80: rank 45 only sends its own chunks, so one lane
    # fits it, while the root needs more lanes: the whole search then chooses
    result = synthesize(resolve("ring:80"), "gather", root=5, limits=Limits(time_limit=30),
                        method="constructed")
    schedule = result.points[0].schedule
    monkeypatch.setattr(mscclpp, "sample_ranks", lambda n, boxes: [45])
    tries = []
    real = mscclpp.fewest_split
    monkeypatch.setattr(mscclpp, "fewest_split",
                        lambda *a, **k: tries.append(real(*a, **k)) or tries[-1])
    sampled = to_mscclpp_plan(schedule)
    assert [(p.t, p.cap) for p in tries] == [(1, 16), (7, 16)]  # the sample's, the whole's
    monkeypatch.setattr(mscclpp, "sample_ranks", lambda n, boxes: None)
    assert sampled == to_mscclpp_plan(schedule)
    check_mscclpp_plan(sampled, root=5)


def test_a_sample_that_gives_no_split_sends_the_search_over_every_rank(monkeypatch):
    # which lane counts are tried depends on the longest thread block seen: on the
    # sample (rank 45) one and two lanes are as long, so doubling stops there, and the
    # most lanes do not fit either; over every rank the root's thread blocks shorten,
    # four lanes fit and bisection finds three. The ops are counted by a stand-in
    result = synthesize(resolve("ring:80"), "gather", root=5, limits=Limits(time_limit=30),
                        method="constructed")
    schedule = result.points[0].schedule
    real = mscclpp.thread_block_ops
    def count(rank, lanes):
        if rank == 45:
            return 10 if lanes in (3, 4) else 100
        return {1: 200, 2: 150}.get(lanes, 10) if rank == 5 else 1

    def ops(plan, tb):
        return [real(plan, tb)[0]] * count(tb.rank, plan.t)

    monkeypatch.setattr(mscclpp, "thread_block_ops", ops)
    monkeypatch.setattr(mscclpp, "sample_ranks", lambda n, boxes: [45])
    plan = mscclpp.build(schedule)
    assert (plan.t, plan.cap) == (3, 16)
    assert len(plan.tbs) == 80  # made for every rank
