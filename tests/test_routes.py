"""Routes through shared NICs, against expectations derived by hand.

synth/topology/routes.py: among the fewest-hop widest routes between two GPUs, the
lowering takes one that leaves through the sender's own NIC and arrives through the
receiver's own NIC; a GPU's own NIC is NCCL's spread of the GPUs that share their
nearest NICs (the k-th such GPU takes the k-th NIC). Azure NDv4 has two GPUs and two
NICs on each PCIe switch; before this rule both GPUs left through the first NIC.

The box below, unit_gbps 25 (capacities in chunks per round = GB/s / 25):

        g0 ==== g1          NVLink, 100 GB/s each way (4)
         \\     /
          pcie              PCIe switch, 32 GB/s to each GPU and NIC
         /    \\
       nic0   nic1          each 25 GB/s into the network (1)

Both NICs are two hops from each GPU: g0's own NIC is nic0 and g1's nic1. Two boxes
are joined either on rails (nic k of every box on rail switch k) or on one switch.
"""

from fractions import Fraction

import pytest

from synth.bounds import bounds
from synth.schedule.collectives import make_collective
from synth.topology.catalog import imported, join_boxes
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import topology_from_dict
from synth.topology.routes import own_nics
from tests.test_import import fixture


def shared_nic_box(fabric):
    return topology_from_dict({
        "name": "shared", "unit_gbps": 25, "gpus": ["g0", "g1"],
        "switches": [{"name": "pcie", "kind": "pcie_switch"}], "nics": ["nic0", "nic1"],
        "links": [{"between": ["g0", "g1"], "gbps": 100},
                  {"between": ["g0", "pcie"], "gbps": 32},
                  {"between": ["g1", "pcie"], "gbps": 32},
                  {"between": ["pcie", "nic0"], "gbps": 32},
                  {"between": ["pcie", "nic1"], "gbps": 32}],
        "network": {"fabric": fabric, "gbps": 25}})


def nics_on(path):
    return [v for v in path if "nic" in v]


@pytest.mark.parametrize("fabric", ["rails", "single-switch"])
def test_each_gpu_sends_through_its_own_nic_and_receives_through_the_receivers(fabric):
    topo = join_boxes(shared_nic_box(fabric), 2, "x2")
    adjacency = {v.name: [] for v in topo.vertices}
    for link in topo.links:
        adjacency[link.src].append((link.dst, link.bandwidth))
    assert own_nics(topo, adjacency) == {f"n{b}.g{k}": f"n{b}.nic{k}"
                                         for b in (0, 1) for k in (0, 1)}
    routes = lower_with_routes(topo).routes
    # ranks: n0.g0 0, n0.g1 1, n1.g0 2, n1.g1 3
    for src in (0, 1):
        for dst in (2, 3):
            out, into = nics_on(routes[(src, dst)])
            assert out == f"n0.nic{src}", (src, dst)
            # on rails the sender's rail decides the NIC it arrives through; on one
            # switch the receiver's own NIC is taken
            assert into == (f"n1.nic{src}" if fabric == "rails" else f"n1.nic{dst - 2}")


@pytest.mark.parametrize("fabric", ["rails", "single-switch"])
def test_two_shared_nics_carry_a_box_out_twice_as_fast_as_one(fabric):
    # allgather of 4: both chunks of a box must leave it; its two NICs carry 1 chunk per
    # round each, so at best 2 chunks in 1 round: 1 round per chunk. Through one NIC (the
    # first listed, as before) it was 2.
    model = lower_with_routes(join_boxes(shared_nic_box(fabric), 2, "x2"))
    assert bounds(model, make_collective("allgather", 4)).rounds_per_chunk == 1


def test_two_ndv4_boxes_are_bound_by_a_gpus_way_in_not_by_one_nic_a_switch():
    box = imported(fixture("azure-ndv4-topo.xml"), gpu="a100-sxm")
    model = lower_with_routes(join_boxes(box, 2, "x2"))
    # 16 GPUs: each takes in 15 of 16 equal parts over 12 NVLink lanes of 25 GB/s and
    # its PCIe Gen4 x16 (32 GB/s): 332 GB/s, so the output moves at 16/15 x 332 = 354.1
    # GB/s. Through the first NIC of each switch alone (four NICs a box at 25 GB/s, half
    # the output leaving each box) it was 200.
    found = bounds(model, make_collective("allgather", 16))
    assert Fraction(1 / found.us_per_byte / 1000).limit_denominator(1000) == \
        Fraction(16, 15) * 332
    routes = model.routes
    for pair in ((0, 8), (1, 9)):  # GPUs 0 and 1 share a PCIe switch and its two NICs
        assert len(set(nics_on(routes[pair]))) == 2
    assert nics_on(routes[(0, 8)])[0] != nics_on(routes[(1, 9)])[0]
