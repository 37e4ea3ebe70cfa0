"""The schedule file round-trips exactly, and the cost model gives the known formulas."""

import json
from fractions import Fraction

import pytest

from synth.errors import BadInput
from synth.schedule.collectives import make_collective
from synth.schedule.cost import parse_size, schedule_cost
from synth.schedule.file import (read_schedule, schedule_from_dict, schedule_to_dict,
                                 write_schedule)
from synth.schedule.ir import Schedule, Send, Step
from synth.schedule.verify import verify_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower


def ring_allgather(n: int) -> Schedule:
    """One-direction ring: in step t rank r forwards chunk (r - t) mod n to r + 1."""
    coll = make_collective("allgather", n, 1)
    steps = tuple(Step(1, tuple(Send((r - t) % n, r, (r + 1) % n) for r in range(n)))
                  for t in range(n - 1))
    return Schedule(coll, lower(resolve(f"ring:{n}")), steps, {"made_by": "test"})


def test_round_trip_is_exact(tmp_path):
    schedule = ring_allgather(4)
    path = write_schedule(schedule, tmp_path / "ring.json")
    again = read_schedule(path)
    assert again == schedule and again.info == schedule.info
    assert schedule_to_dict(again) == json.loads(path.read_text())


def test_round_trip_keeps_fractional_capacities_and_groups():
    model = lower(resolve("dgx2x2"))
    coll = make_collective("allgather", model.ranks, 1)
    schedule = Schedule(coll, model, (Step(2, (Send(0, 0, 16),)),))
    again = schedule_from_dict(json.loads(json.dumps(schedule_to_dict(schedule))))
    assert again.model == model
    assert any(g.capacity == Fraction(16, 25) for g in again.model.groups)


def test_written_file_follows_design_and_verifies(tmp_path):
    doc = json.loads(write_schedule(ring_allgather(4), tmp_path / "r.json").read_text())
    assert doc["format"] == "synth.schedule" and doc["version"] == 1
    assert doc["num_chunks"] == 4 and doc["pre"] == [[r, r] for r in range(4)]
    assert doc["cost"]["steps"] == 3 and doc["cost"]["rounds"] == 3
    verify_schedule(doc)


def test_ring_allgather_cost_is_the_classic_formula():
    # (p - 1) alpha + (p - 1) / p * n * beta with alpha 0.7 us and 25 GB/s links
    cost = schedule_cost(ring_allgather(4))
    assert cost.latency_us == pytest.approx(3 * 0.7)
    n = 1 << 20
    assert cost.time_us(n) == pytest.approx(3 * 0.7 + 3 / 4 * n / 25e3)
    assert cost.algbw_gbps(n) == pytest.approx(n / cost.time_us(n) / 1e3)


def test_step_alpha_is_the_largest_alpha_in_the_step():
    model = lower(resolve("dgx2x2"))  # NVSwitch 0.35 us, InfiniBand 2.6 us
    coll = make_collective("allgather", model.ranks, 1)
    steps = (Step(1, (Send(0, 0, 1),)), Step(2, (Send(0, 0, 16), Send(0, 1, 2))))
    cost = schedule_cost(Schedule(coll, model, steps))
    assert cost.latency_us == pytest.approx(0.35 + 2.6)
    assert cost.us_per_byte == pytest.approx(3 / (32 * 25e3))


@pytest.mark.parametrize("change, message", [
    ({"format": "other"}, "not a synth.schedule"),
    ({"ranks": "four"}, "malformed"),
    ({"collective": "allshuffle"}, "unknown collective"),
])
def test_malformed_documents(change, message):
    doc = schedule_to_dict(ring_allgather(3))
    doc.update(change)
    with pytest.raises(BadInput, match=message):
        schedule_from_dict(doc)
    doc = schedule_to_dict(ring_allgather(3))
    del doc["steps"]
    with pytest.raises(BadInput, match="missing key 'steps'"):
        schedule_from_dict(doc)


@pytest.mark.parametrize("text, nbytes", [("1KB", 1024), ("64MB", 64 << 20), ("1G", 1 << 30),
                                          ("512", 512), ("256MiB", 256 << 20),
                                          ("1.5KiB", 1536), ("3gib", 3 << 30)])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["0", "-1MB", "lots", "1TB", "64IB", "1TiB"])
def test_bad_sizes(text):
    with pytest.raises(BadInput):
        parse_size(text)


def test_written_files_follow_the_umask(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = write_schedule(ring_allgather(3), tmp_path / "r.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_write_that_fails_midway_leaves_nothing_behind(tmp_path, monkeypatch):
    import os

    import synth.files

    target = tmp_path / "out" / "r.json"
    write_schedule(ring_allgather(3), target)
    before = target.read_text()

    def killed(src, dst):
        raise KeyboardInterrupt  # as if the process died before the rename

    monkeypatch.setattr(synth.files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_schedule(ring_allgather(4), target)
    monkeypatch.undo()
    assert target.read_text() == before  # the old file whole, not half a new one
    assert os.listdir(target.parent) == ["r.json"]  # no temporary left over


def test_the_machine_is_made_into_text_once_for_every_file_on_it(tmp_path, monkeypatch):
    # every file holds the whole machine: at 1024 GPUs behind a spine a million rank
    # links, about 20 s of text a file, made again for each point of a job
    import synth.schedule.file as file_module
    made = []
    real = file_module.model_to_dict
    monkeypatch.setattr(file_module, "model_to_dict", lambda m, *a: made.append(m) or real(m, *a))
    first, second = ring_allgather(4), ring_allgather(4)
    second = Schedule(second.collective, first.model, second.steps[::-1], {})  # one model
    for i, s in enumerate((first, second)):
        path = write_schedule(s, tmp_path / f"{i}.json")
        assert path.read_text() == file_module.schedule_json(file_module.schedule_to_dict(s))
    assert len(made) == 1 + 2  # the text once; then schedule_to_dict's own, above


def test_a_files_size_counts_the_machine_it_holds_until_its_text_is_kept():
    # ring:4 lowered: 8 rank links (each neighbour, both ways), no groups; the one-way
    # ring allgather: 3 steps of 4 sends. Units: 12 sends + 3 steps + 8 links; once a
    # point on the model has held its writing where that is worth knowing (at least 1% of
    # the time left: with none left, always), the machine's text is kept for every file
    # on it, and the next point counts its own 15
    from synth.construct.paced import held, size
    from synth.deadline import Deadline
    schedule = ring_allgather(4)
    assert (len(schedule.model.links), len(schedule.model.groups)) == (8, 0)
    assert size(schedule) == 12 + 3 + 8
    held(schedule, Deadline.after(60))  # writing it is no share of a minute: not made
    again = Schedule(schedule.collective, schedule.model, schedule.steps[::-1], {})
    assert size(again) == 12 + 3 + 8
    held(schedule, Deadline.after(0))
    assert size(again) == 12 + 3
