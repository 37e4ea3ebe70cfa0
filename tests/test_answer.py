"""`synth COLLECTIVE --size N`: the answer to the user's question at one size, which
file to load for each runtime, its predicted time and the reference's: NCCL's own choice
in cost model 2 (the default), the NCCL-style ring or tree with --model line-rate."""

import json
from pathlib import Path

import pytest

from synth.answer import VARIANT_WORDS, format_answer
from synth.export.msccl_sim import check_msccl_xml
from synth.export.mscclpp_sim import check_mscclpp_plan
from tests.test_reliability import one_line, synth_cli

MIB = 1 << 20


@pytest.fixture(scope="module")
def dgx1_answer(tmp_path_factory):
    out = tmp_path_factory.mktemp("answer")
    run = synth_cli("allreduce", "--topo", "dgx1", "--size", "1MB", "--time-limit", "60",
                    "--out", str(out), "--json", timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def time_at(point, n):
    """A point's time at 1 MiB in cost model 2, as the summary gives it per size."""
    assert n == MIB
    return point["predicted_us"]["1MB"]["us"]


def test_each_runtime_gets_the_fastest_point_that_loads_and_cuts_the_size(dgx1_answer):
    answer, frontier = dgx1_answer["answer"], dgx1_answer["frontier"]
    by_stem = {Path(p["file"]).stem: p for p in frontier}
    # MSCCL runs a file for whole loops of its C chunks of 4-byte elements, MSCCL++ for
    # 16-byte units a multiple of its C chunks: at 1 MiB both take C a power of two
    # (dgx1's allreduce points have C = 2, 6, 16, 48)
    cutting = [p for p in frontier if p["chunks"] & (p["chunks"] - 1) == 0]
    for fmt, check in (("msccl-xml", check_msccl_xml), ("mscclpp", check_mscclpp_plan)):
        chosen = answer["runtimes"][fmt]
        assert chosen["file"] and Path(chosen["file"]).exists()
        text = Path(chosen["file"]).read_text()
        check(text if fmt == "msccl-xml" else json.loads(text), root=None)
        point = by_stem[chosen["point"]]
        assert point in cutting
        # MSCCL runs any of NCCL's protocols: the file's is the fastest one, and no
        # cutting point is faster; synth's MSCCL++ plans are Simple, so no faster
        # than that
        if fmt == "msccl-xml":
            assert chosen["us"] == pytest.approx(time_at(point, MIB), abs=1e-3)
            assert f'proto="{point["predicted_us"]["1MB"]["protocol"]}"' in text
            assert all(time_at(point, MIB) <= time_at(p, MIB) + 1e-9 for p in cutting)
        else:
            assert chosen["us"] >= time_at(point, MIB) - 1e-3
    fastest = min(frontier, key=lambda p: time_at(p, MIB))
    assert answer["fastest_us"] == pytest.approx(time_at(fastest, MIB), abs=1e-3)
    # NCCL on 8 V100 at 1 MiB: ring with LL128 in its tuner (test_nccl_reference.py)
    assert answer["reference"] == "NCCL ring/LL128"
    assert answer["reference_is"].startswith("NCCL 2.30.7's own choice at this size")
    assert dgx1_answer["cost_model"]["name"] == "calibrated"


@pytest.mark.parametrize("model, reference", [("line-rate", "reference ring"),
                                              ("calibrated", "reference NCCL ring/LL")])
def test_the_table_ends_with_the_answer(tmp_path, model, reference):
    run = synth_cli("allgather", "--topo", "ring:4", "--size", "1KB", "--time-limit", "20",
                    "--out", str(tmp_path), "--model", model)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-5].startswith("at 1,024 bytes, in the model: the fastest point is")
    assert lines[-4].lstrip().startswith("MSCCL XML") and "load " in lines[-4]
    assert lines[-2].lstrip().startswith(reference)
    # the last line: the file to load at that size, or nothing (the reference is as
    # fast), its time and the reference's, both as the lines above give them
    ref_us = lines[-2].split(": ")[1].split(" us")[0]
    files = {x.split("load ")[1].split(":")[0]: x.rsplit(": ", 1)[1].split(" us")[0]
             for x in lines[-4:-2] if "load " in x}
    last = lines[-1]
    assert last.startswith("for 1,024 bytes load ")
    if "load nothing" in last:
        assert all(float(us) >= float(ref_us) for us in files.values())
        assert f"at {ref_us} us is at least as fast" in last
    else:
        chosen = last.split("load ")[1].split(" (")[0]
        assert f": {files[chosen]} us predicted, against " in last
        assert float(files[chosen]) == min(map(float, files.values())) < float(ref_us)
        assert last.split(" at ")[-1].startswith(f"{ref_us} us, ")


def test_a_size_that_does_not_parse_is_one_line(tmp_path):
    said = one_line(synth_cli("allgather", "--topo", "ring:4", "--size", "lots",
                              "--out", str(tmp_path)), 2)
    assert "lots" in said and not list(tmp_path.iterdir())


def test_a_runtime_file_slower_than_the_reference_is_not_offered_as_a_load():
    # an MSCCL XML file at 108.5 us against NCCL at 69.3 us (0.6387 x), an MSCCL++ one
    # at 50.0 us (1.386 x): only the faster is a load, and the answer is that one
    def entry(runtime, file, us, speedup):
        return {"runtime": runtime, "file": file, "us": us, "point": file,
                "speedup": speedup, "not_loadable": []}
    answer = {"bytes": MIB, "fastest": "allreduce-s4-r14-c128",
              "fastest_method": "reducescatter + allgather", "fastest_us": 29.4,
              "fastest_loads_in": [], "reference": "NCCL tree/LL128",
              "reference_us": 69.3, "reference_is": "NCCL's own choice",
              "runtimes": {"msccl-xml": entry("MSCCL XML", "a.xml", 108.5, 0.6387),
                           "mscclpp": entry("MSCCL++", "b.mscclpp.json", 50.0, 1.386)},
              "choice": {"runtime": "mscclpp", "file": "b.mscclpp.json", "us": 50.0}}
    lines = format_answer(answer).splitlines()
    assert lines[1] == ("  MSCCL XML fastest file a.xml: 108.5 us, 0.63 x the reference: "
                        "not faster, so NCCL's own algorithm should run this size")
    assert lines[2] == "  MSCCL++   load b.mscclpp.json: 50.0 us, 1.38 x the reference"
    assert lines[-1] == ("for 1,048,576 bytes load b.mscclpp.json (MSCCL++): 50.0 us "
                         "predicted, against NCCL tree/LL128 at 69.3 us, 1.38 x")
    # a file as fast as the reference is no load either, as the last line judges
    answer["runtimes"]["mscclpp"].update(us=69.3, speedup=1.0)
    answer["choice"] = {"runtime": None, "file": None, "us": 69.3}
    lines = format_answer(answer).splitlines()
    assert lines[2].startswith("  MSCCL++   fastest file b.mscclpp.json: 69.3 us, 1.00 x")
    assert lines[-1].startswith("for 1,048,576 bytes load nothing")


def test_a_file_ahead_of_the_reference_by_less_than_the_times_shown_is_no_load():
    # dgxh100's gather at 64 MB: the MSCCL++ file's 168.233 us (rounded, as shown)
    # against direct's 168.23348...: its line said "not faster", the last line "load it"
    from synth.answer import _choice

    files = {"mscclpp": {"file": "g.mscclpp.json", "us": 168.233},
             "msccl-xml": {"file": None, "us": None}}
    assert _choice(files, 168.23348509485095) == {"runtime": None, "file": None,
                                                   "us": 168.233}
    assert _choice(files, 168.2345)["file"] == "g.mscclpp.json"  # 0.0015 us ahead
    assert _choice(files, float("nan"))["file"] == "g.mscclpp.json"  # no reference


def test_a_runtime_that_runs_another_point_faster_on_its_protocols_says_which():
    # mi250's allgather at 1.5 MB: the fastest point loads in both runtimes (the table
    # said so), but MSCCL++ runs a point faster on its own protocols; the answer said
    # only "it loads in MSCCL XML"
    def entry(runtime, point, us, tried=()):
        return {"runtime": runtime, "file": point + ".x", "us": us, "point": point,
                "speedup": 1.5, "not_loadable": ["refused"] * len(tried),
                "not_loadable_points": list(tried)}
    answer = {"bytes": 1572864, "fastest": "allgather-s3-r3-c2", "fastest_method": "exact",
              "fastest_us": 18.3, "fastest_loads_in": ["msccl-xml"],
              "reference": "NCCL ring/LL", "reference_us": 28.7,
              "reference_is": "NCCL's own choice",
              "runtimes": {"msccl-xml": entry("MSCCL XML", "allgather-s3-r3-c2", 18.3),
                           "mscclpp": entry("MSCCL++", "allgather-s2-r2-c1", 20.9)},
              "choice": {"runtime": "msccl-xml", "file": "allgather-s3-r3-c2.x", "us": 18.3}}
    assert format_answer(answer).splitlines()[0].endswith(
        "18.3 us; it loads in MSCCL XML; MSCCL++ runs allgather-s2-r2-c1, faster on its "
        "own protocols")
    # where MSCCL++ refused the fastest point, its line says why, and the first does not
    answer["runtimes"]["mscclpp"] = entry("MSCCL++", "allgather-s2-r2-c1", 20.9,
                                          ["allgather-s3-r3-c2"])
    assert format_answer(answer).splitlines()[0].endswith("18.3 us; it loads in MSCCL XML")
    # a lane variant as the fastest was never compared on MSCCL++'s protocols
    answer["runtimes"]["mscclpp"] = entry("MSCCL++", "allgather-s2-r2-c1", 20.9)
    answer["fastest"] = answer["runtimes"]["msccl-xml"]["point"] = "allgather-s3-r3-c2-p2"
    assert format_answer(answer).splitlines()[0].endswith("it loads in MSCCL XML")


def test_a_refusal_cut_short_leaves_no_parenthesis_open():
    from synth.answer import _cut_words

    said = _cut_words("the runtime (MSCCL++ (v0.6) needs whole chunks (of 64 bytes each, "
                      "and more words past the width)", 60)
    assert said == "the runtime..." and said.count("(") == said.count(")")


def test_gather_which_nccl_has_not_falls_back_to_grouped_sends_not_nccls_own():
    # dgxh100's gather at 1 MB: the runtimes' lines sent the user to "NCCL's own
    # algorithm" beside a reference line saying NCCL has no gather; the refusal's words
    # were cut mid-word with a parenthesis left open
    refused = ("cannot export gather to MSCCL XML: msccl-executor-nccl selects no file for "
               "it (NCCL has no gather or scatter collective, so no call reaches MSCCL)")
    answer = {"bytes": MIB, "fastest": "gather-s1-r7-c7", "fastest_method": "exact",
              "fastest_us": 9.6, "fastest_loads_in": [], "nccl_has_it": False,
              "reference": "direct", "reference_us": 10.3,
              "reference_is": "NCCL has no gather of its own",
              "runtimes": {
                  "msccl-xml": {"runtime": "MSCCL XML", "file": None, "us": None,
                                "not_loadable": [refused]},
                  "mscclpp": {"runtime": "MSCCL++", "file": "g-p2.mscclpp.json", "us": 11.6,
                              "point": "g-p2", "speedup": 0.88, "not_loadable": []}},
              "choice": {"runtime": None, "file": None, "us": 10.3}}
    lines = format_answer(answer).splitlines()
    assert lines[1] == ("  MSCCL XML none of the 1 fastest points tried runs it: 1 not loaded "
                        "(cannot export gather to MSCCL XML: msccl-executor-nccl selects no "
                        "file for it...), so grouped sends (NCCL has no such collective) run "
                        "this size")
    assert lines[2].endswith(": not faster, so grouped sends (NCCL has no such collective) "
                             "should run this size" + VARIANT_WORDS)


def test_a_point_a_runtime_loads_but_cannot_cut_the_size_is_not_called_unloaded():
    # gb200nvl72 at 16 MiB: NVLS points loaded by MSCCL++ in 144 chunks, none of which
    # cuts 2^24 bytes; the answer said "loads in neither runtime" and "at least as fast
    # as every file a runtime loads here" though no file ran the size
    uncut = "its chunking does not cut 16,777,216 bytes whole"
    refused = "the schedule has switch operations"
    answer = {"bytes": 16 * MIB, "fastest": "allreduce-s3-r12-c144",
              "fastest_method": "in-network", "fastest_us": 65.9,
              "fastest_loads_in": [], "fastest_uncut_in": ["mscclpp"],
              "reference": "NCCL nvls/Simple", "reference_us": 80.4,
              "reference_is": "NCCL's own choice",
              "runtimes": {"msccl-xml": {"runtime": "MSCCL XML", "file": None, "us": None,
                                         "not_loadable": [uncut, refused, refused]},
                           "mscclpp": {"runtime": "MSCCL++", "file": None, "us": None,
                                       "not_loadable": [uncut, uncut]}},
              "choice": {"runtime": None, "file": None, "us": 80.4}}
    lines = format_answer(answer).splitlines()
    assert lines[0].endswith("65.9 us; it loads in MSCCL++, but its chunking does not "
                             "cut 16,777,216 bytes whole")
    assert lines[1] == ("  MSCCL XML none of the 3 fastest points tried runs it: 1 loads but "
                        "does not cut 16,777,216 bytes whole; 2 not loaded (the schedule has "
                        "switch operations), so NCCL's own algorithm runs this size")
    assert lines[2] == ("  MSCCL++   none of the 2 fastest points tried runs it: 2 load but "
                        "do not cut 16,777,216 bytes whole, so NCCL's own algorithm runs "
                        "this size")
    assert lines[-1] == ("for 16,777,216 bytes load nothing: no file a runtime loads runs "
                         "this size, so NCCL nvls/Simple at 80.4 us runs it")
    # points refused for different reasons: each reason once, with its count (one line
    # said "3 not loaded (the schedule has switch operations)" for all three)
    threadblocks = "71 threadblocks (limit 64)"
    answer["runtimes"]["msccl-xml"]["not_loadable"] = [refused, threadblocks, refused]
    assert format_answer(answer).splitlines()[1] == (
        "  MSCCL XML none of the 3 fastest points tried runs it: 2 not loaded (the schedule "
        "has switch operations); 1 not loaded (71 threadblocks (limit 64)), so NCCL's own "
        "algorithm runs this size")
    # a runtime the time limit left no point to try is not said to load nothing: it was
    # not asked (dgxh100x4 at 20 s: MSCCL++ loaded the fastest point, 1.25 x NCCL)
    answer["runtimes"]["mscclpp"]["not_loadable"] = []
    answer["fastest_uncut_in"] = []
    lines = format_answer(answer).splitlines()
    assert lines[0].endswith("65.9 us; MSCCL++ not asked about it in time")
    assert lines[2] == ("  MSCCL++   no point tried (the time limit came first), so "
                        "NCCL's own algorithm runs this size")
    assert lines[-1] == ("for 16,777,216 bytes load nothing found in time: MSCCL++ was asked "
                         "about no point (the time limit came first), so NCCL nvls/Simple "
                         "at 80.4 us runs it here")


def test_a_job_the_time_limit_leaves_no_answer_says_so(tmp_path, monkeypatch, capsys):
    # the limit spent once the files are written: no answer at the size, and a note
    # saying why (before 2026-12-05 the answer was left out in silence)
    import time

    import synth.anytime  # noqa: F401  (its early files keep the real write_points)
    import synth.deadline
    import synth.output
    from synth.cli import main

    write_points = synth.output.write_points

    class Later:  # the clock the deadlines read, an hour on
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def monotonic():
            return time.monotonic() + 3600

    def then_late(*args, **kwargs):
        paths = write_points(*args, **kwargs)
        monkeypatch.setattr(synth.deadline, "time", Later())
        return paths

    monkeypatch.setattr(synth.output, "write_points", then_late)
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--size", "1MB", "--time-limit", "30",
              "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert stop.value.code == 0
    assert json.loads(captured.out)["answer"] is None
    assert ("synth: note: no answer for 1048576 bytes: the time limit (30 s) was spent "
            "before it; a longer --time-limit gives one") in captured.err.splitlines()


def test_gathers_reference_is_timed_in_the_model_its_points_are(tmp_path):
    # NCCL has no gather: the direct baseline stands in, timed in cost model 2 as the
    # points are (it was the line-rate model's, 2.4 us against the points' 10.3 on
    # dgxh100, beside a note saying to use the model already in use)
    run = synth_cli("gather", "--topo", "switch:4", "--size", "1KB", "--time-limit", "30",
                    "--out", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)["answer"]
    assert answer["reference"] == "direct" and "cost model 2" in answer["reference_is"]
    compare = synth_cli("compare", "gather", "--topo", "switch:4", "--sizes", "1KB",
                        "--time-limit", "30")
    row = next(line.split() for line in compare.stdout.splitlines()
               if line.startswith("direct "))
    assert compare.returncode == 0 and f"{answer['reference_us']:.1f}" == row[3]


@pytest.mark.parametrize("collective, said", [
    ("scatter", "NCCL has no scatter of its own: nccl-tests runs it as grouped sends, "
                "which this baseline stands in for, in the line-rate model"),
    ("alltoall", "direct sends in the line-rate model, a stand-in for NCCL's grouped sends "
                 "(--model calibrated predicts them)")])
def test_the_line_rate_reference_is_said_as_what_it_is(tmp_path, collective, said):
    # scatter's reference is the direct baseline: it was called "NCCL-style ring or tree"
    run = synth_cli(collective, "--topo", "switch:4", "--size", "1KB", "--model",
                    "line-rate", "--time-limit", "30", "--out", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)["answer"]
    assert answer["reference"] == "direct" and answer["reference_is"] == said


def test_the_answers_files_are_listed_as_synths_own(tmp_path):
    # so that a later run may replace them when stale, as the frontier's: they were
    # written but never listed
    from synth.output_folder import manifest_of

    run = synth_cli("allgather", "--topo", "switch:4", "--size", "1MB", "--time-limit",
                    "30", "--out", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    files = [Path(r["file"]) for r in json.loads(run.stdout)["answer"]["runtimes"].values()
             if r["file"]]
    assert files
    for f in files:
        assert f.name in manifest_of(f.parent).files, f


def test_a_size_no_point_cuts_gets_a_file_synthesized_on_power_of_two_lanes(tmp_path):
    # one H100 box at 64 MiB: the NVLS points cut by 9 pieces a shard (18 lanes), so
    # none runs 2^26 bytes; synthesized again on 16 lanes, an MSCCL++ plan does, faster
    # than NCCL as it runs there (as `synth plan` found it)
    run = synth_cli("allreduce", "--topo", "dgxh100", "--size", "64MB", "--time-limit",
                    "120", "--out", str(tmp_path), "--json", timeout=300)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)["answer"]
    chosen = answer["runtimes"]["mscclpp"]
    assert chosen["point"].endswith("-p2") and answer["choice"]["file"] == chosen["file"]
    # the frontier's points tried first, named beside why each did not do
    frontier = {Path(p["file"]).name.removesuffix(".json"): p["method"]
                for p in json.loads(run.stdout)["frontier"]}
    tried = dict(zip(chosen["not_loadable_points"], chosen["not_loadable"]))
    assert tried and len(tried) == len(chosen["not_loadable"])
    assert all(frontier[stem].startswith("in-network") and "does not cut 67,108,864" in why
               for stem, why in tried.items())
    assert chosen["us"] < answer["reference_us"]
    plan = json.loads(Path(chosen["file"]).read_text())
    check_mscclpp_plan(plan)
    # its schedule beside it, checked on the model it was made for (16 lanes a link)
    schedule = chosen["file"].replace(".mscclpp.json", ".json")
    verified = synth_cli("verify", schedule)
    assert verified.returncode == 0 and "(power-of-two lanes)" in verified.stdout
    units = (64 * MIB) // 16  # MSCCL++ cuts a message into 16-byte units per GPU's chunks
    assert all(units % g[key] == 0 for g in plan["gpus"]
               for key in ("input_chunks", "output_chunks"))


def test_where_no_reference_applies_the_answer_says_so_and_its_json_is_strict(tmp_path):
    # a gather across two boxes: no direct baseline applies, so no reference; the
    # answer said "nan us" beside a note naming the wrong model, and wrote NaN in JSON
    args = ("gather", "--topo", "dgxh100x2", "--root", "9", "--size", "1MB",
            "--time-limit", "60", "--out", str(tmp_path))
    run = synth_cli(*args, "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout, parse_constant=lambda name: pytest.fail(name))["answer"]
    assert answer["reference_us"] is None and "line-rate" not in answer["reference_is"]
    text = synth_cli(*args)
    lines = text.stdout.splitlines()
    assert "nan" not in text.stdout and lines[-2].startswith("  reference: none applies")
    assert lines[-1].endswith("(no reference applies here)")


def test_on_rccl_an_xml_file_is_offered_only_for_whole_loops_in_every_share():
    # RCCL selects an MSCCL XML file for a call whose per-rank count is whole loops; the
    # answer judged MI300X's files by the whole buffer's count, as msccl-executor-nccl does
    from synth.answer import UNCUT, _loadable
    from synth.construct.baselines import baselines
    from synth.search.pareto import Point
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower

    ring = next(b.schedule for b in baselines(lower(resolve("ring:4")), "allgather")
                if b.name.startswith("ring"))
    point = [Point(ring, proven=False)]
    loop = 4 * ring.collective.chunks * 4  # a loop of the buffer's chunks, 4-byte elements
    n = loop * 3  # whole loops in the buffer, not in each of its 4 shares
    def time_of(s, protocols=None):
        return 1.0, "Simple"
    assert _loadable(point, "msccl-xml", n, time_of).point is not None
    refused = _loadable(point, "msccl-xml", n, time_of, library="rccl")
    assert refused.point is None and refused.why_not == [UNCUT.format(n)]
    assert _loadable(point, "msccl-xml", n * 4, time_of, library="rccl").point is not None


def test_an_export_that_would_not_end_before_the_deadline_is_not_started(monkeypatch):
    # an export and its simulation are not cut once started: gb200nvl72's direct
    # baseline, started with a second left of a 10 s limit, ended the job at 17 s
    import synth.deadline
    from synth import answer
    from synth.construct import paced
    from synth.deadline import Deadline, Pace
    from synth.frontier import synthesize
    from synth.search.pareto import Limits
    from synth.topology.catalog import resolve

    monkeypatch.setattr(synth.deadline, "_PACES", [])
    result = synthesize(resolve("ring:4"), "allgather", None, Limits(time_limit=30), None,
                        "constructed")
    points, time_of = result.points, answer.timer(result, MIB)
    monkeypatch.setitem(paced.WRITE, "mscclpp", Pace(60.0, least=1))  # a minute a unit
    monkeypatch.setattr(answer, "render", lambda *a, **k: pytest.fail("an export started"))
    found = answer._loadable(points, "mscclpp", MIB, time_of, Deadline.after(60))
    assert found.point is None and found.tried == []
    monkeypatch.undo()  # at the priors' pace every point's file fits: the first is taken
    monkeypatch.setattr(synth.deadline, "_PACES", [])
    found = answer._loadable(points, "mscclpp", MIB, time_of, Deadline.after(60))
    assert found.point is points[0] and check_mscclpp_plan(json.loads(found.text))


def test_the_power_of_two_lane_variants_keep_the_steps_asked_for():
    # `--max-steps 2 --size 1GB` on dgxh100 wrote and recommended a 65-step variant
    from dataclasses import replace

    from synth.answer import lane_variants
    from synth.deadline import Deadline
    from synth.frontier import synthesize
    from synth.schedule.file import schedule_to_dict
    from synth.schedule.verify import verify_schedule
    from synth.search.pareto import Limits
    from synth.topology.catalog import resolve

    topo = resolve("dgxh100")

    def variants(limits):
        result = synthesize(topo, "allreduce", None, limits, method="constructed")
        return lane_variants(replace(result, topology=topo), Deadline.after(60))

    assert max(p.steps for p in variants(Limits(time_limit=30))) > 2
    capped = variants(Limits(max_steps=2, time_limit=30))
    assert capped and all(p.steps <= 2 for p in capped), [p.steps for p in capped]
    for p in capped:
        assert p.schedule.info["lanes"] == "power-of-two"
        verify_schedule(schedule_to_dict(p.schedule))
