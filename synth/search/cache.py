"""A cache of solver answers, so that identical instances are not solved twice.

The key is a hash of everything that decides the answer: the link model's content
(links, capacities, groups; not its name), the collective, the instance (steps, rounds,
bounds given to the solver, minimising or not), the backend and its version, and
ENCODING_VERSION (raised whenever the encoding changes what it admits). Only decided
answers are kept (SAT with its schedule, UNSAT); a time-out depends on the time given.

Entries are not trusted as files:
- each carries an HMAC-SHA256 over its key and content, made with a secret of 32 random
  bytes that only this user can read ($CACHE/.secret, mode 0600). An entry edited by
  hand, copied from elsewhere, or stored under another key fails the check and is
  ignored (and later overwritten). So an UNSAT taken from the cache, which nothing can
  re-check cheaply, is one this user's synth computed for exactly this instance: a proof
  from the cache is as sound as the solver's.
- a SAT entry's schedule is verified again when it is read, on the link model and
  collective that were asked for (synth.search.instance), not on what the entry says.
Files live under $SYNTH_CACHE_DIR, else ~/.cache/synth; SYNTH_CACHE=0 turns it off.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from synth.errors import BadInput
from synth.files import TEXT_LIMIT, parse_json, read_text, write_atomic

ENCODING_VERSION = 4  # 2: allreduce's rounds floor from the corrected bound; 3: MACs;
# 4: switch operations (a computing switch pays its port once per operation)


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
               "switches": model_doc.get("switches", []),
               "unit_gbps": model_doc["unit_gbps"], "collective": collective,
               "instance": instance, "solver": solver_version(backend),
               "encoding": ENCODING_VERSION}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> dict | None:
    """The entry stored under key, or None (absent, unreadable, not for this key, or
    failing its integrity check)."""
    folder = cache_dir()
    secret = _secret(folder) if folder else None
    path = folder / f"{key}.json" if folder else None
    if secret is None or path.is_symlink() or not path.exists():
        return None  # an entry is a file synth wrote, never a link to elsewhere
    try:
        entry = parse_json(read_text(path, TEXT_LIMIT * 64, "cache entry"))
    except BadInput:
        return None
    if not isinstance(entry, dict) or entry.get("status") not in ("sat", "unsat"):
        return None
    mac = entry.pop("mac", None)
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(secret, key, entry)):
        return None
    return entry


def store(key: str, entry: dict) -> None:
    folder = cache_dir()
    secret = _secret(folder, create=True) if folder else None
    if secret is None:
        return
    entry = {**entry, "key": key}
    try:
        text = json.dumps({**entry, "mac": _mac(secret, key, entry)})
        write_atomic(folder / f"{key}.json", text, follow_links=False)
    except BadInput:
        pass  # a cache that cannot be written is only a slower run


def _mac(secret: bytes, key: str, entry: dict) -> str:
    """HMAC-SHA256 over the key and the entry's canonical JSON."""
    text = json.dumps({"key": key, "entry": entry}, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def _secret(folder: Path, create: bool = False) -> bytes | None:
    """This user's cache secret, made on first store; None when it cannot be had (then
    the cache is off: a cache only ever slows a run, it never fails one). Only a regular
    file of 32 bytes, not a link, counts; anything else at its name is replaced once, or
    left alone when that fails."""
    path = folder / ".secret"
    data = _read_secret(path)
    if data is not None or not create:
        return data
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                return None
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    except FileExistsError:  # another run made it first
        pass
    except OSError:
        return None
    return _read_secret(path)


def _read_secret(path: Path) -> bytes | None:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != 32:
            return None  # a link, a pipe, /dev/zero: never read
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(33)
    except OSError:
        return None
    return data if len(data) == 32 else None
