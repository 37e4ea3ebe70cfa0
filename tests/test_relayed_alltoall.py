"""Alltoall by forwarding (synth.construct.relayed_alltoall): relayed at rail peers
across boxes, routed along shortest paths where neither direct nor relayed applies."""

import json
from dataclasses import replace
from fractions import Fraction

import pytest

from synth.bounds import bounds
from synth.construct.relayed_alltoall import (ROUTED, forwarded, forwarded_search,
                                              relay_hops, relayed_alltoall, routed_hops)
from synth.construct.tree_schedules import steady_rounds_per_chunk
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.ir import Step
from synth.schedule.orbits import Orbits
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.test_reliability import synth_cli


def lowered(name):
    lowering = lower_with_routes(resolve(name))
    b = bounds(lowering, make_collective("alltoall", lowering.model.ranks, 1))
    return lowering.model, b.rounds_per_chunk


@pytest.mark.parametrize("name", ["dgxh100x2", "dgx2x2", "ndv2x2"])
def test_forwarded_alltoall_pipelines_reach_the_flow_bound(name):
    # ndv2: only GPUs 0 and 1 reach the other box, not every pair inside is linked: routed
    model, bound = lowered(name)
    search = forwarded_search(model, Limits(max_steps=40))
    assert search.complete and search.points
    deepest = max(search.points, key=lambda p: p.schedule.batches)
    verify_schedule(schedule_to_dict(deepest.schedule))
    assert steady_rounds_per_chunk(deepest.schedule) == bound
    assert deepest.ratio > bound  # the fill: one step of the last batch still to go


def test_each_piece_crosses_the_network_once_on_its_rail():
    model, _ = lowered("dgxh100x2")
    schedule = relayed_alltoall(model, 1)
    first, second = schedule.steps
    per_box = model.ranks // 2
    assert all(model.boxes[x.src] != model.boxes[x.dst] and x.src % per_box == x.dst % per_box
               for x in second.sends)
    assert all(model.boxes[x.src] == model.boxes[x.dst] for x in first.sends)
    assert len(second.sends) == model.ranks * per_box  # every cross-box pair, once


def test_the_verifier_rejects_a_relay_that_forwards_a_piece_it_never_got():
    model, _ = lowered("dgxh100x2")
    schedule = relayed_alltoall(model, 1)
    first, second = schedule.steps
    relayed = next(x for x in second.sends if any(y.chunk == x.chunk for y in first.sends))
    dropped = Step(first.rounds, tuple(y for y in first.sends if y.chunk != relayed.chunk))
    with pytest.raises(ScheduleInvalid):
        verify_schedule(schedule_to_dict(replace(schedule, steps=(dropped, second))))


def test_not_relayed_on_one_box_or_without_rail_links():
    assert relayed_alltoall(lowered("dgxh100")[0], 1) == "one box: nothing to relay"
    model, _ = lowered("dgxh100x2")
    links = tuple(l for l in model.links if (l.src, l.dst) != (0, 8))
    assert relayed_alltoall(replace(model, links=links), 1) == "no link 0->8"


def test_cli_alltoall_on_a_rail_fabric_has_a_frontier(tmp_path):
    # dgxa100x4: no direct links between boxes but rail peers', too large to search; the
    # relays take under a second, the runtime asks fill the rest of the limit
    made = synth_cli("alltoall", "--topo", "dgxa100x4", "--time-limit", "5", "--max-steps",
                     "40", "--method", "constructed", "--out", str(tmp_path), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    frontier = json.loads(made.stdout)["frontier"]
    assert all("relayed at rail peers" in p["method"] for p in frontier)
    assert min(p["ratio_to_bound"] for p in frontier) < 1.01


def test_routed_where_not_every_pair_is_linked_and_no_boxes_relay():
    model, bound = lowered("torus:4x4")
    search = forwarded_search(model, Limits(max_steps=40))
    assert search.stopped.startswith("routed along shortest paths (not relayed: one box")
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
        assert p.ratio >= bound
    deepest = max(search.points, key=lambda p: p.schedule.batches).schedule
    assert steady_rounds_per_chunk(deepest) <= bound * Fraction(9, 8)  # rerouted: 11/8 before
    one = forwarded(model, routed_hops(model), 1, ROUTED)  # the routed alltoall, 1 batch
    assert len(one.steps) == 4  # the torus's diameter: one hop a step
    assert forwarded_search(lowered("dgxh100")[0], Limits()).points == []  # direct does it


@pytest.mark.parametrize("name, dims, axes", [
    ("dgxh100x4", (4, 8), (0,)),  # rails: the box index shifts
    # boxes 0, 1 and 2, 3 in pods behind 7:1 uplinks: shifting the box index moves box
    # 1 into the other pod, so the pods' index shifts, and the box's within each pod
    ("dgxh100x4:clos,leaf=2,pod=2,over=7", (2, 2, 8), (0, 1))])
def test_the_relayed_alltoall_is_written_once_per_box(name, dims, axes, tmp_path):
    # the relay of (s, d) is s's box's GPU at d's place, so moving whole boxes maps the
    # schedule onto itself: the file lists the sends into box 0 (ranks 0-7) alone, a
    # quarter of them; unfolded, it is the schedule written rank by rank. At 1024 GPUs
    # that was 251 MB, which synth verify refuses to read
    model, _ = lowered(name)
    search = forwarded_search(model, Limits(max_steps=5))
    for point in search.points:
        s = point.schedule
        assert s.symmetry == Orbits(dims, axes, "pairs")
        assert {x.dst for step in s.steps for x in step.sends} <= set(range(8))
        whole = forwarded(model, relay_hops(model), s.batches, "relayed at rail peers")
        assert [(st.rounds, set(st.sends)) for st in s.unfolded().expanded().steps] == \
            [(st.rounds, set(st.sends)) for st in whole.expanded().steps]
        path = tmp_path / f"{s.num_steps}.json"
        path.write_text(json.dumps(schedule_to_dict(s)))
        assert synth_cli("verify", str(path)).returncode == 0
