"""Any message size (docs/runtimes.md): how a call of any size is cut into a bulk the
exported file runs and a tail for the runtime's own algorithm, what `synth export` says
of it, which calls synth's MSCCL++ shim selector gives a plan (SynthComm's, on its
staging buffers only: with stand-ins for the mscclpp package and torch's fake process
group, no GPU here), and `synth run` at odd sizes (1 byte, primes, 64 MiB + 3) against
torch's collectives.

Every expected bulk below is worked out by hand from the runtimes' rules: the MSCCL++
executor runs sizes that are 16 bytes x the plan's chunks x k; MSCCL runs element
counts that are nchunksperloop x k.
"""

import json
import sys
import types
from types import SimpleNamespace

import pytest

from synth.errors import BadInput
from synth.export import render
from synth.export.units import header_of, unit_of
from synth.run import mscclpp_shim
from synth.run.distributed import Call
from synth.schedule.file import write_schedule
from tests.in_process import synth_main
from tests.shared_frontiers import synthesized
from tests.test_runner import run_in_one_spawn

PRIME = 1_000_003


def point(spec, name, chunks):
    return next(p.schedule for p in synthesized(spec, name).points
                if p.schedule.collective.chunks == chunks)


@pytest.fixture(scope="module")
def exported():
    """ring:4 files: an in-place allreduce plan of 4 chunks, an allgather plan and XML
    of 2 chunks a share (8 in the output)."""
    ar, ag = point("ring:4", "allreduce", 4), point("ring:4", "allgather", 2)
    return {"ar-plan": render(ar, "mscclpp", inplace=True)[0],
            "ar-plan-outofplace": render(ar, "mscclpp", name="oop")[0],
            "ag-plan": render(ag, "mscclpp")[0], "ag-xml": render(ag, "msccl-xml")[0],
            "ar-plan-2k": render(ar, "mscclpp", inplace=True, name="capped",
                                 max_bytes=2048)[0]}


def test_the_bulk_is_the_largest_part_the_file_runs(exported):
    plan = unit_of("mscclpp", exported["ar-plan"])  # allreduce, 4 chunks: k x 64 bytes
    assert (plan.chunks, plan.parts) == (4, 1)
    for n, bulk, tail in [(1, 0, 1), (63, 0, 63), (64, 64, 0), (PRIME, 1_000_000, 3),
                          (64 << 20, 64 << 20, 0), ((64 << 20) + 3, 64 << 20, 3)]:
        cut = plan.split(n, 1)
        assert (cut.bulk, cut.tail) == (bulk, tail), n
        assert plan.cuts(bulk) or bulk == 0
    assert not plan.cuts(PRIME) and plan.cuts(1_000_000)
    # allgather of 4 shares, 8 chunks: k x 128 bytes, 32 a share; each share is cut at
    # the same offset, so shares of a prime 250,007 bytes keep 249,984 (32 x 7,812) each
    gather = unit_of("mscclpp", exported["ag-plan"])
    assert (gather.chunks, gather.parts) == (8, 4)
    cut = gather.split(4 * 250_007, 1)
    assert (cut.part, cut.bulk_part, cut.bulk, cut.tail) == (250_007, 249_984, 999_936, 92)
    # MSCCL counts elements, 8 a loop; the bulk is whole loops in every share (RCCL's
    # rule, stricter than the 8 in all of msccl-executor-nccl since 2024-09): float32
    # shares of 1,000,004 bytes (250,001 elements) keep 250,000 elements (8 x 31,250)
    xml = unit_of("msccl-xml", exported["ag-xml"])
    assert (xml.chunks, xml.parts) == (8, 4)
    cut = xml.split(4 * 1_000_004, 4)
    assert (cut.bulk_part, cut.tail) == (1_000_000, 4 * 4)
    assert xml.split(4 * 4 * 250_007, 4).bulk_part == 4 * 250_000  # 8 x 31,250 elements
    assert xml.split(4 * 1_000_004, 1).bulk_part == 1_000_000  # uint8: 8-byte loops
    assert xml.cuts(4 * 8 * 4) and not xml.cuts(4 * 8 * 4 + 4)
    # past the file's size range the whole call is the runtime's own
    capped = unit_of("mscclpp", exported["ar-plan-2k"])
    assert capped.max_bytes == 2048 and capped.split(4096, 4).bulk == 0
    assert capped.split(2048 + 3, 1).bulk == 2048
    with pytest.raises(BadInput, match="equal part"):
        gather.split(4 * 250_007 + 1, 1)  # not 4 equal shares


def test_a_files_header_says_what_the_runtimes_match_calls_by(exported):
    # what synth.run.pytorch, the shim's table and synth plan read from a file
    ar = header_of("mscclpp", exported["ar-plan"])
    assert (ar.collective, ar.ranks, ar.inplace, ar.unit.chunks) == ("allreduce", 4, True, 4)
    ag = header_of("msccl-xml", exported["ag-xml"])
    assert (ag.collective, ag.ranks, ag.inplace, ag.unit.chunks) == ("allgather", 4, False, 8)
    assert ag.name.startswith("synth-allgather-ring:4")
    with pytest.raises(ValueError, match="no nchunksperloop in an <algo> element"):
        header_of("msccl-xml", exported["ag-xml"].replace("nchunksperloop", "loops"))
    with pytest.raises(ValueError, match="KeyError: 'gpus'"):
        header_of("mscclpp", json.dumps({"collective": "allreduce", "name": "x"}))


def test_synth_export_says_which_sizes_the_file_runs(tmp_path):
    path = write_schedule(point("ring:4", "allreduce", 4), tmp_path / "ar.json")
    done = synth_main("export", path, "--to", "mscclpp", "--inplace", "-o",
                      tmp_path / "ar.mscclpp.json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("wrote ") and len(lines) == 2
    assert lines[1].startswith("sizes: runs calls of k x 64 bytes up to ")
    assert "the executor fails on any other size" in lines[1]
    path = write_schedule(point("ring:4", "allgather", 2), tmp_path / "ag.json")
    done = synth_main("export", path, "--to", "msccl-xml", "-o", "-")
    assert done.returncode == 0 and done.stdout.startswith("<!--")
    sizes = done.stderr.splitlines()[1]  # the file on stdout, both lines on stderr
    assert sizes.startswith("sizes: runs calls of k x 8 elements of any type (RCCL and "
                            "msccl-executor-nccl before 2024-09: k x 8 a share); MSCCL "
                            "gives any other call to NCCL's own algorithm")


@pytest.mark.parametrize("collective", ["gather", "scatter"])
def test_synth_export_refuses_gather_and_scatter_xml(collective, tmp_path):
    # msccl-executor-nccl: NCCL's API has no gather or scatter; RCCL: its ncclGather
    # and ncclScatter count one share, a quarter of the 4 shares the file's 4 chunks
    # (nchunksperloop) would cut on switch:4: no runtime runs the file as meant
    from synth.construct.baselines import baselines
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import lower

    (direct,) = baselines(lower(resolve("switch:4")), collective, 0)
    path = write_schedule(direct.schedule, tmp_path / f"{collective}.json")
    done = synth_main("export", path, "--to", "msccl-xml", "-o", tmp_path / "x.xml")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"cannot export {collective} to MSCCL XML: no runtime runs such a file" \
        in done.stderr
    assert not (tmp_path / "x.xml").exists()
    # its MSCCL++ plan runs through the executor API: the executor's rule
    done = synth_main("export", path, "--to", "mscclpp", "-o", tmp_path / "x.mscclpp.json")
    assert done.returncode == 0 and "sizes: runs calls of k x 64 bytes" in done.stdout


@pytest.fixture
def shim_table(monkeypatch, tmp_path):
    monkeypatch.setattr(mscclpp_shim, "_TABLE", {})
    monkeypatch.setattr(mscclpp_shim, "_FOLDER", [tmp_path])
    monkeypatch.setattr(mscclpp_shim, "_STAGED", {})
    return mscclpp_shim


@pytest.fixture
def fake_mscclpp(monkeypatch, shim_table):
    """Stand-ins for the mscclpp package (no GPU here): its plan and algorithm records,
    one algorithm collection builder that keeps what is registered, and RawGpuBuffer
    as a CPU tensor of its own."""
    import torch

    registered = {"algorithms": [], "selector": None}

    class Builder:
        def add_algorithm_builder(self, algorithm):
            registered["algorithms"].append(algorithm)

        def set_algorithm_selector(self, selector):
            registered["selector"] = selector

    class RawGpuBuffer:
        def __init__(self, nbytes):
            self.memory = torch.zeros(nbytes, dtype=torch.uint8)

        def to_dlpack(self, data_type):
            dtype = getattr(torch, data_type.removeprefix("torch."))
            return self.memory.view(dtype).__dlpack__()

    top, ext = types.ModuleType("mscclpp"), types.ModuleType("mscclpp.ext")
    core = types.ModuleType("mscclpp._mscclpp")
    top.ExecutionPlan = lambda path, rank: SimpleNamespace(path=path, rank=rank)
    top.Algorithm = lambda id, execution_plan: SimpleNamespace(id=id, plan=execution_plan)
    top.RawGpuBuffer, top.ext, top._mscclpp = RawGpuBuffer, ext, core
    ext.AlgorithmCollectionBuilder = Builder
    core.CppCollectiveBufferMode = SimpleNamespace(IN_PLACE="in", OUT_OF_PLACE="out")
    for name, module in (("mscclpp", top), ("mscclpp.ext", ext), ("mscclpp._mscclpp", core)):
        monkeypatch.setitem(sys.modules, name, module)
    return registered


@pytest.fixture
def rank_1_of_4():
    """This process as rank 1 of 4 in torch's fake process group (whose collectives do
    nothing), on one node."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=4)
    yield
    dist.destroy_process_group()


def test_a_plan_synth_comm_refuses_is_not_registered(exported, tmp_path, fake_mscclpp,
                                                    rank_1_of_4):
    from synth.run.pytorch import SynthComm

    path = tmp_path / "ar.mscclpp.json"
    path.write_text(exported["ar-plan-outofplace"])
    with pytest.raises(BadInput, match="PyTorch calls allreduce in place"):
        SynthComm([path], via="mscclpp", ranks_per_node=4)
    # nothing in the process's table for the selector, nothing given to the shim
    assert mscclpp_shim._TABLE == {} and fake_mscclpp["algorithms"] == []


def test_the_selector_gives_plans_only_calls_on_synth_comms_buffers(
        exported, tmp_path, fake_mscclpp, rank_1_of_4):
    import torch

    from synth.run.pytorch import SynthComm

    path = tmp_path / "ar.mscclpp.json"
    path.write_text(exported["ar-plan"])  # in place, 4 chunks: k x 64 bytes
    comm = SynthComm([path], via="mscclpp", ranks_per_node=4)
    select = fake_mscclpp["selector"]
    (algorithm,) = fake_mscclpp["algorithms"]
    algorithms = {"allreduce": {algorithm.id: algorithm}}

    def request(tensor, nbytes):  # what the shim asks the selector, for an in-place call
        return SimpleNamespace(collective="allreduce", world_size=4, n_ranks_per_node=4,
                               rank=1, message_size=nbytes, input_buffer=tensor.data_ptr(),
                               output_buffer=tensor.data_ptr(), buffer_mode=lambda: "in")

    # a gradient bucket of 1,000,003 bytes of uint8: SynthComm copies its bulk of
    # 1,000,000 bytes into a buffer of its own and calls torch's all_reduce on it
    bucket = torch.zeros(PRIME, dtype=torch.uint8)
    comm.all_reduce(bucket)
    assert comm.moved[("allreduce", "file")] == 1_000_000
    ((raw, staged),) = comm._staging.values()
    assert staged.nbytes == 1_000_000
    assert select(algorithms, request(staged, 1_000_000)) is algorithm
    # the same sizes on other tensors (another caller's all_reduce, op=MAX perhaps, or
    # the caller's own tensor in the caching allocator) go to the shim's own
    assert select(algorithms, request(bucket[:1_000_000], 1_000_000)) is None
    assert select(algorithms, request(torch.zeros(1_000_000, dtype=torch.uint8),
                                      1_000_000)) is None


def test_the_selector_gives_a_plan_its_communicator_rank_and_sizes(exported, tmp_path,
                                                                    shim_table):
    (tmp_path / "ar.mscclpp.json").write_text(exported["ar-plan"])
    (tmp_path / "ag.mscclpp.json").write_text(exported["ag-plan"])
    # rank 1 of a 4-rank communicator on one node, and a second communicator of the
    # same shape in which this process is rank 3
    world = shim_table.record([tmp_path / "ar.mscclpp.json", tmp_path / "ag.mscclpp.json"],
                              1, 4, 4, "world")
    other = shim_table.record([tmp_path / "ar.mscclpp.json"], 3, 4, 4, "other")
    names = [e.name for _, e in world + other]
    assert len(set(names)) == 3  # the collection keys plans by name: one each
    for copy, entry in world + other:  # the executor checks the file's name again
        assert json.loads(copy.read_text())["name"] == entry.name
    shim_table.stage_buffer(1 << 40, 1 << 20)  # a buffer a plan may run on

    def chosen(*call):  # on that buffer
        return shim_table.chosen(*call, 1 << 40, 1 << 40)

    assert chosen("allreduce", 4, 4, 1, 1_000_000, True).tag == "world"
    assert chosen("allreduce", 4, 4, 3, 1_000_000, True).tag == "other"
    assert chosen("allreduce", 4, 4, 1, PRIME, True) is None  # not cut: the shim's own
    assert chosen("allreduce", 4, 4, 1, 1_000_000, False) is None  # out of place
    assert chosen("allreduce", 4, 4, 0, 1_000_000, True) is None  # a rank not registered
    assert chosen("allreduce", 8, 8, 1, 1_000_000, True) is None  # another shape
    # allgather requests count one rank's bytes: 32 a share is 128 in all
    assert chosen("allgather", 4, 4, 1, 32, False).tag == "world"
    assert chosen("allgather", 4, 4, 1, 48, False) is None
    # the same registration again adds nothing; a third communicator of that shape
    # with the same rank cannot be told apart
    assert shim_table.record([tmp_path / "ar.mscclpp.json"], 1, 4, 4, "world") == []
    with pytest.raises(BadInput, match="cannot tell their calls apart"):
        shim_table.record([tmp_path / "ar.mscclpp.json"], 1, 4, 4, "third")
    with pytest.raises(BadInput, match="for 4 ranks"):
        shim_table.record([tmp_path / "ar.mscclpp.json"], 0, 8, 8, "eight")


def test_synth_run_runs_odd_sizes_exactly(tmp_path):
    # ring:2 allreduce, 1 chunk: the bulk is the largest multiple of 16 bytes
    path = write_schedule(point("ring:2", "allreduce", 1), tmp_path / "ar2.json")
    sizes = [(1, "uint8", 0), (PRIME, "uint8", 1_000_000), (1 << 20, "float32", 1 << 20),
             ((64 << 20) + 3, "uint8", 64 << 20)]
    reports = run_in_one_spawn([path] * len(sizes), tmp_path,
                               calls=[Call(n, dtype, iters=0) for n, dtype, _ in sizes])
    for (n, dtype, bulk), report in zip(sizes, reports, strict=True):
        assert report["correct"] and not report["mismatches"], (n, report)
        assert (report["bytes"], report["dtype"]) == (n, dtype)
        assert (report["bulk_bytes"], report["tail_bytes"]) == (bulk, n - bulk)
        assert report["messages"] == (2 if bulk else 0)  # one send, one receive


def test_synth_run_cuts_every_share_alike(tmp_path):
    # 4 ranks, prime shares: allgather in 16-byte units (32 bytes a share: 249,984 of
    # 250,007), reducescatter in whole uint8 loops of 8 (MSCCL's cut: 250,000 a share)
    # and in 16-byte units of int32
    ag = write_schedule(point("ring:4", "allgather", 2), tmp_path / "ag.json")
    rs = write_schedule(point("ring:4", "reducescatter", 2), tmp_path / "rs.json")
    runs = [(ag, Call(4 * 250_007, "uint8", "mscclpp", 0), 4 * 249_984),
            (rs, Call(4 * 250_007, "uint8", "msccl-xml", 0), 4 * 250_000),
            (rs, Call(4 * 4 * 1009, "int32", "mscclpp", 0), 4 * 4 * 1008)]
    reports = run_in_one_spawn([p for p, _, _ in runs], tmp_path,
                               calls=[c for _, c, _ in runs])
    for (_, call, bulk), report in zip(runs, reports, strict=True):
        assert report["correct"] and not report["mismatches"], report
        assert (report["bulk_bytes"], report["tail_bytes"]) == (bulk, call.nbytes - bulk)


def test_synth_run_says_when_the_schedule_did_not_run_at_all(tmp_path):
    # 4 ranks of 8 bytes: under one 16-byte unit a share, so all of it is torch's tail;
    # "correct" then says nothing of the schedule, and the run says so
    path = write_schedule(point("ring:4", "allgather", 2), tmp_path / "ag.json")
    done = synth_main("run", path, "--size", "32")
    assert done.returncode == 0, done.stderr
    assert "0 bytes through the schedule" in done.stdout and "synth schedule" not in done.stdout
    assert "  torch  " in done.stdout  # torch's own call was timed all the same
    assert done.stderr.startswith("synth: note: 32 bytes is less than one cut of the "
                                  "schedule's chunks") and "was not run" in done.stderr


def test_synth_run_json_times_no_schedule_that_did_not_run_and_names_the_files_version(
        tmp_path):
    # docs/schedule-file.md's version 4 example (written for rank 0); 32 bytes: all of it
    # torch's, so the schedule has no time (it had torch's, under its name), and the
    # version is the file's (it said 1 for every version but 3)
    from tests.test_compact import ring_allgather

    path = tmp_path / "v4.json"
    path.write_text(json.dumps(ring_allgather()))
    done = synth_main("run", str(path), "--size", "32", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["bulk_bytes"], report["version"]) == (0, 4)
    assert report["synth_us"] is None and report["synth_algbw_gbps"] is None
    assert report["torch_us"] > 0
    # a hand-written version 2 that holds no range is still version 2 to the report
    from synth.schedule.file import schedule_to_dict

    doc = schedule_to_dict(point("ring:4", "allgather", 2))
    assert doc["version"] == 1
    path.write_text(json.dumps({**doc, "version": 2}))
    done = synth_main("run", str(path), "--size", "64KB", "--iters", "0", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["version"] == 2, done.stderr


def test_synth_run_refuses_a_size_that_is_not_the_call(tmp_path):
    path = write_schedule(point("ring:4", "reducescatter", 2), tmp_path / "rs.json")
    done = synth_main("run", path, "--size", "1001")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "multiple of 4 bytes" in done.stderr
    done = synth_main("run", path, "--size", "1000", "--dtype", "int32")
    assert done.returncode == 2 and "multiple of 16 bytes" in done.stderr
