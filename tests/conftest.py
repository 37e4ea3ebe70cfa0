"""Every test gets its own empty solver cache: answers from other runs must not leak in.
A small valid schedule file (schedule_file) is shared by the tests of one module; the
frontiers of tests.shared_frontiers by the workers of one session."""

import json
import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SYNTH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session", autouse=True)
def shared_frontiers_folder(tmp_path_factory):
    """The folder where tests.shared_frontiers leaves the frontiers it synthesizes for
    the other workers of this session (under pytest-xdist: the session's temporary
    folder, which holds each worker's own); in a single process, none is needed."""
    from tests import shared_frontiers

    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "shared-frontiers"
        folder.mkdir(exist_ok=True)
        shared_frontiers.share_between_workers(folder)
    yield
    shared_frontiers.share_between_workers(None)


@pytest.fixture(scope="module")
def schedule_file(tmp_path_factory):
    """A small valid schedule file (ring:4 allgather), written by the CLI."""
    from tests.test_reliability import synth_cli

    out = tmp_path_factory.mktemp("sched")
    result = synth_cli("allgather", "--topo", "ring:4", "--steps", "2", "--rounds", "2",
                       "--chunks", "1", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return Path(json.loads(result.stdout)["file"])
