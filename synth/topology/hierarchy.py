"""The hierarchy of a multi-node topology, found from the link model alone.

    find_hierarchy(lowering) -> (Hierarchy(boxes, rails, gpus_per_nic), "")
                                or (None, why there is none)

Boxes: the groups of GPUs joined by fast links (`find_boxes`: drop the slowest class of
links, the components are the boxes). Identical boxes: every box must be isomorphic to
box 0 (links and capacities; networkx's VF2), and the isomorphism gives each GPU its
local index, so that "local rank i" means the same position in every box. Among the
isomorphisms we take one that maps each GPU onto a GPU it can reach across the network
(node_match, both ways), which on a rail-optimised network means the same rail; the peer
group of local index i (local rank i of every box) must then be fully linked, and it is
the group the across-box level of the decomposition works in. Boxes alike inside whose
NICs differ (dgxh100x4 without box1.nic2) align too: a GPU that reaches no GPU of the
other box (its partner there has no NIC) may map onto one without a link out, and only
the places with a link out in every box are gateways. Rails and NIC sharing are
read off the routes: a GPU's NIC is the first NIC on its routes out of its box, its rail
the vertex after that NIC (the network switch it hangs on).

Gateways: where only some GPUs of a box reach the network (ndv2xK: one NIC behind the
PCIe switch of GPUs 0 and 1), those are the gateways, and every other local rank crosses
through the nearest one (its proxy, the load spread evenly among gateways at the same
distance), along a shortest path inside the box each way. Gateways map onto gateways in
every box, and only their peer groups need be fully linked.

Cost: find_boxes O(classes x links); VF2 per box, fast on the built-ins (a switch box
is complete, so the first mapping tried that respects the network is taken).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from fractions import Fraction

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

from synth.deadline import Deadline
from synth.topology.fabric import fabric_parts
from synth.topology.linkmodel import LinkModel, Lowering
from synth.topology.physical import NIC


@dataclass(frozen=True)
class Hierarchy:
    """boxes[b][i] is local rank i of box b; the order is the same in every box."""

    boxes: tuple[tuple[int, ...], ...]
    rails: tuple[tuple[str, tuple[int, ...]], ...] = ()  # network vertex -> local indices
    gpus_per_nic: int = 1
    # local rank i crosses the network through local rank proxy[i] (itself where it has
    # a link out of its box), its pieces going there along to_proxy[i] and arriving
    # from there along from_proxy[i]: local ranks, both ends included
    proxy: tuple[int, ...] = ()
    to_proxy: tuple[tuple[int, ...], ...] = ()
    from_proxy: tuple[tuple[int, ...], ...] = ()
    # the groups on links between network switches (a leaf's or a pod's uplink: every
    # peer group crosses them at once), and the boxes under each part of the most
    # oversubscribed tier (synth.topology.fabric), in box order
    uplinks: tuple[str, ...] = ()
    pods: tuple[tuple[int, ...], ...] = ()

    @property
    def peers(self) -> tuple[tuple[int, ...], ...]:
        """peers[i]: local rank i of every box, in box order (the across-box groups)."""
        return tuple(zip(*self.boxes))

    @property
    def gateways(self) -> tuple[int, ...]:
        """The local ranks with links out of their box (all of them, without proxies)."""
        return tuple(sorted(set(self.proxy))) if self.proxy else tuple(
            range(len(self.boxes[0])))

    def reversed(self) -> "Hierarchy":
        """The same hierarchy on the reversed links: a path to the proxy becomes the
        reverse of the path from it, and the other way round."""
        return replace(self, to_proxy=tuple(p[::-1] for p in self.from_proxy),
                       from_proxy=tuple(p[::-1] for p in self.to_proxy))

    def describe(self) -> str:
        k, g = len(self.boxes), len(self.boxes[0])
        text = f"{k} identical boxes of {g} GPUs, {g} peer groups of {k} across them"
        if len(self.gateways) < g:
            text += (f", {len(self.gateways)} gateway{'s' if len(self.gateways) > 1 else ''}"
                     f" (local rank{'s' if len(self.gateways) > 1 else ''} "
                     f"{', '.join(map(str, self.gateways))}) for the others")
        if self.rails:
            text += f", {len(self.rails)} rail{'s' if len(self.rails) > 1 else ''}"
        if self.gpus_per_nic > 1:
            text += f", {self.gpus_per_nic} GPUs per NIC"
        return text


def find_hierarchy(lowering: Lowering, boxes: list | tuple | None = None,
                   deadline: Deadline = Deadline()) -> tuple[Hierarchy | None, str]:
    """The boxes, their aligned local order, rails and NIC sharing; or (None, why).

    boxes: the boxes in local order (a hint: synth.construct.hints) instead of finding
    them; checked: position i of every box must be linked alike inside the box and
    reach position i of the others. Past the deadline, (None, "out of time ...").
    """
    model = lowering.model
    if boxes is not None:
        return _given(lowering, boxes)
    boxes, why = find_boxes(model, deadline)
    if not boxes:
        return None, why
    box_of = {r: b for b, box in enumerate(boxes) for r in box}
    outward = {l.src for l in model.links if box_of[l.src] != box_of[l.dst]}
    inside = defaultdict(list)  # each box's own links, found in one pass
    for l in model.links:
        if box_of[l.src] == box_of[l.dst]:
            inside[box_of[l.src]].append(l)
    reach = _reach(model, box_of)
    aligned = [tuple(boxes[0])]
    first = _box_graph(model, boxes[0], outward, inside[0])
    for b, box in enumerate(boxes[1:], start=1):
        if deadline.passed():
            return None, f"out of time matching box {b} of {len(boxes)} with box 0"
        mapping = _isomorphism(model, first, _box_graph(model, box, outward, inside[b]),
                               box_of, reach)
        if mapping is None:
            return None, (f"box {b} (ranks {box[0]}..{box[-1]}) is not a copy of box 0 that "
                          "reaches it across the network rank for rank")
        aligned.append(tuple(mapping[r] for r in boxes[0]))
    return _checked(lowering, Hierarchy(tuple(aligned)))


def _given(lowering: Lowering, boxes) -> tuple[Hierarchy | None, str]:
    model = lowering.model
    first = _box_graph(model, boxes[0])
    if len(boxes[0]) < 2 or not nx.is_strongly_connected(first):
        return None, ("box 0 of the hints is not one box: its GPUs do not all reach each "
                      "other inside it")
    for b, box in enumerate(boxes[1:], start=1):
        position = dict(zip(boxes[0], box))
        same = {(position[a], position[c], cap) for a, c, cap in first.edges(data="capacity")}
        if same != set(_box_graph(model, box).edges(data="capacity")):
            return None, (f"box {b} of the hints is not linked like box 0, position by "
                          "position")
    return _checked(lowering, Hierarchy(tuple(tuple(box) for box in boxes)))


def _checked(lowering: Lowering, hierarchy: Hierarchy) -> tuple[Hierarchy | None, str]:
    """The hierarchy with proxies, rails and NIC sharing, once every box has a gateway
    and every gateway's peer group is fully linked."""
    model = lowering.model
    hierarchy, why = _with_proxies(model, hierarchy)
    if hierarchy is None:
        return None, why
    for group in (hierarchy.peers[i] for i in hierarchy.gateways):
        missing = next(((a, c) for a in group for c in group
                        if a != c and (a, c) not in model.link), None)
        if missing:
            return None, (f"local ranks {list(group)} of the boxes are not all linked "
                          f"(no link {missing[0]} -> {missing[1]})")
    rails, per_nic = _rails(lowering, hierarchy)
    uplinks, pods = _fabric(lowering, hierarchy)
    return replace(hierarchy, rails=rails, gpus_per_nic=per_nic, uplinks=uplinks,
                   pods=pods), ""


def _fabric(lowering: Lowering, hierarchy: Hierarchy):
    """(the groups on links between network switches, the boxes under each part of
    the tier whose uplinks carry the least per NIC below them, where that is less than
    the NICs carry: an oversubscribed tier)."""
    topo = lowering.topology
    between = {v.name for v in topo.vertices if v.box is None}
    uplinks = tuple(sorted(name for name, hops in lowering.group_sources.items()
                           if name not in lowering.sums
                           and all(set(h.split("->")) <= between for h in hops)))
    box_of = {r: b for b, box in enumerate(hierarchy.boxes) for r in box}
    rank_of = {name: r for r, name in enumerate(topo.gpus)}
    graph = topo.graph()
    best, pods = Fraction(1), ()
    nics = {v.name for v in topo.vertices if v.kind == NIC}
    down = sum(l.bandwidth for l in topo.links if l.src in between and l.dst in nics)
    for parts in fabric_parts(topo):
        up = sum(sum(graph.edges[u, v]["link"].bandwidth for u, v in
                     graph.out_edges(part) if v not in part) for part in parts)
        ratio = Fraction(up) / Fraction(down)
        if ratio < best:
            best = ratio
            pods = tuple(tuple(sorted({box_of[rank_of[g]] for g in part if g in rank_of}))
                         for part in parts)
    return uplinks, tuple(sorted(pods))


def _with_proxies(model: LinkModel, hierarchy: Hierarchy) -> tuple[Hierarchy | None, str]:
    """Each local rank's proxy and its paths there and back (module docstring), read
    off box 0; or (None, why) where a box has no gateway or a gateway is missing in some
    box. Cost: a breadth-first search per local rank of one box."""
    box_of = {r: b for b, box in enumerate(hierarchy.boxes) for r in box}
    outward = {l.src for l in model.links if box_of[l.src] != box_of[l.dst]}
    # the places whose GPU has a link out in every box (a box without one NIC: the
    # others' GPU at its place crosses through a gateway too, as it does there)
    gateways = [i for i in range(len(hierarchy.boxes[0]))
                if all(box[i] in outward for box in hierarchy.boxes)]
    if not gateways:
        return None, "no place in the boxes has a GPU with a link out of its box in each"
    if len(gateways) == len(hierarchy.boxes[0]):
        return hierarchy, ""  # every GPU crosses itself: no proxies
    local = nx.relabel_nodes(_box_graph(model, hierarchy.boxes[0]),
                             {r: i for i, r in enumerate(hierarchy.boxes[0])})
    there = {i: nx.shortest_path(local, target=i) for i in gateways}  # every rank -> i
    served = Counter()
    proxy, to_proxy, from_proxy = [], [], []
    for i in range(len(hierarchy.boxes[0])):
        p = i if i in gateways else min(
            (q for q in gateways if i in there[q]),
            key=lambda q: (len(there[q][i]), served[q], q), default=None)
        if p is None:
            return None, f"local rank {i} reaches no GPU with a link out of its box"
        served[p] += 1
        proxy.append(p)
        to_proxy.append(tuple(there[p][i]))
        from_proxy.append(tuple(nx.shortest_path(local, p, i)))
    return replace(hierarchy, proxy=tuple(proxy), to_proxy=tuple(to_proxy),
                   from_proxy=tuple(from_proxy)), ""


def find_boxes(model: LinkModel,
               deadline: Deadline = Deadline()) -> tuple[list[list[int]], str]:
    """(boxes, "") or ([], why not). Boxes are lists of ranks in rank order.

    The rule: drop the slowest class of links (all links of the smallest capacity); the
    boxes are the connected components of what is left, if there are at least two, all
    of one size >= 2; otherwise drop the next class too, and so on. So dgx2x2 (NIC
    links 1/2, NVSwitch 6) and ndv2x2 (NIC 1/2, NVLink 1 and 2) split into their boxes,
    while dgx1's doubled NVLinks form one ring: one box. (A median rule fails on dgx2x2,
    where the slow NIC links are the majority.) Cost: O(classes x (ranks + links)).
    Past the deadline, ([], "out of time ...").
    """
    # the links grouped by capacity as (numerator, denominator): hashing and comparing
    # the Fractions of a 1024-GPU machine's 264,000 links took a second, unchecked
    by_cap: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for l in model.links:
        by_cap[l.capacity.numerator, l.capacity.denominator].append((l.src, l.dst))
    caps = sorted(Fraction(*key) for key in by_cap)
    if len(caps) < 2:
        return [], "every link has the same capacity, so there are no boxes"
    why = ""
    for threshold in caps[1:]:
        if deadline.passed():
            return [], "out of time finding the boxes"
        g = nx.Graph()
        g.add_nodes_from(range(model.ranks))
        g.add_edges_from(pair for key, pairs in by_cap.items()
                         if Fraction(*key) >= threshold for pair in pairs)
        boxes = sorted(sorted(c) for c in nx.connected_components(g))
        sizes = sorted({len(b) for b in boxes})
        if len(boxes) >= 2 and len(sizes) == 1 and sizes[0] >= 2:
            return boxes, ""
        if len(boxes) >= 2 and not why and sizes[-1] >= 2:
            why = (f"links of capacity >= {_fmt(threshold)} make boxes of unequal sizes "
                   f"{sorted(len(b) for b in boxes)}")
    return [], why or ("no class of slow links separates the ranks into boxes "
                       f"(capacities {', '.join(_fmt(c) for c in caps)})")


def _box_graph(model: LinkModel, box, outward=frozenset(), links=None) -> nx.DiGraph:
    """The box's ranks and the links among them (`links`: a superset of those, where
    the caller has them, instead of every link of the model)."""
    inside = set(box)
    g = nx.DiGraph()
    g.add_nodes_from((r, {"rank": r, "gateway": r in outward}) for r in box)
    g.add_edges_from((l.src, l.dst, {"capacity": l.capacity})
                     for l in (model.links if links is None else links)
                     if l.src in inside and l.dst in inside)
    return g


def _reach(model: LinkModel, box_of: dict) -> dict[int, set[int]]:
    """rank -> the other boxes it is linked with both ways."""
    links, reach = model.link, defaultdict(set)
    for a, c in links:
        if box_of[a] != box_of[c] and (c, a) in links:
            reach[a].add(box_of[c])
    return reach


def _isomorphism(model: LinkModel, first: nx.DiGraph, other: nx.DiGraph,
                 box_of: dict, reach: dict) -> dict | None:
    """An isomorphism first -> other that keeps capacities and maps each gateway onto
    one linked with it both ways (its partner across the network), each other rank onto
    one that is no gateway either; or None. A gateway that reaches no rank of the other
    box (its NIC's partner there is gone) may map onto a rank that is no gateway, and
    a gateway of the other box that reaches no rank of the first onto one of the first
    that is no gateway: the boxes are alike inside and differ only where a NIC is
    missing (the gateways of every box, _with_proxies, are then fewer)."""
    links = model.link

    def partners(a, b):
        x, y = a["rank"], b["rank"]
        if a["gateway"] and b["gateway"]:
            return (x, y) in links and (y, x) in links
        if a["gateway"]:
            return box_of[y] not in reach[x]
        if b["gateway"]:
            return box_of[x] not in reach[y]
        return True

    if not _can_match(first, other, partners):
        return None
    matcher = DiGraphMatcher(
        first, other, node_match=partners,
        edge_match=lambda a, b: a["capacity"] == b["capacity"])
    return next(matcher.isomorphisms_iter(), None)


def _can_match(first: nx.DiGraph, other: nx.DiGraph, partners) -> bool:
    """Whether each rank of `first` can go to its own rank of `other` that `partners`
    allows and that has the same capacities out and in: a perfect matching, which any
    isomorphism is one of. Without it, the search for one that does not exist ran
    past every time limit (dgx2x2 without box 0's nic2: 14 gateways against 16, on a
    box where every rank looks like every other). O(n^2) pairs, Hopcroft-Karp."""
    def signature(g, r):
        return (sorted(c for _, _, c in g.out_edges(r, data="capacity")),
                sorted(c for _, _, c in g.in_edges(r, data="capacity")))

    theirs = {b: signature(other, b) for b in other}
    pairs = nx.Graph()
    pairs.add_nodes_from((("a", a) for a in first), bipartite=0)
    pairs.add_nodes_from((("b", b) for b in other), bipartite=1)
    for a in first:
        mine = signature(first, a)
        pairs.add_edges_from((("a", a), ("b", b)) for b in other
                             if theirs[b] == mine and partners(first.nodes[a], other.nodes[b]))
    matching = nx.bipartite.hopcroft_karp_matching(pairs, [("a", a) for a in first])
    return len(matching) == 2 * len(first) == 2 * len(other)


def _rails(lowering: Lowering, hierarchy: Hierarchy):
    """(rails, GPUs per NIC): the vertex after each GPU's NIC on its way out of the box,
    with the local indices that hang on it; the most GPUs that share one NIC."""
    kinds = {v.name: v.kind for v in lowering.topology.vertices}
    box_of = {r: b for b, box in enumerate(hierarchy.boxes) for r in box}
    rail_of, nic_of = {}, {}
    for (a, c), route in lowering.routes.items():
        if a in nic_of or box_of[a] == box_of[c]:
            continue
        at = next((i for i, v in enumerate(route) if kinds.get(v) == NIC), None)
        if at is not None and at + 1 < len(route):
            nic_of[a], rail_of[a] = route[at], route[at + 1]
    rails: dict[str, list[int]] = {}
    for i, r in enumerate(hierarchy.boxes[0]):
        if r in rail_of:
            rails.setdefault(rail_of[r], []).append(i)
    per_nic = max(Counter(nic_of.values()).values(), default=1)
    return tuple((name, tuple(ix)) for name, ix in sorted(rails.items())), per_nic


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
