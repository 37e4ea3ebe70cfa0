"""The Schedule: steps of sends, the one IR everything downstream reads.

A Schedule pairs a Collective (what must happen, synth.schedule.collectives) with a
LinkModel (where, synth.topology.linkmodel) and the steps that do it. Its file form is
synth.schedule.file; the independent check is synth.schedule.verify.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.schedule.collectives import Collective
from synth.topology.linkmodel import LinkModel


@dataclass(frozen=True, slots=True)  # slots: composed schedules hold millions
class Send:
    chunk: int
    src: int
    dst: int
    op: str = "copy"  # or "reduce"


@dataclass(frozen=True)
class Step:
    rounds: int
    sends: tuple[Send, ...]


@dataclass(frozen=True)
class Schedule:
    collective: Collective
    model: LinkModel
    steps: tuple[Step, ...]
    info: dict = field(default_factory=dict, compare=False)  # how it was made

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def rounds(self) -> int:
        return sum(step.rounds for step in self.steps)
