"""Exporters (MSCCL XML, MSCCL++ plan) and their runtime simulators.

Every schedule synthesis writes for ring:4 and dgx1 is exported both ways and run
through the simulators; the simulators accept the reference examples and reject
broken programs; multi-node schedules (dgx2x2, dgxh100x2) export to MSCCL++ plans with
port channels between boxes, and the plan simulator's port-channel rules; the export
command and --format at synthesis time.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from synth.errors import BadInput
from synth.export import msccl as msccl_export
from synth.export import mscclpp as mscclpp_export
from synth.export import render
from synth.export.layout import Layout, Slot
from synth.export.msccl import to_msccl_xml
from synth.export.msccl_sim import MscclInvalid, check_msccl_xml
from synth.export.mscclpp import IN_PLACE, to_mscclpp_plan
from synth.export.mscclpp_sim import PlanInvalid, check_mscclpp_plan
from synth.frontier import synthesize
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict, write_schedule
from synth.output_folder import MANIFEST, MARKER, owner_text, record
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.shared_frontiers import synthesized

TOPOLOGIES = ("ring:4", "dgx1")
COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall",
         "gather", "scatter")
CASES = [(t, c) for t in TOPOLOGIES for c in COLLS]


@pytest.fixture(scope="module")
def frontier():
    """frontier(topo, collective) -> the schedules synthesis writes (cached)."""
    cache = {}

    def get(topo, name):
        if (topo, name) not in cache:
            result = synthesized(topo, name)  # shared with test_runner, test_synthesis
            assert result.points
            cache[(topo, name)] = [p.schedule for p in result.points]
        return cache[(topo, name)]
    return get


def modes(name):
    return (False,) if name == "alltoall" else (False, True)


# --- every synthesized schedule, both exporters ---------------------------------------

@pytest.mark.parametrize("topo,name", CASES)
def test_msccl_xml_of_every_frontier_schedule_runs(frontier, topo, name):
    if name in ("gather", "scatter"):  # no runtime runs these as the file would mean
        with pytest.raises(BadInput, match="no runtime runs such a file"):
            to_msccl_xml(frontier(topo, name)[0])
        return
    for schedule in frontier(topo, name):
        coll = schedule.collective
        for inplace in modes(name):
            text = to_msccl_xml(schedule, inplace=inplace)
            report = check_msccl_xml(text, root=coll.root)
            assert (report["collective"], report["ranks"], report["chunks"]) == \
                (name, coll.ranks, coll.chunks)
            assert report["inplace"] == inplace
            assert report["max_steps_per_threadblock"] <= 64


@pytest.mark.parametrize("topo,name", CASES)
def test_mscclpp_plan_of_every_frontier_schedule_runs(frontier, topo, name):
    for schedule in frontier(topo, name):
        for inplace in (False, True) if name in IN_PLACE else (False,):
            plan = json.loads(json.dumps(to_mscclpp_plan(schedule, inplace=inplace)))
            report = check_mscclpp_plan(plan, root=schedule.collective.root)
            assert report["max_ops_per_threadblock"] <= 64
            assert plan["inplace"] is inplace and plan["collective"] == name


@pytest.mark.parametrize("name", ["allgather", "gather"])
def test_mscclpp_refuses_in_one_line_a_send_of_a_chunk_its_rank_does_not_hold(frontier,
                                                                           name):
    """A library caller's unverified schedule: a first step where rank 1 sends rank 3
    a chunk it does not hold at the start. Where each value lives is a list for
    allgather and a dict for gather; both say which send, not a TypeError later."""
    from dataclasses import replace

    from synth.schedule.ir import Send, Step

    schedule = frontier("ring:4", name)[0]
    coll = schedule.collective
    chunk = min(k for k in range(coll.num_chunks) if (1, k) not in set(coll.pre))
    broken = replace(schedule, steps=(Step(1, (Send(chunk, 1, 3),)),) + schedule.steps)
    with pytest.raises(BadInput) as refused:
        to_mscclpp_plan(broken)
    assert str(refused.value) == (f"cannot export to MSCCL++: rank 1 sends chunk {chunk} "
                                  "in step 0 without holding it (not a valid schedule: "
                                  "synth verify says more)")


@pytest.mark.parametrize("fmt", ["msccl-xml", "mscclpp"])
def test_a_render_done_once_keeps_no_program_and_writes_the_same(frontier, fmt):
    from synth.export import loads

    schedule = frontier("dgx1", "allreduce")[-1]
    loads.forget()
    kept = render(schedule, fmt)
    assert loads._programs  # kept for the next render of this batch program
    assert render(schedule, fmt, once=True) == kept  # from what was kept
    assert not loads._programs and not loads._last_form  # synth export: nothing kept
    assert render(schedule, fmt, once=True) == kept  # made afresh
    assert not loads._programs and not loads._last_form


def test_synth_export_renders_once(frontier, tmp_path, monkeypatch):
    import synth.export
    from tests.in_process import synth_main

    src = write_schedule(frontier("dgx1", "allgather")[-1], tmp_path / "ag.json")
    asked = []
    real = synth.export.render
    monkeypatch.setattr(synth.export, "render",
                        lambda *a, **k: asked.append(k.get("once")) or real(*a, **k))
    run = synth_main("export", src, "--to", "mscclpp", "-o", tmp_path / "ag.mscclpp.json")
    assert run.returncode == 0 and asked == [True]


def test_the_memory_a_plans_check_needs_is_its_text_and_its_clocks():
    from synth.export.mscclpp_sim import memory_needed

    # 14 bytes a byte of text; two clocks a thread block, an entry per thread block:
    # uint8 while 2 launches x (64 ops + 1) < 256, uint16 past it
    assert memory_needed(1000, 10, 64) == 14 * 1000 + 2 * 10 * 10 * 1
    assert memory_needed(1000, 10, 200) == 14 * 1000 + 2 * 10 * 10 * 2


def test_the_memory_an_xmls_check_needs_is_its_text_and_a_clock_per_threadblock_and_dependency():
    from synth.export.msccl_sim import memory_needed

    # 16 bytes a byte of text; a clock (an entry per threadblock) per threadblock, per
    # message in flight (one a threadblock) and per step depended on; uint8 up to 255
    assert memory_needed(1000, 10, 5) == 16 * 1000 + (2 * 10 + 5) * 10 * 1
    assert memory_needed(1000, 10, 5, most_steps=300) == 16 * 1000 + (2 * 10 + 5) * 10 * 2


@pytest.mark.parametrize("spec,name", [("dgx1", "allreduce"), ("dgx1", "allgather"),
                                       ("switch:64", "alltoall")])
def test_the_xml_checks_memory_estimate_is_not_below_what_it_takes(spec, name):
    import tracemalloc

    from synth.export.msccl_sim import PER_TEXT_BYTE, memory_needed

    result = synthesize(resolve(spec), name, limits=Limits(time_limit=60),
                        method="constructed")
    clocks_count = False
    for point in result.points:
        try:
            text, _ = render(point.schedule, "msccl-xml", check=False)
        except BadInput:
            continue
        tracemalloc.start()
        try:
            check_msccl_xml(text)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert memory_needed(len(text), text.count("<tb "), text.count('hasdep="1"')) >= peak
        clocks_count |= PER_TEXT_BYTE * len(text) < peak
    # switch:64's alltoall: 4,032 threadblocks, whose clocks are most of the check
    assert clocks_count == (spec == "switch:64")


def test_available_memory_is_read_from_meminfo(tmp_path):
    from synth.memory import available_bytes

    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24000000 kB\nMemAvailable:    1500 kB\n")
    assert available_bytes(str(info)) == 1500 * 1024
    info.write_text("MemTotal:       24000000 kB\n")
    assert available_bytes(str(info)) is None
    assert available_bytes(str(tmp_path / "none")) is None


@pytest.mark.parametrize("fmt,ext,what", [("mscclpp", ".mscclpp.json", "MSCCL++ plan"),
                                          ("msccl-xml", ".xml", "MSCCL XML")])
def test_a_file_whose_check_would_not_fit_in_memory_is_refused_in_one_line(
        frontier, tmp_path, monkeypatch, fmt, ext, what):
    import synth.memory
    from tests.in_process import synth_main

    schedule = frontier("dgx1", "allreduce")[-1]
    src = write_schedule(schedule, tmp_path / "ar.json")
    monkeypatch.setattr(synth.memory, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    with pytest.raises(BadInput, match=r"would take about .* GiB of memory, and this "
                                       r"machine has 0\.0 GiB free"):
        render(schedule, fmt)
    run = synth_main("export", src, "--to", fmt, "-o", tmp_path / f"ar{ext}")
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert f"not exported: simulating the {what} before writing it" in run.stderr
    assert not (tmp_path / f"ar{ext}").exists()
    monkeypatch.setattr(synth.memory, "available_bytes", lambda: None)  # not Linux
    assert render(schedule, fmt)[0]


def test_fused_step_types_appear(frontier):
    types = {}
    for topo, name in [("ring:4", "allgather"), ("ring:4", "reduce"), ("dgx1", "allreduce")]:
        for schedule in frontier(topo, name):
            for kind, n in check_msccl_xml(to_msccl_xml(schedule), root=schedule.collective.root
                                           )["step_types"].items():
                types[kind] = types.get(kind, 0) + n
    assert types.get("rcs") and types.get("rrs") and types.get("rrcs")


def test_xml_keeps_the_loader_habits(frontier):
    schedule = frontier("ring:4", "broadcast")[0]
    text = to_msccl_xml(schedule)
    assert not text.startswith("<?xml") and "'" not in text
    algo = re.search(r"<algo [^>]*>", text).group(0)
    for attr in ("outofplace=\"1\"", "inplace=\"0\"", "minBytes=\"0\"", "maxBytes=\"0\"",
                 "coll=\"broadcast\"", "ngpus=\"4\"", "proto=\"Simple\""):
        assert attr in algo
    for line in text.splitlines():
        if "<step " in line:
            for attr in ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid",
                         "deps", "hasdep"):
                assert f' {attr}="' in line


def test_layout_maps_global_chunks_onto_buffers():
    ag = Layout(make_collective("allgather", 4, 2), inplace=False)
    assert (ag.i_chunks, ag.o_chunks, ag.loop_chunks) == (2, 8, 8)
    assert ag.init_slot(1, 3) == Slot("i", 1) and ag.init_slot(0, 3) is None
    assert ag.out_slot(0, 3) == Slot("o", 3)
    ag_ip = Layout(make_collective("allgather", 4, 2), inplace=True)
    assert ag_ip.i_chunks == 0 and ag_ip.init_slot(1, 3) == Slot("o", 3)
    rs_ip = Layout(make_collective("reducescatter", 4, 2), inplace=True)
    assert rs_ip.o_chunks == 0 and rs_ip.out_slot(1, 3) == Slot("i", 3)
    a2a = Layout(make_collective("alltoall", 3, 1), inplace=False)
    k = (2 * 3 + 1) * 1  # from rank 2 to rank 1
    assert a2a.init_slot(2, k) == Slot("i", 1) and a2a.out_slot(1, k) == Slot("o", 2)
    assert a2a.loop_chunks == 3
    with pytest.raises(BadInput, match="in-place"):
        Layout(make_collective("alltoall", 3, 1), inplace=True)


# --- limits: split across channels / thread blocks, or refuse --------------------------

def test_xml_splits_across_channels_then_refuses(frontier, monkeypatch):
    schedule = frontier("dgx1", "allgather")[-1]  # 48 chunks
    monkeypatch.setattr(msccl_export, "MAX_STEPS", 12)
    text = to_msccl_xml(schedule)
    report = check_msccl_xml(text, max_steps=12)
    assert report["channels"] > 1 and report["max_steps_per_threadblock"] <= 12
    monkeypatch.setattr(msccl_export, "MAX_STEPS", 1)
    with pytest.raises(BadInput, match="cannot export to MSCCL XML"):
        to_msccl_xml(schedule)


def test_plan_splits_into_thread_blocks_then_refuses(frontier, monkeypatch):
    # a point whose plan has a thread block of more than 30 ops (the 5-step point of 16
    # chunks has 39); which points the frontier holds depends on the time the search got
    def most_ops(schedule):
        plan = to_mscclpp_plan(schedule)
        return max(len(tb["ops"]) for g in plan["gpus"] for tb in g["threadblocks"])

    schedule = next(s for s in frontier("dgx1", "allreduce") if most_ops(s) > 30)
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 30)
    plan = to_mscclpp_plan(schedule)
    assert len(plan["gpus"][0]["threadblocks"]) > 1
    assert all(len(tb["ops"]) <= 30 for g in plan["gpus"] for tb in g["threadblocks"])
    check_mscclpp_plan(plan)
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 4)
    with pytest.raises(BadInput, match="cannot export to MSCCL\\+\\+"):
        to_mscclpp_plan(schedule)


def test_asking_whether_a_plan_exists_tries_one_lane_then_the_most(frontier, monkeypatch):
    # the 5-step point of 16 chunks has a thread block of 39 ops on one lane: over 30,
    # a plan needs more lanes; the full search doubles them, the ask jumps to the most
    from synth.export.form import runtime_form

    schedule = next(s for s in frontier("dgx1", "allreduce") if s.collective.chunks >= 4
                    and max(len(tb["ops"]) for g in to_mscclpp_plan(s)["gpus"]
                            for tb in g["threadblocks"]) > 30)
    form, _ = runtime_form(schedule)
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 30)
    tried = []
    real = mscclpp_export._Plan.finish
    monkeypatch.setattr(mscclpp_export._Plan, "finish",
                        lambda plan, *enough: tried.append(plan.t) or real(plan, *enough))
    asked = mscclpp_export.build(form, fewest=False)
    most = min(form.collective.num_chunks, mscclpp_export.MAX_LANES)
    assert tried == [1, most]
    assert all(len(ops) <= 30 for ops in asked.ops.values())
    tried.clear()
    fewest = mscclpp_export.build(form)  # the export's own search finds a plan too
    assert tried[:2] == [1, 2] and fewest.t < most
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 4)
    for search in (True, False):  # and where none fits, both refuse
        with pytest.raises(BadInput, match="cannot export to MSCCL\\+\\+"):
            mscclpp_export.build(form, fewest=search)


def test_a_refused_try_stops_making_ops_and_the_search_tries_the_same_lanes(frontier,
                                                                           monkeypatch):
    # at 4 ops a thread block no split of the dgx1 allreduce fits: each refused try makes
    # ops only until its search has what it asks (that it fails; while lanes double, that
    # its longest is past the one before), and the search tries the same lane counts,
    # with the same answer, as making every op would
    from synth.export.form import runtime_form

    schedule = next(s for s in frontier("dgx1", "allreduce") if s.collective.chunks >= 4)
    form, _ = runtime_form(schedule)
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 4)
    real = mscclpp_export._Plan.finish

    def searched(fewest, whole):
        made = []

        def finish(plan, enough=float("inf"), ranks=None):
            why = real(plan, float("inf") if whole else enough, ranks)
            made.append((plan.t, plan.cap, len(plan.ops), why is None))
            return why

        monkeypatch.setattr(mscclpp_export._Plan, "finish", finish)
        with pytest.raises(BadInput, match="no split into thread blocks"):
            mscclpp_export.build(form, fewest=fewest)
        return made

    for fewest in (True, False):
        cut, whole = searched(fewest, False), searched(fewest, True)
        assert [m[:2] for m in cut] == [m[:2] for m in whole]
        assert not any(m[3] for m in cut + whole)
        assert all(c[2] <= w[2] for c, w in zip(cut, whole))
        if not fewest:  # the ask's jump to the most lanes needs only that it fails
            assert sum(m[2] for m in cut) < sum(m[2] for m in whole)


def test_a_plan_is_made_rank_by_rank_and_a_refused_one_only_up_to_the_rank_over(
        monkeypatch):
    # torus:4x4's trees (no switch operations): a try makes a rank's thread blocks and
    # hand-offs only as its ops are asked for, so at 8 ops a thread block the refusal
    # made rank 0 alone; made all at once (as plans with switch operations are), the
    # plan says the same, and a plan that fits has the same ops either way
    from synth.construct.tree_schedules import tree_search
    from synth.export.form import runtime_form
    from synth.export.layout import Layout
    from synth.export.mscclpp import _Plan
    from synth.export.mscclpp_flow import _Flow
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower_with_routes

    model = lower_with_routes(resolve("torus:4x4")).model
    form, _ = runtime_form(tree_search(model, "allgather", None, Limits()).points[0].schedule)
    layout = Layout(form.collective, False)
    flow = _Flow(form, layout)

    def made(at_once):
        plan = _Plan(flow, layout, None, 1, 16)
        if at_once:
            plan._thread_blocks(range(layout.n), flow.steps)
            plan._handoffs([(t, *step) for t, step in enumerate(flow.steps)], flow.epilogue)
            plan.pending.clear()
        return plan, plan.finish(enough=0)  # as build's tries: stop once a limit fails

    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 8)
    (lazy, why), (whole, said) = made(False), made(True)
    assert why == said == "a thread block of rank 0 needs 35 ops (limit 8)"
    assert {r for r, tbs in lazy.tbs.items() if tbs} == {0}
    assert len([r for r, tbs in whole.tbs.items() if tbs]) == 16
    monkeypatch.setattr(mscclpp_export, "MAX_OPS", 64)
    (lazy, why), (whole, said) = made(False), made(True)
    assert why is None and said is None
    assert lazy.ops == whole.ops and len(lazy.ops) >= 16
    assert lazy.channels == whole.channels and lazy.semaphores == whole.semaphores
    assert lazy.remote == whole.remote


@pytest.mark.parametrize("name, limits", [("allreduce", (14,)), ("allgather", (8, 9))])
def test_an_ask_and_the_export_agree_on_whether_a_plan_exists(name, limits, monkeypatch):
    # dgx1's recursive halving-doubling at 14 ops a thread block: the ask found a plan on
    # 8 lanes while the export's doubling stopped at 2 (22 ops on 1 lane and on 2) and
    # refused; the table said MSCCL++ loads a point whose file it then could not write
    from synth.construct.baselines import baselines
    from synth.export.form import runtime_form

    model = lower_with_routes(resolve("dgx1")).model
    forms = [runtime_form(b.schedule)[0] for b in baselines(model, name)]
    for most_ops in limits:  # where the two disagreed before a3fb6ba
        monkeypatch.setattr(mscclpp_export, "MAX_OPS", most_ops)
        for form in forms:
            found = []
            for fewest in (False, True):
                try:
                    mscclpp_export.build(form, fewest=fewest)
                    found.append(True)
                except BadInput:
                    found.append(False)
            assert found[0] == found[1], (form.info, most_ops)


def test_unsupported_forms_are_refused(frontier):
    with pytest.raises(BadInput, match="alltoall has no in-place form"):
        to_msccl_xml(frontier("ring:4", "alltoall")[0], inplace=True)
    with pytest.raises(BadInput, match="reducescatter in place to MSCCL\\+\\+"):
        to_mscclpp_plan(frontier("ring:4", "reducescatter")[0], inplace=True)
    with pytest.raises(BadInput, match="name"):
        render(frontier("ring:4", "allgather")[0], "msccl-xml", name='bad"name')


# --- the MSCCL++ plan's structure, (docs/runtimes.md) -------------------------------

def test_plan_structure(frontier):
    schedule = frontier("ring:4", "allreduce")[-1]
    plan = json.loads(render(schedule, "mscclpp")[0])
    types = {"name": str, "collective": str, "protocol": str, "inplace": bool, "gpus": list,
             "reuse_resources": bool, "use_double_scratch_buffer": bool,
             "num_threads_per_block": int, "buffer_alignment": int,
             "min_message_size": int, "max_message_size": int}
    for key, kind in types.items():
        assert isinstance(plan[key], kind), key
    assert plan["protocol"] == "Simple" and plan["reuse_resources"] is False
    assert plan["use_double_scratch_buffer"] is False and plan["buffer_alignment"] == 16
    assert plan["max_message_size"] * 4 < 2 ** 34  # offsets fit 32 bits
    chunks = {(g["input_chunks"], g["output_chunks"], g["scratch_chunks"]) for g in plan["gpus"]}
    assert len(chunks) == 1 and min(next(iter(chunks))[:2]) >= 1
    for k, gpu in enumerate(plan["gpus"]):
        assert gpu["id"] == k
        for key in ("channels", "remote_buffers", "threadblocks"):
            assert isinstance(gpu[key], list)
        peers = [p for ch in gpu["channels"] for p in ch["connected_to"]]
        for p in set(peers):  # declared symmetrically
            other = [q for ch in plan["gpus"][p]["channels"] for q in ch["connected_to"]]
            assert peers.count(p) == other.count(k)
        for rb in gpu["remote_buffers"]:
            assert rb["rank"] != k and rb["type"] in "ios" and rb["access_channel_types"] == ["memory"]
        for j, tb in enumerate(gpu["threadblocks"]):
            assert tb["id"] == j and tb["ops"] and len(tb["ops"]) <= 64
            for op in tb["ops"]:
                assert op["name"] in {"nop", "put", "signal", "wait", "rlxsignal", "rlxwait",
                                      "re", "copy"}
                if any("buffer_id" in e for e in op.get("dst_buff", [])):
                    assert op["channel_type"] == "memory"
                if op["name"] == "put":
                    assert len(op["src_buff"]) == len(op["dst_buff"]) <= 8
                    assert len({e["type"] for e in op["src_buff"]}) == 1


# --- the simulators: reference examples pass, broken programs fail ----------------------

def ring_xml(n=4, drop=None):
    """msccl-xml.md's reference ring allgather, in place; drop=(gpu, step) removes one."""
    lines = [f'<algo name="ring" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="{n}" '
             'coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">']
    for r in range(n):
        lines.append(f'<gpu id="{r}" i_chunks="0" o_chunks="{n}" s_chunks="0">')
        lines.append(f'<tb id="0" send="{(r + 1) % n}" recv="{(r - 1) % n}" chan="0">')
        kinds = [(s, "s" if s == 0 else "r" if s == n - 1 else "rcs") for s in range(n)]
        kinds = [k for k in kinds if (r, k[0]) != drop]
        for i, (s, kind) in enumerate(kinds):
            off = (r - s) % n
            lines.append(f'<step s="{i}" type="{kind}" srcbuf="o" srcoff="{off}" dstbuf="o" '
                         f'dstoff="{off}" cnt="1" depid="-1" deps="-1" hasdep="0"/>')
        lines += ["</tb>", "</gpu>"]
    return "\n".join(lines + ["</algo>"])


def ring_plan(n=4):
    """The MSCCL++ format's reference ring allgather plan (an example of its documentation)."""
    mem = {"channel_type": "memory"}
    gpus = []
    for r in range(n):
        ops = [{"name": "nop"}, dict(mem, name="rlxsignal", channel_ids=[0]), {"name": "nop"},
               dict(mem, name="rlxwait", channel_ids=[1]), {"name": "nop"}]
        for s in range(n - 1):
            c = (r - s) % n
            ops += [dict(mem, name="put", src_buff=[{"type": "o", "index": c, "size": 1}],
                         dst_buff=[{"buffer_id": 0, "index": c, "size": 1}]),
                    {"name": "nop"}, dict(mem, name="signal", channel_ids=[1]),
                    dict(mem, name="wait", channel_ids=[0]), {"name": "nop"}]
        gpus.append({"id": r, "input_chunks": 1, "output_chunks": n, "scratch_chunks": 0,
                     "channels": [dict(mem, connected_to=[(r - 1) % n, (r + 1) % n])],
                     "remote_buffers": [{"rank": (r + 1) % n, "type": "o",
                                         "access_channel_types": ["memory"]}],
                     "semaphores": [],
                     "threadblocks": [{"id": 0, "channels": [dict(mem, channel_ids=[0, 1])],
                                       "remote_buffer_refs": [{"access_channel_type": "memory",
                                                               "remote_buffer_ids": [0]}],
                                       "ops": ops}]})
    return {"name": "ring_allgather_4gpus", "collective": "allgather", "protocol": "Simple",
            "inplace": True, "reuse_resources": False, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": 0, "max_message_size": 1 << 30, "gpus": gpus}


def test_simulators_accept_the_reference_examples():
    report = check_msccl_xml(ring_xml())
    assert report["step_types"] == {"s": 4, "rcs": 8, "r": 4}
    assert check_mscclpp_plan(ring_plan())["max_ops_per_threadblock"] == 20


def test_the_xml_simulator_runs_threadblocks_past_eight_bit_clocks():
    # a ring of 300 ranks: each threadblock's 300 steps run past 255, so (given a step
    # limit that allows them) the clocks must widen
    report = check_msccl_xml(ring_xml(300), max_steps=300)
    assert report["max_steps_per_threadblock"] == 300


def test_xml_missing_receive_deadlocks():
    with pytest.raises(MscclInvalid, match="deadlock"):
        check_msccl_xml(ring_xml(drop=(0, 1)))


def test_xml_send_out_of_range_is_rejected():
    text = ring_xml().replace('type="s" srcbuf="o" srcoff="0"', 'type="s" srcbuf="o" srcoff="4"')
    with pytest.raises(MscclInvalid, match="outside the o buffer"):
        check_msccl_xml(text)


def test_xml_wrong_dependencies_are_rejected(frontier):
    schedule = frontier("ring:4", "allreduce")[-1]
    lines = to_msccl_xml(schedule).splitlines()
    deps = [i for i, line in enumerate(lines) if re.search(r'depid="\d', line)]
    assert deps
    for i in deps:  # every dependency the exporter writes is needed
        broken = lines[:i] + [re.sub(r'depid="\d+" deps="\d+"', 'depid="-1" deps="-1"',
                                     lines[i])] + lines[i + 1:]
        with pytest.raises(MscclInvalid):
            check_msccl_xml("\n".join(broken))
    i = deps[0]  # pointing at a step nobody marked
    broken = lines[:i] + [re.sub(r'deps="\d+"', 'deps="0"', lines[i])] + lines[i + 1:]
    with pytest.raises(MscclInvalid, match="hasdep|unordered|no data|deadlock"):
        check_msccl_xml("\n".join(broken))


def test_a_sum_counting_a_contribution_twice_is_a_wrong_result(frontier):
    # a rank's reduction given its own destination as the source: o[k] + o[k] counts
    # every contribution already there twice, which no later sum can undo
    schedule = frontier("ring:4", "allreduce")[-1]
    lines = to_msccl_xml(schedule).splitlines()
    i = next(i for i, line in enumerate(lines) if 'type="re" srcbuf="s"' in line)
    dst = re.search(r'dstbuf="(\w)" dstoff="(\d+)"', lines[i])
    lines[i] = re.sub(r'srcbuf="s" srcoff="\d+"',
                      f'srcbuf="{dst[1]}" srcoff="{dst[2]}"', lines[i])
    twice = r"= a sum counting \d+:\d+ twice, of \{[0-9:, ]+\}, expected"
    with pytest.raises(MscclInvalid, match=twice):
        check_msccl_xml("\n".join(lines))

    plan = json.loads(render(schedule, "mscclpp")[0])
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    op = next(op for op in ops if op["name"] == "re" and op["src_buff"][0] == op["dst_buff"][0])
    op["src_buff"][1] = dict(op["dst_buff"][0])
    with pytest.raises(PlanInvalid, match=twice):
        check_mscclpp_plan(plan)


def test_the_plan_simulator_runs_launches_past_eight_bit_clocks(frontier):
    # clocks count a thread block's ops, launch after launch: 20 launches of 24 ops run
    # past 255, so the clocks must widen (they are as narrow as the count allows)
    plan = json.loads(render(frontier("ring:4", "allreduce")[-1], "mscclpp")[0])
    report = check_mscclpp_plan(plan, launches=20)
    assert report["max_ops_per_threadblock"] == 24


def test_xml_dependency_cycle_deadlocks():
    # gpu 0's first step waits on a copy of a second threadblock that waits on it
    first = ('<step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" '
             'depid="-1" deps="-1" hasdep="0"/>')
    text = ring_xml().replace(first, first.replace('depid="-1" deps="-1" hasdep="0"',
                                                   'depid="1" deps="0" hasdep="1"'), 1)
    text = text.replace('</tb>\n</gpu>\n<gpu id="1"',
                        '</tb>\n<tb id="1" send="-1" recv="-1" chan="0">\n'
                        '<step s="0" type="cpy" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" '
                        'cnt="1" depid="0" deps="0" hasdep="1"/>\n</tb>\n</gpu>\n<gpu id="1"', 1)
    assert 'depid="1"' in text and '<tb id="1"' in text
    with pytest.raises(MscclInvalid, match="deadlock"):
        check_msccl_xml(text)


def test_xml_checked_against_the_right_root(frontier):
    schedule = frontier("ring:4", "reduce")[0]
    text = to_msccl_xml(schedule)
    with pytest.raises(MscclInvalid, match="expected"):
        check_msccl_xml(text, root=2)
    with pytest.raises(MscclInvalid, match="root"):
        check_msccl_xml(text)


def test_plan_simulator_rejects_broken_plans(frontier):
    plan = json.loads(render(frontier("ring:4", "allreduce")[-1], "mscclpp")[0])
    check_mscclpp_plan(plan)

    def broken(change):
        p = json.loads(json.dumps(plan))
        change(p)
        return p

    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    first = {name: next(i for i, op in enumerate(ops) if op["name"] == name)
             for name in ("wait", "signal", "put")}
    drop = lambda i: lambda p: p["gpus"][1]["threadblocks"][0]["ops"].pop(i)  # noqa: E731
    with pytest.raises(PlanInvalid):  # a wait missing: data read too early or unbalanced
        check_mscclpp_plan(broken(drop(first["wait"])))
    with pytest.raises(PlanInvalid, match="deadlock"):
        check_mscclpp_plan(broken(drop(first["signal"])))
    with pytest.raises(PlanInvalid, match="chain"):
        check_mscclpp_plan(broken(drop(first["put"] + 1)))  # the nop publishing the put

    def far(p):
        p["gpus"][1]["threadblocks"][0]["ops"][first["put"]]["src_buff"][0]["index"] = 99
    with pytest.raises(PlanInvalid, match="outside"):
        check_mscclpp_plan(broken(far))

    def one_sided(p):
        p["gpus"][0]["channels"][0]["connected_to"].append(2)
    with pytest.raises(PlanInvalid, match="lists"):
        check_mscclpp_plan(broken(one_sided))

    def too_long(p):
        p["gpus"][0]["threadblocks"][0]["ops"] += [{"name": "nop"}] * 64
    with pytest.raises(PlanInvalid, match="limit 64"):
        check_mscclpp_plan(broken(too_long))

    def as_int(p):
        p["inplace"] = 0
    with pytest.raises(PlanInvalid, match="boolean"):
        check_mscclpp_plan(broken(as_int))


# --- MSCCL++ across boxes: port channels ---------------------------------------------

MULTI_NODE = [(t, c) for t in ("dgx2x2", "dgxh100x2")
              for c in ("allgather", "reducescatter", "allreduce")]


@pytest.fixture(scope="module")
def multi_node():
    """multi_node(topo, collective) -> the decomposition's most pipelined schedule."""
    cache = {}

    def get(topo, name):
        if (topo, name) not in cache:
            result = synthesize(resolve(topo), name, limits=Limits(max_steps=8, time_limit=120),
                                method="decomposed")
            cache[(topo, name)] = result.points[-1].schedule
        return cache[(topo, name)]
    return get


def plan_of(schedule, inplace=False):
    """The plan render writes (batch program of a pipeline), and its simulator report,
    the ranks started a box per node (the executor's transports, S10)."""
    plan = json.loads(render(schedule, "mscclpp", inplace=inplace, check=False)[0])
    boxes = schedule.model.boxes
    return plan, check_mscclpp_plan(plan, root=schedule.collective.root,
                                    ranks_per_node=len(boxes) // len(set(boxes)))


@pytest.mark.parametrize("topo,name", MULTI_NODE)
def test_multi_node_plans_use_port_channels_between_boxes(multi_node, topo, name):
    schedule = multi_node(topo, name)
    boxes = schedule.model.boxes
    box_size = boxes.count(boxes[0])
    for inplace in (False, True) if name in IN_PLACE else (False,):
        plan, report = plan_of(schedule, inplace)
        assert report["ranks"] == len(boxes) and report["max_ops_per_threadblock"] <= 64
        assert report["channels"]["port"] > 0 and report["channels"]["memory"] > 0
        assert report["ops"].get("pws(port)", 0) + report["ops"].get("pwsf(port)", 0) > 0
        for k, gpu in enumerate(plan["gpus"]):
            kinds = {}
            for ch in gpu["channels"]:
                for p in ch["connected_to"]:  # memory inside a box, port between boxes
                    assert (ch["channel_type"] == "port") == (boxes[p] != boxes[k])
                    kinds[(p, ch["channel_type"])] = kinds.get((p, ch["channel_type"]), 0) + 1
            # like MSCCL++'s multi-node allreduce: one channel per peer and type, and no
            # more thread blocks than its one per box peer plus one for the port peers
            assert all(v == 1 for v in kinds.values())
            assert len(gpu["threadblocks"]) <= box_size
            for rb in gpu["remote_buffers"]:
                want = "port" if boxes[rb["rank"]] != boxes[k] else "memory"
                assert rb["access_channel_types"] == [want]
            for tb in gpu["threadblocks"]:
                kinds_here = {c["channel_type"] for c in tb["channels"]}
                assert len(kinds_here) <= 1  # port traffic has thread blocks of its own
                for c in tb["channels"]:
                    assert len(c["channel_ids"]) <= 16
                for op in tb["ops"]:
                    if op["name"] in ("pws", "pwsf") or (op["name"] == "put" and
                                                         op["channel_type"] == "port"):
                        assert len(op["channel_ids"]) == len(op["dst_buff"]) <= 8


def test_a_composed_schedule_exports_to_mscclpp(multi_node):
    """Once refused (memory channels only), a schedule between boxes now exports."""
    schedule = multi_node("dgx2x2", "allreduce")
    text, summary = render(schedule, "mscclpp")  # checked by the plan simulator first
    plan = json.loads(text)
    assert len(plan["gpus"]) == 32 and "simulated over two launches" in summary
    types = {ch["channel_type"] for g in plan["gpus"] for ch in g["channels"]}
    assert types == {"memory", "port"}


def test_port_sources_written_again_are_flushed(multi_node):
    """pwsf exactly where the source is written again; pws there instead is rejected."""
    schedule = multi_node("dgxh100x2", "reducescatter")
    plan, report = plan_of(schedule)
    assert report["ops"].get("pwsf(port)")
    text = json.dumps(plan)
    with pytest.raises(PlanInvalid, match="proxy may not have read"):
        check_mscclpp_plan(json.loads(text.replace('"pwsf"', '"pws"')))
    plan, report = plan_of(multi_node("dgxh100x2", "allgather"), inplace=True)
    assert report["ops"].get("pws(port)") and not report["ops"].get("pwsf(port)")


def test_every_port_and_semaphore_op_is_needed(multi_node):
    plan, _ = plan_of(multi_node("dgxh100x2", "allgather"))
    kinds = ("pws", "pwsf", "sem_release", "sem_acquire", "wait")
    tbs = plan["gpus"][0]["threadblocks"]
    dropped = 0
    for j, tb in enumerate(tbs):
        for i, op in enumerate(tb["ops"]):
            if op["name"] in kinds and (op["name"] != "wait" or op["channel_type"] == "port"):
                broken = json.loads(json.dumps(plan))
                broken["gpus"][0]["threadblocks"][j]["ops"].pop(i)
                with pytest.raises(PlanInvalid):
                    check_mscclpp_plan(broken)
                dropped += 1
    assert dropped >= 4


def port_plan(send, c=1, tail=lambda r: ()):
    """A 2-rank allgather between two nodes over one port channel each way, C chunks per
    rank: handshake, copy i -> o, nop, send(r) (the ops that send o[r*C..] to the peer),
    wait, nop, then tail(r)."""
    port = {"channel_type": "port"}
    gpus = []
    for r in range(2):
        ops = [dict(port, name="signal", channel_ids=[0]),
               dict(port, name="wait", channel_ids=[0]), {"name": "nop"},
               {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": c}],
                "dst_buff": [{"type": "o", "index": r * c, "size": c}]},
               {"name": "nop"}, *send(r),
               dict(port, name="wait", channel_ids=[0]), {"name": "nop"}, *tail(r)]
        gpus.append({"id": r, "input_chunks": c, "output_chunks": 2 * c, "scratch_chunks": 0,
                     "channels": [dict(port, connected_to=[1 - r])],
                     "remote_buffers": [{"rank": 1 - r, "type": "o",
                                         "access_channel_types": ["port"]}],
                     "semaphores": [],
                     "threadblocks": [{"id": 0, "channels": [dict(port, channel_ids=[0])],
                                       "remote_buffer_refs": [{"access_channel_type": "port",
                                                               "remote_buffer_ids": [0]}],
                                       "ops": ops}]})
    return {"name": "port_allgather", "collective": "allgather", "protocol": "Simple",
            "inplace": False, "reuse_resources": False, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": 0, "max_message_size": 1 << 30, "gpus": gpus}


def port_op(name, r, c=1):
    """A port put/pws/pwsf of o[r*C..] to the same slots of the peer's o, one entry."""
    return {"name": name, "channel_type": "port", "channel_ids": [0],
            "src_buff": [{"type": "o", "index": r * c, "size": c}],
            "dst_buff": [{"buffer_id": 0, "index": r * c, "size": c}]}


PORT_SIGNAL = {"name": "signal", "channel_type": "port", "channel_ids": [0]}
NOP = {"name": "nop"}


def two_threads(r):
    """A port put of o[2r], o[2r+1] as two entries: threads 0 and 1 push one each."""
    return dict(port_op("put", r, 2), channel_ids=[0, 0],
                src_buff=[{"type": "o", "index": 2 * r + j, "size": 1} for j in (0, 1)],
                dst_buff=[{"buffer_id": 0, "index": 2 * r + j, "size": 1} for j in (0, 1)])


def rewrite(r):
    """Write the sent slot o[r] again (the same value: only the timing is wrong)."""
    return [{"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}],
             "dst_buff": [{"type": "o", "index": r, "size": 1}]}]


def test_plan_simulator_accepts_correct_port_plans():
    report = check_mscclpp_plan(port_plan(lambda r: [port_op("pws", r)]))
    assert report["channels"] == {"memory": 0, "port": 2, "switch": 0}
    assert report["ops"]["pws(port)"] == 2 and report["ops"]["wait(port)"] == 4
    # put, then signal on the same channel by the same thread: behind the put's data
    check_mscclpp_plan(port_plan(lambda r: [port_op("put", r), PORT_SIGNAL]))
    # two entries pushed by two threads, a nop, then the signal
    check_mscclpp_plan(port_plan(lambda r: [two_threads(r), NOP, PORT_SIGNAL], c=2))
    # the source written again after pwsf and a nop, or after a flush that flushes
    check_mscclpp_plan(port_plan(lambda r: [port_op("pwsf", r), NOP], tail=rewrite))
    flush = {"name": "flush", "channel_type": "port", "channel_ids": [0],
             "dst_buff": [{"type": "o", "index": 0, "size": 0}]}
    check_mscclpp_plan(port_plan(lambda r: [port_op("pws", r), flush, NOP], tail=rewrite))


def test_plan_simulator_rejects_broken_port_plans():
    # a port put no later signal covers: counts balance, the data may come any time
    with pytest.raises(PlanInvalid, match="not followed by a signal"):
        check_mscclpp_plan(port_plan(lambda r: [PORT_SIGNAL, port_op("put", r)]))
    # entry 1 pushed by thread 1, the signal by thread 0, no nop between: unordered
    with pytest.raises(PlanInvalid, match="not followed by a signal"):
        check_mscclpp_plan(port_plan(lambda r: [two_threads(r), PORT_SIGNAL], c=2))
    # the source written again while the proxy may still read it: after pws (no
    # flush), or after a flush written the DSL's way (no dst_buff: it flushes nothing)
    dsl_flush = {"name": "flush", "channel_type": "port", "channel_ids": [0]}
    for extra in ([], [dsl_flush]):
        with pytest.raises(PlanInvalid, match="proxy may not have read"):
            check_mscclpp_plan(port_plan(lambda r: [port_op("pws", r), *extra, NOP],
                                         tail=rewrite))
    # pwsf, but the write comes before the nop that makes its completion known
    with pytest.raises(PlanInvalid, match="proxy may not have read"):
        check_mscclpp_plan(port_plan(lambda r: [port_op("pwsf", r), *rewrite(r)]))
    # unbalanced port signals: one more signal than the peer waits for
    with pytest.raises(PlanInvalid, match="signals 3 times on its port channel 0"):
        check_mscclpp_plan(port_plan(lambda r: [port_op("pws", r)],
                                     tail=lambda r: [PORT_SIGNAL] if r == 0 else []))
    # a port channel declared on one side only
    plan = port_plan(lambda r: [port_op("pws", r)])
    plan["gpus"][0]["channels"][0]["connected_to"].append(1)
    with pytest.raises(PlanInvalid, match="port channels: gpu 0 lists gpu 1 2 times"):
        check_mscclpp_plan(plan)
    # pws on a memory channel sends no signal: refused
    plan = port_plan(lambda r: [dict(port_op("pws", r), channel_type="memory")])
    with pytest.raises(PlanInvalid, match="needs channel_type port"):
        check_mscclpp_plan(plan)
    # the data a port put wrote, read after the wait and a nop; without the nop: refused
    plan = port_plan(lambda r: [port_op("pws", r)],
                     tail=lambda r: [{"name": "copy",
                                      "src_buff": [{"type": "o", "index": 1 - r, "size": 1}],
                                      "dst_buff": [{"type": "s", "index": 0, "size": 1}]}])
    for gpu in plan["gpus"]:
        gpu["scratch_chunks"] = 1
    check_mscclpp_plan(plan)
    plan["gpus"][0]["threadblocks"][0]["ops"].pop(-2)  # the nop after the last wait
    with pytest.raises(PlanInvalid, match="a port put wrote, delivered by op 6 .wait. of the "
                                          "same thread block, with no nop between them"):
        check_mscclpp_plan(plan)


# --- the command line ------------------------------------------------------------------

def synth_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_export_command(frontier, tmp_path):
    src = write_schedule(frontier("ring:4", "allgather")[0], tmp_path / "ag.json")
    a2a = write_schedule(frontier("ring:4", "alltoall")[0], tmp_path / "a2a.json")
    broken = schedule_to_dict(frontier("ring:4", "allgather")[0])
    broken["steps"][0]["sends"].pop()
    (tmp_path / "bad.json").write_text(json.dumps(broken))

    ok = synth_cli("export", str(src), "--to", "msccl-xml", "-o", str(tmp_path / "ag.xml"))
    assert ok.returncode == 0 and ok.stderr == "" and "wrote" in ok.stdout
    check_msccl_xml((tmp_path / "ag.xml").read_text())
    ok = synth_cli("export", str(src), "--to", "mscclpp", "--inplace", "-o",
                   str(tmp_path / "ag.mscclpp.json"))
    assert ok.returncode == 0
    assert check_mscclpp_plan(json.loads((tmp_path / "ag.mscclpp.json").read_text()))["inplace"]
    ok = synth_cli("export", str(src), "--to", "json", "-o", str(tmp_path / "copy.json"))
    assert ok.returncode == 0
    assert (tmp_path / "copy.json").read_text() == src.read_text()  # the same layout

    for args in (["export", str(a2a), "--to", "msccl-xml", "--inplace", "-o",
                  str(tmp_path / "no.xml")],
                 ["export", str(src), "--to", "nccl", "-o", str(tmp_path / "no.xml")],
                 ["export", str(tmp_path / "missing.json"), "--to", "json", "-o",
                  str(tmp_path / "no.json")]):
        bad = synth_cli(*args)
        assert bad.returncode == 2, args
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    # an invalid schedule is exit 1 here as in verify, run and draw: one answer, one fact
    bad = synth_cli("export", str(tmp_path / "bad.json"), "--to", "mscclpp", "-o",
                    str(tmp_path / "no.json"))
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "not a valid schedule" in bad.stderr
    assert not list(tmp_path.glob("no.*")) and not list(tmp_path.glob(".*"))


def test_format_at_synthesis_time(tmp_path):
    folder = tmp_path / "out" / "ring_4" / "allgather"
    folder.mkdir(parents=True)
    (folder / "allgather-s9-r9-c9.mscclpp.json").write_text("{}")  # stale: as synth left it
    record(folder, [folder / "allgather-s9-r9-c9.mscclpp.json"])
    (folder.parent / MARKER).write_text(owner_text(resolve("ring:4")))
    run = synth_cli("allgather", "--topo", "ring:4", "--out", str(tmp_path / "out"),
                    "--format", "json,msccl-xml,mscclpp", "--time-limit", "30", "--json")
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    # S2 R2 C1 beside S2 R3 C2: off the line-rate frontier, but the fastest the runtimes
    # load at the smallest sizes in cost model 2 (2 rounds, not 3)
    assert names == [f"allgather-{p}{ext}" for p in ("s2-r2-c1", "s2-r3-c2")
                     for ext in (".json", ".mscclpp.json", ".xml")]
    assert json.loads(run.stdout)["frontier"][0]["file"].endswith("allgather-s2-r3-c2.json")
    check_msccl_xml((folder / "allgather-s2-r3-c2.xml").read_text())
    check_mscclpp_plan(json.loads((folder / "allgather-s2-r3-c2.mscclpp.json").read_text()))

    one = synth_cli("allgather", "--topo", "ring:4", "--out", str(tmp_path / "out"),
                    "--steps", "2", "--rounds", "3", "--chunks", "2", "--format", "msccl-xml")
    assert one.returncode == 0 and one.stdout.strip().endswith("allgather-s2-r3-c2.xml")
    bad = synth_cli("allgather", "--topo", "ring:4", "--format", "nccl")
    assert bad.returncode == 2 and "unknown format" in bad.stderr


def test_a_point_one_format_cannot_express_is_written_in_the_others(tmp_path):
    # dgxh100's NVLS point has switch operations: no MSCCL XML, an MSCCL++ plan; the job
    # writes what loads and says what does not, exit 0 (before 2026-12-05: exit 2)
    run = synth_cli("allreduce", "--topo", "dgxh100", "--max-steps", "9", "--out",
                    str(tmp_path), "--format", "msccl-xml,mscclpp", "--time-limit", "60",
                    "--model", "line-rate", "--json")
    assert run.returncode == 0, run.stderr
    frontier = json.loads(run.stdout)["frontier"]
    nvls = [p for p in frontier if p["method"].startswith("in-network")]
    assert nvls and all(p["loads"] == "MSCCL++" for p in nvls)
    folder = tmp_path / "dgxh100" / "allreduce"
    notes = [line for line in run.stderr.splitlines() if line.startswith("synth: note:")]
    for p in frontier:
        stem = f"allreduce-s{p['steps']}-r{p['rounds']}-c{p['chunks']}"
        for fmt, runtime, ext in (("msccl-xml", "MSCCL XML", ".xml"),
                                  ("mscclpp", "MSCCL++", ".mscclpp.json")):
            loads = p["loads"] in ("both", runtime)
            assert (folder / f"{stem}{ext}").exists() == loads, (stem, fmt)
            said = [n for n in notes if f"not written as {fmt}:" in n and stem in n]
            assert len(said) == (not loads), (stem, fmt)
        if p["loads"] in ("both", "MSCCL++"):
            check_mscclpp_plan(json.loads((folder / f"{stem}.mscclpp.json").read_text()))
    assert any("switch operations" in n for n in notes) and "time limit" not in run.stderr


def test_files_the_time_left_does_not_afford_are_named_not_refused(
        tmp_path, monkeypatch, capsys):
    # every MSCCL++ plan paced past the limit: the JSON files are written, the plans
    # are named as not written in the last line, and that is no refusal (exit 0)
    from synth.cli import main
    from synth.construct.paced import WRITE

    monkeypatch.setattr(WRITE["mscclpp"], "seconds", lambda units: 1e9)
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--out", str(tmp_path), "--format",
              "json,mscclpp", "--time-limit", "30", "--json"])
    captured = capsys.readouterr()
    assert stop.value.code == 0
    stems = [Path(p["file"]).name.removesuffix(".json")
             for p in json.loads(captured.out)["frontier"]]
    last = captured.err.splitlines()[-1]
    assert last.startswith("synth: cut short by the time limit (30 s) at ")
    said, named = last.split(": ")[-1].split(" (")
    assert said == f"{len(stems)} points kept, {len(stems)} of their files not written"
    assert sorted(named.rstrip(")").split(", ")) == sorted(s + ".mscclpp.json"
                                                           for s in stems)
    assert not list(tmp_path.rglob("*.mscclpp.json")) and "note:" not in captured.err


def test_refusals_and_the_time_limit_that_leave_no_file_are_exit_1(
        tmp_path, monkeypatch, capsys):
    # the smaller point refused, the larger one's file paced past the limit: no file at
    # all, so no answer (exit 1), not exit 0 with points "kept" (a reviewer's find)
    import synth.export
    from synth.cli import main
    from synth.construct.paced import WRITE

    def refused(*args, **kwargs):
        raise BadInput("refused here")

    paces = iter([0.0])  # the first file (the smaller point's) affordable, then none
    monkeypatch.setattr(synth.export, "render", refused)
    monkeypatch.setattr(WRITE["msccl-xml"], "seconds", lambda units: next(paces, 1e9))
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--out", str(tmp_path), "--format",
              "msccl-xml", "--time-limit", "30"])
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 1 and not list(tmp_path.rglob("*.xml"))
    assert err[-1] == ("synth: error: the time limit (30 s) left no time to write any of "
                       "the 2 points found (1 refused by every format)")


def test_a_format_no_point_loads_is_exit_2_after_the_rest_is_written(
        tmp_path, monkeypatch, capsys):
    import synth.export
    from synth.cli import main

    real = synth.export.render

    def no_xml(schedule, fmt, *args, **kwargs):
        if fmt == "msccl-xml":
            raise BadInput("refused here")
        return real(schedule, fmt, *args, **kwargs)

    monkeypatch.setattr(synth.export, "render", no_xml)
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--out", str(tmp_path), "--format",
              "json,msccl-xml", "--time-limit", "30", "--json"])
    captured = capsys.readouterr()
    assert stop.value.code == 2
    assert "no point of the frontier is written as msccl-xml: allgather-s" in captured.err
    assert "note:" not in captured.err  # the reason once, in the error line
    files = [p["file"] for p in json.loads(captured.out)["frontier"]]
    assert files and all(f.endswith(".json") for f in files)  # the JSON files are there
    assert not list(tmp_path.rglob("*.xml"))


@pytest.mark.parametrize("spec,name", [("dgx1", "allreduce"), ("switch:4", "allgather")])
def test_the_threadblock_count_build_rules_out_by_arithmetic_is_the_one_it_would_build(
        spec, name):
    # build() skips channel counts whose threadblocks break a limit without building
    # them (a 64-GPU tree pipeline took 213 s and 8.7 GB to be refused); the count it
    # trusts must be exactly the program's
    from synth.construct.tree_schedules import tree_search
    from synth.export import runtime_form
    from synth.export.layout import drop_redundant

    model = lower_with_routes(resolve(spec)).model
    point = tree_search(model, name, None, Limits()).points[2]  # a 4-batch pipeline
    batch, _ = runtime_form(point.schedule)
    steps = drop_redundant(batch.collective, batch.steps)
    for k in (1, 2, 3):
        program = msccl_export._Program(batch, Layout(batch.collective, False), k, True)
        per_gpu, per_chan = {}, {}
        for tb in program.tbs:
            per_gpu[tb.rank] = per_gpu.get(tb.rank, 0) + 1
            per_chan[(tb.rank, tb.chan)] = per_chan.get((tb.rank, tb.chan), 0) + 1
        transfers = msccl_export.transfer_array(steps)
        need = msccl_export.lane_threadblocks(transfers, k)
        assert (need.sum(axis=1).max(), need.max()) == (max(per_gpu.values()),
                                                         max(per_chan.values()))


def test_an_export_past_its_deadline_stops_and_remembers_nothing(schedule_file):
    # synth plan gives each export the time left: a 16-channel ring on dgxh100x2 took
    # 28 s to export, past a plan's whole --time-limit
    import time

    from synth.deadline import Deadline, OutOfTime
    from synth.export import render
    from synth.schedule.file import read_schedule

    schedule = read_schedule(schedule_file)
    with pytest.raises(OutOfTime):
        render(schedule, "mscclpp", deadline=Deadline(time.monotonic() - 1))
    text, _ = render(schedule, "mscclpp")  # asked again in time: the file, in full
    assert json.loads(text)["gpus"]


def test_a_refused_mscclpp_plan_leaves_no_cycles_behind():
    # MSCCL++ plans are built with the cycle collector off (synth.export.loads), and
    # thread blocks that hand a slot to each other name each other: every refused try
    # of a search stayed in memory (torus:16x16: 1.6 million objects a try, 3.8 GB after
    # 21 tries). A plan dropped is freed by reference counting alone
    import gc

    from synth.construct.baselines import baselines
    from synth.export.layout import Layout
    from synth.export.mscclpp import _Plan
    from synth.export.mscclpp_flow import _Flow
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower_with_routes

    ring = next(b.schedule for b in baselines(lower_with_routes(resolve("ring:4")).model,
                                              "allgather", None) if b.name.startswith("ring"))
    layout = Layout(ring.collective, False)
    flow = _Flow(ring, layout)
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        for drop in (False, True):
            plan = _Plan(flow, layout, None, 1, 1)  # one peer a thread block: hand-offs
            assert plan.finish() is None
            assert any(tb.acquire for tbs in plan.tbs.values() for tb in tbs)
            if drop:
                plan.drop()
            del plan
            left = gc.collect()
            assert (left > 0) is not drop, left
    finally:
        if was:
            gc.enable()


def test_the_thread_block_search_skips_tries_that_cannot_beat_its_best(monkeypatch):
    from synth.construct.greedy import build as greedy
    from synth.export.form import runtime_form
    from synth.export.mscclpp_flow import _Flow, thread_block_floor

    # dgx1's greedy allreduce of 4 chunks a share: its fewest thread blocks take 4 lanes
    # at 16 peers a block; then smaller caps are tried, and their peers alone need as
    # many thread blocks as that best
    schedule = runtime_form(greedy(lower_with_routes(resolve("dgx1")).model, "allreduce",
                                   None, 4), switch_ops=True)[0]
    layout = Layout(schedule.collective, False)
    flow = _Flow(schedule, layout)
    for lanes in (1, 2, 3, 4, 8):  # the floor is never above a split's busiest rank
        for cap in (1, 2, 16):
            split = mscclpp_export._Plan(flow, layout, None, lanes, cap)
            for r in range(layout.n):
                split._ready(r)
            assert thread_block_floor(flow, None, lanes, cap) <= \
                max(len(tbs) for tbs in split.tbs.values()), (lanes, cap)
    tries = []
    made = mscclpp_export._Plan.__init__

    def counted(self, *args):
        tries.append(args[3:5])
        made(self, *args)

    monkeypatch.setattr(mscclpp_export._Plan, "__init__", counted)
    skipping = mscclpp_export.build(schedule)
    skipped_tries = len(tries)
    monkeypatch.setattr(mscclpp_export, "thread_block_floor", lambda *args: 0)
    tries.clear()
    every = mscclpp_export.build(schedule)
    assert (skipping.t, skipping.cap) == (every.t, every.cap) == (4, 16)
    assert skipping.ops == every.ops and skipped_tries < len(tries)
    doc = to_mscclpp_plan(schedule, plan=skipping)
    assert check_mscclpp_plan(doc, root=None)["ranks"] == 8
