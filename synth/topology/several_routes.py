"""Several routes per GPU pair (issue 28, `--routes several`): where two GPUs meet over
more than one fewest-hop path through switches, such as a DGX-2's NVSwitch and the PCIe
switch two GPUs share with their NIC, the pair's rank link carries chunks over each.

    with_several_routes(topo)   the machine NAME-several-routes (a name of its own, so
                                that a schedule file made on it names a machine synth
                                derives: synth.schedule.machine)
    one_route(topo)             the machine as NCCL runs on it, one route per pair
    base_of(name)               NAME, or None where `name` names no such machine
    further_routes(...)         per GPU pair, its routes besides the widest
    exact_splits(...)           the pairs whose split the groups can state exactly,
    drop_crossed(...)             less those another pair crosses twice
    split_groups(...)           their groups
    binds(cap, capacities)      whether a group can bind (every group of the lowering)
    routes_summary, routes_lines  what a machine's routes are, for the outputs

The lowering (synth.topology.linkmodel) gives such a pair one rank link whose capacity
is the sum of its routes' bottlenecks, and leaves how the pair's chunks split over the
routes to the hardware, so the groups must allow every split and nothing more. A pair
L with link-disjoint routes R_1..R_k, whose physical hops p carry the other pairs' flow
o(p) besides L's, can split its flow f over its routes exactly when

    f + o(p_1) + ... + o(p_k) <= c(p_1) + ... + c(p_k)   for every choice of p_i in R_i

(min over p of c(p) - o(p), summed over the routes, is the room L has) and o(p) <= c(p)
for every hop (the other pairs' own groups). That needs each hop to carry at most one
pair of several routes, and no other pair to cross two of one pair's routes (it would
count twice); a pair for which that fails, whose routes cross a switch that computes (its
ports belong to one route), or whose choices of one hop per route number more than
MAX_CHOICES (the groups would be that many), keeps its widest route only.

Cost: per GPU, one breadth-first search from each of its first hops, O(N * degree *
(V + E)); then per pair of several routes, one group per choice of a hop on each route
(at most MAX_CHOICES; hops of a route with the same other pairs count once, the
tightest), each summed only until it can bind.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from itertools import product

from synth.deadline import Deadline, in_time

from synth.topology.physical import Topology
from synth.topology.routes import read_back, route_labels

SUFFIX = "-several-routes"
MAX_CHOICES = 256  # choices of one hop per route for one pair (dgx2's pairs: 2 x 2)
Hop = tuple[str, str]
Pair = tuple[int, int]


def with_several_routes(topo: Topology) -> Topology:
    """`topo` lowered with several routes per GPU pair, named NAME-several-routes."""
    if topo.several_routes:
        return topo
    return replace(topo, several_routes=True, name=f"{topo.name}{SUFFIX}")


def one_route(topo: Topology) -> Topology:
    """`topo` with one route per GPU pair again: the machine NCCL runs on, whatever
    synth's schedules assume (its name without -several-routes)."""
    if not topo.several_routes:
        return topo
    healthy = one_route(topo.healthy) if topo.healthy is not None else None
    return replace(topo, several_routes=False, name=topo.name.replace(SUFFIX, "", 1),
                   healthy=healthy)


def base_of(name: str) -> str | None:
    """The machine NAME-several-routes was made from, or None."""
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) and len(name) > len(SUFFIX) \
        else None


def further_routes(adjacency: dict, ends: set[str], source: str, order: dict[str, int],
                   widest: dict[str, tuple[str, ...]]) -> dict[str, list[tuple[str, ...]]]:
    """Per GPU that `source` routes to (`widest`: its route), the other routes of as
    few hops that share no physical link with it or with each other, widest first
    (ties to the vertex listed first). A second route leaves through another first hop,
    as the first link of the widest is taken: one search from each."""
    width = dict(adjacency[source])
    found: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for first in sorted(width, key=order.get):
        if first in ends:
            continue  # a direct GPU link is one route of its own
        labels = route_labels(adjacency, ends, first, order, None)
        for dst, route in widest.items():
            label = labels.get(dst)
            if route[1] == first or label is None or label[0] + 1 != len(route) - 1:
                continue
            path = (source,) + read_back(labels, first, dst, False)
            found.setdefault(dst, []).append((path, min(width[first], label[1])))
    further = {}
    for dst, paths in found.items():
        taken = set(zip(widest[dst], widest[dst][1:]))
        chosen = []
        for path, _ in sorted(paths, key=lambda p: -p[1]):  # stable: first hops in order
            hops = set(zip(path, path[1:]))
            if not hops & taken:
                taken |= hops
                chosen.append(path)
        if chosen:
            further[dst] = chosen
    return further


def _hops(path) -> list[Hop]:
    return list(zip(path, path[1:]))


def _tightest(path, users: dict[Hop, list[Pair]], capacities: dict[Hop, Fraction]
              ) -> list[Hop]:
    """The route's hops, one per set of other pairs on them: the tightest (a choice of
    a wider hop with the same others gives a group that never binds first)."""
    best: dict[tuple, Hop] = {}
    for hop in _hops(path):
        key = tuple(users.get(hop, ()))
        if key not in best or capacities[hop] < capacities[best[key]]:
            best[key] = hop
    return list(best.values())


def binds(cap: Fraction, members) -> bool:
    """Whether the members' capacities add up to more than `cap`: whether a group can
    bind (else the lowering drops it). Summed only until they do: a spine's link carries
    a hundred thousand routes, a PCIe hop of dgx2x90 1,424 other pairs."""
    total = Fraction(0)
    for c in members:
        total += c
        if total > cap:
            return True
    return False


def exact_splits(further: dict[Pair, list[tuple[str, ...]]], routes: dict, capable: set[str]
                 ) -> dict[Pair, list[tuple[str, ...]]]:
    """The pairs (of `further`, in rank order) whose routes cross no computing switch
    and no hop of an earlier pair of several routes; each with all its routes, the
    widest first. The other condition, no pair crossing two routes, is checked by
    drop_crossed once the pairs of one route are known."""
    claimed: set[Hop] = set()
    kept = {}
    for pair in sorted(further):
        paths = [routes[pair]] + further[pair]
        hops = {h for p in paths for h in _hops(p)}
        if hops & claimed or any(v in capable for p in paths for v in p[1:-1]) or \
                math.prod(len(p) - 1 for p in paths) > MAX_CHOICES:
            continue
        claimed |= hops
        kept[pair] = paths
    return kept


def drop_crossed(split: dict[Pair, list[tuple[str, ...]]], users: dict[Hop, list[Pair]],
                 routes: dict) -> None:
    """Leave the pairs of `split` that another pair (`users`: the pairs of one route on
    each hop) crosses on two of their routes with their widest route only: out of
    `split`, into `users` (kept in rank order)."""
    crossed = set()
    for pair, paths in split.items():
        seen: dict[Pair, int] = {}
        for i, path in enumerate(paths):
            for hop in _hops(path):
                for other in users.get(hop, ()):
                    if seen.setdefault(other, i) != i:
                        crossed.add(pair)
    for pair in crossed:
        del split[pair]
        for hop in _hops(routes[pair]):
            users[hop] = sorted(users[hop] + [pair])


def split_groups(split: dict[Pair, list[tuple[str, ...]]], users: dict[Hop, list[Pair]],
                 capacities: dict[Hop, Fraction], link_capacity: dict[Pair, Fraction],
                 deadline: Deadline = Deadline(), doing: str = ""
                 ) -> list[tuple[str, tuple[Pair, ...], Fraction, tuple[str, ...]]]:
    """(name, members, capacity, the hops whose capacities add, as "u->v") of every
    group the module docstring states for the pairs of several routes that can bind:
    one per choice of a hop on each of a pair's routes. TimeLimit past `deadline`."""
    groups = {}
    for pair, paths in in_time(split.items(), deadline, doing, 64):
        for hops in product(*(_tightest(p, users, capacities) for p in paths)):
            members = tuple(sorted({pair, *(m for h in hops for m in users.get(h, ()))}))
            cap = sum((capacities[h] for h in hops), Fraction(0))
            if not binds(cap, (link_capacity[m] for m in members)):
                continue  # never binds
            if members not in groups or cap < groups[members][0]:
                groups[members] = (cap, hops)
    named = []
    for members, (cap, hops) in groups.items():
        sources = tuple(f"{u}->{v}" for u, v in hops)
        named.append((" + ".join(sources), members, cap, sources))
    return named


def routes_summary(topo: Topology | None, *models) -> dict:
    """{"routes": "widest"}, or on a machine of several routes (--routes several) also
    how many GPU pairs take more than one ("several_route_pairs": the most in any of
    `models`, its lowerings: a plan's communicators' views)."""
    if topo is None or not topo.several_routes:
        return {"routes": "widest"}
    return {"routes": "several",
            "several_route_pairs": max((m.several_route_pairs for m in models), default=0)}


def routes_lines(summary: dict) -> list[str]:
    """On a machine of several routes, one line: what they assume (routes_summary's
    `summary`, or any dict with its keys)."""
    if summary.get("routes") != "several":
        return []
    pairs = summary["several_route_pairs"]
    if not pairs:
        return ["routes: --routes several, but no GPU pair here takes a second route (none "
                "of as few hops, or none its groups can state exactly: docs/cli.md, "
                "\"Several routes\"): the links are --routes widest's"]
    return [f"routes: {pairs} GPU pairs on two routes or more at once (--routes several), "
            "which no runtime synth exports to can pin: there each pair's chunks take one "
            "route, and these figures assume hardware that splits them (docs/cli.md, "
            "\"Several routes\")"]
