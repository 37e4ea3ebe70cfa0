"""One collective call of any size, run as a runtime runs it with one of synth's files:
the bulk through the file (or the schedule it was exported from), the tail through the
backend's own collective, as synth.export.units' Split cuts it (docs/runtimes.md, "Any
message size"). `synth run` and the PyTorch wrapper (synth.run.pytorch) both call
`run_split`, so the check and the training job cut a call alike.

Buffers are flat tensors in NCCL's layout: allreduce, broadcast and reduce one buffer of
n bytes; allgather and gather an input of one share and an output of every rank's
share; reducescatter and scatter the reverse; alltoall every share in both. In place
(NCCL's convention) the smaller buffer is the rank's share of the larger one, or the
same buffer. A buffer is 1 or P parts (units.Split): its parts are cut at the same
offset, the bulk pieces of every part side by side in one buffer, the tail pieces in
another.
"""

from __future__ import annotations


def own_collective(name: str, out, inp, group=None, root: int | None = None) -> None:
    """The backend's own collective (torch.distributed, a sum for the combining ones)
    from `inp` into `out` (module docstring's layout); ranks are the group's."""
    import torch.distributed as dist

    if name in ("allreduce", "broadcast", "reduce"):
        if out.data_ptr() != inp.data_ptr():
            out.copy_(inp)
        if name == "allreduce":
            dist.all_reduce(out, group=group)
        elif name == "broadcast":
            dist.broadcast(out, group=group, group_src=root)
        else:
            dist.reduce(out, group=group, group_dst=root)
        return
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if name == "allgather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, inp, group=group)
    elif name == "reducescatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(out, inp, group=group)
    elif name == "gather":
        parts = list(out.view(world, -1).unbind()) if rank == root else None
        dist.gather(inp, gather_list=parts, group=group, group_dst=root)
    elif name == "scatter":
        parts = list(inp.view(world, -1).unbind()) if rank == root else None
        dist.scatter(out, scatter_list=parts, group=group, group_src=root)
    elif name == "alltoall":
        dist.all_to_all_single(out, inp, group=group)
    else:
        raise ValueError(f"unknown collective {name!r}")


def in_place(inp, out) -> bool:
    """Whether one buffer holds the other (NCCL's in-place forms)."""
    a, b = inp.data_ptr(), out.data_ptr()
    return a <= b < a + inp.nbytes or b <= a < b + out.nbytes


def run_split(split, inp, out, bulk, tail, rank: int, stage=None) -> None:
    """One call from `inp` into `out` cut by `split` (a units.Split): bulk(i, o) on the
    bulk pieces, then tail(i, o) on the tail pieces, each a call in the same layout (in
    place if the call is); a piece of no bytes is no call. stage(key, numel, like)
    gives the bulk its own buffers where the file needs them (MSCCL++: an allocation of
    its own, synth.run.pytorch); without it only parts that are not contiguous are
    copied."""
    e = inp.element_size()
    part, cut = split.part // e, split.bulk_part // e
    for lo, hi, fn, staged in ((0, cut, bulk, stage), (cut, part, tail, None)):
        if hi > lo:
            call_in, call_out, back = _pieces(inp, out, part, lo, hi, rank, staged)
            fn(call_in, call_out)
            for target, source in back:  # the results to their place in `out`
                target.copy_(source)


def _pieces(inp, out, part: int, lo: int, hi: int, rank: int, stage):
    """(input, output, copies back) for elements lo..hi-1 of every part."""
    import torch

    width = hi - lo

    def take(buf, key, copy_in):
        parts = buf.numel() // part
        region = buf.view(parts, part)[:, lo:hi]
        if stage is None and parts == 1:
            return buf[lo:hi], None
        piece = stage(key, parts * width, buf) if stage is not None else \
            torch.empty(parts * width, dtype=buf.dtype, device=buf.device)
        if copy_in:
            piece.view(parts, width).copy_(region)
        return piece, region

    if in_place(inp, out):
        big = out if out.numel() >= inp.numel() else inp
        piece, region = take(big, "inout", copy_in=True)
        back = [] if region is None else [(region, piece.view(region.shape))]
        if inp.numel() == out.numel():
            return piece, piece, back
        share = piece.view(big.numel() // part, width)[rank]
        return (share, piece, back) if big is out else (piece, share, back)
    call_in, _ = take(inp, "in", copy_in=True)
    call_out, region = take(out, "out", copy_in=False)
    back = [] if region is None else [(region, call_out.view(region.shape))]
    return call_in, call_out, back
