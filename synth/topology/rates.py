"""Line rates of the links synth knows by name: NVLink by generation, PCIe per lane,
AMD's xGMI by GPU architecture; GB/s per link and direction.

One table for every topology synth makes itself: the built-ins' files (topologies/*.yaml;
tests/test_import.py holds their numbers to this table), the generators and `synth topo
import`, so a built-in and an import of one machine get the same figures.
"""

# NCCL's own model counts about 80% of the
# NVLink rates (20 GB/s for NVLink2 and 3, 20.6 for 4, 40.1 for 5: src/graph/topo.h of
# NCCL 2.30) and width x rate / 80 for PCIe: what is reached, not the line rate, which is
# what the built-ins and the literature's alpha-beta figures use.
NVLINK_GBPS = {  # one NVLink (a lane: `count` of them run in parallel), by generation
    1: 20.0,  # P100: 4 links of 40 GB/s both ways (NVIDIA Tesla P100 whitepaper)
    2: 25.0,  # V100: 6 links, 300 GB/s both ways per GPU (NVIDIA V100 datasheet)
    3: 25.0,  # A100: 12 links, 600 GB/s both ways (NVIDIA A100 datasheet)
    4: 25.0,  # H100, H200: 18 links, 900 GB/s both ways (NVIDIA H100 datasheet)
    5: 50.0,  # B200: 18 links, 1.8 TB/s both ways (NVIDIA DGX B200 datasheet)
}
# GA102 (SM86: A40, RTX A6000) has narrower NVLink3 links: "four x4 links, with each link
# providing 14.0625 GB/sec bandwidth in each direction" (NVIDIA Ampere GA102 GPU
# Architecture whitepaper)
GA102_NVLINK_GBPS = 14.0625
# PCIe per lane, GB/s each way, by generation: 2.5, 5 GT/s after 8b/10b; from Gen3 on
# GT/s / 8 (128b/130b's 1.5% left out, as the built-ins' x16 figures 16, 32, 64 do)
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 1.0, 4: 2.0, 5: 4.0, 6: 8.0}
# AMD Infinity Fabric (xGMI) between GPUs, one link, GB/s each way, by the GPU's gfx
# architecture (the name RCCL's topology dump gives as `gcn`): line rates from AMD's
# data sheets, "peak Infinity Fabric link bandwidth" both ways, halved
XGMI_GBPS = {
    "gfx942": 64.0,  # MI300X (CDNA 3): 128 GB/s per link, 7 links (MI300X data sheet, 2023)
    "gfx90a": 50.0,  # MI250X, MI250 (CDNA 2): 100 GB/s per link, 8 per package (MI250X
                     # data sheet, 2021; the CDNA 2 white paper)
}
