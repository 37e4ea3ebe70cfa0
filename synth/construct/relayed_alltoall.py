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
cube-meshes with one NIC; dgx1; tori; a rail machine missing a NIC, dgxh100x4 without
box1.nic2, whose GPU without one reaches the other boxes only through its box's other
GPUs), every piece is routed along a shortest path, one hop a step: the path whose
chunk loads the links and the groups (a NIC's links together) least, given the pieces
routed before it, then rerouted against the others' load a few times
(balanced_routes). Each pair's traffic may be split into several pieces a batch, each
routed on its own (split_routes), where whole pieces cannot share the busiest links
evenly: on dgxh100x2 without box1.nic2, box 1's 64 pieces across take 10 of one of
its 7 NICs, 1.09 x their share, where 3 pieces a pair (192: 28 a NIC) take 1.02 x. On
ndv2xK the NIC is the bottleneck and this reaches the bound in the steady state; on
dgxh100x4 without box1.nic2 1.02 x of it (192 pieces over 7 NICs, 28 on the
busiest); shortest paths balanced greedily are not the best multicommodity flow, so
tori stay above it.

Cost: up to 2 N (N - 1) sends a batch (a piece between boxes off its source's rail
takes two): about half a million at 512 GPUs; each pipeline is built and verified
whole, which takes about 170 bytes a chunk (N^2 chunks a batch): so the depth stops at
MAX_CHUNKS chunks. Routing weighs every hop of every shortest path of every pair, once
a pass (1 + REROUTE_PASSES passes a piece; hop costs kept until their load changes,
HopCosts): under a second at torus:8x8, 26 s at torus:16x16 (256 ranks, 5 s a pass,
about 3 x the hop-by-hop choice it replaced); rerouting stops at ROUTING_SHARE of the
time left, keeping the pieces rerouted so far.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from synth.construct.baselines.graphs import all_linked
from synth.construct.relayed_network import Loads
from synth.construct.pipelines import DEPTHS, add_pipelines, levels, pipelined
from synth.deadline import Deadline
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send
from synth.schedule.orbits import Orbits, box_grid
from synth.search.pareto import Limits, Search
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel, box_places, hop_distances, ranks_per_box

MAX_CHUNKS = 1 << 23  # N^2 x batches: past it, verifying takes gigabytes (~170 B a chunk)
ROUTED_RANKS = 256  # routing every piece's path in Python: about 10 s at 256 ranks
REROUTE_PASSES = 4  # rip-up and reroute passes over every pair
MAX_SPLIT = 8  # pieces a routed pair's traffic is split into a batch, at most
ROUTING_SHARE = 0.2  # of the time left, what rerouting and splitting may take
SPLIT_CHUNKS = 1 << 20  # nor past this many chunks in the deepest pipeline (~30 s verified)


RELAYED, ROUTED = "relayed at rail peers", "routed along shortest paths"

# A hop of a piece: (step of the batch, source rank, destination rank, which of the
# pair's pieces in a batch, from, to)
Hop = tuple[int, int, int, int, int, int]


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
                hops.append((1, s, d, 0, s, d))
                continue
            relay = at[(box[s], place[d])]  # in box[s], on d's rail
            if relay != s:
                hops.append((1, s, d, 0, s, relay))
            hops.append((2, s, d, 0, relay, d))
    missing = next(((u, v) for *_, u, v in hops if (u, v) not in model.link), None)
    return f"no link {missing[0]}->{missing[1]}" if missing else hops


def relayed_alltoall(model: LinkModel, batches: int) -> Schedule | str:
    """The two-step relayed alltoall in `batches` pipelined batches, or why not."""
    hops = relay_hops(model)
    return hops if isinstance(hops, str) else forwarded(model, hops, batches, RELAYED)


def forwarded(model: LinkModel, hops: list[Hop], batches: int, method: str,
              pieces: int = 1, orbits: Orbits | None = None) -> Schedule:
    """The alltoall whose pieces take `hops`, batch 0 of `batches` pipelined ones, each
    pair's traffic `pieces` pieces a batch: piece j of pair (s, d) in batch 0 is chunk
    (s N + d) C + j (C = pieces x batches), batch b taking the b-th `pieces` of them.
    Where `orbits` (the pairs rule) map every step onto itself, written once per orbit
    (version 4)."""
    n, chunks = model.ranks, pieces * batches
    sends = [(step, Send((s * n + d) * chunks + j, u, v, "copy"))
             for step, s, d, j, u, v in hops]
    split = f", each pair in {pieces} pieces" if pieces > 1 else ""
    info = {"method": method + split + (f", {batches} batches" if batches > 1 else "")}
    built = pipelined(model, make_collective("alltoall", n, chunks), levels(sends), pieces,
                      batches, info)
    if orbits is None:
        return built
    folded = [orbits.fold(step.sends, built.collective.num_chunks) for step in built.steps]
    if any(f is None for f in folded):
        return built
    return replace(built, steps=tuple(replace(step, sends=f)
                                      for step, f in zip(built.steps, folded)),
                   symmetry=orbits)


def box_orbits(model: LinkModel) -> Orbits | None:
    """The translations moving whole boxes of consecutive ranks (box_grid, the pairs
    rule): the relay of (s, d) is in s's box at d's place, so they map the relayed
    alltoall onto itself. At 1024 GPUs its two million sends a batch, written rank by
    rank, made a file of 251 MB, over what synth verify reads."""
    g = ranks_per_box(model)
    return None if g is None or g == model.ranks else box_grid(model, model.ranks // g,
                                                               chunks="pairs")


def balanced_routes(model: LinkModel, layers: int = 1,
                    deadline: Deadline | None = None) -> tuple[list[dict], list[float]] | str:
    """`layers` routings of every ordered pair (a dict (s, d) -> path, as ranks), each a
    shortest path chosen against the load of all chosen before it, links and groups
    alike (cheapest_path), pairs in order; then REROUTE_PASSES times every pair of the
    layer taken out and chosen again against all the others (rip-up and reroute),
    keeping the layer's routing whose busiest link or group is least busy (torus:8x8:
    1.39 x the flow bound's load in one pass, 1.05 x after four). Returns the layers and
    after each the highest load of a link or group (chunks over capacity, all layers so
    far); fewer layers once the deadline passes. Or why not: some rank cannot reach
    another."""
    n = model.ranks
    dist = hop_distances(model)
    if any(len(dist[s]) < n for s in range(n)):
        return "some rank cannot reach another"
    out: dict[int, list[int]] = defaultdict(list)
    for l in model.links:
        out[l.src].append(l.dst)
    # toward[d][u]: u's next hops on its shortest paths to d
    toward = [{u: [v for v in out[u] if dist[v][d] == dist[u][d] - 1]
               for u in range(n) if u != d} for d in range(n)]
    loads, deadline = Loads(model), Deadline.of(deadline)
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    routed, peaks = [], []
    while len(routed) < layers and not (routed and deadline.passed()):
        routed.append(_route_layer(loads, toward, pairs, deadline))
        peaks.append(loads.settle())
    return routed, peaks


def _route_layer(loads: Loads, toward, pairs, deadline: Deadline) -> dict:
    """One piece of every pair routed onto `loads` (balanced_routes), the loads left
    holding the routing kept; a pass cut short at the deadline keeps what it rerouted."""
    costs = HopCosts(loads)

    def route(s: int, d: int) -> list[int]:
        path = cheapest_path(costs, toward[d], s, d)
        costs.change(list(zip(path, path[1:])), +1)
        return path

    routes = {pair: route(*pair) for pair in pairs}
    best = (loads.settle(), dict(routes))
    for _ in range(REROUTE_PASSES):
        for pair in pairs:
            if deadline.passed():
                break
            path = routes[pair]
            costs.change(list(zip(path, path[1:])), -1)
            routes[pair] = route(*pair)
        if loads.settle() < best[0]:
            best = (loads.peak, dict(routes))
        if deadline.passed():
            break
    if best[1] != routes:  # put the kept routing's load back
        for pair in pairs:
            loads.remove(list(zip(routes[pair], routes[pair][1:])))
            loads.add(list(zip(best[1][pair], best[1][pair][1:])))
        loads.settle()
    return best[1]


class HopCosts:
    """Each hop's cost once a chunk more crosses it: (the highest load of its link and
    groups then, the sum of squares it adds), kept until the load on one of them
    changes (change)."""

    def __init__(self, loads: Loads):
        self.loads, self.known = loads, {}
        self.hops_of = defaultdict(list)  # a link or group -> the hops on it
        for pair, on in loads.of.items():
            for r in on:
                self.hops_of[r].append(pair)

    def __call__(self, u: int, v: int) -> tuple[float, float]:
        known = self.known.get((u, v))
        if known is None:
            peak, spread, loads = 0.0, 0.0, self.loads
            for r in loads.of[(u, v)]:
                capacity = loads.capacity[r]
                before = loads.load[r] / capacity
                after = before + 1 / capacity
                peak, spread = max(peak, after), spread + after * after - before * before
            known = self.known[(u, v)] = (peak, spread)
        return known

    def change(self, pairs, by: int) -> None:
        """A chunk more (by = 1) or less (-1) on each of `pairs`."""
        (self.loads.add if by > 0 else self.loads.remove)(pairs)
        for pair in pairs:
            for r in self.loads.of[pair]:
                for hop in self.hops_of[r]:
                    self.known.pop(hop, None)


def cheapest_path(costs: HopCosts, toward: dict[int, list[int]], s: int, d: int
                  ) -> list[int]:
    """The shortest path from s to d whose chunk would load the links and groups least:
    the highest load it makes (none below the highest already), then the sum of squares
    it adds, hop by hop backward from d over the shortest paths, toward[u] being u's
    next hops on them (each hop's cost taken alone: a group two hops share is counted
    once for each)."""
    layers = [[s]]
    while layers[-1][0] != d:
        layers.append(list(dict.fromkeys(v for u in layers[-1] for v in toward[u])))
    best = {d: ((costs.loads.peak, 0.0), d)}
    for layer in reversed(layers[:-1]):
        for u in layer:
            choice = None
            for v in toward[u]:
                peak, spread = costs(u, v)
                (after, added), _ = best[v]
                option = ((peak if peak > after else after, spread + added), v)
                if choice is None or option < choice:
                    choice = option
            best[u] = choice
    path = [s]
    while path[-1] != d:
        path.append(best[path[-1]][1])
    return path


def routed_hops(model: LinkModel, pieces: int = 1,
                deadline: Deadline | None = None) -> list[Hop] | str:
    """Every pair's traffic in `pieces` pieces, each along its balanced route
    (balanced_routes, one layer a piece), one hop a step; or why not."""
    found = balanced_routes(model, pieces, deadline)
    return found if isinstance(found, str) else _hops(found[0])


def _hops(layers: list[dict]) -> list[Hop]:
    """Piece j of every pair along layers[j]'s path for it, one hop a step."""
    return [(step, s, d, piece, u, v) for piece, routes in enumerate(layers)
            for (s, d), path in routes.items()
            for step, (u, v) in enumerate(zip(path, path[1:]), start=1)]


def forwarded_search(model: LinkModel, limits: Limits,
                     deadline: Deadline | float | None = None) -> Search:
    """Alltoall by forwarding, at every pipeline depth (tree_schedules.DEPTHS) within the
    step limits and MAX_CHUNKS chunks (at 512 GPUs, 32 batches), each verified: relayed
    at rail peers where the boxes allow, else routed along shortest paths where not
    every pair is linked (where every pair is, the direct alltoall does it all) up to
    ROUTED_RANKS ranks, each pair's traffic split as split_routes finds best. `stopped`
    says which, or why neither applies."""
    search, deadline = Search(), Deadline.of(deadline)
    hops, method, what, pieces = relay_hops(model), RELAYED, f"{RELAYED}, 2 steps a batch", 1
    if isinstance(hops, str):
        why = hops
        if all_linked(model, range(model.ranks)):
            search.stopped = "every pair is linked: the direct alltoall forwards nothing"
            return search
        if model.ranks > ROUTED_RANKS:
            search.stopped = f"not relayed: {why}; not routed past {ROUTED_RANKS} ranks"
            return search
        found = split_routes(model, deadline.share(ROUTING_SHARE))  # the rest: pipelines
        method, what = ROUTED, f"{ROUTED} (not relayed: {why})"
        if isinstance(found, str):
            search.stopped = f"not relayed: {why}; not routed: {found}"
            return search
        hops, pieces = found
    if deadline.passed():
        search.stopped, search.complete = "out of time", False
        return search
    depths = [d for d in DEPTHS if model.ranks ** 2 * pieces * d <= MAX_CHUNKS] or [1]
    orbits = box_orbits(model) if method == RELAYED else None
    add_pipelines(search, lambda batches: forwarded(model, hops, batches, method, pieces,
                                                    orbits), limits, deadline, depths)
    search.stopped = search.stopped or what
    return search


def split_routes(model: LinkModel, deadline: Deadline | None = None
                 ) -> tuple[list[Hop], int] | str:
    """(hops, pieces): the routed alltoall with each pair's traffic in the number of
    pieces a batch, up to MAX_SPLIT, whose balanced routes (one layer a piece) cost the
    least per piece in a deep pipeline's steady state (the busiest link's or group's
    load rounded up to whole rounds, over the pieces), the fewest of equal cost; no more
    than keep the deepest pipeline within SPLIT_CHUNKS chunks (where one piece already
    passes it, one): whole pieces load a NIC in whole chunks (module docstring). Or why
    not."""
    n = model.ranks
    deepest = max([d for d in DEPTHS if n * n * d <= MAX_CHUNKS] or [1])
    most = max(1, min(MAX_SPLIT, SPLIT_CHUNKS // (n * n * deepest)))
    found = balanced_routes(model, most, deadline)
    if isinstance(found, str):
        return found
    layers, peaks = found
    pieces = min(range(1, len(layers) + 1),
                 key=lambda k: (math.ceil(peaks[k - 1] - 1e-9) / k, k))
    return _hops(layers[:pieces]), pieces
