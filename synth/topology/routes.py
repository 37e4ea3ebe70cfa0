"""Routes between GPUs through a physical topology: step 1 of the lowering
(synth.topology.linkmodel), and the NICs each GPU sends and receives through.

Among the fewest-hop routes between two GPUs the widest is taken; among those, one that
leaves through the sender's own NIC and arrives through the receiver's own NIC where
there is one (own_nics); other ties go to the vertex listed first.
"""

from __future__ import annotations

import math

from synth.topology.physical import GPU, NIC, Topology

NONE = -1.0  # the width of no path


def own_nics(topo: Topology, adjacency: dict, order: dict[str, int]) -> dict[str, str]:
    """Each GPU's own NIC, where it has NICs in its box: of its nearest NICs (fewest hops
    through its box's switches), the one fewest GPUs before it took (ties to the NIC
    listed first), GPUs taken in the topology's order. GPUs that share their nearest
    NICs so take different ones, as NCCL spreads them (src/graph/topo.cc,
    ncclTopoGetLocalNet; NCCL's own order among them may differ): on Azure NDv4 two GPUs
    share a PCIe switch with two NICs, and routed to the first NIC listed, both would
    leave through it and leave the other idle. Empty where no GPU has two nearest NICs to
    choose from: its fewest hops already take each GPU's one, and routes are made as
    before (a fifth faster at 4096 GPUs).
    Cost: a breadth-first search per GPU, through its box only, to its nearest NICs."""
    kind = {v.name: v.kind for v in topo.vertices}
    if NIC not in kind.values():
        return {}
    box = {v.name: v.box for v in topo.vertices}
    taken = {v: 0 for v, k in kind.items() if k == NIC}
    own, choice = {}, False
    for gpu in topo.gpus:
        nearest = _nearest_nics(adjacency, kind, box, gpu)
        if nearest:
            nic = min(nearest, key=lambda v: (taken[v], order[v]))
            taken[nic] += 1
            own[gpu] = nic
            choice = choice or len(nearest) > 1
    return own if choice else {}


def _nearest_nics(adjacency: dict, kind: dict, box: dict, gpu: str) -> list[str]:
    seen, layer = {gpu}, [gpu]
    while layer:
        reached = [v for u in layer for v, _ in adjacency[u]
                   if v not in seen and kind[v] != GPU and box[v] == box[gpu]]
        seen.update(reached)
        nearest = [v for v in dict.fromkeys(reached) if kind[v] == NIC]
        if nearest:
            return nearest
        layer = list(dict.fromkeys(reached))
    return []


def last_legs(topo: Topology, adjacency: dict, own: dict[str, str], order: dict[str, int]
              ) -> dict[str, tuple[tuple[str, ...], float]]:
    """Per GPU with an own NIC, the widest of the fewest-hop paths from that NIC to it
    (through switches only: no GPU or other NIC), and its width: the end of a route
    that arrives through the GPU's own NIC. Cost: a search per GPU from its NIC, stopped
    at the GPU (a few hops: its nearest NICs)."""
    ends = {v.name for v in topo.vertices if v.kind in (GPU, NIC)}
    legs = {}
    for gpu, nic in own.items():
        best = route_labels(adjacency, ends, nic, order, None, until=gpu)
        if gpu in best:
            legs[gpu] = (read_back(best, nic, gpu, False), best[gpu][1])
    return legs


def widest_shortest_routes(adjacency: dict, gpus: set[str], source: str,
                           order: dict[str, int], own: dict[str, str],
                           legs: dict[str, tuple[tuple[str, ...], float]]
                           ) -> dict[str, tuple[str, ...]]:
    """Routes from GPU `source` to every GPU reachable through non-GPU vertices (the
    module docstring's choice).

    Breadth-first by layers: every fewest-hop path to v ends with a fewest-hop path to a
    vertex of the layer before, so keeping per vertex the widest such path, and the
    widest through the source's own NIC (a path through it stays through it), is exact.
    A route through the receiver's own NIC is the widest path to that NIC (through the
    source's NIC or not) and its last leg (`legs`, last_legs), where that leg is a
    fewest-hop way on. adjacency: each vertex's successors and the bandwidth of the link
    to each; gpus: the vertices that end a route; order: each vertex's place in the
    graph, made once by the caller for all sources (made per source, it was N^2 work:
    seconds at 4096 GPUs).
    """
    best = route_labels(adjacency, gpus, source, order, own.get(source))
    routes = {}
    for v, label in best.items():
        if v not in gpus or v == source:
            continue
        end, through, tail = v, label[3] == label[1], ()
        nic = own.get(v)
        if nic in best and v in legs and best[nic][0] + len(legs[v][0]) - 1 == label[0]:
            leg, width = legs[v]
            # through v's own NIC wins unless it loses the source's NIC
            for via, w in ((True, best[nic][3]), (False, best[nic][1])):
                if min(w, width) == label[1] and via >= through:
                    end, through, tail = nic, via, leg[1:]
                    break
        routes[v] = read_back(best, source, end, through) + tail
    return routes


def route_labels(adjacency: dict, ends: set[str], source: str, order: dict[str, int],
            mine: str | None, until: str | None = None) -> dict[str, list]:
    """Per vertex reached from `source` (through no vertex of `ends`, and no further
    than the layer that reaches `until`): [hops, widest width, its vertex before, widest
    width through `mine` (NONE: no such path), its (vertex before, through mine there)].
    Ties keep the vertex listed first (each layer is walked in order, and only a wider
    path replaces)."""
    best: dict[str, list] = {source: [0, math.inf, None, NONE, None]}
    layer, hops = [source], 0
    while layer and until not in best:
        hops += 1
        reached: dict[str, list] = {}
        for u in sorted(layer, key=order.get):
            _, width, _, through, _ = best[u]
            carries = through > NONE
            for v, bandwidth in adjacency[u]:
                if v in best:
                    continue
                w = bandwidth if bandwidth < width else width
                label = reached.get(v)
                if label is None:
                    label = reached[v] = [hops, w, u, NONE, None]
                elif w > label[1]:
                    label[1], label[2] = w, u
                if v == mine:  # every path here is through the source's NIC
                    if w > label[3]:
                        label[3], label[4] = w, (u, False)
                elif carries:
                    t = bandwidth if bandwidth < through else through
                    if t > label[3]:
                        label[3], label[4] = t, (u, True)
        best.update(reached)
        layer = [v for v in reached if v not in ends]  # a GPU ends a route; never relays
    return best


def read_back(best: dict, source: str, end: str, through: bool) -> tuple[str, ...]:
    """The path to `end` kept in best (through the source's NIC or not), source first."""
    path, at = [], end
    while at != source:
        path.append(at)
        label = best[at]
        if through:
            at, through = label[4]
        else:
            at = label[2]
    path.append(source)
    return tuple(reversed(path))
