"""Every test gets its own empty solver cache: answers from other runs must not leak in.
A small valid schedule file (schedule_file) is shared by the tests of one module."""

import json
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SYNTH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def schedule_file(tmp_path_factory):
    """A small valid schedule file (ring:4 allgather), written by the CLI."""
    from tests.test_reliability import synth_cli

    out = tmp_path_factory.mktemp("sched")
    result = synth_cli("allgather", "--topo", "ring:4", "--steps", "2", "--rounds", "2",
                       "--chunks", "1", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return Path(json.loads(result.stdout)["file"])
