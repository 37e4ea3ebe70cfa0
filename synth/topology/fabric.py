"""Scale-out fabrics: how NAMExK (or --boxes K) joins boxes by their NICs.

    single-switch   every NIC on one non-blocking switch `net`
    rails           NIC j of every box on rail switch `railJ`; no spine
    clos            rail-optimised leaves: NIC j of the boxes of leaf group g on
                    `leafG.railJ`, every leaf joined to one `spine`; with pod=B a third
                    tier: a pod's leaves on `podP.spine`, the pods joined by `agg`
    fat-tree        the same, but a leaf takes every NIC of its boxes (`leafG`, a
                    top-of-rack switch): NICs are not rail-aligned

A switch layer that forwards as one non-blocking fabric is one vertex, as the built-ins
have it (docs/machines.md), so a route never chooses between spines and no capacity is
lost to a tie. Oversubscription R (over=R, R:1) is the top tier's uplinks carrying 1/R
of what enters them from below: a leaf's link to the spine (two tiers), a pod's link to
the aggregation layer (three tiers, whose pods are non-blocking inside, as Llama 3's
are). Its capacity is a link of reduced bandwidth, so the cut bound sees it as any
other cut.

The NAMExK options (docs/cli.md, "Topology names"), parsed here, say the same as the
keys of a file's `network:` section:

    dgxh100x128:clos,pod=16,over=7      FABRIC[,leaf=B][,pod=B][,over=R]
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from synth.errors import BadInput
from synth.files import quote
from synth.topology.physical import FABRICS, Link, Network, Vertex, checked

OPTIONS = ("leaf", "pod", "over")


def with_options(net: Network, text: str, name: str) -> Network:
    """The box's network with NAMExK's options (`clos,pod=16,over=7`) in place of its
    fabric; BadInput, one line, for an unknown fabric, key or value."""
    fabric, *pairs = text.split(",")
    if fabric not in FABRICS:
        raise BadInput(f"{name}: unknown fabric {quote(fabric)} (expected one of "
                       f"{', '.join(FABRICS)}, then leaf=B, pod=B, over=R)")
    values: dict = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if key not in OPTIONS or not eq:
            raise BadInput(f"{name}: unknown fabric option {quote(pair)} (expected "
                           "leaf=B boxes per leaf, pod=B boxes per pod, over=R for R:1)")
        if key in values:
            raise BadInput(f"{name}: {key}= given twice")
        number = re.fullmatch(r"\d{1,6}" if key != "over" else r"\d{1,6}(\.\d{1,6})?", value)
        if not number or (key != "over" and int(value) < 1):
            raise BadInput(f"{name}: {key}={quote(value)[1:-1] if value else ''}: expected "
                           + ("an oversubscription R from 1 to 1000 (over=7: 7:1)"
                              if key == "over" else "a whole number of boxes from 1 up"))
        values[key] = float(value) if key == "over" else int(value)
    plain = {"leaf": 0, "pod": 0, "over": 1.0}  # what the options leave out: defaults
    return checked(replace(net, fabric=fabric, **(plain | values)), name)


def options_text(net: Network) -> str:
    """The options as NAMExK writes them, in one order, defaults left out: the suffix
    of a fabric's canonical name (`clos,pod=16,over=7`)."""
    parts = [net.fabric]
    parts += [f"leaf={net.leaf}"] if net.leaf else []
    parts += [f"pod={net.pod}"] if net.pod else []
    # every digit NAMExK takes (6 decimals): :g wrote over=1.000001 as over=1, a name
    # that resolves to another machine, so synth's own files for it failed verify
    parts += [f"over={net.over:.12g}"] if net.over != 1 else []
    return ",".join(parts)


def split_options(spec: str) -> tuple[str, str] | None:
    """("dgxh100x128", "clos,over=7") for "dgxh100x128:clos,over=7"; None for a name
    without fabric options."""
    found = re.fullmatch(r"(.+x\d+):(.*)", spec, re.DOTALL)
    return (found.group(1), found.group(2)) if found else None


def switches_and_links(net: Network, nics: list[str], k: int
                       ) -> tuple[list[Vertex], list[list[Link]], list[Link]]:
    """The switches between K boxes, each box's links to them (NIC j of box b is
    `nB.NICJ`) and the links between switches, both directions alike. Cost: O(K x NICs
    per box)."""
    can = ("multicast", "reduce") if net.sharp else ()  # InfiniBand SHARP, when asked
    downs: dict[str, list[str]] = {}  # a switch -> what hangs below it
    ups: dict[str, tuple[str, float]] = {}  # a switch -> the one above it, GB/s
    boxes = []
    for b in range(k):
        boxes.append([])
        for j, nic in enumerate(nics):
            leaf, name = _leaf(net, b, j), f"n{b}.{nic}"
            downs.setdefault(leaf, []).append(name)
            boxes[-1] += _both(name, leaf, net.gbps, net.alpha_us)
    if net.tiers > 1:
        top = "spine" if net.tiers == 2 else "agg"
        for leaf, below in list(downs.items()):
            pod = f"pod{_box_of(below[0]) // net.pod}.spine" if net.pod else top
            downs.setdefault(pod, []).append(leaf)
            ups[leaf] = (pod, len(below) * net.gbps / (1 if net.pod else net.over))
        for pod in [s for s in downs if s.startswith("pod")]:
            downs.setdefault(top, []).append(pod)
            ups[pod] = (top, sum(ups[leaf][1] for leaf in downs[pod]) / net.over)
    switches = [Vertex(name, "net_switch", None, can=can) for name in downs]
    # an uplink's GB/s to a thousandth (1 MB/s): R:1 of a sum is rarely a finite decimal
    upper = [link for v, (above, gbps) in ups.items()
             for link in _both(v, above, round(gbps, 3), net.alpha_us)]
    return switches, boxes, upper


def _both(a: str, b: str, gbps: float, alpha_us: float) -> list[Link]:
    return [Link(a, b, gbps, 1, alpha_us), Link(b, a, gbps, 1, alpha_us)]


def _leaf(net: Network, b: int, j: int) -> str:
    if net.fabric == "single-switch":
        return "net"
    if net.fabric == "rails":
        return f"rail{j}"
    group = b // net.leaf_boxes
    return f"leaf{group}.rail{j}" if net.fabric == "clos" else f"leaf{group}"


def _box_of(name: str) -> int:
    return int(name[1:name.index(".")])  # "n12.nic3" -> 12


def switch_count(net: Network, nics: int, k: int) -> int:
    """How many switches switches_and_links makes, by arithmetic alone."""
    if net.fabric == "single-switch":
        return 1
    if net.fabric == "rails":
        return nics
    leaves = math.ceil(k / net.leaf_boxes) * (nics if net.fabric == "clos" else 1)
    return leaves + 1 + (math.ceil(k / net.pod) if net.pod else 0)


def describe(net: Network, k: int, nics: int) -> str:
    """The fabric in words, for a topology's description and `synth topo show`."""
    if net.fabric == "single-switch":
        return "one non-blocking switch"
    if net.fabric == "rails":
        return "rail-optimised"
    leaf = net.leaf_boxes
    groups = math.ceil(k / leaf)
    what = ("rail-optimised Clos" if net.fabric == "clos" else "fat-tree (NICs not "
            "rail-aligned)")
    each = f"{min(leaf, k)} box{'es' if min(leaf, k) > 1 else ''}"
    leaves = (f"{groups * nics} rail leaves ({nics} rails x {groups} of {each})"
              if net.fabric == "clos" else f"{groups} lea{'ves' if groups > 1 else 'f'} "
              f"of {each}")
    over = f"{net.over:g}:1 oversubscribed" if net.over != 1 else "non-blocking"
    if not net.pod:
        return f"two-tier {what}: {leaves}, one spine, {over}"
    return (f"three-tier {what}: {leaves}, {math.ceil(k / net.pod)} pods of {net.pod} "
            f"boxes (non-blocking inside), one aggregation layer, {over}")


def fabric_parts(topo) -> list[list[set[str]]]:
    """Per tier of the switches between boxes, the parts it splits the machine into
    where it splits it (the leaf groups, the pods; none on one switch or on rails):
    each part the switches of that tier over the same boxes, everything below them and
    those boxes whole. The cut around a part crosses only its uplinks, so the bounds
    see an oversubscribed tier there (synth.bounds). Read off the graph alone: a
    switch's tier is its hop distance from the GPUs, and below it is what it reaches
    going ever closer to them. Cost: O(switches x the vertices below each)."""
    between = [v.name for v in topo.vertices if v.box is None]
    if not between:
        return []
    graph = topo.graph().to_undirected(as_view=True)
    depth = _distances(graph, topo.gpus)
    box_of = {v.name: v.box for v in topo.vertices}
    in_box: dict[int, set[str]] = {}
    for v in topo.vertices:
        if v.box is not None:
            in_box.setdefault(v.box, set()).add(v.name)
    tiers: dict[int, dict[frozenset, set[str]]] = {}
    for s in between:
        below = _below(graph, depth, s)
        boxes = frozenset(box_of[v] for v in below if box_of[v] is not None)
        tiers.setdefault(depth.get(s, -1), {}).setdefault(boxes, set()).update(below)
    parts = []
    for by_boxes in tiers.values():
        sets = [b for b in by_boxes if b]
        covered = set().union(*sets) if sets else set()
        if len(sets) < 2 or sum(map(len, sets)) != len(covered) or covered != set(in_box):
            continue  # one part of everything, or parts that overlap or leave boxes out
        parts.append([by_boxes[b].union(*(in_box[x] for x in b)) for b in sets])
    return parts


def _distances(graph, sources) -> dict[str, int]:
    """Hop distance from the nearest of `sources`, breadth-first."""
    depth = {s: 0 for s in sources}
    layer = list(sources)
    while layer:
        nxt = []
        for u in layer:
            for v in graph.neighbors(u):
                if v not in depth:
                    depth[v] = depth[u] + 1
                    nxt.append(v)
        layer = nxt
    return depth


def _below(graph, depth: dict[str, int], top: str) -> set[str]:
    """`top` and what it reaches going ever closer to the GPUs."""
    seen, stack = {top}, [top]
    while stack:
        u = stack.pop()
        for v in graph.neighbors(u):
            if v not in seen and depth.get(v, 0) < depth.get(u, 0):
                seen.add(v)
                stack.append(v)
    return seen


def tiers_of(topo) -> list[dict]:
    """The switches between boxes tier by tier, from the NICs up: per tier how many,
    and for the ones with an uplink its GB/s against the GB/s coming up from below
    (their ratio the tier's oversubscription); [] without switches between boxes."""
    between = {v.name for v in topo.vertices if v.box is None}
    if not between:
        return []
    depth = _distances(topo.graph().to_undirected(as_view=True), topo.gpus)
    into: dict[str, float] = {}  # GB/s into a switch from the tier below it
    out: dict[str, float] = {}  # GB/s of its links to the tier above
    for l in topo.links:
        if l.dst in between and depth.get(l.src, 0) < depth[l.dst]:
            into[l.dst] = into.get(l.dst, 0.0) + l.bandwidth
        if l.src in between and l.dst in between and depth[l.dst] > depth[l.src]:
            out[l.src] = out.get(l.src, 0.0) + l.bandwidth
    tiers = []
    for d in sorted({depth[s] for s in between if s in depth}):
        names = sorted((s for s in between if depth.get(s) == d), key=_natural)
        up = [s for s in names if s in out]
        tier = {"tier": len(tiers) + 1, "switches": len(names), "examples": names[:3]}
        if up:
            tier |= {"uplink_gbps": out[up[0]], "below_gbps": into.get(up[0], 0.0),
                     "oversubscription": round(into.get(up[0], 0.0) / out[up[0]], 3)}
        tiers.append(tier)
    return tiers


def tier_of(topo) -> dict[str, int]:
    """Each switch between boxes by its tier: 1 for the ones the NICs hang on, and one
    more per layer above (synth topo draw puts each tier on a row of its own)."""
    between = {v.name for v in topo.vertices if v.box is None}
    if not between:
        return {}
    depth = _distances(topo.graph().to_undirected(as_view=True), topo.gpus)
    levels = sorted({depth[s] for s in between if s in depth})
    return {s: levels.index(depth[s]) + 1 for s in between if s in depth}


def _natural(name: str) -> tuple:
    """leaf2 before leaf10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))
