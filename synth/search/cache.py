"""A cache of solver answers, so that identical instances are not solved twice.

The key is a hash of everything that decides the answer: the link model's content
(links, capacities, groups; not its name), the collective, the instance (steps, rounds,
bounds given to the solver, minimising or not), the backend and its version, and
ENCODING_VERSION (raised whenever the encoding changes what it admits). Only decided
answers are kept (SAT with its schedule, UNSAT); a time-out depends on the time given.

Entries are not trusted: a SAT entry's schedule goes through the verifier again when it
is read, and an entry that does not parse, or names another key, is ignored and later
overwritten. Files live under $SYNTH_CACHE_DIR, else ~/.cache/synth; SYNTH_CACHE=0
turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from synth.files import write_atomic

ENCODING_VERSION = 2  # 2: allreduce's rounds floor from the corrected bound


def cache_dir() -> Path | None:
    if os.environ.get("SYNTH_CACHE", "1") == "0":
        return None
    root = os.environ.get("SYNTH_CACHE_DIR") or Path.home() / ".cache" / "synth"
    return Path(root)


def solver_version(backend: str) -> str:
    if backend == "cpsat":
        import ortools

        return f"ortools-{ortools.__version__}"
    import z3

    return f"z3-{z3.get_version_string()}"


def instance_key(model_doc: dict, collective: dict, instance: dict, backend: str) -> str:
    payload = {"links": model_doc["links"], "groups": model_doc["groups"],
               "unit_gbps": model_doc["unit_gbps"], "collective": collective,
               "instance": instance, "solver": solver_version(backend),
               "encoding": ENCODING_VERSION}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> dict | None:
    """The entry stored under key, or None (absent, unreadable, or not for this key)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        entry = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or \
            entry.get("status") not in ("sat", "unsat"):
        return None
    return entry


def store(key: str, entry: dict) -> None:
    folder = cache_dir()
    if folder is None:
        return
    try:
        write_atomic(folder / f"{key}.json", json.dumps({**entry, "key": key}))
    except OSError:
        pass  # a cache that cannot be written is only a slower run
