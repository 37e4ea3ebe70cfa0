"""The frontier is Pareto in the real costs (latency, us/MB), over every candidate:
exact points, decomposed ones and the baselines, so no baseline is faster anywhere."""

import json
import re
import time

import pytest

from synth.construct.baselines import baselines
from synth.frontier import synthesize
from synth.schedule.cost import schedule_cost
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from tests.in_process import synth_main
from tests.test_reliability import synth_cli

SIZES = [1 << k for k in range(0, 41, 2)]  # 1 byte to 1 TB


def frontier_of(spec, name, root=None, time_limit=20.0, method="auto", max_chunks=8):
    return synthesize(resolve(spec), name, root,
                      Limits(time_limit=time_limit, max_chunks=max_chunks), method=method)


@pytest.mark.parametrize("spec,name,root", [
    ("dgx1", "broadcast", 3),      # the ring baseline beat the frontier from 1 MB up
    ("switch:4", "reduce", 0),
    ("line:3", "allreduce", None),
    ("dgxh100x2", "allgather", None),  # decomposed, exact and baselines meet
])
def test_no_baseline_is_faster_at_any_size_and_no_point_is_dominated(spec, name, root):
    # a limit that binds nothing, and instances that stay small (one chunk a share): the
    # rule is about what is built (a limit that cuts the building: tests/test_limits.py)
    result = frontier_of(spec, name, root, time_limit=300.0, max_chunks=1)
    assert result.searches["baselines"].stopped.endswith("on the frontier")
    costs = [schedule_cost(p.schedule) for p in result.points]
    assert costs
    for i, a in enumerate(costs):
        assert not any(b.dominates(a) for b in costs[:i] + costs[i + 1:]), (i, a)
    for p in result.points:
        verify_schedule(schedule_to_dict(p.schedule))
    for base in baselines(result.model, name, result.root):
        theirs = schedule_cost(base.schedule)
        for n in SIZES:
            ours = min(c.time_us(n) for c in costs)
            assert ours <= theirs.time_us(n) * (1 + 1e-12), (base.name, n)


def test_a_baseline_faster_somewhere_joins_the_frontier_and_is_written(tmp_path):
    # dgx1 broadcast from rank 3: the packed rings are the fastest schedule from about
    # 0.92 to 0.98 MB, between the 3-step exact point and the 8-batch tree pipeline, in
    # the line-rate model (cost model 2's call cost and per-round charge leave no size
    # where it wins: test_answer.py)
    result = synth_cli("broadcast", "--topo", "dgx1", "--root", "3", "--time-limit", "30",
                       "--json", "--out", str(tmp_path), "--no-progress", "--model",
                       "line-rate")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    ring = [p for p in summary["frontier"] if (p["method"] or "").startswith("baseline: ring")]
    assert len(ring) == 1 and ring[0]["steps"] > 5

    def time_us(p, n):
        return p["latency_us"] + p["us_per_mb"] * n / 1e6

    others = [p for p in summary["frontier"] if p is not ring[0]]
    assert any(all(time_us(ring[0], n) < time_us(p, n) for p in others)
               for n in (2 ** (k / 16) for k in range(40 * 16)))  # 1 B to 1 TB
    doc = json.loads(open(ring[0]["file"]).read())
    assert doc["synthesis"]["method"].startswith("baseline: ring")
    verify_schedule(doc)
    checked = synth_cli("verify", ring[0]["file"])
    assert checked.returncode == 0, checked.stderr


def test_only_auto_adds_the_baselines():
    exact = frontier_of("dgx1", "broadcast", 3, method="exact")
    assert not any("baseline" in p.schedule.info for p in exact.points)
    auto = frontier_of("dgx1", "broadcast", 3)
    assert any("baseline" in p.schedule.info for p in auto.points)
    # the proofs are about steps and rounds: the exact points keep them
    searched = {(p.steps, p.rounds, p.chunks, p.proven) for p in exact.points}
    assert all((p.steps, p.rounds, p.chunks, p.proven) in searched for p in auto.points
               if "baseline" not in p.schedule.info and "trees" not in p.schedule.info)


def test_constructed_builds_everything_auto_builds_but_asks_no_solver(tmp_path):
    # --method constructed: an answer in the constructions' time and memory (on dgx2x2
    # allgather the exact search took 2.5 GB for points with fewer steps)
    runs = {}
    for method in ("constructed", "auto"):
        run = synth_main("allgather", "--topo", "dgx1", "--method", method, "--out",
                         tmp_path / method, "--json")
        assert run.returncode == 0, run.stderr
        runs[method] = json.loads(run.stdout)
    built, auto = runs["constructed"], runs["auto"]
    assert built["solver_calls"] == 0 and auto["solver_calls"] > 0
    assert "allgather" in auto["stopped"] and "allgather" not in built["stopped"]
    assert set(built["stopped"]) == set(auto["stopped"]) - {"allgather"}
    assert built["frontier"] and not any(p["method"] == "exact" for p in built["frontier"])
    files = [p["file"] for p in built["frontier"]]
    assert synth_main("verify", *files).returncode == 0


@pytest.mark.parametrize("topo, method, searched", [
    ("ring:16", "auto", True), ("ring:17", "auto", False), ("ring:17", "exact", True)])
def test_auto_searches_the_whole_machine_exactly_on_at_most_16_gpus(tmp_path, topo, method,
                                                                     searched):
    # on 32 GPUs the exact search took 854-2550 MiB and minutes and made nothing faster
    # at 1 KB, 1 MB or 1 GB (bench/results/auto-exact-2026-12-06.md): auto leaves it out
    # past 16 and says so; --method exact still runs it
    run = synth_main("allgather", "--topo", topo, "--method", method, "--max-steps", "8",
                     "--max-chunks", "1", "--out", tmp_path, "--json")
    assert run.returncode == 0, run.stderr
    stopped = json.loads(run.stdout)["stopped"]
    assert ("allgather" in stopped) is searched
    assert ("exact search" in stopped) is not searched
    if not searched:
        assert stopped["exact search"].startswith("left out past 16 GPUs (17 here)")
        assert "--method exact runs it" in stopped["exact search"]


def test_auto_past_16_gpus_searches_exactly_where_nothing_else_is_found(tmp_path):
    # --steps 10 alone: no construction has a 10-step allgather on ring:17, so the exact
    # search, left out where they find one, runs and finds it
    run = synth_main("allgather", "--topo", "ring:17", "--steps", "10", "--max-chunks", "2",
                     "--out", tmp_path, "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert "exact search" not in doc["stopped"] and "allgather" in doc["stopped"]
    assert [p["steps"] for p in doc["frontier"]] == [10]
    assert synth_main("verify", doc["frontier"][0]["file"]).returncode == 0


def test_auto_past_16_gpus_keeps_earlier_files_over_the_exact_search_s_range(tmp_path):
    # the step counts no search of this run covered keep their files: one there may be
    # better than anything the constructions found (a reviewer's mesh:3x6, 7 steps at
    # 9 rounds, lost beside their 9-step point); this 10-step one the 8-step point at
    # the bound beats stays too, as docs/cli.md says
    args = ("allgather", "--topo", "ring:17", "--max-chunks", "2", "--out", tmp_path)
    assert synth_main(*args, "--steps", "10", "--method", "exact").returncode == 0
    folder = tmp_path / "ring_17" / "allgather"
    earlier = [p.name for p in folder.glob("allgather-s10-*.json")]
    assert earlier
    run = synth_main(*args, "--max-steps", "10", "--json")
    assert run.returncode == 0 and "exact search" in json.loads(run.stdout)["stopped"]
    assert [p.name for p in folder.glob("allgather-s10-*.json")] == earlier
    assert list(folder.glob("allgather-s8-*.json"))


def test_constructed_refuses_one_instance_which_only_the_solver_answers():
    run = synth_main("allgather", "--topo", "ring:4", "--method", "constructed",
                     "--steps", "2", "--rounds", "3", "--chunks", "1")
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "--method constructed builds schedules" in run.stderr


def test_compare_names_a_baseline_on_the_frontier():
    # in the line-rate model, whose frontier the ring joins (test above)
    result = synth_cli("compare", "broadcast", "--topo", "dgx1", "--root", "3", "--json",
                       "--time-limit", "30", "--model", "line-rate")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = [r["name"] for r in data["rows"] if r["kind"] == "synth"]
    assert any(" = ring" in n for n in names)
    for size, winner in data["winners"].items():  # a synth row wins every size
        assert winner in names, (size, winner)


def test_the_baselines_are_built_even_when_the_exact_search_runs_out_of_time(monkeypatch):
    # hypercube:4 allgather: the exact search takes all the time left (a sleep past its
    # deadline, whatever the machine); the packed rings, built before it, are still
    # built and weighed (greedy matching's points beat them here)
    import synth.frontier
    from synth.search.pareto import Search

    def exhausted(*args):
        time.sleep(args[-1].left() + 0.05)
        return Search(stopped="out of time", complete=False)

    monkeypatch.setattr(synth.frontier, "frontier", exhausted)
    result = frontier_of("hypercube:4", "allgather", time_limit=6.0)
    assert result.searches["allgather"].stopped == "out of time"
    assert result.searches["baselines"].points
    assert result.searches["baselines"].stopped.endswith("on the frontier")


def test_constructions_do_not_widen_the_step_range_whose_old_files_are_replaced():
    # the trees sit at up to 518 steps, the baselines at 13: neither searched the step
    # counts between, so only the exact search's range (hop bound + 3) is replaced
    result = frontier_of("dgx1", "broadcast", 3)
    assert max(p.steps for p in result.points) > 500
    assert result.steps_searched == (1, 5)


@pytest.mark.parametrize("where", ["synth.construct.baselines.build_baseline",
                                   "synth.construct.tree_schedules.pack_trees",
                                   "synth.frontier.frontier"])
def test_ctrl_c_while_building_keeps_what_was_found(monkeypatch, where):
    from synth.search.pareto import Search

    def interrupted(*args, **kwargs):
        if where.endswith(".frontier"):  # the exact search catches Ctrl-C and says so
            return Search(stopped="interrupted", complete=False)
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupted)
    # the baselines come first where they are cheap at the pace measured so far: on a
    # busy machine (or after slow work in this process) they may not be
    monkeypatch.setattr("synth.frontier.baselines_cheap", lambda ranks, deadline: True)
    result = synthesize(resolve("dgx1"), "broadcast", 3, Limits(time_limit=20.0))
    stopped = {name: s.stopped for name, s in result.searches.items()}
    if where.endswith("baseline"):  # greedy matching, then the baselines: nothing after
        assert stopped["baselines"] == "interrupted" and set(stopped) == {"greedy",
                                                                          "baselines"}
        assert result.points and all(p.schedule.info["method"].startswith("greedy")
                                     for p in result.points)
        return
    if where.endswith("pack_trees"):  # the baselines and greedy's built before are kept
        assert stopped["trees"] == "interrupted" and "broadcast" not in stopped
        assert result.points and all("baseline" in p.schedule.info or
                                     p.schedule.info["method"].startswith("greedy")
                                     for p in result.points)
        return
    # Ctrl-C in the exact search: the trees built before it are kept. By hand
    # (topologies/dgx1.yaml, lanes of 25 GB/s): gpu3 has 6 lanes (2 to gpu1, 2 to gpu2,
    # 1 to gpu0, 1 to gpu7) and every tree leaves it on one at least, so at most 6
    # trees; every GPU has 6 lanes and no set of GPUs with gpu3 has fewer than 6
    # leaving it, so by Edmonds' theorem 6 edge-disjoint trees exist. How many differ
    # is the packing's choice: the doubled links form the 8-cycle 3-1-0-4-5-7-6-2, so
    # one path could be used twice; at most 6, at least 1
    assert stopped["broadcast"] == "interrupted"
    packed = re.fullmatch(r"6 trees per root, ([1-6]) distinct", stopped["trees"])
    assert packed, stopped["trees"]
    trees = [p for p in result.points if "baseline" not in p.schedule.info
             and not p.schedule.info["method"].startswith("greedy")]
    assert trees and all(p.schedule.info["method"].startswith("trees, 6 packed")
                         and p.chunks % 6 == 0 for p in trees)


def test_baselines_come_first_on_72_gpus_and_not_on_128(monkeypatch):
    # the guess of a fresh command (the baselines' pace unmeasured: its prior, 2e-5 s a
    # pair, times UNMEASURED's 1.5 at least) for 8 algorithms over N^2 pairs, against
    # 2 s: 72 GPUs (gb200nvl72) 1.24 s, first; 128 GPUs 3.9 s, not; a short job's tenth
    # of its time bounds it too
    from synth.construct.baselines import ALGORITHMS
    from synth.deadline import Deadline, Pace
    from synth.frontier import baselines_cheap
    monkeypatch.setattr("synth.frontier.BASELINE_PACE", Pace(2e-5))
    # as on an idle machine: no other work measured slower than its prior
    monkeypatch.setattr("synth.deadline.machine_slowdown", lambda: 1.0)
    assert len(ALGORITHMS) == 8
    assert baselines_cheap(72, Deadline.after(300))
    assert not baselines_cheap(72, Deadline.after(5))
    assert not baselines_cheap(128, Deadline.after(3600))


def test_on_256_gpus_the_trees_answer_before_any_baseline_is_built(monkeypatch):
    # baselines come first only where all of them together are guessed under 2 s:
    # torus:16x16's (8 algorithms over 65,280 pairs, 2e-5 s a pair at the prior) are
    # not, and it built and checked its ring (twice the bound) first, 1.8 s of a 2 s
    # job. The pace unmeasured, as in a fresh command (this process may have measured
    # it on other tests' baselines)
    from synth.deadline import Pace
    monkeypatch.setattr("synth.frontier.BASELINE_PACE", Pace(2e-5))
    events = []
    result = synthesize(resolve("torus:16x16"), "allgather", limits=Limits(time_limit=300),
                        on_event=lambda kind, data: events.append((kind, data)))
    said = [data for kind, data in events if kind in ("stage", "search")]
    trees = said.index("allgather by packed trees")
    assert said.index("building the baselines") > trees
    # and the trees' point, at the bound, is the whole frontier: the ring is not on it
    assert [p.schedule.info["method"] for p in result.points] == \
        ["trees, 4 packed (4 distinct)"]
    assert result.points[0].ratio == result.bounds.rounds_per_chunk


def test_a_point_equal_to_a_shown_row_is_not_named_as_left_out(tmp_path):
    # ring:2's allreduce: the exact point and the ring baseline are one step of one
    # round and one chunk; cost model 2 keeps one of the two, and the other was named
    # "left out, never the fastest ... S1 R1 C1" under the row S1 R1 C1
    run = synth_main("allreduce", "--topo", "ring:2", "--time-limit", "10", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    rows = [line.split()[:3] for line in run.stdout.splitlines()[2:]
            if re.match(r"\d+ +\d+ +\d+ ", line)]
    assert rows == [["1", "1", "1"]]
    assert "left out" not in run.stdout


def test_complete_means_nothing_was_cut_short_not_that_a_construction_proved_it():
    # an NVLS construction proves nothing (its Search says so), and every NVLS
    # machine's broadcast read "complete": false with no search cut short
    from dataclasses import replace

    from synth.search.pareto import Search

    result = synthesize(resolve("ring:4"), "allgather", limits=Limits(time_limit=20))
    built = Search(stopped="in-network (NVLS) via nvswitch, 18 chunks a share",
                   complete=False)
    proven = Search(stopped="reached the bandwidth bound")
    assert replace(result, searches={"in-network": built, "allgather": proven}).complete
    for cut in ("out of time", "interrupted", "not built: about 2.0 s needed, 0.1 s left"):
        short = Search(stopped=cut, complete=False)
        assert not replace(result, searches={"in-network": short, "allgather": proven}
                           ).complete
    unasked = Search(stopped="larger instances not asked", complete=False)
    assert not replace(result, searches={"in-network": built, "allgather": unasked}).complete
    # a stage outside the constructions that Ctrl-C stopped is no complete job either
    stopped = Search(stopped="interrupted")
    assert not replace(result, searches={"allgather": proven, "runtimes": stopped}).complete


def test_the_exact_allreduce_shares_its_time_3_2_1(monkeypatch):
    # the direct search, then allgather and reducescatter for the composition: each
    # got a third (1 / 3, then 1 / 2 of the rest), and torus:3x3's direct search ended
    # out of time at 3.4 s of a 10 s limit
    import synth.exact as exact_module
    from synth.bounds import bounds
    from synth.deadline import Deadline
    from synth.schedule.collectives import make_collective
    from synth.search.pareto import Search
    from synth.topology.linkmodel import lower_with_routes

    given = {}

    def search(model, part, root, steps, rpc, limits, *args, **kwargs):
        given[part] = limits.time_limit
        return Search()

    monkeypatch.setattr(exact_module, "frontier", search)
    lowering = lower_with_routes(resolve("ring:4"))
    b = bounds(lowering, make_collective("allreduce", 4))
    exact_module.allreduce_searches(lowering, b, Limits(8, 2, 60.0), lambda *a: None,
                                    deadline=Deadline.after(60.0))
    # of what is left at each start (here all of it: the stand-in searches take none)
    assert given["allreduce"] == pytest.approx(60.0 * 3 / 6, abs=1.0)
    assert given["allgather"] == pytest.approx(60.0 * 2 / 3, abs=1.0)
    assert given["reducescatter"] == pytest.approx(60.0, abs=1.0)


def test_a_baseline_the_time_cannot_verify_gives_back_the_points_it_kept_off(monkeypatch):
    # dgx2x2's direct alltoall, one step at 64 rounds a chunk, beats every relayed point
    # (2 steps and more, 69 and down); where it could not be verified in time (dgx2x32's,
    # at any time limit), the job ended with no point at all
    import synth.frontier
    from synth.deadline import OutOfTime

    verified = synth.frontier.verified_within

    def none_for_baselines(schedule, deadline):
        if "baseline" in schedule.info:
            raise OutOfTime("verifying a schedule")
        return verified(schedule, deadline)

    monkeypatch.setattr(synth.frontier, "verified_within", none_for_baselines)
    result = synthesize(resolve("dgx2x2"), "alltoall", None, Limits(time_limit=60),
                        method="constructed")
    assert result.points and not any("baseline" in p.schedule.info for p in result.points)
    assert (result.points[0].steps, result.points[0].ratio) == (2, 69)
    assert result.searches["baselines"].stopped == "out of time"
    for p in result.points:
        verify_schedule(schedule_to_dict(p.schedule))


def test_the_baselines_count_is_of_the_rows_the_table_shows(tmp_path):
    # switch:8's alltoall: the exact point and the direct baseline cost the same; the
    # table shows the exact one, and the summary said "baselines: 1 of 1 on the frontier"
    run = synth_cli("alltoall", "--topo", "switch:8", "--time-limit", "30", "--out",
                    str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    shown = sum(p["method"].startswith("baseline") for p in doc["frontier"])
    assert doc["stopped"]["baselines"] == f"{shown} of 1 on the frontier"
    assert shown == 0 and [p["method"] for p in doc["frontier"]] == ["exact"]


def _events_of(spec, name, on_frontier=lambda points: None):
    """synthesize's events (kind, the points handed over or the text), in order."""
    events = []

    def on_event(kind, data):
        events.append((kind, list(data) if kind == "frontier" else data))
        if kind == "frontier":
            on_frontier(data)

    result = synthesize(resolve(spec), name, None, Limits(time_limit=20.0),
                        on_event=on_event)
    return result, events


def test_greedy_matching_hands_over_its_first_point_before_anything_else_is_built():
    # torus:4x4 allgather: greedy's one chunk a share (13.3 us at 1 MiB by hand of the
    # 8 steps at 0.7 us and 15 chunks over 4 links in) is on disk before the baselines
    _, events = _events_of("torus:4x4", "allgather")
    first = next(i for i, (kind, _) in enumerate(events) if kind == "frontier")
    baselines = events.index(("stage", "building the baselines"))
    assert first < baselines
    (point,) = events[first][1]
    assert point.schedule.info["method"] == "greedy, 1 chunk(s) a share"
    verify_schedule(schedule_to_dict(point.schedule))  # raises where it is invalid


def test_ctrl_c_at_greedy_matching_s_first_point_keeps_it_and_builds_nothing_more():
    def stop(points):
        raise KeyboardInterrupt

    result, events = _events_of("torus:4x4", "allgather", stop)
    assert [p.schedule.info["method"] for p in result.points] == ["greedy, 1 chunk(s) a share"]
    assert result.searches["greedy"].stopped == "interrupted" and result.interrupted
    assert "baselines" not in result.searches and "trees" not in result.searches
    first = next(i for i, (kind, _) in enumerate(events) if kind == "frontier")
    assert all(kind == "frontier" for kind, _ in events[first:])  # nothing built after


def test_ctrl_c_while_greedy_matching_verifies_keeps_the_points_verified(monkeypatch):
    import synth.construct.greedy as greedy

    real, calls = greedy.verified_within, []

    def verified_within(schedule, deadline):
        calls.append(schedule)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(schedule, deadline)

    monkeypatch.setattr(greedy, "verified_within", verified_within)
    result = synthesize(resolve("torus:4x4"), "allgather", None, Limits(time_limit=20.0))
    assert [p.schedule.info["method"] for p in result.points] == ["greedy, 1 chunk(s) a share"]
    assert result.searches["greedy"].stopped == "interrupted"
    assert "baselines" not in result.searches


@pytest.mark.parametrize("spec,cap", [
    ("ring:4", 2),    # the exact reducescatter + allgather composed: 4 steps
    ("dgxh100", 2),   # NVLS pipelines of 3 to 1025 steps, trees of 2
])
def test_max_steps_caps_every_point_kept_handed_over_and_offered(spec, cap):
    handed = []

    def on_event(kind, data):
        if kind == "frontier":
            handed.extend(data)

    result = synthesize(resolve(spec), "allreduce", None,
                        Limits(max_steps=cap, time_limit=60), on_event=on_event)
    free = frontier_of(spec, "allreduce", time_limit=60)
    assert max(p.steps for p in free.points) > cap  # what the cap has to drop
    assert result.points
    for p in result.points + handed + result.candidates:
        assert p.steps <= cap, (p.steps, p.schedule.info.get("method"))
    for p in result.points:
        verify_schedule(schedule_to_dict(p.schedule))
    # the front of the points within the cap: none of them left off
    within = [p for p in free.candidates if p.steps <= cap]
    costs = [schedule_cost(p.schedule) for p in result.points]
    for p in within:
        mine = schedule_cost(p.schedule)
        assert any(c.latency_us <= mine.latency_us + 1e-9 and
                   c.us_per_byte <= mine.us_per_byte * (1 + 1e-12) for c in costs)


def test_max_steps_caps_the_rows_of_the_table(tmp_path):
    result = synth_main("allreduce", "--topo", "ring:4", "--max-steps", "2",
                        "--out", tmp_path, "--no-progress", "--time-limit", "60")
    assert result.returncode == 0, result.stderr
    rows = [line.split()[0] for line in result.stdout.splitlines()[2:]
            if line[:1].isdigit()]
    assert rows and all(int(s) <= 2 for s in rows), result.stdout
