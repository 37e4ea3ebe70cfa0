"""Version 2 of the schedule file: chunk ranges and pipelines, checked without unrolling.

The reference here is the plain version 1 schedule a compact file means, expanded by a
few lines written in this test (not by synth): a compact file must be judged exactly as
its expansion is, and each way a version 2 file can be wrong is rejected with the step,
batch and chunk named.
"""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.errors import BadInput
from synth.schedule.verify import MalformedSchedule, ScheduleInvalid, verify_schedule

N, C = 4, 4


def ring_links(n):
    return [[r, (r + 1) % n, 1] for r in range(n)] + [[(r + 1) % n, r, 1] for r in range(n)]


def pipelined_allgather(batches=2, stride=2, count=2, rounds=(2, 4, 2)):
    """docs/schedule-file.md's example: allgather on a bidirectional ring of 4, C = 4;
    each batch moves `count` pieces of every share: to both neighbours, then on to the
    far rank."""
    step0 = [{"chunk": r * C, "count": count, "src": r, "dst": d, "op": "copy"}
             for r in range(N) for d in ((r + 1) % N, (r - 1) % N)]
    step1 = [{"chunk": r * C, "count": count, "src": (r + 1) % N, "dst": (r + 2) % N,
              "op": "copy"} for r in range(N)]
    return {
        "format": "synth.schedule", "version": 2, "collective": "allgather", "root": None,
        "ranks": N, "chunks": C, "num_chunks": N * C,
        "topology": {"name": "hand-ring", "unit_gbps": 25, "links": ring_links(N), "groups": []},
        "pre": [[r, r * C, C] for r in range(N)],
        "post": [[r, 0, N * C] for r in range(N)],
        "steps": [{"rounds": 2, "sends": step0}, {"rounds": 2, "sends": step1}],
        "pipeline": {"batches": batches, "stride": stride, "rounds": list(rounds)},
    }


def expand(doc):
    """The version 1 schedule a version 2 document means (docs/schedule-file.md)."""
    out = copy.deepcopy(doc)
    out["version"] = 1
    for key in ("pre", "post"):
        out[key] = [[e[0], k] for e in doc[key]
                    for k in range(e[1], e[1] + (e[2] if len(e) > 2 else 1))]
    pipe = doc.get("pipeline") or {"batches": 1, "stride": 0,
                                   "rounds": [s["rounds"] for s in doc["steps"]]}
    program = doc["steps"]
    steps = []
    for t in range(len(program) + pipe["batches"] - 1):
        sends = []
        for b in range(pipe["batches"]):
            if 0 <= t - b < len(program):
                for x in program[t - b]["sends"]:
                    for j in range(x.get("count", 1)):
                        sends.append({"chunk": x["chunk"] + j + b * pipe["stride"],
                                      "src": x["src"], "dst": x["dst"], "op": x["op"]})
        steps.append({"rounds": pipe["rounds"][t], "sends": sends})
    out["steps"] = steps
    out.pop("pipeline", None)
    return out


def invalid(doc, text, step=None):
    with pytest.raises(ScheduleInvalid) as info:
        verify_schedule(doc)
    assert text in str(info.value), str(info.value)
    if step is not None:
        assert info.value.step == step
    return info.value


def test_the_example_is_valid_and_so_is_its_expansion():
    doc = pipelined_allgather()
    verify_schedule(doc)
    verify_schedule(expand(doc))
    assert len(expand(doc)["steps"]) == 3


def test_ranges_alone_without_a_pipeline():
    doc = pipelined_allgather(count=4)
    del doc["pipeline"]
    for step in doc["steps"]:
        step["rounds"] = 4
    verify_schedule(doc)


def test_a_range_leaving_its_share():
    doc = pipelined_allgather(count=5, batches=1, rounds=(5, 5))  # chunks 4r .. 4r+4
    err = invalid(doc, "leave their share", step=0)
    assert err.chunk == 0


def test_a_stride_that_shifts_a_chunk_out_of_its_share():
    doc = pipelined_allgather(batches=3, rounds=(2, 4, 4, 2))  # batch 2: pieces 4, 5
    invalid(doc, "batch 2 moves chunk 1 to 5, out of its share")


def test_a_stride_onto_another_batchs_chunks():
    doc = pipelined_allgather(stride=1, rounds=(2, 4, 2))  # batch 1 overlaps batch 0
    invalid(doc, "batches 0 and 1 both touch chunk 1")


def test_too_few_rounds_where_batches_overlap():
    doc = pipelined_allgather(rounds=(2, 3, 2))
    err = invalid(doc, "over its capacity 1 x 3 rounds (expanded step, batches 0..1 active)",
                  step=1)
    assert err.ranks


def test_a_rounds_list_of_the_wrong_length():
    invalid(pipelined_allgather(rounds=(2, 4)), "pipeline.rounds lists 2 steps, but 2 steps "
                                                "in 2 batches expand to 3")


def test_a_batch_programs_own_rounds_are_checked_too():
    doc = pipelined_allgather()
    doc["steps"][0]["rounds"] = 1
    invalid(doc, "one batch alone", step=0)


def test_too_few_batches_leave_chunks_unmoved():
    doc = pipelined_allgather(batches=1, rounds=(2, 2))
    invalid(doc, "does not hold chunk 2 (no batch moves it)")


def test_a_flow_error_names_the_batch_program():
    doc = pipelined_allgather()
    doc["steps"][1]["sends"][0].update(src=2, dst=3)  # rank 2 lacks rank 0's pieces yet
    invalid(doc, "in batch 0, and so in every batch", step=1)


@pytest.mark.parametrize("change", [
    lambda d: d["steps"][0]["sends"][0].__setitem__("count", 2),
    lambda d: d.__setitem__("pipeline", {"batches": 1, "stride": 0, "rounds": [1, 1, 1]}),
    lambda d: d["pre"].__setitem__(0, [0, 0, 1]),
], ids=["count", "pipeline", "pre-range"])
def test_a_version_1_file_that_uses_version_2_forms(change):
    doc = expand(pipelined_allgather())
    change(doc)
    invalid(doc, "a version 1 file uses")


@pytest.mark.parametrize("change, where", [
    (lambda d: d["steps"][0]["sends"][0].__setitem__("count", "2"), "count"),
    (lambda d: d["steps"][0]["sends"][0].__setitem__("count", 0), "count"),
    (lambda d: d["steps"][0]["sends"][0].__setitem__("count", True), "count"),
    (lambda d: d.__setitem__("pipeline", [2, 2]), "pipeline"),
    (lambda d: d["pipeline"].pop("stride"), "pipeline.stride"),
    (lambda d: d["pipeline"].__setitem__("rounds", [2, "4", 2]), "pipeline.rounds[1]"),
    (lambda d: d["pipeline"].__setitem__("batches", 0), "pipeline.batches"),
    (lambda d: d["pre"].__setitem__(0, [0, 0, 4, 1]), "pre[0]"),
])
def test_a_pipeline_or_count_of_the_wrong_shape_is_unreadable(change, where):
    doc = pipelined_allgather()
    change(doc)
    with pytest.raises(MalformedSchedule, match=where.replace("[", r"\[")):
        verify_schedule(doc)


def test_the_command_line_gives_exit_1_and_2(tmp_path):
    import subprocess
    import sys

    bad = pipelined_allgather(rounds=(2, 3, 2))
    ugly = pipelined_allgather()
    ugly["pipeline"]["batches"] = "two"
    for doc, code in ((bad, 1), (ugly, 2), (pipelined_allgather(), 0)):
        path = tmp_path / "s.json"
        path.write_text(json.dumps(doc))
        result = subprocess.run([sys.executable, "-m", "synth", "verify", str(path)],
                                capture_output=True, text=True)
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr


# --- a compact file is judged as its expansion is ------------------------------------

MUTATIONS = [
    ("count", lambda d, r: _send(d, r).__setitem__("count", r.randint(1, 4))),
    ("chunk", lambda d, r: _send(d, r).__setitem__("chunk", r.randint(0, N * C - 1))),
    ("src", lambda d, r: _send(d, r).__setitem__("src", r.randrange(N))),
    ("dst", lambda d, r: _send(d, r).__setitem__("dst", r.randrange(N))),
    ("op", lambda d, r: _send(d, r).__setitem__("op", "reduce")),
    ("drop", lambda d, r: d["steps"][r.randrange(2)]["sends"].pop()),
    ("stride", lambda d, r: d["pipeline"].__setitem__("stride", r.randint(0, 4))),
    ("batches", lambda d, r: _batches(d, r.randint(1, 4))),
    ("rounds", lambda d, r: _rounds(d, r)),
    ("step-rounds", lambda d, r: d["steps"][r.randrange(2)].__setitem__(
        "rounds", r.randint(1, 3))),
]


def _send(doc, rng):
    step = doc["steps"][rng.randrange(len(doc["steps"]))]
    return step["sends"][rng.randrange(len(step["sends"]))]


def _batches(doc, batches):
    doc["pipeline"]["batches"] = batches
    doc["pipeline"]["rounds"] = [4] * (len(doc["steps"]) + batches - 1)


def _rounds(doc, rng):
    rounds = doc["pipeline"]["rounds"]
    rounds[rng.randrange(len(rounds))] = rng.randint(1, 5)


def _judge(doc):
    try:
        verify_schedule(doc)
        return "valid"
    except ScheduleInvalid:
        return "invalid"
    except BadInput:
        return "malformed"


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(st.sampled_from(range(len(MUTATIONS))), min_size=1, max_size=2),
       st.randoms(use_true_random=False))
def test_a_compact_file_is_judged_as_its_expansion(picks, rng):
    doc = pipelined_allgather()
    for pick in picks:
        MUTATIONS[pick][1](doc, rng)
    compact = _judge(doc)
    if compact == "malformed":
        return
    expanded = expand(doc)
    # a range outside 0..G-1 or its share has no expansion in version 1 terms: the
    # compact file must call it invalid (the expansion would move other chunks)
    ranges_ok = all(0 <= x["chunk"] and x["chunk"] + x.get("count", 1) <= N * C
                    and x["chunk"] // C == (x["chunk"] + x.get("count", 1) - 1) // C
                    for s in doc["steps"] for x in s["sends"])
    pipe = doc["pipeline"]
    length_ok = len(pipe["rounds"]) == len(doc["steps"]) + pipe["batches"] - 1
    if not ranges_ok or not length_ok:
        assert compact == "invalid"
        return
    # batches that share chunks or leave their shares break the contract even when
    # the expansion happens to be valid: then the compact file is invalid
    if compact == "invalid" and _judge(expanded) == "valid":
        assert _breaks_the_pipeline_contract(doc), (picks, json.dumps(doc))
        return
    own_rounds_ok = _own_rounds_ok(doc)
    if compact == "valid":
        assert _judge(expanded) == "valid" and own_rounds_ok
    else:
        assert _judge(expanded) == "invalid" or not own_rounds_ok


def _breaks_the_pipeline_contract(doc):
    pipe = doc["pipeline"]
    touched = {k for s in doc["steps"] for x in s["sends"]
               for k in range(x["chunk"], x["chunk"] + x.get("count", 1))}
    seen = set()
    for b in range(pipe["batches"]):
        for k in touched:
            moved = k + b * pipe["stride"]
            if moved // C != k // C or moved in seen:
                return True
        seen |= {k + b * pipe["stride"] for k in touched}
    return not _own_rounds_ok(doc)


def _own_rounds_ok(doc):
    caps = {(a, b): c for a, b, c in doc["topology"]["links"]}
    for step in doc["steps"]:
        load = {}
        for x in step["sends"]:
            load[(x["src"], x["dst"])] = load.get((x["src"], x["dst"]), 0) + x.get("count", 1)
        if any(n > caps.get(link, 0) * step["rounds"] for link, n in load.items()):
            return False
    return True
