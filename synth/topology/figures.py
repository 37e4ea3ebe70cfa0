"""The constants of cost model version 2, their defaults by GPU architecture, and the
`costs:` section of a topology file (docs/cost-model.md lists every one and its source).

A prediction multiplies each link's line rate by the efficiency of its class (what
NCCL's kernels reach of it), adds a fixed cost per call, and charges NCCL's protocols
their bandwidth factors and per-hop latencies (synth.predict.nccl). `synth calibrate`
fits these figures to a machine's own nccl-tests output and writes them back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from synth.errors import BadInput
from synth.files import quote

ARCHS = ("volta", "ampere", "hopper", "blackwell")

# Achieved / line rate of NVLink with NCCL's 128-byte lines. NCCL's own model counts
# 20 of 25 GB/s (V100, A100), 20.6 of 25 (H100), 40.1 of 50 (B200) per link (src/graph/
# topo.h, NCCL 2.30.7); published nccl-tests runs reach about 230 of 300 GB/s bus
# bandwidth on 8 A100 and 360-370 of 450 on 8 H100 (docs/cost-model.md).
NVLINK_EFFICIENCY = {"volta": 0.80, "ampere": 0.77, "hopper": 0.82, "blackwell": 0.80}
# NVLink SHARP's own factor on top of NVLink's (src/graph/tuning.cc: nvlsEfficiency)
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}


@dataclass(frozen=True)
class NetworkKind:
    """What the network between boxes changes, from its NCCL plugin's public source."""

    plugin_latency_us: float  # what its plugin reports to NCCL (ncclNetProperties.latency):
    # NCCL's tuner adds it to every inter-node hop, twice for Simple (tuning.cc)
    message_us: float  # a message across it on the hardware, in place of NCCL's network
    # hop latencies (0: NCCL's own, which are InfiniBand's)
    completion_us: float  # more per Simple message (its completion handed to the host)


# docs/cost-model.md, "Networks": InfiniBand and RoCE run through NCCL's own IB transport
# (src/transport/net_ib: latency 0, "Not set"); EFA through aws-ofi-nccl, whose p5 platform
# reports 75 us to NCCL (src/platform-aws.cpp) and whose own model of p5 puts a message
# at 20 us ("2 nodes, 8B RDMA w/imm lat") plus 3 us of completion for Simple
# (src/tuner/nccl_ofi_model.cpp, include/nccl_ofi_param.h); GPUDirect-TCPXO through
# Google's plugin (latency 0 in nccl_shim.cc), whose message latency is not published.
NETWORKS = {"ib": NetworkKind(0.0, 0.0, 0.0), "roce": NetworkKind(0.0, 0.0, 0.0),
            "efa": NetworkKind(75.0, 20.0, 3.0), "tcpxo": NetworkKind(0.0, 0.0, 0.0)}


@dataclass(frozen=True)
class Figures:
    """What a call costs on one machine. Times in microseconds, efficiencies as the
    fraction of a link's line rate that NCCL's kernels reach."""

    arch: str = "ampere"  # NCCL's tables are per architecture
    call_us: float = 2.2  # the GPU's fixed cost of a call beyond NCCL's latencies
    nvls_call_us: float = 2.2  # of a call NCCL runs with NVLS or NVLS-tree
    alltoall_call_us: float = 2.2  # of a grouped send/receive alltoall
    launch_us: float = 4.2  # host time to launch one GPU's part of a call
    nvlink: float = 0.77  # efficiency of NVLink (and NVSwitch ports)
    nvls: float = 0.0  # of an NVLS operation, on top of NVLink's
    pcie: float = 0.75  # of PCIe (NCCL counts width x rate / 80 of width x rate / 64)
    nic: float = 0.95  # of a NIC (24 of 25 GB/s HDR, 46-48 of 50 NDR)
    latency_scale: float = 1.0  # scales NCCL's latencies (base and per hop)
    send_us: float = 0.5  # per round of a synth schedule's step (an assumption: see docs)
    chunk_kb: float = 512.0  # the largest piece a channel's pipeline moves per stage
    net: str = "ib"  # the network between boxes (NETWORKS)
    cpu: str = "intel"  # the host CPU's vendor (CPUS): NCCL's network overhead and LL cap
    net_us: float = 0.0  # a message across it, in place of NCCL's hop latencies (0: NCCL's)
    library: str = "nccl"  # what runs the collectives there (LIBRARIES): on AMD GPUs RCCL,
    # whose tuner NCCL's stands in for (docs/cost-model.md, "AMD GPUs"): said, not priced
    source: str = "defaults"  # where the figures came from

    def efficiency(self, link_class: str) -> float:
        return {"nvlink": self.nvlink, "pcie": self.pcie, "nic": self.nic}[link_class]


    @property
    def network(self) -> NetworkKind:
        return NETWORKS[self.net]


CPUS = ("intel", "amd")
LIBRARIES = ("nccl", "rccl")
NUMBERS = ("call_us", "nvls_call_us", "alltoall_call_us", "launch_us", "nvlink", "nvls", "pcie",
           "nic", "latency_scale", "send_us", "chunk_kb", "net_us")
LIMITS = {"call_us": (0, 1e4), "nvls_call_us": (0, 1e4), "alltoall_call_us": (0, 1e4),
          "launch_us": (0, 1e4), "nvlink": (0.01, 1), "nvls": (0, 1), "pcie": (0.01, 1),
          "nic": (0.01, 1), "latency_scale": (0, 100), "send_us": (0, 1e3),
          "chunk_kb": (1, 1 << 16), "net_us": (0, 1e4)}


def defaults(arch: str, net: str = "ib") -> Figures:
    """The published figures for `arch` and the network kind `net` (docs/cost-model.md)."""
    if arch not in ARCHS:
        raise BadInput(f"costs.arch: expected one of {', '.join(ARCHS)}, got {quote(arch)}")
    if not isinstance(net, str) or net not in NETWORKS:
        raise BadInput(f"costs.net: expected one of {', '.join(NETWORKS)}, got {quote(net)}")
    return Figures(arch=arch, nvlink=NVLINK_EFFICIENCY[arch], nvls=NVLS_EFFICIENCY[arch],
                   net=net, net_us=NETWORKS[net].message_us)


def library_of(topo) -> str:
    """What runs the collectives on `topo` (Figures.library; "nccl" where its file gives
    no figures)."""
    figures = getattr(topo, "figures", None)
    return figures.library if figures is not None else "nccl"


def figures_from_dict(doc, fallback_arch: str = "ampere") -> Figures:
    """A topology file's `costs:` mapping over the defaults of its `arch`."""
    if not isinstance(doc, dict):
        raise BadInput("costs: expected a mapping (docs/cost-model.md)")
    allowed = {"arch", "net", "cpu", "library", "source", *NUMBERS}
    for key in doc:
        if key not in allowed:
            raise BadInput(f"costs: unknown key {quote(key)} (expected "
                           f"{', '.join(sorted(allowed))})")
    out = defaults(doc.get("arch", fallback_arch), doc.get("net", "ib"))
    changes = {}
    if "cpu" in doc:
        if doc["cpu"] not in CPUS:
            raise BadInput(f"costs.cpu: expected one of {', '.join(CPUS)}, "
                           f"got {quote(doc['cpu'])}")
        changes["cpu"] = doc["cpu"]
    if "library" in doc:
        if doc["library"] not in LIBRARIES:
            raise BadInput(f"costs.library: expected one of {', '.join(LIBRARIES)}, "
                           f"got {quote(doc['library'])}")
        changes["library"] = doc["library"]
    for key in NUMBERS:
        if key in doc:
            changes[key] = _number(doc[key], key)
    if "source" in doc:
        if not isinstance(doc["source"], str) or len(doc["source"]) > 2000:
            raise BadInput("costs.source: expected a string of at most 2000 characters")
        changes["source"] = doc["source"]
    elif changes or "net" in doc:
        changes["source"] = "the topology file"
    return replace(out, **changes)


def figures_to_dict(figures: Figures) -> dict:
    """The `costs:` mapping that reads back as `figures` (rounded to 4 digits)."""
    doc = asdict(figures)
    if doc["library"] == "nccl":  # the default, left out: files older readers take
        del doc["library"]
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in doc.items()}


def _number(x, key: str) -> float:
    lo, hi = LIMITS[key]
    # an int is compared, never converted: isfinite(10**400) raised OverflowError
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) \
        and (isinstance(x, int) or math.isfinite(x))
    if not (ok and lo <= x <= hi):
        raise BadInput(f"costs.{key}: expected a number from {lo:g} to {hi:g}, got {quote(x)}")
    return float(x)


assert set(NUMBERS) | {"arch", "net", "cpu", "library", "source"} == {f.name for f in fields(Figures)}
