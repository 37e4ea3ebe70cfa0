"""Topologies: built-ins against hardware.md, generators, lowering, bad files."""

import json
from fractions import Fraction

import pytest

from synth.bounds import collective_bounds
from synth.errors import BadInput
from synth.topology.catalog import builtin_names, resolve
from synth.topology.linkmodel import hop_distances, lower, lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.in_process import synth_main

DGX1_MULTIPLICITY = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]


def test_builtins_are_the_twelve_named():
    assert builtin_names() == ["dgx1", "dgx1ib", "dgx2", "dgxa100", "dgxb200", "dgxh100",
                               "dgxh200", "gb200nvl72", "gb200tray", "mi250", "mi300x",
                               "ndv2"]


def test_dgx1_matches_hardware_md():
    model = lower(resolve("dgx1"))
    assert model.ranks == 8
    caps = {(l.src, l.dst): l.capacity for l in model.links}
    for i in range(8):
        for j in range(8):
            assert caps.get((i, j), 0) == DGX1_MULTIPLICITY[i][j]
        assert sum(caps.get((i, j), 0) for j in range(8)) == 6  # six NVLinks per GPU
    assert model.groups == ()


def test_dgx1ib_is_dgx1_with_a_nic_shared_by_each_gpu_pair():
    topo = resolve("dgx1ib")
    caps = {(l.src, l.dst): l.capacity for l in lower(topo).links}
    nvlink = {(i, j): DGX1_MULTIPLICITY[i][j] for i in range(8) for j in range(8)
              if DGX1_MULTIPLICITY[i][j]}
    assert caps == nvlink  # one box: the NICs join nothing, NVLink is all it routes over
    into_nics = {(l.src, l.dst) for l in topo.links if l.dst.startswith("nic")}
    assert into_nics == {(f"pcie{k}", f"nic{k}") for k in range(4)}
    for k in range(4):  # GPUs 2k and 2k+1 on PCIe Gen3 switch k, 16 GB/s
        assert {(l.src, l.bandwidth) for l in topo.links if l.dst == f"pcie{k}"} == \
            {(f"gpu{2 * k}", 16), (f"gpu{2 * k + 1}", 16), (f"nic{k}", 16)}


def test_dgx1ibx4_bounds_are_each_boxes_four_edr_nics():
    # 4 boxes of 8 GPUs, each with 4 NICs of 100 Gb/s (12.5 GB/s) on one switch: 50 GB/s
    # into and out of a box. Allgather: a box takes in 24 of the 32 shares, 3/4 of the 1
    # MB output, 0.75 / 50 * 1000 = 15 us/MB. Allreduce: a box sends out and takes in 2 x
    # 3/4 of its buffer, 1.5 / 50 * 1000 = 30 us/MB. Alltoall: a box sends 8 x 24 shares
    # of 1/32 MB, 6 MB, 6 / 50 * 1000 = 120 us/MB. In 25 GB/s units (two NICs a unit):
    # 24 shares over 2 units, 12 rounds per chunk
    model = lower_with_routes(resolve("dgx1ibx4"))
    expected = {"allgather": 15.0, "reducescatter": 15.0, "allreduce": 30.0,
                "alltoall": 120.0}
    for collective, us_per_mb in expected.items():
        b = collective_bounds(model, collective, None)
        assert b.us_per_byte * 1e6 == pytest.approx(us_per_mb), collective
    assert collective_bounds(model, "allgather", None).rounds_per_chunk == 12


def test_topo_show_dgx1_json_agrees_with_hardware_md():
    result = synth_main("topo", "show", "dgx1", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["ranks"] == 8 and shown["diameter"] == 2
    counts = {}
    for link in shown["links"]:
        counts[(link["src"], link["dst"])] = link["count"]
    doubles = {tuple(sorted((int(a[3:]), int(b[3:])))) for (a, b), c in counts.items() if c == 2}
    assert doubles == {(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)}
    for gpu in shown["per_gpu"]:
        assert gpu["out_gbps"] == gpu["in_gbps"] == 150  # 6 links x 25 GB/s


def test_dgx2x4_has_64_gpus_and_32_nics_each_shared_by_two():
    result = synth_main("topo", "show", "dgx2x4", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["ranks"] == 64 and shown["boxes"] == 4
    assert len(shown["nics"]) == 32
    for nic in shown["nics"]:
        box, k = nic["box"], int(nic["name"].split("nic")[1])
        assert nic["gpus"] == [16 * box + 2 * k, 16 * box + 2 * k + 1]
    assert "64" in synth_main("topo", "show", "dgx2x4").stdout


def test_dgx2x4_lowering_has_nic_and_switch_port_groups():
    model = lower(resolve("dgx2x4"))
    groups = {g.name: g for g in model.groups}
    # GPU 0's port into its board's switches: 15 box-local peers, 6 lanes
    port = groups["n0.gpu0->n0.nvswitch-b0"]
    assert port.capacity == 6 and len(port.links) == 15
    # NIC 0 of box 0 carries everything GPUs 0 and 1 send to the other 48 GPUs
    nic = groups["n0.nic0->net"]
    assert nic.capacity == Fraction(1, 2)
    assert {src for src, _ in nic.links} == {0, 1} and len(nic.links) == 96
    assert model.link[(0, 16)].capacity == Fraction(1, 2)
    assert model.link[(0, 1)].capacity == 6  # NVSwitch wins over the shared PCIe switch


def test_rails_join_nic_k_of_every_box():
    model = lower(resolve("dgxh100x2"))
    assert model.ranks == 16
    assert (0, 8) in model.link and (0, 9) not in model.link  # GPU 0 reaches rail 0 only
    assert model.link[(0, 8)].capacity == 2  # 50 GB/s NIC in 25 GB/s units
    assert max(max(d.values()) for d in hop_distances(model).values()) == 2


@pytest.mark.parametrize("spec, ranks, links", [
    ("ring:8", 8, 16), ("line:4", 4, 6), ("fc:5", 5, 20), ("mesh:3x3", 9, 24),
    ("torus:4x4", 16, 64), ("torus:2x2x2", 8, 24), ("hypercube:3", 8, 24), ("switch:4", 4, 12),
])
def test_generators(spec, ranks, links):
    model = lower(resolve(spec))
    assert model.ranks == ranks and len(model.links) == links


def test_switch_generator_shares_each_port():
    model = lower(resolve("switch:4"))
    assert len(model.groups) == 8  # one egress and one ingress port per GPU
    assert all(g.capacity == 1 and len(g.links) == 3 for g in model.groups)


def test_ring_distances():
    distances = hop_distances(lower(resolve("ring:8")))
    assert distances[0][4] == 4 and distances[0][7] == 1


def test_every_builtin_lowers_and_routes_avoid_gpus():
    for name in builtin_names() + ["dgx2x2", "dgxa100x2", "ndv2x2"]:
        topo = resolve(name)
        lowering = lower_with_routes(topo)
        gpus = set(topo.gpus)
        for (a, b), path in lowering.routes.items():
            assert path[0] == topo.gpus[a] and path[-1] == topo.gpus[b]
            assert not gpus & set(path[1:-1])


MINIMAL = {"name": "t", "gpus": 2, "links": [{"between": ["gpu0", "gpu1"], "gbps": 10}]}


def with_change(**changes):
    doc = json.loads(json.dumps(MINIMAL))
    doc.update(changes)
    return doc


@pytest.mark.parametrize("doc, message", [
    (with_change(links=[{"between": ["gpu0", "gpu9"], "gbps": 10}]), "unknown vertex 'gpu9'"),
    (with_change(links=[{"between": ["gpu0", "gpu1"], "gbps": 0}]), "gbps: expected a number from 0.001"),
    (with_change(links=[{"between": ["gpu0", "gpu1"], "gbps": -3}]), "gbps: expected a number from 0.001"),
    (with_change(gpus=3), "cannot be reached"),
    (with_change(links=[{"from": "gpu0", "to": "gpu1", "gbps": 1}]), "cannot reach"),
    (with_change(gpus=["a", "a"]), "duplicate vertex name 'a'"),
    (with_change(colour="red"), "unknown key 'colour'"),
    (with_change(links=[{"between": ["gpu0", "gpu1"], "gbps": 1, "speed": 2}]), "unknown key 'speed'"),
    (with_change(links=[{"between": ["gpu0", "gpu1"], "gbps": 1},
                        {"from": "gpu0", "to": "gpu1", "gbps": 1}]), "duplicate link"),
    (with_change(switches=[{"name": "s", "kind": "router"}]),
     "kind: expected one of nvswitch, pcie_switch, net_switch, got 'router'"),
    (with_change(links=[{"between": ["gpu0", "gpu1"]}]),
     r"links\[0\].gbps: missing \(expected a number from 0.001"),
    (with_change(network={"fabric": "rails"}), r"network.gbps: missing \(expected a number"),
    (with_change(gpus=0), "between 2 and 4096 GPUs"),
    (with_change(gpus=1), "between 2 and 4096 GPUs"),
])
def test_bad_topologies_are_rejected_with_their_reason(doc, message):
    with pytest.raises(BadInput, match=message):
        topology_from_dict(doc)


def test_bad_topology_file_gives_exit_2_and_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngpus: 2\nlinks:\n  - {between: [gpu0, gpu7], gbps: 10}\n")
    result = synth_main("topo", "show", str(bad))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown vertex 'gpu7'" in result.stderr
    assert "Traceback" not in result.stderr

    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = synth_main("topo", "show", str(broken))
    assert result.returncode == 2 and "not valid YAML" in result.stderr
    assert result.stderr.count("\n") == 1
    # a .json file is named as JSON (it is read as YAML, which JSON is)
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x",\n "gpus": 4,,\n}\n')
    result = synth_main("topo", "show", str(broken))
    assert result.returncode == 2 and result.stderr.endswith("not valid JSON (line 2)\n")


def test_custom_file_round_trips_through_the_cli(tmp_path):
    good = tmp_path / "pair.json"
    good.write_text(json.dumps(MINIMAL))
    result = synth_main("topo", "show", str(good), "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["ranks"] == 2 and shown["unit_gbps"] == 10 and shown["diameter"] == 1


@pytest.mark.parametrize("spec", ["nope", "ring:x", "ring:1", "mesh:4", "dgx1x2", "torus:2"])
def test_unknown_or_malformed_names_exit_2(spec):
    result = synth_main("topo", "show", spec)
    assert result.returncode == 2
    assert result.stderr.startswith("synth: error:") and result.stderr.count("\n") == 1


def test_a_generated_topology_says_what_it_is_not_its_usage():
    # torus:4x4's pictures were titled "torus:4x4: torus:RxC or torus:RxCxD  grid with
    # wrap-around"
    assert resolve("torus:4x4").description == "16 GPUs in a grid with wrap-around, 25 GB/s links"
    assert resolve("switch:4").description == "4 GPUs on one non-blocking switch, 25 GB/s links"
