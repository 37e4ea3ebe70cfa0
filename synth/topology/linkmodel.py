"""Lower a physical Topology to the rank-to-rank link model the solvers use.

The lowering, step by step (docs/guide/02-your-cluster.md, "How a topology is lowered for
the solvers"):

1. Route. For every ordered pair of GPUs (a, b), the route is a path from a to b whose
   inner vertices are switches or NICs, never another GPU (forwarding through a GPU is
   a step of the schedule, not of the network). Among the routes with fewest hops we
   take the widest (largest bottleneck bandwidth); among those, one that leaves through
   the sending GPU's own NIC and then one that arrives through the receiving GPU's own
   NIC, where they have one (synth.topology.routes.own_nics: GPUs that share their
   nearest NICs take different ones, as NCCL spreads them); other ties go to the vertex
   listed first. A pair with a route gets one rank link. With `--routes several`, a
   pair's other fewest-hop routes too, where the groups can say so exactly
   (synth.topology.several_routes: their capacities add, and so do their groups').
2. Capacity. A rank link's capacity is its route's bottleneck in units of unit_gbps
   (chunks per round); its alpha is the largest alpha on the route (switches forward
   cut-through, so a message pays the slowest hop's latency once).
3. Groups. Each physical link that carries more than one rank link's route becomes a
   shared-capacity group: a GPU's port into a switch, a NIC shared by two GPUs, a PCIe
   uplink. Physical links that carry exactly the same rank links merge into one group
   with the smallest capacity. A group that could never bind (its capacity is at least
   the sum of its members' capacities) is dropped.

Cost: one breadth-first search per GPU, O(N * (V + E)) for N GPUs, then one pass over
the routes, O(N^2 * hops).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache

import networkx as nx

from synth.deadline import Deadline, TimeLimit, in_time
from synth.errors import BadInput
from synth.topology.physical import GPU, Topology
from synth.topology.routes import last_legs, own_nics, widest_shortest_routes
from synth.topology.several_routes import (binds, drop_crossed, exact_splits, further_routes,
                                          split_groups)


@dataclass(frozen=True)
class RankLink:
    src: int
    dst: int
    capacity: Fraction  # chunks per round
    alpha_us: float = 0.0


@dataclass(frozen=True)
class Group:
    """Links that share one physical resource of `capacity` chunks per round."""

    name: str
    links: tuple[tuple[int, int], ...]
    capacity: Fraction


@dataclass(frozen=True)
class Switch:
    """A switch that computes in the network (NVLS, SHARP): what it can do ("reduce",
    "multicast"), the rank links whose routes pass through it, and its ports: the group
    (by name) of the hop from rank r into the switch (`up`) and of the hop from the
    switch towards r (`down`), where that hop is a group. A reduction into r pays r's
    down port once, a multicast from r pays r's up port once; anything else a switch
    operation crosses is paid per link, as sends are."""

    name: str
    can: tuple[str, ...]
    links: tuple[tuple[int, int], ...]
    up: tuple[tuple[int, str], ...] = ()
    down: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class LinkModel:
    name: str
    unit_gbps: float
    ranks: int
    links: tuple[RankLink, ...]
    groups: tuple[Group, ...] = ()
    boxes: tuple[int, ...] = ()  # each rank's machine (NAMExK), empty when one box
    switches: tuple[Switch, ...] = ()  # the capable switches; sub-models leave them out
    several_route_pairs: int = field(default=0, compare=False)  # (several_routes; not filed)

    @cached_property
    def link(self) -> dict[tuple[int, int], RankLink]:
        return {(l.src, l.dst): l for l in self.links}

    def out_neighbours(self, rank: int) -> list[int]:
        return [l.dst for l in self.links if l.src == rank]


@dataclass(frozen=True)
class Lowering:
    """The link model plus what it came from: the physical topology, and routes as lists
    of physical vertices."""

    topology: Topology
    model: LinkModel
    routes: dict[tuple[int, int], tuple[str, ...]]  # each pair's widest
    group_sources: dict[str, tuple[str, ...]]  # group name -> the physical links merged
    # a machine of several routes (synth.topology.several_routes): the pairs' other
    # routes, and the groups whose physical links' capacities add (one per route)
    further: dict[tuple[int, int], tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    sums: frozenset[str] = frozenset()


# Past this many rank links (GPU pairs with a route) the lowering alone would take
# gigabytes: 1024 GPUs on one switch (about 1M links) take 0.6 GB, dgxh100x512's 4096
# GPUs on rails (2,121,728 links) 1.0 GB; 4096 on one switch would take ten.
MAX_RANK_LINKS = 2_200_000
MAX_ROUTE_VERTICES = 40_000_000  # the routes' vertices in all: about 0.3 GB
MAX_ROUTE = 66  # vertices on one route (estimated from above): real clusters need < 12


def lower(topo: Topology) -> LinkModel:
    return lower_with_routes(topo).model


def lower_with_routes(topo: Topology, deadline: Deadline | float | None = None
                      ) -> Lowering:
    """The lowering (module docstring); BadInput, by arithmetic first, when it would
    hold more than MAX_RANK_LINKS rank links; TimeLimit past `deadline`."""
    deadline = Deadline.of(deadline)
    doing = f"lowering {topo.name} ({topo.ranks} GPUs)"
    estimate, along, longest = lowering_size(topo)
    if estimate > MAX_RANK_LINKS:
        raise BadInput(f"{topo.name}: up to {estimate:,} GPU pairs with a route of their "
                       f"own, over the {MAX_RANK_LINKS:,} the lowering can hold in memory")
    if longest > MAX_ROUTE:
        raise BadInput(f"{topo.name}: GPUs meet through switches and NICs chained up to "
                       f"{longest - 2} deep (at most {MAX_ROUTE - 2}): not a GPU cluster "
                       "synth can route")
    if along > MAX_ROUTE_VERTICES:
        raise BadInput(f"{topo.name}: routes of up to {along:,} vertices in all, over the "
                       f"{MAX_ROUTE_VERTICES:,} the lowering can hold in memory (chains of "
                       "switches that long are not a GPU cluster)")
    gpus = topo.gpus
    unit = Fraction(str(topo.unit_gbps))
    # one Fraction per distinct width: made per link, fc:1049's took 13 s, unchecked
    exact = {(g, c): Fraction(str(g)) * c / unit
             for g, c in {(l.gbps, l.count) for l in in_time(topo.links, deadline, doing)}}
    capacities = {(l.src, l.dst): exact[l.gbps, l.count]
                  for l in in_time(topo.links, deadline, doing)}
    alphas = {(l.src, l.dst): l.alpha_us for l in in_time(topo.links, deadline, doing)}

    order = {v.name: i for i, v in enumerate(topo.vertices)}
    # each vertex's successors with their bandwidth, and whether it is a GPU, read once
    # from the links: a networkx graph of fc:1049's 1.1 million links took 3.7 s, unchecked
    adjacency: dict[str, list] = {v.name: [] for v in topo.vertices}
    for l in in_time(topo.links, deadline, doing):
        adjacency[l.src].append((l.dst, l.bandwidth))
    routes, split = _routes(topo, adjacency, order, deadline, doing)
    users = _users(routes, split, deadline, doing)
    drop_crossed(split, users, routes)
    links = _rank_links(routes, split, capacities, alphas, deadline, doing)
    groups, sources = _groups(users, links, capacities, deadline, doing)
    summed = split_groups(split, users, capacities, {(l.src, l.dst): l.capacity for l in links},
                          deadline, doing)
    for name, members, cap, hops in summed:
        groups.append(Group(name, members, cap))
        sources[name] = hops
    groups.sort(key=lambda g: g.name)
    box_of = {v.name: v.box for v in topo.vertices}
    boxes = tuple(box_of[g] for g in gpus) if topo.boxes > 1 else ()
    switches = _capable_switches(topo, routes, sources, deadline, doing)
    model = LinkModel(topo.name, topo.unit_gbps, len(gpus), tuple(links), tuple(groups),
                      boxes, switches, len(split))
    further = {pair: tuple(paths[1:]) for pair, paths in split.items()}
    return Lowering(topo, model, routes, sources, further, frozenset(g[0] for g in summed))


def _routes(topo: Topology, adjacency: dict, order: dict[str, int], deadline: Deadline,
            doing: str) -> tuple[dict, dict]:
    """Every GPU pair's widest route (module docstring, step 1), in rank order; and
    on a machine of several routes (synth.topology.several_routes) the pairs that have
    more, each with all its routes, the widest first."""
    gpus = topo.gpus
    rank_of = {name: r for r, name in enumerate(gpus)}
    ends = {v.name for v in topo.vertices if v.kind == GPU}
    own = own_nics(topo, adjacency, order)
    legs = last_legs(topo, adjacency, own, order)
    routes: dict[tuple[int, int], tuple[str, ...]] = {}
    further = {}
    for a, name in enumerate(gpus):
        if deadline.passed():
            raise TimeLimit(doing)
        found = widest_shortest_routes(adjacency, ends, name, order, own, legs)
        # in rank order here, so that routes is sorted with no sort of a million pairs
        for b, path in sorted((rank_of[dst], path) for dst, path in found.items()):
            routes[(a, b)] = path
        if topo.several_routes:
            more = further_routes(adjacency, ends, name, order, found)
            further.update({(a, rank_of[dst]): paths for dst, paths in more.items()})
    capable = {v.name for v in topo.vertices if v.can}
    return routes, exact_splits(further, routes, capable) if further else {}


def _users(routes: dict, split: dict, deadline: Deadline, doing: str) -> dict:
    """Per physical hop, the GPU pairs of one route over it, in rank order."""
    users: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for pair, path in in_time(routes.items(), deadline, doing):
        if pair not in split:
            for hop in zip(path, path[1:]):
                users[hop].append(pair)
    return users


def _rank_links(routes: dict, split: dict, capacities: dict, alphas: dict,
                deadline: Deadline, doing: str) -> list[RankLink]:
    """One rank link per routed pair: the sum of its routes' narrowest hops (one route
    but where `split` gives several), the largest alpha on any of them."""
    # the narrowest hop picked by float, its capacity taken exact: a million routes
    # through a spine compared as Fractions took half a minute
    width = {hop: float(c) for hop, c in in_time(capacities.items(), deadline, doing)}
    links = []
    for pair, path in in_time(routes.items(), deadline, doing):
        if pair in split:
            hops = [list(zip(p, p[1:])) for p in split[pair]]
            links.append(RankLink(pair[0], pair[1], sum(
                (capacities[min(h, key=width.get)] for h in hops), Fraction(0)),
                max(alphas[h] for route in hops for h in route)))
            continue
        hops = list(zip(path, path[1:]))
        links.append(RankLink(pair[0], pair[1], capacities[min(hops, key=width.get)],
                              max(alphas[h] for h in hops)))
    return links


def _groups(users: dict, links: list[RankLink], capacities: dict, deadline: Deadline,
            doing: str) -> tuple[list[Group], dict[str, tuple[str, ...]]]:
    """The groups of the module docstring's step 3, and each one's physical hops."""
    link_capacity = {(l.src, l.dst): l.capacity for l in links}
    merged: dict[tuple, tuple[Fraction, list[tuple[str, str]]]] = {}
    for hop, members in in_time(users.items(), deadline, doing):
        if len(members) < 2:
            continue
        key = tuple(members)
        cap = capacities[hop]
        if not binds(cap, (link_capacity[m] for m in members)):
            continue  # never binds
        if key in merged:
            best, hops = merged[key]
            merged[key] = (min(best, cap), hops + [hop])
        else:
            merged[key] = (cap, [hop])
    if deadline.passed():
        raise TimeLimit(doing)
    groups, sources = [], {}
    for members, (cap, hops) in merged.items():
        tightest = min(hops, key=lambda h: (capacities[h], h))
        name = f"{tightest[0]}->{tightest[1]}"
        groups.append(Group(name, members, cap))
        sources[name] = tuple(f"{u}->{v}" for u, v in hops)
    return groups, sources


def _capable_switches(topo: Topology, routes, sources, deadline: Deadline, doing: str
                       ) -> tuple[Switch, ...]:
    """The switches that reduce or multicast, with the links through them and their
    ports (Switch): the group whose physical hops hold the hop just before (up) or just
    after (down) the switch on a rank's routes; a rank whose routes disagree gets none."""
    capable = {v.name: v.can for v in topo.vertices if v.can}
    group_of_hop = {hop: name for name, hops in sources.items() for hop in hops}
    through = defaultdict(list)
    ports: dict[str, dict[str, dict[int, set]]] = defaultdict(
        lambda: {"up": defaultdict(set), "down": defaultdict(set)})
    for (a, b), path in in_time(routes.items(), deadline, doing):  # in rank order
        for i, v in enumerate(path[1:-1], start=1):
            if v in capable:
                through[v].append((a, b))
                ports[v]["up"][a].add(group_of_hop.get(f"{path[i - 1]}->{v}"))
                ports[v]["down"][b].add(group_of_hop.get(f"{v}->{path[i + 1]}"))

    def port(side):
        return tuple((r, next(iter(names))) for r, names in sorted(side.items())
                     if len(names) == 1 and None not in names)

    return tuple(Switch(v, capable[v], tuple(through[v]), port(ports[v]["up"]),
                        port(ports[v]["down"])) for v in sorted(through))


def rank_links_at_most(topo: Topology) -> int:
    """An upper bound on the rank links the lowering makes (lowering_size)."""
    return lowering_size(topo)[0]


def lowering_size(topo: Topology) -> tuple[int, int, int]:
    """Upper bounds on what the lowering holds, by counting alone, O(V + E): (rank
    links, vertices on all their routes, vertices on the longest route). GPUs meet
    through a connected part of the non-GPU vertices, or over a direct link; a route
    through a part is at most twice the part's eccentricity from any one of its
    vertices, plus its two GPUs."""
    gpu = {v.name for v in topo.vertices if v.kind == GPU}
    others = nx.Graph()
    others.add_nodes_from(v.name for v in topo.vertices if v.kind != GPU)
    others.add_edges_from((l.src, l.dst) for l in topo.links
                          if l.src not in gpu and l.dst not in gpu)
    parts = list(nx.connected_components(others))
    part = {v: i for i, comp in enumerate(parts) for v in comp}
    members: dict[int, set[str]] = defaultdict(set)
    direct = 0
    for l in topo.links:
        if l.src in gpu and l.dst in gpu:
            direct += 1
        elif l.src in gpu:
            members[part[l.dst]].add(l.src)
        elif l.dst in gpu:
            members[part[l.src]].add(l.dst)
    n = len(gpu)
    pairs, vertices, longest = direct, 2 * direct, 2
    for i, m in members.items():
        reach = max(nx.single_source_shortest_path_length(others, next(iter(parts[i])))
                    .values())
        pairs += len(m) * (len(m) - 1)
        vertices += len(m) * (len(m) - 1) * (2 * reach + 3)
        if len(m) > 1:
            longest = max(longest, 2 * reach + 3)
    return min(n * (n - 1), pairs), vertices, longest


@lru_cache(maxsize=16)
def hop_distances(model: LinkModel) -> dict[int, dict[int, int]]:
    """Fewest rank hops between every pair of ranks: BFS from each, O(N * links).

    Cached: a frontier search encodes many instances of one model. Do not mutate."""
    graph = rank_graph(model)  # once: built per rank, 2048 ranks took minutes
    return {r: nx.single_source_shortest_path_length(graph, r) for r in range(model.ranks)}


def diameter(model: LinkModel, deadline: Deadline = Deadline()) -> int:
    """The most rank hops between two ranks: one BFS per rank, O(N x links) time and
    O(N) memory (hop_distances would keep all N^2 distances); TimeLimit past the
    deadline."""
    doing = f"measuring the diameter of {model.name} ({model.ranks} GPUs)"
    graph = nx.DiGraph()
    graph.add_nodes_from(range(model.ranks))
    # the graph of a 1024-GPU machine's 264,000 rank links took half a second, unchecked
    graph.add_edges_from((l.src, l.dst) for l in in_time(model.links, deadline, doing))
    most = 0
    for r in range(model.ranks):
        if deadline.passed():
            raise TimeLimit(doing)
        most = max(most, max(nx.single_source_shortest_path_length(graph, r).values()))
    return most


def rank_graph(model: LinkModel) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(model.ranks))
    g.add_edges_from((l.src, l.dst, {"capacity": l.capacity}) for l in model.links)
    return g


def min_rounds(model: LinkModel, pairs) -> int:
    """Fewest rounds in which one step can carry one chunk per (src, dst) in `pairs`.

    A pair may repeat (several chunks on one link). Every link and group must carry at
    most capacity x rounds chunks. At least 1.
    """
    load: dict[tuple[int, int], int] = defaultdict(int)
    for pair in pairs:
        load[pair] += 1
    return rounds_for_load(model, load)


def rounds_for_load(model: LinkModel, load: dict[tuple[int, int], int]) -> int:
    """Fewest rounds in which one step can carry load[(src, dst)] chunks per link."""
    rounds = 1
    for pair, count in load.items():
        rounds = max(rounds, math.ceil(count / model.link[pair].capacity))
    for group in model.groups:
        count = sum(load.get(pair, 0) for pair in group.links)
        if count:
            rounds = max(rounds, math.ceil(count / group.capacity))
    return rounds


def switch_rounds(model: LinkModel, ops, sends: tuple = ()) -> int:
    """Rounds for `ops` and `sends` at once: the fewest that carry every link's and
    group's load (step_loads) within its capacity."""
    link_load, group_load = step_loads(model, ops, sends)
    capacity = {g.name: g.capacity for g in model.groups}
    need = [Fraction(load) / model.link[pair].capacity for pair, load in link_load.items()]
    need += [Fraction(load) / capacity[name] for name, load in group_load.items()]
    return max(1, math.ceil(max(need, default=0)))


_GROUPS_OF: dict[int, tuple] = {}


def groups_of_links(model: LinkModel) -> dict[tuple[int, int], list[str]]:
    """Each link's groups, by name, made once per model object (by identity, as hashing
    a million links costs more): step_loads made them again for every step, and timing
    a 1023-step schedule on switch:1024 (2 million group members) ran minutes past its
    time limit."""
    hit = _GROUPS_OF.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    group_of: dict[tuple[int, int], list[str]] = {}
    for g in model.groups:
        for pair in g.links:
            group_of.setdefault(pair, []).append(g.name)
    _GROUPS_OF.clear()  # the last model only: they can be large
    _GROUPS_OF[id(model)] = (model, group_of)
    return group_of


def step_loads(model: LinkModel, ops, sends: tuple = (),
               weight=lambda op: 1) -> tuple[Counter, Counter]:
    """The chunks `ops` and `sends` put on each link and each group at once: a send's
    count on its link and the link's groups, and so does each operation on each link it
    crosses, but at the switch's port an operation pays once (a reduction: its dst's
    down port; a multicast: its src's up port; Switch). `weight(op)` scales an
    operation's load (cost model 2 charges what the switch moves)."""
    link_load, group_load = Counter(), Counter()
    group_of = groups_of_links(model)
    ports = {w.name: (dict(w.up), dict(w.down)) for w in model.switches}
    for x in sends:
        link_load[(x.src, x.dst)] += x.count
        for name in group_of.get((x.src, x.dst), ()):
            group_load[name] += x.count
    for op in ops:
        up, down = ports[op.via]
        once = (down.get(op.dsts[0]) if op.op == "switch_reduce" else up.get(op.srcs[0]))
        load = op.count * weight(op)
        for pair in op.pairs():
            link_load[pair] += load
            for name in group_of.get(pair, ()):
                if name != once:
                    group_load[name] += load
        if once is not None and any(once in group_of.get(pair, ()) for pair in op.pairs()):
            group_load[once] += load
    return link_load, group_load


def box_places(boxes) -> tuple[list[int], list[int], bool]:
    """From each rank's box label: its box (numbered 0, 1, ... in the labels' order),
    its place in the box (0 for the box's first rank, and so on: rail peers share a
    place), and whether every box has as many ranks."""
    labels = sorted(set(boxes))
    box = [labels.index(b) for b in boxes]
    place, seen = [], defaultdict(int)
    for b in box:
        place.append(seen[b])
        seen[b] += 1
    return box, place, len(set(seen.values())) <= 1


def ranks_per_box(model: LinkModel) -> int | None:
    """G where every box is G consecutive ranks (rank r in box r // G, as `mpirun
    -npernode G` and the MSCCL++ executor place ranks on nodes); all the ranks where
    there are no boxes (one box); None when the boxes are not such runs."""
    n = model.ranks
    if not model.boxes:
        return n
    box, _, equal = box_places(model.boxes)
    g = n // (max(box) + 1)
    if not equal or any(box[r] != box[r - r % g] for r in range(n)):
        return None
    return g


def restrict(model: LinkModel, ranks, name: str = "") -> LinkModel:
    """The links and groups among `ranks`, renumbered: ranks[i] becomes rank i.

    A group keeps its capacity with only its links among `ranks` (empty groups go), so
    the sub-model is the network as these ranks see it when no one else sends.
    """
    local = {r: i for i, r in enumerate(ranks)}
    links = tuple(RankLink(local[l.src], local[l.dst], l.capacity, l.alpha_us)
                  for l in model.links if l.src in local and l.dst in local)
    groups = []
    for g in model.groups:
        inside = tuple((local[a], local[b]) for a, b in g.links if a in local and b in local)
        if len(inside) > 1 and g.capacity < sum(model.link[p].capacity for p in
                                                 ((ranks[a], ranks[b]) for a, b in inside)):
            groups.append(Group(g.name, inside, g.capacity))
    boxes = tuple(model.boxes[r] for r in ranks) if model.boxes else ()
    return LinkModel(name or f"{model.name}[{len(ranks)} ranks]", model.unit_gbps, len(ranks),
                     links, tuple(groups), boxes)
