"""The numbers an import does not read: link rates, latencies, and GPU models.

Link rates come from the one table in synth.topology.physical (line rates, as the
built-ins use), so an imported machine and its built-in get the same figures. Sockets,
which no built-in has, are joined at NCCL's own figures (src/graph/topo.h of NCCL
2.30); the import says which numbers it used.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.topology.rates import GA102_NVLINK_GBPS, NVLINK_GBPS as BY_GENERATION
from synth.topology.rates import PCIE_LANE_GBPS, XGMI_GBPS

# GB/s per NVLink and direction, by the GPU's SM version: its NVLink generation's line
# rate (NCCL's SMxx_NVLINK_BW counts about 80% of it: 18, 20, 20, 12, 20.6, 40.1)
NVLINK_GBPS = {60: BY_GENERATION[1], 70: BY_GENERATION[2], 80: BY_GENERATION[3],
               86: GA102_NVLINK_GBPS, 90: BY_GENERATION[4], 100: BY_GENERATION[5],
               103: BY_GENERATION[5]}
# SM103: B300 (Blackwell Ultra), NVLink5 as B200 (NVIDIA DGX B300 datasheet: 1.8 TB/s
# both ways per GPU)
NVLINK_GENERATION = {60: 1, 70: 2, 80: 3, 86: 3, 90: 4, 100: 5, 103: 5}
MAX_NVLINKS = 1024  # NVLinks between a GPU and one target (18 on H100): past it, a typo


def nvlink_what(sm: int) -> str:
    """Where the NVLink figure of SM `sm` comes from, for a note."""
    where = "GA102's narrower " if sm == 86 else ""
    return f"{where}NVLink{NVLINK_GENERATION[sm]} line rate (SM{sm})"

# NVLink SHARP (NVLS): the NVSwitches of HGX H100/H200 (third generation) and later
# reduce and multicast (hardware.md's DGX-H100 and B200 entries; NCCL enables NVLS
# from SM90); A100's second-generation NVSwitch does not
NVLS_MIN_SM = 90


def arch_of(sm: int | None) -> str:
    """The architecture whose NCCL tables cost model 2 uses for SM `sm` ("" unknown)."""
    if sm is None:
        return ""
    return ("blackwell" if sm >= 100 else "hopper" if sm >= 90 else "ampere" if sm >= 80
            else "volta")


def switch_computes(sm: int | None) -> bool:
    """Whether NVSwitches joining GPUs of SM `sm` reduce and multicast (NVLS)."""
    return sm is not None and sm >= NVLS_MIN_SM


# PCIe generation by the XML's link_speed (GT/s); an unknown speed counts as Gen3, as
# NCCL does (its fallback rate); a width of 0 as 16
PCIE_GENERATION = {"2.5": 1, "5": 2, "8": 3, "16": 4, "32": 5, "64": 6}
PCIE_FALLBACK_GENERATION = 3


def pcie_gbps(speed: str, width: int) -> tuple[float, str]:
    """(GB/s, how it was found) of a PCIe link from the XML's link_speed and link_width:
    width x the generation's lane rate (rates.PCIE_LANE_GBPS)."""
    number = (speed or "").split("GT/s")[0].strip().removesuffix(".0")
    gen = PCIE_GENERATION.get(number)
    note = f"PCIe link_speed {speed or '(none)'!r}, link_width {width} (read)"
    if gen is None:
        gen = PCIE_FALLBACK_GENERATION
        note += "; speed unknown: Gen3, as NCCL falls back"
    if width == 0:
        width, note = 16, note + "; width 0 counted as 16, as NCCL does"
    lane = PCIE_LANE_GBPS[gen]
    return width * lane, note + f": Gen{gen} x{width}, {width} x {lane:g} GB/s"


# between two CPU sockets, GB/s (NCCL's QPI/UPI, Infinity Fabric and POWER figures)
def socket_gbps(vendor: str, model: int | None) -> tuple[float, str]:
    if vendor == "GenuineIntel":
        if model is not None and model >= 0xCF:
            return 40.0, "Intel Emerald Rapids UPI (NCCL's ERP_QPI_BW)"
        if model is not None and model >= 0x8F:
            return 22.0, "Intel Sapphire Rapids UPI (NCCL's SRP_QPI_BW)"
        if model is not None and model >= 0x55:
            return 10.0, "Intel Skylake UPI (NCCL's SKL_QPI_BW)"
        return 6.0, "Intel QPI (NCCL's BDW_QPI_BW)"
    if vendor in ("AuthenticAMD", "AMD"):
        return 16.0, "AMD Infinity Fabric (NCCL's AMD_BW)"
    if vendor == "IBM" or vendor.startswith("POWER"):
        return 32.0, "POWER9 (NCCL's P9_BW)"
    return 10.0, f"CPU vendor {vendor or 'unknown'}: Skylake UPI assumed (NCCL's SKL_QPI_BW)"


NET_GBPS_PER_MBPS = 1 / 8000  # an XML net speed is in Mb/s: speed / 8000 GB/s
NETWORK_ALPHA_US = 2.6  # InfiniBand, as the built-ins (the top of TACCL's 1.3-2.6 us)
NVLINK_ALPHA_US = 0.7  # a direct NVLink, as the built-ins (TE-CCL)
NVSWITCH_ALPHA_US = 0.35  # through an NVSwitch, as the built-ins
# a PCIe or socket hop: NCCL's per-hop latency for PCI (1.0 us, Ring with LL; NVLink is
# 0.6 in the same table: hwLatencies in src/graph/tuning.cc of NCCL 2.30), which NCCL
# charges for every path inside a node that is not NVLink, through host memory or not
PCIE_ALPHA_US = 1.0


@dataclass(frozen=True)
class GpuModel:
    """What `--gpu NAME` tells an import that its source does not."""

    name: str
    sm: int
    nvlinks: int  # per GPU
    fabric: str  # "nvswitch": all on one switch; "cube-mesh": DGX-1's hybrid cube mesh
    pcie_gen: int
    nic_gbps: float  # the NIC these machines ship with, GB/s, when the source has none
    nic_text: str


GPU_MODELS = {m.name: m for m in (
    GpuModel("v100-sxm", 70, 6, "cube-mesh", 3, 12.5, "100 Gb/s EDR InfiniBand"),
    GpuModel("a100-sxm", 80, 12, "nvswitch", 4, 25.0, "200 Gb/s HDR InfiniBand"),
    GpuModel("h100-sxm", 90, 18, "nvswitch", 5, 50.0, "400 Gb/s NDR InfiniBand"),
    GpuModel("h200-sxm", 90, 18, "nvswitch", 5, 50.0, "400 Gb/s NDR InfiniBand"),
    GpuModel("b200-sxm", 100, 18, "nvswitch", 5, 50.0, "400 Gb/s NDR InfiniBand"),
    # DGX B300 datasheet: 8 single-port ConnectX-8 at up to 800 Gb/s, PCIe Gen6
    GpuModel("b300-sxm", 103, 18, "nvswitch", 6, 100.0, "800 Gb/s ConnectX-8"),
)}

@dataclass(frozen=True)
class AmdGpu:
    """An AMD GPU as RCCL's dump names it (`gcn`), and what the import makes of it."""

    gcn: str
    what: str  # the products and architecture, for notes
    xgmi_gbps: float  # one xGMI link's line rate each way (rates.XGMI_GBPS)
    arch: str  # whose NCCL tables stand in for RCCL's in cost model 2
    link_share: float  # of a link's line rate, what RCCL counts (costs.nvlink)


# RCCL counts 48 GB/s of an MI300X link and 36 of an MI250X one (GFX94X_XGMI_WIDTH,
# MI200_XGMI_WIDTH in src/graph/topo.h of ROCm/rccl at 0cbce2a, RCCL 2.21.5); the stand-in
# tables are of an NVIDIA GPU of the same years with links of the same class
# (docs/cost-model.md, "AMD GPUs"), as topologies/mi300x.yaml has them
AMD_GPUS = {g.gcn: g for g in (
    AmdGpu("gfx942", "MI300X (CDNA 3)", XGMI_GBPS["gfx942"], "hopper", 0.75),
    AmdGpu("gfx90a", "MI250X/MI250 (CDNA 2)", XGMI_GBPS["gfx90a"], "ampere", 0.72),
)}

# DGX-1's hybrid cube mesh (NVLink pairs and lanes), GPUs in bus order
CUBE_MESH = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2,
             (2, 3): 2, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2,
             (5, 7): 1, (6, 7): 2}


def nic_speed(given: float | None, read: float | None, model: GpuModel | None
              ) -> tuple[float, str, bool]:
    """(GB/s per NIC, how it was found, whether it is assumed): --nic-gbps, else the
    fastest speed the source gives, else the GPU model's usual NIC, else 100 Gb/s
    (NCCL's NET_BW figure)."""
    if given is not None:
        return given, f"--nic-gbps {given:g}", False
    if read is not None:
        return read, f"the fastest net speed in the file, {read * 8000:g} Mb/s / 8000", False
    if model is not None:
        return model.nic_gbps, f"{model.name}'s usual NIC, {model.nic_text}", True
    return 12.5, "100 Gb/s (NCCL's NET_BW figure)", True


def pcie_x16_gbps(gen: int) -> float:
    """A PCIe x16 link of generation `gen` (Gen3 16, Gen4 32, Gen5 64 GB/s)."""
    return 16 * PCIE_LANE_GBPS[gen]
