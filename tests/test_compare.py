"""`synth compare`: synthesized frontier against baselines on one cost model, and in cost
model 2 against NCCL as it runs."""

import json

from tests.in_process import synth_main


def test_compare_dgx1_allgather_json():
    # allgather: SCCL's dgx1 frontier, proven in a second (allreduce's takes several);
    # the comparison itself treats every collective alike
    result = synth_main("compare", "allgather", "--topo", "dgx1", "--sizes", "1KB,1GB",
                        "--json", "--time-limit", "60", "--model", "line-rate")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    kinds = {r["kind"] for r in data["rows"]}
    assert kinds == {"synth", "baseline"}
    assert any(r["name"].startswith("ring") for r in data["rows"])
    for row in data["rows"]:  # nothing beats the bound; times follow alpha + beta * n
        assert row["bandwidth_to_bound"] >= 1 - 1e-9
        small, big = row["sizes"]["1KB"], row["sizes"]["1GB"]
        assert big["time_us"] > small["time_us"]
        assert abs(big["time_us"] - (row["latency_us"] + row["us_per_mb"] * (1 << 30) / 1e6)) < 1e-6
    # small messages: the 2-step synthesized schedule; large: a bandwidth-optimal one
    fastest_small = min(data["rows"], key=lambda r: r["sizes"]["1KB"]["time_us"])
    assert data["winners"]["1KB"] == fastest_small["name"] and fastest_small["steps"] == 2
    best_big = min(r["bandwidth_to_bound"] for r in data["rows"])
    winner_big = next(r for r in data["rows"] if r["name"] == data["winners"]["1GB"])
    assert winner_big["bandwidth_to_bound"] < best_big + 0.01


def test_compare_text_names_the_winners():
    result = synth_main("compare", "allgather", "--topo", "ring:4")
    assert result.returncode == 0, result.stderr
    assert "fastest: 1KB" in result.stdout and "bounds:" in result.stdout


def test_compare_in_cost_model_2_names_nccls_choice_and_the_speedup_over_it():
    result = synth_main("compare", "allgather", "--topo", "ring:4", "--sizes", "1KB,1GB",
                        "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cost_model"] == "calibrated"
    # 4 GPUs on a ring of NVLinks: NCCL's tuner takes ring LL at 1 KB and ring Simple
    # at 1 GB (test_nccl_reference.py derives such choices by hand)
    assert data["nccl"]["1KB"]["nccl_runs"] == "ring/LL"
    assert data["nccl"]["1GB"]["nccl_runs"] == "ring/Simple"
    for label, v in data["nccl"].items():
        best = min(r["sizes"][label]["time_us"] for r in data["rows"])
        assert v["speedup"] <= v["nccl_us"] / best < v["speedup"] + 0.01  # rounded down
        assert "NCCL 2.30.7's tuner" in v["why"]
    text = synth_main("compare", "allgather", "--topo", "ring:4", "--sizes", "1KB")
    assert text.returncode == 0 and "NCCL 2.30.7 as it runs there" in text.stdout


def test_compare_says_one_step_and_a_ring_at_the_bound_is_exactly_at_it():
    text = synth_main("compare", "allreduce", "--topo", "ring:2", "--sizes", "1MB").stdout
    assert "bounds: 1 step, 1 round per chunk" in text  # was "1 steps", "1 rounds"
    # dgx1's allreduce ring is at the bandwidth bound: 1, not 0.9999999999999999
    doc = json.loads(synth_main("compare", "allreduce", "--topo", "dgx1", "--json").stdout)
    ring = next(r for r in doc["rows"] if "ring" in r["name"])
    assert ring["bandwidth_to_bound"] == 1.0


def test_compare_with_nothing_found_is_one_line_and_exit_1():
    # gather on dgx1 needs 2 steps: with --max-steps 1 the frontier is empty, and compare
    # ended in an internal error (min() of no rows), exit 3
    result = synth_main("compare", "gather", "--topo", "dgx1", "--max-steps", "1",
                        "--time-limit", "20")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == ("synth: error: no schedule found for gather (root 0) on dgx1: "
                             "--max-steps 1 is under its bound of 2 steps\n")


def test_the_root_is_named_wherever_it_changes_the_answer(tmp_path):
    # gather on dgx1 at root 0 and at root 5 have different frontiers; bounds, compare,
    # one instance and verify left the root out
    said = synth_main("bounds", "gather", "--topo", "dgx1", "--root", "5")
    assert said.stdout.startswith("gather (root 5) on dgx1 (8 ranks)\n")
    assert json.loads(synth_main("bounds", "gather", "--topo", "dgx1", "--root", "5",
                                 "--json").stdout)["root"] == 5
    # the default root is named too, as compare names it; a collective without one: null
    assert json.loads(synth_main("bounds", "gather", "--topo", "ring:4",
                                 "--json").stdout)["root"] == 0
    assert json.loads(synth_main("bounds", "allgather", "--topo", "ring:4",
                                 "--json").stdout)["root"] is None
    compared = synth_main("compare", "gather", "--topo", "ring:4", "--root", "2", "--json",
                          "--time-limit", "20")
    assert json.loads(compared.stdout)["root"] == 2
    one = synth_main("broadcast", "--topo", "ring:4", "--root", "2", "--steps", "2",
                     "--rounds", "2", "--chunks", "1", "-o", str(tmp_path),
                     "--format", "json,msccl-xml")
    stem = tmp_path / "ring_4" / "broadcast" / "broadcast-root2-s2-r2-c1"
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("found broadcast (root 2) on ring:4: 2 steps")
    assert one.stdout.endswith(f"-> {stem}.json, {stem}.xml\n")  # both formats' files
    checked = synth_main("verify", f"{stem}.json")
    assert checked.stdout.startswith(f"ok {stem}.json: broadcast (root 2) on ring:4, ")


def test_steps_under_the_bound_say_so_not_a_max_steps_never_given(tmp_path):
    said = synth_main("allgather", "--topo", "dgx1", "--steps", "1", "-o", str(tmp_path),
                      "--time-limit", "20")
    assert said.returncode == 1
    assert said.stderr == ("synth: error: no schedule found for allgather on dgx1: --steps 1 "
                           "is under its bound of 2 steps\n")

    # --max-steps under the bound says so too
    said = synth_main("allgather", "--topo", "dgx1", "--max-steps", "1", "-o", str(tmp_path),
                      "--time-limit", "20")
    assert said.returncode == 1 and said.stderr == (
        "synth: error: no schedule found for allgather on dgx1: --max-steps 1 is under its "
        "bound of 2 steps\n")
    # and in compare and report, which said "none applies within the steps asked for;
    # ..." and "no schedule found ... within the limits (the page says so)"
    for command, *out in (("compare",), ("report", "-o", tmp_path / "r")):
        said = synth_main(command, "allgather", "--topo", "dgx1", "--max-steps", "1",
                          "--time-limit", "20", *out)
        assert said.returncode == 1 and said.stderr.endswith(
            "synth: error: no schedule found for allgather on dgx1: --max-steps 1 is under "
            "its bound of 2 steps\n"), (command, said.stderr)


def test_a_size_given_twice_is_one_column():
    result = synth_main("compare", "allgather", "--topo", "ring:4", "--sizes", "1KB,1KB,1MB")
    header = result.stdout.splitlines()[1]
    assert header.count("1KB us") == 1 and header.count("1MB us") == 1
