"""Tests for the independent schedule verifier (synth.schedule.verify)."""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.errors import BadInput, NoAnswer
from synth.schedule.verify import (MalformedSchedule, ScheduleInvalid, parse, simulate,
                                   verify_file, verify_schedule)

# --- helpers: schedules as plain dicts ---------------------------------------------

def send(chunk, src, dst, op="copy"):
    return {"chunk": chunk, "src": src, "dst": dst, "op": op}


def step(*sends, rounds=1):
    return {"rounds": rounds, "sends": list(sends)}


def ring_links(n, bidir=False, cap=1):
    links = [[r, (r + 1) % n, cap] for r in range(n)]
    return links + ([[(r + 1) % n, r, cap] for r in range(n)] if bidir else [])


def fc_links(n, cap=1):
    return [[s, d, cap] for s in range(n) for d in range(n) if s != d]


def holders(collective, n, c, root):
    """(G, pre, post) for the collectives the tests use, written out by hand."""
    every = lambda g: [[r, k] for r in range(n) for k in range(g)]
    if collective == "allgather":
        return n * c, [[k // c, k] for k in range(n * c)], every(n * c)
    if collective == "allreduce":
        return c, every(c), every(c)
    if collective == "broadcast":
        return c, [[root, k] for k in range(c)], every(c)
    if collective == "alltoall":
        g = n * n * c
        return g, [[k // c // n, k] for k in range(g)], [[k // c % n, k] for k in range(g)]
    raise AssertionError(collective)


def schedule(collective, n, links, steps, c=1, root=None, groups=()):
    g, pre, post = holders(collective, n, c, root)
    return {
        "format": "synth.schedule", "version": 1, "collective": collective, "root": root,
        "ranks": n, "chunks": c, "num_chunks": g,
        "topology": {"name": "test", "unit_gbps": 1.0, "links": links, "groups": list(groups)},
        "pre": pre, "post": post, "steps": steps,
        "cost": {"steps": len(steps), "rounds": sum(s["rounds"] for s in steps)},
    }


def ring_allgather(n, bidir=False):
    # step t: rank r forwards chunk r - t to r + 1
    steps = [step(*(send((r - t) % n, r, (r + 1) % n) for r in range(n))) for t in range(n - 1)]
    return schedule("allgather", n, ring_links(n, bidir), steps)


def ring_allreduce(n):
    # reduce-scatter: rank k + n - 1 ends with chunk k fully reduced; allgather spreads it
    rs = [step(*(send((r - t) % n, r, (r + 1) % n, "reduce") for r in range(n)))
          for t in range(n - 1)]
    ag = [step(*(send((r + 1 - t) % n, r, (r + 1) % n) for r in range(n))) for t in range(n - 1)]
    return schedule("allreduce", n, ring_links(n), rs + ag, c=n)


def tree_broadcast():
    links = [[p, ch, 1] for p, ch in [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (2, 6)]]
    steps = [step(send(0, 0, 1), send(0, 0, 2)),
             step(send(0, 1, 3), send(0, 1, 4), send(0, 2, 5), send(0, 2, 6))]
    return schedule("broadcast", 7, links, steps, root=0)


def direct_alltoall(n=3):
    sends = [send(s * n + d, s, d) for s in range(n) for d in range(n) if s != d]
    return schedule("alltoall", n, fc_links(n), [step(*sends)])


def switch_allgather(rounds):
    # 3 ranks on a switch; each rank's egress port carries 1 chunk per round
    groups = [{"name": f"egress{r}", "links": [[r, d] for d in range(3) if d != r],
               "capacity": 1} for r in range(3)]
    sends = [send(r, r, d) for r in range(3) for d in range(3) if d != r]
    return schedule("allgather", 3, fc_links(3), [step(*sends, rounds=rounds)], groups=groups)


def two_rank_allreduce(second_op):
    steps = [step(send(0, 0, 1, "reduce")), step(send(0, 1, 0, second_op))]
    return schedule("allreduce", 2, fc_links(2), steps)


def invalid(doc, text, at_step):
    with pytest.raises(ScheduleInvalid) as info:
        verify_schedule(doc)
    assert text in str(info.value), str(info.value)
    assert info.value.step == at_step
    return info.value


# --- valid schedules -----------------------------------------------------------------

@pytest.mark.parametrize("doc", [
    ring_allgather(4), ring_allgather(4, bidir=True), ring_allreduce(4), tree_broadcast(),
    direct_alltoall(3), switch_allgather(rounds=2), two_rank_allreduce("copy"),
], ids=["ring-ag", "biring-ag", "ring-ar", "tree-bcast", "a2a", "switch", "ar-2"])
def test_valid(doc):
    assert verify_schedule(doc) is None


def test_bidirectional_allgather_in_two_steps():
    n = 4
    first = [send(r, r, (r + d) % n) for r in range(n) for d in (1, -1)]
    second = [send((r - 1) % n, r, (r + 1) % n) for r in range(n)]
    verify_schedule(schedule("allgather", n, ring_links(n, bidir=True),
                             [step(*first), step(*second)]))


def test_broadcast_on_four_ranks():
    links = [[0, 1, 1], [0, 2, 1], [1, 3, 1]]
    doc = schedule("broadcast", 4, links, [step(send(0, 0, 1), send(0, 0, 2)),
                                           step(send(0, 1, 3))], root=0)
    verify_schedule(doc)


def test_fractional_capacity_and_alpha():
    links = [[0, 1, 0.5, 0.7], [1, 0, 0.5, 0.7]]
    doc = schedule("allgather", 2, links, [step(send(0, 0, 1), send(1, 1, 0), rounds=2)])
    verify_schedule(doc)
    doc["steps"][0]["rounds"] = 1
    invalid(doc, "over its capacity", 0)


def test_unknown_keys_and_missing_cost_are_ignored():
    doc = ring_allgather(4)
    del doc["cost"]
    doc["extra"] = {"anything": True}
    doc["steps"][0]["note"] = "ignored"
    verify_schedule(doc)


# --- invalid schedules: each reason, with its step -----------------------------------

def test_sender_does_not_hold_chunk():
    doc = ring_allgather(4)
    doc["steps"][2]["sends"][3] = send(0, 3, 0)  # rank 3 has chunks 3, 2, 1 by now
    err = invalid(doc, "chunk 0 sent from rank 3 to rank 0, but rank 3 does not hold it", 2)
    assert str(err).startswith("step 2: ") and (err.chunk, err.ranks) == (0, (3, 0))


def test_postcondition_not_reached():
    doc = ring_allgather(4)
    doc["steps"].pop()
    err = invalid(doc, "after the last step rank", None)
    assert err.chunk is not None and len(err.ranks) == 1


def test_partial_sum_does_not_satisfy_allreduce():
    doc = ring_allreduce(4)
    doc["steps"][2]["sends"][0]["op"] = "copy"  # overwrites instead of adding
    invalid(doc, "summed over ranks", None)


def test_over_link_capacity():
    links = [[0, 1, 1], [1, 0, 1]]
    steps = [step(send(0, 0, 1), send(1, 0, 1), rounds=2), step(send(2, 1, 0), send(3, 1, 0))]
    doc = schedule("allgather", 2, links, steps, c=2)
    err = invalid(doc, "link 1->0 carries 2 chunks, over its capacity 1 x 1 rounds", 1)
    assert err.ranks == (1, 0)
    doc["steps"][1]["rounds"] = 2
    verify_schedule(doc)


def test_over_group_capacity():
    invalid(switch_allgather(rounds=1), "group 'egress0' carries 2 chunks", 0)


def test_double_count_in_reduce():
    invalid(two_rank_allreduce("reduce"), "counts the contribution of ranks [0] twice", 1)


def test_two_reduces_into_one_destination_must_be_disjoint():
    # ranks 1 and 2 both add into 0 in one step: fine, disjoint
    ok = [step(send(0, 1, 0, "reduce"), send(0, 2, 0, "reduce")),
          step(send(0, 0, 1), send(0, 0, 2))]
    verify_schedule(schedule("allreduce", 3, fc_links(3), ok))
    # rank 1 already holds 2's contribution, so 2's is counted twice at rank 0
    bad = [step(send(0, 2, 1, "reduce")), ok[0]]
    invalid(schedule("allreduce", 3, fc_links(3), bad), "twice", 1)


def test_reduce_into_empty_destination():
    # unreachable from a file (every combining precondition fills every (rank, chunk)
    # and states never empty), so drive the simulator from a hand-made start state
    sched = parse(two_rank_allreduce("copy"))
    with pytest.raises(ScheduleInvalid, match="rank 1 holds nothing to reduce into") as info:
        simulate(sched, {(0, 0): 1 << 0})  # contributors as a bit mask: rank 0
    assert info.value.step == 0


def test_wrong_postcondition_list():
    doc = ring_allgather(4)
    doc["post"].remove([2, 1])
    invalid(doc, "post does not match allgather's postcondition (missing [2, 1])", None)


def test_wrong_precondition_list():
    doc = ring_allgather(4)
    doc["pre"].append([0, 3])
    invalid(doc, "pre does not match allgather's precondition (extra [0, 3])", None)


def test_wrong_num_chunks():
    doc = ring_allgather(4)
    doc["num_chunks"] = 5
    invalid(doc, "num_chunks is 5", None)


def test_unknown_link():
    doc = ring_allgather(4)
    doc["steps"][1]["sends"].append(send(0, 1, 0))
    invalid(doc, "there is no link 1->0", 1)


def test_reduce_in_non_combining_collective():
    doc = ring_allgather(4)
    doc["steps"][0]["sends"][2]["op"] = "reduce"
    invalid(doc, "allgather does not combine", 0)


def test_conflicting_copies():
    steps = [step(send(0, 0, 1)), step(send(0, 0, 2), send(0, 1, 2)), step(send(1, 1, 0)),
             step(send(1, 1, 2), send(2, 2, 0), send(2, 2, 1))]
    err = invalid(schedule("allgather", 3, fc_links(3), steps), "conflicting writes", 1)
    assert err.chunk == 0 and set(err.ranks) == {0, 1, 2}


def test_copy_and_reduce_into_same_destination_conflict():
    steps = [step(send(0, 1, 0, "reduce"), send(0, 2, 0))]
    invalid(schedule("allreduce", 3, fc_links(3), steps), "conflicting writes", 0)


def test_chunk_out_of_range():
    doc = ring_allgather(4)
    doc["steps"][1]["sends"][0]["chunk"] = 4
    invalid(doc, "chunk 4 sent from rank 0 to rank 1, but chunks are 0..3", 1)
    doc["steps"][1]["sends"][0]["chunk"] = -1
    invalid(doc, "but chunks are 0..3", 1)


def test_first_violation_in_step_order_is_reported():
    doc = ring_allgather(4)
    doc["steps"][2]["sends"][0]["chunk"] = 99
    doc["steps"][1]["sends"][3]["chunk"] = 0  # rank 3 does not hold chunk 0 yet
    invalid(doc, "rank 3 does not hold it", 1)


def test_error_classes_map_to_exit_codes():
    assert issubclass(ScheduleInvalid, NoAnswer) and ScheduleInvalid("x").exit_code == 1
    assert issubclass(MalformedSchedule, BadInput) and MalformedSchedule("x").exit_code == 2


# --- malformed documents -------------------------------------------------------------

def _without(key):
    return lambda d: d.pop(key)


def _setter(*path_and_value):
    *path, key, value = path_and_value

    def change(d):
        for p in path:
            d = d[p]
        d[key] = value
    return change


@pytest.mark.parametrize("change, text", [
    (_without("steps"), "steps: missing"),
    (_without("topology"), "topology: missing"),
    (_setter("steps", 0, "sends", 0, "chunk", "0"), "steps[0].sends[0].chunk: expected an integer"),
    (_setter("steps", 0, "sends", 0, "chunk", True), "sends[0].chunk: expected an integer"),
    (_setter("ranks", "4"), "ranks: expected an integer"),
    (_setter("steps", {}), "steps: expected a list"),
    (_setter("format", "msccl"), "format: expected 'synth.schedule'"),
    (_setter("version", 5), "version: expected 1, 2, 3 or 4"),
    (_setter("collective", "allscatter"), "collective: unknown collective 'allscatter'"),
    (_setter("root", 0), "root: allgather takes no root"),
    (_setter("steps", 1, "rounds", 0), "steps[1].rounds: 0 is out of range 1.."),
    (_setter("steps", 0, "sends", 1, "op", "move"), "steps[0].sends[1].op: unknown op 'move'"),
    (_setter("steps", 0, "sends", 1, "dst", 4), "steps[0].sends[1].dst: 4 is out of range 0..3"),
    (_setter("topology", "links", 0, [0, 1, -1]), "topology.links[0][2]: -1 is not a non-negative"),
    (_setter("topology", "links", 0, [0, 9, 1]), "topology.links[0][1]: 9 is out of range"),
    (_setter("topology", "links", 0, [0, 1]), "topology.links[0]: expected [src, dst, capacity]"),
    (_setter("topology", "groups", [{"name": "g", "links": [[1, 0]], "capacity": 1}]),
     "topology.groups[0].links[0]: 1->0 is not in topology.links"),
    (_setter("pre", 0, [0]), "pre[0]: expected [rank, chunk]"),
    (_setter("steps", 0, "sends", 0, {"chunk": 0, "src": 0, "dst": 1}), "sends[0].op: missing"),
])
def test_malformed(change, text):
    doc = ring_allgather(4)
    change(doc)
    with pytest.raises(MalformedSchedule) as info:
        verify_schedule(doc)
    assert text in str(info.value), str(info.value)


def test_not_an_object_is_malformed():
    with pytest.raises(MalformedSchedule, match="schedule: expected an object"):
        verify_schedule([1, 2])


@pytest.mark.parametrize("root, text", [(None, "root: missing"), (7, "root: 7 is out of range"),
                                        (-1, "out of range"), ("0", "expected an integer")])
def test_rooted_collective_needs_a_root_in_range(root, text):
    doc = tree_broadcast()
    doc["root"] = root
    with pytest.raises(MalformedSchedule, match=text.replace("(", r"\(")):
        verify_schedule(doc)


def test_root_key_absent_for_rooted_collective():
    doc = tree_broadcast()
    del doc["root"]
    with pytest.raises(MalformedSchedule, match="root: missing"):
        verify_schedule(doc)


# --- verify_file ---------------------------------------------------------------------

def test_verify_file_returns_the_document(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(ring_allreduce(4)))
    assert verify_file(path) == ring_allreduce(4)


def test_verify_file_invalid_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(MalformedSchedule, match="bad.json"):
        verify_file(path)


def test_verify_file_missing(tmp_path):
    with pytest.raises(MalformedSchedule, match="nope.json"):
        verify_file(tmp_path / "nope.json")


def test_verify_file_reports_invalid_schedule(tmp_path):
    doc = ring_allgather(4)
    doc["steps"].pop()
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleInvalid):
        verify_file(path)


# --- property: every send of a ring allgather is needed ------------------------------

@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 6), bidir=st.booleans(), data=st.data())
def test_deleting_any_send_breaks_ring_allgather(n, bidir, data):
    doc = ring_allgather(n, bidir)
    verify_schedule(copy.deepcopy(doc))
    t = data.draw(st.integers(0, n - 2), label="step")
    i = data.draw(st.integers(0, n - 1), label="send")
    del doc["steps"][t]["sends"][i]
    with pytest.raises(ScheduleInvalid):
        verify_schedule(doc)


# --- property: any document gets one of the two documented errors, never a crash -----

_scalars = st.none() | st.booleans() | st.integers(-3, 20) | st.floats() | st.text(max_size=3)
_json = st.recursive(_scalars,
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


def _paths(obj, path=()):
    yield path
    if isinstance(obj, (dict, list)):
        for key, value in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
            yield from _paths(value, path + (key,))


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from([ring_allgather(3), ring_allreduce(3), tree_broadcast(),
                             direct_alltoall(3), switch_allgather(2)]),
       data=st.data())
def test_mutated_documents_raise_only_documented_errors(base, data):
    doc = copy.deepcopy(base)
    path = data.draw(st.sampled_from(list(_paths(doc))[1:]), label="path")
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(_json, label="value")
    try:
        verify_schedule(doc)
    except (MalformedSchedule, ScheduleInvalid) as e:
        assert "\n" not in str(e)


def test_an_mscclpp_plan_given_as_a_schedule_is_named_as_a_plan():
    # a point's STEM.mscclpp.json sits beside its STEM.json, and `synth verify DIR/*.json`
    # takes both: the plan read "format: missing" and nothing more
    from synth.construct.baselines import baselines
    from synth.export import render
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower

    ring = next(b.schedule for b in baselines(lower(resolve("ring:4")), "allgather"))
    plan = json.loads(render(ring, "mscclpp")[0])
    with pytest.raises(MalformedSchedule, match="a plan, not a synth schedule"):
        parse(plan)
