"""What an import builds: the parts of a topology file, each with where it came from.

A Draft is the topology file's content before it is written: every vertex and link
carries a note (where its numbers came from, shown as a comment in the file) and,
when it was deduced rather than read, why it is believed to exist (`inferred`, which the
file keeps so `synth topo show` and `draw` can mark it). `to_dict` gives the file's
mapping (synth.topology.physical reads it back); `to_yaml` the text with the notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.topology.importing.hardware import NETWORK_ALPHA_US


@dataclass
class Part:
    name: str
    kind: str  # gpu, nic, nvswitch, pcie_switch
    note: str = ""
    inferred: str = ""
    can: tuple[str, ...] = ()  # an NVSwitch that reduces and multicasts (NVLS)


@dataclass
class Wire:
    """Both directions of a link (as the file's `between:`)."""

    a: str
    b: str
    gbps: float
    count: int = 1
    alpha_us: float = 0.0
    note: str = ""
    inferred: str = ""
    # nvlink (the GPUs' own fabric: NVLink, or AMD's xGMI), pcie (a is the parent in the
    # PCIe tree) or socket
    kind: str = "pcie"


@dataclass
class Draft:
    name: str
    description: str
    source: str
    parts: list[Part] = field(default_factory=list)
    wires: list[Wire] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    network: dict | None = None  # the file's network: section
    network_note: str = ""
    warnings: list[str] = field(default_factory=list)  # said on stderr as well
    arch: str = ""  # the GPUs' architecture (cost model 2's tables), "" when unknown
    figures: dict = field(default_factory=dict)  # cost model 2's others (`costs:`)
    gpu_link: str = "NVLink"  # what the GPUs' own links are called, for notes
    _taken: set = field(default_factory=set, repr=False)
    _suffix: dict = field(default_factory=dict, repr=False)  # name -> the next k to try

    def add(self, name: str, kind: str, note: str = "", inferred: str = "",
            can: tuple[str, ...] = ()) -> str:
        """A vertex named `name`, or name-2, name-3, ... when that is taken (two NICs
        of one name, a NIC called gpu0); returns the name given. Each name remembers
        the suffix it reached, so n ports of one name cost O(n), not O(n^2)."""
        unique, k = name, self._suffix.get(name, 1)
        while unique in self._taken:
            k += 1
            unique = f"{name}-{k}"
        self._suffix[name] = k
        self._taken.add(unique)
        self.parts.append(Part(unique, kind, clean(note), clean(inferred), can))
        return unique

    def drop(self, names: set[str]) -> None:
        """Leave out the parts named (and nothing else: their wires go first)."""
        self.parts = [p for p in self.parts if p.name not in names]
        self._taken -= names

    def link(self, a: str, b: str, gbps: float, count: int = 1, alpha_us: float = 0.0,
             note: str = "", inferred: str = "", kind: str = "pcie") -> None:
        self.wires.append(Wire(a, b, round(gbps, 4), count, alpha_us, clean(note),
                               clean(inferred), kind))

    def retract(self, start: str) -> None:
        """Forget the assumptions that start with `start` (about parts left out)."""
        self.assumptions = [a for a in self.assumptions if not a.startswith(start)]

    def warn(self, text: str) -> None:
        """Something the user must not miss: kept as an assumption and in the
        description, and said on stderr (synth.topology.importing.import_source)."""
        self.warnings.append(clean(text, 300))
        self.assume(text)

    def assume(self, text: str) -> None:
        text = clean(text)
        if text not in self.assumptions:
            self.assumptions.append(text)

    def join_by_network(self, nics: int, gbps: float, how: str, assumed: bool,
                        fabric: str | None) -> None:
        """The network: section that --boxes K joins copies of this box by: `fabric`
        (default rails with 2+ NICs), each NIC at `gbps` (found `how`)."""
        if assumed:
            self.assume(f"NIC speed {gbps:g} GB/s: {how}; the source gives none (give "
                        "--nic-gbps)")
        fabric = fabric or ("rails" if nics > 1 else "single-switch")
        self.network = {"fabric": fabric, "gbps": round(gbps, 4), "alpha_us": NETWORK_ALPHA_US}
        self.network_note = (f"--boxes K joins K copies: {fabric}; {gbps:g} GB/s per NIC "
                             f"({how}); {NETWORK_ALPHA_US:g} us, InfiniBand as the built-ins")

    def of_kind(self, *kinds: str) -> list[Part]:
        return [p for p in self.parts if p.kind in kinds]

    def to_dict(self) -> dict:
        doc = {"name": self.name, "description": self.description, "source": self.source,
               "unit_gbps": self.unit_gbps(),
               "gpus": [p.name for p in self.of_kind("gpu")],
               "switches": [_switch(p) for p in self.of_kind("nvswitch", "pcie_switch")],
               "nics": [p.name for p in self.of_kind("nic")],
               "links": [_link(w) for w in self.wires]}
        if not doc["nics"]:
            del doc["nics"]
        if self.network:
            doc["network"] = dict(self.network)
        if self.assumptions:
            doc["assumptions"] = list(self.assumptions)
        if self.arch or self.figures:  # no arch: the reader's fallback (ampere)
            doc["costs"] = {**({"arch": self.arch} if self.arch else {}), **self.figures}
        return doc

    def unit_gbps(self) -> float:
        """The capacity unit: one lane of the first NVLink listed, else of the first
        link of a GPU, so capacities are small whole numbers."""
        gpus = {p.name for p in self.of_kind("gpu")}
        lanes = [w.gbps for w in self.wires if w.a in gpus or w.b in gpus]
        nvlink = [w.gbps for w in self.wires if w.kind == "nvlink"]
        return (nvlink or lanes or [1.0])[0]

    def to_yaml(self) -> str:
        """The topology file: YAML whose every entry has its note as a comment."""
        doc = self.to_dict()
        lines = [f"# {line}" for line in _wrap(clean(f"Imported by `synth topo import` "
                                                     f"from {self.source}."))]
        if self.assumptions:
            lines.append("# Assumed, not read from the source:")
            lines += [f"#   - {a}" for a in self.assumptions]
        lines += [f"name: {_q(doc['name'])}", f"description: {_q(doc['description'])}",
                  f"source: {_q(doc['source'])}",
                  f"unit_gbps: {_q(float(doc['unit_gbps']))}  # one capacity unit: a lane "
                  "of the first GPU link listed (NVLink or xGMI where there is any)",
                  "gpus:"]
        lines += [f"  - {_q(p.name)}" + _comment(p.note) for p in self.of_kind("gpu")]
        switches = self.of_kind("nvswitch", "pcie_switch")
        if switches:
            lines.append("switches:")
            lines += [f"  - {_flow(_switch(p))}" + _comment(p.note) for p in switches]
        if self.of_kind("nic"):
            lines.append("nics:")
            lines += [f"  - {_q(p.name)}" + _comment(p.note) for p in self.of_kind("nic")]
        lines.append("links:")
        lines += [f"  - {_flow(_link(w))}" + _comment(w.note) for w in self.wires]
        if self.network:
            lines.append(f"network: {_flow(self.network)}" + _comment(self.network_note))
        if self.assumptions:
            lines.append("assumptions:")
            lines += [f"  - {_q(a)}" for a in self.assumptions]
        if "costs" in doc:
            lines.append(f"costs: {_flow(doc['costs'])}  # cost model 2's tables "
                         "(docs/cost-model.md)")
        return "\n".join(lines) + "\n"


def vertex_name(text: str, fallback: str, fill: str = "_") -> str:
    """`text` as a name: letters, digits, '_', '-', '.' kept, anything else `fill`, at
    most 40 characters; `fallback` when nothing is left."""
    return "".join(ch if ch.isalnum() or ch in "_-." else fill for ch in text)[:40] or fallback


def _switch(p: Part) -> dict:
    out = {"name": p.name, "kind": p.kind}
    if p.can:
        out["can"] = list(p.can)
    if p.inferred:
        out["inferred"] = p.inferred
    return out


def _link(w: Wire) -> dict:
    out = {"between": [w.a, w.b], "gbps": w.gbps}
    if w.count != 1:
        out["count"] = w.count
    if w.alpha_us:
        out["alpha_us"] = w.alpha_us
    if w.inferred:
        out["inferred"] = w.inferred
    return out


def _q(x) -> str:
    """A scalar in YAML: text double-quoted with every character that is not printable
    ASCII escaped (\\uXXXX, \\UXXXXXXXX: what YAML and libyaml read back); numbers in
    plain decimals (YAML 1.1 reads 1e+06 as text)."""
    if isinstance(x, str):
        out = []
        for ch in x:
            if ch in '"\\':
                out.append("\\" + ch)
            elif " " <= ch <= "~":
                out.append(ch)
            else:
                out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        return '"' + "".join(out) + '"'
    if isinstance(x, float):
        return _decimal(x)
    return str(x)


def _decimal(x: float) -> str:
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def clean(text: str, limit: int = 1900) -> str:
    """Text for a comment or a note: one line of printable characters (a line break or
    control character from a source would end the comment), at most `limit` long."""
    one = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return one if len(one) <= limit else one[:limit - 3] + "..."


def _flow(d: dict) -> str:
    items = []
    for k, v in d.items():
        if isinstance(v, list):
            items.append(f"{k}: [{', '.join(_q(x) for x in v)}]")
        else:
            items.append(f"{k}: {_q(v)}")
    return "{" + ", ".join(items) + "}"


def _comment(note: str) -> str:
    return f"  # {clean(note)}" if note else ""


def _wrap(text: str, width: int = 86) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])
