"""Every test gets its own empty solver cache: answers from other runs must not leak in."""

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SYNTH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
