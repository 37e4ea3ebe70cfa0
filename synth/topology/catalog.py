"""Names users type for topologies: built-in files, generators, NAMExK, paths.

    resolve("dgx1")        topologies/dgx1.yaml
    resolve("torus:4x4")   a generator (ring, line, fc, mesh, torus, hypercube, switch)
    resolve("dgx2x4")      four dgx2 boxes joined by their NICs (the box file's network:)
    resolve("my.yaml")     a topology file
    resolve("my.yaml", 4)  four of its boxes joined by their NICs (the file's network:)
    resolve("dump.xml")    NCCL's topology XML, imported (synth.topology.importing)
    resolve("smi.txt")     `nvidia-smi topo -m` output, imported
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace
from pathlib import Path

from synth.deadline import Deadline, in_time
from synth.errors import BadInput
from synth.files import quote
from synth.topology.degrade import degraded, split_name
from synth.topology.fabric import (describe, options_text, split_options, switch_count,
                                   switches_and_links, with_options)
from synth.topology.linkmodel import MAX_RANK_LINKS
from synth.topology.physical import (GPU, MAX_GPUS, MAX_LINKS, MAX_VERTICES, NIC, Link,
                                     Topology, Vertex, load_topology_file,
                                     topology_from_dict, validate)
from synth.topology.rates import NVLINK_GBPS
from synth.topology.several_routes import SUFFIX, base_of, with_several_routes

TOPOLOGY_DIR = Path(__file__).resolve().parents[2] / "topologies"
# sources `--topo` imports on the fly: NCCL topology XML, nvidia-smi topo -m output
IMPORTED = (".xml", ".txt")

# Generated topologies use NVLink2-class links: 25 GB/s (the table in rates.py), 0.7
# us (TE-CCL's V100 NVLink alpha)
GEN_GBPS = NVLINK_GBPS[2]
GEN_ALPHA_US = 0.7

GENERATORS = {
    "ring": "ring:N  bidirectional ring of N GPUs",
    "line": "line:N  chain of N GPUs",
    "fc": "fc:N  every GPU linked to every other",
    "mesh": "mesh:RxC  2-D grid",
    "torus": "torus:RxC or torus:RxCxD  grid with wrap-around",
    "hypercube": "hypercube:D  2^D GPUs, linked when their numbers differ in one bit",
    "switch": "switch:N  N GPUs on one non-blocking switch",
}


def builtin_names() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def resolve(spec: str, boxes: int | None = None, edits=(),
            deadline: Deadline = Deadline(), routes: str | None = None) -> Topology:
    """Turn a topology name, generator, NAMExK form or file path into a Topology; with
    `boxes`, K copies of that one box joined by its network: section (`--boxes K`: a
    file of one's own repeated like a built-in's NAMExK); then degraded by a file's
    `without:`/`degrade:` and `edits` (`--without`, `--degrade`: synth.topology.degrade),
    on the whole machine, so that one box may differ. `routes` "several" (`--routes`,
    or a name NAME-several-routes) lowers it with several routes per GPU pair
    (synth.topology.several_routes), applied before the edits, so that the healthy
    machine a degraded one is compared with has them too (None: as the name says, else
    one route; "widest" with such a name is refused). TimeLimit past `deadline`
    while building or editing a machine of a million links (fc:1049)."""
    if isinstance(spec, str) and not _a_file(spec):
        if base_of(spec):  # before the edits: NAME-without-nic2-several-routes too
            if routes == "widest" or spec.count(SUFFIX) > 1:
                raise BadInput(f"{quote(spec)} names a machine of several routes"
                               + (" twice" if routes != "widest" else
                                  ", and --routes widest asks for one: give one of them"))
            return resolve(base_of(spec), boxes, edits, deadline, "several")
        healthy, named = split_name(spec)  # a degraded machine's name (a file names it)
        if named:
            return resolve(healthy, boxes, named + tuple(edits), deadline, routes)
    topo = _resolve(spec, deadline)
    pending = topo.edits  # a file's own edits, applied once its boxes are joined
    if pending:
        topo = replace(topo, edits=())
    if topo.repeat > 1:
        if boxes is not None:
            raise BadInput(f"{topo.name}: the file says boxes: {topo.repeat}; give --boxes "
                           "only for a file of one box")
        boxes, topo = topo.repeat, replace(topo, repeat=1)
    if boxes is not None:
        if any(v.kind == "net_switch" for v in topo.vertices):
            raise BadInput(f"{topo.name} already has a network switch: --boxes repeats one "
                           "box, joined by its network: section")
        topo = join_boxes(topo, boxes, name=f"{topo.name}x{boxes}")
    if routes == "several":
        topo = with_several_routes(topo)
    try:
        topo = degraded(topo, pending, deadline)
    except BadInput as e:
        raise BadInput(f"{spec}: {e}") from None
    return degraded(topo, edits, deadline)


def box_and_boxes(spec: str, boxes: int | None = None) -> tuple[Topology, int]:
    """The one box `spec` (with --boxes) is made of and how many copies: what a file of
    that box with `boxes: K` describes (synth calibrate writes one)."""
    cluster = named_cluster(spec) if isinstance(spec, str) else None
    if boxes is None and cluster:
        resolve(spec)  # the checks NAMExK has (its K, its size)
        return cluster
    topo = resolve(spec, boxes)
    if topo.boxes > 1:
        return replace(_resolve(spec), repeat=1), topo.boxes
    return topo, 1


def named_cluster(spec: str) -> tuple[Topology, int] | None:
    """(the box, K) for NAMExK of a built-in NAME, its network: as the box file says or
    as NAMExK's fabric options say (`dgxh100x128:clos,pod=16,over=7`:
    synth.topology.fabric); None for any other name. BadInput for bad options."""
    base, options = split_options(spec) or (spec, None)
    multi = re.fullmatch(r"(.+)x(\d+)", base)
    if not (multi and multi.group(1) in builtin_names()):
        return None
    box = load_topology_file(TOPOLOGY_DIR / f"{multi.group(1)}.yaml")
    if options is not None:
        if box.network is None:
            raise BadInput(f"{spec}: {box.name} has no network section, so no fabric")
        box = replace(box, network=with_options(box.network, options, spec))
    return box, int(multi.group(2))


def cluster_name(box: Topology, k: int) -> str:
    """NAMExK, with the fabric's options where they are not the box file's own: a name
    that resolves to the same machine, spelt one way."""
    own = load_topology_file(TOPOLOGY_DIR / f"{box.name}.yaml").network \
        if box.name in builtin_names() else box.network
    same = box.network == own
    return f"{box.name}x{k}" + ("" if same else f":{options_text(box.network)}")


def _resolve(spec: str, deadline: Deadline = Deadline()) -> Topology:
    if not isinstance(spec, str) or not spec.strip():
        raise BadInput("an empty topology name (try: synth topo list)")
    if len(spec) > 4096:
        raise BadInput(f"a topology name of {len(spec):,} characters (try: synth topo list)")
    if ":" in spec and spec.split(":", 1)[0] in GENERATORS:
        return generate(spec, deadline)
    if spec in builtin_names():
        return load_topology_file(TOPOLOGY_DIR / f"{spec}.yaml")
    cluster = named_cluster(spec)
    if cluster:
        box, k = cluster
        return join_boxes(box, k, name=cluster_name(box, k))
    if Path(spec).suffix.lower() in IMPORTED and _exists(spec):
        return imported(spec)
    if Path(spec).suffix.lower() in (".yaml", ".yml", ".json") or _exists(spec):
        return load_topology_file(spec)
    raise BadInput(f"unknown topology {quote(spec)} (try: synth topo list)")


def imported(path: str, **options) -> Topology:
    """The topology of an NCCL topology XML or nvidia-smi topo -m output
    (synth.topology.importing; `options` as `synth topo import` takes them)."""
    from synth.topology.importing import import_source, say_on_stderr  # loaded when used

    draft = import_source(path, **options, warn=None)
    try:
        topo = topology_from_dict(draft.to_dict())
    except BadInput as e:
        raise BadInput(f"{Path(path).name}: imported, but {e}") from None
    for text in draft.warnings:  # only once it imported: an error stays one line
        say_on_stderr(text)
    return topo


def _a_file(spec: str) -> bool:
    return Path(spec).suffix.lower() in (".yaml", ".yml", ".json") + IMPORTED or _exists(spec)


def _exists(path: str) -> bool:
    try:
        return Path(path).exists()
    except OSError:  # a name too long for the file system is no file
        return False


# --- generators -------------------------------------------------------------------

def generate(spec: str, deadline: Deadline = Deadline()) -> Topology:
    kind, _, arg = spec.partition(":")
    try:
        dims = [int(x) for x in arg.split("x")]
    except ValueError:
        raise BadInput(f"{spec}: expected {GENERATORS[kind].split()[0]}") from None
    if len(dims) > 3 or any(d > MAX_GPUS for d in dims):
        raise BadInput(f"{spec}: expected between 2 and {MAX_GPUS} GPUs")
    shape = {"mesh": 2, "hypercube": 1}.get(kind, 1)
    if kind == "torus":
        ok = len(dims) in (2, 3)
    else:
        ok = len(dims) == shape
    if not ok or any(d < 1 for d in dims):
        raise BadInput(f"{spec}: expected {GENERATORS[kind].split()[0]}")
    n = 2 ** min(dims[0], 13) if kind == "hypercube" else math.prod(dims)
    if n < 2 or n > MAX_GPUS:
        raise BadInput(f"{spec}: expected between 2 and {MAX_GPUS} GPUs, got "
                       f"{'more' if n > MAX_GPUS else n}")
    if kind == "fc" and n * (n - 1) > MAX_RANK_LINKS:
        raise BadInput(f"{spec}: {n * (n - 1):,} links, over the {MAX_RANK_LINKS:,} the "
                       "lowering can hold in memory")
    if kind == "switch":
        return _on_switch(spec, n)
    pairs = _generator_pairs(kind, dims, n, deadline)
    gpus = tuple(Vertex(f"gpu{i}", GPU) for i in range(n))
    links = []
    for a, b in in_time(pairs, deadline, f"building {spec}", 16384):
        links.append(Link(f"gpu{a}", f"gpu{b}", GEN_GBPS, 1, GEN_ALPHA_US))
        links.append(Link(f"gpu{b}", f"gpu{a}", GEN_GBPS, 1, GEN_ALPHA_US))
    shifts = {"ring": (n,), "fc": (n,), "torus": tuple(dims),
              "hypercube": (2,) * min(dims[0], 13)}.get(kind, ())
    return Topology(spec, GEN_GBPS, gpus, tuple(links), _described(kind, n),
                    translations=shifts)


def _described(kind: str, n: int) -> str:
    """A generated topology's description: what it is, not its usage ("torus:4x4:
    torus:RxC or torus:RxCxD grid with wrap-around" titled its pictures)."""
    what = {"ring": "in a bidirectional ring", "line": "in a chain",
            "fc": "each linked to every other", "mesh": "in a 2-D grid",
            "torus": "in a grid with wrap-around",
            "hypercube": "linked where their numbers differ in one bit",
            "switch": "on one non-blocking switch"}[kind]
    return f"{n} GPUs {what}, {GEN_GBPS:g} GB/s links"


def _generator_pairs(kind: str, dims: list[int], n: int, deadline: Deadline = Deadline()
                     ) -> list[tuple[int, int]]:
    """Undirected GPU pairs (a < b) that the generator links, in order; TimeLimit past
    `deadline` among fc's half a million (made in order: sorting them took a few tenths
    of a second that no deadline could interrupt)."""
    if kind == "fc":
        return list(in_time(itertools.combinations(range(n), 2), deadline,
                            f"building fc:{n}", 16384))
    pairs = set()

    def add(a, b):
        if a != b:
            pairs.add((min(a, b), max(a, b)))

    if kind == "ring":
        for i in range(n):
            add(i, (i + 1) % n)
    elif kind == "line":
        for i in range(n - 1):
            add(i, i + 1)
    elif kind == "hypercube":
        for a in range(n):
            for bit in range(dims[0]):
                add(a, a ^ (1 << bit))
    else:  # mesh and torus: coordinates in row-major order
        wrap = kind == "torus"
        for coord in itertools.product(*(range(d) for d in dims)):
            for axis, size in enumerate(dims):
                nxt = list(coord)
                nxt[axis] += 1
                if nxt[axis] == size:
                    if not wrap:
                        continue
                    nxt[axis] = 0
                add(_flat(coord, dims), _flat(nxt, dims))
    return sorted(pairs)


def _on_switch(spec: str, n: int) -> Topology:
    vertices = tuple(Vertex(f"gpu{i}", GPU) for i in range(n)) + (Vertex("switch", "nvswitch"),)
    links = []
    for i in range(n):
        links.append(Link(f"gpu{i}", "switch", GEN_GBPS, 1, GEN_ALPHA_US))
        links.append(Link("switch", f"gpu{i}", GEN_GBPS, 1, 0.0))
    return Topology(spec, GEN_GBPS, vertices, tuple(links), _described("switch", n),
                    translations=(n,))


def _flat(coord, dims) -> int:
    index = 0
    for c, d in zip(coord, dims):
        index = index * d + c
    return index


# --- multi-node -------------------------------------------------------------------

def join_boxes(box: Topology, k: int, name: str) -> Topology:
    """K copies of `box`, vertex names prefixed "nI.", GPUs numbered box by box.

    The box file's `network:` says how (synth.topology.fabric): single-switch hangs
    every NIC on one non-blocking switch "net"; rails hangs NIC j of every box on
    switch "railJ"; clos and fat-tree put leaves, a spine and maybe pods above them.
    """
    if box.network is None:
        raise BadInput(f"{box.name} has no network section: it cannot be joined into {name}")
    nics = [v.name for v in box.vertices if v.kind == NIC]
    if not nics:
        raise BadInput(f"{box.name} has no NICs: it cannot be joined into {name}")
    if not 1 <= k <= MAX_GPUS // box.ranks:
        raise BadInput(f"{name}: expected between 1 and {MAX_GPUS // box.ranks} boxes "
                       f"({MAX_GPUS} GPUs at most)")
    _refuse_by_size(box, k, len(nics), name)
    net = box.network
    switches, nic_links, upper = switches_and_links(net, nics, k)

    def local(b, v):
        return f"n{b}.{v}"

    # GPUs of every box first, so ranks run box by box in the box's own order.
    boxes = [(b, v) for b in range(k) for v in box.vertices]
    vertices = ([replace(v, name=local(b, v.name), box=b) for b, v in boxes if v.kind == GPU]
                + [replace(v, name=local(b, v.name), box=b) for b, v in boxes if v.kind != GPU])
    links = []
    for b in range(k):
        links += [replace(l, src=local(b, l.src), dst=local(b, l.dst)) for l in box.links]
        links += nic_links[b]
    links += upper
    description = f"{k} x {box.name} joined by their NICs ({describe(net, k, len(nics))})"
    topo = Topology(name, box.unit_gbps, tuple(vertices) + tuple(switches), tuple(links),
                    description, net, boxes=k, source=box.source,
                    assumptions=box.assumptions, figures=box.figures)
    validate(topo)
    return topo


def _refuse_by_size(box: Topology, k: int, nics: int, name: str) -> None:
    """K copies of `box` counted before any is built: a small file of one box with
    thousands of NICs would otherwise fill memory at K = 2048 (every copy, and a rail
    switch per NIC)."""
    switches = switch_count(box.network, nics, k)
    vertices = k * len(box.vertices) + switches
    uplinks = switches - 1 if box.network.tiers > 1 else 0  # all but the top tier's
    links = k * (len(box.links) + 2 * nics) + 2 * uplinks
    if vertices > MAX_VERTICES:
        raise BadInput(f"{name}: {k} boxes of {len(box.vertices):,} GPUs, switches and "
                       f"NICs make {vertices:,} (limit {MAX_VERTICES:,})")
    if links > MAX_LINKS:
        raise BadInput(f"{name}: {k} boxes of {len(box.links):,} links and {nics:,} "
                       f"NIC{'' if nics == 1 else 's'} make {links:,} links (limit "
                       f"{MAX_LINKS:,})")
