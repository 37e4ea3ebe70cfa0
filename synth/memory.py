"""How much memory this machine has free: what a job may still take before it swaps.

    available_bytes()   # Linux's MemAvailable, or None where it is not known

synth asks before work whose memory it can tell in advance and that could outgrow the
machine (the check of an exported plan: docs/runtimes.md), so that such work is refused
in one line instead of ending in the kernel's out-of-memory kill.
"""

from __future__ import annotations

MEMINFO = "/proc/meminfo"


def available_bytes(path: str = MEMINFO) -> int | None:
    """MemAvailable in bytes (the kernel's estimate of what can be taken without
    swapping), or None when the file or the field is missing (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
