"""Routes between GPUs through a physical topology: step 1 of the lowering
(synth.topology.linkmodel), and the NICs each GPU sends and receives through."""

from __future__ import annotations

from collections import defaultdict

from synth.topology.physical import GPU, NIC, Topology


def own_nics(topo: Topology, adjacency: dict) -> dict[str, str]:
    """Each GPU's own NIC, where it has NICs in its box: of its nearest NICs (fewest hops
    through its box's switches), the k-th for the k-th GPU (in the topology's order) of
    those that share the same nearest NICs, modulo their number. This is how NCCL
    spreads GPUs over the NICs they share (src/graph/search.cc, ncclTopoGetLocalNet): on
    Azure NDv4 two GPUs share a PCIe switch with two NICs, and routed to the first NIC
    listed, both would leave through it and leave the other idle.
    Cost: a breadth-first search per GPU, through its box only, to its nearest NICs."""
    kind = {v.name: v.kind for v in topo.vertices}
    if NIC not in kind.values():
        return {}
    box = {v.name: v.box for v in topo.vertices}
    sharing: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for gpu in topo.gpus:
        seen, layer, nearest = {gpu}, [gpu], []
        while layer and not nearest:
            reached = [v for u in layer for v, _ in adjacency[u]
                       if v not in seen and kind[v] != GPU and box[v] == box[gpu]]
            seen.update(reached)
            nearest = sorted({v for v in reached if kind[v] == NIC})
            layer = list(dict.fromkeys(reached))
        if nearest:
            sharing[tuple(nearest)].append(gpu)
    return {gpu: nics[k % len(nics)] for nics, members in sharing.items()
            for k, gpu in enumerate(members)}


def widest_shortest_routes(adjacency: dict, gpus: set[str], source: str,
                            order: dict[str, int], own: dict[str, str]
                            ) -> dict[str, tuple[str, ...]]:
    """Routes from GPU `source` to every GPU reachable through non-GPU vertices.

    Breadth-first by layers: every fewest-hop path to v ends with a fewest-hop path to a
    vertex of the layer before, so keeping the best such paths per vertex is exact.
    "Best" is the widest, then one through the source's own NIC (`own`, own_nics); every
    predecessor that ties is kept, and a GPU's route is read back from it preferring the
    GPU's own NIC, then the vertex listed first.
    adjacency: each vertex's successors and the bandwidth of the link to each; gpus:
    the vertices that end a route; order: each vertex's place in the graph, made once
    by the caller for all sources (made per source, it was N^2 work: seconds at 4096
    GPUs).
    """
    # each vertex keeps [width, through the source's NIC, the vertices before it that
    # reach it so] (a path per vertex would be quadratic on long chains of switches)
    mine = own.get(source)
    best: dict[str, list] = {source: [float("inf"), False]}
    layer = [source]
    ends = []
    while layer:
        candidates: dict[str, list] = {}
        for u in sorted(layer, key=order.get):  # ties keep the vertex listed first first
            width, via = best[u][0], best[u][1]
            for v, bandwidth in adjacency[u]:
                if v in best:
                    continue
                w = bandwidth if bandwidth < width else width
                through = via or v == mine
                seen = candidates.get(v)
                if seen is None or w > seen[0] or (w == seen[0] and through > seen[1]):
                    candidates[v] = [w, through, u]
                elif w == seen[0] and through == seen[1]:
                    seen.append(u)
        best.update(candidates)
        layer = []
        for v in candidates:
            if v in gpus:
                ends.append(v)  # a GPU ends a route; it never relays
            else:
                layer.append(v)
    routes = {}
    for v in ends:
        theirs = own.get(v)
        path, at = [], v
        while at != source:
            path.append(at)
            before = best[at]
            at = theirs if len(before) > 3 and theirs in before[2:] else before[2]
        path.append(source)
        routes[v] = tuple(reversed(path))
    return routes
