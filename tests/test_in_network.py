"""In-network reduction: switches that reduce and multicast (NVLS), version 3 files.

Hand-built schedules check the semantics README states (a switch operation is its
sends for the data, and pays a port once however many ranks it reaches); each way one
can be wrong must fail; the NVLS allreduce synth builds must verify and reach the
in-network bound.
"""

import copy
import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from synth.bounds import bounds
from synth.construct.in_network import nvls_search
from synth.schedule.collectives import make_collective
from synth.schedule.cost import schedule_cost
from synth.schedule.file import schedule_from_dict, schedule_to_dict
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main
from tests.test_reliability import one_line

REPO = Path(__file__).resolve().parent.parent
N = 4
PAIRS = [[a, b] for a in range(N) for b in range(N) if a != b]


def nvls_doc(rounds=(3, 3), version=3, can=("reduce", "multicast")):
    """Allreduce on 4 GPUs around one switch (one lane each way per GPU), 4 chunks:
    the switch sums chunk r into rank r, then rank r multicasts it to the others. Each
    GPU's port sends 3 chunks in each step (one per operation it takes part in)."""
    everyone = list(range(N))
    return {
        "format": "synth.schedule", "version": version, "collective": "allreduce",
        "root": None, "ranks": N, "chunks": N, "num_chunks": N,
        "topology": {
            "name": "hand", "unit_gbps": 25.0,
            "links": [[a, b, 1] for a, b in PAIRS],
            "groups": [{"name": f"up{a}", "links": [[a, b] for b in everyone if b != a],
                        "capacity": 1} for a in everyone]
            + [{"name": f"down{b}", "links": [[a, b] for a in everyone if a != b],
                "capacity": 1} for b in everyone],
            "switches": [{"name": "sw", "can": list(can), "links": PAIRS,
                          "up": [[a, f"up{a}"] for a in everyone],
                          "down": [[b, f"down{b}"] for b in everyone]}]},
        "pre": [[r, c] for r in everyone for c in range(N)],
        "post": [[r, c] for r in everyone for c in range(N)],
        "steps": [
            {"rounds": rounds[0], "sends": [{"chunk": r, "srcs": everyone, "dst": r,
                                             "via": "sw", "op": "switch_reduce"}
                                            for r in everyone]},
            {"rounds": rounds[1], "sends": [{"chunk": r, "src": r,
                                             "dsts": [d for d in everyone if d != r],
                                             "via": "sw", "op": "multicast"}
                                            for r in everyone]}]}


def test_a_hand_built_nvls_allreduce_passes_and_pays_each_port_once_per_operation():
    verify_schedule(nvls_doc())
    # one chunk: the switch sums it into rank 0 (rank 0's downlink takes 3 links of
    # it, paid once), then rank 0 multicasts it (its uplink paid once): 1 round each,
    # where plain sends would need 3 in each step
    doc = nvls_doc(rounds=(1, 1))
    doc.update(chunks=1, num_chunks=1, pre=[[r, 0] for r in range(N)],
               post=[[r, 0] for r in range(N)])
    for step in doc["steps"]:
        step["sends"] = step["sends"][:1]
    verify_schedule(doc)
    plain = copy.deepcopy(doc)
    plain["version"] = 1
    plain["steps"][0]["sends"] = [{"chunk": 0, "src": r, "dst": 0, "op": "reduce"}
                                  for r in range(1, N)]
    plain["steps"][1]["sends"] = [{"chunk": 0, "src": 0, "dst": d, "op": "copy"}
                                  for d in range(1, N)]
    with pytest.raises(ScheduleInvalid, match="over its capacity 1 x 1 rounds"):
        verify_schedule(plain)


def test_only_the_switch_port_is_paid_once_a_resource_before_it_pays_per_operand():
    # ranks 0 and 1 share one uplink (a NIC) to a reducing switch; a reduction of both
    # into rank 2 crosses that uplink twice, so one round of capacity 1 is not enough
    doc = nvls_doc(rounds=(1, 1))
    doc["topology"]["groups"].append({"name": "shared", "links": [[0, 2], [1, 2]],
                                      "capacity": 1})
    doc.update(chunks=1, num_chunks=1, pre=[[r, 0] for r in range(N)],
               post=[[r, 0] for r in range(N)])
    doc["steps"] = [{"rounds": 1, "sends": [{"chunk": 0, "srcs": [0, 1, 2], "dst": 2,
                                             "via": "sw", "op": "switch_reduce"}]},
                    {"rounds": 1, "sends": [{"chunk": 0, "src": 2, "dsts": [0, 1, 3],
                                             "via": "sw", "op": "multicast"}]}]
    doc["steps"][0]["sends"][0]["srcs"] = [0, 1, 2, 3]
    with pytest.raises(ScheduleInvalid, match="group 'shared' carries 2 chunks"):
        verify_schedule(doc)
    doc["steps"][0]["rounds"] = 2
    verify_schedule(doc)


def test_each_way_an_in_network_schedule_can_be_wrong_is_caught():
    def broken(edit):
        doc = nvls_doc()
        edit(doc)
        return doc

    def twice(doc):  # rank 1's contribution reduced into rank 0 a second time
        doc["steps"].insert(1, {"rounds": 1, "sends": [
            {"chunk": 0, "srcs": [0, 1], "dst": 0, "via": "sw", "op": "switch_reduce"}]})

    def over(doc):  # 3 multicasts leave each port: 2 rounds are not enough
        doc["steps"][1]["rounds"] = 2

    def unable(doc):  # the switch only forwards and multicasts
        doc["topology"]["switches"][0]["can"] = ["multicast"]

    def elsewhere(doc):  # a link that does not pass through the switch
        doc["topology"]["switches"][0]["links"] = PAIRS[1:]

    cases = [(twice, "counts the contribution of ranks [1] twice"),
             (over, "over its capacity 1 x 2 rounds"),
             (unable, "a switch that cannot reduce"),
             (elsewhere, "does not pass through that switch"),
             (lambda d: d.update(version=2), "a version 2 file uses switch operations")]
    for edit, message in cases:
        with pytest.raises(ScheduleInvalid, match=message.replace("[", r"\[")):
            verify_schedule(broken(edit))


def test_nvls_allreduce_on_dgxh100_reaches_the_in_network_bound():
    lowering = lower_with_routes(resolve("dgxh100"))
    b = bounds(lowering, make_collective("allreduce", 8))
    search = nvls_search(lowering.model, Limits(max_steps=65))
    deepest = search.points[0].schedule  # add_pipelines builds the deepest first
    assert deepest.batches == 64 and deepest.in_network
    # by hand: 8 GPUs, each port 18 lanes each way. A port holds N x pieces chunks per
    # steady step (module docstring), so pieces = 9 fill it (8 x 9 = 72 = 4 x 18).
    # Program: step 1, each up port carries the 7 reductions it feeds, 7 x 9 = 63
    # chunks: ceil(63 / 18) = 4 rounds; step 2, each down port 7 multicasts: 4 rounds.
    # P batches: P + 1 expanded steps; the first and last run one program step (4),
    # the P - 1 between carry 8 x 9 = 72 chunks each way (4 rounds): 4 (P + 1) rounds
    # for 72 P chunks.
    assert [s.rounds for s in deepest.steps] == [4, 4]
    for point in search.points:
        p = point.schedule.batches
        assert (point.schedule.rounds, point.schedule.collective.chunks) == (4 * (p + 1),
                                                                            72 * p)
    ratio = Fraction(deepest.rounds, deepest.collective.chunks)
    assert ratio == Fraction(260, 4608)
    assert ratio / b.rounds_per_chunk < Fraction(102, 100)  # within 1.02 x
    assert b.without_in_network / ratio > Fraction(17, 10)  # 1.7 x any plain schedule
    doc = schedule_to_dict(deepest)
    assert doc["version"] == 3 and doc["topology"]["switches"][0]["can"] == [
        "multicast", "reduce"]
    verify_schedule(doc)
    again = schedule_from_dict(json.loads(json.dumps(doc)))
    assert again.steps == deepest.steps and again.model == deepest.model
    verify_schedule(schedule_to_dict(deepest.expanded()))  # version 3 without the compact forms


@pytest.mark.parametrize("spec, bound", [("dgxh100x2", Fraction(1, 16)),
                                         ("dgxh100x4", Fraction(3, 32))])
def test_nvls_in_boxes_and_direct_across_them_reach_the_in_network_bound(spec, bound):
    # no network switch reduces: the boxes' NICs carry 2(K-1)/K of each shard, which is
    # the bound once the NVSwitches have summed each box (dgxh100x2: 1/16, not 3/32)
    from synth.topology.hierarchy import find_hierarchy

    lowering = lower_with_routes(resolve(spec))
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks))
    assert b.rounds_per_chunk == bound
    h, _ = find_hierarchy(lowering)
    search = nvls_search(lowering.model, Limits(max_steps=40), None, h)
    across = [p.schedule for p in search.points if "in turn" not in p.schedule.info["method"]]
    a, z = sorted(across, key=lambda s: s.batches)[-2:]
    assert a.batches < z.batches and z.in_network
    # each batch more costs exactly the bound: the steady state is at it
    assert Fraction(z.rounds - a.rounds, z.collective.chunks - a.collective.chunks) == bound
    verify_schedule(schedule_to_dict(z))


def test_cli_frontier_uses_the_switch_mscclpp_takes_it_msccl_xml_refuses(tmp_path):
    made = synth_main("allreduce", "--topo", "dgxh100", "--time-limit", "20", "--out",
                      str(tmp_path / "out"), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    summary = json.loads(made.stdout)
    assert summary["bounds"]["rounds_per_chunk"] == "1/18"
    assert summary["bounds"]["without_in_network"] == "7/72"
    nvls = [p for p in summary["frontier"] if p["method"].startswith("in-network")]
    assert nvls and min(p["ratio_to_bound"] for p in nvls) < 1.01
    path = nvls[0]["file"]
    assert synth_main("verify", path).returncode == 0
    refused = synth_main("export", path, "--to", "msccl-xml", "-o", str(tmp_path / "x.xml"))
    assert "cannot express" in one_line(refused, 2)
    plan = tmp_path / "p.mscclpp.json"
    exported = synth_main("export", path, "--to", "mscclpp", "-o", str(plan))
    assert exported.returncode == 0, exported.stderr
    assert '"glres"' in plan.read_text()


@pytest.mark.parametrize("switch, message", [
    ({"name": "p", "kind": "pcie_switch", "can": ["reduce"]}, "a pcie_switch cannot reduce"),
    ({"name": "s", "kind": "nvswitch", "can": ["teleport"]}, "unknown capability 'teleport'"),
])
def test_bad_capabilities_get_one_line_and_exit_2(tmp_path, switch, message):
    doc = {"name": "bad", "gpus": 2, "switches": [switch],
           "links": [{"between": ["gpu0", switch["name"]], "gbps": 25},
                     {"between": ["gpu1", switch["name"]], "gbps": 25}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(doc)))
    assert message in one_line(synth_main("topo", "show", str(path)), 2)


def test_a_malformed_version_3_file_is_malformed_whatever_else_is_wrong():
    from synth.schedule.verify import MalformedSchedule

    doc = nvls_doc()
    doc["steps"][0]["sends"][0]["via"] = "nope"  # invalid ...
    doc["steps"][1]["rounds"] = "three"          # ... but first of all malformed
    with pytest.raises(MalformedSchedule, match="rounds"):
        verify_schedule(doc)
    for edit, where in ((lambda d: d["topology"]["switches"][0].update(can=[["reduce"]]),
                         "can"),
                        (lambda d: d["steps"][1]["sends"][0]["dsts"].append(0), "own src"),
                        (lambda d: d["topology"]["switches"].append(
                            d["topology"]["switches"][0]), "a second switch")):
        doc = nvls_doc()
        edit(doc)
        with pytest.raises(MalformedSchedule, match=where):
            verify_schedule(doc)


@pytest.mark.parametrize("box, k, sums_inside", [("dgxh100", 2, True), ("dgx2", 4, False)])
def test_sharp_reduces_across_boxes_and_beats_every_schedule_without_it(tmp_path, box, k,
                                                                        sums_inside):
    # the box file with `sharp: true` on its network, repeated: the network switches
    # reduce and multicast each peer group's pieces; dgxh100's NVSwitch sums the boxes,
    # dgx2's GPUs do (its V100-generation NVSwitch cannot: on two boxes that GPU work
    # is the bottleneck, on four the network without SHARP is; dgx2x4 is README's
    # claim, the branch test_gpus_sum_inside_each_box_and_sharp_sums_across_them
    # derives by hand)
    from synth.topology.hierarchy import find_hierarchy

    text = (REPO / "topologies" / f"{box}.yaml").read_text()
    path = tmp_path / f"{box}-sharp.yaml"
    path.write_text(text.replace("alpha_us: 2.6}", "alpha_us: 2.6, sharp: true}"))
    lowering = lower_with_routes(resolve(str(path), k))
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks))
    h, _ = find_hierarchy(lowering)
    search = nvls_search(lowering.model, Limits(max_steps=20), None, h)
    assert "SHARP across boxes" in search.stopped
    assert ("NVLS in each box" in search.stopped) == sums_inside
    across = [p.schedule for p in search.points if "in turn" not in p.schedule.info["method"]]
    a, z = sorted(across, key=lambda s: s.batches)[-2:]
    steady = Fraction(z.rounds - a.rounds, z.collective.chunks - a.collective.chunks)
    assert steady < b.without_in_network  # faster than anything without the switches
    if sums_inside:
        assert steady == b.rounds_per_chunk == Fraction(1, 16)
    verify_schedule(schedule_to_dict(z))


@pytest.mark.parametrize("name, root", [("allgather", None), ("reducescatter", None),
                                        ("broadcast", 3), ("reduce", 5)])
def test_one_switch_operation_per_share_reaches_the_bound_in_one_step(name, root):
    lowering = lower_with_routes(resolve("dgxh100"))
    b = bounds(lowering, make_collective(name, 8, 1, root))
    search = nvls_search(lowering.model, Limits(max_steps=4), None, None, name, root)
    (point,) = search.points
    schedule = point.schedule
    assert schedule.num_steps == 1 and schedule.in_network
    assert Fraction(schedule.rounds, schedule.collective.chunks) == b.rounds_per_chunk
    verify_schedule(schedule_to_dict(schedule))
    # by hand: 18 lanes a port; 18 chunks a share fill it. Broadcast: the root's up port
    # carries its share once (18 chunks, 1 round), every other down port receives it
    # once; reduce: the root's down port takes the sum once. Allgather: each down port
    # receives 7 shares (7 x 18 chunks: 7 rounds); reducescatter: each up port feeds 7.
    assert schedule.collective.chunks == 18
    assert schedule.rounds == (1 if root is not None else 7)
    # as plain sends (checked by the verifier, not priced by synth): N - 1 = 7 times
    # more at the root of a broadcast or a reduce (its port carries every copy: 7 x 18
    # chunks, 7 rounds); allgather's and reducescatter's direct sends are as fast
    sends = schedule_to_dict(schedule.as_sends())
    sends["steps"][0]["rounds"] = 7
    verify_schedule(sends)
    sends["steps"][0]["rounds"] = 6
    with pytest.raises(ScheduleInvalid, match="over its capacity 18 x 6 rounds"):
        verify_schedule(sends)
    # a switch without the capability the operation needs is refused
    plain = copy.deepcopy(schedule_to_dict(schedule))
    plain["topology"]["switches"][0]["can"] = ["reduce"] if name in (
        "allgather", "broadcast") else ["multicast"]
    with pytest.raises(ScheduleInvalid, match="cannot|lacks|capab"):
        verify_schedule(plain)


def test_the_frontier_of_a_broadcast_through_nvls_is_one_step_at_the_bound(tmp_path):
    made = synth_main("broadcast", "--topo", "dgxh100", "--root", "2", "--time-limit", "20",
                      "--out", str(tmp_path), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    frontier = json.loads(made.stdout)["frontier"]
    (point,) = [p for p in frontier if p["method"].startswith("in-network")]
    assert point["steps"] == 1 and point["ratio_to_bound"] == 1.0
    assert synth_main("verify", point["file"]).returncode == 0
    # no runtime stores without a reduction (a multicast alone): beside it, each
    # runtime's own fastest, and they load
    assert point["loads"] == "neither"
    assert {p["loads"] for p in frontier if p is not point} <= {"both", "MSCCL XML", "MSCCL++"}


def test_the_exact_search_uses_switch_operations_where_they_pay():
    from dataclasses import replace

    from synth.search.instance import solve_instance

    model = schedule_from_dict(nvls_doc()).model
    # allreduce of 8 chunks in 3 steps: without the switch every port carries 2(N-1)/N
    # of the buffer, 12 rounds at least; overlapping one half's reduction with the
    # other's multicast, the switch does it in 11
    out = solve_instance(model, make_collective("allreduce", N, 8), 3, 11, time_limit=60)
    assert out.status == "sat" and out.schedule.rounds <= 11 and out.schedule.in_network
    verify_schedule(schedule_to_dict(out.schedule))
    # a broadcast of 3 chunks in one step: 3 rounds through the switch (the root's port
    # pays each chunk once), 9 without; a reduce is its dual: run backwards, the
    # multicasts become switch reductions
    for name in ("broadcast", "reduce"):
        coll = make_collective(name, N, 3, 0)
        out = solve_instance(model, coll, 1, 3, time_limit=60)
        assert out.status == "sat" and out.schedule.in_network
        kinds = {op.op for op in out.schedule.steps[0].switch_ops}
        assert kinds == ({"multicast"} if name == "broadcast" else {"switch_reduce"})
        verify_schedule(schedule_to_dict(out.schedule))
        plain = solve_instance(replace(model, switches=()), coll, 1, 3, time_limit=60)
        assert plain.status == "unsat"


def test_a_port_two_ranks_share_pays_each_ranks_operation():
    # ranks 1 and 2 share one NIC (group nic12) into a switch that multicasts: their
    # multicasts of one chunk are two operations on it, not one
    from synth.search.instance import solve_instance
    from synth.topology.linkmodel import Group, LinkModel, RankLink, Switch

    links = [(0, 1), (0, 2), (1, 3), (2, 4)]
    model = LinkModel("shared", 25.0, 5, tuple(RankLink(a, b, Fraction(1), 0.7)
                                               for a, b in links),
                      (Group("up0", ((0, 1), (0, 2)), Fraction(1)),
                       Group("nic12", ((1, 3), (2, 4)), Fraction(1))), (),
                      (Switch("sw", ("multicast",), tuple(links),
                              ((0, "up0"), (1, "nic12"), (2, "nic12")), ()),))
    coll = make_collective("broadcast", 5, 1, 0)
    assert solve_instance(model, coll, 2, 2, time_limit=60).status == "unsat"
    found = solve_instance(model, coll, 2, 3, time_limit=60)
    assert found.status == "sat" and found.schedule.rounds == 3
    verify_schedule(schedule_to_dict(found.schedule))


# A box of 2 GPUs on an NVSwitch that cannot compute (2 lanes each way: capacity 2),
# each GPU with its own NIC of 10 GB/s (capacity 10/25 = 2/5) on a rail switch that
# does (InfiniBand SHARP). Three boxes: GPUs sum inside a box, SHARP across boxes.
SHARP_BOX = {
    "name": "sharp-box", "unit_gbps": 25, "gpus": 2,
    "switches": [{"name": "nvswitch", "kind": "nvswitch"}], "nics": ["nic0", "nic1"],
    "links": [{"between": ["gpu0", "nvswitch"], "gbps": 25, "count": 2, "alpha_us": 0.35},
              {"between": ["gpu1", "nvswitch"], "gbps": 25, "count": 2, "alpha_us": 0.35},
              {"between": ["gpu0", "nic0"], "gbps": 64},
              {"between": ["gpu1", "nic1"], "gbps": 64}],
    "network": {"fabric": "rails", "gbps": 10, "alpha_us": 2.6, "sharp": True}}


def test_gpus_sum_inside_each_box_and_sharp_sums_across_them(tmp_path):
    """The path of across_boxes_allreduce where no box's switch reduces (dgx2 with
    SHARP): every figure below derived by hand for K = 3 boxes of g = 2 GPUs.

    p pieces a shard, K | p; part = p / K pieces per peer-group owner. Per batch:
      step 0, GPUs reduce in the box: link 0->1 carries p chunks on capacity 2;
      step 1, SHARP reduce: each rank feeds the K - 1 = 2 reductions into its peers,
              2 x part on its NIC's up port of capacity 2/5; its own reduction pays its
              down port once (part);
      step 2, SHARP multicast: its own part leaves once (up port: part), the 2 peers'
              parts arrive (down port: 2 x part);
      step 3, GPUs copy out: p chunks on link 0->1.
    Steady state (all four at once): each NIC port carries 3 part = p chunks, p / (2/5)
    = 5p/2 rounds (NVLink: 2p chunks on capacity 2, p rounds) for g p = 2p chunks. With
    p = K = 3 that is ceil(7.5) = 8 rounds for 6 chunks (4/3 a chunk); p = 6 fills the
    port, 15 rounds for 12 chunks (5/4). The least p at the least cost: 6.
    With p = 6, part = 2: step rounds 6/2 = 3, 4/(2/5) = 10, 10, 3.
    P batches: P + 3 expanded steps; t = 0: 3; t = 1 (steps 0, 1): 10; t = P + 1
    (steps 2, 3): 10; t = P + 2: 3; the P - 1 steps between run steps 1 and 2 of
    some batches (and 0 or 3) together: 15 rounds each. 26 + 15 (P - 1) rounds for
    12 P chunks."""
    from synth.topology.hierarchy import find_hierarchy

    path = tmp_path / "sharp-box.yaml"
    path.write_text(yaml.safe_dump(SHARP_BOX))
    lowering = lower_with_routes(resolve(str(path), 3))
    h, _ = find_hierarchy(lowering)
    search = nvls_search(lowering.model, Limits(max_steps=20), None, h)
    assert "SHARP across boxes" in search.stopped and "NVLS" not in search.stopped
    assert search.points
    for point in search.points:
        schedule, p = point.schedule, point.schedule.batches
        assert [s.rounds for s in schedule.steps] == [3, 10, 10, 3]
        assert (schedule.rounds, schedule.collective.chunks) == (26 + 15 * (p - 1), 12 * p)
        assert schedule.num_steps == p + 3
    deepest = max((p.schedule for p in search.points), key=lambda s: s.batches)
    assert deepest.batches == 16
    # the GPUs' steps are plain sends, the network's are switch operations of 3 ranks
    gather, up, down, spread = deepest.steps
    assert not gather.switch_ops and {x.op for x in gather.sends} == {"reduce"}
    assert not spread.switch_ops and {x.op for x in spread.sends} == {"copy"}
    assert {(op.op, len(op.srcs), len(op.dsts), op.count) for op in up.switch_ops} == {
        ("switch_reduce", 3, 1, 2)}
    assert {(op.op, len(op.srcs), len(op.dsts), op.count) for op in down.switch_ops} == {
        ("multicast", 1, 2, 2)}
    # its cost (docs/schedule-file.md): every expanded step but the first and the last
    # crosses the network (alpha 2.6 us), those two only NVLink (0.35 us); 251 rounds
    # of a 192nd of the buffer at 25 GB/s
    cost = schedule_cost(deepest)
    assert cost.latency_us == pytest.approx(2 * 0.35 + 17 * 2.6)
    assert cost.us_per_byte * 1e6 == pytest.approx(251 * 1e6 / (192 * 25 * 1e3))
    doc = schedule_to_dict(deepest)
    verify_schedule(doc)
    # the verifier agrees on the rounds: one fewer in the steady state is refused
    doc["pipeline"]["rounds"][5] = 14
    with pytest.raises(ScheduleInvalid, match="over its capacity 0.4 x 14 rounds"):
        verify_schedule(doc)
