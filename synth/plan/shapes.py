"""Which view of the topology a communicator's plan is made on.

A runtime loads one file for every group of a communicator, so one plan serves them
all. Where every group sees the topology alike, any group will do: the first. On a
degraded machine (a NIC at half width in one box, a link with a lane gone) the groups
differ, and the plan is made on the group every other one carries: each of its rank
links is in every other group at no less bandwidth and no more latency, each physical
resource its links share is shared no tighter there, and each switch that computes in
the network for it does so there too. A schedule valid on that group is then valid on
every group, and no group runs it slower than the model says for that one: its times
are the slowest group's, the one that gates the step. Where no group is carried by all
the others (two groups each degraded in a different place), the plan is made on their
meet: one structure with each link at its slowest in any group, which every group
carries; its times are then no faster than any group's."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import networkx as nx

from synth.deadline import Deadline, TimeLimit
from synth.errors import BadInput
from synth.predict.timing import hop_latencies, prices_of
from synth.topology.communicator import view
from synth.topology.linkmodel import LinkModel, Lowering, lower_with_routes
from synth.topology.physical import Topology


@dataclass(frozen=True)
class Shape:
    """A group's view of the topology, in its own rank order: each rank link's line rate
    and achieved rate (cost model 2's), latency and kind of route; each physical
    resource rank links share; the switches that compute in the network for it."""

    # line rates are capacities in the machine's unit (every group's view keeps it)
    # a route's latency per protocol is its slowest kind of hop's (synth.predict.timing)
    links: frozenset  # (src, dst, (line rate, achieved GB/s), alpha us, latencies us)
    shared: frozenset  # (its rank links, (line rate, achieved GB/s))
    switches: frozenset  # (what it can do, its rank links)

    def carried_by(self, other: "Shape") -> bool:
        """Whether a schedule valid here is valid on `other`, and no slower there in
        either cost model."""
        theirs = {(s, d): rest for s, d, *rest in other.links}
        for s, d, rates, alpha, hops in self.links:
            if (s, d) not in theirs:
                return False
            their_rates, their_alpha, their_hops = theirs[s, d]
            if (not _at_least(their_rates, rates) or their_alpha > alpha
                    or any(t > m for t, m in zip(their_hops, hops))):
                return False
        mine = {}
        for links, rates in self.shared:
            mine[links] = tuple(map(min, rates, mine.get(links, rates)))
        # a resource of theirs binds no tighter than one of ours on the same links, or
        # than the links themselves (ours may be a link of its own, not a group)
        alone = {(s, d): rates for s, d, rates, _, _ in self.links}
        unbound = (math.inf, math.inf)
        return (all(_at_least(rates, tuple(map(min, mine.get(links, unbound),
                                                _links_rate(links, alone))))
                    for links, rates in other.shared)
                and self.switches <= other.switches)


def _at_least(rates: tuple, than: tuple) -> bool:
    # achieved rates are floats, made by different roads (28.8 x 0.75 against 25 x 0.864)
    return all(r >= t * (1 - 1e-9) for r, t in zip(rates, than))


def _links_rate(links: frozenset, alone: dict) -> tuple:
    return tuple(sum(alone[link][i] for link in links if link in alone) for i in (0, 1))


def shape_of(lowering: Lowering) -> Shape:
    """A lowered view's Shape. Cost: cost model 2's prices of it."""
    model, p = lowering.model, prices_of(lowering)
    hops = hop_latencies(p.figures)
    return Shape(
        frozenset((l.src, l.dst, (l.capacity, p.link_gbps[l.src, l.dst]), l.alpha_us,
                   hops[p.link_kind[l.src, l.dst]]) for l in model.links),
        frozenset((frozenset(g.links), (g.capacity, p.group_gbps[g.name]))
                  for g in model.groups),
        frozenset((tuple(sorted(s.can)), frozenset(s.links)) for s in model.switches))


def _line_shape(model: LinkModel) -> tuple:
    """What tells groups apart before any pricing: links, shared resources, switches."""
    return (frozenset((l.src, l.dst, l.capacity, l.alpha_us) for l in model.links),
            frozenset((frozenset(g.links), g.capacity) for g in model.groups),
            frozenset((tuple(sorted(s.can)), frozenset(s.links)) for s in model.switches))


def planning_groups(topo: Topology, name: str, groups: list[list[int]],
                    deadline: Deadline = Deadline()) -> tuple[list[list[int]], bool]:
    """(the groups communicator `name` is planned on, whether its groups differ), by the
    module docstring: the first alone where every group sees the topology alike, or one
    every other group carries, or else the slowest groups (each carrying no other),
    planned on their meet (planning_view). BadInput where a group's GPUs cannot reach
    each other within it, or groups differ in more than their links' rates; TimeLimit
    past `deadline`. Cost: a view and a lowering per group; prices per distinct one."""
    firsts: dict = {}  # a line shape -> the first group's index and lowering
    for i, group in enumerate(groups):
        if deadline.passed():
            raise TimeLimit(f"comparing the groups of communicator {name} ({i} of "
                            f"{len(groups)})")
        lowering = lower_with_routes(view(topo, group))
        _check_routes(name, group, lowering.routes)
        firsts.setdefault(_line_shape(lowering.model), (i, lowering))
    if len(firsts) == 1:
        return groups[:1], False
    shapes = {i: shape_of(lowering) for i, lowering in firsts.values()}
    if all(a.carried_by(b) for a in shapes.values() for b in shapes.values()):
        return groups[:1], False  # alike but for float rounding
    for i, candidate in shapes.items():
        if all(candidate.carried_by(s) for s in shapes.values() if s is not candidate):
            return [groups[i]], True
    # a group that carries another adds no slow link to the meet (a healthy one)
    slowest = [i for i, s in shapes.items()
               if not any(o is not s and o.carried_by(s) for o in shapes.values())]
    reps = [groups[i] for i in slowest or shapes]
    met = planning_view(topo, reps)
    if met is None or not all(shape_of(lower_with_routes(met)).carried_by(s)
                              for s in shapes.values()):
        other = next(i for i in shapes if i)
        raise BadInput(f"communicator {name}: group {groups[other]} sees the topology "
                       f"differently from group {groups[0]}, and no group, nor every "
                       "link at its slowest in them, is carried by all (one plan serves "
                       "every group, as a runtime loads one file for all: give groups of "
                       "one shape, or name them as communicators of their own)")
    return reps, True


def planning_view(topo: Topology, reps: list[list[int]]) -> Topology | None:
    """The view of `topo` a communicator is planned on, given planning_groups' answer:
    the one group's, or the first's with each link its groups route over at its slowest
    in any of them (None where their routes are not one structure: meet)."""
    first = view(topo, reps[0])
    if len(reps) == 1:
        return first
    slowest = meet([view(topo, g) for g in reps])
    if slowest is None:
        return None
    return replace(first, links=tuple(slowest.get((l.src, l.dst), l) for l in first.links))


def meet(views: list[Topology]) -> dict | None:
    """{(src, dst): link} of the links the first view routes its GPUs over, each at its
    slowest in any of `views` (fewest lanes or GB/s, most latency), or None where they
    are not one structure. A view's vertices are matched to the first's along the
    routes of the same rank pair (a group listed in another box order is matched too);
    a vertex matched two ways, or of another kind, means another structure."""
    routes = [lower_with_routes(v).routes for v in views]
    kinds = [{v.name: _kind(v) for v in sub.vertices} for sub in views]
    links = [{(l.src, l.dst): l for l in sub.links} for sub in views]
    hops = {hop for route in routes[0].values() for hop in zip(route, route[1:])}
    slowest = {hop: links[0][hop] for hop in hops}
    for k in range(1, len(views)):
        if routes[k].keys() != routes[0].keys():
            return None
        rename: dict[str, str] = {}
        for pair, route in routes[k].items():
            mine = routes[0][pair]
            if len(route) != len(mine) or any(
                    rename.setdefault(b, a) != a or kinds[k][b] != kinds[0][a]
                    for a, b in zip(mine, route)):
                return None
        if len(set(rename.values())) != len(rename):  # two vertices on one
            return None
        back = {a: b for b, a in rename.items()}
        for hop in hops:
            link, kept = links[k].get((back[hop[0]], back[hop[1]])), slowest[hop]
            if link is None:
                return None
            if link.bandwidth < kept.bandwidth:
                kept = replace(kept, gbps=link.gbps, count=link.count)
            slowest[hop] = replace(kept, alpha_us=max(kept.alpha_us, link.alpha_us))
    return slowest


def _kind(v) -> tuple:
    return v.kind, v.box is None, v.can


def _check_routes(name: str, group: list[int], routes: dict) -> None:
    """BadInput unless the group's GPUs reach each other over links, switches, NICs and
    the network between them alone (relaying through members is a schedule's step): a
    communicator's data never passes through a GPU outside it (dgx1's GPUs 0 and 5
    share no NVLink; dgxh100x2's 0 and 9 sit on different rails)."""
    joined = nx.DiGraph(list(routes))
    joined.add_nodes_from(range(len(group)))
    for far, forward in ((set(joined) - nx.descendants(joined, 0) - {0}, True),
                         (set(joined) - nx.ancestors(joined, 0) - {0}, False)):
        if far:  # from GPU 0 to every other, and back
            ends = (group[0], group[min(far)])[::1 if forward else -1]
            raise BadInput(f"communicator {name}: GPU {ends[0]} cannot reach GPU {ends[1]} "
                           "without passing through a GPU outside the communicator (no "
                           "link, switch or network path joins them)")
