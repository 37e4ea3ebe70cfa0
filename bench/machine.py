"""What every benchmark records about the machine it ran on (Linux /proc, versions), and
the rule every record keeps: it names a commit, and the code it measured is that
commit's (recorded_machine), or a snapshot it names by a hash of its content."""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RESULTS = "bench/results/"  # the records themselves: writing one does not change the code


def cpu_name() -> str:
    """The CPU's model name, or platform.processor() where /proc has none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    """Total memory in GiB (0 where /proc/meminfo cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return 0.0


def version(module: str) -> str:
    """A package's version, "missing" when it is not installed."""
    try:
        if module == "z3":
            import z3
            return z3.get_version_string()
        return getattr(__import__(module), "__version__", "unknown")
    except ImportError:
        return "missing"


@dataclass(frozen=True)
class Snapshot:
    """The code a benchmark measures when it is a copy taken at the start, not the
    working tree: the repository paths copied, the copy's content_sha256, and whether
    the copy is a commit's `git archive` (then it is that commit, whatever the working
    tree holds) or a copy of the working tree (then only the hash names it)."""
    paths: tuple[str, ...]
    sha256: str
    committed: bool


def content_sha256(folder: Path) -> str:
    """16 hex digits of sha256 over every file under `folder`, in path order: its path
    relative to `folder`, a NUL, its bytes. Compiled files (__pycache__, *.pyc) are left
    out, so compiling a snapshot does not change its hash."""
    digest = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        rel = f.relative_to(folder)
        if "__pycache__" in rel.parts or f.suffix == ".pyc":
            continue
        digest.update(str(rel).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def uncommitted(repo) -> list[str] | None:
    """Paths that differ from HEAD (staged, unstaged, or untracked and not ignored),
    records under bench/results/ left out; None when git cannot tell (no repository)."""
    done = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "-z",
                           "--untracked-files=all"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    paths, fields = [], iter(done.stdout.split("\0"))
    for entry in fields:
        if entry:
            paths.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy: its source path follows
                paths.append(next(fields))
    return [p for p in dict.fromkeys(paths) if not p.startswith(RESULTS)]


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _listed(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def recorded_machine(repo, bench: str, recording: bool,
                     snapshot: Snapshot | None = None) -> dict | None:
    """The machine, date and commit a record names; None, after one line on stderr,
    when `recording` from a tree with uncommitted changes in what the run measures.

    Without a snapshot the run measures the working tree: any uncommitted change
    refuses a record. With one, changes under its paths are allowed (the record names
    the copy by "code_sha256"); changes elsewhere (the bench scripts, say) still refuse.
    A run that records nothing may measure a dirty tree: its first line of output then
    says "not recorded: uncommitted changes". "commit" is HEAD, "+dirty" when the code
    measured differs from it."""
    changed = uncommitted(repo)
    if changed is None:
        if recording:
            print(f"{bench}: {repo} is not a git repository: a record must name a commit",
                  file=sys.stderr)
            return None
        changed = []
    outside = [p for p in changed if not (snapshot and _under(p, snapshot.paths))]
    measured = [p for p in changed if not (snapshot and snapshot.committed
                                           and _under(p, snapshot.paths))]
    if recording and outside:
        print(f"{bench}: uncommitted changes ({_listed(outside)}); commit them before "
              "recording", file=sys.stderr)
        return None
    if not recording and measured:
        print(f"{bench}: not recorded: uncommitted changes ({_listed(measured)})",
              flush=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_name(),
           "memory_gib": memory_gib(), "python": platform.python_version(),
           "commit": head + ("+dirty" if measured else ""), "uncommitted": changed}
    if snapshot:
        out["code_sha256"] = snapshot.sha256
    return out


def record_stem(repo, name: str) -> Path:
    """bench/results/NAME-DATE, or NAME-DATEb, -DATEc, ... where a record of that name
    is already there: a new record never writes over an earlier one (a figure in the
    docs may cite it)."""
    stem = Path(repo) / "bench" / "results" / f"{name}-{time.strftime('%Y-%m-%d', time.gmtime())}"
    for suffix in ["", *"bcdefghijklmnopqrstuvwxyz"]:
        candidate = stem.with_name(stem.name + suffix)
        if not any(candidate.with_name(candidate.name + ext).exists()
                   for ext in (".md", ".json")):
            return candidate
    raise SystemExit(f"{stem}: 26 records of that day already; name one with --out")
