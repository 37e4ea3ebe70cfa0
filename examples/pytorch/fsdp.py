"""FSDP2 training whose all-gathers and reduce-scatters run synth's files (README.md).

On two DGX H100 (16 GPUs), through the MSCCL++ NCCL shim (v0.9.0 or later), with an
in-place allgather plan and an out-of-place reducescatter plan of synth's:

    LD_PRELOAD=$MSCCLPP/build/lib/libmscclpp_nccl.so \
    MSCCLPP_NCCL_LIB_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2 \
    MSCCLPP_HCA_DEVICES=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7 \
    MSCCLPP_SOCKET_IFNAME=eth0 \
    torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE \
        --rdzv-backend c10d --rdzv-endpoint $HOST0:29500 \
        fsdp.py --via mscclpp --files allgather.mscclpp.json reducescatter.mscclpp.json

Here, on CPUs (gloo; synth's schedules run as point-to-point messages):

    torchrun --nproc-per-node 2 fsdp.py --via schedule --files allgather.json reducescatter.json

Without --files it trains with FSDP's own collectives, the reference.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from synth.run.pytorch import FsdpAllGather, FsdpReduceScatter, SynthComm

SIZES = (32, 61, 13)  # shards of odd sizes: 61 rows do not split evenly


def make_model():
    torch.manual_seed(0)  # the same start on every rank, with or without synth
    return torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
                               torch.nn.Linear(SIZES[1], SIZES[2]))


def batch(rank, step, device):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, SIZES[0], generator=gen)
    return x.to(device), torch.randn(8, SIZES[2], generator=gen).to(device)


def train(files=(), via="schedule", steps=2):
    """Train for `steps` steps: the model's full parameters after them (on the CPU), and
    the SynthComm (None without files)."""
    rank = dist.get_rank()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda \
        else torch.device("cpu")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # before the group's first collective (via="mscclpp": the plans are registered
    # with the shim before NCCL creates the communicator)
    comm = SynthComm(files, group=mesh.get_group(), via=via) if files else None
    model = make_model().to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if comm is not None:
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_custom_all_gather(FsdpAllGather(comm))
                module.set_custom_reduce_scatter(FsdpReduceScatter(comm))
                module.set_force_sum_reduction_for_comms(True)  # the runtimes sum
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batch(rank, step, device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.full_tensor().detach().cpu().clone() for p in model.parameters()], comm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="*", default=[],
                        help="synth's allgather and reducescatter files")
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
