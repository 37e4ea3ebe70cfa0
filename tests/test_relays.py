"""Port channels the MSCCL++ executor sets up (docs/runtimes.md, "A multi-node plan").

The executor gives local rank k of a node InfiniBand device IB k, from a table of
eight: local ranks 8 and up have none. Hand-built schedules on two boxes of 9 GPUs
(3 NICs, so more GPUs than NICs) have sends from and to local rank 8 across boxes:
synth.export.relays moves them through GPUs of their boxes that have devices, the
verifier and the plan simulator accept the result, and the plan of the schedule as it
was is rejected by the simulator's rule S10 alone. Two boxes of 2 GPUs: GPUs of
different local ranks connect directly (the executor pairs any two devices). A send no
relay can carry is refused with one line. Every multi-node built-in's hierarchical (or
tree) allreduce exports and passes the simulator with its ranks per node; on nodes of
more than 8 GPUs the export summary says that only MSCCL++ main since 2c4cc6f sets the
plan up (the releases read past their table of eight at buffer registration).
"""

import json

import pytest

from synth.construct.baselines import baselines, hierarchical_baseline, tree_baseline
from synth.errors import BadInput
from synth.export import render
from synth.export.mscclpp import to_mscclpp_plan
from synth.export.mscclpp_sim import PlanInvalid, check_mscclpp_plan
from synth.export.relays import ib_relayed, ranks_per_node
from synth.schedule.collectives import make_collective
from synth.schedule.file import verified, write_schedule
from synth.schedule.ir import Schedule, Send, Step
from synth.topology.catalog import builtin_names, join_boxes, resolve
from synth.topology.linkmodel import lower, ranks_per_box, restrict, switch_rounds
from synth.topology.physical import topology_from_dict
from tests.in_process import synth_main


def box(gpus, nics):
    """`gpus` GPUs on one NVSwitch, GPU g on the PCIe switch of NIC g * nics // gpus;
    copies join on one network switch."""
    return topology_from_dict({
        "name": f"box{gpus}", "unit_gbps": 25, "gpus": gpus,
        "switches": [{"name": "nvs", "kind": "nvswitch"}]
        + [{"name": f"pcie{j}", "kind": "pcie_switch"} for j in range(nics)],
        "nics": [f"nic{j}" for j in range(nics)],
        "links": [{"between": [f"gpu{g}", "nvs"], "gbps": 100, "alpha_us": 0.7}
                  for g in range(gpus)]
        + [{"between": [f"gpu{g}", f"pcie{g * nics // gpus}"], "gbps": 16}
           for g in range(gpus)]
        + [{"between": [f"pcie{j}", f"nic{j}"], "gbps": 16} for j in range(nics)],
        "network": {"fabric": "single-switch", "gbps": 12.5, "alpha_us": 2.6},
    })


@pytest.fixture(scope="module")
def nine():
    """Two boxes of 9 GPUs and 3 NICs: ranks 0-8 and 9-17, local rank 8 = ranks 8, 17."""
    return lower(join_boxes(box(9, 3), 2, "box9x2"))


@pytest.fixture(scope="module")
def two():
    return lower(join_boxes(box(2, 2), 2, "box2x2"))


def schedule(model, name, steps, root=None):
    """A hand-built version 1 schedule: steps of (chunk, src, dst, op) sends."""
    coll = make_collective(name, model.ranks, 1, root)
    built = tuple(Step(switch_rounds(model, (), sends), sends)
                  for sends in (tuple(Send(*x) for x in step) for step in steps))
    return verified(Schedule(coll, model, built, {"method": "hand-built"}))


def sends(s):
    return [sorted((x.chunk, x.src, x.dst, x.op) for x in step.sends) for step in s.steps]


def port_peers(plan):
    return {(g["id"], p) for g in plan["gpus"] for ch in g["channels"]
            if ch["channel_type"] == "port" for p in ch["connected_to"]}


def test_a_reduction_from_a_gpu_without_a_device_to_one_without_crosses_on_rail_0(nine):
    # reduce to rank 8: each box sums into its local rank 8, then 17 sends to 8. Neither
    # has an InfiniBand device, so 17 hands its sum to 9 (local rank 8 mod 8 = 0), 9
    # sends it across to 0, 0 adds it into 8: relays whose slots hold nothing the
    # schedule needs later (reduce keeps only the root's result)
    s = schedule(nine, "reduce", [
        [(0, r, 8, "reduce") for r in range(8)] + [(0, r, 17, "reduce") for r in range(9, 17)],
        [(0, 17, 8, "reduce")]], root=8)
    relayed, note = ib_relayed(s)
    assert sends(relayed)[1:] == [[(0, 17, 9, "copy")], [(0, 9, 0, "copy")],
                                  [(0, 0, 8, "reduce")]]
    assert sends(relayed)[0] == sends(s)[0]
    assert "1 cross-box send relayed inside their boxes (2 steps added)" in note
    text, summary = render(s, "mscclpp")  # simulated with 9 ranks per node by render
    plan = json.loads(text)
    assert port_peers(plan) == {(9, 0), (0, 9)}
    check_mscclpp_plan(plan, root=8, ranks_per_node=9)
    assert "relayed inside their boxes" in summary

    # the plan of the schedule as it was: a port channel 17-8, valid on one node, and
    # refused by the executor's device table on nodes of 9
    before = to_mscclpp_plan(s)
    assert port_peers(before) == {(17, 8), (8, 17)}
    check_mscclpp_plan(before, root=8)
    with pytest.raises(PlanInvalid, match=r"gpus\[8\]: a port channel to gpu 17 on another "
                                          "node, but gpu 8 is local rank 8 of its node, and "
                                          "the executor's InfiniBand transports IB0..IB7"):
        check_mscclpp_plan(before, root=8, ranks_per_node=9)


def test_a_relay_whose_slot_the_schedule_still_needs_is_passed_over(nine):
    # as above, but 9 keeps its own value for step 2: 17's sum cannot wait in 9's slot
    # of chunk 0 and goes through 10 and 1 (local rank 1) instead; in step 2, 9 has a
    # device and 8 none: 9 sends to 0 (its own local rank), 0 adds it into 8
    s = schedule(nine, "reduce", [
        [(0, r, 8, "reduce") for r in range(8)] + [(0, r, 17, "reduce") for r in range(10, 17)],
        [(0, 17, 8, "reduce")],
        [(0, 9, 8, "reduce")]], root=8)
    relayed, note = ib_relayed(s)
    assert sends(relayed)[1:] == [[(0, 17, 10, "copy")], [(0, 10, 1, "copy")],
                                  [(0, 1, 8, "reduce")],
                                  [(0, 9, 0, "copy")], [(0, 0, 8, "reduce")]]
    assert "2 cross-box sends relayed inside their boxes (3 steps added)" in note
    check_mscclpp_plan(json.loads(render(s, "mscclpp", check=False)[0]), root=8,
                       ranks_per_node=9)


def test_a_copy_to_a_gpu_without_a_device_arrives_at_its_boxs_gpu_of_the_sources_rail(nine):
    # broadcast from 0: 0 -> 17 across (17 is local rank 8), then each box from 0 and 17
    s = schedule(nine, "broadcast", [
        [(0, 0, 17, "copy")],
        [(0, 0, r, "copy") for r in range(1, 9)] + [(0, 17, r, "copy") for r in range(9, 17)]],
        root=0)
    relayed, note = ib_relayed(s)
    assert sends(relayed)[:2] == [[(0, 0, 9, "copy")], [(0, 9, 17, "copy")]]
    assert "(1 step added)" in note
    plan = json.loads(render(s, "mscclpp")[0])
    check_mscclpp_plan(plan, root=0, ranks_per_node=9)
    assert port_peers(plan) == {(0, 9), (9, 0)}


def test_s10_keeps_memory_channels_inside_a_node(nine):
    s = schedule(nine, "broadcast", [
        [(0, 0, 9, "copy")],
        [(0, 0, r, "copy") for r in range(1, 9)] + [(0, 9, r, "copy") for r in range(10, 18)]],
        root=0)
    plan = json.loads(render(s, "mscclpp")[0])
    check_mscclpp_plan(plan, root=0, ranks_per_node=9)
    # the same plan started 3 ranks a node: 0's memory channel to 3 would cross nodes
    with pytest.raises(PlanInvalid, match="a memory channel to gpu 3 on another node"):
        check_mscclpp_plan(plan, root=0, ranks_per_node=3)
    with pytest.raises(PlanInvalid, match="18 ranks do not fill nodes of 4 ranks"):
        check_mscclpp_plan(plan, root=0, ranks_per_node=4)


def relabelled(plan, swap):
    """The plan with ranks a and b of `swap` exchanging places everywhere."""
    m = {swap[0]: swap[1], swap[1]: swap[0]}
    out = json.loads(json.dumps(plan))
    gpus = [None] * len(out["gpus"])
    for g in out["gpus"]:
        g["id"] = m.get(g["id"], g["id"])
        for ch in g["channels"]:
            ch["connected_to"] = [m.get(p, p) for p in ch["connected_to"]]
        for rb in g["remote_buffers"]:
            rb["rank"] = m.get(rb["rank"], rb["rank"])
        gpus[g["id"]] = g
    out["gpus"] = gpus
    return out


def test_s10_rejects_a_valid_plan_whose_port_channel_lands_on_local_rank_8(nine):
    s = schedule(nine, "allreduce", [
        [(0, r, 0, "reduce") for r in range(1, 9)] + [(0, r, 9, "reduce") for r in range(10, 18)],
        [(0, 0, 9, "reduce"), (0, 9, 0, "reduce")],
        [(0, 0, r, "copy") for r in range(1, 9)] + [(0, 9, r, "copy") for r in range(10, 18)]])
    plan = json.loads(render(s, "mscclpp")[0])
    assert port_peers(plan) == {(0, 9), (9, 0)}
    # 0 and 8 change places (allreduce treats every rank alike): a valid allreduce still,
    # on one node; on nodes of 9 its port channel joins local rank 8 to local rank 0
    moved = relabelled(plan, (0, 8))
    check_mscclpp_plan(moved)
    with pytest.raises(PlanInvalid, match="gpu 8 is local rank 8"):
        check_mscclpp_plan(moved, ranks_per_node=9)


def test_gpus_of_different_local_ranks_connect_directly(two):
    # allreduce on 2 boxes of 2: after summing in each box, chunk 0 is exchanged between
    # ranks 0 and 3 and chunk 1 between 1 and 2, different local ranks: IB0 with IB1,
    # which the executor connects (docs/runtimes.md): nothing is relayed
    s = schedule(two, "allreduce", [
        [(0, 1, 0, "reduce"), (0, 2, 3, "reduce")],
        [(0, 0, 3, "reduce"), (0, 3, 0, "reduce")],
        [(0, 0, 1, "copy"), (0, 3, 2, "copy")]])
    assert ib_relayed(s) == (s, "")
    text, summary = render(s, "mscclpp")
    plan = json.loads(text)
    assert port_peers(plan) == {(0, 3), (3, 0)} and "relayed" not in summary
    check_mscclpp_plan(plan, ranks_per_node=2)


def test_a_send_no_relay_can_carry_is_refused_in_one_line(nine, tmp_path):
    # reduce to rank 8 in one step: all 17 others send to it at once. 9..16 (local
    # ranks 0-7) hand their values to 0..7, whose own chunk 0 is not needed once sent;
    # 17 has no device either, and the GPUs of its box with one, 9..16, read their slot
    # of chunk 0 in this very step: no relay is free
    s = schedule(nine, "reduce", [[(0, r, 8, "reduce") for r in range(18) if r != 8]], root=8)
    with pytest.raises(BadInput, match="step 0 sends chunk 0 from rank 17 to rank 8 in "
                                       "another box, but rank 17 is local rank 8 of its node"):
        ib_relayed(s)
    path = write_schedule(s, tmp_path / "reduce.json")
    out = tmp_path / "reduce.mscclpp.json"
    done = synth_main("export", path, "--to", "mscclpp", "-o", out)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "cannot export to MSCCL++: step 0 sends chunk 0 from rank 17" in done.stderr
    assert not out.exists()
    # the XML has no such rule (NCCL's own transports carry it)
    assert synth_main("export", path, "--to", "msccl-xml", "-o", "-").returncode == 0


@pytest.mark.parametrize("topo, note", [("dgx2", True), ("dgxh100", False)])
def test_the_export_summary_says_which_releases_set_up_nodes_of_more_than_8(
        topo, note, tmp_path):
    # a single-node plan too: v0.8.0 to v0.10.0 index their 8 InfiniBand transports
    # with every local rank at buffer registration, on any host with IB devices
    (direct,) = [b.schedule for b in baselines(lower(resolve(topo)), "allgather")
                 if b.algorithm == "direct"]
    path = write_schedule(direct, tmp_path / "ag.json")
    done = synth_main("export", path, "--to", "mscclpp", "-o", tmp_path / "ag.mscclpp.json")
    assert done.returncode == 0, done.stderr
    summary = done.stdout.splitlines()[0]
    said = ("; nodes of 16 ranks: MSCCL++ v0.8.0 to v0.10.0 read past their 8 InfiniBand "
            "transports for local ranks 8 and up when they register buffers, on any host "
            "with InfiniBand devices, single-node plans included: there only MSCCL++ main "
            "since 2c4cc6f sets this plan up")
    assert (said in summary) == note and ("nodes of" in summary) == note


def test_ranks_per_box_are_runs_of_equally_many_consecutive_ranks():
    # what `synth plan`'s nccl-tests lines (-npernode) and the MSCCL++ export both count
    two = lower(resolve("dgx2x2"))  # GPUs 0-15 in one box, 16-31 in the other
    assert (ranks_per_box(two), ranks_per_box(lower(resolve("dgxh100x2")))) == (16, 8)
    assert ranks_per_box(lower(resolve("dgx1"))) == 8  # one box
    assert ranks_per_box(restrict(two, [0, 1, 16, 17])) == 2
    for ranks in ([0, 1, 2, 16], [0, 16, 1, 17]):  # 3 + 1; 2 + 2 but not in runs
        assert ranks_per_box(restrict(two, ranks)) is None
        with pytest.raises(BadInput, match="not runs of equally many consecutive ranks"):
            ranks_per_node(restrict(two, ranks))


# built-in clusters: every built-in box with a network section, two of them
CLUSTERS = {"dgx1ibx2": 8, "dgx2x2": 16, "dgxa100x2": 8, "dgxb200x2": 8, "dgxh100x2": 8, "dgxh200x2": 8,
            "gb200nvl72x2": 72, "gb200trayx2": 4, "mi250x2": 8, "mi300xx2": 8,
            "ndv2x2": 8}  # ranks per node: the box's GPUs


def test_the_clusters_listed_are_every_built_in_that_joins():
    joined = set()
    for name in builtin_names():
        try:
            resolve(f"{name}x2")
        except BadInput:
            continue  # no NICs or network (dgx1)
        joined.add(f"{name}x2")
    assert joined == set(CLUSTERS)


# gb200nvl72x2's plan (144 ranks, local ranks 8-71 relaying) takes about 50 s to export:
# too slow for the suite; dgx2x2 checks the relays
EXPORTED = sorted(set(CLUSTERS) - {"gb200nvl72x2"})


@pytest.mark.parametrize("topo", EXPORTED)
def test_every_built_in_cluster_exports_a_plan_with_port_channels_on_ib_devices_only(topo):
    # what synth controls: port channels only between local ranks the executor gives an
    # InfiniBand device. Whether it sets the plan up is the release's business: on
    # dgx2's 16-GPU nodes only MSCCL++ main since 2c4cc6f does (the summary says so:
    # test_the_export_summary_says_which_releases_set_up_nodes_of_more_than_8)
    model = lower(resolve(topo))
    built = hierarchical_baseline(model, "allreduce", None)
    if isinstance(built, str):  # ndv2: GPUs 2-7 reach no NIC, no hierarchy of equals
        built = tree_baseline(model, "allreduce", None)
    plan = json.loads(render(built.schedule, "mscclpp", check=False)[0])
    g = CLUSTERS[topo]
    check_mscclpp_plan(plan, ranks_per_node=g)
    across = {(a, b) for a, b in port_peers(plan) if a // g != b // g}
    assert across and all(a % g < 8 and b % g < 8 for a, b in across)
    # boxes of more than 8 GPUs have some past the executor's eight devices: dgx2's local
    # ranks 8-15 (gb200nvl72's 8-71) relay, in steps of their own
    relayed = plan["synth"]["steps"] > built.schedule.num_steps
    assert relayed == (g > 8)
