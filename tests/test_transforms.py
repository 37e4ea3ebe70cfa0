"""Transforms (refine, reverse, compose, ranged) on schedules of every file version.

Random small boxes, some behind a switch that reduces and multicasts, give schedules of
version 1 (baselines), version 2 (pipelined trees with chunk ranges) and version 3
(switch operations: one-step NVLS collectives, the pipelined NVLS allreduce). Each is
accepted by the independent verifier; so must be what the transforms make of it, with
the costs the transform promises. Examples are drawn afresh each run (no database, not
derandomised): a failure prints the seed and the example to reproduce it.
"""

from collections import Counter
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.construct.baselines import baselines
from synth.construct.in_network import nvls_allreduce, one_step, reducing_switch
from synth.construct.tree_schedules import tree_search
from synth.schedule.file import schedule_to_dict
from synth.schedule.ir import Send, Step
from synth.schedule.transform import compose_allreduce, refine, same_both_ways
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.linkmodel import Group, LinkModel, RankLink, lower_with_routes
from synth.topology.physical import topology_from_dict

FRESH = settings(max_examples=20, deadline=None, database=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow])


@st.composite
def boxes(draw):
    """N GPUs on one switch (a reducing one, or plain), plus a few direct links."""
    n = draw(st.integers(2, 6))
    can = draw(st.sampled_from([["reduce", "multicast"], []]))
    switch = {"name": "sw", "kind": "nvswitch", **({"can": can} if can else {})}
    links = [{"between": [f"gpu{g}", "sw"], "gbps": 25, "count": draw(st.integers(1, 4))}
             for g in range(n)]
    for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                              .filter(lambda p: p[0] < p[1]), max_size=2, unique=True)):
        links.append({"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25})
    doc = {"name": "box", "unit_gbps": 25, "gpus": n, "switches": [switch], "links": links}
    return lower_with_routes(topology_from_dict(doc)).model


def version(schedule) -> int:
    return schedule_to_dict(schedule)["version"]


def valid(schedule) -> bool:
    try:
        verify_schedule(schedule_to_dict(schedule))
    except ScheduleInvalid:
        return False
    return True


def schedules_of(model, name, want):
    """Schedules of collective `name` on `model` of file version `want`."""
    found = [b.schedule for b in baselines(model, name)]
    trees = tree_search(model, name, None, Limits(max_steps=6), None)
    found += [p.schedule for p in trees.points]
    switch = reducing_switch(model)
    if switch is not None and name in ("allgather", "reducescatter"):
        found += [one_step(model, switch, name, None, c) for c in (1, 2, 3)]
    if switch is not None and name == "allreduce":
        found += [nvls_allreduce(model, switch, b, 1) for b in (1, 2, 3)]
    return [s for s in found if version(s) == want]


@FRESH
@given(model=boxes(), name=st.sampled_from(["allgather", "reducescatter", "allreduce"]),
       want=st.sampled_from([1, 2, 3]), factor=st.integers(2, 3))
def test_refining_keeps_every_version_valid_at_most_factor_times_the_rounds(
        model, name, want, factor):
    for schedule in schedules_of(model, name, want):
        assert valid(schedule)
        finer = refine(schedule, factor)
        assert valid(finer), (schedule.info, factor)
        assert version(finer) == want
        assert finer.collective.chunks == factor * schedule.collective.chunks
        assert finer.num_steps == schedule.num_steps
        assert schedule.rounds <= finer.rounds <= factor * schedule.rounds
        moved = sum(x.count * len(x.pairs()) for s in finer.steps for x in s.switch_ops)
        before = sum(x.count * len(x.pairs()) for s in schedule.steps for x in s.switch_ops)
        assert moved == factor * before


@FRESH
@given(model=boxes(), rs_version=st.sampled_from([1, 2, 3]),
       ag_version=st.sampled_from([1, 2, 3]))
def test_composing_any_reducescatter_with_any_allgather_is_an_allreduce(
        model, rs_version, ag_version):
    for rs in schedules_of(model, "reducescatter", rs_version)[:2]:
        for ag in schedules_of(model, "allgather", ag_version)[:2]:
            k = rs.collective.chunks * ag.collective.chunks
            allreduce = compose_allreduce(refine(rs, k // rs.collective.chunks),
                                          refine(ag, k // ag.collective.chunks))
            assert valid(allreduce), (rs.info, ag.info)
            assert allreduce.num_steps == rs.num_steps + ag.num_steps


REDUCING_BOX = {"name": "nvs4", "unit_gbps": 25, "gpus": 4,
                "switches": [{"name": "sw", "kind": "nvswitch", "can": ["reduce", "multicast"]}],
                "links": [{"between": [f"gpu{g}", "sw"], "gbps": 25, "count": 2}
                          for g in range(4)]}


def test_a_refined_switch_reduction_keeps_its_sums():
    # the crash of dgxh100x2: refinement dropped the switch reductions, so the composed
    # allreduce left rank 0 with chunk 0 summed over itself only
    model = lower_with_routes(topology_from_dict(REDUCING_BOX)).model
    rs = one_step(model, reducing_switch(model), "reducescatter", None, 1)
    finer = refine(rs, 2)
    ops = [(x.chunk, x.count, x.dsts) for x in finer.steps[0].switch_ops]
    assert ops == [(0, 1, (0,)), (1, 1, (0,)), (2, 1, (1,)), (3, 1, (1,)),
                   (4, 1, (2,)), (5, 1, (2,)), (6, 1, (3,)), (7, 1, (3,))]
    # each GPU's up port (2 lanes) carries its copy of the 3 other shares: 3 chunks,
    # 2 rounds; refined, 6 pieces: 3 rounds (the destination's down port pays once)
    assert (rs.steps[0].rounds, finer.steps[0].rounds) == (2, 3)
    ag = one_step(model, reducing_switch(model), "allgather", None, 2)
    assert valid(compose_allreduce(finer, ag))
    dropped = compose_allreduce(refine(rs, 2).__class__(
        finer.collective, model, (Step(1, ()),), {}), ag)
    assert not valid(dropped)  # what the old refine made: the verifier says no


def test_a_pipelined_schedule_refines_with_its_stride_and_depth():
    model = lower_with_routes(topology_from_dict(REDUCING_BOX)).model
    pipelined = nvls_allreduce(model, reducing_switch(model), 3, 1)
    finer = refine(pipelined, 2)
    assert (finer.pipeline.batches, finer.pipeline.stride) == (3, 8)
    # an up port carries 3 reduced pieces (step 1), plus 1 multicast where step 2 of
    # the batch before runs beside it: 3 and 4 chunks on 2 lanes, 2 rounds each;
    # refined, 6 and 8 pieces: 3 and 4 rounds
    assert pipelined.pipeline.rounds == (2, 2, 2, 2)
    assert finer.pipeline.rounds == (3, 4, 4, 3)
    assert Fraction(finer.rounds, finer.collective.chunks) <= \
        Fraction(pipelined.rounds, pipelined.collective.chunks)
    assert valid(finer)


def test_compose_refuses_parts_that_do_not_match():
    model = lower_with_routes(topology_from_dict(REDUCING_BOX)).model
    rs = one_step(model, reducing_switch(model), "reducescatter", None, 1)
    ag = one_step(model, reducing_switch(model), "allgather", None, 2)
    with pytest.raises(ValueError, match="differ"):
        compose_allreduce(rs, ag)


def _spelled(items):
    """A step's sends or switch operations one chunk each, by the letter of
    docs/schedule-file.md's version 2 (a range means each of its chunks)."""
    return Counter(replace(x, chunk=c, count=1)
                   for x in items for c in range(x.chunk, x.chunk + x.count))


@FRESH
@given(model=boxes(), name=st.sampled_from(["allgather", "reducescatter", "allreduce"]),
       want=st.sampled_from([2, 3]))
def test_ranged_writes_the_same_sends_as_ranges_within_shares(model, name, want):
    for schedule in schedules_of(model, name, want):
        plain = schedule.expanded()
        ranged = plain.ranged()
        per = plain.collective.share_chunks
        assert valid(ranged)
        for a, b in zip(plain.steps, ranged.steps, strict=True):
            assert _spelled(b.sends) == Counter(a.sends)
            assert _spelled(b.switch_ops) == Counter(a.switch_ops)
            assert b.rounds == a.rounds
            assert all(x.chunk // per == (x.chunk + x.count - 1) // per
                       for x in (*b.sends, *b.switch_ops))
        if plain.compact or any(x.count > 1 for s in schedule.steps for x in s.sends):
            assert sum(map(len, (s.sends for s in ranged.steps))) < \
                sum(map(len, (s.sends for s in plain.steps)))


def test_ranged_keeps_a_repeated_send_and_a_broken_schedule_stays_broken():
    model = lower_with_routes(topology_from_dict(REDUCING_BOX)).model
    plain = schedules_of(model, "allgather", 2)[0].expanded()
    first = plain.steps[0]
    inside = [x for x in first.sends if x.chunk % plain.collective.share_chunks]
    assert inside  # a send inside a share, not at its start: merged unless kept apart
    twice = replace(plain, steps=(replace(first, sends=first.sends + tuple(inside[:1])),
                                  *plain.steps[1:]))
    assert _spelled(twice.ranged().steps[0].sends) == Counter(twice.steps[0].sends)
    # a send dropped: the ranged form is rejected as the plain one is
    dropped = replace(plain, steps=(replace(first, sends=first.sends[1:]), *plain.steps[1:]))
    assert not valid(dropped)
    assert not valid(dropped.ranged())


def test_a_network_is_the_same_both_ways_only_if_every_link_and_group_has_its_reverse():
    ring = tuple(RankLink(a, b, Fraction(1)) for a, b in [(0, 1), (1, 2), (2, 0), (1, 0),
                                                         (2, 1), (0, 2)])
    out_of_0 = Group("out of 0", ((0, 1), (0, 2)), Fraction(1))
    into_0 = Group("into 0", ((1, 0), (2, 0)), Fraction(1))
    assert same_both_ways(LinkModel("ring", 1.0, 3, ring))
    assert same_both_ways(LinkModel("ring", 1.0, 3, ring, (out_of_0, into_0)))
    # a group without its reverse, or with it at another capacity, or twice
    assert not same_both_ways(LinkModel("ring", 1.0, 3, ring, (out_of_0,)))
    assert not same_both_ways(LinkModel("ring", 1.0, 3, ring,
                                        (out_of_0, replace(into_0, capacity=Fraction(2)))))
    assert not same_both_ways(LinkModel("ring", 1.0, 3, ring, (out_of_0, into_0, into_0)))
    # a link listed twice in a group is listed twice in its reverse
    twice = replace(out_of_0, links=((0, 1), (0, 1), (0, 2)))
    assert not same_both_ways(LinkModel("ring", 1.0, 3, ring, (twice, into_0)))
    assert same_both_ways(LinkModel("ring", 1.0, 3, ring, (
        twice, replace(into_0, links=((1, 0), (1, 0), (2, 0))))))
    # a link wider one way than the other, or one way only
    wide = (replace(ring[0], capacity=Fraction(2)),) + ring[1:]
    assert not same_both_ways(LinkModel("ring", 1.0, 3, wide))
    assert not same_both_ways(LinkModel("ring", 1.0, 3, ring[:-1]))
