"""Files written while the search goes on (synth/anytime.py): the frontier in hand is on
disk before the exact search starts, and the job's last write leaves the frontier."""

import json
import os

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


def test_a_last_write_the_time_left_does_not_afford_removes_no_early_file(tmp_path,
                                                                         monkeypatch):
    # past the deadline the last write writes nothing: the early files were its points'
    # files, and settling then removed every one of them (a review found it)
    import synth.deadline
    import synth.export.loads

    folder = tmp_path / "dgx1" / "allgather"
    early = {}
    exact = synth.frontier._exact_searches

    def look_then_search(*args, **kwargs):
        early.update(_on_disk(folder))
        return exact(*args, **kwargs)

    chosen = synth.export.loads.chosen
    late = {"now": False}

    def chosen_then_late(*args, **kwargs):
        out = chosen(*args, **kwargs)
        late["now"] = True
        return out

    affords = synth.deadline.Deadline.affords
    monkeypatch.setattr(synth.frontier, "_exact_searches", look_then_search)
    monkeypatch.setattr(synth.export.loads, "chosen", chosen_then_late)
    monkeypatch.setattr(synth.deadline.Deadline, "affords",
                        lambda self, s: not late["now"] and affords(self, s))
    result = synth_main("allgather", "--topo", "dgx1", "--time-limit", "60", "--out",
                        tmp_path, "--json", "--model", "line-rate")
    assert early
    assert _on_disk(folder) == early  # every one still there, unchanged
    if result.returncode == 0:
        assert "not written" in result.stderr


def test_an_early_write_leaves_a_file_already_there_to_the_last_write(tmp_path,
                                                                      monkeypatch):
    # an early write replaced an earlier run's file of the same name, and when that
    # point then fell off the frontier removed it, though a run stopped by Ctrl-C
    # removes nothing
    from synth.search.pareto import Search

    # torus:4x4: greedy matching's first points are written, then the trees' (at the
    # bound in fewer steps) push them off
    folder = tmp_path / "torus_4x4" / "allgather"
    early = {}

    def interrupted(lowering, name, root, b, limits, deadline, points, searches, on_event):
        early.update(_on_disk(folder))
        searches[name] = Search(stopped="interrupted")  # as Ctrl-C in the exact search
        return []

    monkeypatch.setattr(synth.frontier, "_exact_searches", interrupted)
    args = ("allgather", "--topo", "torus:4x4", "--time-limit", "60", "--out", tmp_path,
            "--model", "line-rate")
    assert synth_main(*args).returncode == 130
    fell = set(early) - set(_on_disk(folder))  # written early, then off the frontier
    assert fell
    for f in folder.iterdir():
        f.unlink()
    for name in fell:  # the same names, an earlier run's files
        (folder / name).write_text("theirs\n")
        os.utime(folder / name, ns=(0, 0))
    assert synth_main(*args).returncode == 130
    assert all((folder / name).read_text() == "theirs\n" for name in fell)


def test_ctrl_c_while_writing_early_keeps_the_points_and_says_so(tmp_path, monkeypatch):
    import synth.anytime

    def interrupted(self, points):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth.anytime.EarlyFiles, "write", interrupted)
    result = synth_main("allgather", "--topo", "dgx1", "--time-limit", "60", "--out",
                        tmp_path, "--model", "line-rate")
    assert result.returncode == 130
    assert "allgather on dgx1" in result.stdout  # the table of the points kept
    assert "points kept" in result.stderr or "point kept" in result.stderr


def test_on_a_cluster_the_decompositions_points_are_on_disk_while_trees_are_packed(
        tmp_path, monkeypatch):
    # the decomposition answers a cluster in seconds; the trees and the switch searches
    # after it took most of a minute with nothing on disk
    from synth.search.pareto import Search

    folder = tmp_path / "dgxh100x2" / "allgather"
    seen = {}

    def trees_stopped(*args, **kwargs):
        seen.update(_on_disk(folder))
        return Search(stopped="interrupted")  # as Ctrl-C there: the job ends

    monkeypatch.setattr(synth.frontier, "tree_search", trees_stopped)
    result = synth_main("allgather", "--topo", "dgxh100x2", "--time-limit", "60", "--out",
                        tmp_path, "--model", "line-rate")
    assert result.returncode == 130, result.stderr
    decomposed = [json.loads(data) for data in seen.values()
                  if json.loads(data)["synthesis"]["method"].startswith("decomposed")]
    assert decomposed
    for doc in decomposed:
        verify_schedule(doc)
