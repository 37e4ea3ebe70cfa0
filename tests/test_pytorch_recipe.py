"""examples/pytorch/: the DDP and FSDP2 examples train on 2 CPU processes (gloo) with
synth's schedules (synth.run.pytorch: a DDP comm hook, FSDP2's custom collectives, every
call cut into the bulk through the schedule and the tail through gloo's own) and end
with the parameters plain PyTorch ends with; the cut calls through the backend (as
under MSCCL, whose XML files the wrapper reads) do too; a file in the wrong in-place
form for PyTorch's calls is refused.
"""

import importlib.util
import time
from pathlib import Path

import pytest

from synth.export import render
from synth.schedule.file import write_schedule
from synth.schedule.transform import refine
from tests.shared_frontiers import synthesized

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pytorch"
STEPS = 2
# the examples' model: Linear(32, 61), Linear(61, 13): 2,013 + 806 parameters
PARAMETERS = 32 * 61 + 61 + 61 * 13 + 13


def _example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_all(rank, world, init, files, out):
    """One worker: every way of training in turn, in one process group."""
    import torch
    import torch.distributed as dist

    from synth.errors import BadInput
    from synth.run.pytorch import SynthComm

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        ddp, fsdp = _example("ddp"), _example("fsdp")
        runs = {
            "ddp": ddp.train(steps=STEPS),
            "ddp-schedule": ddp.train([files["allreduce"]], "schedule", STEPS),
            "ddp-msccl": ddp.train([files["allreduce-xml"]], "msccl", STEPS),
            "fsdp": fsdp.train(steps=STEPS),
            "fsdp-schedule": fsdp.train([files["allgather"], files["reducescatter"]],
                                        "schedule", STEPS),
        }
        try:
            SynthComm([files["allreduce-xml-outofplace"]], via="msccl")
            refused = ""
        except BadInput as e:
            refused = str(e)
        if rank == 0:
            torch.save({"params": {k: p for k, (p, _) in runs.items()},
                        "moved": {k: dict(c.moved) for k, (_, c) in runs.items() if c},
                        "refused": refused}, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    import multiprocessing

    import torch
    import torch.multiprocessing as mp

    folder = tmp_path_factory.mktemp("recipe")
    # ring:2's schedules with every chunk cut in 3: files of 3 chunks a share (48 bytes
    # in 16-byte units, 3 elements for MSCCL), which the examples' sizes are not
    # multiples of
    one = {name: refine(next(p.schedule for p in synthesized("ring:2", name).points), 3)
           for name in ("allreduce", "allgather", "reducescatter")}
    files = {name: str(write_schedule(s, folder / f"{name}.json")) for name, s in one.items()}
    for key, inplace in (("allreduce-xml", True), ("allreduce-xml-outofplace", False)):
        path = folder / f"{key}.xml"
        path.write_text(render(one["allreduce"], "msccl-xml", inplace=inplace)[0])
        files[key] = str(path)
    multiprocessing.set_forkserver_preload(["torch.distributed", "torch.distributed.fsdp",
                                            "synth.run.pytorch", __name__])
    out = folder / "result.pt"
    workers = mp.start_processes(_train_all, args=(2, f"file://{folder / 'rendezvous'}",
                                                   files, str(out)),
                                 nprocs=2, join=False, start_method="forkserver")
    deadline = time.monotonic() + 300  # a hang fails, not blocks
    while not workers.join(timeout=1):  # raises if a worker failed
        if time.monotonic() > deadline:
            for process in workers.processes:
                process.kill()
            pytest.fail("the workers did not finish within 300 s")
    return torch.load(out)


@pytest.mark.parametrize("example, ways", [("ddp", ["ddp-schedule", "ddp-msccl"]),
                                           ("fsdp", ["fsdp-schedule"])])
def test_the_examples_train_as_plain_pytorch_does(trained, example, ways):
    import torch

    plain = trained["params"][example]
    assert len(plain) == 4 and sum(p.numel() for p in plain) == PARAMETERS
    start = _example(example).make_model()
    assert any(not torch.equal(a, b) for a, b in zip(plain, start.parameters()))  # it learnt
    for way in ways:
        got = trained["params"][way]
        for a, b in zip(got, plain, strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), way


def test_every_call_went_through_the_cut(trained):
    # DDP: each step sums every gradient once, 2,819 float32 in buckets; their bulks
    # are multiples of 48 bytes (3 elements for MSCCL) and 11,276 bytes (2,819
    # elements) is not, so some bucket has a tail each step
    for way in ("ddp-schedule", "ddp-msccl"):
        moved = trained["moved"][way]
        assert set(moved) == {("allreduce", "file"), ("allreduce", "own")}
        assert moved[("allreduce", "file")] + moved[("allreduce", "own")] \
            == STEPS * PARAMETERS * 4
        assert moved[("allreduce", "file")] > 0 and moved[("allreduce", "own")] > 0
    # FSDP2: all-gathers and reduce-scatters of shards padded to 2 ranks, whose shares
    # (1,023 and 434 float32: 4,092 and 1,736 bytes) are not multiples of 48 bytes
    moved = trained["moved"]["fsdp-schedule"]
    for collective in ("allgather", "reducescatter"):
        assert moved[(collective, "file")] > 0 and moved[(collective, "own")] > 0


def test_a_file_pytorch_cannot_call_is_refused(trained):
    assert trained["refused"] == ("the allreduce file is out of place, but PyTorch calls "
                                  "allreduce in place: export it with --inplace")
