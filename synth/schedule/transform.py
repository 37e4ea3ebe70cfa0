"""Transformations of schedules: reversal (the duality), refinement, composition.

SCCL's duality: run a non-combining schedule backwards on the reversed links and every
copy becomes a reduction. Allgather's reversal is reducescatter, broadcast's is reduce.
It is exact when each rank receives each chunk at most once and the chunk's holders
never receive it back (the encoder allows a receive only when the rank lacks the
chunk, which gives both): then the copies form trees rooted at the holders, and the
reductions sum each tree exactly once.
"""

from __future__ import annotations

from dataclasses import replace

from synth.schedule.collectives import DUAL, make_collective
from synth.schedule.ir import Schedule, Send, Step
from synth.topology.linkmodel import Group, LinkModel, RankLink, min_rounds

COMBINING_OF = {v: k for k, v in DUAL.items()}  # allgather -> reducescatter, ...


def reverse_model(model: LinkModel) -> LinkModel:
    """The same network with every link and group pointing the other way."""
    links = tuple(RankLink(l.dst, l.src, l.capacity, l.alpha_us) for l in model.links)
    groups = tuple(Group(g.name, tuple((b, a) for a, b in g.links), g.capacity)
                   for g in model.groups)
    return LinkModel(model.name, model.unit_gbps, model.ranks, links, groups, model.boxes)


def reverse_schedule(schedule: Schedule, original: LinkModel) -> Schedule:
    """A non-combining schedule on reverse_model(original), run backwards on original."""
    coll = schedule.collective
    dual = make_collective(COMBINING_OF[coll.name], coll.ranks, coll.chunks, coll.root)
    steps = tuple(Step(step.rounds, tuple(Send(x.chunk, x.dst, x.src, "reduce")
                                          for x in step.sends))
                  for step in reversed(schedule.steps))
    return Schedule(dual, original, steps, dict(schedule.info))


def refine(schedule: Schedule, factor: int) -> Schedule:
    """Cut every chunk into `factor` pieces: chunk c becomes c * factor + j.

    The chunk numbering numbers chunks so that this is the same collective with factor x C
    chunks; every step then needs at most factor x its rounds (fewer where links
    had capacity to spare).
    """
    if factor == 1:
        return schedule
    coll = schedule.collective
    finer = make_collective(coll.name, coll.ranks, coll.chunks * factor, coll.root)
    steps = []
    for step in schedule.steps:
        sends = tuple(replace(x, chunk=x.chunk * factor + j)
                      for x in step.sends for j in range(factor))
        steps.append(Step(min_rounds(schedule.model, [(x.src, x.dst) for x in sends]), sends))
    steps = tuple(steps)
    return Schedule(finer, schedule.model, steps, dict(schedule.info))


def compose_allreduce(reducescatter: Schedule, allgather: Schedule) -> Schedule:
    """Reducescatter then allgather, both with k chunks per rank: allreduce, C = N k.

    Allreduce chunk c is their chunk c: reduced onto rank c // k, then copied out.
    """
    rs, ag = reducescatter.collective, allgather.collective
    assert rs.chunks == ag.chunks and rs.ranks == ag.ranks
    coll = make_collective("allreduce", rs.ranks, rs.ranks * rs.chunks)
    info = {"composed": {"reducescatter": dict(reducescatter.info),
                         "allgather": dict(allgather.info)}}
    return Schedule(coll, reducescatter.model, reducescatter.steps + allgather.steps, info)
