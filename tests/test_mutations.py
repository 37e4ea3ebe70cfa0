"""Mutation testing of the verifier on version 1 files (versions 2 and 3:
tests/test_mutations_v2_v3.py).

Valid schedules (synthesized, and synth.construct.baselines') are mutated at random with
a fixed seed. tests/reference_checker.py, a naive checker written from
docs/schedule-file.md that shares no code with synth, decides each mutant:
meaning-preserving if every rule holds and the postcondition is met, else
meaning-changing (invalid, or malformed). Every meaning-changing mutant must be rejected
by synth.schedule.verify, in the same stage; every meaning-preserving one accepted.
"""

import copy
import random
from collections import Counter

import pytest

from synth.construct.baselines import baselines
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import MalformedSchedule, ScheduleInvalid, verify_schedule
from synth.search.instance import solve_instance
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from tests.reference_checker import judge

SEED = 20261129
MUTANTS_PER_SCHEDULE = 80
STACKED = 0.25  # share of mutants that get a second mutation on top


def verifier_judges(doc):
    try:
        verify_schedule(doc)
        return "ok"
    except ScheduleInvalid:
        return "invalid"
    except MalformedSchedule:
        return "malformed"


# --- mutations ------------------------------------------------------------------------

def _sends(doc):
    return [(i, j) for i, s in enumerate(doc["steps"]) for j in range(len(s["sends"]))]


def drop_send(doc, rng):
    i, j = rng.choice(_sends(doc))
    del doc["steps"][i]["sends"][j]
    return "drop"


def move_send(doc, rng):
    if len(doc["steps"]) < 2:
        return None
    i, j = rng.choice(_sends(doc))
    to = rng.choice([k for k in range(len(doc["steps"])) if k != i])
    doc["steps"][to]["sends"].append(doc["steps"][i]["sends"].pop(j))
    return "move"


def swap_destination(doc, rng):
    i, j = rng.choice(_sends(doc))
    send = doc["steps"][i]["sends"][j]
    linked = [d for s, d, *_ in doc["topology"]["links"] if s == send["src"]]
    # mostly a linked neighbour (a subtle change), sometimes any other rank
    pool = linked if rng.random() < 0.8 else list(range(doc["ranks"]))
    choices = [d for d in pool if d != send["dst"]]
    if not choices:
        return None
    send["dst"] = rng.choice(choices)
    return "swap-dst"


def change_chunk(doc, rng):
    i, j = rng.choice(_sends(doc))
    send = doc["steps"][i]["sends"][j]
    g = doc["num_chunks"]
    choices = [k for k in range(g + 1) if k != send["chunk"]]  # g itself: out of range
    send["chunk"] = rng.choice(choices)
    return "chunk"


def overload(doc, rng):
    """Duplicate a send, or lower a step's rounds by one."""
    i, j = rng.choice(_sends(doc))
    step = doc["steps"][i]
    if step["rounds"] > 1 and rng.random() < 0.5:
        step["rounds"] -= 1
        return "lower-rounds"
    step["sends"].insert(j, dict(step["sends"][j]))
    return "duplicate"


def duplicate_reduction(doc, rng):
    reds = [(i, j) for i, j in _sends(doc) if doc["steps"][i]["sends"][j]["op"] == "reduce"]
    if not reds:
        return None
    i, j = rng.choice(reds)
    send = dict(doc["steps"][i]["sends"][j])
    if rng.random() < 0.5:  # the same reduction again, in the same step
        doc["steps"][i]["sends"].append(send)
    else:  # or in a later step (the sum would count the source twice)
        later = rng.randrange(i, len(doc["steps"]))
        doc["steps"][later]["sends"].append(send)
    return "dup-reduce"


def flip_op(doc, rng):
    i, j = rng.choice(_sends(doc))
    send = doc["steps"][i]["sends"][j]
    send["op"] = "reduce" if send["op"] == "copy" else "copy"
    return "flip-op"


MUTATIONS = [drop_send, move_send, swap_destination, change_chunk, overload,
             duplicate_reduction, flip_op]


def mutants(doc, rng, count):
    out = []
    tries = 0
    while len(out) < count and tries < 20 * count:
        tries += 1
        m = copy.deepcopy(doc)
        kind = rng.choice(MUTATIONS)(m, rng)
        if kind is not None and rng.random() < STACKED and _sends(m):
            second = rng.choice(MUTATIONS)(m, rng)
            kind = f"{kind}+{second}" if second else kind
        if kind is not None and m != doc:
            out.append((kind, m))
    return out


# --- the valid schedules --------------------------------------------------------------

INSTANCES = [  # (topology, collective, steps, rounds, chunks)
    ("ring:4", "allgather", 2, 3, 2),
    ("ring:4", "reducescatter", 2, 3, 2),
    ("ring:4", "allreduce", 2, 2, 2),
    ("ring:4", "alltoall", 2, 2, 1),
    ("dgx1", "allgather", 2, 3, 2),
    ("fc:4", "allreduce", 1, 1, 1),
    ("line:3", "allreduce", 2, 2, 1),
    ("switch:4", "broadcast", 2, 6, 4),
    ("switch:4", "reduce", 2, 6, 4),
]
BASELINES = [("ring:4", "allreduce"), ("ring:4", "allgather"), ("fc:4", "reducescatter"),
             ("fc:4", "alltoall"), ("switch:4", "broadcast"), ("line:3", "reduce"),
             ("hypercube:2", "allreduce"), ("fc:4", "gather"), ("fc:4", "scatter")]


def valid_schedules():
    out = []
    for spec, name, steps, rounds, chunks in INSTANCES:
        model = lower(resolve(spec))
        root = 0 if name in ("broadcast", "reduce", "gather", "scatter") else None
        res = solve_instance(model, make_collective(name, model.ranks, chunks, root), steps,
                             rounds, time_limit=10, workers=2)
        assert res.status == "sat", (spec, name)
        out.append((f"{spec} {name} synthesized", schedule_to_dict(res.schedule)))
    for spec, name in BASELINES:
        model = lower(resolve(spec))
        root = 0 if name in ("broadcast", "reduce", "gather", "scatter") else None
        for b in baselines(model, name, root)[:2]:
            out.append((f"{spec} {name} {b.name}", schedule_to_dict(b.schedule)))
    return out


@pytest.fixture(scope="module")
def schedules():
    return valid_schedules()


def test_reference_simulator_accepts_the_originals(schedules):
    assert len(schedules) >= 15
    for label, doc in schedules:
        assert verifier_judges(doc) == "ok", label
        assert judge(doc) == ("ok", ""), label


def test_every_meaning_changing_mutant_is_rejected(schedules, capsys):
    rng = random.Random(SEED)
    total = rejected = preserving = 0
    by_kind = Counter()
    missed, over_strict, stage = [], [], []
    for label, doc in schedules:
        for kind, m in mutants(doc, rng, MUTANTS_PER_SCHEDULE):
            total += 1
            reference = judge(m)[0]
            verifier = verifier_judges(m)
            accepted = verifier == "ok"
            rejected += not accepted
            preserving += reference == "ok"
            by_kind[kind.split("+")[0] + (" (+1 more)" if "+" in kind else ""),
                    "rejected" if not accepted else "accepted"] += 1
            if reference != "ok" and accepted:
                missed.append((label, kind, m))
            if reference == "ok" and not accepted:
                over_strict.append((label, kind, m))
            if "ok" not in (reference, verifier) and reference != verifier:
                stage.append((label, kind, reference, verifier))
    with capsys.disabled():
        print(f"\nmutants: {total}, rejected by the verifier: {rejected} "
              f"({rejected / total:.1%}), meaning-preserving: {preserving}")
        for kind in sorted({k for k, _ in by_kind}):
            print(f"  {kind:21s} rejected {by_kind[kind, 'rejected']:4d}  "
                  f"accepted {by_kind[kind, 'accepted']:4d}")
    assert not missed, f"verifier accepted a meaning-changing mutant: {missed[0][:2]}"
    assert not over_strict, f"verifier rejected a valid mutant: {over_strict[0][:2]}"
    assert not stage, f"malformed to one checker, invalid to the other: {stage[0]}"
    assert total >= 500
    assert rejected / total > 0.5
    assert preserving == total - rejected and preserving > 0
