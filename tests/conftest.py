"""Every test gets its own empty solver cache: answers from other runs must not leak in.
A small valid schedule file (schedule_file) is shared by the tests of one module; the
frontiers of tests.shared_frontiers by the workers of one session.

Hypothesis: no example database (a run's examples depend on its seed alone, not on
what an earlier run on this machine found: HYPOTHESIS_PROFILE=dev keeps one locally);
the property tests' seed is drawn once per session, or read from SYNTH_PROPERTY_SEED
to replay a run, and printed at its end (tests/property_seed.py)."""

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import settings

from tests.property_seed import VARIABLE

settings.register_profile("ci", database=None)
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    """The session's property seed, in the environment before any test module is
    imported and before pytest-xdist starts its workers (which inherit it)."""
    given = os.environ.get(VARIABLE)
    if given is None:
        os.environ[VARIABLE] = str(random.SystemRandom().randrange(1 << 32))
    elif not given.isdigit():
        raise pytest.UsageError(f"{VARIABLE}: expected a non-negative integer, got {given!r}")


def pytest_terminal_summary(terminalreporter):
    """The seed, after a run that ran a test that uses it (reports of every worker)."""
    ran = any("test_properties.py" in getattr(report, "nodeid", "")
              for reports in terminalreporter.stats.values() for report in reports)
    if ran:
        seed = os.environ[VARIABLE]
        terminalreporter.write_line(f"property tests: seed {seed} (replay with "
                                    f"{VARIABLE}={seed})")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SYNTH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Every test starts as a command does: the paces at their priors (a pace measured
    by an earlier test in this worker, slow under load, must not decide what this one
    builds: synth.deadline.Pace), and no exporter answers remembered (an earlier test
    may have refused a program under a limit it patched: synth.export.loads)."""
    from synth.deadline import forget_paces
    from synth.export.loads import forget

    forget_paces()
    forget()


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
