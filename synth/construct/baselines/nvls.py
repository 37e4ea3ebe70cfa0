"""NCCL's NVLS allreduce: where one switch reduces and multicasts between every pair of
ranks (an H100 NVSwitch, `can: [reduce, multicast]`), each rank loads the sum of its
shard through the switch (multimem.ld_reduce) and stores it to every rank
(multimem.st), the two pipelined over slices of the buffer. Here the same two steps
(synth.construct.in_network.nvls_allreduce) in a pipeline of PIPELINE batches, as
NCCL keeps that many slots in flight per channel (NCCL_STEPS); synth's own frontier
tries every depth.
"""

from __future__ import annotations

from synth.construct.baselines.baseline import Baseline
from synth.construct.in_network import nvls_allreduce, port_pieces, reducing_switch
from synth.topology.linkmodel import LinkModel

NAME = "NVLS"
PIPELINE = 8  # NCCL_STEPS: slots in flight per channel


def nvls_baseline(model: LinkModel, collective: str, root: int | None) -> Baseline | str:
    """NCCL-style NVLS allreduce, or why it does not apply."""
    if collective != "allreduce":
        return "allreduce only"
    switch = reducing_switch(model)
    if switch is None:
        return "no switch reduces and multicasts between every pair of ranks"
    schedule = nvls_allreduce(model, switch, PIPELINE, port_pieces(model))
    schedule.info["method"] = f"NVLS (NCCL-style: reduce then multicast, {PIPELINE} deep)"
    return Baseline(f"NVLS ({PIPELINE} deep)", schedule, NAME)
