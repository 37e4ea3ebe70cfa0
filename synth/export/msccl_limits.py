"""MSCCL XML runtimes' limits, and what a schedule's transfers alone tell of them.

A program (synth.export.msccl) takes seconds and gigabytes to build at 512 GPUs; the
counts here, made in arrays from the transfers, rule channel counts out before any is
built, with lower bounds that hold for the program that would be built.
"""

from __future__ import annotations

import numpy as np

MAX_STEPS = 64          # steps per threadblock: msccl-executor-nccl and RCCL
MAX_TBS = 64            # threadblocks per GPU: RCCL
MAX_TBS_PER_CHANNEL = 32  # msccl-executor-nccl
MAX_CHANNELS = 32
MAX_NODES = 1024        # msccl-executor-nccl's parser: algo + gpus + one rank's tbs and steps
MAX_BUFFER = 2 ** 15    # chunks per buffer: every runtime keeps a step's offsets in int16
MAX_BYTES = 2 ** 63 - 1  # minBytes, maxBytes: int64 (strtoll)


def transfer_array(steps):
    """The transfers of `steps` as rows (src, dst, chunk): counted for every channel
    count at once in arrays (at 512 GPUs, 31 counts one send at a time took 19 s)."""
    rows = [(x.src, x.dst, x.chunk) for sends in steps for x in sends]
    return np.array(rows, dtype=np.int64).reshape(len(rows), 3)


def lane_threadblocks(transfers, k: int):
    """Per rank and channel on k channels (an array of N rows, k columns), the
    threadblocks _Program makes, from the transfers (transfer_array's) alone: _lane_tbs
    pairs receive and send peers, so a rank's channel needs as many as its larger side."""
    if not len(transfers):
        return np.zeros((1, k), dtype=np.int64)
    n = int(transfers[:, :2].max()) + 1
    channel = transfers[:, 2] % k

    def peers(rank, peer):  # distinct peers per (rank, channel)
        lanes = np.unique((rank * k + channel) * n + peer) // n
        return np.bincount(lanes, minlength=n * k)

    return np.maximum(peers(transfers[:, 1], transfers[:, 0]),
                      peers(transfers[:, 0], transfers[:, 1])).reshape(n, k)


def surely_over(transfers, k: int, n: int, per_rank) -> str | None:
    """Why a program on k channels would break a limit, known from the transfers alone
    (a big schedule's program takes seconds to build), or None; `per_rank`: each rank's
    threadblocks (lane_threadblocks). Lower bounds that hold for _Program: every
    receive is a step of the threadblock of its (channel, sender), every send one of the
    threadblock of its (channel, receiver) (alone, or fused with the receive that feeds
    it), so a threadblock has at least as many steps as it receives from or sends to its
    peer on its channel, and a rank's part of the XML at least 1 + N + its threadblocks
    + the larger of its receives and its sends. Counted in arrays (in Python, torus:16x32's
    refusal took 22 s)."""
    if not len(transfers):
        return None
    src, dst, channel = transfers[:, 0], transfers[:, 1], transfers[:, 2] % k
    ranks = len(per_rank)
    # (rank, channel, peer) as one number, in the order of the triples; receives and
    # sends counted apart (a threadblock's peer may be both)
    keys, counts = (np.concatenate(side) for side in zip(*(
        np.unique((rank * k + channel) * ranks + peer, return_counts=True)
        for rank, peer in ((dst, src), (src, dst)))))
    most = int(counts.max())
    if most > MAX_STEPS:
        rank = int(keys[counts == most].min()) // (k * ranks)
        return f"a threadblock of rank {rank} needs at least {most} steps (limit {MAX_STEPS})"
    recv, sent = np.bincount(dst, minlength=ranks), np.bincount(src, minlength=ranks)
    nodes = (1 + n + per_rank + np.maximum(recv, sent))[(recv > 0) | (sent > 0)]
    if nodes.max() > MAX_NODES:
        return (f"a rank's part of the XML has at least {int(nodes.max())} elements (the "
                f"parser takes {MAX_NODES})")
    return None
