"""The physical topology: GPUs, switches and NICs joined by directed links.

A Topology is what a topology file describes; `synth.topology.linkmodel.lower` turns it into
the rank-to-rank model the solvers and the schedule file use. The file format is
documented in README.md ("Topology files"); `topology_from_dict` checks it and raises
BadInput with one line naming the first problem.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import networkx as nx

from synth.deadline import Deadline, TimeLimit, in_time
from synth.errors import BadInput
from synth.files import load_yaml, quote
from synth.topology.figures import Figures, figures_from_dict, figures_to_dict

GPU = "gpu"
NIC = "nic"
SWITCH_KINDS = ("nvswitch", "pcie_switch", "net_switch")
KINDS = (GPU, NIC) + SWITCH_KINDS
FABRICS = ("single-switch", "rails", "clos", "fat-tree")
TIERED = ("clos", "fat-tree")  # leaves, a spine and maybe pods (synth.topology.fabric)
# boxes per leaf switch unless leaf= says: a rail leaf of NVIDIA's DGX SuperPOD takes
# one rail of a scalable unit of 32 DGX H100s; a top-of-rack switch of Llama 3's
# clusters two 8-GPU servers (Llama 3 paper, section 3.3.1, 2024)
DEFAULT_LEAF = {"clos": 32, "fat-tree": 2}
CAPABILITIES = ("reduce", "multicast")  # what a switch may do besides forwarding
CAPABLE_KINDS = ("nvswitch", "net_switch")  # NVLink SHARP (NVLS), InfiniBand SHARP
MAX_GPUS = 4096  # the one cap on GPUs, for files, generators and NAMExK alike
MIN_GBPS, MAX_GBPS = 1e-3, 1e6  # GB/s of one lane: outside these, a typo
MAX_ALPHA_US = 1e6
MAX_LANES = 4096
MAX_VERTICES = 65536
MAX_TEXT = 2000  # characters of a source, assumption or inferred note
MAX_LINKS = 1 << 20  # directed links of a topology built from parts (--boxes K)

@dataclass(frozen=True)
class Vertex:
    name: str
    kind: str
    box: int | None = 0  # its box in a multi-node topology; None: between boxes
    inferred: str = ""  # why an imported vertex is believed to exist ("": read or given)
    can: tuple[str, ...] = ()  # a switch's in-network operations: "reduce", "multicast"


@dataclass(frozen=True)
class Link:
    """A directed physical link: `count` parallel lanes of `gbps` GB/s each."""

    src: str
    dst: str
    gbps: float
    count: int = 1
    alpha_us: float = 0.0
    inferred: str = ""  # why an imported link is believed to exist ("": read or given)

    @property
    def bandwidth(self) -> float:
        return self.gbps * self.count


@dataclass(frozen=True)
class Network:
    """How NAMExK joins boxes: every NIC on one switch, NIC k on rail switch k, or
    leaves, a spine and maybe pods (synth.topology.fabric); leaf and pod in boxes (0:
    the fabric's default leaf, no pods), over the top tier's oversubscription R:1."""

    fabric: str
    gbps: float
    alpha_us: float = 0.0
    sharp: bool = False  # the network switches reduce and multicast (InfiniBand SHARP)
    leaf: int = 0
    pod: int = 0
    over: float = 1.0

    @property
    def tiers(self) -> int:
        return 1 if self.fabric not in TIERED else 3 if self.pod else 2

    @property
    def leaf_boxes(self) -> int:
        """Boxes per leaf switch (tiered fabrics): leaf=, else the fabric's default,
        at most a pod."""
        return self.leaf or min(DEFAULT_LEAF.get(self.fabric, 1), self.pod or MAX_GPUS)


@dataclass(frozen=True)
class Topology:
    name: str
    unit_gbps: float
    vertices: tuple[Vertex, ...]
    links: tuple[Link, ...]
    description: str = ""
    network: Network | None = None
    boxes: int = 1
    source: str = ""  # where an imported topology came from
    assumptions: tuple[str, ...] = ()  # the numbers an import did not read, and why
    figures: "Figures | None" = None  # cost model 2's constants (`costs:`), None: defaults
    repeat: int = 1  # a file's `boxes: K`: K copies of this box (catalog.resolve joins them)
    # dims over which the generator's shifts map the graph onto itself
    # (synth.topology.symmetry; checked against the link model before use)
    translations: tuple[int, ...] = ()
    # a degraded machine (synth.topology.degrade): its edits as `--without` and
    # `--degrade` write them, and the machine before them, whose bounds the output
    # compares with; a file's `without:`/`degrade:` wait here (healthy None) until
    # catalog.resolve has joined its boxes
    edits: tuple[str, ...] = ()
    healthy: "Topology | None" = None
    said: tuple[str, ...] = ()  # what each edit did, in words (degrade.changes)
    several_routes: bool = False  # a GPU pair's routes besides its widest (several_routes)

    @property
    def gpus(self) -> list[str]:
        """GPU names in rank order."""
        return [v.name for v in self.vertices if v.kind == GPU]

    @property
    def ranks(self) -> int:
        return len(self.gpus)

    def vertex(self, name: str) -> Vertex:
        return next(v for v in self.vertices if v.name == name)

    def network_joined(self) -> bool:
        """Whether only network switches join its GPUs: without them, the GPUs fall
        apart into two or more parts (a cluster of boxes, NAMExK or a file's own)."""
        g = self.graph().to_undirected(as_view=True)
        inside = g.subgraph(v.name for v in self.vertices if v.kind != "net_switch")
        gpus = set(self.gpus)
        return sum(1 for part in nx.connected_components(inside) if part & gpus) > 1

    def graph(self) -> nx.DiGraph:
        """The physical graph; edge attribute `link` holds the Link."""
        g = nx.DiGraph()
        for v in self.vertices:
            g.add_node(v.name, kind=v.kind, box=v.box)
        for link in self.links:
            g.add_edge(link.src, link.dst, link=link)
        return g


# --- reading topology files -------------------------------------------------------

TOP_KEYS = {"name", "description", "unit_gbps", "gpus", "switches", "nics", "links", "network",
            "source", "assumptions", "costs", "boxes", "without", "degrade"}
LINK_KEYS = {"between", "from", "to", "gbps", "count", "alpha_us", "inferred"}


def load_topology_file(path: str | Path) -> Topology:
    """Read a YAML or JSON topology file (JSON is YAML), within synth.files' limits."""
    path = Path(path)
    doc = load_yaml(path, what="topology file")
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: expected a mapping at the top level")
    doc.setdefault("name", path.stem)
    try:
        return topology_from_dict(doc)
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


def topology_from_dict(doc: dict) -> Topology:
    """Build and validate a Topology from the file format's dictionary."""
    _check_keys(doc, TOP_KEYS, "")
    name = _string(doc.get("name", "custom"), "name")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise BadInput("description: expected a string")

    vertices: list[Vertex] = []
    gpus = doc.get("gpus")
    # at least 2: a collective of one GPU moves nothing (and has no bound to speak of)
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        if not 2 <= gpus <= MAX_GPUS:
            raise BadInput(f"gpus: expected between 2 and {MAX_GPUS} GPUs, got {quote(gpus)}")
        vertices += [Vertex(f"gpu{i}", GPU) for i in range(gpus)]
    elif isinstance(gpus, list) and 2 <= len(gpus) <= MAX_GPUS:
        vertices += [Vertex(_string(g, f"gpus[{i}]"), GPU) for i, g in enumerate(gpus)]
    elif isinstance(gpus, list) and gpus:
        raise BadInput(f"gpus: expected between 2 and {MAX_GPUS} GPUs, got {len(gpus)}")
    else:
        raise BadInput("gpus: expected a count or a list of names")
    for i, s in enumerate(_list(doc.get("switches", []), "switches")):
        if not isinstance(s, dict):
            raise BadInput(f"switches[{i}]: expected a mapping with name and kind")
        _check_keys(s, {"name", "kind", "inferred", "can"}, f"switches[{i}]")
        kind = s.get("kind")
        if kind not in SWITCH_KINDS:
            raise BadInput(f"switches[{i}].kind: expected one of {', '.join(SWITCH_KINDS)}, "
                           f"got {quote(kind)}")
        vertices.append(Vertex(_string(s.get("name"), f"switches[{i}].name"), kind,
                               inferred=_text(s.get("inferred", ""), f"switches[{i}].inferred"),
                               can=_capabilities(s.get("can", []), kind, f"switches[{i}]")))
    for i, n in enumerate(_list(doc.get("nics", []), "nics")):
        vertices.append(Vertex(_string(n, f"nics[{i}]"), NIC))
    if len(vertices) > MAX_VERTICES:
        raise BadInput(f"{len(vertices):,} GPUs, switches and NICs (limit {MAX_VERTICES:,})")
    seen: set[str] = set()
    for v in vertices:
        if v.name in seen:
            raise BadInput(f"duplicate vertex name '{v.name}'")
        seen.add(v.name)

    links: list[Link] = []
    for i, entry in enumerate(_list(doc.get("links"), "links")):
        links += _parse_link(entry, f"links[{i}]", seen)
    network = _parse_network(doc["network"]) if "network" in doc else None
    unit = doc.get("unit_gbps")
    if unit is None:  # the thinnest link touching a GPU
        gpus = {v.name for v in vertices if v.kind == GPU}
        unit = min((l.gbps for l in links if l.src in gpus or l.dst in gpus), default=1.0)
    source = _text(doc.get("source", ""), "source")
    assumptions = tuple(_text(a, f"assumptions[{i}]")
                        for i, a in enumerate(_list(doc.get("assumptions", []), "assumptions")))
    figures = figures_from_dict(doc["costs"]) if "costs" in doc else None
    repeat = doc.get("boxes", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat <= MAX_GPUS:
        raise BadInput(f"boxes: expected a whole number of boxes from 1 to {MAX_GPUS}, got "
                       f"{quote(repeat)}")
    if repeat > 1 and network is None:
        raise BadInput("boxes: copies of a box are joined by its network: section, and "
                       "this file has none")
    topo = Topology(name, _positive(unit, "unit_gbps", MAX_GBPS), tuple(vertices),
                    tuple(links), description, network, source=source,
                    assumptions=assumptions, figures=figures, repeat=repeat,
                    edits=_edits(doc))
    validate(topo)
    return topo


def topology_to_dict(topo: Topology) -> dict:
    """The file's dictionary that topology_from_dict reads back as `topo` (one box:
    `topo.repeat` copies of it are `boxes:`). A pair of links that are each other's
    reverse with the same figures is written once, as `between`. Edits still to apply
    (healthy None: a file's, or a healthy box with the edits of the cluster it makes) are
    written as `without:` and `degrade:`; a degraded machine as the links it has."""
    doc = {"name": topo.name, "description": topo.description, "unit_gbps": topo.unit_gbps,
           "gpus": topo.gpus}
    switches = [{"name": v.name, "kind": v.kind, **({"can": list(v.can)} if v.can else {}),
                 **({"inferred": v.inferred} if v.inferred else {})}
                for v in topo.vertices if v.kind in SWITCH_KINDS]
    nics = [v.name for v in topo.vertices if v.kind == NIC]
    doc.update({"switches": switches} if switches else {})
    doc.update({"nics": nics} if nics else {})
    links, done = [], set()
    by_pair = {(l.src, l.dst): l for l in topo.links}
    for l in topo.links:
        if (l.src, l.dst) in done:
            continue
        back = by_pair.get((l.dst, l.src))
        entry = {"gbps": l.gbps, "count": l.count, "alpha_us": l.alpha_us}
        if l.inferred:
            entry["inferred"] = l.inferred
        if back is not None and replace(back, src=l.src, dst=l.dst) == l:
            links.append({"between": [l.src, l.dst], **entry})
            done.add((l.dst, l.src))
        else:
            links.append({"from": l.src, "to": l.dst, **entry})
    doc["links"] = links
    if topo.network is not None:
        n = topo.network
        doc["network"] = {"fabric": n.fabric, "gbps": n.gbps, "alpha_us": n.alpha_us,
                          **({"sharp": True} if n.sharp else {}),
                          **({"leaf": n.leaf} if n.leaf else {}),
                          **({"pod": n.pod} if n.pod else {}),
                          **({"over": n.over} if n.over != 1 else {})}
    if topo.repeat > 1:
        doc["boxes"] = topo.repeat
    doc.update({"source": topo.source} if topo.source else {})
    doc.update({"assumptions": list(topo.assumptions)} if topo.assumptions else {})
    if topo.figures is not None:
        doc["costs"] = figures_to_dict(topo.figures)
    pending = topo.edits if topo.healthy is None else ()
    gone = [t for t in pending if "=" not in t]
    narrowed: dict[str, float] = {}
    for link, _, f in (t.rpartition("=") for t in pending if "=" in t):
        # `degrade:` holds a link once: one narrowed twice (--degrade L=0.5,L=0.5, as
        # synth calibrate writes it) is narrowed by the product, not by the last alone
        narrowed[link] = narrowed.get(link, 1.0) * float(f)
    doc.update({"without": gone} if gone else {})
    doc.update({"degrade": narrowed} if narrowed else {})
    return doc


def _edits(doc: dict) -> tuple[str, ...]:
    """A file's `without:` (NICs, switches, links, lanes) and `degrade:` (a link at a
    fraction of its width) as edit texts, applied once the machine is whole
    (synth.topology.degrade checks what they name)."""
    gone = _list(doc.get("without", []), "without")
    for i, text in enumerate(gone):
        _string(text, f"without[{i}]")
        if "=" in text:
            link, _, f = text.rpartition("=")
            raise BadInput(f"without[{i}]: {quote(text)} narrows a link: write it under "
                           f"degrade: {{{link}: {f}}}")
    narrowed = doc.get("degrade", {})
    if not isinstance(narrowed, dict):
        raise BadInput("degrade: expected a mapping of links to fractions (gpu0-nic0: 0.5)")
    texts = [f"{_string(link, 'degrade')}={_number(f, f'degrade.{link}', 1e-9, 1)!r}"
             for link, f in narrowed.items()]
    return tuple(gone) + tuple(texts)


def _parse_link(entry, where: str, names: set[str]) -> list[Link]:
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: expected a mapping")
    _check_keys(entry, LINK_KEYS, where)
    if "between" in entry:
        pair = entry["between"]
        if "from" in entry or "to" in entry:
            raise BadInput(f"{where}: give either between or from/to, not both")
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(end, str) for end in pair)):
            raise BadInput(f"{where}.between: expected two vertex names")
        ends = [(pair[0], pair[1]), (pair[1], pair[0])]
    elif "from" in entry and "to" in entry:
        ends = [(entry["from"], entry["to"])]
    else:
        raise BadInput(f"{where}: expected between: [a, b] or from: a and to: b")
    for a, b in ends:
        for end in (a, b):
            if not isinstance(end, str):
                raise BadInput(f"{where}: expected a vertex name, got {quote(end)}")
            if end not in names:
                raise BadInput(f"{where}: unknown vertex {quote(end)}")
        if a == b:
            raise BadInput(f"{where}: a link from '{a}' to itself")
    gbps = _positive(entry.get("gbps"), f"{where}.gbps", MAX_GBPS)
    count = entry.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_LANES:
        raise BadInput(f"{where}.count: expected a whole number from 1 to {MAX_LANES}, "
                       f"got {quote(count)}")
    alpha = _non_negative(entry.get("alpha_us", 0.0), f"{where}.alpha_us", MAX_ALPHA_US)
    inferred = _text(entry.get("inferred", ""), f"{where}.inferred")
    return [Link(a, b, gbps, count, alpha, inferred) for a, b in ends]


def _parse_network(doc) -> Network:
    if not isinstance(doc, dict):
        raise BadInput("network: expected a mapping with fabric, gbps, alpha_us")
    _check_keys(doc, {"fabric", "gbps", "alpha_us", "sharp", "leaf", "pod", "over"},
                "network")
    if doc.get("fabric") not in FABRICS:
        raise BadInput(f"network.fabric: expected one of {', '.join(FABRICS)}")
    alpha = _non_negative(doc.get("alpha_us", 0.0), "network.alpha_us", MAX_ALPHA_US)
    sharp = doc.get("sharp", False)
    if not isinstance(sharp, bool):
        raise BadInput(f"network.sharp: expected true or false, got {quote(sharp)}")
    for key in ("leaf", "pod"):  # 0 stands for "not given" inside, never in a file
        if doc.get(key, 1) == 0 and not isinstance(doc[key], bool):
            raise BadInput(f"network.{key}: expected a whole number of boxes from 1 to "
                           f"4096, got 0 (leave it out for the fabric's default)")
    return checked(Network(doc["fabric"], _positive(doc.get("gbps"), "network.gbps",
                                                     MAX_GBPS),
                           alpha, sharp, doc.get("leaf", 0), doc.get("pod", 0),
                           doc.get("over", 1.0)))


MAX_OVER = 1000.0  # a fabric's oversubscription R (R:1) at most


def checked(net: Network, name: str = "") -> Network:
    """`net` when its options fit its fabric; BadInput, one line naming the key (as
    `network.KEY` of a file, or as `KEY=VALUE` of NAMExK `name`)."""
    def where(key):
        return f"{name}: {key}={getattr(net, key):.12g}" if name else f"network.{key}"

    if net.fabric not in FABRICS:
        raise BadInput(f"network.fabric: expected one of {', '.join(FABRICS)}, got "
                       f"{quote(net.fabric)}")
    given = [k for k, default in (("leaf", 0), ("pod", 0), ("over", 1.0))
             if getattr(net, k) != default]
    if net.fabric not in TIERED and given:
        raise BadInput(f"{where(given[0])}: only a clos or fat-tree fabric has leaves, "
                       f"pods and oversubscription ({net.fabric} has one switch layer)")
    for key in ("leaf", "pod"):
        value = getattr(net, key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 4096:
            raise BadInput(f"network.{key}: expected a whole number of boxes from 1 to "
                           f"4096, got {quote(value)}")
    # an int is compared, never converted: isfinite(10**400) raised OverflowError
    if not (isinstance(net.over, (int, float)) and not isinstance(net.over, bool)
            and (isinstance(net.over, int) or math.isfinite(net.over))
            and 1 <= net.over <= MAX_OVER):
        raise BadInput(f"{where('over') if name else 'network.over'}: expected an "
                       f"oversubscription R (R:1) from 1 to {MAX_OVER:g}, got "
                       f"{quote(net.over)}")
    if net.pod and net.pod % net.leaf_boxes:
        raise BadInput(f"{where('pod')}: a pod of {net.pod} boxes is not whole leaves of "
                       f"{net.leaf_boxes} boxes (give leaf= a divisor of pod=)")
    return replace(net, over=float(net.over))


def _capabilities(x, kind: str, where: str) -> tuple[str, ...]:
    """A switch's `can:` list: known operations, on a kind of switch that has them."""
    names = _list(x, f"{where}.can")
    for name in names:
        if name not in CAPABILITIES:
            raise BadInput(f"{where}.can: unknown capability {quote(name)} (expected "
                           f"{' or '.join(CAPABILITIES)})")
    if names and kind not in CAPABLE_KINDS:
        raise BadInput(f"{where}.can: a {kind} cannot {names[0]}: only an NVSwitch (NVLink "
                       "SHARP) or a network switch (InfiniBand SHARP) computes in the network")
    return tuple(sorted(set(names)))


def validate(topo: Topology, deadline: Deadline = Deadline()) -> None:
    """Whole-topology checks: no duplicate links, every GPU reaches every other.
    TimeLimit past `deadline` (a million links: about a second)."""
    seen = set()
    for link in in_time(topo.links, deadline, f"checking {topo.name}", 16384):
        if (link.src, link.dst) in seen:
            raise BadInput(f"duplicate link {link.src} -> {link.dst} (use count for "
                           "parallel lanes)")
        seen.add((link.src, link.dst))
    gpus = topo.gpus
    # plain successor lists, not networkx: fc:1049's 1.1 million links took 3.7 s as a
    # graph, before any time limit is looked at
    succ, pred = defaultdict(list), defaultdict(list)
    for link in in_time(topo.links, deadline, f"checking {topo.name}", 16384):
        succ[link.src].append(link.dst)
        pred[link.dst].append(link.src)
    if deadline.passed():  # each search below is a pass over the links
        raise TimeLimit(f"checking {topo.name}")
    reach, back = _reached(succ, gpus[0]), _reached(pred, gpus[0])
    for gpu in gpus:
        if gpu not in reach:
            raise BadInput(f"GPU '{gpu}' cannot be reached from '{gpus[0]}'")
        if gpu not in back:
            raise BadInput(f"GPU '{gpu}' cannot reach '{gpus[0]}'")


def _reached(neighbours: dict, start: str) -> set[str]:
    """Every vertex reached from `start` along `neighbours` (start included)."""
    seen, todo = {start}, [start]
    while todo:
        for v in neighbours[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return seen


def _check_keys(doc: dict, allowed: set[str], where: str) -> None:
    for key in doc:
        if key not in allowed:
            prefix = f"{where}: " if where else ""
            raise BadInput(f"{prefix}unknown key {quote(key)} (expected "
                           f"{', '.join(sorted(allowed))})")


def _number(x, where: str, lo: float, hi: float) -> float:
    """x as a float when it is a finite number from lo to hi; one line naming the field
    otherwise. Huge integers (10**400) are compared, never converted, so they cannot
    overflow."""
    if x is None:  # a key left out (or given empty)
        raise BadInput(f"{where}: missing (expected a number from {lo:g} to {hi:g})")
    ok = isinstance(x, (int, float)) and not isinstance(x, bool)
    if ok and isinstance(x, float):
        ok = math.isfinite(x)
    if not (ok and lo <= x <= hi):
        raise BadInput(f"{where}: expected a number from {lo:g} to {hi:g}, got {quote(x)}")
    return float(x)


def _positive(x, where: str, hi: float) -> float:
    return _number(x, where, MIN_GBPS, hi)


def _non_negative(x, where: str, hi: float) -> float:
    return _number(x, where, 0, hi)


def _text(x, where: str) -> str:
    """A possibly empty string of at most MAX_TEXT characters."""
    if not isinstance(x, str) or len(x) > MAX_TEXT:
        raise BadInput(f"{where}: expected a string of at most {MAX_TEXT} characters")
    return x


def _string(x, where: str) -> str:
    if not isinstance(x, str) or not x:
        raise BadInput(f"{where}: expected a non-empty string, got {quote(x)}")
    if len(x) > 200:
        raise BadInput(f"{where}: a name of {len(x)} characters (at most 200)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in x):
        raise BadInput(f"{where}: {quote(x)} contains control characters")
    return x


def _list(x, where: str) -> list:
    if not isinstance(x, list):
        raise BadInput(f"{where}: expected a list")
    return x
