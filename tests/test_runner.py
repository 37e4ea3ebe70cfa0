"""`synth run`: schedules execute on gloo processes and match torch's collectives."""

import json
import subprocess
import sys

import pytest

from synth.bounds import bounds
from synth.frontier import default_limits, synthesize
from synth.schedule.collectives import ROOTED, make_collective
from synth.schedule.file import write_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes


def synth_cli(*args):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=300)


def frontier_files(spec, name, directory):
    topo = resolve(spec)
    root = 0 if name in ROOTED else None
    b = bounds(lower_with_routes(topo), make_collective(name, topo.ranks, 1, root))
    result = synthesize(topo, name, root, default_limits(b, time_limit=60))
    return [write_schedule(p.schedule, directory / f"{name}-{i}.json")
            for i, p in enumerate(result.points)]


@pytest.mark.parametrize("spec, names", [
    ("ring:4", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
                "scatter", "alltoall"]),
    ("dgx1", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall"]),
])
def test_synthesized_schedules_match_torch(spec, names, tmp_path):
    for name in names:
        # the last frontier point: the most steps and chunks, the least bandwidth
        files = frontier_files(spec, name, tmp_path)
        for path in files[-1:]:
            result = synth_cli("run", str(path), "--size", "64KB", "--iters", "1", "--json")
            assert result.returncode == 0, result.stderr[-2000:]
            report = json.loads(result.stdout)
            assert report["correct"] and report["collective"] == name
            assert report["synth_us"] > 0 and report["torch_us"] > 0


def test_a_wrong_schedule_is_caught_by_the_numbers(tmp_path):
    path = frontier_files("ring:4", "allreduce", tmp_path)[0]
    doc = json.loads(path.read_text())
    # a reduction turned into a copy: the program runs, but a contribution is lost
    send = next(x for step in doc["steps"] for x in step["sends"] if x["op"] == "reduce")
    send["op"] = "copy"
    path.write_text(json.dumps(doc))
    assert synth_cli("verify", str(path)).returncode == 1  # the verifier sees it too
    result = synth_cli("run", str(path), "--size", "4KB", "--iters", "1", "--no-verify")
    assert result.returncode == 1 and "WRONG" in result.stdout, result.stderr[-2000:]
    assert "differs from torch" in result.stderr


def test_nproc_must_match_the_schedule(tmp_path):
    path = frontier_files("ring:4", "allgather", tmp_path)[0]
    result = synth_cli("run", str(path), "--nproc", "3")
    assert result.returncode == 2 and "4 ranks" in result.stderr
