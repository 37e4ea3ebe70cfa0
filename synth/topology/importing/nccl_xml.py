"""NCCL's topology XML, both kinds people have, as a Draft.

    <system version="1">
      <cpu numaid="0" vendor="GenuineIntel" modelid="143" ...>      a socket
        <pci busid="..." class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
          <pci busid="..." class="0x030200" ...>                      a GPU (0x03....)
            <gpu dev="0" sm="90" rank="0">
              <nvlink target="0000:f3:00.0" count="5" tclass="0x068000"/>  to an NVSwitch
            </gpu>
          </pci>
          <pci busid="..." class="0x020700" ...>                      a NIC (0x02....)
            <nic><net name="mlx5_0" speed="400000" .../></nic>        speed in Mb/s
          </pci>
        </pci>
      </cpu>
    </system>

RCCL's dump (AMD GPUs: a `gcn` architecture, `xgmi` links, class 0x120000 GPUs) is
read the same way but for its GPU links (rccl.py).

The full dump (NCCL_TOPO_DUMP_FILE) has the gpu, nvlink and net elements; the partial
files clouds publish for NCCL_TOPO_FILE have only cpu and pci entries with PCI classes,
so their NVLinks come from the GPU model (`--gpu`) or are left out, and their NIC speed
is assumed. Classes, as NCCL reads them: 0x0604xx a PCIe bridge or switch, 0x03xxxx a
GPU (RCCL: 0x120000 too), 0x02xxxx a NIC, an nvlink's tclass 0x068000 an NVSwitch; every NVSwitch a GPU
reaches is folded into one vertex, as the built-ins (and NCCL's NVS node) do.

Parsing is strict and safe: expat with no DOCTYPE allowed (so no entity is ever
declared or expanded: no billion laughs, no external entities); every problem is one
BadInput naming the line.
"""

from __future__ import annotations

import xml.parsers.expat as expat
from dataclasses import dataclass, field
from itertools import combinations

from synth.errors import BadInput
from synth.topology.importing import rccl
from synth.topology.importing.draft import Draft, vertex_name
from synth.topology.importing.hardware import (CUBE_MESH, GPU_MODELS, MAX_NVLINKS, arch_of,
                                               NET_GBPS_PER_MBPS, NVLINK_ALPHA_US,
                                               NVLINK_GBPS, NVSWITCH_ALPHA_US, GpuModel,
                                               nic_speed, nvlink_what, pcie_gbps,
                                               socket_gbps, switch_computes)
from synth.topology.physical import MAX_GPUS

NVSWITCH_CLASS = "0x068000"
ACCELERATOR_CLASS = "0x120000"  # a processing accelerator: RCCL counts it a GPU (MI300X)
MAX_ELEMENTS = 100_000  # a dump of a large node has a few hundred
MAX_DEPTH = 64  # PCIe trees are a few levels deep; the walk below recurses per level
MAX_SOCKETS = 64  # sockets are joined pairwise
MAX_WIDTH = 64  # PCIe lanes of one link (x32 is the widest the standard has)
MAX_NET_MBPS = 100_000_000  # 100 Tb/s: past it, a typo


@dataclass
class Element:
    tag: str
    attrs: dict
    line: int
    children: list = field(default_factory=list)


def parse(text: str, where: str) -> Element:
    """The XML's root element; BadInput names the line of the first problem."""
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[Element] = [Element("", {}, 0)]
    count = [0]

    def refuse(*_):
        raise BadInput(f"{where}: line {parser.CurrentLineNumber}: a DOCTYPE or entity "
                       "declaration (refused: NCCL's files have none)")

    def start(tag, attrs):
        count[0] += 1
        if count[0] > MAX_ELEMENTS:
            raise BadInput(f"{where}: more than {MAX_ELEMENTS:,} elements")
        if len(stack) > MAX_DEPTH:
            raise BadInput(f"{where}: line {parser.CurrentLineNumber}: elements nested "
                           f"over {MAX_DEPTH} deep")
        e = Element(tag, attrs, parser.CurrentLineNumber)
        stack[-1].children.append(e)
        stack.append(e)

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = lambda tag: stack.pop()
    try:
        parser.Parse(text, True)
    except expat.ExpatError as e:
        raise BadInput(f"{where}: line {e.lineno}: malformed XML "
                       f"({expat.errors.messages[e.code]})") from None
    root = stack[0].children[0]
    if root.tag != "system":
        raise BadInput(f"{where}: line {root.line}: expected <system> at the top, got "
                       f"<{root.tag[:40]}>")
    return root


@dataclass
class _Gpu:
    busid: str
    line: int
    order: tuple  # rank, dev, or bus order
    sm: int | None
    nvlinks: list  # (target, count, tclass, line): nvlink elements, xgmi under RCCL
    parent: str
    pcie: tuple[float, str]
    name: str = ""
    gcn: str | None = None  # an AMD GPU's architecture (RCCL's dump), e.g. gfx942


def from_xml(text: str, where: str, name: str, gpu: GpuModel | None = None,
             nic_gbps: float | None = None, fabric: str | None = None) -> Draft:
    """The Draft of an NCCL topology XML (module docstring)."""
    root = parse(text, where)
    _count_gpus(root, where)
    tree = _Tree(Draft(name, "", f"NCCL topology XML {where}"), where)
    draft, gpus = tree.draft, tree.gpus
    tree.sockets(root)
    if not gpus:
        raise BadInput(f"{where}: no GPU in the file (GPUs are pci elements of class "
                       "0x03xxxx or 0x120000)")
    if len(gpus) < 2:
        raise BadInput(f"{where}: one GPU (line {gpus[0].line}): a collective needs two")
    gcn = rccl.architecture(gpus, where)
    if gcn is None:
        _add_gpus(draft, gpus, where, gpu)
        sms = sorted({g.sm for g in gpus if g.sm})
        draft.arch = arch_of(sms[0] if sms else (gpu.sm if gpu else None))
        label = f"SM{sms[0]}" if len(sms) == 1 else ""
    else:
        if gpu is not None:
            raise BadInput(f"{where}: RCCL's dump of AMD GPUs ({gcn[:40]}), whose links it "
                           f"lists; --gpu {gpu.name} names an NVIDIA model")
        rccl.add_xgmi(draft, gpus, _place_gpus(draft, gpus, where), gcn, where)
        label = rccl.describe(draft, gcn)
    _add_nics(draft, tree.nics, nic_gbps, gpu, fabric)
    draft.description = (f"{len(gpus)} GPUs{f' ({label})' if label else ''}, "
                         f"{_nics(len(draft.of_kind('nic')))}, imported from {where}")
    return draft


class _Tree:
    """The walk down the sockets' PCIe trees: switches go into the draft as they are
    met; GPUs and NICs are collected (as _Gpu and NIC tuples) to be added in order."""

    def __init__(self, draft: Draft, where: str):
        self.draft, self.where = draft, where
        self.gpus: list[_Gpu] = []
        self.nics: list[tuple[str, float | None, str, tuple[float, str], int]] = []
        self.counter = {"pcie": 0, "nic": 0}

    def sockets(self, root: Element) -> None:
        """Each CPU with devices (one with nothing under it joins nothing: left out, as
        sockets are joined pairwise), its tree, and the links between sockets."""
        sockets = [c for c in root.children if c.tag == "cpu" and c.children]
        if len(sockets) > MAX_SOCKETS:
            raise BadInput(f"{self.where}: {len(sockets)} CPU sockets with devices (at most "
                           f"{MAX_SOCKETS})")
        cpus = []
        for i, c in enumerate(sockets):
            numa = c.attrs.get("numaid", str(i))
            vendor = c.attrs.get("vendor", "")
            cpu = self.draft.add(f"cpu{len(cpus)}", "pcie_switch",
                                 f"CPU socket, NUMA node {numa} "
                                 f"({vendor or 'vendor not given'}), line {c.line}: the "
                                 "root of its PCIe tree")
            cpus.append((cpu, vendor, _int(c, "modelid", self.where, None)))
            self.walk(c, cpu)
        for (a, vendor, model), (b, _, _) in combinations(cpus, 2):
            gbps, what = socket_gbps(vendor, model)
            self.draft.link(a, b, gbps, note=f"between sockets: {what}", kind="socket")
            self.draft.assume(f"between CPU sockets: {gbps:g} GB/s, {what}")

    def walk(self, e: Element, parent: str) -> None:
        for c in e.children:
            if c.tag == "pci":
                self.pci(c, parent)
            elif c.tag == "nic":  # a NIC straight on the CPU, no PCIe link in the file
                for net in (n for n in c.children if n.tag == "net"):
                    self.nics.append((parent, _net_speed(net, self.where),
                                      _net_name(net, self.counter),
                                      (0.0, "no PCIe link in the file"), net.line))

    def pci(self, e: Element, parent: str) -> None:
        cls = e.attrs.get("class", "").lower()
        width = _int(e, "link_width", self.where, 0)
        if not 0 <= width <= MAX_WIDTH:
            raise BadInput(f"{self.where}: line {e.line}: link_width {width} (expected 0 "
                           f"to {MAX_WIDTH})")
        link = pcie_gbps(e.attrs.get("link_speed", ""), width)
        if is_gpu_class(cls):
            self.gpus.append(_read_gpu(e, parent, link, self.where))
        elif cls.startswith("0x02"):
            self.nic(e, parent, link)
        elif cls == NVSWITCH_CLASS:
            return  # an NVSwitch device: its links come from the GPUs' nvlink entries
        elif any(c.tag in ("pci", "nic") for c in e.children):
            # a bridge or switch (0x0604..), or a device NCCL treats as one; with nothing
            # below it there is nothing to route through
            here = self.switch(f"PCIe bridge/switch {e.attrs.get('busid') or '(no busid)'}, "
                               f"line {e.line}", parent, link)
            self.walk(e, here)

    def switch(self, note: str, parent: str, link: tuple[float, str]) -> str:
        self.counter["pcie"] += 1
        here = self.draft.add(f"pcie{self.counter['pcie']}", "pcie_switch", note)
        self.draft.link(parent, here, link[0], note=link[1])
        return here

    def nic(self, e: Element, parent: str, link: tuple[float, str]) -> None:
        nets = [n for c in e.children if c.tag == "nic" for n in c.children
                if n.tag == "net"]
        at = parent
        if len(nets) > 1:  # one card, several ports: the card is a small switch
            at = self.switch(f"NIC card {e.attrs.get('busid', '')} ({len(nets)} ports), "
                             f"line {e.line}", parent, link)
            link = (link[0], "the card's ports")
        for net in nets or [None]:
            if net is None:
                self.nics.append((at, None, _net_name(None, self.counter), link, e.line))
            else:
                self.nics.append((at, _net_speed(net, self.where),
                                  _net_name(net, self.counter), link, net.line))


def _read_gpu(e: Element, parent: str, link: tuple[float, str], where: str) -> _Gpu:
    """A GPU's pci element: its gpu child's sm, rank, dev and nvlinks."""
    busid = e.attrs.get("busid", "")
    inner = [g for g in e.children if g.tag == "gpu"]
    g = inner[0] if inner else None
    if g is None:  # a partial file: the class alone
        return _Gpu(busid.lower(), e.line, (None, None, busid), None, [], parent, link)
    sm = _int(g, "sm", where, None)
    if sm is None:
        raise BadInput(f"{where}: line {g.line}: a <gpu> without sm (its SM version, e.g. "
                       "sm=\"90\")")
    order = (_int(g, "rank", where, None), _int(g, "dev", where, None), busid)
    gcn = rccl.gcn_name(g.attrs["gcn"]) if g.attrs.get("gcn", "").strip() else None
    tag = "nvlink" if gcn is None else "xgmi"
    links = [(n.attrs.get("target", ""), _count(n, where), n.attrs.get("tclass", "").lower(),
              n.line) for n in g.children if n.tag == tag]
    return _Gpu(busid.lower(), e.line, order, sm, links, parent, link, gcn=gcn)


def _place_gpus(draft: Draft, gpus: list[_Gpu], where: str) -> dict:
    """The GPUs in rank order (rank, else dev, else bus order) and their PCIe links;
    returns bus id -> GPU."""
    gpus.sort(key=lambda g: (g.order[0] is None, g.order[0] or 0, g.order[1] is None,
                             g.order[1] or 0, g.order[2]))
    by_bus = {}
    for i, g in enumerate(gpus):
        label = g.gcn[:40] if g.gcn else f"SM{g.sm}" if g.sm else ""
        g.name = draft.add(f"gpu{i}", "gpu", f"bus {g.busid or '?'}, line {g.line}"
                           + (f", {label}" if label else ""))
        draft.link(g.parent, g.name, g.pcie[0], note=g.pcie[1])
        if g.busid in by_bus:  # its NVLinks could not be told from the other's
            raise BadInput(f"{where}: line {g.line}: two GPUs with bus id "
                           f"{g.busid[:40]!r} (also at line {by_bus[g.busid].line}): "
                           "its links cannot be told apart")
        if g.busid:
            by_bus[g.busid] = g
    return by_bus


def _add_gpus(draft: Draft, gpus: list[_Gpu], where: str, model: GpuModel | None) -> None:
    """The GPUs (_place_gpus) and their NVLinks: read where the file lists them, else
    from the GPU model."""
    by_bus = _place_gpus(draft, gpus, where)
    listed = any(g.nvlinks for g in gpus)
    if listed:
        _read_nvlinks(draft, gpus, by_bus, where)
        if model is not None:
            draft.assume(f"--gpu {model.name}: its NVLinks not used, the file lists them")
    elif model is not None:
        _model_nvlinks(draft, gpus, model, where)
    else:
        draft.warn(f"{where} lists no NVLink (a partial NCCL_TOPO_FILE has none): imported "
                   f"as PCIe only; if its GPUs have NVLink, give --gpu "
                   f"({', '.join(GPU_MODELS)})")


def _read_nvlinks(draft: Draft, gpus: list[_Gpu], by_bus: dict, where: str) -> None:
    switch_lanes, switches, pairs = {}, set(), {}
    for g in gpus:
        for target, count, tclass, line in g.nvlinks:
            target = target.lower()
            if target == g.busid:
                raise BadInput(f"{where}: line {line}: an nvlink from GPU {g.busid} to "
                               "itself")
            if tclass == NVSWITCH_CLASS:
                switch_lanes[g.name] = switch_lanes.get(g.name, 0) + count
                switches.add(target)
            elif target in by_bus:
                pair = tuple(sorted((g.name, by_bus[target].name)))
                pairs.setdefault(pair, count)
            else:
                raise BadInput(f"{where}: line {line}: an nvlink to an unknown bus id "
                               f"{target[:40]!r} (no GPU has it, and tclass {tclass or '?'} "
                               f"is not an NVSwitch's {NVSWITCH_CLASS})")
    sm_of = {g.name: g.sm for g in gpus}
    for g in gpus:
        if (g.name in switch_lanes or any(g.name in p for p in pairs)) \
                and g.sm not in NVLINK_GBPS:
            raise BadInput(f"{where}: line {g.line}: unknown SM {g.sm} (NVLink bandwidth "
                           f"known for SM {', '.join(map(str, NVLINK_GBPS))})")
    if switch_lanes:
        on = [g for g in gpus if g.name in switch_lanes]
        nvls = all(switch_computes(g.sm) for g in on)
        draft.add("nvswitch", "nvswitch",
                  f"{len(switches)} NVSwitch{'es' if len(switches) > 1 else ''} "
                  f"({', '.join(sorted(switches)[:8])}) folded into one vertex: they "
                  "forward as one non-blocking fabric"
                  + ("; SM90+ GPUs: they reduce and multicast (NVLS)" if nvls else ""),
                  can=("multicast", "reduce") if nvls else ())
        for g in on:
            gbps = NVLINK_GBPS[g.sm]
            draft.link(g.name, "nvswitch", gbps, switch_lanes[g.name], NVSWITCH_ALPHA_US,
                       note=f"{switch_lanes[g.name]} NVLinks (read) at {gbps:g} GB/s "
                       f"each: the {nvlink_what(g.sm)}", kind="nvlink")
            draft.assume(f"NVLink: {gbps:g} GB/s per link and direction, the "
                         f"{nvlink_what(g.sm)}")
    for (a, b), count in sorted(pairs.items()):
        gbps = NVLINK_GBPS[sm_of[a]]
        draft.link(a, b, gbps, count, NVLINK_ALPHA_US,
                   note=f"{count} NVLink{'s' if count > 1 else ''} (read) at {gbps:g} GB/s "
                   f"each: the {nvlink_what(sm_of[a])}", kind="nvlink")
        draft.assume(f"NVLink: {gbps:g} GB/s per link and direction, the "
                     f"{nvlink_what(sm_of[a])}")


def _model_nvlinks(draft: Draft, gpus: list[_Gpu], model: GpuModel, where: str) -> None:
    """NVLinks the file does not list, from `--gpu`: all on one NVSwitch, or DGX-1's
    cube mesh in bus order."""
    gbps = NVLINK_GBPS[model.sm]
    why = f"--gpu {model.name}"
    if model.fabric == "nvswitch":
        nvls = switch_computes(model.sm)
        draft.add("nvswitch", "nvswitch", f"{why}: the GPUs' NVSwitches as one vertex"
                  + ("; they reduce and multicast (NVLS)" if nvls else ""),
                  inferred=f"{why}: its GPUs sit on NVSwitches",
                  can=("multicast", "reduce") if nvls else ())
        for g in gpus:
            draft.link(g.name, "nvswitch", gbps, model.nvlinks, NVSWITCH_ALPHA_US,
                       note=f"{why}: {model.nvlinks} NVLinks at {gbps:g} GB/s (the "
                       f"{nvlink_what(model.sm)})", inferred=f"{why}: {model.nvlinks} NVLinks",
                       kind="nvlink")
    else:
        if len(gpus) != 8:
            raise BadInput(f"{where}: --gpu {model.name} wires DGX-1's cube mesh of 8 GPUs; "
                           f"the file has {len(gpus)}")
        for (a, b), lanes in CUBE_MESH.items():
            draft.link(gpus[a].name, gpus[b].name, gbps, lanes, NVLINK_ALPHA_US,
                       note=f"{why}: cube mesh, {lanes} NVLink{'s' if lanes > 1 else ''} at "
                       f"{gbps:g} GB/s", inferred=f"{why}: DGX-1's cube mesh in bus order",
                       kind="nvlink")
    draft.assume(f"NVLinks from --gpu {model.name} ({model.nvlinks} per GPU, "
                 f"{model.fabric}), {gbps:g} GB/s each (the {nvlink_what(model.sm)}); the "
                 "file lists none")


def _add_nics(draft: Draft, nics: list, nic_gbps: float | None, model: GpuModel | None,
              fabric: str | None) -> None:
    """The NICs at the fastest speed (read, or --nic-gbps, or the GPU model's), their
    PCIe links, and the network: section that joins boxes."""
    if not nics:
        return
    read = max((s for _, s, _, _, _ in nics if s), default=None)
    fastest, how, assumed = nic_speed(nic_gbps, read, model)

    def slow(nic):
        return nic_gbps is None and nic[1] is not None and nic[1] < fastest

    left_out = sorted(n[2] for n in nics if slow(n))
    if left_out:
        draft.assume(f"left out, slower than the {fastest:g} GB/s NICs (network: joins "
                     f"boxes at one speed): {', '.join(left_out)}")
    kept = [n for n in nics if not slow(n)]
    for parent, speed, name, (gbps, note), line in kept:
        name = draft.add(name, "nic", f"line {line}"
                         + (f", {speed * 8000:g} Mb/s" if speed else ""))
        draft.link(parent, name, gbps or fastest,
                   note=note if gbps else "no PCIe link: the NIC's speed")
    draft.join_by_network(len(kept), fastest, how, assumed, fabric)


def _nics(n: int) -> str:
    return f"{n} NIC{'' if n == 1 else 's'}"


def _count_gpus(root: Element, where: str) -> None:
    """Refuse more GPUs than a topology may have by counting them, before any is built
    (one pass over the elements, without recursion)."""
    count, stack = 0, [root]
    while stack:
        e = stack.pop()
        if e.tag == "pci" and is_gpu_class(e.attrs.get("class", "").lower()):
            count += 1
        stack.extend(e.children)
    if count > MAX_GPUS:
        raise BadInput(f"{where}: {count:,} GPUs (pci elements of class 0x03xxxx or "
                       f"0x120000; at most {MAX_GPUS})")


def is_gpu_class(cls: str) -> bool:
    """A GPU's PCI class, as RCCL reads them (NCCL: 0x03xxxx only)."""
    return cls.startswith("0x03") or cls == ACCELERATOR_CLASS


def _net_speed(net: Element, where: str) -> float | None:
    """GB/s of a net's speed (Mb/s); None when the file gives none (or 0)."""
    mbps = _int(net, "speed", where, None)
    if mbps is not None and not 0 <= mbps <= MAX_NET_MBPS:
        raise BadInput(f"{where}: line {net.line}: net speed {mbps} Mb/s (expected 0 to "
                       f"{MAX_NET_MBPS:,})")
    return mbps * NET_GBPS_PER_MBPS if mbps else None


def _count(nvlink: Element, where: str) -> int:
    count = _int(nvlink, "count", where, 1)
    if not 1 <= count <= MAX_NVLINKS:
        raise BadInput(f"{where}: line {nvlink.line}: nvlink count {count} (expected 1 to "
                       f"{MAX_NVLINKS})")
    return count


def _net_name(net: Element | None, counter: dict) -> str:
    counter["nic"] += 1
    name = net.attrs.get("name", "") if net is not None else ""
    return vertex_name(name, f"nic{counter['nic'] - 1}")


def _int(e: Element | None, key: str, where: str, default):
    """An integer attribute (decimal, or hex with 0x), or `default` when absent."""
    if e is None or key not in e.attrs or e.attrs[key] == "":
        return default
    text = e.attrs[key].strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise BadInput(f"{where}: line {e.line}: {key}={text[:40]!r} is not a whole "
                       "number") from None
