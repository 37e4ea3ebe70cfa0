"""Alltoall by forwarding: relayed at the rail peer across boxes, else routed.

On a multi-node topology a GPU often reaches only its rail peers in other boxes (the
GPU at the same place: dgxh100xK, dgxa100xK), so the direct alltoall does not apply,
and where it does, every GPU opens a connection to every other. The relayed alltoall
(NCCL's PXN): the piece rank (b, i) has for rank (b', j) in another box first goes,
inside box b, to (b, j), the rank of box b on j's rail; then over the network to
(b', j). Pieces for the own box go straight there in the first step; a rank already on
the destination's rail sends over the network in the second. Every GPU then talks to
the other boxes only through its own NIC or rail, and each rail carries, per pair of
boxes, exactly the pieces between them.

One batch (one piece per ordered pair) is the two steps; P batches are pipelined
(batch b's pieces are the (b+1)-th of every pair, starting at step b), so the network
step of one batch overlaps the box step of the next: R / C = (r1 + (P - 1) r12 + r2) /
P, with r1 and r2 the two steps' rounds and r12 those of both at once (their larger
where they use different links). On rail fabrics with one GPU per NIC (dgxh100xK,
dgxa100xK) the network step alone is at the max-concurrent-flow bound (every NIC sends
and receives (K - 1) x GPUs-per-box pieces a batch, the least a box's traffic to the
others can take), so deep pipelines approach the bound; where GPUs share a NIC on rails
it carries their pieces together and may not.

A topology file's boxes are those the decomposition finds (synth.topology.hierarchy),
ranks at the same place in their boxes being rail peers.

Where no relay applies and not every pair is linked (ndv2xK, whose boxes are NVLink
cube-meshes with one NIC; dgx1; tori), every piece is routed along a shortest path, one
hop a step, each hop onto the link least loaded among those that keep the path
shortest, then rerouted against the others' load a few times (balanced_routes). On
ndv2xK the NIC is the bottleneck and this reaches the bound in the steady state;
shortest paths balanced greedily are not the best multicommodity flow, so tori stay
above it.

Cost: up to 2 N (N - 1) sends a batch (a piece between boxes off its source's rail
takes two): about half a million at 512 GPUs; each pipeline is built and verified
whole, which takes about 170 bytes a chunk (N^2 chunks a batch): so the depth stops at
MAX_CHUNKS chunks.
"""

from __future__ import annotations

from collections import defaultdict

from synth.construct.baselines.graphs import all_linked
from synth.construct.tree_schedules import DEPTHS, add_pipelines, levels, pipelined
from synth.deadline import Deadline
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send
from synth.search.pareto import Limits, Search
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel, box_places, hop_distances

MAX_CHUNKS = 1 << 23  # N^2 x batches: past it, verifying takes gigabytes (~170 B a chunk)
ROUTED_RANKS = 256  # routing every piece's path in Python: about 10 s at 256 ranks
REROUTE_PASSES = 4  # rip-up and reroute passes over every pair


RELAYED, ROUTED = "relayed at rail peers", "routed along shortest paths"

# A hop of a piece: (step of the batch, source rank, destination rank, from, to)
Hop = tuple[int, int, int, int, int]


def relay_hops(model: LinkModel) -> list[Hop] | str:
    """The relayed alltoall's hops (module docstring), or why it does not apply (one
    box, boxes of different sizes, or a link it needs is missing)."""
    labels = model.boxes
    if not labels:  # a file's cluster: the boxes the decomposition would find
        found, _ = find_boxes(model)
        owner = {r: b for b, ranks in enumerate(found) for r in ranks}
        labels = [owner[r] for r in range(model.ranks)] if found else []
    if len(set(labels)) < 2:
        return "one box: nothing to relay"
    box, place, alike_sizes = box_places(labels)
    if not alike_sizes:
        return "boxes of different sizes"
    at = {(b, p): r for r, (b, p) in enumerate(zip(box, place))}
    hops: list[Hop] = []
    for s in range(model.ranks):
        for d in range(model.ranks):
            if s == d:
                continue
            if box[s] == box[d]:
                hops.append((1, s, d, s, d))
                continue
            relay = at[(box[s], place[d])]  # in box[s], on d's rail
            if relay != s:
                hops.append((1, s, d, s, relay))
            hops.append((2, s, d, relay, d))
    missing = next(((u, v) for *_, u, v in hops if (u, v) not in model.link), None)
    return f"no link {missing[0]}->{missing[1]}" if missing else hops


def relayed_alltoall(model: LinkModel, batches: int) -> Schedule | str:
    """The two-step relayed alltoall in `batches` pipelined batches, or why not."""
    hops = relay_hops(model)
    return hops if isinstance(hops, str) else forwarded(model, hops, batches, RELAYED)


def forwarded(model: LinkModel, hops: list[Hop], batches: int, method: str) -> Schedule:
    """The alltoall whose pieces take `hops`, batch 0 of `batches` pipelined ones: piece
    0 of each pair (chunk (s N + d) C, C = batches), batch b taking piece b."""
    n = model.ranks
    sends = [(step, Send((s * n + d) * batches, u, v, "copy")) for step, s, d, u, v in hops]
    info = {"method": method + (f", {batches} batches" if batches > 1 else "")}
    return pipelined(model, make_collective("alltoall", n, batches), levels(sends), 1,
                     batches, info)


def balanced_routes(model: LinkModel) -> dict[tuple[int, int], list[int]] | str:
    """A shortest path of rank links for every ordered pair, as ranks: each hop onto the
    link least loaded (pieces over capacity) among those that keep the path shortest,
    pairs taken in order; then REROUTE_PASSES times every pair's path taken out and
    chosen again against all the others' (rip-up and reroute), keeping the routing
    whose busiest link is least busy (torus:8x8: 1.39 x the flow bound's load in one
    pass, 1.05 x after four). Or why not: some rank cannot reach another."""
    n = model.ranks
    dist = hop_distances(model)
    if any(len(dist[s]) < n for s in range(n)):
        return "some rank cannot reach another"
    out: dict[int, list[int]] = defaultdict(list)
    for l in model.links:
        out[l.src].append(l.dst)
    width = {pair: float(l.capacity) for pair, l in model.link.items()}
    load: dict[tuple[int, int], float] = defaultdict(float)

    def route(s: int, d: int) -> list[int]:
        path = [s]
        while path[-1] != d:
            u = path[-1]
            path.append(min((v for v in out[u] if dist[v][d] == dist[u][d] - 1),
                            key=lambda v: ((load[(u, v)] + 1) / width[(u, v)], v)))
        for u, v in zip(path, path[1:]):
            load[(u, v)] += 1
        return path

    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    routes = {pair: route(*pair) for pair in pairs}
    best = (max(load[e] / width[e] for e in load), dict(routes))
    for _ in range(REROUTE_PASSES):
        for pair in pairs:
            path = routes[pair]
            for u, v in zip(path, path[1:]):
                load[(u, v)] -= 1
            routes[pair] = route(*pair)
        busiest = max(load[e] / width[e] for e in load)
        if busiest < best[0]:
            best = (busiest, dict(routes))
    return best[1]


def routed_hops(model: LinkModel) -> list[Hop] | str:
    """Every piece along its balanced route (balanced_routes), one hop a step: or why
    not."""
    routes = balanced_routes(model)
    if isinstance(routes, str):
        return routes
    return [(step, s, d, u, v) for (s, d), path in routes.items()
            for step, (u, v) in enumerate(zip(path, path[1:]), start=1)]


def forwarded_search(model: LinkModel, limits: Limits,
                     deadline: Deadline | float | None = None) -> Search:
    """Alltoall by forwarding, at every pipeline depth (tree_schedules.DEPTHS) within the
    step limits and MAX_CHUNKS chunks (at 512 GPUs, 32 batches), each verified: relayed
    at rail peers where the boxes allow, else routed along shortest paths where not
    every pair is linked (where every pair is, the direct alltoall does it all) up to
    ROUTED_RANKS ranks. `stopped` says which, or why neither applies."""
    search = Search()
    hops, method, what = relay_hops(model), RELAYED, f"{RELAYED}, 2 steps a batch"
    if isinstance(hops, str):
        why = hops
        if all_linked(model, range(model.ranks)):
            search.stopped = "every pair is linked: the direct alltoall forwards nothing"
            return search
        if model.ranks > ROUTED_RANKS:
            search.stopped = f"not relayed: {why}; not routed past {ROUTED_RANKS} ranks"
            return search
        hops, method, what = routed_hops(model), ROUTED, f"{ROUTED} (not relayed: {why})"
        if isinstance(hops, str):
            search.stopped = f"not relayed: {why}; not routed: {hops}"
            return search
    deadline = Deadline.of(deadline)
    if deadline.passed():
        search.stopped, search.complete = "out of time", False
        return search
    depths = [d for d in DEPTHS if model.ranks ** 2 * d <= MAX_CHUNKS] or [1]
    add_pipelines(search, lambda batches: forwarded(model, hops, batches, method), limits,
                  deadline, depths)
    search.stopped = search.stopped or what
    return search
