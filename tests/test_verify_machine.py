"""`synth verify` checks the machine as well as the schedule: a file whose embedded link
model was edited is invalid where synth can derive the topology it names (or the one
`--topo` names), and so `export`, `draw` and `run` refuse it too."""

import json

import pytest

from tests.in_process import synth_main
from tests.test_reliability import one_line


@pytest.fixture(scope="module")
def dgx1_allgather(tmp_path_factory):
    out = tmp_path_factory.mktemp("made")
    made = synth_main("allgather", "--topo", "dgx1", "--steps", "2", "--rounds", "3",
                      "--chunks", "2", "--out", str(out), "--json")
    assert made.returncode == 0, made.stderr
    return json.loads(open(json.loads(made.stdout)["file"]).read())


def write(tmp_path, doc, name="f.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_valid_file_is_checked_on_the_machine_it_names(dgx1_allgather, tmp_path):
    ok = synth_main("verify", write(tmp_path, dgx1_allgather))
    assert ok.returncode == 0 and "on dgx1 as synth derives it" in ok.stdout


def test_doubled_capacities_and_halved_rounds_are_invalid(dgx1_allgather, tmp_path):
    # valid on the edited model (the simulator alone accepts it): 2 steps of 2 rounds
    # where dgx1 needs 3
    doc = json.loads(json.dumps(dgx1_allgather))
    for link in doc["topology"]["links"]:
        link[2] *= 2
    for step in doc["steps"]:
        step["rounds"] = max(1, step["rounds"] // 2)
    path = write(tmp_path, doc)
    said = one_line(synth_main("verify", path), 1)
    # dgx1.yaml: gpu0-gpu1 is 2 NVLinks of 25 GB/s, 2 units; the file says 4
    assert "not dgx1 as synth derives it" in said and "0->1 has capacity 4, not 2" in said
    for args in (["export", path, "--to", "msccl-xml", "-o", str(tmp_path / "x.xml")],
                 ["draw", path, "-o", str(tmp_path / "x.svg")]):
        assert "not dgx1" in one_line(synth_main(*args), 1)
    assert not (tmp_path / "x.xml").exists() and not (tmp_path / "x.svg").exists()


def test_a_switch_added_to_a_file_is_invalid(dgx1_allgather, tmp_path):
    doc = json.loads(json.dumps(dgx1_allgather))
    doc["topology"]["switches"] = [{"name": "sw", "can": ["multicast"],
                                    "links": [l[:2] for l in doc["topology"]["links"]]}]
    said = one_line(synth_main("verify", write(tmp_path, doc)), 1)
    assert "switch sw is not in the machine" in said


def test_a_topology_synth_cannot_derive_is_checked_on_its_own_model(dgx1_allgather,
                                                                    tmp_path):
    doc = json.loads(json.dumps(dgx1_allgather))
    doc["topology"]["name"] = "my-own-box"
    ok = synth_main("verify", write(tmp_path, doc))
    assert ok.returncode == 0 and "checked on its own model" in ok.stdout
    # named with --topo, the machine is checked: dgx1's links, not ring:8's
    said = one_line(synth_main("verify", write(tmp_path, doc), "--topo", "ring:8"), 1)
    assert "not ring:8 as synth derives it" in said
    ok = synth_main("verify", write(tmp_path, doc), "--topo", "dgx1")
    assert ok.returncode == 0, ok.stderr


def _ring_file(tmp_path, topo, name=None):
    """A ring baseline's schedule file on `topo` (its model named `name`, if given)."""
    from synth.construct.baselines import baselines
    from synth.schedule.file import schedule_to_dict
    from synth.topology.linkmodel import lower

    ring = next(b for b in baselines(lower(topo), "allgather") if "ring" in b.name)
    doc = schedule_to_dict(ring.schedule)
    if name:
        doc["topology"]["name"] = name
    return doc


def test_a_file_on_power_of_two_lanes_is_checked_on_that_machine(tmp_path):
    # the --size answer's -p2 files: on a degraded box they were refused as naming a
    # machine synth cannot derive (the name read as one more edit); now derived: 16 of
    # each GPU's 18 NVLink lanes, so an 18-lane model under that name is invalid
    from synth.topology.catalog import resolve
    from synth.topology.lanes import power_of_two_lanes

    degraded = "dgxh100-without-gpu3-nvswitch:1"
    doc = _ring_file(tmp_path, power_of_two_lanes(resolve(degraded)))
    ok = synth_main("verify", write(tmp_path, doc))
    assert ok.returncode == 0, ok.stderr
    assert f"on {degraded} (power-of-two lanes) as synth derives it" in ok.stdout
    full = _ring_file(tmp_path, resolve("dgxh100"), "dgxh100 (power-of-two lanes)")
    said = one_line(synth_main("verify", write(tmp_path, full, "full.json")), 1)
    assert "not dgxh100 (power-of-two lanes) as synth derives it" in said


def test_a_model_without_its_unit_says_which_key_is_missing(dgx1_allgather, tmp_path):
    doc = json.loads(json.dumps(dgx1_allgather))
    del doc["topology"]["unit_gbps"]  # the simulator needs no unit: the machine check does
    said = one_line(synth_main("verify", write(tmp_path, doc)), 2)
    # it said "topology: 'unit_gbps'", a bare KeyError
    assert said.rstrip().endswith("topology: key 'unit_gbps' missing"), said
    doc = json.loads(json.dumps(dgx1_allgather))
    doc["topology"]["switches"] = [{"name": "sw", "links": [[0, 1]]}]  # no "can"
    said = one_line(synth_main("verify", write(tmp_path, doc, "sw.json")), 2)
    assert "key 'can' missing" in said, said


def test_topo_list_names_where_a_topology_files_format_is(tmp_path):
    from pathlib import Path

    listing = synth_main("topo", "list")
    assert listing.returncode == 0
    line = next(x for x in listing.stdout.splitlines() if "a topology file" in x)
    named = line.split("(format: ", 1)[1].split(")", 1)[0]
    # README.md, named before, has no such section
    assert "Topology files" in (Path(__file__).parent.parent / named).read_text()


def test_a_plans_view_of_a_degraded_machine_is_checked_on_its_own_model(dgx1_allgather,
                                                                        tmp_path):
    # a communicator's view is named NAME:COMM; on a degraded machine the name read as
    # one more edit ("gpu0-gpu1:tp"), and its files were refused as underivable
    doc = json.loads(json.dumps(dgx1_allgather))
    doc["topology"]["name"] = "dgx1-without-gpu0-gpu1:tp"
    ok = synth_main("verify", write(tmp_path, doc))
    assert ok.returncode == 0 and "checked on its own model" in ok.stdout, ok.stderr
    doc["topology"]["name"] = "ring:8:world"  # and a plan's view on a generator's
    ok = synth_main("verify", write(tmp_path, doc, "view.json"))
    assert ok.returncode == 0 and "checked on its own model" in ok.stdout, ok.stderr
    # no --topo hint: the whole machine's model is not the view's (8 ranks, not 64)
    assert "a plan's view of communicator world on ring:8" in ok.stdout
    assert "pass it with --topo" not in ok.stdout
    # a real edit of lanes still names a machine synth derives, and is checked on it
    doc["topology"]["name"] = "dgx1-without-gpu0-gpu1:1"
    said = one_line(synth_main("verify", write(tmp_path, doc, "lanes.json")), 1)
    assert "not dgx1-without-gpu0-gpu1:1 as synth derives it" in said


def test_a_power_of_two_lanes_file_checks_against_its_machine_named_with_topo(tmp_path):
    # the hint says to pass --topo; a -p2 file was then compared with the machine's
    # full lanes (16 where it has 18) and refused
    from synth.topology.catalog import resolve
    from synth.topology.lanes import power_of_two_lanes

    doc = _ring_file(tmp_path, power_of_two_lanes(resolve("dgxh100")))
    ok = synth_main("verify", write(tmp_path, doc), "--topo", "dgxh100")
    assert ok.returncode == 0, ok.stderr
    assert "on dgxh100 (power-of-two lanes) as synth derives it" in ok.stdout
