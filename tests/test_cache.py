"""The solver cache: identical instances are answered from it, corrupt entries ignored."""

import json

import pytest

from synth.schedule.collectives import make_collective
from synth.search import cache
from synth.search.instance import solve_instance
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower


@pytest.fixture
def model():
    return lower(resolve("dgx1"))


def entries():
    return sorted(cache.cache_dir().glob("*.json"))


def test_identical_instances_are_solved_once(model):
    coll = make_collective("allgather", 8, 2)
    first = solve_instance(model, coll, 2, 3)
    assert first.status == "sat" and "cached" not in first.schedule.info
    again = solve_instance(model, coll, 2, 3)
    assert again.status == "sat" and again.schedule.info.get("cached")
    assert again.schedule.steps == first.schedule.steps
    assert len(entries()) == 1
    no = solve_instance(model, coll, 2, 2)  # UNSAT is remembered too
    assert no.status == "unsat" and len(entries()) == 2
    assert solve_instance(model, coll, 2, 2).status == "unsat"


def test_the_key_covers_topology_content_collective_instance_and_solver(model):
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 2, 3)
    solve_instance(model, coll, 2, 4)  # another instance
    solve_instance(model, make_collective("allgather", 8, 1), 2, 3)  # another collective
    solve_instance(lower(resolve("ndv2")), coll, 2, 3)  # same links: the same key
    solve_instance(model, coll, 2, 3, backend="z3")  # another solver
    assert len(entries()) == 4


def test_corrupt_entries_are_ignored_and_replaced(model):
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 2, 3)
    path, = entries()
    entry = json.loads(path.read_text())
    entry["schedule"]["steps"][0]["sends"].pop()  # a schedule that no longer works
    path.write_text(json.dumps(entry))
    out = solve_instance(model, coll, 2, 3)
    assert out.status == "sat" and "cached" not in out.schedule.info
    path.write_text("{half a file")
    assert solve_instance(model, coll, 2, 3).status == "sat"
    assert json.loads(path.read_text())["status"] == "sat"  # rewritten whole


def test_cache_can_be_turned_off(model, monkeypatch):
    monkeypatch.setenv("SYNTH_CACHE", "0")
    solve_instance(model, make_collective("allgather", 8, 2), 2, 3)
    monkeypatch.setenv("SYNTH_CACHE", "1")
    assert entries() == []


def test_an_entry_edited_to_say_unsat_is_not_a_proof(model):
    # the frontier would become "proven" at 3 steps where 2 exist if this were trusted
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 2, 3)
    path, = entries()
    entry = json.loads(path.read_text())
    entry.update(status="unsat", schedule=None)
    path.write_text(json.dumps(entry))
    out = solve_instance(model, coll, 2, 3)
    assert out.status == "sat" and "cached" not in out.schedule.info


def test_an_entry_holding_another_instances_schedule_is_ignored(model):
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 3, 8)  # a valid schedule, of another instance
    other, = entries()
    solve_instance(model, coll, 2, 3)
    mine, = [p for p in entries() if p != other]
    entry = json.loads(other.read_text())
    entry["key"] = mine.stem  # a valid schedule of 3 steps, filed under the 2-step key
    mine.write_text(json.dumps(entry))
    out = solve_instance(model, coll, 2, 3)
    assert out.status == "sat" and "cached" not in out.schedule.info
    assert out.schedule.num_steps == 2


def test_a_cached_schedule_is_checked_on_the_model_asked_for(model):
    # ndv2's links are dgx1's: one key, and the answer comes back on ndv2's own model
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 2, 3)
    ndv2 = lower(resolve("ndv2"))
    out = solve_instance(ndv2, coll, 2, 3)
    assert out.schedule.info.get("cached") and out.schedule.model is ndv2


def test_the_cache_secret_is_private_and_a_lost_secret_voids_every_entry(model):
    coll = make_collective("allgather", 8, 2)
    solve_instance(model, coll, 2, 3)
    secret = cache.cache_dir() / ".secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    secret.unlink()  # every entry's MAC now fails: solved again, not trusted
    out = solve_instance(model, coll, 2, 3)
    assert out.status == "sat" and "cached" not in out.schedule.info


def test_the_exact_search_names_its_points_exact_and_old_answers_too(model):
    # "direct" named both the exact search's points and a baseline; answers remembered
    # under the old name read as the new one
    coll = make_collective("allgather", 8, 2)
    first = solve_instance(model, coll, 2, 3)
    assert first.method == "exact" and first.schedule.info["method"] == "exact"
    path, = entries()
    key = path.stem
    entry = cache.load(key)  # as an earlier synth stored it (under its own mac)
    entry["method"] = "direct"
    entry["schedule"]["synthesis"]["method"] = "direct"
    cache.store(key, {k: v for k, v in entry.items() if k != "key"})
    again = solve_instance(model, coll, 2, 3)
    assert again.schedule.info.get("cached")
    assert again.method == "exact" and again.schedule.info["method"] == "exact"


def test_a_run_answered_from_the_cache_says_so(tmp_path, monkeypatch):
    # the second run's points held the first run's solve seconds, and its summary
    # counted cached answers as solver calls with nothing to tell them apart
    from tests.in_process import synth_main

    args = ("allgather", "--topo", "ring:4", "--method", "exact", "--time-limit", "20")
    first = synth_main(*args, "--out", tmp_path / "a", "--json")
    again = synth_main(*args, "--out", tmp_path / "b", "--json")
    assert first.returncode == again.returncode == 0, again.stderr
    before, after = json.loads(first.stdout), json.loads(again.stdout)
    assert before["cached_calls"] == 0 and not any(p["cached"] for p in before["frontier"])
    assert after["cached_calls"] == after["solver_calls"] > 0
    exact = [p for p in after["frontier"] if p["method"] == "exact"]
    assert exact and all(p["cached"] for p in exact)
    text = synth_main(*args, "--out", tmp_path / "c")
    assert f"({after['solver_calls']} answered from the cache)" in text.stdout
    rows = [line for line in text.stdout.splitlines() if line.rstrip().endswith(" cached")]
    assert rows and all(" exact " in line for line in rows)
    monkeypatch.setenv("SYNTH_CACHE_DIR", str(tmp_path / "fresh"))  # the runs above had it
    one = ("allgather", "--topo", "ring:4", "--steps", "2", "--rounds", "3", "--chunks", "2")
    solved = synth_main(*one, "--out", tmp_path / "d", "--json")
    cached = synth_main(*one, "--out", tmp_path / "e")
    assert json.loads(solved.stdout)["cached"] is False
    assert "chunks answered from the cache -> " in cached.stdout, cached.stdout
