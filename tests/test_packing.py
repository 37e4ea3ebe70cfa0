"""Broadcast and reduce by packed spanning trees (synth.construct.packing)."""

import json
import random
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import networkx as nx
import pytest

from synth.bounds import bounds
from synth.construct.packing import broadcast_schedule, pack_trees, tree_search
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.ir import Step
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.test_reliability import synth_cli


def random_direct_topology(seed, gpus=7):
    """A connected random graph of direct links (no switch), 1 to 3 lanes each."""
    rng = random.Random(seed)
    pairs = {(i, i + 1) for i in range(gpus - 1)}  # a path: connected
    pairs |= {tuple(sorted(rng.sample(range(gpus), 2))) for _ in range(gpus)}
    links = [{"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25, "count": rng.randint(1, 3),
              "alpha_us": 0.7} for a, b in sorted(pairs)]
    return topology_from_dict({"name": f"random{seed}", "unit_gbps": 25, "gpus": gpus,
                               "links": links})


CASES = [(resolve("dgx1"), 3), (resolve("ring:5"), 0), (resolve("line:3"), 1),
         (resolve("torus:3x3"), 4), (random_direct_topology(1), 2),
         (random_direct_topology(2), 0)]


@pytest.mark.parametrize("topo,root", CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_packed_trees_are_edge_disjoint_spanning_arborescences_as_many_as_the_min_cut(
        topo, root):
    model = lower_with_routes(topo).model
    packing = pack_trees(model, root)
    lanes = {(l.src, l.dst): l.capacity * packing.lanes_per_capacity for l in model.links}
    g = nx.DiGraph()
    g.add_edges_from((u, v, {"capacity": int(c)}) for (u, v), c in lanes.items())
    k = min(nx.maximum_flow_value(g, root, v) for v in range(model.ranks) if v != root)
    assert packing.trees == k  # Edmonds: exactly the least max-flow from the root
    used = Counter((u, v) for parent in packing.parents for v, u in parent.items())
    assert all(n <= lanes[e] for e, n in used.items())
    for parent in packing.parents:
        tree = nx.DiGraph(list((u, v) for v, u in parent.items()))
        assert set(tree) == set(range(model.ranks))
        assert nx.is_arborescence(tree) and tree.in_degree(root) == 0


@pytest.mark.parametrize("topo,root", CASES, ids=lambda x: getattr(x, "name", str(x)))
@pytest.mark.parametrize("name", ["broadcast", "reduce"])
def test_tree_schedules_verify_and_reach_the_bound_up_to_the_pipeline_fill(
        topo, root, name):
    lowering = lower_with_routes(topo)
    b = bounds(lowering, make_collective(name, topo.ranks, 1, root))
    search = tree_search(lowering.model, name, root, Limits())
    assert search.points
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
        depth, batches = len(p.schedule.steps), p.schedule.batches
        # every step moves at most a link's lanes, so R / C is the bound x the fill
        assert p.ratio == b.rounds_per_chunk * Fraction(depth + batches - 1, batches)
    best = min(search.points, key=lambda p: p.ratio)
    assert best.ratio / b.rounds_per_chunk <= Fraction(102, 100)


def test_the_verifier_rejects_broken_tree_schedules():
    model = lower_with_routes(resolve("dgx1")).model
    good = broadcast_schedule(model, pack_trees(model, 3), 4)
    verify_schedule(schedule_to_dict(good))
    first = good.steps[0]
    dropped = replace(good, steps=(Step(first.rounds, first.sends[1:]),) + good.steps[1:])
    early = replace(good, steps=(good.steps[1], good.steps[0]) + good.steps[2:])
    overlapping = replace(good, pipeline=replace(good.pipeline, stride=1))
    for broken in (dropped, early, overlapping):
        with pytest.raises(ScheduleInvalid):
            verify_schedule(schedule_to_dict(broken))


def test_switch_topologies_are_not_packed_and_say_why():
    model = lower_with_routes(resolve("dgxh100")).model
    search = tree_search(model, "broadcast", 0, Limits())
    assert not search.points and "switch" in search.stopped


def test_the_cli_frontier_of_dgx1_broadcast_reaches_the_bound_within_2_percent(tmp_path):
    result = synth_cli("broadcast", "--topo", "dgx1", "--root", "3", "--json", "--out",
                       str(tmp_path), "--no-progress", "--time-limit", "60")
    assert result.returncode == 0, result.stderr
    frontier = json.loads(result.stdout)["frontier"]
    best = min(frontier, key=lambda p: p["ratio_to_bound"])
    assert best["ratio_to_bound"] < 1.02 and best["method"].startswith("trees")
    out = tmp_path / "best.xml"
    exported = synth_cli("export", best["file"], "--to", "msccl-xml", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "right result" in exported.stdout + exported.stderr
    checked = synth_cli("verify", best["file"])
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("spec", ["line:3", "line:4", "dgx1", "ring:5"])
def test_allreduce_by_reduce_and_broadcast_trees_verifies(spec):
    lowering = lower_with_routes(resolve(spec))
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks, 1))
    search = tree_search(lowering.model, "allreduce", None, Limits())
    assert search.points
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
        assert p.ratio >= b.rounds_per_chunk
    if spec.startswith("line"):  # through the middle: the two phases never meet on a link
        best = min(search.points, key=lambda p: p.ratio)
        assert best.ratio / b.rounds_per_chunk <= Fraction(101, 100)


def test_the_verifier_rejects_an_allreduce_whose_reduction_is_a_copy():
    from synth.construct.packing import allreduce_schedule
    from synth.schedule.transform import reverse_model

    model = lower_with_routes(resolve("line:3")).model
    good = allreduce_schedule(model, pack_trees(reverse_model(model), 1),
                              pack_trees(model, 1), 4)
    verify_schedule(schedule_to_dict(good))
    first = good.steps[0]
    copied = replace(good, steps=(Step(first.rounds, tuple(replace(x, op="copy")
                                                           for x in first.sends)),)
                     + good.steps[1:])
    with pytest.raises(ScheduleInvalid):
        verify_schedule(schedule_to_dict(copied))


def test_the_allreduce_root_is_chosen_by_what_its_pipeline_costs():
    # random graph 26: root 4 packs as many trees, shallower, but its two phases share
    # link directions (2 rounds a step, 2x the bound); roots 1 and 3 reach 1.01x
    lowering = lower_with_routes(random_direct_topology(26, 5))
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks, 1))
    search = tree_search(lowering.model, "allreduce", None, Limits())
    best = min(search.points, key=lambda p: p.ratio)
    assert best.ratio / b.rounds_per_chunk <= Fraction(102, 100)
