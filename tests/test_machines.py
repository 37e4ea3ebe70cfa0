"""The built-in machines of 2026 (topologies/gb200nvl72.yaml, mi300x.yaml, mi250.yaml, and
their NAMExK forms): bounds derived by hand from the machines' public numbers, the
multi-box forms' sizes and NIC rates, and mi300x's and mi250's frontiers in files `synth
verify` accepts. Allreduce on every built-in, gb200nvl72 included, runs in
test_every_builtin.py; docs/machines.md says where each number comes from.

Every expected value below is arithmetic on the datasheet figures, written out: none is
computed with synth's own code. A MB is 10^6 bytes and a GB/s 10^9 bytes a second, so
a bound of B GB/s through which X MB must pass takes X / B * 1000 us."""

import json
from fractions import Fraction

import pytest

from synth.bounds import collective_bounds
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main


def bounds_of(name: str, collective: str):
    return collective_bounds(lower_with_routes(resolve(name)), collective, None)


def us_per_mb(mb_through: float, gbps: float) -> float:
    return mb_through / gbps * 1000


def test_mi300x_allgather_is_bound_by_seven_links_into_each_gpu():
    # 8 GPUs, one 64 GB/s link from each peer: a GPU receives 7/8 of the 1 MB output
    # through 7 x 64 = 448 GB/s, 0.875 / 448 * 1000 = 1.953125 us/MB (512 GB/s algbw);
    # in 64 GB/s units, 7 shares over 7 links: 1 round per chunk, in 1 step
    b = bounds_of("mi300x", "allgather")
    assert b.steps == 1 and b.rounds_per_chunk == 1
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(7 / 8, 7 * 64))
    assert b.us_per_byte * 1e6 == pytest.approx(1.953125)


def test_mi300x_allreduce_has_no_switch_to_reduce_in():
    # no switch: every GPU sends and receives 2 x 7/8 of its buffer over its 7 links,
    # 1.75 / 448 * 1000 = 3.90625 us/MB; 14 transfers of an eighth over 7 units: 1/4
    b = bounds_of("mi300x", "allreduce")
    assert b.rounds_per_chunk == Fraction(1, 4) and b.without_in_network is None
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(2 * 7 / 8, 448))


def test_gb200nvl72_allreduce_in_network_bound_is_one_port_each_way():
    # NVLS: each GPU sends its 1 MB into the switch once and receives the sum once, on
    # 18 x 50 = 900 GB/s a direction: 1 / 900 * 1000 = 1.111 us/MB, 1/18 of a round per
    # chunk at 50 GB/s; without it 2 x 71/72 over 18 links, 142 / (72 x 18) = 71/648
    b = bounds_of("gb200nvl72", "allreduce")
    assert b.steps == 1
    assert (b.rounds_per_chunk, b.without_in_network) == (Fraction(1, 18), Fraction(71, 648))
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(1, 18 * 50))


def test_gb200nvl72_allgather_bound_is_a_port_of_eighteen_links():
    # a GPU receives 71 of the 72 shares through 18 x 50 GB/s: 71/18 rounds per chunk,
    # (71/72) / 900 * 1000 = 1.0957 us/MB
    b = bounds_of("gb200nvl72", "allgather")
    assert b.rounds_per_chunk == Fraction(71, 18)
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(71 / 72, 900))


def test_multi_box_bounds_see_the_right_cut():
    # mi300xx8: a box must bring in the other 7 boxes' 7/8 of the output through its 8
    # NICs of 50 GB/s: 0.875 / 400 * 1000 = 2.1875 us/MB, more than a GPU's own intake
    # (63/64 MB over 448 + 50 GB/s, 1.977 us/MB)
    assert bounds_of("mi300xx8", "allgather").us_per_byte * 1e6 == \
        pytest.approx(us_per_mb(7 / 8, 8 * 50))
    # gb200nvl72x2: a rack's 72 NICs bring in 1/2 MB at 3600 GB/s (0.139 us/MB), but a
    # GPU takes 143/144 MB through 900 GB/s of NVLink and its 50 GB/s NIC: 1.045 us/MB,
    # 143 shares over 18 + 1 units (x4's bound is the same cut, 287/19, but its 288
    # max-flows take about 9 s)
    b = bounds_of("gb200nvl72x2", "allgather")
    assert b.rounds_per_chunk == Fraction(143, 19)
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(143 / 144, 900 + 50))


@pytest.mark.parametrize("name, boxes, gpus_per_box", [("gb200nvl72x4", 4, 72),
                                                     ("mi300xx8", 8, 8)])
def test_name_x_k_joins_boxes_on_400_gbps_rails(name, boxes, gpus_per_box):
    topo = resolve(name)
    kinds = [v.kind for v in topo.vertices]
    assert (topo.boxes, topo.ranks) == (boxes, boxes * gpus_per_box)
    assert kinds.count("nic") == boxes * gpus_per_box  # one NIC per GPU
    # rails: NIC j of every box on rail switch j, one rail per GPU of a box
    rails = {v.name for v in topo.vertices if v.kind == "net_switch"}
    assert rails == {f"rail{j}" for j in range(gpus_per_box)}
    to_rails = [l for l in topo.links if l.dst in rails]
    assert len(to_rails) == boxes * gpus_per_box
    assert {l.bandwidth for l in to_rails} == {400 / 8}  # 400 Gb/s = 50 GB/s


# mi300x: one step over the full mesh reaches the allgather bound exactly (1 round, 1
# chunk), and two (reduce-scatter, then allgather) the allreduce bound of 1/4; both end
# as soon as they reach it. gb200nvl72's allreduce is verified in test_every_builtin.py;
# its allgather is not run here: on a loaded machine (two busy loops beside the test)
# its greedy point took most of even a 10 s limit, leaving no time to write it
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_mi300x_frontier_reaches_the_bound_and_verifies(collective, tmp_path):
    run = synth_main(collective, "--topo", "mi300x", "--time-limit", "5", "--out", tmp_path,
                     "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    frontier = json.loads(run.stdout)["frontier"]
    files = [p["file"] for p in frontier if p["file"] is not None]
    assert files and all(p["ratio_to_bound"] >= 1 for p in frontier)
    assert min(p["ratio_to_bound"] for p in frontier) == pytest.approx(1.0)
    checked = synth_main("verify", *files)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert sum(line.startswith("ok ") for line in checked.stdout.splitlines()) == len(files)


# mi250 (topologies/mi250.yaml, Frontier's node): GCDs 0-7, packages {0,1} {2,3} {4,5}
# {6,7}; xGMI lanes of 50 GB/s, the capacity unit: 4 inside each package, 2 between GCDs
# 0-6 and 2-4, 1 between 0-2, 1-3, 1-5, 3-7, 4-6 and 5-7. Lanes out of an even GCD 4 + 2
# + 1 = 7, of an odd one 4 + 1 + 1 = 6; out of a package to the others 3 + 2 = 5
# (package {0,1}: 0-6 twice, 0-2, 1-3, 1-5; the others alike by symmetry).

@pytest.mark.parametrize("collective", ["allgather", "reducescatter"])
def test_mi250_allgather_is_bound_by_a_packages_five_lanes_out(collective):
    # a package must take in the other 6 GCDs' shares, 6/8 of the 1 MB output, through
    # its 5 lanes, 250 GB/s: 0.75 / 250 * 1000 = 3.0 us/MB, 6 shares over 5 lanes = 6/5
    # rounds per chunk (333.3 GB/s algbw). Thinner than an odd GCD's own intake (7 shares
    # over 6 lanes, 7/6) and than a half of the node (4 shares over the 6 lanes between
    # {0,1,2,3} and {4,5,6,7}). Reducescatter: the same lanes the other way. Two steps:
    # GCD 0 reaches 3 only through 1 or 2.
    b = bounds_of("mi250", collective)
    assert b.steps == 2 and b.rounds_per_chunk == Fraction(6, 5)
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(6 / 8, 5 * 50))
    assert b.us_per_byte * 1e6 == pytest.approx(3.0)


def test_mi250_allreduce_is_bound_by_transfers_between_packages():
    # each chunk (the buffer / C) must cross between the 4 packages 2 x (4 - 1) = 6
    # times (the 2(K-1) count, packages as ranks), over the 4 x 5 = 20 lanes out of them:
    # 6/20 = 3/10 of a round per chunk, 3/10 x 1 MB / 50 GB/s = 6.0 us/MB. The ports'
    # count (2 x 7 transfers over 4 x 7 + 4 x 6 = 52 lanes: 7/26, 5.385 us/MB) and the
    # thinnest cut (a package's 5 lanes: 1/5) say less; no switch, no in-network bound
    b = bounds_of("mi250", "allreduce")
    assert b.rounds_per_chunk == Fraction(3, 10) and b.without_in_network is None
    assert b.us_per_byte * 1e6 == pytest.approx(6.0)


def test_mi250_alltoall_is_bound_by_the_lanes_between_its_halves():
    # {0,1,2,3} and {4,5,6,7} are joined by 0-6 and 2-4 (2 lanes each), 1-5 and 3-7: 6
    # lanes, 300 GB/s; 4 x 4 = 16 shares of 1/8 MB cross each way: 16/6 = 8/3 rounds per
    # chunk, 2 MB / 300 GB/s * 1000 = 6.667 us/MB (a package's cut, 2 x 6 = 12 shares
    # over 5 lanes, 12/5, is less); the linear program routes every pair within it
    b = bounds_of("mi250", "alltoall")
    assert b.rounds_per_chunk == Fraction(8, 3)
    assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb(16 / 8, 6 * 50))


def test_mi250x4_bounds_are_its_boxes_four_nics():
    # 4 boxes, each with 4 Slingshot NICs of 200 Gb/s (25 GB/s, half a lane) on one
    # switch: 100 GB/s into a box. Allgather: a box takes in 24 of the 32 shares, 3/4 of
    # the output: 0.75 / 100 * 1000 = 7.5 us/MB, 24 shares over 2 units = 12 rounds per
    # chunk. Allreduce: 2 x (4 - 1) = 6 transfers per chunk between boxes over 4 x 2 = 8
    # units: 3/4, 3/4 x 1 MB / 50 GB/s = 15.0 us/MB. Alltoall: a box sends 8 x 24 = 192
    # shares of 1/32 MB (6 MB) out through 100 GB/s: 96 rounds per chunk, 60.0 us/MB
    topo = resolve("mi250x4")
    kinds = [v.kind for v in topo.vertices]
    assert (topo.boxes, topo.ranks, kinds.count("nic"), kinds.count("net_switch")) == \
        (4, 32, 16, 1)
    assert {l.bandwidth for l in topo.links if l.dst == "net"} == {200 / 8}
    expected = {"allgather": (Fraction(12), us_per_mb(0.75, 100)),
                "allreduce": (Fraction(3, 4), 15.0),
                "alltoall": (Fraction(96), us_per_mb(6, 100))}
    for collective, (rounds, us) in expected.items():
        b = bounds_of("mi250x4", collective)
        assert b.rounds_per_chunk == rounds, collective
        assert b.us_per_byte * 1e6 == pytest.approx(us), collective


# mi250's allreduce is verified in test_every_builtin.py. 5 s give allgather's and
# alltoall's exact points of 2 and 3 steps (how close to the bound depends on the
# machine's speed: alltoall's bound in 3 steps, allgather's trees, come after 6-10 s)
@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_mi250_frontier_verifies(collective, tmp_path):
    run = synth_main(collective, "--topo", "mi250", "--time-limit", "5", "--out",
                     tmp_path, "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    frontier = json.loads(run.stdout)["frontier"]
    files = [p["file"] for p in frontier if p["file"] is not None]
    assert files and all(p["ratio_to_bound"] >= 1 for p in frontier)
    checked = synth_main("verify", *files)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert sum(line.startswith("ok ") for line in checked.stdout.splitlines()) == len(files)
