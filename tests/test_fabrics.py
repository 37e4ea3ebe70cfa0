"""Scale-out fabrics (issue 29): rail-optimised Clos and fat-trees with an oversubscribed
tier, named NAMExK:FABRIC,... or said by a file's network: section
(synth.topology.fabric). The bounds are derived by hand from dgxh100's figures
(topologies/dgxh100.yaml: 18 NVLinks of 25 GB/s per GPU, one 50 GB/s NIC per GPU, the
capacity unit 25 GB/s), never computed with synth's code."""

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from synth.bounds import collective_bounds
from synth.construct.decompose import _across_pods, decompose, shared_out
from synth.deadline import Deadline
from synth.schedule.file import schedule_to_dict
from synth.schedule.orbits import Orbits
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower_with_routes, restrict
from tests.in_process import synth_main

THREE_TIERS = "dgxh100x4:clos,leaf=2,pod=2,over=7"


def bound(collective: str, topo: str, *more) -> Fraction:
    done = synth_main("bounds", collective, "--topo", topo, "--json", *more)
    assert done.returncode == 0, done.stderr
    return Fraction(json.loads(done.stdout)["rounds_per_chunk"])


def test_a_two_tier_fabric_oversubscribed_two_to_one_has_its_cut_in_the_bounds():
    # dgxh100x4:clos,leaf=2,over=2: boxes 0, 1 on leaves leaf0.rail0..7, boxes 2, 3 on
    # leaf1.rail0..7; each leaf has 2 NICs of 50 GB/s below it and goes up to the spine
    # at (2 x 50) / 2 = 50 GB/s, 2 units.
    # Alltoall: the 16 GPUs under leaf group 0 send one share to each of the 16 under
    # group 1: 16 x 16 = 256 shares through group 0's 8 uplinks of 2 units, 16 units:
    # 256 / 16 = 16 rounds per chunk. Non-blocking (over=1, uplinks of 4 units) that cut
    # needs 256 / 32 = 8, and the box's own cut binds: its 8 GPUs send 24 shares each,
    # 192, through 8 NICs of 2 units: 192 / 16 = 12.
    assert bound("alltoall", "dgxh100x4:clos,leaf=2,over=2") == 16
    assert bound("alltoall", "dgxh100x4:clos,leaf=2") == 12
    # dgxh100x4:clos,leaf=1,over=2: every box has leaves of its own, each up at
    # 50 / 2 = 25 GB/s, 1 unit: 8 units into a box, which must receive the other 24
    # GPUs' shares: 24 / 8 = 3 rounds per chunk; above a GPU's own intake, 31 shares
    # through 18 NVLink lanes and its NIC's 2 units, 31 / 20.
    assert bound("allgather", "dgxh100x4:clos,leaf=1,over=2") == 3
    assert bound("allgather", "dgxh100x4:clos,leaf=1") == Fraction(31, 20)


def test_a_file_says_the_fabric_as_namexk_does(tmp_path):
    box = yaml.safe_load(Path("topologies/dgxh100.yaml").read_text())
    box["network"] = {"fabric": "clos", "gbps": 50, "alpha_us": 2.6, "leaf": 2, "over": 2}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(box))
    assert bound("alltoall", str(path), "--boxes", "4") == 16
    shown = synth_main("topo", "show", str(path), "--boxes", "4")
    assert "two-tier rail-optimised Clos" in shown.stdout and "(2:1)" in shown.stdout


def test_topo_show_describes_the_tiers():
    done = synth_main("topo", "show", THREE_TIERS)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert ("network: three-tier rail-optimised Clos: 16 rail leaves (8 rails x 2 of 2 "
            "boxes), 2 pods of 2 boxes (non-blocking inside), one aggregation layer, 7:1 "
            "oversubscribed") in text
    # a leaf: 2 NICs of 50 GB/s up at 100; a pod: its 8 leaves' 800 GB/s up at 800 / 7,
    # to a thousandth
    assert "tier 1: 16 switches (leaf0.rail0, leaf0.rail1, leaf0.rail2, ...), each up " \
           "at 100 GB/s for 100 GB/s below it (1:1)" in text
    assert "tier 2: 2 switches (pod0.spine, pod1.spine), each up at 114.286 GB/s for " \
           "800 GB/s below it (7:1)" in text
    assert "tier 3: 1 switch (agg)" in text
    network = json.loads(synth_main("topo", "show", THREE_TIERS, "--json").stdout)["network"]
    assert (network["fabric"], network["tiers"], network["leaf"], network["pod"],
            network["over"]) == ("clos", 3, 2, 2, 7.0)


def test_a_three_tier_allgather_frontier_is_verified_and_crosses_the_pods_little(tmp_path):
    # the decomposition alone, as synth allgather --method decomposed runs it (the CLI
    # would spend most of its time asking the exporters which runtime loads each point)
    topo = resolve(THREE_TIERS)
    lowering = lower_with_routes(topo)
    hierarchy, why = find_hierarchy(lowering)
    assert hierarchy.pods == ((0, 1), (2, 3)), why
    found = decompose(lowering.model, hierarchy, "allgather",
                      Limits(max_steps=128, max_chunks=1, time_limit=60))
    # the pod's cut: 16 GPUs' shares into the other pod through its uplink of
    # 16 x 50 / 7 GB/s (to a thousandth, 114.286), 4.57144 units: about 3.5 rounds per
    # chunk, above a GPU's own 31 / 20 and a box's 24 / 16
    bound = collective_bounds(lowering, "allgather").rounds_per_chunk
    assert abs(float(bound) - 3.5) < 1e-4
    ratios = [Fraction(p.schedule.rounds, p.schedule.collective.chunks) / bound
              for p in found.points]
    # each piece enters the other pod once (the across level decomposed by pods): near
    # the bound, where recursive doubling among the boxes came to 1.10 x
    assert min(ratios) < Fraction(102, 100)
    files = []
    for point in (found.points[0], found.points[-1]):  # the fewest steps, the deepest
        files.append(tmp_path / f"ag-{point.steps}.json")
        files[-1].write_text(json.dumps(schedule_to_dict(point.schedule)))
    checked = synth_main("verify", *files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count(f"on {THREE_TIERS} as synth derives it") == len(files)


def test_a_decomposition_behind_pods_is_written_once_per_box(tmp_path):
    # THREE_TIERS: boxes 0, 1 in pod 0 and 2, 3 in pod 1, each pod on leaves of its own.
    # Shifting the box index by one is no symmetry (box 1 goes to pod 1, box 3 to pod
    # 0, but each pod's leaves stay), so the file was written rank by rank. Shifting the
    # pod index, and the box index within every pod at once, are symmetries: dims
    # (pods 2, boxes a pod 2, GPUs 8) along axes 0 and 1, box 0 the representative
    # box, so the file lists the sends into box 0 alone, a quarter of them.
    lowering = lower_with_routes(resolve(THREE_TIERS))
    hierarchy, _ = find_hierarchy(lowering)
    found = decompose(lowering.model, hierarchy, "allreduce",
                      Limits(max_steps=12, max_chunks=1, time_limit=60))
    point = found.points[-1]
    assert point.schedule.symmetry == Orbits((2, 2, 8), (0, 1))
    assert {x.dst for step in point.schedule.steps for x in step.sends} <= set(range(8))
    every = sum(len(step.sends) for step in point.schedule.unfolded().steps)
    assert sum(len(step.sends) for step in point.schedule.steps) * 4 == every
    path = tmp_path / "ar.json"
    path.write_text(json.dumps(schedule_to_dict(point.schedule)))
    checked = synth_main("verify", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "dims [2, 2, 8] along axes [0, 1]" in checked.stdout


def test_the_pods_level_takes_few_chunks_for_a_hairs_bandwidth():
    # dgxh100x16:clos,pod=4,over=7: the across level of 16 boxes, decomposed by its 4
    # pods of 4, builds two one-batch designs: both levels direct in one step, a few
    # chunks a share, and recursive doubling across the pods with 17 lanes, a hair less
    # a chunk. The outer batch takes the lcm of its levels' chunks, and recursive
    # doubling is no shift of the pods: the 17 made every outer design 17 pieces a
    # batch, priced and built rank by rank, never written once per box. Both direct in
    # one step took 50 rounds for 3 chunks (16.67 a chunk) while a pod's own pieces
    # spread after the crossing; beside it, less
    lowering = lower_with_routes(resolve("dgxh100x16:clos,pod=4,over=7"))
    hierarchy, _ = find_hierarchy(lowering)
    group = hierarchy.peers[0]
    sub = restrict(shared_out(lowering.model, hierarchy), group, "across")
    level, = _across_pods(sub, hierarchy.pods, Limits(max_chunks=1, time_limit=30),
                          Deadline.after(30), lambda kind, data: None)
    assert level.num_steps == 2 and level.collective.chunks < 17
    assert Fraction(level.rounds, level.collective.chunks) < Fraction(50, 3)
    grid = Orbits((4, 4), (0, 1))  # the pods shifted, and the boxes within each
    assert all(grid.fold(step.sends, level.collective.num_chunks) is not None
               for step in level.expanded().steps)


@pytest.mark.parametrize("topo, says", [
    ("dgxh100x4:torus", "unknown fabric 'torus'"),
    ("dgxh100x4:clos,spines=2", "unknown fabric option 'spines=2'"),
    ("dgxh100x4:clos,over=0.5", "over=0.5: expected an oversubscription R (R:1)"),
    ("dgxh100x4:clos,over=x", "over=x: expected an oversubscription"),
    ("dgxh100x4:clos,leaf=0", "leaf=0: expected a whole number of boxes"),
    ("dgxh100x4:clos,leaf=3,pod=4", "a pod of 4 boxes is not whole leaves of 3 boxes"),
    ("dgxh100x4:rails,over=2", "only a clos or fat-tree fabric has"),
    ("dgxh100x4:clos,over=2,over=3", "over= given twice"),
    ("dgx1x4:clos", "dgx1 has no network section"),
])
def test_bad_fabric_options_are_one_line_and_exit_2(topo, says):
    done = synth_main("topo", "show", topo)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("synth: error: ")
    assert says in done.stderr, done.stderr


@pytest.mark.parametrize("network, says", [
    ({"over": 0.5}, "network.over: expected an oversubscription R (R:1) from 1 to 1000"),
    # 0 was read as "not given": leaf 0 became the default 32 boxes, pod 0 two tiers
    ({"leaf": 0}, "network.leaf: expected a whole number of boxes from 1 to 4096, got 0"),
    ({"pod": 0}, "network.pod: expected a whole number of boxes from 1 to 4096, got 0"),
])
def test_a_bad_network_section_is_one_line_and_exit_2(tmp_path, network, says):
    box = yaml.safe_load(Path("topologies/dgxh100.yaml").read_text())
    box["network"] = {"fabric": "fat-tree", "gbps": 50, **network}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(box))
    done = synth_main("topo", "show", str(path), "--boxes", "4")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert says in done.stderr, done.stderr
