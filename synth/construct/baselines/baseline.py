"""What every baseline module returns: a named, ordinary Schedule."""

from __future__ import annotations

from dataclasses import dataclass

from synth.schedule.ir import Schedule


@dataclass(frozen=True)
class Baseline:
    name: str  # e.g. "ring x3", "double binary tree", "direct"
    schedule: Schedule
    algorithm: str = ""  # its family, as not_applicable names it (e.g. "ring")
