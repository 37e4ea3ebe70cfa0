"""One-step instances of the collectives that copy, answered by arithmetic.

In one step a rank sends only what it holds when the step begins. Where each chunk
starts on one rank (allgather, broadcast, gather, scatter, alltoall, and the duals the
combining collectives are solved through), every (rank, chunk) the postcondition adds
must come straight from that chunk's holder: the schedule is forced, and its fewest
rounds are the most any link or group carries over its capacity (min_rounds). That is
the exact encoding's answer for the instance, found without building it or starting a
solver: the decomposition's levels are mostly one-step instances, and on dgx2x2 CP-SAT
was loaded (24 MiB) for six of them.

Left to the encoding: machines whose switches compute (a multicast pays its port once,
so a one-step schedule there is a choice), combining collectives, and chunks that start
on several ranks.

Cost: O(|pre| + |post| + the model's group members).
"""

from __future__ import annotations

from synth.schedule.ir import Schedule, Send, Step
from synth.search.constraints import SAT, UNSAT
from synth.topology.linkmodel import min_rounds


def one_step(model, collective, rounds: int, rounds_floor: int = 0
             ) -> tuple[str, Schedule | None] | None:
    """(SAT, the one-step schedule with the fewest rounds, at least rounds_floor) or
    (UNSAT, None) where no one-step schedule fits in `rounds` rounds; None where the
    answer is not forced (module docstring): ask the encoding."""
    if model.switches or collective.combining:
        return None
    holder = {}
    for rank, chunk in collective.pre:
        if holder.setdefault(chunk, rank) != rank:
            return None
    sends = [Send(chunk, holder[chunk], rank)
             for rank, chunk in sorted(collective.post - collective.pre)]
    pairs = [(x.src, x.dst) for x in sends]
    if any(pair not in model.link for pair in pairs):
        return UNSAT, None  # a rank no link reaches from the holder: not in one step
    least = max(min_rounds(model, pairs), rounds_floor)
    if least > rounds:
        return UNSAT, None
    return SAT, Schedule(collective, model, (Step(least, tuple(sends)),))
