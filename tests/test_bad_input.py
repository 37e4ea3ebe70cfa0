"""The bad-input corpus (tests/bad_inputs/) and bad command lines: every one gets one
line on stderr and a documented exit code (2 bad input, 1 no answer), never a traceback,
and finishes quickly even when a file claims huge sizes.

The commands run in process (tests.in_process: synth.cli.main, stdout, stderr and the
exit code captured); test_the_real_command_says_the_same runs a few of them as the
program, `python -m synth`, and finds the same line and exit code."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.in_process import synth_main

CORPUS = Path(__file__).parent / "bad_inputs"


def synth_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


def assert_one_line(result, code):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("synth: ")


@pytest.mark.parametrize("path", sorted(CORPUS.glob("topology-*")), ids=lambda p: p.name)
def test_bad_topology_files(path):
    assert_one_line(synth_main("topo", "show", str(path)), 2)
    assert_one_line(synth_main("allgather", "--topo", str(path), "--time-limit", "5"), 2)


VALID_BUT_WRONG = {"schedule-huge-chunks.json"}  # well-formed, but not so: exit 1


@pytest.mark.parametrize("path", sorted(CORPUS.glob("schedule-*")), ids=lambda p: p.name)
def test_bad_schedule_files(path, tmp_path):
    # one answer for one fact: every command that reads a schedule says what verify says
    code = 1 if path.name in VALID_BUT_WRONG else 2
    for command in (["verify", str(path)],
                    ["draw", str(path), "-o", str(tmp_path / "x.svg")],
                    ["export", str(path), "--to", "msccl-xml", "-o", str(tmp_path / "x.xml")],
                    ["run", str(path)]):
        assert_one_line(synth_main(*command), code)
    assert not any(tmp_path.iterdir())  # nothing half written


@pytest.mark.parametrize("args", [
    ["allshuffle", "--topo", "dgx1"],
    ["allgather"],
    ["allgather", "--topo", "ring:100000"],
    ["allgather", "--topo", "torus:0x4"],
    ["allgather", "--topo", "hypercube:40"],
    ["allgather", "--topo", "dgx1", "--max-chunks", "0"],
    ["allgather", "--topo", "dgx1", "--steps", "0"],
    ["allgather", "--topo", "dgx1", "--steps", "3", "--max-steps", "2"],  # searched 3
    # one instance ignored these without a word
    ["allgather", "--topo", "ring:4", "--steps", "3", "--rounds", "3", "--chunks", "1",
     "--max-chunks", "2"],
    ["allgather", "--topo", "ring:4", "--steps", "3", "--rounds", "3", "--chunks", "1",
     "--size", "1MB"],
    ["allgather", "--topo", "ring:4", "--steps", "3", "--rounds", "3", "--chunks", "1",
     "--method", "decomposed"],
    ["allgather", "--topo", "dgx1", "--time-limit", "0"],
    ["allgather", "--topo", "dgx1", "--time-limit", "-5"],
    ["allgather", "--topo", "dgx1", "--chunks", "99999999"],
    ["broadcast", "--topo", "dgx1", "--root", "-1"],
    ["broadcast", "--topo", "dgx1", "--root", "99999999999999999999"],
    ["bounds", "scatter", "--topo", "dgx1", "--root", "8"],
    ["compare", "allgather", "--topo", "dgx1", "--sizes", "-1MB"],
    ["compare", "allgather", "--topo", "dgx1", "--sizes", "0"],
    ["verify", "--cost", "--sizes", "lots", "nonexistent.json"],
    ["topo", "draw", "dgx1", "-o", "picture.gif"],
    ["topo", "draw", "dgx1"],  # no -o: was an internal error (click took None for a path)
    ["draw", "nonexistent.json"],
    ["run", "nonexistent.json"],
])
def test_bad_command_lines(args, tmp_path):
    assert_one_line(synth_main(*args, cwd=tmp_path), 2)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args", [
    ["topo", "show", str(CORPUS / "topology-self-loop.yaml")],
    ["verify", str(CORPUS / "schedule-truncated.json")],
    ["run", str(CORPUS / "schedule-wrong-type.json")],
    ["verify", str(CORPUS / "schedule-huge-chunks.json")],
    ["allgather", "--topo", "dgx1", "--steps", "0"],
], ids=["topology", "schedule", "run", "valid-but-wrong", "command-line"])
def test_the_real_command_says_the_same(args, tmp_path):
    real, here = synth_cli(*args, cwd=tmp_path), synth_main(*args, cwd=tmp_path)
    assert_one_line(real, here.returncode)
    assert real.stderr == here.stderr and real.stdout == here.stdout
    assert not any(tmp_path.iterdir())


def test_an_impossible_instance_is_a_no_not_an_error(tmp_path):
    # a ring of 8 cannot finish an allgather in 2 steps: its diameter is 4
    result = synth_cli("allgather", "--topo", "ring:8", "--steps", "2", "--rounds", "9",
                       "--chunks", "1", "--out", str(tmp_path))
    assert_one_line(result, 1)
    assert "infeasible" in result.stderr
