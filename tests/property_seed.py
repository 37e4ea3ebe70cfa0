"""The seed of this run's property tests (hypothesis): SYNTH_PROPERTY_SEED when set,
to replay a run, else the fresh one tests/conftest.py draws once per session (before
pytest-xdist starts its workers, which inherit it) and prints at the end of the run."""

import os

VARIABLE = "SYNTH_PROPERTY_SEED"


def property_seed() -> int:
    return int(os.environ[VARIABLE])
