"""Property tests: synthesis and constructions on random small topologies.

Random connected topology dicts (2-5 GPUs over a random spanning tree plus random extra
links, bandwidths from a small set, 1-2 lanes, optionally one switch, which may be an
NVSwitch that reduces, multicasts or both, and one NIC). For every collective, whatever
synthesize returns must pass the independent verifier, respect the lower bounds, and
export to both runtime formats (both exporters support every collective out of place:
synth/export/__init__.py, README "Exporting"; BadInput is documented only for in-place
alltoall / reducescatter / scatter, runtime limits, which these tiny schedules never
reach, and switch operations: MSCCL XML has none, MSCCL++ only the reduce-then-multicast
shape, docs/runtimes.md). On GPUs that all meet on a computing switch, the pipelined
constructions (packed trees and paths at several depths, with chunk ranges), the
in-network ones and the baselines must pass the verifier and tests/reference_checker.py,
which expands every range, batch and switch operation on its own.

Examples are drawn afresh on every run from one seed per session (tests/conftest.py
prints it at the end of the run; SYNTH_PROPERTY_SEED=N replays it); hypothesis' example
database is off (the conftest's profile), so a run depends on its seed alone.
"""

import math
import os
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from synth.bounds import bounds
from synth.construct.baselines import baselines
from synth.construct.in_network import ONE_STEP, nvls_search, reducing_switch
from synth.construct.tree_schedules import tree_search
from synth.errors import BadInput
from synth.export import render
from synth.frontier import synthesize
from synth.schedule.collectives import COLLECTIVES, ROOTED, make_collective
from synth.schedule.cost import schedule_cost
from synth.schedule.file import schedule_to_dict
from synth.schedule.transform import (compose_allreduce, refine, reverse_model,
                                      reverse_schedule)
from synth.schedule.verify import verify_schedule
from synth.search.pareto import Limits
from synth.topology.linkmodel import lower, lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.property_seed import property_seed
from tests.shared_frontiers import default_limits
from tests.reference_checker import judge

BANDWIDTHS = (12.5, 25, 50)
CAPABILITIES = ([], ["reduce", "multicast"], ["multicast"], ["reduce"])
NO_XML = {"gather", "scatter"}  # documented: no runtime runs their XML as meant
NO_IN_PLACE = {"msccl-xml": {"alltoall"},
               "mscclpp": {"alltoall", "reducescatter", "scatter"}}
SETTINGS = settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 10)), deadline=None,
                    print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
SEED = seed(property_seed())


@st.composite
def topology_docs(draw):
    n = draw(st.integers(2, 5))
    gpus = [f"gpu{i}" for i in range(n)]
    pairs = set()
    for i in range(1, n):  # random spanning tree: each GPU joins an earlier one
        pairs.add((draw(st.integers(0, i - 1)), i))
    others = [(a, b) for a in range(n) for b in range(a + 1, n) if (a, b) not in pairs]
    if others:
        pairs |= set(draw(st.lists(st.sampled_from(others), max_size=3, unique=True)))
    link = lambda a, b: {"between": [a, b], "gbps": draw(st.sampled_from(BANDWIDTHS)),  # noqa
                         "count": draw(st.integers(1, 2))}
    links = [link(gpus[a], gpus[b]) for a, b in sorted(pairs)]
    doc = {"name": "random", "unit_gbps": 25, "gpus": n, "links": links}
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["nvswitch", "pcie_switch"]))
        doc["switches"] = [{"name": "sw", "kind": kind}]
        if kind == "nvswitch":  # one that computes, now and then (a PCIe switch cannot)
            doc["switches"][0]["can"] = draw(st.sampled_from(CAPABILITIES))
        attached = draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=n, unique=True))
        links += [link(g, "sw") for g in sorted(attached)]
    if draw(st.booleans()):
        doc["nics"] = ["nic0"]
        attached = draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=2, unique=True))
        links += [link(g, "nic0") for g in sorted(attached)]
    return doc


def limits_for(b, name):
    lim = default_limits(b, time_limit=10)
    hop = b.steps
    max_steps = 2 * hop + 1 if name == "allreduce" else hop + 1
    return replace(lim, max_steps=max_steps, max_chunks=2, workers=2)


def synthesize_doc(doc, name, method="auto"):
    topo = topology_from_dict(doc)
    root = 0 if name in ROOTED else None
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    return topo, b, synthesize(topo, name, root, limits_for(b, name), method=method)


def check_schedule(schedule, b, name):
    """Verified, within the bounds, and exportable to both runtimes (a schedule with
    switch operations: refused by MSCCL XML, by MSCCL++ unless in its one shape, with
    one line)."""
    assert schedule.collective.name == name
    verify_schedule(schedule_to_dict(schedule))
    assert schedule.num_steps >= b.steps
    assert Fraction(schedule.rounds, schedule.collective.chunks) >= b.rounds_per_chunk
    for fmt in ("msccl-xml", "mscclpp"):
        if fmt == "msccl-xml" and name in NO_XML:
            with pytest.raises(BadInput, match="no runtime runs such a file"):
                render(schedule, fmt)
            continue
        for inplace in (False, True):
            if inplace and name in NO_IN_PLACE[fmt]:  # documented: no in-place export
                continue
            if schedule.in_network:
                try:
                    text, summary = render(schedule, fmt, inplace=inplace)
                except BadInput as e:
                    assert fmt == "mscclpp" or "cannot express" in str(e), str(e)
                    assert "\n" not in str(e)
                    continue
                assert fmt == "mscclpp", "MSCCL XML has no switch operations"
            else:
                text, summary = render(schedule, fmt, inplace=inplace)
            assert text and summary


@pytest.mark.parametrize("name", COLLECTIVES)
@SEED
@SETTINGS
@given(doc=topology_docs())
def test_every_synthesized_schedule_is_valid_bounded_and_exportable(name, doc):
    topo, b, result = synthesize_doc(doc, name)
    for point in result.points:
        check_schedule(point.schedule, b, name)
    # what the examples reached (--hypothesis-show-statistics)
    event("switch operations" if any(p.schedule.in_network for p in result.points)
          else "no switch operation")
    event("a pipeline" if any(p.schedule.batches > 1 for p in result.points)
          else "no pipeline")
    # the frontier is a frontier: as latency grows, strictly better R/C
    costs = sorted((round(schedule_cost(p.schedule).latency_us, 9), p.ratio)
                   for p in result.points)
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(costs, costs[1:])), costs
    if name != "alltoall":  # tiny graphs: every other collective solves in hop + 1 steps
        assert result.points, f"no schedule for {name} on {doc}"


@pytest.mark.parametrize("name, primal", [("reducescatter", "allgather"),
                                          ("reduce", "broadcast")])
@SEED
@SETTINGS
@given(doc=topology_docs())
def test_reversed_dual_path(name, primal, doc):
    """reducescatter / reduce come from the reversed allgather / broadcast; check both the
    path synthesize takes and the reversal applied by hand to a primal on reversed links."""
    # exact only: with auto, a baseline with more chunks than the search may try can
    # beat every dual point
    topo, b, result = synthesize_doc(doc, name, method="exact")
    assert result.points
    for point in result.points:
        check_schedule(point.schedule, b, name)
        assert point.schedule.info.get("method") == f"dual of {primal}"
        assert all(x.op == "reduce" for s in point.schedule.steps for x in s.sends)
    # by hand: solve the primal on the reversed model, reverse it, verify on the original
    from synth.search.instance import solve_instance

    model = lower(topo)
    root = 0 if name in ROOTED else None
    p = result.points[0]
    primal_coll = make_collective(primal, model.ranks, p.chunks, root)
    # its computing switches reversed too: a reduction in a switch is the reversal of a
    # multicast (a primal without them may need more rounds: unsat at the dual's)
    out = solve_instance(reverse_model(model, switches=True), primal_coll, p.steps,
                         p.rounds, time_limit=10, workers=2)
    assert out.status == "sat"
    verify_schedule(schedule_to_dict(out.schedule))
    dual = reverse_schedule(out.schedule, model)
    check_schedule(dual, b, name)


@SEED
@SETTINGS
@given(doc=topology_docs())
def test_allreduce_composition_path(doc):
    """Every reducescatter x allgather pairing the search found composes into a valid
    allreduce (refined to a common chunk count), within allreduce's bounds."""
    topo, b, result = synthesize_doc(doc, "allreduce")
    assert result.points
    for point in result.points:
        check_schedule(point.schedule, b, "allreduce")
    rs_points = result.searches["reducescatter"].points
    ag_points = result.searches["allgather"].points
    assert rs_points and ag_points
    for rs in rs_points:
        for ag in ag_points:
            k = math.lcm(rs.chunks, ag.chunks)
            composed = compose_allreduce(refine(rs.schedule, k // rs.chunks),
                                         refine(ag.schedule, k // ag.chunks))
            assert composed.collective.chunks == topo.ranks * k
            check_schedule(composed, b, "allreduce")
    composed_points = [p for p in result.points if "composed" in p.schedule.info]
    for p in composed_points:
        assert p.chunks % topo.ranks == 0


def test_composition_reaches_the_frontier_on_a_ring():
    # ring:4's allreduce frontier ends with a composed point (see test_synthesis RING4)
    doc = {"unit_gbps": 25, "gpus": 4,
           "links": [{"between": [f"gpu{i}", f"gpu{(i + 1) % 4}"], "gbps": 25}
                     for i in range(4)]}
    topo, b, result = synthesize_doc(doc, "allreduce")
    assert any("composed" in p.schedule.info for p in result.points)
    for p in result.points:
        check_schedule(p.schedule, b, "allreduce")


@st.composite
def computing_switch_docs(draw):
    """2-5 GPUs, every one on an NVSwitch that reduces, multicasts or both, by 1-3
    lanes of a random bandwidth each, and up to 2 direct links between GPUs."""
    n = draw(st.integers(2, 5))
    gpus = [f"gpu{i}" for i in range(n)]
    # both capabilities half of the time: NVLS needs them
    can = draw(st.sampled_from([["reduce", "multicast"], *CAPABILITIES[1:]]))
    links = [{"between": [g, "sw"], "gbps": draw(st.sampled_from(BANDWIDTHS)),
              "count": draw(st.integers(1, 3))} for g in gpus]
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    for a, b in draw(st.lists(st.sampled_from(pairs), max_size=2, unique=True)):
        links.append({"between": [gpus[a], gpus[b]],
                      "gbps": draw(st.sampled_from(BANDWIDTHS))})
    return {"name": "random-switch", "unit_gbps": 25, "gpus": n, "links": links,
            "switches": [{"name": "sw", "kind": "nvswitch", "can": can}]}


@SEED
@SETTINGS
@given(doc=computing_switch_docs(), name=st.sampled_from(COLLECTIVES), data=st.data())
def test_pipelines_ranges_and_switch_operations_are_valid_to_both_checkers(doc, name, data):
    """Packed trees and paths pipelined over several depths (version 2: ranges and
    pipelines), NVLS where the switch both reduces and multicasts (version 3), and the
    baselines: each valid to the verifier and to tests/reference_checker.py, within
    the bounds, exportable (or refused as documented)."""
    topo = topology_from_dict(doc)
    lowering = lower_with_routes(topo)
    model, n = lowering.model, topo.ranks
    root = data.draw(st.integers(0, n - 1), label="root") if name in ROOTED else None
    b = bounds(lowering, make_collective(name, n, 1, root))
    # a reducing switch bounds allreduce at 1 step, where an allreduce's reduce and
    # broadcast trees over 5 GPUs take up to 4 steps each (a chain, where the links are
    # uneven: 8 in all, seed 3675352296) and their pipelines one more per batch: room
    # for the 8 and 4 batches more
    limits = Limits(max_steps=max(b.steps, 4) + 8)
    made = [p.schedule for p in tree_search(model, name, root, limits).points]
    computes = reducing_switch(model) is not None
    if computes and (name == "allreduce" or name in ONE_STEP):
        found = nvls_search(model, limits, None, None, name, root)
        made += [p.schedule for p in found.points]
    made += [x.schedule for x in baselines(model, name, root)]
    for schedule in made:
        assert judge(schedule_to_dict(schedule)) == ("ok", ""), schedule.info
        check_schedule(schedule, b, name)
    # what the example is for: pipelines with ranges, switch operations where they apply
    if name != "alltoall":
        assert any(s.pipeline is not None and s.batches > 1 for s in made), name
    if computes and (name == "allreduce" or name in ONE_STEP):
        assert any(s.in_network for s in made), name
