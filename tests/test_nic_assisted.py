"""Allgather, reducescatter and allreduce through each box's switch and every NIC at
once (synth.construct.nic_assisted): the schedules verify, and their rounds are those
derived by hand below, not by the code under test.
"""

import json
from fractions import Fraction

import pytest

from synth.bounds import bounds
from synth.construct.nic_assisted import Split, nic_applies, nic_search
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main

# 3 boxes of 4 GPUs; each GPU has 2 lanes to its box's switch (NVLS) and one NIC of one
# lane on its rail: c_nv = 2, c_nic = 1, n = 4, K = 3
BOX = """name: nvls4
description: 4 GPUs around a switch that reduces and multicasts, 2 lanes each, one NIC each
unit_gbps: 50
gpus: 4
boxes: 3
switches:
  - {name: nvswitch, kind: nvswitch, can: [reduce, multicast]}
nics: [nic0, nic1, nic2, nic3]
links:
""" + "".join(f"  - {{between: [gpu{i}, nvswitch], gbps: 50, count: 2, alpha_us: 0.35}}\n"
              f"  - {{between: [gpu{i}, nic{i}], gbps: 64}}\n" for i in range(4)) + \
    "network: {fabric: rails, gbps: 50, alpha_us: 2.6}\n"


def machine(spec):
    lowering = lower_with_routes(resolve(spec))
    hierarchy, why = find_hierarchy(lowering)
    assert hierarchy is not None, why
    return lowering, hierarchy


@pytest.fixture
def nvls4(tmp_path):
    path = tmp_path / "nvls4.yaml"
    path.write_text(BOX)
    return machine(str(path))


def by_batches(search):
    return {p.schedule.batches: p.schedule for p in search.points}


@pytest.mark.parametrize("name", ["allgather", "reducescatter"])
def test_every_gpu_receives_through_nic_and_nvlink_at_the_bound(nvls4, name):
    lowering, hierarchy = nvls4
    model = lowering.model
    b = bounds(lowering, make_collective(name, model.ranks))
    # by hand: each GPU receives nK - 1 = 11 shares over 2 + 1 lanes: 11/3 a chunk
    assert b.rounds_per_chunk == Fraction(11, 3)
    search = nic_search(model, name, Limits(max_steps=70), None, hierarchy)
    found = by_batches(search)
    assert set(found) == {1, 2, 4, 8, 16, 32, 64}
    # r = (nK - 1) c_nic / ((K - 1)(c_nic + c_nv)) = 11/6 GPUs a box reach each share
    # through their NICs: 6 pieces a share, R = 11 (5 pieces reach 2 GPUs, 1 reaches 1).
    # A batch, per GPU: step 1 its box's 3 shares, 3 x 6 = 18 pieces in over NVLink (9
    # rounds); step 2 (K-1) R = 22 pieces in and out through its NIC (22 rounds); step 3
    # the foreign pieces not brought by its NIC, (K-1)(n x 6 - R) = 26 (13 rounds); all
    # three at once 22 through the NIC and 18 + 26 = 44 over 2 lanes: 22 rounds. One
    # batch alone: 9 + 22 + 13 = 44; B >= 2: 9 + 22 + 22 (B - 2) + 22 + 13 = 22 B + 22
    # (the two directions turned round for reducescatter: the same counts).
    assert found[1].info["pieces"] == 6 and found[1].info["forwarders"] == 11
    assert (found[1].rounds, found[1].collective.chunks) == (44, 6)
    for batches, schedule in found.items():
        if batches > 1:
            assert (schedule.rounds, schedule.collective.chunks) == (22 * batches + 22,
                                                                     6 * batches)
    deepest = found[64]
    assert Fraction(deepest.rounds, deepest.collective.chunks) / b.rounds_per_chunk == \
        Fraction(65, 64)
    verify_schedule(schedule_to_dict(deepest))
    verify_schedule(schedule_to_dict(found[2].expanded()))  # without the compact forms


def test_allreduce_runs_the_reductions_beside_the_multicasts(nvls4):
    lowering, hierarchy = nvls4
    search = nic_search(lowering.model, "allreduce", Limits(max_steps=70), None, hierarchy)
    found = by_batches(search)
    # by hand: the NICs carry both halves, so r = (nK - 1 + K) c_nic / ((K - 1)(2 c_nv +
    # c_nic)) = 14/10: 5 pieces a share, R = 7. Per GPU and direction in the steady
    # state (all six steps at once): through the NIC 2 (K-1) R = 28 pieces (28 rounds);
    # over NVLink the allgather half's 5 x 11 - 2 x 7 = 41 pieces in and the
    # reducescatter half's 5 + 2 x 5 = 15 sums into it (its own shares and the foreign
    # pieces it multicasts, turned round): 56 over 2 lanes, 28 rounds. A batch is
    # n K x 5 = 60 chunks: each batch more costs 28 rounds.
    assert (found[1].info["pieces"], found[1].info["forwarders"]) == (5, 7)
    a, z = found[32], found[64]
    assert (z.collective.chunks - a.collective.chunks) == 60 * 32
    assert z.rounds - a.rounds == 28 * 32
    verify_schedule(schedule_to_dict(z))


def test_it_stays_out_where_one_nic_crossing_a_box_is_all_the_nics_carry():
    # dgxb200x2: r = (16 - 1) x 1 / (1 x (1 + 18)) = 15/19 < 1: each share already
    # needs one NIC crossing into the other box, and the NICs are the limit
    lowering, hierarchy = machine("dgxb200x2")
    assert nic_applies(lowering.model, "allgather", hierarchy) is None
    assert nic_search(lowering.model, "allgather", Limits(), None, hierarchy).points == []
    lowering, hierarchy = machine("dgxh100x2")  # r = 15 x 2 / (1 x 20) = 3/2
    assert nic_applies(lowering.model, "allgather", hierarchy) is not None
    assert nic_applies(lowering.model, "alltoall", hierarchy) is None


def test_split_ranges_give_the_extra_forwarder_to_the_first_pieces():
    assert Split(6, 11).ranges() == [(0, 5, 2), (5, 1, 1)]
    assert Split(4, 8).ranges() == [(0, 4, 2)]


def test_cli_lists_the_method_near_the_bound_on_dgxh100x2(tmp_path):
    made = synth_main("allgather", "--topo", "dgxh100x2", "--time-limit", "10", "--model",
                      "line-rate", "--method", "constructed", "--out", str(tmp_path / "out"),
                      "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    summary = json.loads(made.stdout)
    assert summary["bounds"]["rounds_per_chunk"] == "3/4"
    ours = [p for p in summary["frontier"]
            if p["method"].startswith("in-network (NVLS, shares also through the NICs)")]
    assert ours, [p["method"] for p in summary["frontier"]]
    # by hand: n = 8, K = 2, c_nv = 18, c_nic = 2 (a 400 Gb/s NIC in 25 GB/s lanes):
    # r = 15 x 2 / (1 x 20) = 3/2, 4 pieces, R = 6. Alone, a batch's steps take 2 (28
    # pieces in over 18 lanes), 3 (6 through the NIC link of 2) and 2 (26 in) rounds;
    # any two or three at once 3 (NIC 6 / 2; NVLink at most 54 / 18). B batches: 3 B +
    # 4 rounds for 4 B chunks, (3 B + 4) / (3 B) x the bound: 1.0013 at 1024 batches
    assert min(p["ratio_to_bound"] for p in ours) <= 1 + 4 / (3 * 1024) + 1e-9
    assert synth_main("verify", ours[-1]["file"]).returncode == 0
