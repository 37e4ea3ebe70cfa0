"""The numbers an import does not read: NCCL's per-link bandwidths, and GPU models.

Every figure here is one NCCL itself uses when it models a machine (src/graph/topo.h and
topo.cc of NCCL 2.2x), so an imported topology prices links the way NCCL's own search
does; the import says which ones it used.
"""

from __future__ import annotations

from dataclasses import dataclass

# GB/s per NVLink and direction, by the GPU's SM version (NCCL's SMxx_NVLINK_BW)
NVLINK_GBPS = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}

# PCIe: NCCL reads link_speed and link_width and takes width x rate / 80 GB/s, the rate
# per lane in units of 100 Mb/s after encoding; a width of 0 counts as 16 and an unknown
# speed as Gen3 (8 GT/s)
PCIE_RATE = {"2.5": 15, "5": 30, "8": 60, "16": 120, "32": 240, "64": 480}
PCIE_FALLBACK_RATE = 60


def pcie_gbps(speed: str, width: int) -> tuple[float, str]:
    """(GB/s, how it was found) of a PCIe link from the XML's link_speed and link_width,
    NCCL's way."""
    number = (speed or "").split("GT/s")[0].strip().removesuffix(".0")
    rate = PCIE_RATE.get(number)
    note = f"PCIe link_speed {speed or '(none)'!r}, link_width {width} (read)"
    if rate is None:
        rate, note = PCIE_FALLBACK_RATE, note + "; speed unknown: Gen3, NCCL's fallback"
    if width == 0:
        width, note = 16, note + "; width 0 counted as 16, as NCCL does"
    return width * rate / 80, note + f": {width} x {rate} / 80 GB/s"


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
    """A PCIe x16 link of generation `gen`, NCCL's way (Gen3 12, Gen4 24, Gen5 48 GB/s)."""
    return 16 * {3: 60, 4: 120, 5: 240, 6: 480}[gen] / 80
