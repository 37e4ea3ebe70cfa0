"""MSCCL++ plans whose switch operations are not a reduction and, in the next step, the
multicast of its sum to the same ranks (docs/runtimes.md, "Switch channels"): a
switch_reduce alone becomes a glres storing to its rank alone (a switch channel of one
member), a multicast alone a glres loading from its rank alone. The across-box NVLS
allreduce (each box's sum crosses the network before it is multicast) exports so; the
plan simulator runs such a glres over its two groups and refuses a plan whose
hand-shakes around it are missing.

The expected plans are worked out by hand from the recipe: chunk k's output slot is
o[k]; a sum left on its rank goes to o[k] (out of place, untouched there) or stays in
place; the multicast stores to o[k] on every member.
"""

import copy
import json

import pytest

from synth.construct.in_network import across_boxes_allreduce, box_switches
from synth.errors import BadInput
from synth.export import render
from synth.export.mscclpp_sim import PlanInvalid, check_mscclpp_plan
from synth.schedule.file import schedule_from_dict, write_schedule
from synth.schedule.verify import verify_schedule
from synth.topology.catalog import resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower_with_routes
from tests.test_in_network import nvls_doc
from tests.test_loads import nvls4x2  # noqa: F401 (a fixture: two boxes of 4 NVLS GPUs)
from tests.test_reliability import synth_cli

EVERYONE = [0, 1, 2, 3]


def glres_of(plan, rank):
    """Each glres of `rank`, in program order, as (source ranks, buffer, index), (target
    ranks, buffer, index), size: its switch channel ids resolved."""
    gpu = plan["gpus"][rank]
    table = [(c["buffer_type"], g["ranks"]) for c in gpu["channels"]
             if c["channel_type"] == "switch" for g in c["rank_groups"]]
    out = []
    for tb in gpu["threadblocks"]:
        ids = [i for c in tb["channels"] if c["channel_type"] == "switch"
               for i in c["channel_ids"]]
        for op in tb["ops"]:
            if op["name"] == "glres":
                ends = []
                for side in ("src_buff", "dst_buff"):
                    entry = op[side][0]
                    buf, ranks = table[ids[entry["switch_channel_id"]]]
                    ends.append((ranks, buf, entry["index"]))
                out.append((*ends, op["src_buff"][0]["size"]))
    return out


def one_member_groups(plan):
    """Per rank, the groups of one rank its switch channels declare."""
    return [[g["ranks"] for c in gpu["channels"] if c["channel_type"] == "switch"
             for g in c["rank_groups"] if len(g["ranks"]) == 1] for gpu in plan["gpus"]]


# --- the across-box NVLS allreduce ----------------------------------------------------

def test_the_dgxh100x2_in_network_allreduce_exports_and_simulates(tmp_path):
    # one batch: box b's switch sums shard r (chunks 2r, 2r + 1: 2 pieces a shard) into
    # local rank r, which swaps half of it with its rail peer and multicasts the total
    lowering = lower_with_routes(resolve("dgxh100x2"))
    hierarchy, _ = find_hierarchy(lowering)
    inside, across = box_switches(lowering.model, hierarchy)
    assert across is None
    for batches in (1, 16):
        schedule = across_boxes_allreduce(lowering.model, hierarchy, inside, None, batches, 2)
        assert schedule.info["method"].startswith("in-network (NVLS in each box)")
        for inplace in (False, True):
            text, summary = render(schedule, "mscclpp", inplace=inplace)
            assert "simulated over two launches: no deadlock, right result" in summary
            plan = json.loads(text)
            check_mscclpp_plan(plan, launches=3, ranks_per_node=8)
            into = "o" if inplace else "i"
            for g in range(16):
                box, r = list(range(8 * (g // 8), 8 * (g // 8) + 8)), g % 8
                assert glres_of(plan, g) == [((box, into, 2 * r), ([g], "o", 2 * r), 2),
                                             (([g], "o", 2 * r), (box, "o", 2 * r), 2)]
            assert one_member_groups(plan) == [[[g]] for g in range(16)]
    path = tmp_path / "in-network.json"
    write_schedule(schedule, path)
    out = tmp_path / "in-network.mscclpp.json"
    done = synth_cli("export", str(path), "--to", "mscclpp", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert check_mscclpp_plan(json.loads(out.read_text()), ranks_per_node=8)["ops"]["glres"] == 32


def test_two_boxes_of_four_gpus_export_in_and_out_of_place(nvls4x2):
    # 2 boxes of 4 behind reducing NVSwitches, one NIC per GPU on rails: 2 pieces a
    # shard, 8 chunks; rank g sums shard r = g mod 4 of its box into itself, then
    # multicasts it: 2 glres a rank. Switch channels of a rank: out of place its box
    # over i (the sum's operands), itself over o (the sum, then the multicast's
    # operand), its box over o; in place the first is its box over o, the third too
    _, _, model, hierarchy, inside = nvls4x2
    for batches in (1, 8):
        schedule = across_boxes_allreduce(model, hierarchy, inside, None, batches, 2)
        for inplace in (False, True):
            plan = json.loads(render(schedule, "mscclpp", inplace=inplace)[0])
            report = check_mscclpp_plan(plan, launches=3, ranks_per_node=4)
            assert report["ops"]["glres"] == 16
            assert report["channels"] == {"memory": 24, "port": 8,
                                          "switch": 16 if inplace else 24}
            for g in range(8):
                box = [4 * (g // 4) + m for m in range(4)]
                switch = [(c["buffer_type"], c["rank_groups"][0]["ranks"])
                          for c in plan["gpus"][g]["channels"] if c["channel_type"] == "switch"]
                assert sorted(switch) == sorted(
                    [("o", [g]), ("o", box)] + ([] if inplace else [("i", box)]))


def test_relays_may_fall_between_a_switch_reduction_and_its_multicast(tmp_path):
    # boxes of 10 GPUs: local ranks 8 and 9 have no InfiniBand device in the executor,
    # so their sends across the boxes (step 1 of the batch, right after the box's
    # switch_reduce) are relayed inside the box in steps of their own: the sum and the
    # multicast were never one glres, and a step between them changes nothing
    lines = ["name: nv10", "unit_gbps: 25", "gpus: 10", "switches:",
             "  - {name: nvswitch, kind: nvswitch, can: [reduce, multicast]}",
             f"nics: [{', '.join(f'nic{g}' for g in range(10))}]", "links:"]
    lines += [f"  - {{between: [gpu{g}, nvswitch], gbps: 25, count: 2}}" for g in range(10)]
    lines += [f"  - {{between: [gpu{g}, nic{g}], gbps: 64}}" for g in range(10)]
    lines += ["network: {fabric: rails, gbps: 25, alpha_us: 2.6}"]
    path = tmp_path / "nv10.yaml"
    path.write_text("\n".join(lines) + "\n")
    lowering = lower_with_routes(resolve(str(path), 2))
    hierarchy, _ = find_hierarchy(lowering)
    inside, _ = box_switches(lowering.model, hierarchy)
    schedule = across_boxes_allreduce(lowering.model, hierarchy, inside, None, 1, 2)
    text, summary = render(schedule, "mscclpp")
    assert "right result" in summary and "8 cross-box sends relayed" in summary
    assert check_mscclpp_plan(json.loads(text), ranks_per_node=10)["ops"]["glres"] == 40


# --- hand-built schedules on 4 GPUs around one switch --------------------------------------

def one_owner_doc():
    """Allreduce of one chunk on nvls_doc's 4 GPUs: the switch sums it into rank 0
    (nothing multicasts it in the next step); rank 1 sends its own copy to rank 2
    (whose value it replaces); rank 0 multicasts the sum to the others."""
    doc = nvls_doc()
    doc.update(chunks=1, num_chunks=1, pre=[[r, 0] for r in EVERYONE],
               post=[[r, 0] for r in EVERYONE])
    doc["steps"] = [
        {"rounds": 1, "sends": [{"chunk": 0, "srcs": EVERYONE, "dst": 0, "via": "sw",
                                 "op": "switch_reduce"}]},
        {"rounds": 1, "sends": [{"chunk": 0, "src": 1, "dst": 2, "op": "copy"}]},
        {"rounds": 1, "sends": [{"chunk": 0, "src": 0, "dsts": [1, 2, 3], "via": "sw",
                                 "op": "multicast"}]}]
    return doc


def reducescatter_doc():
    """Reducescatter of one chunk a share on nvls_doc's 4 GPUs: the switch sums chunk r
    into rank r, and that is all."""
    doc = nvls_doc()
    doc.update(collective="reducescatter", chunks=1, post=[[r, r] for r in EVERYONE],
               steps=doc["steps"][:1])
    return doc


def test_a_sum_left_on_its_rank_and_a_multicast_alone_export():
    doc = one_owner_doc()
    verify_schedule(doc)
    for inplace in (False, True):
        plan = json.loads(render(schedule_from_dict(doc), "mscclpp", inplace=inplace)[0])
        into = "o" if inplace else "i"
        assert glres_of(plan, 0) == [((EVERYONE, into, 0), ([0], "o", 0), 1),
                                     (([0], "o", 0), (EVERYONE, "o", 0), 1)]
        assert [glres_of(plan, r) for r in (1, 2, 3)] == [[], [], []]
        assert one_member_groups(plan) == [[[0]], [], [], []]


def test_a_multicast_alone_to_some_of_the_group_exports():
    # the sum of rank 0 reaches rank 3 by a send in the step after the switch_reduce
    # (rank 0 ran the glres: it need not wait), and ranks 1 and 2 by a multicast alone
    # over {0, 1, 2}
    doc = one_owner_doc()
    doc["steps"][1]["sends"] = [{"chunk": 0, "src": 0, "dst": 3, "op": "copy"}]
    doc["steps"][2]["sends"][0]["dsts"] = [1, 2]
    verify_schedule(doc)
    plan = json.loads(render(schedule_from_dict(doc), "mscclpp", inplace=True)[0])
    assert glres_of(plan, 0) == [((EVERYONE, "o", 0), ([0], "o", 0), 1),
                                 (([0], "o", 0), ([0, 1, 2], "o", 0), 1)]


def rule_refusals():
    """(schedule doc, the refusal's words) of valid schedules glres cannot run."""
    early = one_owner_doc()  # rank 2 sends chunk 0 in the step after the multicast
    early["steps"][1]["sends"] = [{"chunk": 0, "src": 0, "dst": 3, "op": "copy"}]
    early["steps"][2]["sends"][0]["dsts"] = [1, 2]
    early["steps"].append({"rounds": 1, "sends": [{"chunk": 0, "src": 2, "dst": 3,
                                                  "op": "copy"}]})
    subset = one_owner_doc()  # the multicast right after the switch_reduce, to two of 3
    subset["steps"][1:] = [{"rounds": 1, "sends": [{"chunk": 0, "src": 0, "dsts": [1, 2],
                                                   "via": "sw", "op": "multicast"}]},
                           {"rounds": 1, "sends": [{"chunk": 0, "src": 0, "dst": 3,
                                                   "op": "copy"}]}]
    gather = nvls_doc()  # allgather: each rank multicasts its share, no sum
    gather.update(collective="allgather", chunks=1, pre=[[r, r] for r in EVERYONE])
    gather["steps"] = gather["steps"][1:]
    return [(early, "step 3 sends chunk 0 from rank 2, which learns only in that step's "
                    "waits that the glres of step 2 stored it there"),
            (subset, "chunk 0 is in switch operations in steps 0 and 1 that are not a "
                     "switch_reduce and the multicast of its sum"),
            (gather, "step 0 multicasts chunk 0 from rank 0 without a sum, and allgather "
                     "does not combine")]


@pytest.mark.parametrize("doc, words", rule_refusals())
def test_switch_operations_glres_cannot_run_are_refused_with_one_line(doc, words):
    verify_schedule(doc)
    with pytest.raises(BadInput) as refused:
        render(schedule_from_dict(doc), "mscclpp")
    assert str(refused.value).startswith("cannot export to MSCCL++: " + words)


# --- the simulator: a glres alone, its groups and its hand-shakes -----------------------------

def drop_wait(plan, rank, at):
    """The plan without the wait op `at` of rank's only thread block and without the
    signals it pairs with (the n-th wait on a channel takes the n-th signal, relaxed
    ones included, on the paired channel: the k-th channel from A to B pairs with the
    k-th from B to A)."""
    plan = copy.deepcopy(plan)
    gpus = plan["gpus"]

    def memory(gpu, tb):
        peers = [p for c in gpu["channels"] if c["channel_type"] == "memory"
                 for p in c["connected_to"]]
        ids = [i for c in tb["channels"] if c["channel_type"] == "memory"
               for i in c["channel_ids"]]
        return peers, ids

    (tb,) = gpus[rank]["threadblocks"]
    peers, ids = memory(gpus[rank], tb)
    for c in tb["ops"][at]["channel_ids"]:
        n = sum(c in op.get("channel_ids", ()) for op in tb["ops"][:at]
                if op["name"] in ("wait", "rlxwait"))
        peer, j = peers[ids[c]], peers[:ids[c]].count(peers[ids[c]])
        (theirs,) = gpus[peer]["threadblocks"]
        their_peers, their_ids = memory(gpus[peer], theirs)
        mine = [g for g, p in enumerate(their_peers) if p == rank][j]
        signals = [op for op in theirs["ops"] if op["name"] in ("signal", "rlxsignal")
                   and their_ids.index(mine) in op["channel_ids"]]
        signals[n]["channel_ids"].remove(their_ids.index(mine))
        theirs["ops"] = [op for op in theirs["ops"] if op.get("channel_ids", True)]
    del tb["ops"][at]
    return plan


def exported_one_owner():
    """one_owner_doc's plan in place (rank 1's own copy, which its send reads in step 1,
    is the slot the multicast stores to) and the index of each glres in rank 0's ops."""
    plan = json.loads(render(schedule_from_dict(one_owner_doc()), "mscclpp", inplace=True)[0])
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    return plan, [i for i, op in enumerate(ops) if op["name"] == "glres"]


def test_without_the_hand_shake_before_a_multicast_alone_an_operand_is_overwritten():
    plan, (_, second) = exported_one_owner()
    check_mscclpp_plan(plan)
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    wait = max(i for i in range(second) if ops[i]["name"] == "wait")
    assert ops[wait]["channel_ids"] == [0, 1, 2]  # every member: its slot is free
    # the glres is one op earlier without the wait
    with pytest.raises(PlanInvalid, match=r"op %d \(glres\): writes o\[0\] of gpu 1 before "
                                          r"gpu 1 thread block 0's earlier read of it"
                       % (second - 1)):
        check_mscclpp_plan(drop_wait(plan, 0, wait))


def test_without_the_hand_shake_after_a_multicast_alone_a_member_ends_before_its_data():
    plan, _ = exported_one_owner()
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    last = max(i for i, op in enumerate(ops) if op["name"] == "wait")
    with pytest.raises(PlanInvalid, match=r"gpu 1's result o\[0\], written by gpu 0 thread "
                                          r"block 0, may not have arrived"):
        check_mscclpp_plan(drop_wait(plan, 1, last))


def test_without_the_hand_shake_after_a_sum_left_on_its_rank_an_input_is_read_late():
    # reducescatter in one switch step: rank r's glres sums chunk r of every rank's
    # input into its own output; the members learn that their input was read only in
    # the step of hand-shakes after it, and the caller may write the next call's input
    # once a member's kernel ends
    plan = json.loads(render(schedule_from_dict(reducescatter_doc()), "mscclpp")[0])
    assert glres_of(plan, 0) == [((EVERYONE, "i", 0), ([0], "o", 0), 1)]
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    last = max(i for i, op in enumerate(ops) if op["name"] == "wait")
    with pytest.raises(PlanInvalid, match=r"gpu 0 thread block 0 reads i\[0\] of gpu 1, an "
                                          r"input, after gpu 1's kernel may have ended"):
        check_mscclpp_plan(drop_wait(plan, 1, last))
