"""The user's question at one message size: what to load, how fast, against what.

`answer_at(result, n)` takes a frontier and a message size n (bytes, nccl-tests' n) and
returns, in the model:
- the fastest frontier point at n, whether or not a runtime can load it;
- per runtime (MSCCL XML, MSCCL++), the fastest point whose export the runtime loads
  and that cuts n into whole chunks (synth.export.units), with the file's text, tried
  in order of time at n for at most BUDGET_S seconds a runtime (an export that fails
  its checks can take tens of seconds to say so on 16 GPUs): the answer says how many
  it tried;
- the NCCL-style reference at n: the faster of the ring and double binary tree
  baselines (synth.plan.planner.reference_of). That is a stand-in for NCCL's own
  choice (NVLS, NVLS-tree, CollNet and PAT are not modelled yet), and the answer says
  so.

Cost: one schedule_cost per point, then exports for at most 2 x BUDGET_S seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from synth.errors import BadInput
from synth.export import render
from synth.export.units import unit_of
from synth.frontier import Result
from synth.plan.planner import reference_of
from synth.schedule.cost import schedule_cost
from synth.search.pareto import Point

BUDGET_S = 30.0  # seconds of exports a runtime, past the first point tried
RUNTIME_NAMES = {"msccl-xml": "MSCCL XML", "mscclpp": "MSCCL++"}
REFERENCE_NOTE = ("NCCL-style ring or tree in synth's model, a stand-in for NCCL's own "
                  "choice (its NVLS, NVLS-tree, CollNet and PAT are not modelled yet)")


@dataclass
class Loadable:
    point: Point | None  # None: no point of the TRIES fastest loads
    us: float = 0.0
    text: str = ""  # the runtime file
    why_not: list[str] = field(default_factory=list)  # of the points tried before it


@dataclass
class Answer:
    nbytes: int
    fastest: Point
    fastest_us: float
    runtimes: dict[str, Loadable]
    reference: str  # the reference's name at n
    reference_us: float


def answer_at(result: Result, nbytes: int) -> Answer:
    """The answer at `nbytes` (module docstring); BadInput when there is no point."""
    if not result.points:
        raise BadInput("no frontier point to answer with")
    timed = sorted(result.points,
                   key=lambda p: (schedule_cost(p.schedule).time_us(nbytes), p.steps))
    runtimes = {fmt: _loadable(timed, fmt, nbytes) for fmt in RUNTIME_NAMES}
    refs = reference_of(result.collective, result.model, result.root)
    best = min(refs, key=lambda c: c.time_us(nbytes)) if refs else None
    return Answer(nbytes, timed[0], schedule_cost(timed[0].schedule).time_us(nbytes),
                  runtimes, best.label if best else "none applies",
                  best.time_us(nbytes) if best else float("nan"))


def _loadable(timed: list[Point], fmt: str, nbytes: int) -> Loadable:
    found, until = Loadable(None), time.monotonic() + BUDGET_S
    for p in timed:
        if found.why_not and time.monotonic() > until:
            break
        try:
            text, _ = render(p.schedule, fmt)
        except BadInput as e:  # the runtime cannot express it
            found.why_not.append(str(e))
            continue
        if not unit_of(fmt, text).cuts(nbytes):
            found.why_not.append(f"its chunking does not cut {nbytes:,} bytes whole")
            continue
        found.point, found.text = p, text
        found.us = schedule_cost(p.schedule).time_us(nbytes)
        return found
    return found
