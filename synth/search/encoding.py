"""Encode an Instance (link model, collective, steps S, rounds R) as constraints.

Time-expanded chunk routing, one encoding for every collective. The value a rank holds
of a chunk is a set of tokens: for non-combining collectives the one token "the chunk",
for combining ones the ranks whose contributions it sums. Variables:

    has[c, n, s, k]   after step s, rank n's value of chunk c includes token k
    send[c, l, s]     chunk c crosses link l = (u, v) in step s (a copy; for
                      combining collectives a reduce, and `copy[c, l, s]` a copy)
    rounds[s]         rounds of step s, >= 1, summing to at most R

Rules (docs/schedule-file.md's semantics, with two restrictions that lose nothing useful and
make answers cheaper to find):
- a sender holds the chunk at the start of the step; values only grow;
- non-combining: a rank receives a chunk at most once, only when it lacks it;
- combining: reduces into a rank in one step carry pairwise disjoint contributor sets,
  disjoint from the rank's own; a copy is alone in its step and never discards a
  contribution (the source's value covers the destination's);
- every link and group carries at most capacity x rounds[s] chunks in step s, except
  that a switch which computes (LinkModel.switches) pays its port once per operation:
  the copies of one chunk from u through a switch that multicasts count once on u's up
  port, the reduces of one chunk into v through a switch that reduces once on v's down
  port (the schedule file's version 3); decode writes such sends as the switch
  operation;
- at the end every (rank, chunk) of the postcondition holds the full value.

Pruning by hop distance: token k can be at rank n after step s only if s >= its
distance, and a send is only made where what it carries can still reach a rank that
needs it. Cost: O(G x links x S) send variables, times N tokens for combining ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from synth.deadline import Deadline
from synth.schedule.collectives import COMBINING, Collective
from synth.schedule.ir import Schedule, Send, Step, SwitchOp
from synth.search.constraints import ConstraintModel
from synth.topology.linkmodel import LinkModel, hop_distances, min_rounds, switch_rounds


@dataclass(frozen=True)
class Instance:
    model: LinkModel
    collective: Collective
    steps: int
    rounds: int  # at most this many rounds in all
    break_symmetry: bool = True
    rounds_floor: int = 0  # at least this many (a proven lower bound: it only prunes)
    minimize: bool = False  # ask for the fewest rounds, not just any schedule

    @property
    def chunks(self) -> int:
        return self.collective.chunks


@dataclass
class Encoding:
    instance: Instance
    constraints: ConstraintModel
    sends: dict[tuple[int, tuple[int, int], int, str], int]  # (c, link, s, op) -> var
    rounds: list[int]  # int variable per step


def estimated_variables(instance: Instance) -> int:
    """About how many boolean variables encode() makes, before pruning: G x links x S,
    times N contributions for combining collectives. Cheap: nothing is built."""
    coll = instance.collective
    return variables_for(coll.name, coll.ranks, coll.chunks, len(instance.model.links),
                         instance.steps)


def variables_for(name: str, ranks: int, chunks: int, links: int, steps: int) -> int:
    """estimated_variables without building the collective (G from docs/schedule-file.md's table)."""
    g = {"alltoall": ranks * ranks * chunks, "allreduce": chunks, "broadcast": chunks,
         "reduce": chunks}.get(name, ranks * chunks)
    tokens = ranks if name in COMBINING else 1
    return g * links * steps * tokens


def encode(instance: Instance, deadline: Deadline | float | None = None) -> Encoding:
    """The constraints of `instance`; TimeoutError past `deadline`: a big instance takes
    seconds to encode, and the time limit covers that too."""
    deadline = Deadline.of(deadline)

    def in_time():
        if deadline.passed():
            raise TimeoutError("out of time while encoding")

    inst = instance
    model, coll, S = inst.model, inst.collective, inst.steps
    cm = ConstraintModel()
    dist = hop_distances(model)
    far = model.ranks + S + 1

    def d(a, b):
        return dist[a].get(b, far)

    tokens = list(range(model.ranks)) if coll.combining else [0]
    has = _holdings(cm, inst, tokens, d, far, in_time)
    sends = _send_literals(cm, inst, tokens, has, d, in_time)
    rounds = _step_rounds(cm, inst)
    _data_flow(cm, inst, tokens, has, sends, in_time)
    # post: the full value at the end
    for rank, chunk in coll.post:
        for k in tokens:
            _clause(cm, has[chunk, rank, S, k])  # False here: the empty clause, unsat

    _bandwidth(cm, model, sends, rounds, S)
    if inst.break_symmetry:
        _order_interchangeable_chunks(cm, has, coll, S)
    return Encoding(inst, cm, sends, rounds)


def _holdings(cm, inst: Instance, tokens, d, far: int, in_time) -> dict:
    """has[c, n, s, k]: rank n holds token k of chunk c after step s (a token: the
    contribution of rank k to a combining collective; the chunk itself, 0, otherwise),
    a literal, or True/False where the start or the hop distance decides it."""
    model, coll, S = inst.model, inst.collective, inst.steps
    origin = {}  # where each token starts, per chunk
    for rank, chunk in coll.pre:
        origin.setdefault(chunk, []).append(rank)

    def token_sources(c, k):
        return [k] if coll.combining else origin.get(c, [])

    has = {}
    for c in range(coll.num_chunks):
        in_time()
        for n in range(model.ranks):
            for k in tokens:
                first = min((d(src, n) for src in token_sources(c, k)), default=far)
                for s in range(S + 1):
                    if s == 0:
                        has[c, n, 0, k] = (n in token_sources(c, k)) and \
                            ((n, c) in coll.pre)
                    elif first > s:
                        has[c, n, s, k] = False
                    else:
                        has[c, n, s, k] = cm.new_bool()
    return has


def _send_literals(cm, inst: Instance, tokens, has: dict, d, in_time) -> dict:
    """sends[c, (u, v), s, op]: a literal for each send that could matter: u may hold
    the chunk by step s - 1 and v can still pass it on to a rank that wants it."""
    model, coll, S = inst.model, inst.collective, inst.steps
    links = [(l.src, l.dst) for l in model.links]
    wanters = {}
    for rank, chunk in coll.post:
        wanters.setdefault(chunk, []).append(rank)
    sends: dict = {}
    ops = ("reduce", "copy") if coll.combining else ("copy",)
    for c in range(coll.num_chunks):
        in_time()
        need = wanters.get(c, [])
        for s in range(1, S + 1):
            for (u, v) in links:
                # u must hold some token by step s-1; v must still be able to pass it on
                if all(has[c, u, s - 1, k] is False for k in tokens):
                    continue
                if not need or min(d(v, w) for w in need) > S - s:
                    continue
                if not coll.combining and has[c, v, s - 1, 0] is True:
                    continue  # v already holds it
                for op in ops:
                    sends[c, (u, v), s, op] = cm.new_bool()
    return sends


def _step_rounds(cm, inst: Instance) -> list:
    """The rounds of each step: at least 1, in all at most the instance's rounds (and at
    least its floor); minimised where the instance asks."""
    S = inst.steps
    rounds = [cm.new_int(1, max(1, inst.rounds - S + 1)) for _ in range(S)]
    cm.at_most((), inst.rounds, tuple((1, r) for r in rounds))
    if inst.rounds_floor > S:
        cm.at_most((), -inst.rounds_floor, tuple((-1, r) for r in rounds))
    if inst.minimize:
        cm.minimize = tuple(rounds)
    return rounds


def _data_flow(cm, inst: Instance, tokens, has: dict, sends: dict, in_time) -> None:
    """What a rank holds after a step follows from what it held and what it received."""
    model, coll, S = inst.model, inst.collective, inst.steps
    into = {v: [u for u, w in ((l.src, l.dst) for l in model.links) if w == v]
            for v in range(model.ranks)}
    ops = ("reduce", "copy") if coll.combining else ("copy",)
    for c in range(coll.num_chunks):
        in_time()
        for s in range(1, S + 1):
            for v in range(model.ranks):
                incoming = {op: [(u, sends[c, (u, v), s, op]) for u in into[v]
                                 if (c, (u, v), s, op) in sends] for op in ops}
                if coll.combining:
                    _combining_step(cm, has, c, v, s, tokens, incoming)
                else:
                    _plain_step(cm, has, c, v, s, incoming["copy"])


def _order_interchangeable_chunks(cm, has, coll: Collective, S: int) -> None:
    """Symmetry breaking: chunks with the same holders and wanters can swap labels in
    any solution, so we may ask that they reach one chosen rank in label order.

    Arrival at a fixed rank (for combining collectives: of one fixed contribution) is
    a preorder on chunks, and relabelling sorts it, so no solution class is lost.
    """
    classes: dict[tuple, list[int]] = {}
    for c in range(coll.num_chunks):
        key = (tuple(coll.holders(c)), tuple(coll.wanters(c)))
        classes.setdefault(key, []).append(c)
    for (holders, wanters), chunks in classes.items():
        if len(chunks) < 2:
            continue
        outsiders = [w for w in wanters if w not in holders] or list(wanters)
        rank = outsiders[0]
        token = 0 if not coll.combining else next(k for k in range(coll.ranks) if k != rank)
        for c, later in zip(chunks, chunks[1:]):
            for s in range(1, S + 1):
                _clause(cm, _neg(has[later, rank, s, token]), has[c, rank, s, token])


def _clause(cm: ConstraintModel, *lits) -> None:
    """A clause whose literals may be the constants True and False (a plain loop: the
    encoder makes tens of thousands of these per instance)."""
    kept = []
    for x in lits:
        if x is True:
            return
        if x is not False:
            kept.append(x)
    cm.clause(*kept)


def _neg(x):
    return (not x) if isinstance(x, bool) else -x


def _equals_any(cm, target, before, arrivals) -> None:
    """target <-> before or any of arrivals (values only grow)."""
    _clause(cm, _neg(before), target)
    for a in arrivals:
        _clause(cm, -a, target)
    _clause(cm, _neg(target), before, *arrivals)


def _plain_step(cm, has, c, v, s, incoming):
    """Non-combining: v receives chunk c at most once, only when it lacks it."""
    before, after = has[c, v, s - 1, 0], has[c, v, s, 0]
    for u, x in incoming:
        _clause(cm, -x, has[c, u, s - 1, 0])  # the sender holds it
        _clause(cm, -x, _neg(before))  # v lacks it
    if len(incoming) > 1:
        cm.at_most(tuple((1, x) for _, x in incoming), 1)
    _equals_any(cm, after, before, [x for _, x in incoming])


def _combining_step(cm, has, c, v, s, tokens, incoming):
    """Combining: reduces add disjoint contributions; a copy covers v's value."""
    reduces, copies = incoming["reduce"], incoming["copy"]
    if len(copies) > 1:
        cm.at_most(tuple((1, x) for _, x in copies), 1)
    for _, xc in copies:
        for _, xr in reduces:
            cm.clause(-xc, -xr)  # a copy is the only write in its step
    for k in tokens:
        before, after = has[c, v, s - 1, k], has[c, v, s, k]
        arrivals, reduced = [], []
        for op, group in (("reduce", reduces), ("copy", copies)):
            for u, x in group:
                src = has[c, u, s - 1, k]
                if op == "copy":
                    _clause(cm, -x, _neg(before), src)  # never discard token k
                if src is False:
                    continue
                if src is True:
                    arrive = x
                else:  # arrive <-> x and src
                    arrive = cm.new_bool()
                    cm.clause(-arrive, x)
                    cm.clause(-arrive, src)
                    cm.clause(arrive, -x, -src)
                arrivals.append(arrive)
                if op == "reduce":
                    reduced.append(arrive)
        # nothing counted twice: v's own token k and each reduce's are exclusive
        if before is True:
            for a in reduced:
                cm.clause(-a)
        elif before is False and len(reduced) > 1:
            cm.at_most(tuple((1, a) for a in reduced), 1)
        elif before is not False and reduced:
            cm.at_most(tuple((1, a) for a in [before] + reduced), 1)
        _equals_any(cm, after, before, arrivals)


def switch_ports(model: LinkModel) -> dict[tuple[str, str], dict[tuple[int, int], str]]:
    """{(port group, op): {link: switch}}: the links whose sends of op a switch turns
    into one operation on that port: copies from u through a switch that multicasts
    (u's up port), reduces into v through a switch that reduces (v's down port). A link
    through several such switches goes with the first."""
    first: dict = {}  # (link, op) -> the first switch that computes op over it
    for w in model.switches:
        for can, op in (("multicast", "copy"), ("reduce", "reduce")):
            if can in w.can:
                for link in w.links:
                    first.setdefault((link, op), w.name)
    out: dict = {}
    for w in model.switches:
        for op, ports, end in (("copy", w.up, 0), ("reduce", w.down, 1)):
            for rank, group in ports:
                for link in w.links:
                    if link[end] == rank and first.get((link, op)) == w.name:
                        out.setdefault((group, op), {})[link] = w.name
    return out


def _bandwidth(cm, model: LinkModel, sends, rounds, S):
    by_link_step = {}
    for (c, link, s, op), x in sends.items():
        by_link_step.setdefault((link, s), []).append((c, op, x))
    ports = switch_ports(model)
    for s in range(1, S + 1):
        r = rounds[s - 1]
        for l in model.links:
            xs = [x for _, _, x in by_link_step.get(((l.src, l.dst), s), [])]
            _capacity(cm, xs, l.capacity, r)
        for g in model.groups:
            # once: (switch, op, chunk, the port's rank) -> the sends of one operation (a
            # group may be the port of several ranks, each operation paying once)
            xs, once = [], {}
            for link in g.links:
                for c, op, x in by_link_step.get((link, s), []):
                    via = ports.get((g.name, op), {}).get(link)
                    if via is None:
                        xs.append(x)
                    else:
                        end = link[0] if op == "copy" else link[1]
                        once.setdefault((via, op, c, end), []).append(x)
            for members in once.values():
                if len(members) == 1:
                    xs.append(members[0])
                else:  # the operation: true if any of its sends is
                    y = cm.new_bool()
                    for x in members:
                        cm.clause(-x, y)
                    xs.append(y)
            _capacity(cm, xs, g.capacity, r)


def _capacity(cm, xs, capacity: Fraction, r):
    """q * sum(xs) <= p * rounds, capacity = p / q; skipped when it cannot bind."""
    if not xs or len(xs) <= capacity:  # even one round carries them all
        return
    p, q = capacity.numerator, capacity.denominator
    cm.at_most(tuple((q, x) for x in xs), 0, ((-p, r),))


def decode(enc: Encoding, true_bools: frozenset[int]) -> Schedule:
    """The schedule of a satisfying assignment, trimmed of sends nobody needs."""
    inst = enc.instance
    chosen = sorted((s, c, link, op) for (c, link, s, op), x in enc.sends.items()
                    if x in true_bools)
    steps = [[] for _ in range(inst.steps)]
    for s, c, (u, v), op in chosen:
        steps[s - 1].append(Send(c, u, v, op))
    if not inst.collective.combining:
        steps = _trim(inst.collective, steps)
    if not inst.model.switches:
        out = tuple(Step(min_rounds(inst.model, [(x.src, x.dst) for x in sends]),
                         tuple(sends)) for sends in steps)
    else:
        out = tuple(_switched(inst.model, sends) for sends in steps)
    return Schedule(inst.collective, inst.model, out)


def _switched(model: LinkModel, sends: list[Send]) -> Step:
    """A step whose sends through a computing switch's port, of one chunk from one
    source (copies) or into one destination (reduces), become one switch operation (the
    encoding paid that port once for them); the rest stay sends."""
    via_of = {}  # (link, op) -> switch
    for (_, op), links in switch_ports(model).items():
        for link, w in links.items():
            via_of.setdefault((link, op), w)
    ops: dict = {}
    for x in sends:
        w = via_of.get(((x.src, x.dst), x.op))
        if w is not None:
            key = (w, x.op, x.chunk, x.src if x.op == "copy" else x.dst)
            ops.setdefault(key, []).append(x)
    switched, kept = [], [x for x in sends if via_of.get(((x.src, x.dst), x.op)) is None]
    for (w, op, c, end), xs in sorted(ops.items()):
        if len(xs) == 1:
            kept += xs
        elif op == "copy":
            switched.append(SwitchOp("multicast", c, (end,), tuple(sorted(x.dst for x in xs)),
                                     w))
        else:
            switched.append(SwitchOp("switch_reduce", c, tuple(sorted(x.src for x in xs)),
                                     (end,), w))
    kept.sort(key=lambda x: (x.chunk, x.src, x.dst))
    return Step(switch_rounds(model, switched, tuple(kept)), tuple(kept), tuple(switched))


def _trim(coll: Collective, steps: list[list[Send]]) -> list[list[Send]]:
    """Drop copies whose chunk is neither wanted at the destination nor passed on."""
    needed = set(coll.post)  # (rank, chunk) that must be delivered
    kept = []
    for sends in reversed(steps):
        keep = [x for x in sends if (x.dst, x.chunk) in needed]
        for x in keep:
            needed.add((x.src, x.chunk))
        kept.append(keep)
    return list(reversed(kept))
