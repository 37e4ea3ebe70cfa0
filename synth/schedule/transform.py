"""Transformations of schedules: reversal (the duality), mirroring (gather and scatter),
refinement, composition.

SCCL's duality: run a non-combining schedule backwards on the reversed links and every
copy becomes a reduction. Allgather's reversal is reducescatter, broadcast's is reduce.
It is exact when each rank receives each chunk at most once and the chunk's holders
never receive it back (the encoder allows a receive only when the rank lacks the
chunk, which gives both): then the copies form trees rooted at the holders, and the
reductions sum each tree exactly once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from synth.schedule.collectives import DUAL, make_collective
from synth.schedule.ir import Pipeline, Schedule, Send, Step, SwitchOp
from synth.schedule.orbits import KEPT
from synth.topology.linkmodel import Group, LinkModel, RankLink, Switch, switch_rounds

COMBINING_OF = {v: k for k, v in DUAL.items()}  # allgather -> reducescatter, ...


def reverse_model(model: LinkModel, switches: bool = False) -> LinkModel:
    """The same network with every link and group pointing the other way; with
    `switches`, its computing switches too: a port's group now carries the other
    direction, and a switch that reduces now multicasts (and the other way round), so
    that a schedule's switch operations reverse with its sends (reverse_schedule)."""
    links = tuple(RankLink(l.dst, l.src, l.capacity, l.alpha_us) for l in model.links)
    groups = tuple(Group(g.name, tuple((b, a) for a, b in g.links), g.capacity)
                   for g in model.groups)
    turned = ()
    if switches:
        swap = {"reduce": "multicast", "multicast": "reduce"}
        turned = tuple(Switch(w.name, tuple(sorted(swap[c] for c in w.can)),
                              tuple((b, a) for a, b in w.links), w.down, w.up)
                       for w in model.switches)
    return LinkModel(model.name, model.unit_gbps, model.ranks, links, groups, model.boxes,
                     turned)


def reverse_schedule(schedule: Schedule, original: LinkModel) -> Schedule:
    """A non-combining schedule on reverse_model(original), run backwards on original.
    A pipeline stays one, with the same stride: each batch runs the reversed program
    on its own chunks, and expanded step t then runs (reversed) the same program steps
    as step T-1-t did, so its rounds are the old rounds in reverse order. Written once
    per orbit, it stays so: a reversed send leaves a representative, and is replaced
    by its translate into one (the translations map the reversed links onto
    themselves too)."""
    coll = schedule.collective
    if any(x.op != "multicast" for step in schedule.steps for x in step.switch_ops):
        raise ValueError("reverse_schedule: a non-combining schedule reduces in a switch")
    dual = make_collective(COMBINING_OF[coll.name], coll.ranks, coll.chunks, coll.root)
    orbits = schedule.symmetry  # a reversed send leaves a representative: moved back in

    def turned(sends):
        sends = tuple(replace(x, src=x.dst, dst=x.src, op="reduce") for x in sends)
        return orbits.normalised(sends, coll.num_chunks) if orbits else sends

    steps = tuple(Step(step.rounds, turned(step.sends),
                       tuple(SwitchOp("switch_reduce", x.chunk, x.dsts, x.srcs, x.via, x.count)
                             for x in step.switch_ops))  # a multicast, run backwards
                  for step in reversed(schedule.steps))
    pipeline = schedule.pipeline and replace(schedule.pipeline,
                                             rounds=schedule.pipeline.rounds[::-1])
    return Schedule(dual, original, steps, dict(schedule.info), pipeline, orbits)


MIRROR = {"gather": "scatter", "scatter": "gather"}


def mirror_schedule(schedule: Schedule, original: LinkModel) -> Schedule:
    """A gather (scatter) on reverse_model(original), run backwards on original: the
    scatter (gather). Nothing combines: each chunk's hops are walked the other way, in
    the reverse order, so every hop still follows the one that brought the chunk. A
    pipeline keeps its stride, its rounds reversed (as in reverse_schedule)."""
    coll = schedule.collective
    if schedule.in_network:  # a hop through a switch has no mirror here
        raise ValueError("mirror_schedule: a gather or scatter with switch operations")
    mirror = make_collective(MIRROR[coll.name], coll.ranks, coll.chunks, coll.root)
    steps = tuple(Step(step.rounds, tuple(replace(x, src=x.dst, dst=x.src)
                                          for x in step.sends))
                  for step in reversed(schedule.steps))
    pipeline = schedule.pipeline and replace(schedule.pipeline,
                                             rounds=schedule.pipeline.rounds[::-1])
    return Schedule(mirror, original, steps, dict(schedule.info), pipeline)


def refine(schedule: Schedule, factor: int) -> Schedule:
    """Cut every chunk into `factor` pieces: chunk c becomes c * factor + j.

    The chunk numbering numbers chunks so that this is the same collective with factor x C
    chunks. Every move is refined, switch operations too (chunks c .. c + n - 1 become
    the range c x factor .. (c + n) x factor - 1, still one share); a pipeline keeps its
    depth with its stride scaled. Each step (each expanded step of a pipeline) then
    needs at most factor x its rounds, fewer where links had capacity to spare.
    """
    if factor == 1:
        return schedule
    coll, model = schedule.collective, schedule.model
    finer = make_collective(coll.name, coll.ranks, coll.chunks * factor, coll.root)
    ranged = schedule.compact  # version 1 stays version 1: one send per piece

    def pieces(moves):
        if ranged:
            return tuple(replace(x, chunk=x.chunk * factor, count=x.count * factor)
                         for x in moves)
        return tuple(replace(x, chunk=x.chunk * factor + j) for x in moves
                     for j in range(factor))

    # written once per orbit: the representatives' sends load the quotient model as
    # the whole step loads the model
    priced = schedule.symmetry.quotient(model) if schedule.symmetry else model
    program = tuple(together(priced, [Step(0, pieces(s.sends), pieces(s.switch_ops))])
                    for s in schedule.steps)
    pipeline = schedule.pipeline and Pipeline(
        schedule.pipeline.batches, schedule.pipeline.stride * factor,
        window_rounds(priced, program, schedule.pipeline.batches))
    return Schedule(finer, model, program, dict(schedule.info), pipeline,
                    schedule.symmetry)


def window_rounds(model: LinkModel, program: tuple[Step, ...], batches: int,
                  memo: dict | None = None) -> tuple[int, ...]:
    """Rounds of each expanded step of `program` pipelined over `batches`: step t runs
    program steps max(0, t - batches + 1) .. min(t, last) at once, one per batch (their
    chunks differ, their loads per link do not). `memo` keeps each window's rounds for
    another depth of the same program."""
    last, memo = len(program) - 1, {} if memo is None else memo
    rounds = []
    for t in range(len(program) + batches - 1):
        window = (max(0, t - batches + 1), min(last, t))
        if window not in memo:
            memo[window] = together(model, program[window[0]:window[1] + 1]).rounds
        rounds.append(memo[window])
    return tuple(rounds)


def together(model: LinkModel, steps) -> Step:
    """`steps` run at once as one step: all their moves, in the fewest rounds that
    carry them (switch_rounds)."""
    sends = tuple(x for s in steps for x in s.sends)
    ops = tuple(op for s in steps for op in s.switch_ops)
    return Step(switch_rounds(model, ops, sends), sends, ops)


def compose_allreduce(reducescatter: Schedule, allgather: Schedule) -> Schedule:
    """Reducescatter then allgather, both with k chunks per rank: allreduce, C = N k.

    Allreduce chunk c is their chunk c: reduced onto rank c // k, then copied out. A
    pipelined part joins as its expansion (the two parts' programs do not overlap).
    Two parts written once per orbit of the same translations stay so (block c // k
    moves with rank c // k in all three); otherwise they are unfolded.
    """
    rs, ag = reducescatter.collective, allgather.collective
    if rs.chunks != ag.chunks or rs.ranks != ag.ranks:
        raise ValueError("compose_allreduce: the two parts differ in ranks or chunks")
    coll = make_collective("allreduce", rs.ranks, rs.ranks * rs.chunks)
    info = {"composed": {"reducescatter": dict(reducescatter.info),
                         "allgather": dict(allgather.info)}}
    orbits = reducescatter.symmetry
    if orbits is None or orbits != allgather.symmetry or orbits.chunks != "blocks" or \
            reducescatter.pipeline or allgather.pipeline:
        orbits = None  # written once per orbit only when both parts are, alike
        reducescatter, allgather = reducescatter.unfolded(), allgather.unfolded()
    parts = [s if s.pipeline is None else s.expanded() for s in (reducescatter, allgather)]
    return Schedule(coll, reducescatter.model, parts[0].steps + parts[1].steps, info,
                    symmetry=orbits)


def one_batch(schedule: Schedule) -> Schedule | None:
    """A pipelined schedule's batch program as a collective of its own, or None.

    Batch 0 of a pipeline of P batches moves a P-th of every share; with its chunks
    renumbered in order (k -> its position among the chunks batch 0 touches) it is the
    same collective with C / P chunks per share: a runtime that repeats an algorithm
    over slices of the buffer (MSCCL's loop) runs the pipeline by itself. None when the
    batches do not split every share evenly (then only the expansion is the schedule).
    The result is not verified here; callers verify it.
    """
    schedule = schedule.unfolded()  # its callers unfold within their limits first
    pipe, coll = schedule.pipeline, schedule.collective
    if pipe is None:
        return schedule
    touched = sorted({k for step in schedule.steps for x in (*step.sends, *step.switch_ops)
                      for k in x.chunks()})
    if len(touched) * pipe.batches != coll.num_chunks or coll.chunks % pipe.batches:
        return None
    per_share = coll.share_chunks // pipe.batches
    index = {k: i for i, k in enumerate(touched)}
    if any(index[k] // per_share != k // coll.share_chunks for k in touched):
        return None  # batch 0 does not take the same number of chunks from every share
    batch = make_collective(coll.name, coll.ranks, coll.chunks // pipe.batches, coll.root)
    def renumbered(moves):
        out = []
        for x in moves:
            first, last = index[x.chunk], index[x.chunk + x.count - 1]
            if last - first + 1 == x.count:  # still consecutive: keep the range
                out.append(_at(x, first, x.count))
            else:
                out += [_at(x, index[k], 1) for k in x.chunks()]
        return tuple(out)

    steps = [Step(step.rounds, renumbered(step.sends), renumbered(step.switch_ops))
             for step in schedule.steps]
    info = {**schedule.info, "batch_of": {"batches": pipe.batches, "stride": pipe.stride}}
    return Schedule(batch, schedule.model, tuple(steps), info)


def _at(x, chunk: int, count: int):
    """The send or switch operation x on chunks chunk .. chunk + count - 1, made
    directly: dataclasses.replace took half of making a 512-GPU batch program (2.7 s)."""
    if isinstance(x, Send):
        return Send(chunk, x.src, x.dst, x.op, count)
    return SwitchOp(x.op, chunk, x.srcs, x.dsts, x.via, count)


def written_per_orbit(schedule: Schedule, orbits) -> Schedule:
    """The same schedule written once per orbit of `orbits` (version 4: the sends into
    the representatives, synth.schedule.orbits) where they map every step onto itself and
    keep every range (every batch's) in its chunk block; else the schedule itself.
    O(sends x axes)."""
    coll = schedule.collective
    if orbits is None or schedule.symmetry is not None or schedule.in_network or \
            orbits.ranks != coll.ranks or coll.name not in KEPT[orbits.chunks] or \
            coll.num_chunks % (coll.ranks ** (1 if orbits.chunks == "blocks" else 2)):
        return schedule
    g, steps = coll.num_chunks, []
    for step in schedule.steps:
        folded = orbits.fold(step.sends, g)
        if folded is None:
            return schedule
        steps.append(replace(step, sends=folded))
    # a range (every batch's, in a pipeline) must stay in one block, which fold assumes
    block = orbits.block(g)
    last = (schedule.pipeline.batches - 1) * schedule.pipeline.stride \
        if schedule.pipeline is not None else 0
    if not block or any(x.chunk // block != (x.chunk + x.count - 1 + last) // block
                        for step in steps for x in step.sends):
        return schedule
    return replace(schedule, steps=tuple(steps), symmetry=orbits)


def same_both_ways(model: LinkModel) -> bool:
    """Whether the reversed network (reverse_model) is the network: every link's reverse
    is a link of the same capacity, and every group's reverse a group of the same
    capacity (names aside), as often. O(links + group members), no sort: at 4096 GPUs
    (2.1 million links) sorting and hashing exact capacities took 10 s."""
    capacity = {(l.src, l.dst): l.capacity for l in model.links}
    if any(capacity.get((b, a)) != c for (a, b), c in capacity.items()):
        return False
    # a group's links as a multiset (a link may be listed twice)
    groups = Counter((frozenset(Counter(g.links).items()), g.capacity) for g in model.groups)
    return all(groups[frozenset(((b, a), k) for (a, b), k in links), c] == n
               for (links, c), n in groups.items())
