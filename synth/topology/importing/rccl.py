"""RCCL's topology dump: AMD GPUs and their xGMI links, as a Draft's GPU fabric.

RCCL, AMD's fork of NCCL, dumps (NCCL_TOPO_DUMP_FILE) and reads NCCL's <system> schema
with these differences (ROCm/rccl at 0cbce2a, RCCL 2.21.5: ncclTopoGetXmlFromGpu in
src/graph/xml.cc; ncclTopoAddGpu and ncclTopoAddXGMI in src/graph/topo.cc):

    <pci busid="0000:0c:00.0" class="0x120000" ...>      MI300X: a processing accelerator
      <gpu dev="0" sm="304" gcn="gfx942" arch="38911" rank="0" gdr="1">
        <xgmi target="0000:15:00.0" count="1" tclass="0x120000"/>   a link to a peer
      </gpu>
    </pci>

- `gcn` names the architecture (gfx942; older files give a number, 942 or 910, which
  RCCL reads as gfx942 or gfx90a, and so does this). `sm` is not an SM version: RCCL
  writes the compute-unit count there (older releases 94), and `arch` is a bit field of
  HIP's device features; neither names the GPU, so the import reads neither.
- `xgmi` in place of `nvlink`: `target` a peer GPU's bus id, `count` the links to it
  (RCCL counts count x its per-link figure), `tclass` the peer's PCI class.
- GPUs of PCI class 0x120000 as well as 0x03xxxx (MI300X is the former).

A link's rate is its line rate by `gcn` (rates.XGMI_GBPS, from AMD's data sheets):
RCCL's dump gives none. Each pair must be listed from both ends with one count; a file
where the two ends disagree is refused, naming both lines.
"""

from __future__ import annotations

from synth.errors import BadInput
from synth.topology.importing.draft import Draft
from synth.topology.importing.hardware import AMD_GPUS, NVLINK_ALPHA_US, AmdGpu

# RCCL's names for the numbers older dumps give (convertGcnArchToGcnArchName,
# src/misc/archinfo.cc), and the gfx94x names it treats as one (IsArchMatch "gfx94")
OLD_NAMES = {"906": "gfx906", "908": "gfx908", "910": "gfx90a", "940": "gfx940",
             "941": "gfx941", "942": "gfx942"}
SAME_AS = {"gfx940": "gfx942", "gfx941": "gfx942"}


def gcn_name(text: str) -> str:
    """The architecture a `gcn` attribute names ("gfx942:sramecc+:xnack-" -> "gfx942")."""
    name = text.strip().split(":")[0].lower()
    return OLD_NAMES.get(name, name)


def architecture(gpus: list, where: str) -> str | None:
    """The one architecture of the GPUs (None: no `gcn`, not an RCCL dump). BadInput when
    the file mixes architectures, or GPUs with `gcn` and without."""
    seen = {}
    for g in gpus:
        if g.sm is not None:  # a GPU with a <gpu> element
            seen.setdefault(g.gcn, g)
    if len(seen) > 1:
        (a, ga), (b, gb) = list(seen.items())[:2]
        raise BadInput(f"{where}: line {gb.line}: a GPU of architecture {_said(b)}, but the "
                       f"one at line {ga.line} is {_said(a)}: one kind of GPU per file")
    return next(iter(seen), None)


def add_xgmi(draft: Draft, gpus: list, by_bus: dict, gcn: str, where: str) -> None:
    """The xGMI links the GPUs list, both ends agreeing, at the line rate of `gcn`."""
    ends = _ends(gpus, by_bus, where)
    if not ends:
        draft.warn(f"{where} is RCCL's dump (gcn {gcn[:40]}) but lists no xGMI link: "
                   "imported as PCIe only")
        return
    model = known(gcn, where, next(iter(ends.values()))[1])
    for (a, b), (count, line) in sorted(ends.items()):
        back = ends.get((b, a))
        if back is None:
            raise BadInput(f"{where}: line {line}: an xgmi from {a} to {b}, but {b} lists "
                           f"none to {a}: a truncated or edited dump?")
        if back[0] != count:
            raise BadInput(f"{where}: line {line}: {a} has {count} xGMI link(s) to {b}, but "
                           f"{b} has {back[0]} to {a} (line {back[1]})")
        if a < b:
            draft.link(a, b, model.xgmi_gbps, count, NVLINK_ALPHA_US, kind="nvlink",
                       note=f"{count} xGMI link{'s' if count > 1 else ''} (read) at "
                       f"{model.xgmi_gbps:g} GB/s each: {model.what} line rate")
    draft.assume(f"xGMI: {model.xgmi_gbps:g} GB/s per link and direction, the {model.what} "
                 "line rate (AMD's data sheet; RCCL's dump gives no rate)")
    draft.assume(f"xGMI latency {NVLINK_ALPHA_US:g} us, the NVLink figure: no published "
                 "xGMI figure")


def known(gcn: str, where: str, line: int) -> AmdGpu:
    model = AMD_GPUS.get(SAME_AS.get(gcn, gcn))
    if model is None:
        raise BadInput(f"{where}: line {line}: xGMI links of GPU architecture {_said(gcn)} "
                       f"(their rate is known for {', '.join(AMD_GPUS)})")
    return model


def describe(draft: Draft, gcn: str) -> str:
    """Set the draft's cost-model stand-in for `gcn`; the GPUs' label for its text."""
    draft.gpu_link = "xGMI"
    model = AMD_GPUS.get(SAME_AS.get(gcn, gcn))
    if model is None:  # still RCCL's machine: its reference lines say whose tuner stands in
        draft.figures = {"library": "rccl"}
        return f"gcn {gcn[:40]}"
    draft.arch, draft.figures = model.arch, {"nvlink": model.link_share, "library": "rccl"}
    draft.assume(f"cost model 2: NCCL's {model.arch} tables stand in for RCCL's, links "
                 f"counted at {model.link_share:g} of line rate as RCCL counts them "
                 "(docs/cost-model.md, AMD GPUs)")
    return f"{gcn}, {model.what}"


def _ends(gpus: list, by_bus: dict, where: str) -> dict:
    """(GPU, peer) -> (count, line) of every xgmi element."""
    ends = {}
    for g in gpus:
        for target, count, _tclass, line in g.nvlinks:
            target = target.lower()
            if target == g.busid:
                raise BadInput(f"{where}: line {line}: an xgmi from GPU {g.busid} to itself")
            peer = by_bus.get(target)
            if peer is None:
                raise BadInput(f"{where}: line {line}: an xgmi to an unknown bus id "
                               f"{target[:40]!r} (no GPU in the file has it)")
            if (g.name, peer.name) in ends:
                raise BadInput(f"{where}: line {line}: a second xgmi from {g.name} to "
                               f"{peer.name} (first at line {ends[g.name, peer.name][1]})")
            ends[g.name, peer.name] = (count, line)
    return ends


def _said(gcn: str | None) -> str:
    return "(none given)" if gcn is None else repr(gcn[:40])
