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
