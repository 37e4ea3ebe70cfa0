"""Bounds per orbit (synth/bounds/orbits.py): the same values as computing every GPU, and
GPUs that only look alike kept apart.

The reference is `symmetric=False`, which computes every GPU's max-flows as the bounds
did before orbits (commit 0343916); a few values are also pinned as that commit's
module gave them. bench/bench_bounds.py --check compares against 0343916's module itself
on every built-in, NAMExK for K = 2 and 4, and the generators.
"""

import dataclasses
from fractions import Fraction

import networkx as nx
import pytest
import yaml

from synth.bounds import collective_bounds
from synth.bounds.flows import unit_graph
from synth.bounds.orbits import _Checker, gpu_orbits
from synth.topology.catalog import join_boxes, resolve
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import topology_from_dict

ROOTED = ("broadcast", "reduce", "gather", "scatter")

# four GPUs on one NVSwitch, each with its NIC; gpu2's NVLink port has 2 lanes, not 4
DEGRADED_BOX = """
name: degraded
gpus: 4
switches: [{name: nvswitch, kind: nvswitch}]
nics: [nic0, nic1, nic2, nic3]
links:
  - {between: [gpu0, nvswitch], gbps: 25, count: 4}
  - {between: [gpu1, nvswitch], gbps: 25, count: 4}
  - {between: [gpu2, nvswitch], gbps: 25, count: 2}
  - {between: [gpu3, nvswitch], gbps: 25, count: 4}
  - {between: [gpu0, nic0], gbps: 50}
  - {between: [gpu1, nic1], gbps: 50}
  - {between: [gpu2, nic2], gbps: 50}
  - {between: [gpu3, nic3], gbps: 50}
network: {fabric: rails, gbps: 25}
"""


def values(topo, name, root=None, symmetric=True):
    b = collective_bounds(lower_with_routes(topo), name, root, symmetric=symmetric)
    return dataclasses.astuple(b)


def exact_orbits(topo, fixed=None):
    """The true orbits of the GPUs: every automorphism of the bounds' graph enumerated
    (networkx's VF2; small graphs only)."""
    graph, gpus = unit_graph(lower_with_routes(topo))
    for v in graph:
        graph.nodes[v]["label"] = (v in gpus, v == fixed)
    matcher = nx.algorithms.isomorphism.DiGraphMatcher(
        graph, graph, node_match=lambda a, b: a["label"] == b["label"],
        edge_match=lambda a, b: a["capacity"] == b["capacity"])
    seen = {g: {g} for g in gpus}
    for perm in matcher.isomorphisms_iter():
        for g in gpus:
            seen[g].add(perm[g])
    return {frozenset(s) for s in seen.values()}


def found_orbits(topo, fixed=None):
    graph, gpus = unit_graph(lower_with_routes(topo))
    return {frozenset(c) for c in gpu_orbits(graph, gpus, topo, fixed).classes}


def degraded_pair():
    """Two copies of a healthy box (DEGRADED_BOX with gpu2's port mended), then gpu2 of
    box 1 degraded: the boxes look alike, but no automorphism swaps them."""
    doc = yaml.safe_load(DEGRADED_BOX)
    doc["links"][2]["count"] = 4
    pair = join_boxes(topology_from_dict(doc), 2, name="healthyx2")
    links = tuple(dataclasses.replace(l, count=2) if {l.src, l.dst} ==
                  {"n1.gpu2", "n1.nvswitch"} else l for l in pair.links)
    return dataclasses.replace(pair, links=links, name="degradedx2")


@pytest.mark.parametrize("spec", ["dgx1", "dgx2", "dgxh100x2", "gb200trayx4", "mi300x",
                                  "ndv2x2", "torus:4x4", "mesh:3x5", "hypercube:3",
                                  "switch:5", "ring:7"])
def test_orbits_give_the_values_of_every_gpu(spec):
    topo = resolve(spec)
    # the hop bound too: it searches from one rank per orbit (mesh:3x5's corners and
    # middle are in different orbits, and their farthest ranks at different distances)
    for name in ("allgather", "reducescatter", "allreduce", "alltoall", *ROOTED):
        for root in ((0, topo.ranks - 1) if name in ROOTED else (None,)):
            assert values(topo, name, root) == values(topo, name, root, symmetric=False), \
                (spec, name, root)


@pytest.mark.parametrize("spec, name, root, rpc", [
    # as commit 0343916's synth/bounds.py gave them (bench/bench_bounds.py --check)
    ("dgxh100x8", "allgather", None, Fraction(7, 2)),
    ("dgxh100x8", "allreduce", None, Fraction(7, 64)),
    ("dgxh100x8", "broadcast", 0, Fraction(1, 16)),
    ("dgx2x4", "reducescatter", None, Fraction(12)),
    ("dgx2x4", "allreduce", None, Fraction(3, 8)),
    ("dgx2x4", "broadcast", 0, Fraction(1, 4)),
    ("gb200nvl72x4", "allgather", None, Fraction(287, 19)),
])
def test_values_recorded_from_the_code_before_orbits(spec, name, root, rpc):
    assert collective_bounds(lower_with_routes(resolve(spec)), name, root).rounds_per_chunk \
        == rpc


def test_a_degraded_gpu_keeps_its_own_value():
    box = topology_from_dict(yaml.safe_load(DEGRADED_BOX))
    assert found_orbits(box) == exact_orbits(box) == {
        frozenset({"gpu0", "gpu1", "gpu3"}), frozenset({"gpu2"})}
    # gpu2 receives 3 shards through 2 lanes: its cut sets the bound, not gpu0's (3/4)
    assert collective_bounds(lower_with_routes(box), "allgather").rounds_per_chunk == \
        Fraction(3, 2)
    for name in ("allgather", "reducescatter", "allreduce", "broadcast"):
        assert values(box, name, 0 if name == "broadcast" else None) == \
            values(box, name, 0 if name == "broadcast" else None, symmetric=False)


def test_alike_boxes_with_one_degraded_link_are_not_joined():
    pair = degraded_pair()
    found = found_orbits(pair)
    assert found == exact_orbits(pair)
    assert frozenset({"n1.gpu2"}) in found and frozenset({"n0.gpu2"}) in found
    assert frozenset({"n0.gpu0", "n0.gpu1", "n0.gpu3"}) in found
    # the healthy pair: one orbit, boxes moved and the box's own maps applied to both
    healthy = join_boxes(topology_from_dict({**yaml.safe_load(DEGRADED_BOX), "links": [
        {**l, "count": 4} if l["between"] == ["gpu2", "nvswitch"] else l
        for l in yaml.safe_load(DEGRADED_BOX)["links"]]}), 2, name="healthyx2")
    assert len(found_orbits(healthy)) == 1
    for name, root in (("allgather", None), ("allreduce", None), ("broadcast", 2)):
        assert values(pair, name, root) == values(pair, name, root, symmetric=False)


def test_a_regular_graph_without_symmetry_is_searched_not_trusted():
    # the Frucht graph: every GPU has three links, so colour refinement cannot tell them
    # apart, but its only automorphism is the identity
    edges = [{"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25} for a, b in nx.frucht_graph().edges]
    frucht = topology_from_dict({"name": "frucht", "gpus": 12, "links": edges})
    assert found_orbits(frucht) == exact_orbits(frucht) == {
        frozenset({f"gpu{i}"}) for i in range(12)}
    assert values(frucht, "allgather") == values(frucht, "allgather", symmetric=False)


def test_the_hop_bound_searches_from_every_orbit():
    # gpu0 in the middle of a path of five: it is 2 hops from the ends, the ends are 4
    # from each other; orbits {0}, {1, 2}, {3, 4} (the path's reflection)
    edges = [{"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25}
             for a, b in ((3, 1), (1, 0), (0, 2), (2, 4))]
    path = topology_from_dict({"name": "path", "gpus": 5, "links": edges})
    assert found_orbits(path) == {frozenset({"gpu0"}), frozenset({"gpu1", "gpu2"}),
                                  frozenset({"gpu3", "gpu4"})}
    for name, root, hops in (("allgather", None, 4), ("allreduce", None, 4),
                             ("broadcast", 0, 2), ("broadcast", 3, 4), ("gather", 1, 3)):
        b = collective_bounds(lower_with_routes(path), name, root)
        assert b.steps == hops, (name, root)
        assert values(path, name, root) == values(path, name, root, symmetric=False)


@pytest.mark.parametrize("spec, fixed", [("mesh:3x5", None), ("dgx1", None),
                                         ("torus:3x4", "gpu5"), ("gb200trayx2", "n0.gpu1"),
                                         ("gb200trayx2", None)])
def test_orbits_found_are_the_true_orbits_on_small_machines(spec, fixed):
    topo = resolve(spec)
    assert found_orbits(topo, fixed) == exact_orbits(topo, fixed)


def test_a_claim_the_links_refuse_is_not_used(monkeypatch):
    # the degraded box claiming the shifts of a ring of 4 GPUs: checked, the claim is
    # refused; trusted, it would join gpu2 to the others and lose its cut (3/4, not 3/2)
    box = dataclasses.replace(topology_from_dict(yaml.safe_load(DEGRADED_BOX)),
                              translations=(4,))
    assert collective_bounds(lower_with_routes(box), "allgather").rounds_per_chunk == \
        Fraction(3, 2)
    monkeypatch.setattr(_Checker, "__call__", lambda self, perm: True)
    assert collective_bounds(lower_with_routes(box), "allgather").rounds_per_chunk == \
        Fraction(3, 4)


# two GPUs on an NVSwitch, a 50 GB/s NIC each: the box of the fabric tests below
TWO_GPU_BOX = """
name: pair
gpus: 2
switches: [{name: nvswitch, kind: nvswitch}]
nics: [nic0, nic1]
links:
  - {between: [gpu0, nvswitch], gbps: 25, count: 4}
  - {between: [gpu1, nvswitch], gbps: 25, count: 4}
  - {between: [gpu0, nic0], gbps: 50}
  - {between: [gpu1, nic1], gbps: 50}
network: {fabric: clos, gbps: 50, leaf: 1, pod: 2, over: 7}
"""


def three_tiers():
    """Four such boxes, each on two rail leaves of its own (leaf=1), boxes 0-1 and 2-3 in
    pods, the pods joined 7:1 above: no switch between boxes is linked to every box."""
    return join_boxes(topology_from_dict(yaml.safe_load(TWO_GPU_BOX)), 4, "pairx4")


def test_a_three_tier_fabric_is_one_orbit():
    # by hand: any box can be moved onto any other (within a pod, its leaves follow it;
    # across pods, the pods' spines too), and inside a box gpu0 onto gpu1 (its two
    # leaves swap), so every GPU is alike; the switches that touch no box 0 vertex
    # (box 1's leaves, pod 1's spine) must move with the boxes for any of it to hold
    topo = three_tiers()
    gpus = frozenset(f"n{b}.gpu{g}" for b in range(4) for g in range(2))
    assert found_orbits(topo) == exact_orbits(topo) == {gpus}
    for name in ("allgather", "reducescatter", "allreduce"):
        assert values(topo, name) == values(topo, name, symmetric=False), name


def test_a_three_tier_fabric_with_a_root_keeps_its_pods_apart():
    # n0.gpu0 fixed: pod 1's boxes are still swapped with each other, and box 0's own
    # gpu1 is alone; box 1 shares the root's pod, so it stays apart from pod 1
    topo = three_tiers()
    found = found_orbits(topo, "n0.gpu0")
    assert {frozenset({"n0.gpu0"}), frozenset({"n0.gpu1"})} <= found
    assert any({"n2.gpu0", "n3.gpu0"} <= part for part in found)
    for part in found:  # never joined across what the true orbits keep apart
        assert any(part <= true for true in exact_orbits(topo, "n0.gpu0"))
    for name in ("broadcast", "reduce"):
        assert values(topo, name, 0) == values(topo, name, 0, symmetric=False), name
