"""MSCCL++ plans with switch channels (NVLS): the exporter writes a switch reduction and
the multicast of its sum as one glres, and the plan simulator runs glres on every
member's memory (a glres alone, with a group of one rank: tests/test_switch_split.py).
Hand-written plans check each way such a plan can be wrong."""

import json

import pytest

from synth.construct.in_network import nvls_search
from synth.errors import BadInput
from synth.export import render
from synth.export.mscclpp_sim import PlanInvalid, check_mscclpp_plan
from synth.schedule.file import schedule_from_dict, write_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.test_in_network import nvls_doc
from tests.test_reliability import one_line, synth_cli

N = 4
MEMORY = {"channel_type": "memory"}


def nvls_plan(inplace=False, ready=True, done=True):
    """Allreduce on 4 GPUs in MSCCL++'s NVLS shape: handshake; every rank signals the
    others that its chunks are ready and waits for theirs; rank r's glres sums chunk r
    of every rank and stores it to every rank; every rank signals that its sum is
    stored and waits for the others'."""
    ranks = list(range(N))
    gpus = []
    for r in ranks:
        peers = [p for p in ranks if p != r]
        ids = list(range(N - 1))
        barrier = [dict(MEMORY, name="signal", channel_ids=ids),
                   dict(MEMORY, name="wait", channel_ids=ids), {"name": "nop"}]
        ops = [dict(MEMORY, name="rlxsignal", channel_ids=ids),
               dict(MEMORY, name="rlxwait", channel_ids=ids), {"name": "nop"},
               *(barrier if ready else []),
               {"name": "glres", "channel_type": "switch",
                "src_buff": [{"switch_channel_id": 0, "index": r, "size": 1}],
                "dst_buff": [{"switch_channel_id": 0 if inplace else 1, "index": r,
                              "size": 1}]},
               {"name": "nop"}, *(barrier if done else [])]
        bufs = ["o"] if inplace else ["i", "o"]
        gpus.append({
            "id": r, "input_chunks": N, "output_chunks": N, "scratch_chunks": 0,
            "channels": [dict(MEMORY, connected_to=peers)]
            + [{"channel_type": "switch", "buffer_type": b,
                "rank_groups": [{"size": N, "ranks": ranks}]} for b in bufs],
            "remote_buffers": [], "semaphores": [],
            "threadblocks": [{"id": 0, "ops": ops, "channels": [
                dict(MEMORY, channel_ids=ids),
                {"channel_type": "switch", "channel_ids": list(range(len(bufs)))}]}]})
    return {"name": "nvls", "collective": "allreduce", "protocol": "Simple", "inplace": inplace,
            "max_message_size": 1 << 30, "gpus": gpus}


def split_plan(sum_over=None):
    """Allreduce on 4 GPUs out of place with each glres alone: rank r's first sums chunk
    r of every rank's input into its own output alone (a switch channel of rank r
    alone over o), its second loads that sum from r alone and stores it to every rank;
    barriers of signals and waits before, between and after. `sum_over`: the ranks of
    the first glres's source group (all by default)."""
    ranks = list(range(N))
    gpus = []
    for r in ranks:
        peers, ids = [p for p in ranks if p != r], list(range(N - 1))
        barrier = [dict(MEMORY, name="signal", channel_ids=ids),
                   dict(MEMORY, name="wait", channel_ids=ids), {"name": "nop"}]

        def glres(src, dst):
            return {"name": "glres", "channel_type": "switch",
                    "src_buff": [{"switch_channel_id": src, "index": r, "size": 1}],
                    "dst_buff": [{"switch_channel_id": dst, "index": r, "size": 1}]}
        groups = [("i", sum_over(r) if sum_over else ranks), ("o", [r]), ("o", ranks)]
        gpus.append({
            "id": r, "input_chunks": N, "output_chunks": N, "scratch_chunks": 0,
            "channels": [dict(MEMORY, connected_to=peers)]
            + [{"channel_type": "switch", "buffer_type": b,
                "rank_groups": [{"size": N, "ranks": g}]} for b, g in groups],
            "remote_buffers": [], "semaphores": [],
            "threadblocks": [{"id": 0, "channels": [
                dict(MEMORY, channel_ids=ids), {"channel_type": "switch", "channel_ids": [0, 1, 2]}],
                "ops": [dict(MEMORY, name="rlxsignal", channel_ids=ids),
                        dict(MEMORY, name="rlxwait", channel_ids=ids), {"name": "nop"},
                        *barrier, glres(0, 1), {"name": "nop"}, *barrier, glres(1, 2),
                        {"name": "nop"}, *barrier]}]})
    return {"name": "split", "collective": "allreduce", "protocol": "Simple",
            "inplace": False, "max_message_size": 1 << 30, "gpus": gpus}


def test_a_glres_from_a_group_to_its_rank_alone_and_back_simulates():
    report = check_mscclpp_plan(split_plan())
    assert report["ops"]["glres"] == 2 * N
    assert report["channels"]["switch"] == 3 * N


def test_a_glres_sums_the_source_group_only():
    # rank r's first glres loads from r alone: its output holds its own chunk r, which
    # its second stores to every rank
    with pytest.raises(PlanInvalid, match=r"gpu 0 ends with o\[0\] = \{0:0\}, expected "
                                          r"\{0:0, 1:0, 2:0, 3:0\}"):
        check_mscclpp_plan(split_plan(sum_over=lambda r: [r]))


def test_a_hand_written_nvls_plan_simulates_in_and_out_of_place():
    for inplace in (False, True):
        report = check_mscclpp_plan(nvls_plan(inplace))
        assert report["ops"]["glres"] == N
        assert report["channels"] == {"memory": N * (N - 1), "port": 0,
                                      "switch": N * (1 if inplace else 2)}


def broken(change):
    plan = nvls_plan()
    change(plan["gpus"])
    return plan


def swap_switch_channels(gpus):
    chans = gpus[2]["channels"]
    chans[1], chans[2] = chans[2], chans[1]


def glres_entry(gpus, rank, side):
    return gpus[rank]["threadblocks"][0]["ops"][6][side][0]


def store_to_others(gpus):
    # rank 2's glres stores through a group of the three others: it must declare it,
    # and the executor's set-up refuses a group without the rank ("rank is not among
    # allRanks")
    for gpu in gpus:
        gpu["channels"][2]["rank_groups"][0]["ranks"] = [0, 1, 3]


def alone_of_another(gpus):
    # rank 0 declares a group of rank 1 alone (each rank's own, 1's, set up by rank 0)
    gpus[0]["channels"][2]["rank_groups"][0]["ranks"] = [1]


@pytest.mark.parametrize("plan, message", [
    # rank r's kernel may end before the sums stored into its output arrive
    (nvls_plan(done=False), "may not have arrived"),
    # the members declare their switch channels in different orders
    (broken(swap_switch_channels), "same order"),
    # a rank group without the rank that declares it
    (broken(lambda g: g[0]["channels"][1]["rank_groups"][0].update(ranks=[1, 2, 3])),
     "must join it"),
    # a chunk range past the buffer
    (broken(lambda g: glres_entry(g, 3, "src_buff").update(index=3, size=2)), "outside"),
    # a switch channel id the thread block does not hold
    (broken(lambda g: glres_entry(g, 1, "dst_buff").update(switch_channel_id=5)),
     "not in the thread block's table"),
    # a glres storing to a group without its own rank
    (broken(store_to_others), r"gpus\[2\].channels\[2\].rank_groups\[0\]: a switch channel "
                              r"of gpu 2 must join it \(ranks \[0, 1, 3\]"),
    # a group of one rank declared by another
    (broken(alone_of_another), r"gpus\[0\].channels\[2\].rank_groups\[0\]: a switch "
                               r"channel of gpu 0 must join it \(ranks \[1\]"),
])
def test_each_way_a_switch_plan_can_be_wrong_is_caught(plan, message):
    with pytest.raises(PlanInvalid, match=message):
        check_mscclpp_plan(plan)


def test_a_switch_reduction_in_a_collective_that_does_not_combine_is_caught():
    plan = nvls_plan()
    plan["collective"] = "broadcast"
    plan["synth"] = {"root": 0}
    for gpu in plan["gpus"]:
        gpu["input_chunks"] = gpu["output_chunks"] = N
    with pytest.raises(PlanInvalid, match="does not combine"):
        check_mscclpp_plan(plan)


def test_without_any_handshake_a_peer_input_is_read_too_early():
    plan = nvls_plan(ready=False)
    for gpu in plan["gpus"]:
        del gpu["threadblocks"][0]["ops"][:3]  # no relaxed handshake either
    with pytest.raises(PlanInvalid, match="reads i\\[.\\] of gpu .*without a nop, signal"):
        check_mscclpp_plan(plan)


def test_the_hand_built_nvls_schedule_exports_as_one_glres_per_rank():
    schedule = schedule_from_dict(nvls_doc())
    for inplace in (False, True):
        text, summary = render(schedule, "mscclpp", inplace=inplace)
        plan = json.loads(text)
        ops = [op for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]]
        assert sum(op["name"] == "glres" for op in ops) == N
        assert "switch" in summary and "right result" in summary
        switch = [c for c in plan["gpus"][0]["channels"] if c["channel_type"] == "switch"]
        assert [c["buffer_type"] for c in switch] == (["o"] if inplace else ["i", "o"])
        assert switch[0]["rank_groups"] == [{"size": N, "ranks": list(range(N))}]


def test_synthesized_nvls_allreduce_on_dgxh100_exports_and_simulates(tmp_path):
    lowering = lower_with_routes(resolve("dgxh100"))
    points = nvls_search(lowering.model, Limits(max_steps=65)).points
    deepest, single = points[0].schedule, points[-1].schedule
    assert deepest.batches == 64 and single.batches == 1
    for schedule in (deepest, single):
        text, summary = render(schedule, "mscclpp")
        plan = json.loads(text)
        assert "simulated over two launches: no deadlock, right result" in summary
        glres = [op for tb in plan["gpus"][5]["threadblocks"] for op in tb["ops"]
                 if op["name"] == "glres"]
        assert glres and all(op["src_buff"][0]["index"] == op["dst_buff"][0]["index"]
                             for op in glres)
    path = tmp_path / "nvls.json"
    write_schedule(single, path)
    out = tmp_path / "nvls.mscclpp.json"
    done = synth_cli("export", str(path), "--to", "mscclpp", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert check_mscclpp_plan(json.loads(out.read_text()))["ops"]["glres"] == 8


def test_a_multicast_glres_cannot_express_is_refused_with_one_line(tmp_path):
    # allgather on one NVSwitch: each rank multicasts its share, a store with no sum; a
    # glres is a reduction even of one operand (no allgather may reduce), and a store
    # alone, gstore, came in v0.10.0
    lowering = lower_with_routes(resolve("dgxh100"))
    (point,) = nvls_search(lowering.model, Limits(max_steps=4), None, None, "allgather").points
    with pytest.raises(BadInput, match="step 0 multicasts chunk 0 from rank 0 without a sum, "
                                       "and allgather does not combine"):
        render(point.schedule, "mscclpp")
    path = tmp_path / "allgather.json"
    write_schedule(point.schedule, path)
    refused = synth_cli("export", str(path), "--to", "mscclpp", "-o", str(tmp_path / "p"))
    assert "glres" in one_line(refused, 2)
    assert not (tmp_path / "p").exists()


def test_a_group_past_one_thread_block_exports_with_its_hand_offs(tmp_path):
    # 18 GPUs on one NVSwitch: 17 peers, more than a thread block's 16 channels, so the
    # glres and the signals after it sit in different thread blocks of a rank
    lines = ["name: nvl18", "unit_gbps: 25", "gpus: 18", "switches:",
             "  - {name: nvswitch, kind: nvswitch, can: [reduce, multicast]}", "links:"]
    lines += [f"  - {{between: [gpu{g}, nvswitch], gbps: 25, count: 18}}" for g in range(18)]
    path = tmp_path / "nvl18.yaml"
    path.write_text("\n".join(lines) + "\n")
    model = lower_with_routes(resolve(str(path))).model
    for point in nvls_search(model, Limits(max_steps=3)).points:
        text, summary = render(point.schedule, "mscclpp")
        plan = json.loads(text)
        assert "right result" in summary and len(plan["gpus"][0]["threadblocks"]) > 1


def test_a_switch_channel_every_member_does_not_declare_is_caught():
    plan = nvls_plan()
    for gpu in plan["gpus"][:3]:  # only rank 3 declares the group and reduces
        gpu["channels"] = gpu["channels"][:1]
        tb = gpu["threadblocks"][0]
        tb["channels"] = tb["channels"][:1]
        tb["ops"] = [op for op in tb["ops"] if op["name"] != "glres"]
    with pytest.raises(PlanInvalid, match="every member declares"):
        check_mscclpp_plan(plan)
