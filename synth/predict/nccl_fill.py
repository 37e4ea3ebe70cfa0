"""The pipeline's fill in cost model 2 (synth.predict.nccl adds it to a call's time):
how long a channel's first piece takes to pass the stages before its last, and the
piece NCCL moves, for NVLS and NVLS-tree the chunk NCCL 2.30.7 picks per call
(src/enqueue.cc, calcCollChunking). docs/cost-model.md, "NCCL as it runs", says what it stands for.
"""

from __future__ import annotations

import math

from synth.predict.machine import Machine


def fill_us(m: Machine, coll: str, option, nbytes: int, nvls_gbps: float = math.inf) -> float:
    """Filling the pipeline: before a channel's first piece reaches its last stage it
    has crossed depth - 1 others, each at the channel's share of the bandwidth. A piece
    is what a channel moves per loop: for NVLS and NVLS-tree, NCCL's chunk for the call
    times its heads (nvls_chunk, nvls_tree_chunk) on NCCL's NVLS channels; else at most
    f.chunk_kb (NCCL's Simple step, 4 MB / NCCL_STEPS); never more than 1 / depth of
    the channel's bytes.
    `option` is a synth.predict.nccl.Option at achieved rates; nvls_gbps NCCL's own
    bandwidth for an NVLS allreduce (nvls_chunk; only asked across nodes)."""
    depth = _depth(m, coll, option.algorithm)
    channels, most = option.channels, m.figures.chunk_kb * 1024
    if option.algorithm == "nvls":
        channels = nvls_channels(m)
        most = m.per_node * nvls_chunk(m, nbytes / channels, nvls_gbps)
    if option.algorithm == "nvls_tree":
        channels = nvls_channels(m)
        most = m.per_node * nvls_tree_chunk(m, nbytes / channels)
    piece = min(most, nbytes / (channels * depth))
    return (depth - 1) * piece / (1e3 * option.gbps / channels)


def nvls_channels(m: Machine) -> int:
    """The channels NCCL runs NVLS on (src/transport/nvls.cc, ncclNvlsTuning: 16 on
    Hopper, on Blackwell 24 in one node and 32 across nodes; its Blackwell multi-node
    NVLS-tree tuning is left out)."""
    if m.arch == "blackwell":
        return 32 if m.nodes > 1 else 24
    return 16


def nvls_chunk(m: Machine, per_channel: float, nvls_gbps: float = math.inf) -> int:
    """NCCL's chunk for an NVLS call whose channel gets per_channel bytes
    (src/enqueue.cc, calcCollChunking, which the planner calls per channel): its
    NVLS chunk size (NCCL_NVLS_CHUNKSIZE, 128 KB), 32 KB across nodes where its NVLS
    allreduce bandwidth (nvls_gbps) is under 150 GB/s, then 64, 32 and 16 KB while the
    channel has less than 64, 8 and 2 loops of a chunk per head."""
    chunk = 128 * 1024
    if m.nodes > 1 and nvls_gbps < 150:
        chunk = 32 * 1024
    for loops, smaller in ((64, 65536), (8, 32768), (2, 16384)):
        if per_channel < loops * m.per_node * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_tree_chunk(m: Machine, per_channel: float) -> int:
    """NCCL's chunk for an NVLS-tree call whose channel gets per_channel bytes
    (src/enqueue.cc, calcCollChunking, called per channel as for NVLS): the NVLS chunk
    (128 KB) capped by the tree's largest (src/transport/nvls.cc, ncclNvlsTuning: 64 KB
    from 4 nodes; its Blackwell multi-node tuning is left out), then 128, 64 and 32 KB
    while the channel has less than 16, 4 and 1 loops of a chunk per head."""
    chunk = 65536 if m.nodes >= 4 else 128 * 1024
    for loops, smaller in ((16, 131072), (4, 65536), (1, 32768)):
        if per_channel < loops * m.per_node * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def _depth(m: Machine, coll: str, algo: str) -> int:
    """Stages a piece of data passes through one after another, beyond what the
    bandwidth term counts: none for a ring (its steps are the bandwidth term: every
    link is busy from the start) and PAT; a tree's levels up and down; NVLS allreduce's
    three warp groups a chunk passes in turn (src/device/all_reduce.h, NVLS's
    RunWorkColl: scatter, reduce and multicast, gather)."""
    levels = max(0, math.ceil(math.log2(m.nodes)))
    if algo in ("ring", "pat"):
        return 1
    if algo == "tree":
        return 2 * (levels + m.per_node - 1)
    if algo == "nvls" and coll == "allreduce":
        return 3  # scatter into the switch's buffers, reduce and multicast, gather out
    if algo in ("nvls", "collnet_direct"):
        return 2
    if algo == "nvls_tree":
        return 2 + 2 * levels
    return 2 * m.per_node  # collnet_chain
