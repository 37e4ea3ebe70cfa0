"""`--boxes K`: a topology file of one's own repeated like a built-in's NAMExK."""

import json
from pathlib import Path

import pytest
import yaml

from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from tests.in_process import synth_main
from tests.test_reliability import one_line, synth_cli

REPO = Path(__file__).resolve().parent.parent

# 4 GPUs on one switch; GPUs 2k and 2k+1 share NIC k over a PCIe switch
SMALL_BOX = {
    "name": "pairbox", "unit_gbps": 25, "gpus": 4,
    "switches": [{"name": "nvs", "kind": "nvswitch"},
                 {"name": "pcie0", "kind": "pcie_switch"},
                 {"name": "pcie1", "kind": "pcie_switch"}],
    "nics": ["nic0", "nic1"],
    "links": [{"between": [f"gpu{g}", "nvs"], "gbps": 50, "alpha_us": 0.7} for g in range(4)]
    + [{"between": [f"gpu{g}", f"pcie{g // 2}"], "gbps": 16} for g in range(4)]
    + [{"between": [f"pcie{k}", f"nic{k}"], "gbps": 16} for k in range(2)],
    "network": {"fabric": "single-switch", "gbps": 12.5, "alpha_us": 2.6},
}


@pytest.mark.parametrize("box, k", [("dgxh100", 2), ("dgx2", 8)])
def test_a_file_repeated_is_the_builtin_repeated(box, k):
    mine = resolve(str(REPO / "topologies" / f"{box}.yaml"), k)
    assert mine.name == f"{box}x{k}" and mine.boxes == k
    assert lower(mine) == lower(resolve(f"{box}x{k}"))  # so the same frontier


def test_only_a_network_switch_joining_gpus_makes_a_cluster():
    assert resolve("dgxh100x2").network_joined()
    assert not resolve("dgxh100x1").network_joined()  # one box, its NICs on switches
    assert not resolve("dgxh100").network_joined() and not resolve("ring:4").network_joined()


def test_a_two_gpus_per_nic_box_twice_synthesizes_exports_and_draws(tmp_path):
    box = tmp_path / "pairbox.yaml"
    box.write_text(yaml.safe_dump(SMALL_BOX))
    out = tmp_path / "out"
    made = synth_main("allgather", "--topo", str(box), "--boxes", "2", "--method", "decomposed",
                      "--format", "json,msccl-xml", "--out", str(out), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    summary = json.loads(made.stdout)
    assert summary["topology"] == "pairboxx2" and summary["ranks"] == 8
    files = sorted((out / "pairboxx2" / "allgather").glob("*.json"))
    assert files and sorted((out / "pairboxx2" / "allgather").glob("*.xml"))
    doc = json.loads(files[0].read_text())
    assert doc["topology"]["boxes"] == [0] * 4 + [1] * 4  # the boxes, as NAMExK records them
    checked = synth_main("verify", *map(str, files))
    assert checked.returncode == 0, checked.stderr
    drawn = synth_main("topo", "draw", str(box), "--boxes", "2", "-o", str(tmp_path / "t.svg"))
    assert drawn.returncode == 0, drawn.stderr
    assert "n1.gpu3" in (tmp_path / "t.svg").read_text()


def test_bad_boxes_give_one_line_and_exit_2(tmp_path):
    lone = tmp_path / "lone.yaml"
    lone.write_text(yaml.safe_dump({k: v for k, v in SMALL_BOX.items() if k != "network"}))
    assert "between 1 and" in one_line(synth_main("bounds", "allgather", "--topo", "dgxh100",
                                                  "--boxes", "0"), 2)
    assert "between 1 and" in one_line(synth_main("topo", "show", "dgxh100", "--boxes",
                                                  "100000"), 2)
    assert "no network section" in one_line(synth_main("allgather", "--topo", str(lone),
                                                       "--boxes", "2"), 2)
    assert "already has a network switch" in one_line(synth_main("compare", "allgather", "--topo",
                                                   "dgxh100x2", "--boxes", "2"), 2)


def test_a_cluster_whose_boxes_differ_falls_back_to_trees_and_says_why(tmp_path):
    # box A: 4 GPUs, two NICs shared by pairs; box B: 3 GPUs, one NIC for two of them
    links = [{"between": [f"gpu{g}", "nvsA" if g < 4 else "nvsB"], "gbps": 50,
              "alpha_us": 0.7} for g in range(7)]
    links += [{"between": [f"gpu{g}", nic], "gbps": 16} for g, nic in
              [(0, "nicA0"), (1, "nicA0"), (2, "nicA1"), (3, "nicA1"), (4, "nicB0"),
               (5, "nicB0"), (6, "nicB1")]]
    links += [{"between": [nic, "net"], "gbps": 12.5, "alpha_us": 2.6}
              for nic in ("nicA0", "nicA1", "nicB0", "nicB1")]
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump({
        "name": "mixed", "unit_gbps": 25, "gpus": 7, "links": links,
        "switches": [{"name": "nvsA", "kind": "nvswitch"}, {"name": "nvsB", "kind": "nvswitch"},
                     {"name": "net", "kind": "net_switch"}],
        "nics": ["nicA0", "nicA1", "nicB0", "nicB1"]}))
    # no time limit that binds: one chunk per share lets the exact search finish (in
    # about a second), so the trees have their whole share (the default limit's quarter)
    # however busy the machine; a tight --time-limit would cut the packing short
    made = synth_main("allgather", "--topo", str(mixed), "--max-chunks", "1", "--out",
                      str(tmp_path / "out"), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    summary = json.loads(made.stdout)
    assert summary["complete"], summary["stopped"]  # nothing was cut short
    assert "unequal sizes [3, 4]" in summary["stopped"]["not decomposed"]
    assert any(p["method"].startswith("trees") for p in summary["frontier"])
    # a single box has nothing to decompose: no such line
    alone = synth_main("allgather", "--topo", "ring:4", "--max-chunks", "1", "--out",
                       str(tmp_path / "out"), "--json")
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert "not decomposed" not in json.loads(alone.stdout)["stopped"]


def test_topo_show_says_nics_on_one_box_carry_nothing():
    # one DGX H100: its 8 NICs join no network, and the line read "NICs shared by: 0
    # GPUs (8 NICs)"; on two boxes each GPU sends through its own
    one = synth_main("topo", "show", "dgxh100")
    assert one.returncode == 0 and "NICs: no GPU sends through one" in one.stdout
    two = synth_main("topo", "show", "dgxh100x2")
    assert two.returncode == 0 and "NICs shared by: 1 GPU (16 NICs)" in two.stdout


def test_boxes_that_cannot_match_are_told_apart_at_once():
    # dgx2x2 without box 0's nic2: box 0 has 14 ranks with a NIC, box 1 16, and inside a
    # box every rank looks like every other, so the search for a box-to-box map that
    # does not exist ran past any time limit (a subprocess, so that a return of it
    # fails at the timeout instead of hanging the suite); a matching of the ranks that
    # may go to each other settles it first. The machine is still shown, undecomposed.
    shown = synth_cli("topo", "show", "dgx2x2", "--without", "box0.nic2", "--time-limit",
                      "30", timeout=90)
    assert shown.returncode == 0, shown.stderr
    assert "box 1 (ranks 16..31) is not a copy of box 0" in shown.stdout
