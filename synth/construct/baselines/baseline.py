"""What every baseline module returns: a named, ordinary Schedule."""

from __future__ import annotations

from dataclasses import dataclass

from synth.schedule.ir import Schedule


@dataclass(frozen=True)
class Baseline:
    name: str  # e.g. "ring x3", "double binary tree", "direct"
    schedule: Schedule
    algorithm: str = ""  # its family, as not_applicable names it (e.g. "ring")


# sends a baseline may list, at most: each takes about 125 bytes once built and verified
# (a 512-rank ring allreduce of 8.4 million sends held 1.0 GB), so this is about 2 GB;
# a 2048-rank ring allreduce would list 134 million and ran out of memory
MAX_SENDS = 16_000_000


def too_many_sends(sends: int) -> str:
    """Why a baseline of `sends` sends is not built (counted before building), or ""."""
    if sends <= MAX_SENDS:
        return ""
    return f"{sends:,} sends (at most {MAX_SENDS:,} fit in memory)"
