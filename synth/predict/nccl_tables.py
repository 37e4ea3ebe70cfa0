"""NCCL's own figures, as its tuner and graph search keep them (NCCL 2.30.7,
src/graph/tuning.cc and src/graph/search.cc; docs/cost-model.md cites each): base and
per-hop latencies per algorithm and protocol, bandwidth caps per architecture, the
channel search's speed ladders, and the shares of line rate NCCL counts. The formulas
that read them are in synth/predict/nccl.py; a table is data, not code, so a new NCCL
release changes this file.
"""

NCCL_VERSION = "2.30.7"
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")
ARCH_INDEX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}

# --- NCCL 2.30.7's tables (src/graph/tuning.cc), LL / LL128 / Simple ------------------
BASE_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4),
           "collnet_direct": (0, 0, 0), "collnet_chain": (0, 0, 0),
           "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)}
HOP_US = {  # per hop, by what the hop crosses
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4),
               "collnet_direct": (0, 0, 3.7), "collnet_chain": (0, 0, 2.8),
               "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25), "pat": (0, 0, 4.0)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7),
             "collnet_direct": (0, 0, 3.7), "collnet_chain": (0, 0, 2.8),
             "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0),
            "collnet_direct": (0, 0, 31), "collnet_chain": (0, 0, 30),
            "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9), "pat": (0, 0, 14)},
}
# [architecture (one node) or CPU (several)][1 node, 2 nodes, more]
LL_MAX_GBPS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0),
               (282.0, 90.0, 70.0))
RING_LL128_CHANNEL_GBPS = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
TREE_LL128_CHANNEL_GBPS = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
TREE_CHANNEL_GBPS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0),
                     (70.0, 42.8, 24.0))
NVLS_TREE_CHANNEL_GBPS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5),
                          (0.0, 96.0, 80.0))
# allreduce trees at 64 B x 2^i (ncclTopoGetAlgoTime's treeCorrectionFactor)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
     .9, .9))
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}  # getNetOverhead, by the CPU's vendor
LL_MAX_ROW = {"intel": 0, "amd": 1}  # llMaxBws' row across nodes, by the CPU's vendor
PCI_BW = 12.0  # GB/s (topo.h): rings slower than this in all run Simple on 256 threads
# the graph search's speed ladders, GB/s per channel (src/graph/search.cc)
SPEEDS_INTRA = {"sm80": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0,
                          18.0)}
SPEEDS_INTER = {"sm80": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0,
                         5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
                "sm90": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                         6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
                "sm100": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                          17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
MAX_RING_CHANNELS = 32  # MAXCHANNELS / 2
# what NCCL counts of a line rate: NVLink per link (src/graph/topo.h: 20 of 25 GB/s,
# 20.6 of 25 on SM90, 40.1 of 50 on SM100), PCIe width x rate / 80 of / 64, NICs 24 of
# 25 GB/s
NCCL_NVLINK_SHARE = {"volta": 0.8, "ampere": 0.8, "hopper": 20.6 / 25, "blackwell": 40.1 / 50}
NCCL_PCIE_SHARE = 0.75
NCCL_NIC_SHARE = 0.96
# threads and bytes per thread before NCCL adds a channel (enqueue.cc, comm.h)
THREADS = (512, 640, 512)
BANDWIDTH_FACTOR = (0.5, 0.92, 1.0)  # LL, LL128, Simple: of Simple's bandwidth
THREAD_THRESHOLD = (8, 8, 64)
