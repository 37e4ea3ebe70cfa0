"""Which runtime loads each point (synth.export.loads), and the across-box NVLS allreduces
MSCCL++ loads (synth.construct.in_network.turns_allreduce, and across_boxes_allreduce
with NVLS in each box; with SHARP between the boxes it loads nowhere).

The answers here are render's own: a point marked loadable renders and passes its
simulator, a point marked not loadable is refused by render with the same line (asked
afresh, nothing remembered). The refusals are derived by hand from the exporters'
rules (docs/runtimes.md); the across-box allreduce's rounds from its six steps on a
small two-box machine whose NVSwitches reduce.
"""

import copy
import json
from dataclasses import replace

import pytest

from synth.bounds import bounds
from synth.construct.baselines import baselines
from synth.construct.in_network import (across_boxes_allreduce, box_switches,
                                        nvls_search, turns_allreduce, turns_program)
from synth.construct.nic_assisted import METHOD as NIC_METHOD
from synth.deadline import Deadline
from synth.errors import BadInput
from synth.export import IN_NETWORK, render
from synth.export.loads import (RUNTIMES, chosen, forget, loads_of, phrase, refusal, where,
                                with_runtimes)
from synth.export.mscclpp_sim import check_mscclpp_plan
from synth.frontier import Result
from synth.pareto_front import pareto_filter
from synth.output import format_table, result_summary
from synth.predict.timing import SIZES, prices, schedule_lines
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_from_dict, schedule_to_dict
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits, Point
from synth.topology.catalog import resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main
from tests.test_in_network import nvls_doc

# four GPUs on a switch that reduces and multicasts, two lanes (capacity 2) per GPU, one
# NIC each (capacity 1): --boxes 2 makes the smallest machine with NVLS in each box
NVLS4 = """\
name: nvls4
description: four GPUs on a reducing NVSwitch (2 lanes each), one NIC each
unit_gbps: 25
gpus: 4
switches:
  - {name: nvswitch, kind: nvswitch, can: [reduce, multicast]}
nics: [nic0, nic1, nic2, nic3]
links:
  - {between: [gpu0, nvswitch], gbps: 25, count: 2, alpha_us: 0.35}
  - {between: [gpu1, nvswitch], gbps: 25, count: 2, alpha_us: 0.35}
  - {between: [gpu2, nvswitch], gbps: 25, count: 2, alpha_us: 0.35}
  - {between: [gpu3, nvswitch], gbps: 25, count: 2, alpha_us: 0.35}
  - {between: [gpu0, nic0], gbps: 64}
  - {between: [gpu1, nic1], gbps: 64}
  - {between: [gpu2, nic2], gbps: 64}
  - {between: [gpu3, nic3], gbps: 64}
network: {fabric: rails, gbps: 25, alpha_us: 2.6}
costs: {arch: hopper}
"""


@pytest.fixture(scope="module")
def nvls4x2(tmp_path_factory):
    path = tmp_path_factory.mktemp("topo") / "nvls4.yaml"
    path.write_text(NVLS4)
    topo = resolve(str(path), 2)
    lowering = lower_with_routes(topo)
    hierarchy, _ = find_hierarchy(lowering)
    inside, across = box_switches(lowering.model, hierarchy)
    assert across is None and len(inside) == 2  # NVLS in each box, no SHARP between
    return path, topo, lowering.model, hierarchy, inside


@pytest.fixture(scope="module")
def sharp4x2(tmp_path_factory):
    """nvls4x2 whose network switches reduce and multicast too (InfiniBand SHARP): the
    across-box allreduce sums between the boxes in the network, which no switch channel
    of MSCCL++ joins."""
    path = tmp_path_factory.mktemp("topo") / "sharp4.yaml"
    path.write_text(NVLS4.replace("alpha_us: 2.6}", "alpha_us: 2.6, sharp: true}"))
    topo = resolve(str(path), 2)
    lowering = lower_with_routes(topo)
    hierarchy, _ = find_hierarchy(lowering)
    inside, across = box_switches(lowering.model, hierarchy)
    assert (len(inside), len(across)) == (2, 4)  # NVLS in each box, SHARP on each rail
    return topo, lowering.model, hierarchy, inside, across


def fresh_render(schedule, fmt, **kw):
    """render with nothing remembered: its own answer, not the one loads kept."""
    forget()
    return render(schedule, fmt, **kw)


def agrees_with_render(schedule):
    """loads' answers are render's: None where it renders (and simulates), its very
    refusal where it refuses."""
    found = loads_of(schedule)
    for fmt, why in found.items():
        if why is None:
            fresh_render(schedule, fmt)  # raises (InternalError) if its simulator refused
        else:
            with pytest.raises(BadInput) as refused:
                fresh_render(schedule, fmt)
            assert str(refused.value) == why
    return found


# --- loads: hand-checked answers ----------------------------------------------------------

def test_msccl_xml_refuses_switch_operations_mscclpp_loads_their_glres_form():
    # the hand NVLS allreduce: switch_reduce of chunk r into r, then r multicasts it to
    # the other three: one glres per rank; the XML has no switch operation
    schedule = schedule_from_dict(nvls_doc())
    found = agrees_with_render(schedule)
    assert found == {"msccl-xml": IN_NETWORK, "mscclpp": None}
    assert where(found) == "MSCCL++"
    assert phrase(found["msccl-xml"]) == "the schedule has switch operations"


def test_a_switch_sum_left_on_its_owner_loads_in_mscclpp():
    # reducescatter in one switch step (C = 1): chunk r summed into rank r and left
    # there: a glres storing to rank r alone (a switch channel of one member)
    doc = nvls_doc()
    doc.update(collective="reducescatter", chunks=1, num_chunks=4,
               post=[[r, r] for r in range(4)], steps=doc["steps"][:1])
    found = agrees_with_render(schedule_from_dict(doc))
    assert found == {"msccl-xml": IN_NETWORK, "mscclpp": None}
    assert where(found) == "MSCCL++"


def test_msccl_xml_is_answered_without_time_for_switch_operations():
    # the XML has no switch operation: refused before any program is built, so asked
    # even when the time left affords no exporter
    import time

    from synth.deadline import Deadline
    from synth.export.loads import loads_within

    schedule = schedule_from_dict(nvls_doc())
    forget()
    assert loads_within(schedule, Deadline(time.monotonic() - 1)) is None  # MSCCL++ unknown
    assert refusal(schedule, "mscclpp") is None
    assert loads_within(schedule, Deadline(time.monotonic() - 1)) == {
        "msccl-xml": IN_NETWORK, "mscclpp": None}


def ring_tree_pipeline():
    """A pipelined tree allgather on ring:4 (a batch program to ask about)."""
    from synth.construct.tree_schedules import tree_search

    model = lower_with_routes(resolve("ring:4")).model
    return next(p.schedule for p in tree_search(
        model, "allgather", None, Limits(max_chunks=8)).points if p.schedule.pipeline)


def test_a_pipelines_batch_program_is_made_once_however_often_it_is_asked(monkeypatch):
    # a candidate the time left did not afford was asked again at every size of every
    # runtime's walk, each time making its batch program (unfolding a folded schedule):
    # 26 s of a 6 s compare on dgxh100x8
    import time

    import synth.schedule.transform as transform
    from synth.deadline import Deadline
    from synth.export.loads import loads_within

    pipelined = ring_tree_pipeline()
    made = []
    real = transform.one_batch
    monkeypatch.setattr(transform, "one_batch", lambda s: made.append(s) or real(s))
    forget()
    for _ in range(3):  # the time is asked first: no batch program made for nothing
        assert loads_within(pipelined, Deadline(time.monotonic() - 1)) is None
    assert made == []
    assert loads_of(pipelined) == {"msccl-xml": None, "mscclpp": None}  # then asked
    asking = len(made)
    assert loads_of(pipelined) == {"msccl-xml": None, "mscclpp": None}
    assert asking and len(made) == asking  # remembered: not made again


def test_a_program_too_large_to_make_is_refused_by_arithmetic_for_ask_and_export(
        monkeypatch, tmp_path):
    # dgxh100x512's decomposed allgather spells out 33.5 million chunk moves a batch:
    # unfolding its batch to look up an answer passed 5.5 GB before any runtime's rule
    # was checked. Past the cap nothing is unfolded; the ask and `synth export` say the
    # same line, and under the cap the same schedule loads
    import synth.export.loads as loads
    import synth.schedule.transform as transform
    from synth.construct.paced import export_size
    from synth.deadline import Deadline
    from synth.export.loads import loads_within
    from synth.schedule.file import write_schedule

    pipelined = ring_tree_pipeline()
    units = export_size(pipelined)
    monkeypatch.setattr(loads, "MAX_PROGRAM", units - 1)
    monkeypatch.setattr(transform, "one_batch", lambda s: pytest.fail("unfolded"))
    forget()
    why = (f"not exported: its program spells out {units:,} chunk moves (every rank's), "
           f"over the {units - 1:,} synth makes at once")
    assert loads_within(pipelined, Deadline.after(60.0)) == {fmt: why for fmt in RUNTIMES}
    path = tmp_path / "big.json"
    write_schedule(pipelined, path)
    run = synth_main("export", path, "--to", "mscclpp", "-o", tmp_path / "plan.json")
    assert run.returncode == 2 and run.stderr.strip() == f"synth: error: {why}"
    assert not (tmp_path / "plan.json").exists()
    monkeypatch.undo()
    forget()
    assert loads_of(pipelined) == {"msccl-xml": None, "mscclpp": None}


def test_a_depth_whose_batch_program_was_answered_is_answered_where_no_ask_fits(
        monkeypatch):
    # dgxh100x64's decomposed depths share one batch program: its answer came after the
    # first depth's ask (31 s), and the other depths then showed '?' because a new ask
    # (or a probe) no longer fit, though making the batch program to look it up did
    import synth.construct.paced as paced
    import synth.export.loads as loads
    from synth.construct.tree_schedules import tree_search
    from synth.deadline import Deadline
    from synth.export.loads import loads_within

    model = lower_with_routes(resolve("ring:4")).model
    depths = [p.schedule for p in tree_search(model, "allgather", None, Limits(max_chunks=8)
                                              ).points if p.schedule.pipeline]
    forget()
    assert loads_of(depths[0]) == {"msccl-xml": None, "mscclpp": None}
    never = type("Never", (), {"seconds": lambda self, units: 10.0 ** 9})()
    monkeypatch.setattr(paced, "EXPORT", {fmt: never for fmt in RUNTIMES})
    monkeypatch.setattr(loads, "PROBE_S", 10.0 ** 6)  # no ask, no probe fits
    assert loads_within(depths[1], Deadline.after(60.0)) == {"msccl-xml": None,
                                                             "mscclpp": None}
    # its batch program made for one runtime, the other's answer is read at no cost,
    # even past the deadline
    assert loads_within(depths[3], Deadline.after(60.0), ("msccl-xml",)) == {
        "msccl-xml": None}
    assert loads_within(depths[3], Deadline.after(0.0), ("mscclpp",)) == {"mscclpp": None}
    forget()  # nothing remembered: not asked
    assert loads_within(depths[2], Deadline.after(60.0)) is None


def test_the_batch_lookups_pace_is_not_measured_on_schedules_without_one(monkeypatch):
    # a schedule with no pipeline has no batch program: timing its (instant) lookup made
    # the pace about 0 a unit, and a 512-GPU batch program (seconds, not cut) then looked
    # affordable with any time left
    import synth.construct.paced as paced
    from synth.deadline import Deadline, Pace
    from synth.export.loads import loads_within

    pace = Pace(5e-6, least=1)
    monkeypatch.setattr(paced, "BATCH", pace)
    plain = baselines(lower_with_routes(resolve("ring:4")).model, "allgather")[0].schedule
    forget()
    assert plain.pipeline is None
    assert loads_within(plain, Deadline.after(60.0)) == {"msccl-xml": None, "mscclpp": None}
    assert not pace.measured
    assert loads_within(ring_tree_pipeline(), Deadline.after(60.0)) is not None
    assert pace.measured  # a pipeline's lookup is what it paces


def test_both_runtimes_lower_one_runtime_form_made_once(monkeypatch):
    # at 512 GPUs making a pipeline's runtime form (its batch program, verified) took
    # 21 s, and each runtime's ask made it again
    import synth.export.loads as loads
    pipelined = ring_tree_pipeline()
    made = []
    real = loads.runtime_form
    monkeypatch.setattr(loads, "runtime_form", lambda s, **kw: made.append(s) or real(s, **kw))
    forget()
    assert loads_of(pipelined) == {"msccl-xml": None, "mscclpp": None}
    assert made == [pipelined]
    for fmt in ("msccl-xml", "mscclpp"):  # the exports are those of the form made afresh
        assert render(pipelined, fmt) == fresh_render(pipelined, fmt)
    # a form made for MSCCL++ with switch operations is not MSCCL XML's to lower
    in_network = schedule_from_dict(nvls_doc())
    forget()
    assert refusal(in_network, "mscclpp") is None
    assert refusal(in_network, "msccl-xml") == IN_NETWORK


def test_the_batch_programs_remembered_are_few_and_go_with_their_schedules():
    # each entry holds an unfolded batch program's steps: kept for every schedule ever
    # asked about, a long plan or compare held them all
    import gc
    from dataclasses import replace

    from synth.export import answers
    pipelined = ring_tree_pipeline()
    forget()
    copies = [replace(pipelined) for _ in range(answers.FORMS + 5)]
    forms = {answers.batch_form(c) for c in copies}
    assert len(forms) == 1 and None not in forms  # all the same program
    assert len(answers.batch_forms) == answers.FORMS
    del copies
    gc.collect()
    assert len(answers.batch_forms) == 0


def test_msccl_xml_refuses_a_direct_allgather_past_its_threadblocks_mscclpp_loads_it():
    # 34 GPUs on one switch, each sends its chunk to 33 peers in one step. XML: a
    # threadblock has one send and one receive peer; chunk c travels on channel c mod K.
    # On 1 channel a rank needs 33 threadblocks there (limit 32 a channel); on K = 32
    # (one chunk a channel at most: 34 chunks) rank r needs 33 on its own chunk's channel
    # plus one per other rank outside its residue class mod 32, 33 of them where the
    # class holds r alone: 66 (limit 64 a rank)
    model = lower_with_routes(resolve("switch:34")).model
    direct, ring = (next(b.schedule for b in baselines(model, "allgather", None)
                         if b.name == name) for name in ("direct", "ring x1"))
    found = agrees_with_render(direct)
    assert found == {"msccl-xml": "cannot export to MSCCL XML: on 1 channel a channel needs "
                                  "33 threadblocks (limit 32), and on up to 32 channels a "
                                  "rank needs 66 threadblocks (limit 64)",
                     "mscclpp": None}
    assert where(found) == "MSCCL++"
    assert where(agrees_with_render(ring)) == "both"


def test_a_remembered_refusal_keeps_nothing_of_the_export_it_stopped(monkeypatch):
    # kept as raised, a refusal's traceback held the frames it passed through, with the
    # exporter's program: 40-50 MB a refused point on dgx2x2's tree pipelines
    import gc
    import weakref

    import synth.export.msccl as msccl

    model = lower_with_routes(resolve("switch:34")).model
    direct = next(b.schedule for b in baselines(model, "allgather", None)
                  if b.name == "direct")
    class Local:  # an object only the exporter's frames refer to
        pass

    locals_seen = []
    real = msccl.build

    def build(form, *args):
        mine = Local()
        locals_seen.append(weakref.ref(mine))
        return real(form, *args)
    monkeypatch.setattr(msccl, "build", build)
    forget()
    why = refusal(direct, "msccl-xml")
    assert why.startswith("cannot export to MSCCL XML: on 1 channel")
    for _ in range(2):  # asked again: the same refusal, remembered, raised as it was
        with pytest.raises(BadInput) as again:
            render(direct, "msccl-xml")
        assert str(again.value) == why
    del again
    gc.collect()
    assert len(locals_seen) == 1 and locals_seen[0]() is None


def test_answers_are_renders_on_every_point_of_several_machines(nvls4x2):
    _, _, model, hierarchy, _ = nvls4x2
    points = [p.schedule for p in nvls_search(model, Limits(max_steps=13), None,
                                              hierarchy).points]
    points += [b.schedule for b in baselines(model, "allreduce", None)]
    for spec, name in (("ring:4", "allreduce"), ("dgxh100", "reducescatter"),
                       ("dgx1", "allgather"), ("dgxh100", "allgather")):
        m = lower_with_routes(resolve(spec)).model
        points += [b.schedule for b in baselines(m, name, None)]
        points += [p.schedule for p in nvls_search(m, Limits(max_steps=4), None, None,
                                                   name).points]
    seen = {where(agrees_with_render(s)) for s in points}
    assert seen == {"both", "MSCCL++", "neither"}


# --- the across-box NVLS allreduce MSCCL++ loads ------------------------------------------

def test_in_turn_rounds_are_the_hand_derived_ones(nvls4x2):
    # part h (4 shards of one chunk) is summed by box h's switch. Per GPU port (capacity
    # 2 each way) and NIC (capacity 1): 1. the other box reduces each shard into its
    # owner: 3 up, 3 down: 2 rounds; 2. owner to owner across: 1 on each NIC: 1;
    # 3. switch_reduce: a port sends into the 3 others' shards, takes its own once: 2;
    # 4. multicast: 1 up, 3 down: 2; 5. back across: 1; 6. the owner copies to its box:
    # 3 up, 3 down: 2
    _, _, model, hierarchy, inside = nvls4x2
    program = turns_program(model, hierarchy, inside, 1)
    assert [s.rounds for s in program] == [2, 1, 2, 2, 1, 2]
    one = turns_allreduce(model, hierarchy, inside, 1, 1)
    assert (one.num_steps, one.rounds, one.collective.chunks) == (6, 10, 8)
    # pipelined: all six at once carry 3+3+1+3 = 10 chunks on each port (5 rounds), 2 on
    # each NIC; filling: 2, {1,2}: 2, {1..3}: 6 up: 3, {1..4}: 7: 4, {1..5}: 4; draining
    # {2..6}: 4, {3..6}: 4, {4..6}: 6 down: 3, {5,6}: 2, {6}: 2
    eight = turns_allreduce(model, hierarchy, inside, 8, 1)
    assert eight.pipeline.rounds == (2, 2, 3, 4, 4, 5, 5, 5, 4, 4, 3, 2, 2)
    assert (eight.num_steps, eight.rounds, eight.collective.chunks) == (13, 45, 64)
    for s in (one, eight):
        verify_schedule(schedule_to_dict(s))


def test_in_turn_exports_to_mscclpp_in_and_out_of_place(nvls4x2):
    _, _, model, hierarchy, inside = nvls4x2
    schedule = turns_allreduce(model, hierarchy, inside, 8, 1)
    assert where(agrees_with_render(schedule)) == "MSCCL++"
    for inplace in (True, False):
        plan = json.loads(fresh_render(schedule, "mscclpp", inplace=inplace)[0])
        report = check_mscclpp_plan(plan, root=None)
        # one batch: each box's switch sums its part's 4 shards, one glres each
        assert report["ops"]["glres"] == 8
        copies = sum(op["src_buff"][0]["size"] for g in plan["gpus"] for tb in g["threadblocks"]
                     for op in tb["ops"] if op["name"] == "copy"
                     and (op["src_buff"][0]["type"], op["dst_buff"][0]["type"]) == ("i", "o"))
        # out of place the owner's sum sits in o, the other members' own chunk in i: a
        # switch channel reads one offset, so the 3 others copy theirs to o first, for
        # each of the 4 shards of each box's part: 24 chunks; in place all sit in o
        assert copies == (0 if inplace else 24)


def test_mutations_of_the_in_turn_allreduce_are_refused(nvls4x2):
    _, _, model, hierarchy, inside = nvls4x2
    good = schedule_to_dict(turns_allreduce(model, hierarchy, inside, 1, 1))
    verify_schedule(good)

    def broken(edit):
        doc = copy.deepcopy(good)
        edit(doc)
        return doc

    def no_rail(doc):  # box 1's sum of shard 0 of part 0 never reaches box 0
        doc["steps"][1]["sends"] = [x for x in doc["steps"][1]["sends"]
                                    if (x["src"], x["chunk"]) != (4, 0)]

    def fewer_rounds(doc):  # the box's reduce-scatter needs 2 rounds, not 1
        doc["steps"][0]["rounds"] = 1

    def other_switch(doc):  # box 0's part summed by box 1's switch
        op = next(x for x in doc["steps"][2]["sends"] if x["dst"] == 0)
        op["via"] = "n1.nvswitch"

    for edit, message in ((no_rail, "summed over"), (fewer_rounds, "over its capacity"),
                          (other_switch, "does not pass through")):
        with pytest.raises(ScheduleInvalid, match=message):
            verify_schedule(broken(edit))

    # valid, but no glres: rank 0 multicasts shard 0 to two of its box and sends it to
    # the third right after the switch summed it, before the members learn it is done
    def partly(doc):
        step = doc["steps"][3]["sends"]
        op = next(x for x in step if x.get("src") == 0)
        op["dsts"] = [1, 2]
        step.append({"chunk": op["chunk"], "src": 0, "dst": 3, "op": "copy"})

    doc = broken(partly)
    doc["steps"][3]["rounds"] = 3
    verify_schedule(doc)
    assert ("chunk 0 is in switch operations in steps 2 and 3 that are not a switch_reduce "
            "and the multicast of its sum") in refusal(schedule_from_dict(doc), "mscclpp")


# --- the frontier: each runtime's own points ----------------------------------------------

def test_a_point_only_a_runtime_loads_joins_the_frontier_it_is_dominated_on(sharp4x2):
    # the across-box in-network allreduce with SHARP between the boxes (one batch: 4
    # steps, 8 rounds, 5.9 us of alphas: 0.35 + 2.6 + 2.6 + 0.35) beats the in-turn one
    # (6 steps, 10 rounds for the same 8 chunks, 6.6 us) on both costs, and no runtime
    # loads it
    _, model, hierarchy, inside, across = sharp4x2
    best = Point(across_boxes_allreduce(model, hierarchy, inside, across, 1, 2), False)
    turns = Point(turns_allreduce(model, hierarchy, inside, 1, 1), False)
    assert pareto_filter([best, turns]) == [best]
    result = Result("allreduce", None, model, None, [best], candidates=[best, turns])
    marked = with_runtimes(result)
    assert [(p.steps, where(p.loads)) for p in marked.points] == [(4, "neither"),
                                                                   (6, "MSCCL++")]
    assert marked.points[1].schedule is turns.schedule


def test_a_candidate_is_asked_about_one_runtime_at_a_time(sharp4x2, monkeypatch):
    # the in-turn allreduce is met by MSCCL XML's walk (which refuses it) and MSCCL++'s
    # (which loads it): each asks about its own runtime only, and the point that joins
    # the frontier has both answers
    import synth.export.loads as loads

    _, model, hierarchy, inside, across = sharp4x2
    best = Point(across_boxes_allreduce(model, hierarchy, inside, across, 1, 2), False)
    turns = Point(turns_allreduce(model, hierarchy, inside, 1, 1), False)
    asked, real = [], loads.loads_within

    def recorded(schedule, deadline, formats=tuple(loads.RUNTIMES)):
        asked.append((schedule is turns.schedule, tuple(formats)))
        return real(schedule, deadline, formats)

    monkeypatch.setattr(loads, "loads_within", recorded)
    marked = with_runtimes(Result("allreduce", None, model, None, [best],
                                  candidates=[best, turns]))
    assert asked == [(False, ("msccl-xml", "mscclpp")),  # the frontier's point: both
                     (True, ("msccl-xml",)), (True, ("mscclpp",))]
    joined = marked.points[1]
    assert joined.schedule is turns.schedule and joined.loads["mscclpp"] is None
    assert "switch operations" in joined.loads["msccl-xml"]


def test_each_runtime_has_its_own_budget_for_its_points(sharp4x2, monkeypatch):
    # MSCCL XML's walk spends more than the whole budget refusing the in-turn allreduce
    # (a clock of our own: 31 CPU seconds an ask); MSCCL++'s walk still asks about it and
    # finds it loads (torus:16x32: XML's refusals took it all, and its loads showed none)
    import types

    import synth.export.loads as loads

    _, model, hierarchy, inside, across = sharp4x2
    best = Point(across_boxes_allreduce(model, hierarchy, inside, across, 1, 2), False)
    turns = Point(turns_allreduce(model, hierarchy, inside, 1, 1), False)
    clock, real = [0.0], loads.loads_within

    def slow_xml(schedule, deadline, formats=tuple(loads.RUNTIMES)):
        if schedule is turns.schedule and formats == ("msccl-xml",):
            clock[0] += 31.0
        return real(schedule, deadline, formats)

    monkeypatch.setattr(loads, "loads_within", slow_xml)
    monkeypatch.setattr(loads, "time", types.SimpleNamespace(process_time=lambda: clock[0]))
    marked = with_runtimes(Result("allreduce", None, model, None, [best],
                                  candidates=[best, turns]), budget_s=30.0)
    assert clock[0] == 31.0
    assert [(p.steps, where(p.loads)) for p in marked.points] == [(4, "neither"),
                                                                   (6, "MSCCL++")]


def test_a_joining_point_not_asked_in_time_about_a_runtime_says_so():
    import time

    import synth.export.loads as loads
    from synth.deadline import Deadline

    forget()
    said = loads._every_runtime(_ring4_allgather(), {"msccl-xml": None},
                                Deadline(time.monotonic() - 1))
    assert said == {"msccl-xml": None, "mscclpp": loads.NOT_IN_TIME}
    assert where(said) == "MSCCL XML"


def test_cost_model_2_keeps_the_fastest_point_each_runtime_loads_at_every_size(nvls4x2):
    # among every candidate, not only the line-rate frontier's: MSCCL runs any of NCCL's
    # protocols, synth's MSCCL++ plans Simple (docs/runtimes.md)
    _, topo, model, hierarchy, _ = nvls4x2
    points = [p for p in nvls_search(model, Limits(max_steps=21), None, hierarchy).points]
    points += [Point(b.schedule, False) for b in baselines(model, "allreduce", None)]
    kept = chosen(Result("allreduce", None, model, None, pareto_filter(points),
                         candidates=points), topo, "calibrated")
    shown = {id(x.schedule) for x in kept.points}
    p = prices(topo)
    for fmt, protocols in (("msccl-xml", ("LL", "LL128", "Simple")), ("mscclpp", ("Simple",))):
        able = [x for x in points if refusal(x.schedule, fmt) is None]
        assert able
        for n in SIZES:
            def at(x):
                return (min(line.time_us(n) for line in schedule_lines(x.schedule, p)
                            if line.protocol in protocols), x.steps)
            assert id(min(able, key=at).schedule) in shown, (fmt, n)
    # a point joins with what every runtime says, though one walk asked about it alone
    assert all(set(x.loads) == set(RUNTIMES) for x in kept.points)


def test_a_runtime_not_asked_in_time_for_a_joining_point_is_not_asked_again(nvls4x2,
                                                                             monkeypatch):
    # MSCCL XML's walk makes points join; asking MSCCL++ about any candidate finds no
    # time: MSCCL++'s walk, meeting the joined ones later, does not ask again (the
    # search would run past its cut a second time), and the loads line says so
    import synth.export.loads as loads

    _, topo, model, hierarchy, _ = nvls4x2
    points = [p for p in nvls_search(model, Limits(max_steps=21), None, hierarchy).points]
    points += [Point(b.schedule, False) for b in baselines(model, "allreduce", None)]
    frontier = pareto_filter(points)
    # the fastest of all at some size join the frontier before any asking: the points
    # that join in a runtime's walk are the others
    frontier = loads._fastest_candidates(Result("allreduce", None, model, None, frontier,
                                                candidates=points), topo, Deadline(), {}
                                         ).points
    asked_pp, real = [], loads.loads_within

    def recorded(schedule, deadline, formats=tuple(RUNTIMES)):
        if all(p.schedule is not schedule for p in frontier) and "mscclpp" in formats:
            asked_pp.append(id(schedule))
            return None  # no time for MSCCL++'s search of a candidate
        return real(schedule, deadline, formats)

    monkeypatch.setattr(loads, "loads_within", recorded)
    kept = chosen(Result("allreduce", None, model, None, frontier, candidates=points),
                  topo, "calibrated")
    joined = [x for x in kept.points if x.loads and x.loads["mscclpp"] == loads.NOT_IN_TIME]
    assert joined and where(joined[0].loads) == "MSCCL XML"
    assert len(asked_pp) == len(set(asked_pp))  # each candidate at most once
    assert kept.runtimes_stopped == loads.NOT_ASKED


# --- the command line ---------------------------------------------------------------------

def test_the_summary_and_table_say_which_runtime_loads_each_point_and_why(sharp4x2):
    topo, model, hierarchy, inside, across = sharp4x2
    best = Point(across_boxes_allreduce(model, hierarchy, inside, across, 1, 2), False)
    turns = Point(turns_allreduce(model, hierarchy, inside, 1, 1), False)
    result = with_runtimes(Result("allreduce", None, model, bounds_of(topo), [best],
                                  candidates=[best, turns]))
    summary = result_summary(result, topo.name, "cpsat", [])
    first, second = summary["frontier"]
    assert first["loads"] == "neither" and second["loads"] == "MSCCL++"
    assert first["not_loaded"]["msccl-xml"] == second["not_loaded"]["msccl-xml"] == {
        "why": "the schedule has switch operations", "message": IN_NETWORK}
    # step 1's first operation: SHARP sums chunk 0 of ranks 0 and 4 (local rank 0 of
    # each box) into rank 0
    assert first["not_loaded"]["mscclpp"]["why"] == (
        "a switch operation joins ranks 0 and 4 of different boxes")
    assert set(second["not_loaded"]) == {"msccl-xml"}
    lines = format_table(summary).splitlines()
    header = lines[1].split()
    assert header[header.index("loads") + 1] == "method"
    assert [lines[2].split()[:3], lines[3].split()[:3]] == [["4", "8", "8"], ["6", "10", "8"]]
    assert " neither " in lines[2] and " MSCCL++ " in lines[3]
    assert ("MSCCL XML does not load S4 R8 C8, S6 R10 C8: the schedule has switch operations"
            in lines)
    assert ("MSCCL++ does not load S4 R8 C8: a switch operation joins ranks 0 and 4 of "
            "different boxes") in lines


def test_the_command_line_table_and_json_carry_the_loads(nvls4x2, tmp_path):
    # 13 steps on nvls4x2: the allreduce through NVLS and the NICs in 8 batches, which
    # MSCCL++ loads, costs the least there (before it, the in-turn allreduce's 45/64).
    # By hand (synth.construct.nic_assisted): r = (nK - 1 + K) c_nic / ((K - 1)(2 c_nv
    # + c_nic)) = 9/5, 5 pieces a share, R = 9; a batch is 8 x 5 = 40 chunks, six steps,
    # alone 6, 9, 8, 8, 9, 6 rounds (NVLink 11, 15, 15, 11 pieces over 2 lanes; NICs 9
    # over 1). The 13 expanded steps run 1..6 program steps at once: 6, 9, 13, 16, 18,
    # 18, 18, 18, 18, 16, 13, 9, 6 = 178 rounds for 320 chunks
    args = ("allreduce", "--topo", nvls4x2[0], "--boxes", "2", "--steps", "13",
            "--max-chunks", "1", "--time-limit", "3", "--out", tmp_path, "--model",
            "line-rate")
    run = synth_main(*args, "--json")
    assert run.returncode == 0, run.stderr
    (ours,) = [p for p in json.loads(run.stdout)["frontier"] if NIC_METHOD in p["method"]]
    assert (ours["rounds"], ours["chunks"]) == (178, 320)
    assert (ours["loads"], ours["not_loaded"]["msccl-xml"]["why"]) == (
        "MSCCL++", "the schedule has switch operations")
    run = synth_main(*args)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    row = next(x for x in lines if NIC_METHOD in x)
    assert row.split()[:3] == ["13", "178", "320"] and " MSCCL++ " in row
    assert "MSCCL XML does not load S13 R178 C320: the schedule has switch operations" in lines


def bounds_of(topo):
    lowering = lower_with_routes(topo)
    return bounds(lowering, make_collective("allreduce", lowering.model.ranks))


def test_msccl_xml_skips_channel_counts_its_lower_bounds_rule_out_and_only_those(
        monkeypatch):
    # allgather on 2 GPUs, 100 chunks a share, all sent in one step: on 1 channel rank 0
    # receives 100 chunks from rank 1 in one threadblock (at least 100 steps, limit 64),
    # on 2 channels 50 each: the bound cannot tell, the program is built
    from synth.export.layout import Layout
    from synth.export.msccl import (_Program, build, lane_threadblocks, surely_over,
                                    transfer_array)
    from synth.schedule.ir import Schedule, Send, Step
    from synth.topology.linkmodel import switch_rounds

    model = lower_with_routes(resolve("ring:2")).model
    sends = (Send(0, 0, 1, "copy", 100), Send(100, 1, 0, "copy", 100))
    schedule = Schedule(make_collective("allgather", 2, 100), model,
                        (Step(switch_rounds(model, [], sends), sends),)).expanded()
    verify_schedule(schedule_to_dict(schedule))
    transfers = transfer_array([list(s.sends) for s in schedule.steps])

    def over(k):
        return surely_over(transfers, k, 2, lane_threadblocks(transfers, k).sum(axis=1))

    assert over(1) == "a threadblock of rank 0 needs at least 100 steps (limit 64)"
    assert over(2) is None
    # the bound holds for the program it spares: built and ordered anyway, it breaks
    # the limit
    spared = _Program(schedule, Layout(schedule.collective, False), 1, fuse=True)
    spared.order()
    assert "steps (limit 64)" in spared.check_limits()
    assert max(len(v) for v in spared.steps.values()) >= 100
    # and the channel count found is the one found without the bounds
    found = build(schedule).k
    monkeypatch.setattr("synth.export.msccl.surely_over", lambda *args: None)
    assert build(schedule).k == found > 1


def test_msccl_xml_refuses_by_arithmetic_what_no_channel_count_can_hold(monkeypatch):
    # allgather on 2 GPUs, 4096 chunks a share in one step: rank 0 receives 4096 chunks
    # from rank 1, on at most 32 channels at least 4096 / 32 = 128 in one threadblock
    # (limit 64): refused before any channel count is counted or built (ring:1024's
    # 512-step allgather took 136 s to be told so, its 20 s limit long past)
    from synth.export.msccl import build
    from synth.schedule.ir import Schedule, Send, Step
    from synth.topology.linkmodel import switch_rounds

    model = lower_with_routes(resolve("ring:2")).model
    sends = (Send(0, 0, 1, "copy", 4096), Send(4096, 1, 0, "copy", 4096))
    schedule = Schedule(make_collective("allgather", 2, 4096), model,
                        (Step(switch_rounds(model, [], sends), sends),)).expanded()

    def counted(*args):
        raise AssertionError("a channel count was counted")

    monkeypatch.setattr("synth.export.msccl.lane_threadblocks", counted)
    with pytest.raises(BadInput, match=r"on 1 channel a threadblock of rank 0 needs at "
                                       r"least 4096 steps \(limit 64\), and on up to 32 "
                                       r"channels a threadblock of rank 0 needs at least "
                                       r"128 steps"):
        build(schedule)


def test_msccl_xml_names_its_one_channel_in_the_singular():
    # a direct broadcast on fc:70 has one chunk, so one channel at most, and its root
    # sends to 69 peers, a threadblock each (limit 64); it read "even on 1 channels"
    from synth.construct.baselines import baselines
    from synth.export.msccl import build

    model = lower_with_routes(resolve("fc:70")).model
    direct = next(b.schedule for b in baselines(model, "broadcast", 0)
                  if b.schedule.collective.num_chunks == 1)
    with pytest.raises(BadInput) as refused:
        build(direct)
    assert str(refused.value) == ("cannot export to MSCCL XML: even on 1 channel a rank "
                                  "needs 69 threadblocks (limit 64)")


# --- asking within a deadline ---------------------------------------------------------

def test_an_exporter_stops_at_its_deadline_and_nothing_is_remembered():
    import time

    from synth.deadline import Deadline, OutOfTime
    from synth.export.loads import loads_within

    ring = _ring4_allgather()
    for fmt in ("msccl-xml", "mscclpp"):
        with pytest.raises(OutOfTime):  # past the deadline before the exporter's first try
            refusal(ring, fmt, deadline=Deadline(time.monotonic() - 1))
    assert loads_within(ring, Deadline(time.monotonic() - 1)) is None  # not asked
    # the refusals above were not remembered as answers: asked in time, both load
    assert loads_within(ring, Deadline()) == {"msccl-xml": None, "mscclpp": None}


def _ring4_allgather():
    return next(b.schedule for b in baselines(lower_with_routes(resolve("ring:4")).model,
                                              "allgather", None) if b.name.startswith("ring"))


def test_an_exporters_search_gets_twice_its_paced_time_at_least_the_floor(monkeypatch):
    # a refusal tries every split into thread blocks: torus:16x16's 255-step point held
    # a 0.6 s synthesis 190 s, however far the job's deadline was. An ask is handed the
    # earlier of that deadline and twice its paced estimate (at least 10 s)
    import time

    import synth.export.loads as loads
    from synth.construct.paced import EXPORT, export_size
    from synth.deadline import Deadline, OutOfTime

    handed = []

    def searching(schedule, fmt, inplace=False, deadline=Deadline()):
        handed.append(deadline.moment)
        raise OutOfTime("exporting")  # what the exporter does at the deadline handed it

    ring = _ring4_allgather()
    monkeypatch.setattr(loads, "refusal", searching)
    forget()
    for floor in (10.0, 0.0):
        monkeypatch.setattr(loads, "ASK_FLOOR_S", floor)
        far = Deadline(time.monotonic() + 3600)
        before = time.monotonic()
        assert loads.loads_within(ring, far) is None  # not asked
        after = time.monotonic()
        limit = max(2 * EXPORT["msccl-xml"].seconds(export_size(ring)), floor)
        assert before + limit <= handed[-1] <= after + limit < far.moment
    assert handed[0] >= handed[1]  # the floor, above the small ring's estimate
    # the job's deadline, where it affords the estimate but comes before the cut (made
    # far: the margin must not depend on how fast this machine runs the lines between)
    monkeypatch.setattr(loads, "ASK_OVERRUN", 1000.0)
    near = Deadline(time.monotonic() + 100 * EXPORT["msccl-xml"].seconds(export_size(ring)))
    assert loads.loads_within(ring, near) is None and handed[-1] == near.moment


def test_points_not_asked_say_whether_the_time_limit_or_the_exporters_pace_stopped_them(
        monkeypatch):
    import time

    import synth.export.loads as loads
    from synth.deadline import Deadline

    ring = Point(_ring4_allgather(), False)
    model = lower_with_routes(resolve("ring:4")).model
    result = Result("allgather", None, model, None, [ring], candidates=[ring])
    monkeypatch.setattr(loads, "loads_within", lambda schedule, deadline, formats=(): None)
    far = with_runtimes(result, deadline=Deadline(time.monotonic() + 3600))
    assert far.points[0].loads is None
    assert far.runtimes_stopped.startswith("not asked about every point: an exporter's "
                                           "search would not fit the time left")
    passed = with_runtimes(result, deadline=Deadline(time.monotonic() - 1))
    assert passed.runtimes_stopped == ("stopped at the time limit: the runtimes' own "
                                       "points may be missing")


def _dgx1_allgather_and_a_slower_point():
    """dgx1 allgather's frontier with a point never the fastest at any size put first
    (the ring baseline, checked here by its times): (topo, result, that point)."""
    from synth.frontier import synthesize
    from synth.predict.timing import fastest

    topo = resolve("dgx1")
    result = synthesize(topo, "allgather", None, Limits(max_steps=3, time_limit=30))
    p = prices(topo)
    ring = next(b for b in baselines(result.model, "allgather") if b.name.startswith("ring"))
    slower = Point(ring.schedule, proven=False)

    def time_at(pt, n):
        return fastest(schedule_lines(pt.schedule, p), n).time_us(n)

    assert all(min(time_at(pt, n) for pt in result.points) < time_at(slower, n)
               for n in SIZES)
    return topo, replace(result, points=[slower, *result.points]), slower


def test_the_points_are_timed_before_any_runtime_is_asked_the_fastest_asked_first(
        monkeypatch):
    # at 512 GPUs asking a runtime about one point takes a minute (its program), and the
    # asking used to come first: dgx2x32 at 300 s timed 1 of its 11 points, dgxh100x64
    # none of 16, so the table answered no size. Now every point is timed first, and
    # the runtimes are asked about the fastest at some size first; a point the asking
    # did not reach is kept, not judged
    import synth.export.loads as loads
    import synth.predict.timing as timing
    from synth.deadline import Deadline

    topo, result, slower = _dgx1_allgather_and_a_slower_point()
    events, real_lines = [], timing.schedule_lines

    def timing_lines(schedule, p):
        events.append(("timed", id(schedule)))
        return real_lines(schedule, p)

    def asking(schedule, deadline, formats=()):  # as if each ask ran out of time
        events.append(("asked", id(schedule)))
        return None

    monkeypatch.setattr(timing, "schedule_lines", timing_lines)
    monkeypatch.setattr(loads, "loads_within", asking)
    judged = chosen(result, topo, "calibrated", Deadline.after(60.0))
    ids = {id(p.schedule) for p in result.points}
    first_ask = next(i for i, (kind, _) in enumerate(events) if kind == "asked")
    assert {x for kind, x in events[:first_ask] if kind == "timed"} >= ids
    asked = [x for kind, x in events if kind == "asked"]
    assert asked[-1] == id(slower.schedule) and len(set(asked)) == len(asked)  # the last
    assert judged.lines and all(id(p.schedule) in judged.lines for p in judged.points)
    assert any(p.schedule is slower.schedule and p.loads is None for p in judged.points)


def test_a_search_the_limit_stopped_is_still_said_once_every_point_is_timed():
    # timing every point (nothing left untimed) must not erase that a search ran out of
    # time: dgx2x32's job at 300 s ended without its "stopped at the time limit" line
    from synth.cost_choice import in_cost_model
    from synth.deadline import Deadline

    topo, result, _ = _dgx1_allgather_and_a_slower_point()
    stopped = in_cost_model(replace(result, out_of_time=True), topo, "calibrated",
                            deadline=Deadline.after(60.0))
    assert all(id(p.schedule) in stopped.lines for p in stopped.points)
    assert stopped.out_of_time
    calm = in_cost_model(replace(result, out_of_time=False), topo, "calibrated",
                         deadline=Deadline.after(60.0))
    assert not calm.out_of_time


def test_each_schedule_is_asked_about_once_whatever_the_walks_meet(monkeypatch):
    # the runtimes' walks meet the same points at every size: a point the time did not
    # afford was asked again each time (at 512 GPUs 560 asks past the deadline, 56 s)
    from collections import Counter

    import synth.export.loads as loads
    from synth.deadline import Deadline

    topo, result, _ = _dgx1_allgather_and_a_slower_point()
    asks = Counter()

    def asking(schedule, deadline):
        asks[id(schedule)] += 1
        return None

    monkeypatch.setattr(loads, "loads_within", asking)
    chosen(result, topo, "calibrated", Deadline.after(60.0))
    assert asks and max(asks.values()) == 1


def test_ctrl_c_while_the_points_are_timed_keeps_them_and_asks_nothing(monkeypatch):
    import synth.export.loads as loads
    import synth.predict.timing as timing
    from synth.deadline import Deadline

    topo, result, _ = _dgx1_allgather_and_a_slower_point()
    real_lines, timed, asked = timing.schedule_lines, [], []

    def interrupted_second(schedule, p):
        if timed:
            raise KeyboardInterrupt
        timed.append(schedule)
        return real_lines(schedule, p)

    monkeypatch.setattr(timing, "schedule_lines", interrupted_second)
    monkeypatch.setattr(loads, "loads_within", lambda s, d: asked.append(s))
    judged = chosen(result, topo, "calibrated", Deadline.after(60.0))
    assert not asked and judged.interrupted and judged.runtimes_stopped == "interrupted"
    assert set(judged.lines) == {id(timed[0])}
    assert {id(p.schedule) for p in judged.points} == {id(p.schedule) for p in result.points}


def test_points_too_large_to_ask_in_time_are_kept_and_written_not_asked(tmp_path,
                                                                       monkeypatch):
    import synth.construct.paced as paced
    import synth.export.loads as loads

    monkeypatch.setattr(paced, "export_size", lambda s: 10 ** 12)  # hours of programs
    monkeypatch.setattr(loads, "PROBE_S", 10.0 ** 6)  # and no time for a probe
    result = synth_main("allgather", "--topo", "ring:4", "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)["frontier"]
    assert points and all(p["file"] and p["loads"] is None for p in points)
    assert synth_main("verify", *[p["file"] for p in points]).returncode == 0


def test_a_runtime_form_is_not_started_where_its_pace_does_not_fit(monkeypatch):
    # making the form is not cut once started (at 512 GPUs 6-10 s, more past it): an ask
    # (or a probe) whose deadline does not afford it ends at once, nothing made
    import synth.construct.paced as paced
    import synth.export.loads as loads
    from synth.deadline import Deadline
    from synth.export.loads import loads_within

    made = []
    real = loads.runtime_form
    monkeypatch.setattr(loads, "runtime_form", lambda *a, **k: made.append(a) or real(*a, **k))
    from contextlib import nullcontext
    never = type("Never", (), {"seconds": lambda self, units: 10.0 ** 9,
                               "timing": lambda self, units: nullcontext()})()
    monkeypatch.setattr(paced, "FORM", never)
    schedule = baselines(lower_with_routes(resolve("ring:4")).model, "allgather")[0].schedule
    forget()
    assert loads_within(schedule, Deadline.after(60.0)) is None and made == []
    assert loads_of(schedule) == {"msccl-xml": None, "mscclpp": None}  # no deadline
    assert made


def test_an_estimate_past_the_time_left_still_gets_a_short_probe(tmp_path, monkeypatch):
    # an estimate that does not fit (MSCCL XML at 512 GPUs: 157 s, where its refusal by
    # arithmetic takes 16 s) no longer leaves a point unasked: the exporter gets
    # PROBE_S, and ring:4's answers come well within that
    import synth.construct.paced as paced

    never = type("Never", (), {"seconds": lambda self, units: 10.0 ** 9})()
    monkeypatch.setattr(paced, "EXPORT", {fmt: never for fmt in RUNTIMES})
    result = synth_main("allgather", "--topo", "ring:4", "--out", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    points = json.loads(result.stdout)["frontier"]
    assert points and all(p["loads"] == "both" for p in points)


@pytest.mark.parametrize("name", ["gather", "scatter"])
def test_gather_and_scatter_are_not_marked_loadable_in_msccl_xml(name, tmp_path):
    # the refusal was only in the XML text's making, so the table said "both" and the
    # same run then wrote no XML file (exit 2)
    run = synth_main(name, "--topo", "ring:4", "--root", "1", "--time-limit", "10",
                     "--out", tmp_path, "--json")
    assert run.returncode == 0, run.stderr
    points = json.loads(run.stdout)["frontier"]
    assert points and all(p["loads"] == "MSCCL++" for p in points)
    assert all(p["not_loaded"]["msccl-xml"]["why"].startswith(
        f"cannot export {name} to MSCCL XML: no runtime runs such a file") for p in points)


def test_the_table_is_never_slower_at_a_size_than_the_fastest_candidate(monkeypatch):
    # dgxh100x2's allreduce, constructions only: line-rate frontier points beat some
    # candidates on both line-rate costs and are slower than them at every size in cost
    # model 2. Those joined only as a runtime's own points, once every frontier point was
    # asked about, and a 30 s limit left no time for that on dgx2x4 (its 2.24 x point at
    # 1 MB gone). Here no runtime is ever answered in time, as at such a limit.
    import synth.export.loads as loads_module
    from synth.frontier import synthesize
    from synth.predict.timing import fastest

    topo = resolve("dgxh100x2")
    result = synthesize(topo, "allreduce", limits=Limits(time_limit=60), method="constructed")
    p = prices(topo)

    def best(points, n):
        return min(fastest(schedule_lines(x.schedule, p), n).time_us(n) for x in points)

    monkeypatch.setattr(loads_module, "loads_within", lambda *a, **k: None)
    got = chosen(result, topo, "calibrated")
    for n in SIZES:
        assert best(got.points, n) <= best(result.candidates + result.points, n) * (1 + 1e-9)
    for point in got.points:  # every one joined verified
        verify_schedule(schedule_to_dict(point.schedule))


def test_the_table_reads_what_the_size_answer_asked_after_the_tables_asking():
    # gb200nvl72 at --time-limit 20 --size 1MB: the direct point read "?" in the table
    # while the answer below it had asked both runtimes (MSCCL XML: 71 threadblocks)
    from synth.cli.summary import loads_learned

    model = lower_with_routes(resolve("ring:4")).model
    ring = next(b.schedule for b in baselines(model, "allgather") if b.name.startswith("ring"))
    result = Result("allgather", None, model, None, [Point(ring, False)])
    assert loads_learned(result).points[0].loads is None  # no runtime asked yet
    assert refusal(ring, "msccl-xml") is None  # as the answer asks: each remembers
    assert loads_learned(result).points[0].loads is None  # one runtime is not all
    assert refusal(ring, "mscclpp") is None
    assert loads_learned(result).points[0].loads == {"msccl-xml": None, "mscclpp": None}


def test_a_pipelines_runtime_file_is_priced_as_its_batch_program(monkeypatch, tmp_path):
    # the file holds the batch program once, however many batches (dgx2x4's 125-batch
    # point: 0.9 s, as its 1-batch one); priced by every batch, a 60 s job left four
    # points' files unwritten at 27 s. Here a file priced a batch at a time fits the
    # deadline, and priced by every batch it would not
    import synth.deadline
    from synth.construct import paced
    from synth.deadline import Deadline, Pace
    from synth.output import write_points
    from synth.search.pareto import Point

    pipelined = ring_tree_pipeline()
    batch, every = paced.export_size(pipelined), paced.export_size(pipelined) * \
        pipelined.batches
    assert pipelined.batches > 2
    monkeypatch.setattr(synth.deadline, "_PACES", [])
    pace = Pace(1.0, least=1)
    pace.record(1, 20.0 / (batch + every))  # measured: the limit falls between the two
    monkeypatch.setitem(paced.WRITE, "mscclpp", pace)
    deadline = Deadline.after(20.0 * 2 * batch / (batch + every))
    assert deadline.affords(pace.seconds(batch)) and not deadline.affords(pace.seconds(every))
    missed = []
    paths = write_points([Point(pipelined, False)], tmp_path / "ring_4" / "allgather", ["mscclpp"],
                         deadline=deadline, missed=missed)
    assert missed == [] and paths[0].name.endswith(".mscclpp.json")
    check_mscclpp_plan(json.loads(paths[0].read_text()))


def test_msccl_xml_orders_no_program_whose_ops_alone_break_a_limit(monkeypatch):
    # dgxh100's allreduce trees on 1 channel: a threadblock of rank 0 holds 72 ops (limit
    # 64 steps), which the transfers' bound cannot see (no peer sends it 64 chunks);
    # ordering such a program ends refused anyway, and at 512 GPUs took 5-11 s and up
    # to 2 GB of memory per channel count (dgxh100x64's 9-step tree pipeline, 1 to 6)
    import synth.export.msccl as msccl
    from synth.construct.tree_schedules import tree_search
    from synth.export import runtime_form
    from synth.export.layout import Layout, drop_redundant
    from synth.export.msccl import to_msccl_xml

    model = lower_with_routes(resolve("dgxh100")).model
    point = min(tree_search(model, "allreduce", None, Limits()).points,
                key=lambda p: p.steps)
    batch, _ = runtime_form(point.schedule)
    transfers = msccl.transfer_array(drop_redundant(batch.collective, batch.steps))
    per_rank = msccl.lane_threadblocks(transfers, 1).sum(axis=1)
    assert msccl.surely_over(transfers, 1, 8, per_rank) is None
    program = msccl._Program(batch, Layout(batch.collective, False), 1, fuse=True)
    assert program.check_limits() == (  # before its order
        "a threadblock of rank 0 needs at least 72 steps (limit 64)")
    program.order()  # the bound holds: ordered, the program breaks the limit
    assert program.check_limits() == "a threadblock of rank 0 needs 72 steps (limit 64)"

    ordered, order, check = [], msccl._Program.order, msccl._Program.check_limits
    monkeypatch.setattr(msccl._Program, "order",
                        lambda self: (ordered.append(self.k), order(self))[1])
    spared = to_msccl_xml(point.schedule)
    assert ordered and 1 not in ordered  # 1 channel: refused before its order
    # the same file as when every program is ordered before it is judged
    monkeypatch.setattr(msccl._Program, "check_limits",
                        lambda self: check(self) if self.steps is not None else None)
    ordered.clear()
    assert to_msccl_xml(point.schedule) == spared and ordered[0] == 1


def test_msccl_xml_refuses_by_its_ops_a_rank_whose_xml_would_pass_the_parser(
        monkeypatch):
    # allgather on 2 GPUs out of place, 600 chunks a share, all in one step: a rank
    # copies its 600 chunks to its output, sends them and receives 600 (none forwarded:
    # nothing to fuse), 1800 ops, so its part of the XML has at least 1 + 2 + k + 1800
    # elements on k channels (the parser takes 1024). The transfers' bound counts the
    # larger side of the transfers alone (3 + k + 600), and passes every channel count
    # from 10 (below it, 600 / k > 64 steps); each is refused by its ops, none ordered
    import re

    import synth.export.msccl as msccl
    from synth.export.layout import Layout
    from synth.schedule.ir import Schedule, Send, Step
    from synth.topology.linkmodel import switch_rounds

    model = lower_with_routes(resolve("ring:2")).model
    sends = (Send(0, 0, 1, "copy", 600), Send(600, 1, 0, "copy", 600))
    schedule = Schedule(make_collective("allgather", 2, 600), model,
                        (Step(switch_rounds(model, [], sends), sends),)).expanded()
    verify_schedule(schedule_to_dict(schedule))
    transfers = msccl.transfer_array([list(s.sends) for s in schedule.steps])
    for k in range(10, 33):
        per_rank = msccl.lane_threadblocks(transfers, k).sum(axis=1)
        assert msccl.surely_over(transfers, k, 2, per_rank) is None
    ordered = []
    monkeypatch.setattr(msccl._Program, "order", lambda self: ordered.append(self.k))
    with pytest.raises(BadInput, match=r"on up to 32 channels a rank's part of the XML "
                                       r"has at least 1835 elements \(the parser takes "
                                       r"1024\)"):
        msccl.build(schedule)
    assert ordered == []
    monkeypatch.undo()  # the bound holds: ordered, the program is over the limit too
    program = msccl._Program(schedule, Layout(schedule.collective, False), 32, True)
    program.order()
    said = re.fullmatch(r"a rank's part of the XML has (\d+) elements \(the parser takes "
                        r"1024\)", program.check_limits())
    assert said and int(said.group(1)) >= 1835
