"""GPUs no cut can tell apart: orbits of proven automorphisms of the bounds' graph.

An automorphism here is a permutation of the graph's vertices (unit_graph: the routed
physical links, exact capacities) that maps every link onto a link of the same capacity
and GPUs onto GPUs. It maps every vertex set onto one with the same capacity out and in
and as many GPUs inside, so two GPUs it maps one onto the other have the same ratio cut
as a sink, the same narrowest port, and, where it fixes a root, the same max-flow from
(and to) the root. The bounds compute one of those per orbit instead of one per GPU.

Nothing is guessed: a candidate permutation counts only once `_Checker` has
checked it link by link, and two GPUs share a value only when checked maps join them.
The orbits are those of the group the checked maps generate (union-find over the maps),
so they never join more than the true orbits; missing a map costs time, never a value.
Candidates, from what synth knows of the machine:

- a generator's grid (Topology.translations): the shift along each axis, its
  reflection (c -> -c, or about the root), and the swap of two axes of one length;
- a cluster of K alike boxes (NAMExK, --boxes K: vertices "n{b}.NAME" in box b): the
  boxes rotated within each run of m consecutive ones, and the runs among themselves,
  for every m dividing K (m = 1: box b to box b+1), which a fabric's leaf groups and
  pods are; with a root, its box stays;
- a box's own automorphisms, found by the search below on box 0 (where its links leave
  the box is part of each vertex's colour) and applied to every box at once;
- in both, each switch between boxes follows the vertices below it, tier by tier from
  the NICs up (a leaf the NICs it links, a pod's spine its leaves);
- a graph that is none of these, of at most SEARCH_LINKS links: the search on all of it.

The search is individualisation and refinement (as in graph isomorphism tools, without
their backtracking): colour refinement run on two copies of the graph side by side, u
individualised in one and v in the other, pairs the colour classes; the permutation
nearest the identity that keeps the pairing is checked, and where it fails one more
pair of vertices is individualised, up to MAX_DEPTH times, then the pair is given up.
Colour refinement's classes hold the orbits, so where the maps found already join
every class there is nothing left to search for.

Cost: a check is O(links); the search O(rounds x links) per depth, at most MAX_SEARCHES
pairs per graph. On dgxh100x64 or gb200nvl72x4 the orbits take well under a second, the
max-flows they save tens of seconds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import chain

import networkx as nx

from synth.topology.physical import Topology

SEARCH_LINKS = 6000  # the whole graph is searched only up to this many links
MAX_DEPTH = 12  # individualisations per search before a pair is given up
MAX_SEARCHES = 400  # pairs searched per graph at most


class Orbits:
    """A partition of the GPUs into orbits of a group of checked automorphisms (fixing
    `fixed` where given): `classes` in GPU order, each led by its first GPU."""

    def __init__(self, gpus: list[str], classes: list[list[str]], fixed: str | None = None):
        self.gpus, self.classes, self.fixed = gpus, classes, fixed

    @classmethod
    def trivial(cls, gpus: list[str], fixed: str | None = None) -> "Orbits":
        """Every GPU alone: the reference, computing every GPU's value."""
        return cls(gpus, [[g] for g in gpus], fixed)

    @property
    def representatives(self) -> list[str]:
        return [c[0] for c in self.classes]

    def others(self) -> list[str]:
        """The representatives of the orbits without the fixed GPU."""
        return [c[0] for c in self.classes if c[0] != self.fixed]

    def spread(self, values: dict[str, object]) -> list:
        """Per GPU, in GPU order, the value of its orbit's representative."""
        rep = {g: c[0] for c in self.classes for g in c}
        return [values[rep[g]] for g in self.gpus]


class Symmetry:
    """The orbits the bounds of one graph ask for, each found once; `on=False` gives
    every GPU its own orbit (the reference: every GPU's value computed)."""

    def __init__(self, graph: nx.DiGraph, gpus: list[str], topo: Topology, on: bool = True):
        self.graph, self.gpus, self.topo, self.on = graph, gpus, topo, on
        self._found: dict[str | None, Orbits] = {}

    def orbits(self, fixed: str | None = None) -> Orbits:
        """The GPUs' orbits under automorphisms fixing `fixed` (None: all of them)."""
        if fixed not in self._found:
            self._found[fixed] = (gpu_orbits(self.graph, self.gpus, self.topo, fixed)
                                  if self.on else Orbits.trivial(self.gpus, fixed))
        return self._found[fixed]


def gpu_orbits(graph: nx.DiGraph, gpus: list[str], topo: Topology,
               fixed: str | None = None) -> Orbits:
    """Orbits of the GPUs under the automorphisms of `graph` found and checked (module
    docstring), all of them fixing the GPU `fixed` where given."""
    joined, gpu_set = _UnionFind(graph.nodes), set(gpus)
    is_automorphism = _Checker(graph, gpu_set, fixed)
    fewest = 1 if fixed is None else 2  # all GPUs in one orbit, or all but the root

    def settled() -> bool:
        return len({joined.find(g) for g in gpus}) == fewest

    for perm in chain(_grid_maps(gpus, topo, fixed), _box_maps(graph, topo, fixed)):
        if is_automorphism(perm):
            joined.join_map(perm)
            if settled():
                break
    if not settled() and _boxes(topo) is None and graph.number_of_edges() <= SEARCH_LINKS:
        local = _Local(graph, {v: v in gpu_set for v in graph})
        for perm in local.maps(gpus, fixed, joined):
            if is_automorphism(perm):
                joined.join_map(perm)
    classes: dict[str, list[str]] = {}
    for g in gpus:
        classes.setdefault(joined.find(g), []).append(g)
    return Orbits(gpus, list(classes.values()), fixed)


class _Checker:
    """Whether a permutation (the identity where it says nothing) is an automorphism:
    it permutes the vertices, maps GPUs onto GPUs, fixes `fixed`, and maps every link
    at a vertex it moves onto a link of equal capacity (the links between fixed
    vertices map onto themselves, and the links are as many before as after, so onto
    all of them). O(the links at the vertices it moves)."""

    def __init__(self, graph: nx.DiGraph, gpus: set[str], fixed: str | None):
        kinds: dict = {}
        self.out = {u: {v: kinds.setdefault(d["capacity"], len(kinds))
                        for v, d in graph.succ[u].items()} for u in graph}
        self.into = {v: {u: self.out[u][v] for u in graph.pred[v]} for v in graph}
        self.gpus, self.fixed = gpus, fixed

    def __call__(self, perm: dict[str, str]) -> bool:
        moved = {a: b for a, b in perm.items() if a != b}
        if self.fixed in moved or set(moved.values()) != set(moved):
            return False
        if any(a not in self.out for a in moved):
            return False
        if any((a in self.gpus) != (b in self.gpus) for a, b in moved.items()):
            return False
        out = self.out
        for u, image in moved.items():
            for v, k in out[u].items():
                if out[image].get(moved.get(v, v)) != k:
                    return False
            for w, k in self.into[u].items():
                if out[moved.get(w, w)].get(image) != k:
                    return False
        return True


class _UnionFind:
    def __init__(self, items):
        self.parent = {x: x for x in items}

    def find(self, x):
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def join_map(self, perm: dict[str, str]) -> None:
        for a, b in perm.items():
            ra, rb = self.find(a), self.find(b)
            if ra != rb:
                self.parent[max(ra, rb, key=str)] = min(ra, rb, key=str)


# --- candidates from what synth knows ----------------------------------------------

def _grid_maps(gpus: list[str], topo: Topology, fixed: str | None):
    """A generator's grid symmetries (module docstring), as permutations of the GPUs,
    every other vertex fixed; with `fixed`, only those that may fix it."""
    dims = tuple(topo.translations)
    if not dims or len(gpus) != math.prod(dims):
        return
    weights = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    coords = [tuple(r // w % d for w, d in zip(weights, dims)) for r in range(len(gpus))]
    root = coords[gpus.index(fixed)] if fixed is not None else None

    def perm(move):
        return {gpus[r]: gpus[sum(x * w for x, w in zip(move(c), weights))]
                for r, c in enumerate(coords)}

    for axis, d in enumerate(dims):
        def along(f, axis=axis):
            return lambda c: c[:axis] + (f(c[axis]),) + c[axis + 1:]
        if root is None:
            yield perm(along(lambda x, d=d: (x + 1) % d))
            yield perm(along(lambda x, d=d: -x % d))  # with the shifts: d-1-x too
        else:
            yield perm(along(lambda x, d=d, a=root[axis]: (2 * a - x) % d))
    for i in range(len(dims) - 1):
        if dims[i] == dims[i + 1]:
            yield perm(lambda c, i=i: c[:i] + (c[i + 1], c[i]) + c[i + 2:])


def _boxes(topo: Topology) -> dict[int, dict[str, str]] | None:
    """box -> (local name -> vertex name) for a cluster of alike boxes named as
    join_boxes names them ("n{b}.NAME"), every box with the same local names; else
    None."""
    if topo.boxes < 2:
        return None
    boxes: dict[int, dict[str, str]] = {}
    for v in topo.vertices:
        if v.box is None:
            continue
        m = re.fullmatch(rf"n{v.box}\.(.+)", v.name, flags=re.S)
        if m is None:
            return None
        boxes.setdefault(v.box, {})[m.group(1)] = v.name
    names = {frozenset(b) for b in boxes.values()}
    return boxes if len(boxes) > 1 and len(names) == 1 else None


def _box_maps(graph: nx.DiGraph, topo: Topology, fixed: str | None):
    """Whole boxes moved (_box_moves), then each automorphism of box 0 found by the
    search, applied to every box at once; the switches between boxes follow both
    (_Follow)."""
    boxes = _boxes(topo)
    if boxes is None:
        return
    order = sorted(boxes)
    home = next((b for b in order if fixed in boxes[b].values()), None)
    follow = _Follow(graph, [v.name for v in topo.vertices if v.box is None],
                     set(topo.gpus))
    for step in _box_moves(order, home):
        lifted = {name: boxes[step[b]][local] for b in step
                  for local, name in boxes[b].items()}
        outside = follow(lifted)
        if outside is not None:
            yield lifted | outside
    first = boxes[order[0]]
    inside = set(first.values())
    colour, gpus = {}, set(topo.gpus)
    for local, name in first.items():
        out = sorted(str(c) for _, w, c in graph.out_edges(name, data="capacity")
                     if w not in inside)
        into = sorted(str(c) for w, _, c in graph.in_edges(name, data="capacity")
                      if w not in inside)
        colour[name] = (name in gpus, tuple(out), tuple(into))
    box_graph = graph.subgraph(inside)
    box_gpus = [n for n in first.values() if n in gpus]
    root = None
    if fixed is not None:
        local_root = next(local for local, name in boxes[home].items() if name == fixed)
        root = first[local_root]
    name_of = {name: local for local, name in first.items()}
    for perm in _Local(box_graph, colour).maps(box_gpus, root, _UnionFind(inside)):
        local = {name_of[a]: name_of[b] for a, b in perm.items()}
        lifted = {boxes[b][x]: boxes[b][y] for b in order for x, y in local.items()}
        outside = follow(lifted)
        if outside is not None:
            yield lifted | outside


def _box_moves(order: list[int], home: int | None):
    """Candidate permutations of the boxes (box -> box, the boxes moved), none moving
    `home`: for every m dividing their number, the boxes rotated within each run of m
    consecutive ones, and the runs rotated among themselves (m = 1: all boxes in one
    cycle). A fabric's leaf groups and pods are such runs (synth.topology.fabric), so
    these join every box where its tiers are alike; a cluster on one switch or on rails
    needs only the one cycle. The boxes of home's run, and the runs but home's, move
    without it."""
    k = len(order)
    for m in range(1, k + 1):
        if k % m:
            continue
        runs = [order[i:i + m] for i in range(0, k, m)]
        if m > 1:  # within each run
            step = {}
            for run in runs:
                moved = [b for b in run if b != home]
                step |= dict(zip(moved, moved[1:] + moved[:1]))
            if any(a != b for a, b in step.items()):
                yield step
        others = [run for run in runs if home not in run]
        if len(others) > 1:  # the runs among themselves
            yield {b: c for run, nxt in zip(others, others[1:] + others[:1])
                   for b, c in zip(run, nxt)}


class _Follow:
    """Where each switch between boxes goes when the box vertices move by a map: tier by
    tier from the NICs up (a switch's tier its hop distance from the GPUs), to the
    switch whose links down (to box vertices and to the tier below) are the images of
    its own; itself where they are its own. A leaf over boxes of other leaves follows
    as the one over box 0 does, a pod's spine its leaves. None where the image is not
    one switch; the result is still checked link by link (_Checker)."""

    def __init__(self, graph: nx.DiGraph, between: list[str], gpus: set[str]):
        depth = _depths(graph, gpus)
        self.order = sorted((w for w in between if w in depth), key=depth.get)
        self.down = {w: frozenset(u for u in nx.all_neighbors(graph, w)
                                  if depth.get(u, -1) < depth[w]) for w in self.order}
        self.by_down: dict[frozenset, list[str]] = {}
        for w in self.order:
            self.by_down.setdefault(self.down[w], []).append(w)

    def __call__(self, moved: dict[str, str]) -> dict[str, str] | None:
        out: dict[str, str] = {}
        for w in self.order:
            below = self.down[w]
            if not below:
                continue
            image = frozenset(moved.get(u, out.get(u, u)) for u in below)
            if image == below:
                continue
            targets = self.by_down.get(image, [])
            if len(targets) != 1 or len(self.by_down[below]) != 1:
                return None
            out[w] = targets[0]
        return out


def _depths(graph: nx.DiGraph, gpus: set[str]) -> dict[str, int]:
    """Each vertex's hop distance from the nearest GPU, either way along the links."""
    depth = {g: 0 for g in gpus if g in graph}
    layer = list(depth)
    while layer:
        nxt = []
        for u in layer:
            for v in nx.all_neighbors(graph, u):
                if v not in depth:
                    depth[v] = depth[u] + 1
                    nxt.append(v)
        layer = nxt
    return depth


# --- the search ----------------------------------------------------------------------

class _Local:
    """Individualisation and refinement on one graph (module docstring): vertices are
    numbered in the graph's order, capacities and colours replaced by small ints."""

    def __init__(self, graph: nx.DiGraph, colour: dict[str, object]):
        self.names = list(graph.nodes)
        index = {v: i for i, v in enumerate(self.names)}
        caps: dict = {}
        self.out = [[] for _ in self.names]
        self.into = [[] for _ in self.names]
        for u, v, c in graph.edges(data="capacity"):
            k = caps.setdefault(c, len(caps))
            self.out[index[u]].append((index[v], k))
            self.into[index[v]].append((index[u], k))
        labels: dict = {}
        self.base = [labels.setdefault(colour[v], len(labels)) for v in self.names]
        self.index = index

    def maps(self, targets: list[str], fixed: str | None, joined: _UnionFind):
        """Checked-later candidates joining each GPU of `targets` to the first of its
        refinement class, skipping pairs `joined` already joins; each candidate found
        is joined at once, so later pairs it settles are not searched."""
        base = list(self.base)
        if fixed is not None:
            base[self.index[fixed]] = max(base) + 1
        stable = self._refine(base, base)
        if stable is None:
            return
        first: dict[int, str] = {}
        searches = 0
        for t in targets:
            lead = first.setdefault(stable[0][self.index[t]], t)
            if lead == t or joined.find(lead) == joined.find(t):
                continue
            if searches == MAX_SEARCHES:
                return
            searches += 1
            perm = self._search(stable[0], self.index[lead], self.index[t])
            if perm is not None:
                named = {self.names[a]: self.names[b] for a, b in enumerate(perm) if a != b}
                joined.join_map(named)
                yield named

    def _search(self, colours: list[int], u: int, v: int) -> list[int] | None:
        """A permutation mapping u to v that keeps `colours` (unchecked), or None."""
        fresh = max(colours) + 1
        ca, cb = list(colours), list(colours)
        ca[u] = cb[v] = fresh
        for _ in range(MAX_DEPTH):
            pair = self._refine(ca, cb)
            if pair is None:
                return None
            ca, cb = pair
            perm, loose = self._nearest(ca, cb)
            if self._keeps_links(perm):
                return perm
            if loose is None:
                return None
            fresh = max(ca) + 1
            ca[loose] = cb[perm[loose]] = fresh
        return None

    def _refine(self, ca: list[int], cb: list[int]):
        """Colour refinement of both colourings with shared names until the classes stop
        splitting; None when the two disagree in some class's size."""
        classes = len(set(ca))
        while True:
            names: dict = {}
            na = [names.setdefault(self._signature(v, ca), len(names))
                  for v in range(len(ca))]
            nb = [names.setdefault(self._signature(v, cb), len(names))
                  for v in range(len(cb))]
            if Counter(na) != Counter(nb):
                return None
            ca, cb = na, nb
            if len(names) == classes:
                return ca, cb
            classes = len(names)

    def _signature(self, v: int, colours: list[int]):
        return (colours[v], tuple(sorted((k, colours[w]) for w, k in self.out[v])),
                tuple(sorted((k, colours[w]) for w, k in self.into[v])))

    @staticmethod
    def _nearest(ca: list[int], cb: list[int]) -> tuple[list[int], int | None]:
        """The permutation nearest the identity mapping each class of ca onto the same
        class of cb (members of both stay, the rest pair up in order), and a vertex of
        the first class of several members to individualise next (None: all single)."""
        in_a: dict[int, list[int]] = {}
        in_b: dict[int, list[int]] = {}
        for x, c in enumerate(ca):
            in_a.setdefault(c, []).append(x)
        for x, c in enumerate(cb):
            in_b.setdefault(c, []).append(x)
        perm = list(range(len(ca)))
        loose = None
        for c, members in in_a.items():
            images = in_b[c]
            stay = set(members) & set(images)
            for x, y in zip([x for x in members if x not in stay],
                            [y for y in images if y not in stay]):
                perm[x] = y
            if loose is None and len(members) > 1:
                moved = [x for x in members if x not in stay]
                loose = moved[0] if moved else members[0]
        return perm, loose

    def _keeps_links(self, perm: list[int]) -> bool:
        out = self.out
        for u, links in enumerate(out):
            images = set((perm[w], k) for w, k in links)
            if images != set(out[perm[u]]):
                return False
        return len(set(perm)) == len(perm)
