"""Tests for the NCCL-style baselines (synth.construct.baselines).

Every baseline on every built-in topology must pass the independent verifier; on
uniform topologies the costs must match the textbook formulas. The searches inside are
bounded (ring packing, tree growing), so the whole file runs in a few seconds.
"""

import copy
import json
from dataclasses import replace
from functools import lru_cache

import pytest

from synth.construct.baselines import baselines, find_boxes, not_applicable, pack_rings
from synth.construct.baselines.rings import ring_baseline
from synth.construct.baselines.trees import _classic_trees
from synth.errors import BadInput
from synth.schedule.cost import schedule_cost
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.topology.catalog import join_boxes, resolve
from synth.topology.linkmodel import lower, min_rounds, switch_rounds

TOPOLOGIES = ["dgx1", "ndv2", "dgx2", "dgxa100", "dgxh100", "ring:8", "fc:8", "switch:8",
              "hypercube:3", "torus:3x3", "dgx2x2", "dgxh100x2"]
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]
UNIT = 25e3  # bytes per us at capacity 1 (25 GB/s)


@lru_cache(maxsize=None)
def model(name):
    return lower(resolve(name))


def by_name(topology, collective, root=None):
    return {b.name: b for b in baselines(model(topology), collective, root)}


def only(topology, collective, algorithm, root=None):
    found = [b for b in baselines(model(topology), collective, root) if b.algorithm == algorithm]
    assert len(found) == 1, (algorithm, not_applicable(model(topology), collective, root))
    return found[0]


# --- every baseline verifies ---------------------------------------------------------

@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_baseline_verifies(topology, collective):
    m = model(topology)
    found = baselines(m, collective)
    assert found, not_applicable(m, collective)
    skipped = not_applicable(m, collective)
    assert not {b.algorithm for b in found} & set(skipped)
    for b in found:
        s = b.schedule
        assert s.collective.name == collective and s.collective.ranks == m.ranks
        for step in s.steps:  # rounds are exactly what the link model asks for
            assert step.rounds == (switch_rounds(m, list(step.switch_ops)) if step.switch_ops
                                   else min_rounds(m, [(x.src, x.dst) for x in step.sends
                                                       for _ in range(x.count)]))
        doc = schedule_to_dict(s)
        verify_schedule(doc)
        json.dumps(doc)  # the info written under "synthesis" must be plain JSON


@pytest.mark.parametrize("topology", ["dgx1", "fc:8", "torus:3x3", "dgx2x2", "dgxh100x2"])
@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_rooted_baselines_verify_for_another_root(topology, collective):
    found = baselines(model(topology), collective, root=5)
    assert {b.algorithm for b in found} >= {"ring", "double binary tree"}
    for b in found:
        assert b.schedule.collective.root == 5
        verify_schedule(schedule_to_dict(b.schedule))


@pytest.mark.parametrize("collective", ["gather", "scatter", "alltoall"])
def test_direct_covers_the_other_collectives(collective):
    found = baselines(model("fc:8"), collective, root=2 if collective != "alltoall" else None)
    assert [b.name for b in found] == ["direct"]
    verify_schedule(schedule_to_dict(found[0].schedule))
    assert "ring" in not_applicable(model("fc:8"), collective)


# --- the classic formulas on uniform topologies --------------------------------------

def test_ring_allgather_on_bidirectional_ring_uses_both_directions():
    b = only("ring:8", "allgather", "ring")
    cost, n = schedule_cost(b.schedule), 8
    assert b.name == "ring x2" and b.schedule.collective.chunks == 2
    assert b.schedule.num_steps == n - 1 and b.schedule.rounds == n - 1
    assert cost.us_per_byte == pytest.approx((n - 1) / n / (2 * UNIT))
    assert cost.latency_us == pytest.approx((n - 1) * 0.7)


def test_ring_reducescatter_and_allreduce_on_ring():
    n = 8
    rs = only("ring:8", "reducescatter", "ring").schedule
    assert rs.num_steps == n - 1
    assert schedule_cost(rs).us_per_byte == pytest.approx((n - 1) / n / (2 * UNIT))
    ar = only("ring:8", "allreduce", "ring").schedule
    assert ar.num_steps == 2 * (n - 1) and ar.collective.chunks == 2 * n
    assert schedule_cost(ar).us_per_byte == pytest.approx(2 * (n - 1) / n / (2 * UNIT))


@pytest.mark.parametrize("collective,sends", [
    # ring:8 has two channels (one each way); a chunk crosses n - 1 = 7 links: allgather
    # and reducescatter 2 x 8 chunks x 7, allreduce twice that, broadcast's chain 2 x 7 x 7
    ("allgather", 112), ("reducescatter", 112), ("allreduce", 224), ("broadcast", 98)])
def test_a_ring_too_large_to_hold_is_refused_by_counting(monkeypatch, collective, sends):
    from synth.construct.baselines import baseline
    built = ring_baseline(model("ring:8"), collective, 0 if collective == "broadcast" else None)
    assert sum(len(step.sends) for step in built.schedule.steps) == sends
    monkeypatch.setattr(baseline, "MAX_SENDS", sends - 1)
    refused = ring_baseline(model("ring:8"), collective,
                            0 if collective == "broadcast" else None)
    assert refused == f"{sends} sends (at most {sends - 1} fit in memory)"


def test_ring_broadcast_pipelines_n_minus_1_chunks_per_ring():
    n = 8
    s = only("ring:8", "broadcast", "ring", root=3).schedule
    assert s.collective.chunks == 2 * (n - 1) and s.num_steps == 2 * n - 3


def test_recursive_doubling_and_halving_on_hypercube():
    n = 8
    ag = only("hypercube:3", "allgather", "recursive doubling").schedule
    assert ag.num_steps == 3 and ag.collective.chunks == 1
    assert [step.rounds for step in ag.steps] == [1, 2, 4]  # doubling the data each step
    assert schedule_cost(ag).us_per_byte == pytest.approx((n - 1) / n / UNIT)
    rs = only("hypercube:3", "reducescatter", "recursive halving").schedule
    assert [step.rounds for step in rs.steps] == [4, 2, 1]
    ar = only("hypercube:3", "allreduce", "recursive halving-doubling").schedule
    assert ar.num_steps == 6
    assert schedule_cost(ar).us_per_byte == pytest.approx(2 * (n - 1) / n / UNIT)
    whole = only("hypercube:3", "allreduce", "recursive doubling").schedule
    assert whole.num_steps == 3 and whole.rounds == 3


def test_direct_on_fully_connected():
    ag = only("fc:8", "allgather", "direct").schedule
    assert ag.num_steps == 1 and schedule_cost(ag).latency_us == pytest.approx(0.7)
    assert schedule_cost(ag).us_per_byte == pytest.approx(1 / 8 / UNIT)  # 1 chunk of 8 per link
    ar = only("fc:8", "allreduce", "direct").schedule
    assert ar.num_steps == 2 and ar.collective.chunks == 8


def test_double_binary_tree_is_logarithmic_on_fc():
    s = only("fc:8", "allreduce", "double binary tree").schedule
    assert s.num_steps == 2 * 3 and s.collective.chunks % 2 == 0


def test_classic_trees_swap_interior_and_leaves():
    for n in (8, 16, 6):
        (top_a, a), (top_b, b) = _classic_trees(n, None)
        for top, tree in ((top_a, a), (top_b, b)):
            reached = {top} | {k for ks in tree.values() for k in ks}
            assert reached == set(range(n))
            assert all(len(ks) <= 2 for ks in tree.values())
        assert set(a) == set(range(n)) - set(b)  # A's interior = B's leaves (n even)
    (top_a, _), (top_b, _) = _classic_trees(8, 5)
    assert top_a == top_b == 5


# --- rings: packing ------------------------------------------------------------------

def test_dgx1_finds_several_rings_filling_every_nvlink():
    packing = pack_rings(model("dgx1"))
    assert packing.distinct >= 2
    assert len(packing.channels) == 6 and packing.rounds == 1  # 6 NVLinks per GPU


def test_switch_prefers_one_ring_with_more_channels():
    assert only("switch:8", "allgather", "ring").name == "ring x1"
    dgx2 = pack_rings(model("dgx2"))
    assert dgx2.distinct == 1 and len(dgx2.channels) == 6  # one ring fills the 6-wide port


def test_multi_box_topologies_get_rings():
    for name in ("dgx2x2", "dgxh100x2"):
        packing = pack_rings(model(name))
        assert packing is not None and len(packing.channels) >= 2
    assert pack_rings(model("dgx2x2")).rounds == 2  # the 1/2-wide NIC links need 2 rounds


def a100x2_with_nics(gbps):
    box = resolve("dgxa100")
    box = replace(box, network=replace(box.network, gbps=gbps))
    return lower(join_boxes(box, 2, f"dgxa100x2 ({gbps:g} GB/s NICs)"))


def test_a_fractional_nic_rate_is_kept_whole_in_a_ring():
    # 24 GB/s NICs at dgxa100's 25 GB/s unit: each rail's NIC link has capacity 24/25.
    # A ring over two boxes leaves each box once, on one rail: 8 rails carry 8 x 24/25 =
    # 7.68 channels per round, the whole NIC rate, where 8 full-rate NICs carry 8. With
    # 25 rounds per step that is 8 x 24 = 192 channels; the old budgets (at most 4
    # rounds) reached 3 channels per rail in 4 rounds, 6 per round (a 25% loss).
    fractional, whole = a100x2_with_nics(24.0), a100x2_with_nics(25.0)
    packing = pack_rings(fractional)
    assert packing.rounds == 25 and len(packing.channels) == 192
    ring = ring_baseline(fractional, "allgather", None)
    verify_schedule(schedule_to_dict(ring.schedule))
    full = ring_baseline(whole, "allgather", None)
    assert pack_rings(whole).rounds == 1 and len(pack_rings(whole).channels) == 8
    # the bandwidth term scales by exactly the NIC's rate: 25 / 24
    ratio = schedule_cost(ring.schedule).us_per_byte / schedule_cost(full.schedule).us_per_byte
    assert ratio == pytest.approx(25 / 24, rel=1e-12)


def test_ring_search_is_bounded_on_64_ranks():
    packing = pack_rings(model("dgx2x4"))  # 64 ranks: seeds from the box structure
    assert packing is not None and sorted(packing.channels[0]) == list(range(64))


# --- hierarchical --------------------------------------------------------------------

def test_boxes():
    boxes, _ = find_boxes(model("dgx2x2"))
    assert boxes == [list(range(16)), list(range(16, 32))]
    assert find_boxes(model("dgxh100x2"))[0] == [list(range(8)), list(range(8, 16))]
    for single in ("dgx1", "dgx2", "ring:8"):
        boxes, why = find_boxes(model(single))
        assert boxes == [] and why


def test_hierarchical_allreduce_on_dgx2x2():
    s = only("dgx2x2", "allreduce", "hierarchical").schedule
    assert s.num_steps == 3  # reducescatter in the box, swap across, allgather in the box
    assert s.info["boxes"] == [list(range(16)), list(range(16, 32))]


# --- what does not apply, and why ----------------------------------------------------

def test_not_applicable_reasons():
    torus = not_applicable(model("torus:3x3"), "allreduce")
    assert torus["recursive doubling"] == "9 ranks is not a power of two"
    assert "not every pair" in torus["direct"]
    assert "hierarchical" in torus
    ring = not_applicable(model("ring:8"), "allgather")
    assert ring["double binary tree"].startswith("only for")
    assert "no link" in ring["recursive doubling"]
    assert "hierarchical" not in not_applicable(model("dgx2x2"), "allreduce")
    line = not_applicable(model("line:4"), "allgather")
    assert "Hamiltonian" in line["ring"]


def test_bad_input():
    with pytest.raises(BadInput):
        baselines(model("fc:8"), "allsum")
    with pytest.raises(BadInput):
        baselines(model("fc:8"), "broadcast", root=8)


# --- the verifier catches a broken baseline ------------------------------------------

@pytest.mark.parametrize("topology,collective,algorithm", [
    ("ring:8", "allreduce", "ring"),
    ("hypercube:3", "allgather", "recursive doubling"),
    ("fc:8", "reducescatter", "direct"),
    ("dgx1", "broadcast", "double binary tree"),
    ("dgx2x2", "allreduce", "hierarchical"),
])
def test_verifier_rejects_a_dropped_send(topology, collective, algorithm):
    doc = schedule_to_dict(only(topology, collective, algorithm).schedule)
    verify_schedule(doc)
    for where in (0, -1):  # the first send of the first step, or of the last
        broken = copy.deepcopy(doc)
        del broken["steps"][where]["sends"][0]
        with pytest.raises(ScheduleInvalid):
            verify_schedule(broken)


def test_the_ring_is_priced_per_rank_pair_and_channel():
    # ring:8 packs 2 channels (one each way): 64 rank pairs x 2 = 128 units at the
    # ring's own pace; the others are priced per rank pair (64) at the shared pace (a
    # 314-channel ring on a degraded clos cluster was priced as 1 channel: 0.2 s, took
    # 1.8 s, and compare ended 10% past its limit)
    from synth.construct import baselines as b
    assert b._pace(model("ring:8"), "allgather", "ring", 64) == (b.RING_PACE, 128)
    assert b._pace(model("ring:8"), "allgather", "direct", 64) == (b.PACE, 64)
    # no ring is built for alltoall: not packed to be priced
    assert b._pace(model("ring:8"), "alltoall", "ring", 64) == (b.PACE, 64)


def test_a_baseline_that_does_not_fit_leaves_the_cheaper_ones_after_it(monkeypatch):
    # the ring priced out of the time left, the others still built (the loop stopped
    # at the first that did not fit, and the ring comes first)
    from synth.construct import baselines as b
    from synth.deadline import Deadline
    monkeypatch.setattr(b.RING_PACE, "seconds", lambda units: 1e9)
    built, why = b.baselines_within(model("fc:8"), "allgather", None, Deadline.after(60))
    assert built and all(x.algorithm != "ring" for x in built)
    assert why.startswith("not built: about 1000000000.0 s needed")
    # the time left is the searches' share, not the whole limit's (a run that ended 8 s
    # before its limit said "0.0 s left")
    assert why.endswith(" s left for the searches")
