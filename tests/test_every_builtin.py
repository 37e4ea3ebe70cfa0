"""Allreduce on every built-in and on the two-box clusters users bring first, as a user
runs it: the command finishes with no traceback, every frontier file it writes passes
`synth verify`, and the frontier is not worse than what the table says of it (each
point at or above the bound it prints)."""

import json

import pytest

from synth.topology.catalog import builtin_names
from tests.in_process import synth_main

BUILT_INS = builtin_names()  # every one, so a new built-in cannot be missed
TWO_BOXES = ["dgx2x2", "dgxh100x2", "dgxa100x2"]
# the ones whose first point takes seconds to build: 10 s (at 5 s a busy machine left
# no time to write it)
SLOW = set(TWO_BOXES) | {"gb200nvl72"}


@pytest.mark.parametrize("topo", BUILT_INS + TWO_BOXES)
def test_allreduce_runs_and_every_file_verifies(topo, tmp_path):
    # in this process: the limit then counts the command, not a fresh interpreter's
    # start (seconds of the 5 on a busy machine)
    limit = "10" if topo in SLOW else "5"
    run = synth_main("allreduce", "--topo", topo, "--time-limit", limit, "--out", tmp_path,
                     "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    summary = json.loads(run.stdout)
    files = [p["file"] for p in summary["frontier"] if p["file"] is not None]
    assert files, summary["stopped"]
    unwritten = len(summary["frontier"]) - len(files)
    if unwritten:  # a busy machine: the limit left some files unwritten, and it says so
        last = run.stderr.splitlines()[-1]
        assert last.startswith(("synth: stopped at the time limit",
                                "synth: cut short by the time limit")), last
        points = len(summary["frontier"])
        assert f" {points} points kept, {unwritten} of them not written" in last, last
    assert all(p["ratio_to_bound"] >= 1 for p in summary["frontier"])
    checked = synth_main("verify", *files)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert sum(line.startswith("ok ") for line in checked.stdout.splitlines()) == len(files)
