"""Files written while the search goes on (synth/anytime.py): the frontier in hand is on
disk before the exact search starts, and the job's last write leaves the frontier."""

import json

import synth.frontier
from synth.schedule.verify import verify_schedule
from tests.in_process import synth_main


def _on_disk(folder):
    return {f.name: f.read_bytes() for f in folder.glob("allgather-*.json")}


def test_the_frontier_in_hand_is_on_disk_before_the_exact_search(tmp_path, monkeypatch):
    # on ndv2x4 the packed trees reach the bound in about 2 s, and the exact search then
    # ran to the end of the limit with no file written yet (dgx1 here: the same stages)
    seen = {}
    exact = synth.frontier._exact_searches

    def look_then_search(*args, **kwargs):
        seen.update(_on_disk(tmp_path / "dgx1" / "allgather"))
        return exact(*args, **kwargs)

    monkeypatch.setattr(synth.frontier, "_exact_searches", look_then_search)
    result = synth_main("allgather", "--topo", "dgx1", "--time-limit", "60", "--out",
                        tmp_path, "--json", "--model", "line-rate")
    assert result.returncode == 0, result.stderr
    assert seen  # written before the exact search began
    for data in seen.values():
        verify_schedule(json.loads(data))
    summary = json.loads(result.stdout)
    final = {p["file"].rsplit("/", 1)[-1] for p in summary["frontier"]}
    # the end: the frontier's files and nothing else of this run
    assert set(_on_disk(tmp_path / "dgx1" / "allgather")) == final
    for p in summary["frontier"]:
        with open(p["file"]) as f:
            verify_schedule(json.load(f))


def test_an_early_file_dropped_from_the_frontier_is_removed_unless_changed_since(
        tmp_path, monkeypatch):
    # the ring baseline is written first and loses its place to the trees and the exact
    # search: removed at the end; the same kind of file rewritten meanwhile by someone
    # else is theirs, and stays
    folder = tmp_path / "dgx1" / "allgather"
    exact = synth.frontier._exact_searches
    changed = {}

    def change_one_then_search(*args, **kwargs):
        ring = next(f for f in folder.glob("allgather-*.json")
                    if json.loads(f.read_text())["synthesis"]["method"].startswith("baseline"))
        changed[ring.name] = ring.read_text() + "\n"
        ring.write_text(changed[ring.name])
        return exact(*args, **kwargs)

    monkeypatch.setattr(synth.frontier, "_exact_searches", change_one_then_search)
    result = synth_main("allgather", "--topo", "dgx1", "--time-limit", "60", "--out",
                        tmp_path, "--json", "--model", "line-rate")
    assert result.returncode == 0, result.stderr
    final = {p["file"].rsplit("/", 1)[-1] for p in json.loads(result.stdout)["frontier"]}
    (name, text), = changed.items()
    assert name not in final and (folder / name).read_text() == text
    assert set(_on_disk(folder)) == final | {name}
