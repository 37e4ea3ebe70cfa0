"""Communicators: the groups of GPUs that run collectives together, and the topology as
one group sees it (synth plan).

A workload names its communicators by shape, as training frameworks build them:

    {per: box}                    the GPUs of each box (tensor parallel in a box)
    {per: box, size: 4}           consecutive local ranks of a box, 4 at a time
    {across: boxes}               local rank r of every box, for each r (data parallel)
    {across: boxes, size: 4}      the same, 4 boxes at a time
    {ranks: [[0, 1], [2, 3]]}     explicit groups of global ranks
    all                           every GPU

`groups` turns a shape into the groups of global ranks (every group the same size);
`view` is the physical topology with only one group's GPUs in it (in the group's order:
its rank i is group[i]), the network as that group sees it when no one else sends, which
is what synthesis then runs on. Cost: linear in the topology's vertices and links;
`communicator_view`, the one a plan synthesizes on, also lowers it.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from synth.errors import BadInput
from synth.files import quote
from synth.topology.physical import GPU, Topology


def local_ranks(topo: Topology) -> list[list[int]]:
    """The global ranks of each box, in box order (one list for a single box)."""
    boxes: dict = {}
    for rank, name in enumerate(topo.gpus):
        boxes.setdefault(topo.vertex(name).box, []).append(rank)
    return [boxes[b] for b in sorted(boxes, key=lambda b: -1 if b is None else b)]


def groups(topo: Topology, shape, where: str = "communicator") -> list[list[int]]:
    """The groups of global ranks a communicator `shape` (module docstring) makes on
    `topo`. BadInput, naming `where`, for a shape that does not fit."""
    n = topo.ranks
    if shape == "all":
        return [list(range(n))]
    if not isinstance(shape, dict) or not shape:
        raise BadInput(f"{where}: expected all, {{per: box}}, {{across: boxes}} or "
                       f"{{ranks: [[...], ...]}}, got {quote(shape)}")
    unknown = set(shape) - {"per", "across", "size", "ranks"}
    if unknown:
        raise BadInput(f"{where}: unknown key {quote(sorted(unknown)[0])} (expected per, "
                       "across, size or ranks)")
    if "ranks" in shape:
        if set(shape) - {"ranks"}:
            raise BadInput(f"{where}: ranks takes no per, across or size")
        return _explicit(shape["ranks"], n, where)
    boxes = local_ranks(topo)
    if shape.get("per") == "box" and "across" not in shape:
        whole = boxes
    elif shape.get("across") == "boxes" and "per" not in shape:
        if len({len(b) for b in boxes}) != 1:
            raise BadInput(f"{where}: across boxes needs boxes of one size")
        whole = [list(column) for column in zip(*boxes)]
    else:
        raise BadInput(f"{where}: expected per: box or across: boxes, got {quote(shape)}")
    size = shape.get("size", len(whole[0]))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1 \
            or any(len(g) % size for g in whole):
        raise BadInput(f"{where}: size {quote(size)} does not divide the {len(whole[0])} "
                       f"GPUs of each {'box' if 'per' in shape else 'column of boxes'}")
    return [g[i:i + size] for g in whole for i in range(0, len(g), size)]


def _explicit(value, n: int, where: str) -> list[list[int]]:
    if not isinstance(value, list) or not value or not all(
            isinstance(g, list) and g for g in value):
        raise BadInput(f"{where}: ranks must be a list of non-empty lists of ranks")
    seen = set()
    for g in value:
        for r in g:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
                raise BadInput(f"{where}: rank {quote(r)} is outside the topology "
                               f"(0..{n - 1})")
            if r in seen:
                raise BadInput(f"{where}: rank {r} is in two groups (or twice in one)")
            seen.add(r)
    if len({len(g) for g in value}) != 1:
        raise BadInput(f"{where}: groups of different sizes (one plan serves them all)")
    return [list(g) for g in value]


def view(topo: Topology, ranks: list[int], name: str = "") -> Topology:
    """The physical topology with only the GPUs `ranks` (rank i of the result is
    ranks[i]): the other GPUs and their links go, and so does every box none of them is
    in. Switches, NICs and the network stay, with their capabilities."""
    gpus = topo.gpus
    keep_gpus = [gpus[r] for r in ranks]
    boxes = {topo.vertex(g).box for g in keep_gpus}
    dropped = set(gpus) - set(keep_gpus)
    others = [v for v in topo.vertices if v.kind != GPU and v.name not in dropped
              and (v.box is None or v.box in boxes)]
    kept = {v.name for v in others} | set(keep_gpus)
    vertices = tuple(others) + tuple(topo.vertex(g) for g in keep_gpus)
    links = tuple(l for l in topo.links if l.src in kept and l.dst in kept)
    return replace(topo, name=name or f"{topo.name}[{len(ranks)} GPUs]", vertices=vertices,
                   links=links, boxes=max(1, len(boxes - {None})))


def communicator_view(topo: Topology, ranks: list[int], name: str) -> Topology:
    """view(), in fastest_unit. Cost: view's, and a lowering of it."""
    return fastest_unit(view(topo, ranks, name), topo.ranks)


def fastest_unit(sub: Topology, machine_ranks: int) -> Topology:
    """A communicator's view `sub` of a machine of `machine_ranks` GPUs, its capacity
    unit the rate of its fastest rank link where every one is slower than the machine's
    unit: a schedule's chunks follow its capacities, and mi300xx2's GPUs one a box, 50
    GB/s apart against a unit of 64 (an xGMI link the view leaves out), were cut in 7
    chunks, which no power-of-two size divides, so no runtime file ran their calls.
    Rates in GB/s are unchanged. Cost: a lowering of `sub`."""
    from synth.topology.linkmodel import lower

    if sub.ranks < 2 or sub.ranks == machine_ranks:  # the whole machine keeps its unit
        return sub
    fastest = max(link.capacity for link in lower(sub).links)
    if fastest >= 1:
        return sub
    return replace(sub, unit_gbps=float(Fraction(str(sub.unit_gbps)) * fastest))
