"""Mutation testing of the verifier on version 2 and version 3 files: chunk ranges,
pipelines (batches, strides, rounds of the expanded steps), ranged pre and post, and
switch operations (sources, destinations, the switch, its capabilities, links and
ports).

Valid small schedules (synth's constructions: packed trees and paths pipelined, the
multi-node decomposition, baselines with ranges, NVLS and SHARP allreduce, one switch
operation a share; and hand-built files of tests/) are mutated at random with a fixed
seed. tests/reference_checker.py, a naive checker written from docs/schedule-file.md
that expands everything and shares no code with synth, decides each mutant. The
verifier must reject every mutant the reference rejects, accept every one it accepts,
and put each rejected one in the same stage (malformed or invalid). tests/README.md
lists the mutation classes.
"""

import copy
import random
from collections import Counter

import pytest

from synth.construct.baselines import baselines
from synth.construct.decompose import decompose
from synth.construct.in_network import across_boxes_allreduce, box_switches, nvls_allreduce, \
    one_step
from synth.construct.tree_schedules import tree_search
from synth.schedule.file import schedule_from_dict, schedule_to_dict
from synth.schedule.verify import MalformedSchedule, ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import join_boxes, resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower, lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.reference_checker import judge
from tests.test_in_network import SHARP_BOX, nvls_doc
from tests.test_verify_ports import broadcast_doc
from tests.test_verify_v2 import pipelined_allgather

SEED = 20261203
MUTANTS_PER_SCHEDULE = 70
STACKED = 0.25  # share of mutants that get a second mutation on top
OPS = ("switch_reduce", "multicast")

# a box of 2 GPUs on an NVSwitch and one NIC they share, 10 GB/s into one network
# switch: its multi-node forms are the smallest the decomposition and the hierarchical
# baselines build
SHARED_NIC_BOX = {
    "name": "nic-box", "unit_gbps": 25, "gpus": 2,
    "switches": [{"name": "nvswitch", "kind": "nvswitch"}], "nics": ["nic0"],
    "links": [{"between": ["gpu0", "nvswitch"], "gbps": 25, "count": 2, "alpha_us": 0.35},
              {"between": ["gpu1", "nvswitch"], "gbps": 25, "count": 2, "alpha_us": 0.35},
              {"between": ["gpu0", "nic0"], "gbps": 16},
              {"between": ["gpu1", "nic0"], "gbps": 16}],
    "network": {"fabric": "single-switch", "gbps": 10, "alpha_us": 2.6}}


def gather_into_the_last():
    """Gather of 2 ranks into rank 1, one chunk a batch over link 0->1, 2 batches. The
    root's own share is moved by no batch: a batch shifted out of rank 0's share lands
    on chunks no other batch touches (only the rule that batches keep to their shares
    catches it)."""
    return {"format": "synth.schedule", "version": 2, "collective": "gather", "root": 1,
            "ranks": 2, "chunks": 2, "num_chunks": 4,
            "topology": {"name": "hand", "unit_gbps": 25, "links": [[0, 1, 1], [1, 0, 1]],
                         "groups": []},
            "pre": [[0, 0, 2], [1, 2, 2]], "post": [[1, 0, 4]],
            "steps": [{"rounds": 1, "sends": [{"chunk": 0, "src": 0, "dst": 1,
                                               "op": "copy"}]}],
            "pipeline": {"batches": 2, "stride": 1, "rounds": [1, 1]}}


def boxes(box, k):
    return join_boxes(topology_from_dict(copy.deepcopy(box)), k, f"{box['name']}x{k}")


def valid_schedules():
    """(label, document) of small valid version 2 and 3 files."""
    out = [("docs' pipelined allgather", pipelined_allgather()),
           ("hand NVLS allreduce", nvls_doc()),
           ("hand broadcast, a port of part of a multicast", broadcast_doc(2)),
           ("hand gather into the last rank, pipelined", gather_into_the_last())]

    def add(label, schedule):
        doc = schedule_to_dict(schedule)
        assert doc["version"] >= 2, label
        out.append((label, doc))

    for spec, name, root in (("switch:4", "broadcast", 0), ("line:4", "reduce", 3),
                             ("ring:4", "allgather", None), ("switch:4", "allreduce", None),
                             ("line:3", "gather", 0), ("line:3", "scatter", 0)):
        search = tree_search(lower(resolve(spec)), name, root, Limits(max_steps=5))
        point = min((p for p in search.points if p.schedule.batches > 1),
                    key=lambda p: p.schedule.collective.num_chunks)
        add(f"{spec} {name} {point.schedule.info['method']}", point.schedule)
    lowering = lower_with_routes(boxes(SHARED_NIC_BOX, 2))
    hierarchy, _ = find_hierarchy(lowering)
    for name in ("reducescatter", "allreduce"):
        search = decompose(lowering.model, hierarchy, name,
                           Limits(max_steps=12, time_limit=5), depths=(2,))
        schedule = search.points[0].schedule  # written once per box orbit (version 4):
        add(f"nic-boxx2 {name} {schedule.info['method']}", schedule.unfolded())  # spelled out
    for k, name, root, which in ((2, "allreduce", None, "recursive doubling"),
                                 (2, "allreduce", None, "hierarchical"),
                                 (3, "broadcast", 1, "hierarchical")):
        made = baselines(lower(boxes(SHARED_NIC_BOX, k)), name, root)
        add(f"nic-boxx{k} {name} {which}", next(b.schedule for b in made if b.name == which))
    model = schedule_from_dict(nvls_doc()).model
    switch = model.switches[0]
    add("NVLS allreduce, 3 batches of 2 pieces", nvls_allreduce(model, switch, 3, 2))
    for name, root in (("broadcast", 1), ("reduce", 2), ("reducescatter", None)):
        add(f"one {name} operation a share", one_step(model, switch, name, root, 2))
    computing = copy.deepcopy(SHARP_BOX)
    computing["switches"][0]["can"] = ["reduce", "multicast"]
    for box, what in ((SHARP_BOX, "GPUs in the boxes"), (computing, "NVLS in the boxes")):
        lowering = lower_with_routes(boxes(box, 3))
        hierarchy, _ = find_hierarchy(lowering)
        inside, across = box_switches(lowering.model, hierarchy)
        add(f"SHARP across 3 boxes, {what}",
            across_boxes_allreduce(lowering.model, hierarchy, inside, across, 2, 3))
    return out


# --- mutations: each edits the document in place and says what it did, or None -------

def _entries(doc, want=lambda x: True):
    return [(i, j) for i, s in enumerate(doc["steps"]) for j, x in enumerate(s["sends"])
            if want(x)]


def _pick(doc, rng, want=lambda x: True):
    found = _entries(doc, want)
    if not found:
        return None
    i, j = rng.choice(found)
    return doc["steps"][i]["sends"][j]


def _plain(x):
    return x.get("op") in ("copy", "reduce")


def _other(rng, n, *not_these):
    choices = [r for r in range(n) if r not in not_these]
    return rng.choice(choices) if choices else None


def drop(doc, rng):
    found = _entries(doc)
    if not found:
        return None
    i, j = rng.choice(found)
    del doc["steps"][i]["sends"][j]
    return "drop"


def move(doc, rng):
    found = _entries(doc)
    if len(doc["steps"]) < 2 or not found:
        return None
    i, j = rng.choice(found)
    to = rng.choice([k for k in range(len(doc["steps"])) if k != i])
    doc["steps"][to]["sends"].append(doc["steps"][i]["sends"].pop(j))
    return "move"


def duplicate(doc, rng):
    found = _entries(doc)
    if not found:
        return None
    i, j = rng.choice(found)
    doc["steps"][i]["sends"].insert(j, copy.deepcopy(doc["steps"][i]["sends"][j]))
    return "duplicate"


def step_rounds(doc, rng):
    steps = [s for s in doc["steps"] if s["rounds"] > 1]
    if not steps:
        return None
    rng.choice(steps)["rounds"] -= 1
    return "step-rounds"


def chunk(doc, rng):
    x = _pick(doc, rng)
    if x is None:
        return None
    x["chunk"] = rng.choice([k for k in range(doc["num_chunks"] + 1) if k != x["chunk"]])
    return "chunk"


def reduce_again(doc, rng):
    """A reduction (a send or a switch's) repeated in its step or a later one: the
    sum would count its sources twice."""
    found = _entries(doc, lambda x: x.get("op") in ("reduce", "switch_reduce"))
    if not found:
        return None
    i, j = rng.choice(found)
    later = rng.randrange(i, len(doc["steps"]))
    doc["steps"][later]["sends"].append(copy.deepcopy(doc["steps"][i]["sends"][j]))
    return "reduce-again"


def flip_op(doc, rng):
    x = _pick(doc, rng, _plain)
    if x is None:
        return None
    x["op"] = "reduce" if x["op"] == "copy" else "copy"
    return "flip-op"


def send_end(doc, rng):
    x = _pick(doc, rng, _plain)
    if x is None:
        return None
    key = rng.choice(["src", "dst"])
    x[key] = _other(rng, doc["ranks"], x[key])
    return f"send-{key}"


def count(doc, rng):
    x = _pick(doc, rng)
    if x is None:
        return None
    was = x.get("count", 1)
    x["count"] = max(1, was + rng.choice([-1, 1])) if was > 1 else 2
    return "count"


def shift(doc, rng):
    x = _pick(doc, rng, lambda x: x.get("count", 1) > 1)
    if x is None:
        return None
    x["chunk"] += rng.choice([-1, 1])
    return "shift-range"


def batches(doc, rng):
    pipe = doc.get("pipeline")
    if pipe is None:
        return None
    pipe["batches"] = max(1, pipe["batches"] + rng.choice([-1, 1]))
    if rng.random() < 0.7:  # keep the rounds list as long as the new expansion
        _fit_rounds(pipe, len(doc["steps"]))
    return "batches"


def stride(doc, rng):
    pipe = doc.get("pipeline")
    if pipe is None:
        return None
    pipe["stride"] = max(0, pipe["stride"] + rng.choice([-1, 1]))
    return "stride"


def restride(doc, rng):
    """A smaller stride and more batches that reach as far as before (the last batch
    shifted by as much): batches that overlap but leave no chunk unmoved; or one batch
    more, which leaves its share."""
    pipe = doc.get("pipeline")
    if pipe is None or pipe["stride"] < 2 or pipe["batches"] < 2:
        return None
    reach = (pipe["batches"] - 1) * pipe["stride"]
    pipe["stride"] = rng.choice([d for d in range(1, pipe["stride"]) if reach % d == 0])
    pipe["batches"] = reach // pipe["stride"] + 1 + rng.choice([0, 0, 1])
    _fit_rounds(pipe, len(doc["steps"]))
    return "restride"


def _fit_rounds(pipe, steps):
    """The rounds list as long as the expansion, the busiest step's rounds repeated."""
    want = steps + pipe["batches"] - 1
    while len(pipe["rounds"]) < want:
        pipe["rounds"].insert(len(pipe["rounds"]) // 2, max(pipe["rounds"]))
    del pipe["rounds"][want:]


def pipeline_rounds(doc, rng):
    pipe = doc.get("pipeline")
    if pipe is None:
        return None
    t = rng.randrange(len(pipe["rounds"]))
    if rng.random() < 0.2:  # one expanded step more or fewer than the batches make
        if rng.random() < 0.5:
            pipe["rounds"].insert(t, pipe["rounds"][t])
            return "pipeline-rounds-longer"
        del pipe["rounds"][t]
        return "pipeline-rounds-shorter"
    if pipe["rounds"][t] > 1 and rng.random() < 0.75:
        pipe["rounds"][t] -= 1
        return "pipeline-rounds-down"
    pipe["rounds"][t] += 1  # one more is always allowed
    return "pipeline-rounds-up"


def unpipeline(doc, rng):
    if doc.pop("pipeline", None) is None:
        return None
    return "no-pipeline"


def pre_post(doc, rng):
    key = rng.choice(["pre", "post"])
    entries = doc[key]
    e = entries[rng.randrange(len(entries))]
    if len(e) == 3 and rng.random() < 0.6:
        e[2] = max(1, e[2] + rng.choice([-1, 1]))
        return f"{key}-range"
    if rng.random() < 0.5:
        entries.remove(e)
        return f"{key}-drop"
    e[0] = _other(rng, doc["ranks"], e[0])
    return f"{key}-rank"


def sources(doc, rng):
    x = _pick(doc, rng, lambda x: x.get("op") == "switch_reduce")
    if x is None:
        return None
    others = [r for r in x["srcs"] if r != x["dst"]]
    missing = [r for r in range(doc["ranks"]) if r not in x["srcs"]]
    if missing and (rng.random() < 0.5 or len(others) < 2):
        x["srcs"].append(rng.choice(missing))
    elif len(others) >= 2:
        x["srcs"].remove(rng.choice(others))
    else:
        return None
    return "srcs"


def destinations(doc, rng):
    x = _pick(doc, rng, lambda x: x.get("op") == "multicast")
    if x is None:
        return None
    missing = [r for r in range(doc["ranks"]) if r not in x["dsts"] and r != x["src"]]
    if missing and (rng.random() < 0.5 or len(x["dsts"]) < 2):
        x["dsts"].append(rng.choice(missing))
    elif len(x["dsts"]) >= 2:
        x["dsts"].remove(rng.choice(x["dsts"]))
    else:
        return None
    return "dsts"


def operation_end(doc, rng):
    x = _pick(doc, rng, lambda x: x.get("op") in OPS)
    if x is None:
        return None
    key = "dst" if x["op"] == "switch_reduce" else "src"
    x[key] = _other(rng, doc["ranks"], x[key])
    return f"op-{key}"


def via(doc, rng):
    x = _pick(doc, rng, lambda x: x.get("op") in OPS)
    if x is None:
        return None
    names = [w["name"] for w in doc["topology"].get("switches", []) if w["name"] != x["via"]]
    x["via"] = rng.choice(names + ["nowhere"])
    return "via"


def as_sends(doc, rng):
    """A switch operation replaced by its sends: the same data, every port paid per
    link."""
    found = _entries(doc, lambda x: x.get("op") in OPS)
    if not found:
        return None
    i, j = rng.choice(found)
    x = doc["steps"][i]["sends"].pop(j)
    extra = {"count": x["count"]} if "count" in x else {}
    if x["op"] == "multicast":
        pairs, op = [(x["src"], d) for d in x["dsts"]], "copy"
    else:
        pairs, op = [(s, x["dst"]) for s in x["srcs"] if s != x["dst"]], "reduce"
    doc["steps"][i]["sends"] += [{"chunk": x["chunk"], "src": s, "dst": d, "op": op, **extra}
                                 for s, d in pairs]
    return "as-sends"


def _switch(doc, rng):
    switches = doc["topology"].get("switches", [])
    return rng.choice(switches) if switches and doc["version"] == 3 else None


def capability(doc, rng):
    w = _switch(doc, rng)
    if w is None or not w["can"]:
        return None
    w["can"].remove(rng.choice(w["can"]))
    return "can"


def switch_link(doc, rng):
    w = _switch(doc, rng)
    if w is None or not w["links"]:
        return None
    w["links"].pop(rng.randrange(len(w["links"])))
    return "switch-links"


def port(doc, rng):
    w = _switch(doc, rng)
    entries = [(side, e) for side in ("up", "down") for e in (w or {}).get(side, [])]
    if not entries:
        return None
    side, e = rng.choice(entries)
    what = rng.random()
    if what < 0.35:
        w[side].remove(e)
        return "port-drop"
    if what < 0.7:  # the rank's other port in its place
        other = dict(w.get("down" if side == "up" else "up", []))
        if e[0] not in other:
            return None
        e[1] = other[e[0]]
        return "port-swap"
    e[1] = rng.choice([g["name"] for g in doc["topology"]["groups"]])
    return "port-other"


def capacity(doc, rng):
    topo = doc["topology"]
    if topo.get("groups") and rng.random() < 0.6:
        item = rng.choice(topo["groups"])
        item["capacity"] = item["capacity"] / 2
        return "group-capacity"
    link = rng.choice(topo["links"])
    link[2] = link[2] / 2
    return "link-capacity"


def version(doc, rng):
    doc["version"] -= 1
    return "version"


MUTATIONS = [drop, move, duplicate, step_rounds, chunk, reduce_again, flip_op, send_end,
             count, shift, batches, stride, restride, pipeline_rounds, unpipeline, pre_post,
             sources, destinations, operation_end, via, as_sends, capability, switch_link,
             port, capacity, version]


def mutants(doc, rng, wanted):
    out, tries = [], 0
    while len(out) < wanted and tries < 20 * wanted:
        tries += 1
        m = copy.deepcopy(doc)
        kind = rng.choice(MUTATIONS)(m, rng)
        if kind is not None and rng.random() < STACKED:
            second = rng.choice(MUTATIONS)(m, rng)
            kind = f"{kind}+{second}" if second else kind
        if kind is not None and m != doc:
            out.append((kind, m))
    return out


def verifier_judges(doc):
    try:
        verify_schedule(doc)
        return "ok"
    except ScheduleInvalid:
        return "invalid"
    except MalformedSchedule:
        return "malformed"


@pytest.fixture(scope="module")
def schedules():
    return valid_schedules()


def test_the_originals_are_valid_to_both_checkers(schedules):
    assert len(schedules) >= 20
    assert {d["version"] for _, d in schedules} == {2, 3}
    for label, doc in schedules:
        assert judge(doc) == ("ok", ""), label
        assert verifier_judges(doc) == "ok", label


def test_every_meaning_changing_mutant_of_a_version_2_or_3_file_is_rejected(schedules,
                                                                            capsys):
    rng = random.Random(SEED)
    tally = Counter()  # (version, first mutation, reference's verdict, verifier's)
    wrong = []
    for label, doc in schedules:
        for kind, m in mutants(doc, rng, MUTANTS_PER_SCHEDULE):
            reference, reason = judge(m)
            verifier = verifier_judges(m)
            tally[doc["version"], kind.split("+")[0], reference, verifier] += 1
            if reference != verifier:
                wrong.append((label, kind, reference, reason, verifier))
    total = sum(tally.values())
    with capsys.disabled():
        print(f"\nversion 2 and 3 mutants: {total} (seed {SEED}); per version and first "
              "mutation, how many the reference keeps valid / finds invalid / malformed")
        for v, kind in sorted({(v, k) for v, k, _, _ in tally}):
            counts = [sum(n for (v2, k2, r, _), n in tally.items()
                          if (v2, k2, r) == (v, kind, verdict))
                      for verdict in ("ok", "invalid", "malformed")]
            print(f"  v{v} {kind:24s} {counts[0]:4d} {counts[1]:4d} {counts[2]:4d}")
        for w in wrong[:40]:
            print("  DISAGREE", w)
    missed = [w for w in wrong if w[2] != "ok" and w[4] == "ok"]
    assert not missed, f"the verifier accepted a meaning-changing mutant: {missed[0]}"
    over_strict = [w for w in wrong if w[2] == "ok"]
    assert not over_strict, f"the verifier rejected a valid mutant: {over_strict[0]}"
    assert not wrong, f"malformed to one checker, invalid to the other: {wrong[0]}"
    kept = sum(n for (_, _, r, _), n in tally.items() if r == "ok")
    assert total >= 1400 and 0 < kept < total / 5
    # every class changed the meaning of some file (its first mutation, alone or not)
    changed = {k for (_, k, r, _), n in tally.items() if r != "ok"}
    assert CLASSES <= changed, CLASSES - changed


CLASSES = {  # what each mutation reports (tests/README.md lists them by version)
    "drop", "move", "duplicate", "step-rounds", "chunk", "reduce-again", "flip-op",
    "send-src", "send-dst", "count", "shift-range", "batches", "stride", "restride",
    "pipeline-rounds-down", "pipeline-rounds-longer", "pipeline-rounds-shorter",
    "no-pipeline", "pre-range", "pre-drop", "pre-rank", "post-range", "post-drop",
    "post-rank", "srcs", "dsts", "op-dst", "op-src", "via", "as-sends", "can",
    "switch-links", "port-drop", "port-swap", "port-other", "group-capacity",
    "link-capacity", "version"}
