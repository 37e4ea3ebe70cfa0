"""DDP training whose gradient allreduce runs synth's files (README.md beside this).

On two DGX H100 (16 GPUs), through the MSCCL++ NCCL shim (v0.9.0 or later), with an
in-place allreduce plan of synth's (`synth export ... --to mscclpp --inplace`):

    LD_PRELOAD=$MSCCLPP/build/lib/libmscclpp_nccl.so \
    MSCCLPP_NCCL_LIB_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2 \
    MSCCLPP_HCA_DEVICES=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7 \
    MSCCLPP_SOCKET_IFNAME=eth0 \
    torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE \
        --rdzv-backend c10d --rdzv-endpoint $HOST0:29500 \
        ddp.py --via mscclpp --files allreduce.mscclpp.json

Here, on CPUs (gloo; synth's schedule run as point-to-point messages):

    torchrun --nproc-per-node 2 ddp.py --via schedule --files allreduce.json

Without --files it trains with PyTorch's own allreduce, the reference.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from synth.run.pytorch import SynthComm, allreduce_hook

SIZES = (32, 61, 13)  # 2,013 and 806 parameters a layer: buckets of odd sizes


def make_model():
    torch.manual_seed(0)  # the same start on every rank, with or without synth
    return torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
                               torch.nn.Linear(SIZES[1], SIZES[2]))


def batch(rank, step, device):
    """Each rank's own data: DDP averages their gradients."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, SIZES[0], generator=gen)
    return x.to(device), torch.randn(8, SIZES[2], generator=gen).to(device)


def train(files=(), via="schedule", steps=2, bucket_cap_mb=0.004):
    """Train for `steps` steps: the model's parameters after them (on the CPU), and the
    SynthComm (None without files)."""
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    # before DDP: its first broadcast creates the NCCL communicator, which takes the
    # plans registered by then (via="mscclpp")
    comm = SynthComm(files, via=via) if files else None
    model = make_model().to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=bucket_cap_mb)  # small buckets: several calls a step
    if comm is not None:
        ddp.register_comm_hook(comm, allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batch(rank, step, device)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().cpu().clone() for p in model.parameters()], comm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="*", default=[],
                        help="synth's allreduce file: schedule (.json) or MSCCL++ plan")
    parser.add_argument("--via", choices=["mscclpp", "msccl", "schedule"], default="schedule")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # no device_id: NCCL must create the communicator after SynthComm registered the
    # plans (at the group's first collective), not here
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    params, comm = train(args.files, args.via, args.steps)
    if dist.get_rank() == 0:
        norm = torch.cat([p.flatten() for p in params]).norm()
        print(f"trained {args.steps} steps; parameter norm {norm:.6f}")
        for (collective, way), n in sorted((comm.moved if comm else {}).items()):
            print(f"  {collective}: {n:,} bytes through "
                  + ("synth's files" if way == "file" else "the backend's own collective"))
    dist.barrier()  # every rank done before any tears gloo down: else one may abort at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
