"""What every benchmark records about the machine it ran on (Linux /proc, versions)."""

from __future__ import annotations

import platform
from pathlib import Path


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


def recorded_machine(repo, bench: str, recording: bool) -> dict | None:
    """The machine, date and commit a record names; None (after one line on stderr)
    when recording from a tree with uncommitted changes, which a record must not."""
    import subprocess
    import sys
    import time

    git = ["git", "-C", str(repo)]
    dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    if recording and dirty:
        print(f"{bench}: uncommitted changes; commit them before recording", file=sys.stderr)
        return None
    commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() + ("+dirty" if dirty else "")
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_name(),
            "memory_gib": memory_gib(), "python": platform.python_version(),
            "commit": commit}
