"""Import sources built to break `synth topo import` (issue "Trust"), case by case.

Each case is refused with exit 2 and one line on stderr naming the problem, or imports
correctly; none may take time or memory that grows faster than the source. Nothing
here measures wall-clock time: a case that used to be quadratic runs in a subprocess
at a size where quadratic work would outlast a generous timeout, and a case that must
be refused before anything large is built has that builder replaced by one that fails.
"""

import subprocess
import sys

import pytest

import synth.topology.catalog as catalog
from synth.errors import BadInput
from synth.topology.importing import import_source
from synth.topology.importing.draft import Draft
from tests.in_process import synth_main
from tests.test_reliability import one_line, synth_cli

CPU = '<cpu numaid="0" arch="x86_64" vendor="GenuineIntel" modelid="143">{}</cpu>'


def dump(*inside: str) -> str:
    return f'<system version="1">{CPU.format("".join(inside))}</system>\n'


def gpu(bus: str, rank: int, *targets: str) -> str:
    links = "".join(f'<nvlink target="{t}" count="6" tclass="0x030200"/>' for t in targets)
    return (f'<pci busid="{bus}" class="0x030200" link_speed="32.0 GT/s PCIe" '
            f'link_width="16"><gpu dev="{rank}" sm="90" rank="{rank}">{links}</gpu></pci>')


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_nv_count_of_5000_digits_is_refused_in_one_line(tmp_path):
    nv = "NV" + "1" * 5000  # int() of it raised ValueError (over 4300 digits)
    path = write(tmp_path, "smi.txt", f"\tGPU0\tGPU1\nGPU0\t X \t{nv}\nGPU1\t{nv}\t X \n")
    err = one_line(synth_main("topo", "import", path), 2)
    assert "line 2: GPU0 to GPU1: NV1111111111...: more than 1024 NVLinks (5,000 digits)" \
        in err
    err = one_line(synth_main("bounds", "allgather", "--topo", path), 2)
    assert "more than 1024 NVLinks" in err


def test_an_nv_count_over_the_cap_is_refused_and_one_at_it_imports(tmp_path):
    err = one_line(synth_main("topo", "import", write(
        tmp_path, "big.txt", "\tGPU0\tGPU1\nGPU0\t X \tNV1025\nGPU1\tNV1025\t X \n")), 2)
    assert "NV1025: more than 1024 NVLinks" in err
    made = synth_main("topo", "import", write(
        tmp_path, "cap.txt", "\tGPU0\tGPU1\nGPU0\t X \tNV1024\nGPU1\tNV1024\t X \n"))
    assert made.returncode == 0 and "count: 1024" in made.stdout


def test_two_gpus_with_one_bus_id_are_refused_naming_it(tmp_path):
    # it imported as 3 GPUs, every NVLink to 0000:02:00.0 given to the last of them
    text = dump(gpu("0000:01:00.0", 0, "0000:02:00.0"),
                gpu("0000:02:00.0", 1, "0000:01:00.0", "0000:03:00.0"),
                gpu("0000:02:00.0", 2, "0000:01:00.0"))
    err = one_line(synth_main("topo", "import", write(tmp_path, "dup.xml", text)), 2)
    assert "two GPUs with bus id '0000:02:00.0'" in err


def test_bus_ids_that_differ_only_in_case_are_one_bus_id(tmp_path):
    text = dump(gpu("0000:0a:00.0", 0, "0000:01:00.0"), gpu("0000:01:00.0", 1, "0000:0a:00.0"),
                gpu("0000:0A:00.0", 2, "0000:01:00.0"))
    err = one_line(synth_main("topo", "import", write(tmp_path, "case.xml", text)), 2)
    assert "two GPUs with bus id '0000:0a:00.0'" in err


PORTS = 60_000  # same-named ports: quadratic naming is ~1.8e9 steps, linear ~1e5


def test_many_nic_ports_of_one_name_are_named_in_linear_time(tmp_path):
    nets = "".join(f'<net name="mlx5_0" dev="{i}" speed="200000"/>' for i in range(PORTS))
    path = write(tmp_path, "ports.xml", dump(
        gpu("0000:01:00.0", 0), gpu("0000:02:00.0", 1),
        f'<pci busid="0000:03:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" '
        f'link_width="16"><nic>{nets}</nic></pci>'))
    script = ("import sys; from synth.topology.importing import import_source; "
              "d = import_source(sys.argv[1], warn=None); "
              "names = [p.name for p in d.of_kind('nic')]; "
              "print(len(names), len(set(names)), names[1], names[-1])")
    # the 1.5 MB dump of this kind took over 100 s; linear, this takes a few seconds
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(PORTS), str(PORTS), "mlx5_0-2", f"mlx5_0-{PORTS}"]


def test_a_name_taken_by_its_own_suffix_still_gets_a_free_one():
    draft = Draft("d", "", "test")
    names = [draft.add(n, "nic") for n in ("nic", "nic-2", "nic", "nic", "nic-2")]
    assert names == ["nic", "nic-2", "nic-3", "nic-4", "nic-2-2"]


def test_30000_gpus_are_refused_by_counting_before_any_is_built(tmp_path, monkeypatch):
    gpus = "".join(f'<pci busid="0000:{i:06x}.0" class="0x030200"/>' for i in range(30_000))
    path = write(tmp_path, "many.xml", dump(gpus))

    def built(*_, **__):
        raise AssertionError("a part was built before the GPUs were counted")

    monkeypatch.setattr(Draft, "add", built)
    with pytest.raises(BadInput, match=r"many.xml: 30,000 GPUs \(pci elements of class "
                                       r"0x03xxxx or 0x120000; at most 4096\)"):
        import_source(path, warn=None)
    monkeypatch.undo()
    assert "30,000 GPUs" in one_line(synth_main("topo", "import", path), 2)


def wide_box(tmp_path) -> str:
    """2 GPUs and 2,000 NICs (80 KB): --boxes 2048 would be 4.1 million vertices."""
    nics = [f"n{i}" for i in range(2000)]
    lines = ["name: wide", "gpus: 2", f"nics: [{', '.join(nics)}]", "links:",
             "  - {between: [gpu0, gpu1], gbps: 25}"]
    lines += [f"  - {{between: [gpu{i % 2}, {n}], gbps: 25}}" for i, n in enumerate(nics)]
    lines.append("network: {fabric: rails, gbps: 25}")
    return write(tmp_path, "wide.yaml", "\n".join(lines))


def test_boxes_that_would_not_fit_in_memory_are_refused_by_arithmetic(tmp_path, monkeypatch):
    box = wide_box(tmp_path)

    def built(*_, **__):
        raise AssertionError("a copy of the box was built before the size was counted")

    monkeypatch.setattr(catalog, "replace", built)  # join_boxes copies every vertex with it
    # 2048 x (2 GPUs + 2000 NICs) + 2000 rail switches
    with pytest.raises(BadInput, match="widex2048: 2048 boxes of 2,002 GPUs, switches and "
                                       "NICs make 4,102,096 \\(limit 65,536\\)"):
        catalog.resolve(box, 2048)
    with pytest.raises(BadInput, match="make 66,064"):  # 32 x 2,002 + 2,000
        catalog.resolve(box, 32)
    monkeypatch.undo()
    for command in (["topo", "show"], ["bounds", "allgather", "--topo"]):
        # a process of its own: a regression would fill the memory, and its timeout ends it
        assert "4,102,096" in one_line(synth_cli(*command, str(box), "--boxes", "2048"), 2)
    assert catalog.resolve(box, 16).ranks == 32  # 34,032 vertices: within the limit


def test_links_are_counted_too_before_boxes_are_joined(tmp_path, monkeypatch):
    # few vertices, many links: 60 PCIe switches all joined to each other
    switches = [f"s{i}" for i in range(60)]
    lines = ["name: dense", "gpus: 2", "nics: [nic0]", "switches:"]
    lines += [f"  - {{name: {s}, kind: pcie_switch}}" for s in switches]
    lines += ["links:", "  - {between: [gpu0, nic0], gbps: 25}",
              "  - {between: [gpu0, s0], gbps: 25}", "  - {between: [gpu1, s0], gbps: 25}"]
    lines += [f"  - {{between: [{a}, {b}], gbps: 25}}" for i, a in enumerate(switches)
              for b in switches[i + 1:]]
    box = write(tmp_path, "dense.yaml", "\n".join(lines + ["network: {fabric: rails, "
                                                           "gbps: 25}"]))
    monkeypatch.setattr(catalog, "replace", lambda *_, **__: pytest.fail("built"))
    # 1000 boxes: 63,001 vertices fit; 1000 x (2 x (1770 + 3) directed links + 2 to the
    # rail) = 3,548,000 links do not
    with pytest.raises(BadInput, match="densex1000: 1000 boxes of 3,546 links and 1 NIC "
                                       "make 3,548,000 links \\(limit 1,048,576\\)"):
        catalog.resolve(box, 1000)
