"""`synth topo import`: NCCL's topology XML and nvidia-smi topo -m, from real sources.

Every fixture under tests/fixtures/topologies/ is a published file (SOURCES.md names
where) but mi300x_rccl.xml, mi250_rccl.xml, dgxb200-topo.xml and dgxh200-topo.xml,
written from those machines' public structure in the form RCCL and NCCL dump; each test checks the import
against what that machine's documentation says:
GPU count, NVLinks per GPU, NICs and their speed, which NIC shares a PCIe switch with
which GPU. The last part checks that an import gets its built-in's figures (NVLS, the
PCIe paths NCCL uses, one table of link rates), on those files and on small sources
written here in their shape.
"""

import json
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from synth.bounds import bounds
from synth.construct.decompose import decompose
from synth.schedule.collectives import make_collective
from synth.search.pareto import Limits
from synth.topology.catalog import imported, join_boxes, resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.in_process import synth_main
from tests.test_reliability import one_line

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "topologies"


def fixture(name):
    return str(FIXTURES / name)


def lanes_to(topo, kind):
    """GPU -> (lanes, GB/s per lane) of its link to the vertex of `kind`."""
    kinds = {v.name: v.kind for v in topo.vertices}
    return {l.src: (l.count, l.gbps) for l in topo.links
            if l.src in topo.gpus and kinds[l.dst] == kind}


def switch_mates(topo):
    """Per GPU: the NICs hanging on the same switch as it (its PCIe neighbours)."""
    kinds = {v.name: v.kind for v in topo.vertices}
    up = {l.dst: l.src for l in topo.links if kinds[l.src] == "pcie_switch"
          and kinds[l.dst] in ("gpu", "nic")}
    return {g: sorted(n for n, s in up.items() if kinds[n] == "nic" and s == up.get(g))
            for g in topo.gpus}


def test_an_hgx_h100_dump_has_the_structure_of_the_builtin_dgxh100():
    mine, builtin = imported(fixture("ibm-gx3d-h100-topo.xml")), resolve("dgxh100")
    assert mine.ranks == builtin.ranks == 8
    # 5 + 5 + 4 + 4 NVLinks to four NVSwitches, folded into one vertex as the built-in,
    # at the NVLink4 line rate the built-in uses too
    assert set(lanes_to(mine, "nvswitch").values()) == {(18, 25)}
    assert set(lanes_to(builtin, "nvswitch").values()) == {(18, 25)}
    # eight 200 Gb/s NICs, GPU i with mlx5_(7-i) under one bridge (the file's own order)
    assert switch_mates(mine) == {f"gpu{i}": [f"mlx5_{7 - i}"] for i in range(8)}
    assert mine.network.gbps == 25 and mine.network.fabric == "rails"
    # one box: the same bound (7 chunks into each GPU's 18 lanes)
    coll = make_collective("allgather", 8)
    ours, theirs = bounds(lower_with_routes(mine), coll), bounds(lower_with_routes(builtin), coll)
    assert ours.rounds_per_chunk == theirs.rounds_per_chunk == Fraction(7, 18)
    assert ours.us_per_byte == theirs.us_per_byte
    assert "NVLink: 25 GB/s per link and direction, the NVLink4 line rate (SM90)" in \
        mine.assumptions


def test_an_ndv4_file_with_its_gpu_model_has_the_structure_of_dgxa100():
    mine = imported(fixture("azure-ndv4-topo.xml"), gpu="a100-sxm")
    assert mine.ranks == 8 and set(lanes_to(mine, "nvswitch").values()) == {(12, 25.0)}
    # two GPUs and two NICs on each PCIe switch (dgxa100.yaml: "each pair of GPUs shares
    # a PCIe Gen4 switch with two NICs")
    mates = switch_mates(mine)
    assert all(len(nics) == 2 for nics in mates.values())
    assert Counter(tuple(n) for n in mates.values()) == Counter(
        {tuple(n): 2 for n in mates.values()})
    coll = make_collective("allgather", 8)
    ours = bounds(lower_with_routes(mine), coll)
    assert ours == bounds(lower_with_routes(resolve("dgxa100")), coll)
    assert any("--gpu a100-sxm" in a for a in mine.assumptions)


def test_without_the_gpu_model_a_partial_file_is_pcie_and_nics_only_and_says_so():
    topo = imported(fixture("azure-ndv4-topo.xml"))
    assert not lanes_to(topo, "nvswitch") and topo.ranks == 8
    assert sum(v.kind == "nic" for v in topo.vertices) == 8
    assert any("lists no NVLink" in a and "--gpu" in a for a in topo.assumptions)
    assert "WARNING: azure-ndv4-topo.xml lists no NVLink" in topo.description
    assert any("NIC speed 12.5 GB/s" in a for a in topo.assumptions)  # none in the file


@pytest.mark.parametrize("name, gpu, per_gpu_nvlinks, nics, nic_gbps, mates", [
    ("azure-ndv5-topo.xml", "h100-sxm", 18, 8, 50.0, 1),   # one GPU, one NIC per switch
    ("aws-p4d-24xl-topo.xml", None, 0, 4, 12.5, 1),         # two GPUs, one EFA per switch
    # four 100 Gb/s EFA per GPU, used as one NIC (rails.py)
    ("aws-p5.48xl-topo.xml", None, 0, 8, 50.0, 1),
    ("azure-ncv4-topo-ncv4sh.xml", None, 12, 1, 12.5, None),  # NVLink pairs, eth0 on CPU 0
])
def test_each_cloud_file_imports_as_its_machine_is_documented(name, gpu, per_gpu_nvlinks,
                                                              nics, nic_gbps, mates):
    topo = imported(fixture(name), gpu=gpu)
    gpus = set(topo.gpus)
    nvlinks = Counter()
    for l in topo.links:
        if l.src in gpus and ("nvswitch" == l.dst or l.dst in gpus):
            nvlinks[l.src] += l.count
    assert all(nvlinks[g] == per_gpu_nvlinks for g in gpus)
    assert sum(v.kind == "nic" for v in topo.vertices) == nics
    assert topo.network.gbps == nic_gbps
    if mates is not None:
        assert {len(m) for m in switch_mates(topo).values()} == {mates}


def test_ndv2_with_v100_gets_the_cube_mesh_and_one_nic():
    topo = imported(fixture("azure-ndv2-topo.xml"), gpu="v100-sxm")
    degree = Counter()
    for l in topo.links:
        if l.src in topo.gpus and l.dst in topo.gpus:
            degree[l.src] += l.count
    assert set(degree.values()) == {6} and len(degree) == 8  # 6 NVLinks per V100
    assert [v.name for v in topo.vertices if v.kind == "nic"] == ["nic0"]
    assert topo.network.fabric == "single-switch"


def test_a_foreign_dump_keeps_its_fast_nics_and_says_which_it_left_out():
    topo = imported(fixture("rccl-issue1185-topo.xml"))
    # two 200 Gb/s cards of two ports, each card beside one GPU: its ports as one NIC
    assert topo.ranks == 8 and topo.network.gbps == 50
    assert sorted(v.name for v in topo.vertices if v.kind == "nic") == ["mlx5_0..mlx5_1",
                                                                        "mlx5_4..mlx5_5"]
    assert any("left out" in a and "mlx5_2" in a and "mlx5_3" in a for a in topo.assumptions)
    # RCCL wrote it: its sm="90" is a compute-unit count, not Hopper's SM; its gcn is no
    # architecture synth knows (Ampere's tables, the fallback, stand in), and it lists no
    # xGMI link; RCCL runs there all the same, and the reference lines say so (they read
    # plain NCCL, before)
    assert (topo.figures.library, topo.figures.arch) == ("rccl", "ampere")
    assert "lists no xGMI link: imported as PCIe only" in topo.description


@pytest.mark.parametrize("name, gpu, lanes, gbps, mates", [
    ("topo-m-sglang30401-h100-8nic.txt", None, 18, 25.0, {f"gpu{i}": [f"mlx5_{i}"]
                                                           for i in range(8)}),
    ("topo-m-deepep590-b300-cx8.txt", "b200-sxm", 18, 50.0, None),  # NVLink5
    ("topo-m-deepep590-b300-cx8.txt", "b300-sxm", 18, 50.0, None),  # NVLink5, SM103
    ("topo-m-deepep13-a100-sxm4-8nic.txt", None, 12, 25.0, None),
])
def test_a_matrix_of_equal_nv_counts_is_an_nvswitch(name, gpu, lanes, gbps, mates):
    topo = imported(fixture(name), gpu=gpu)
    assert set(lanes_to(topo, "nvswitch").values()) == {(lanes, gbps)}
    switch = next(v for v in topo.vertices if v.kind == "nvswitch")
    assert switch.inferred.startswith(f"NV{lanes} between every pair")
    if mates:
        assert switch_mates(topo) == mates  # PIX: one PCIe switch each


def test_a_b300_matrix_says_its_nv18_guess_on_stderr_and_takes_its_gpu():
    # NV18 is H100's, B200's and B300's alike: the guess (25 GB/s links) is said on
    # stderr, and --gpu b300-sxm gives NVLink5 and ConnectX-8's 800 Gb/s
    src = FIXTURES / "topo-m-deepep590-b300-cx8.txt"
    guessed = synth_main("topo", "import", src)
    assert guessed.returncode == 0
    assert "synth: warning: " in guessed.stderr and "give --gpu h100-sxm, b200-sxm or " \
        "b300-sxm to say which" in guessed.stderr
    topo = imported(fixture("topo-m-deepep590-b300-cx8.txt"), gpu="b300-sxm")
    assert (topo.figures.arch, topo.network.gbps) == ("blackwell", 100)
    told = synth_main("topo", "import", src, "--gpu", "b300-sxm")
    assert told.returncode == 0 and "warning" not in told.stderr


def test_the_a100_matrix_puts_each_gpu_pair_and_its_two_nics_under_one_switch():
    topo = imported(fixture("topo-m-deepep13-a100-sxm4-8nic.txt"))
    kinds = {v.name: v.kind for v in topo.vertices}
    up = {l.dst: l.src for l in topo.links if kinds[l.src] == "pcie_switch"
          and kinds[l.dst] != "pcie_switch" or (kinds[l.src] == kinds[l.dst] == "pcie_switch"
                                                 and l.src < l.dst and "cpu" not in l.dst)}
    # PXB: GPU0, GPU1, NIC0, NIC1 under one switch; the NICs (PIX to each other) on a
    # switch of their own below it
    assert up["gpu0"] == up["gpu1"] == up[up["mlx5_0"]] != up["gpu2"]
    assert up["mlx5_0"] == up["mlx5_1"] != up["gpu0"]


def test_the_v100_matrix_reads_the_cube_mesh_and_the_nic_beside_gpu2_and_gpu3():
    topo = imported(fixture("topo-m-dlperf-v100-sxm2-8gpu.txt"))
    pairs = {(l.src, l.dst): l.count for l in topo.links
             if l.src in topo.gpus and l.dst in topo.gpus and l.src < l.dst}
    assert len(pairs) == 16 and pairs[("gpu0", "gpu3")] == 2 and pairs[("gpu0", "gpu1")] == 1
    assert switch_mates(topo)["gpu2"] == switch_mates(topo)["gpu3"] == ["mlx5_0"]


def test_an_imported_two_box_cluster_synthesizes_like_the_builtin():
    box = imported(fixture("ibm-gx3d-h100-topo.xml"), nic_gbps=50)  # dgxh100's NICs
    frontiers = []
    for topo in (join_boxes(box, 2, "ibm-h100x2"), resolve("dgxh100x2")):
        lowering = lower_with_routes(topo)
        h, _ = find_hierarchy(lowering)
        search = decompose(lowering.model, h, "allgather", Limits(max_steps=12,
                                                                  time_limit=30))
        bound = bounds(lowering, make_collective("allgather", 16)).rounds_per_chunk
        frontiers.append((h.describe(), [(p.steps, p.ratio / bound) for p in search.points]))
    (h1, mine), (h2, theirs) = frontiers
    assert h1 == h2 == "2 identical boxes of 8 GPUs, 8 peer groups of 2 across them, 8 rails"
    assert mine == theirs  # one table of link rates: the same frontier, point for point


def test_cli_import_writes_a_commented_file_that_reads_back_and_shows_what_it_inferred(
        tmp_path):
    out = tmp_path / "h100.yaml"
    made = synth_main("topo", "import", fixture("topo-m-sglang30401-h100-8nic.txt"), "-o",
                      str(out))
    assert made.returncode == 0, made.stderr
    assert "imported 8 GPUs" in made.stderr and made.stdout == ""
    text = out.read_text()
    assert "# NV18 (read) at 25 GB/s each" in text  # a comment per number
    assert "PCIe x16, 64 GB/s (assumed)" in text  # Gen5 x16: 16 x 4 GB/s
    topo = topology_from_dict(yaml.safe_load(text))
    assert topo.ranks == 8 and topo.source.startswith("nvidia-smi topo -m output")
    shown = synth_main("topo", "show", str(out))
    assert shown.returncode == 0
    assert "inferred: nvswitch: NV18 between every pair of GPUs" in shown.stdout
    assert "assumed: NVLink: 25 GB/s" in shown.stdout
    drawn = synth_main("topo", "draw", str(out), "-o", str(tmp_path / "t.svg"))
    assert drawn.returncode == 0 and "dashed" in (tmp_path / "t.svg").read_text()


def test_topo_accepts_a_source_directly_and_repeats_it_with_boxes(tmp_path):
    made = synth_main("allgather", "--topo", fixture("ibm-gx3d-h100-topo.xml"), "--boxes", "2",
                      "--method", "decomposed", "--time-limit", "20", "--out",
                      str(tmp_path / "out"), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    assert '"topology": "ibm-gx3d-h100-topox2"' in made.stdout
    verified = synth_main("verify", *map(str, (tmp_path / "out").rglob("*.json")))
    assert verified.returncode == 0, verified.stderr


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>
<system version="1">&lol2;</system>
"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE system [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<system version="1"><cpu numaid="0">&xxe;</cpu></system>
"""
GPU = ('<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200">'
       '{gpu}</pci><pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="90"/></pci>'
       '</cpu></system>')
MATRIX = """\tGPU0\tGPU1\tNIC0
GPU0\t X \tNV4\tPIX
GPU1\tNV4\t X \tPIX
NIC0\tPIX\tPIX\t X
"""


@pytest.mark.parametrize("text, name, message", [
    ("<system><cpu></system>", "broken.xml", "line 1: malformed XML"),
    (BILLION_LAUGHS, "laughs.xml", "line 2: a DOCTYPE or entity declaration (refused"),
    (EXTERNAL, "xxe.xml", "a DOCTYPE or entity declaration (refused"),
    (GPU.format(gpu='<gpu dev="0"/>'), "nosm.xml", "line 1: a <gpu> without sm"),
    (GPU.format(gpu='<gpu dev="0" sm="75"><nvlink target="0000:02:00.0" count="2" '
                'tclass="0x030200"/></gpu>'), "sm75.xml", "unknown SM 75"),
    (GPU.format(gpu='<gpu dev="0" sm="90"><nvlink target="0000:99:00.0" count="2" '
                'tclass="0x030200"/></gpu>'), "target.xml",
     "an nvlink to an unknown bus id '0000:99:00.0'"),
    (MATRIX.replace("NIC0\tPIX\tPIX\t X\n", ""), "rows.txt", "the rows and columns disagree"),
    (MATRIX.replace("GPU1\tNV4\t X \tPIX", "GPU1\tNV2\t X \tPIX"), "asym.txt",
     "GPU0 to GPU1 is NV4 but GPU1 to GPU0 is NV2"),
    (MATRIX.replace("NV4\tPIX\n", "NV4\tQQQ\n", 1), "cell.txt", "unknown entry 'QQQ'"),
    ("hello", "plain.txt", "neither NCCL topology XML nor nvidia-smi topo -m output"),
    ("<system>" + "<pci>" * 5000 + "</pci>" * 5000 + "</system>", "deep.xml",
     "elements nested over 64 deep"),
])
def test_bad_sources_are_refused_naming_the_place(tmp_path, text, name, message):
    # in process (BadInput: one line, exit 2, as test_real_files_that_cannot_be_a_
    # topology_are_refused shows through the command)
    from synth.errors import BadInput
    from synth.topology.importing import import_source

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadInput) as refused:
        import_source(path)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_real_files_that_cannot_be_a_topology_are_refused(tmp_path):
    # Azure's current NC A100 v4 file: every nvlink targets its own GPU
    assert "line 5: an nvlink from GPU 0001:00:00.0 to itself" in one_line(
        synth_main("topo", "import", fixture("azure-ncv4-topo.xml")), 2)
    # AWS's g5.48xlarge file lists bare bus ids: no GPU in it
    assert "no GPU in the file" in one_line(
        synth_main("bounds", "allgather", "--topo", fixture("aws-g5.48xl-topo.xml")), 2)
    binary = tmp_path / "dump.xml"
    binary.write_bytes(b"\x7fELF\x02\x01\x00\x00" * 8)
    assert "a binary file" in one_line(synth_main("topo", "import", str(binary)), 2)
    assert "unknown --gpu 'x100'" in one_line(synth_main("topo", "import",
                                                         fixture("azure-ndv4-topo.xml"),
                                                         "--gpu", "x100"), 2)


def test_a_topology_file_marks_inferred_parts_with_text_only(tmp_path):
    doc = {"name": "two", "gpus": 2, "source": "by hand", "assumptions": ["a guess"],
           "links": [{"between": ["gpu0", "gpu1"], "gbps": 25, "inferred": "seen on a photo"}]}
    topo = topology_from_dict(doc)
    assert topo.links[0].inferred == "seen on a photo" and topo.assumptions == ("a guess",)
    doc["links"][0]["inferred"] = 5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert "links[0].inferred: expected a string" in one_line(
        synth_main("topo", "show", str(bad)), 2)


TWO_GPUS = ('<system version="1"><cpu numaid="0" vendor="{vendor}"><pci busid="{bus}" '
            'class="0x030200"/><pci busid="0000:02:00.0" class="0x030200"/>'
            '<nic><net name="{nic}" speed="200000"/><net name="{nic}" speed="200000"/></nic>'
            '</cpu>{more}</system>')


@pytest.mark.parametrize("name, fields, gpu_name", [
    # a line break or line separator from an attribute must not end a comment
    ("vendor.xml", dict(vendor="x&#10;: [&#10;#&#x2028;a: 1"), None),
    ("del.xml", dict(bus="0000:01:00.0&#x7f;"), None),       # a character YAML refuses raw
    ("p4d-\U0001f680.xml", {}, None),                         # a name beyond the BMP
    ("dup.xml", dict(nic="gpu0"), None),                      # NIC names taken twice
    # empty sockets are left out: 3000 of them cost nothing (they were joined pairwise)
    ("cpus.xml", dict(more='<cpu vendor="AMD"/>' * 3000), None),
])
def test_whatever_a_source_says_the_file_written_reads_back(tmp_path, name, fields,
                                                            gpu_name):
    from synth.files import parse_yaml
    from synth.topology.importing import import_source

    text = TWO_GPUS.format(**{"vendor": "AMD", "bus": "0000:01:00.0", "nic": "mlx5_0",
                              "more": "", **fields})
    path = tmp_path / name
    path.write_text(text)
    draft = import_source(path, nic_gbps=1e6)  # 1e+06 would read back as text
    topo = topology_from_dict(parse_yaml(draft.to_yaml()))
    assert topo.ranks == 2 and topo.network.gbps == 1e6
    assert sum(v.kind == "nic" for v in topo.vertices) == 2


def test_a_matrix_with_a_byte_order_mark_and_crlf_imports(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(("\ufeff" + MATRIX + "\nNIC Legend:\n\n  NIC0: mlx5_0\n").replace(
        "\n", "\r\n").encode())
    topo = imported(str(path))
    assert topo.ranks == 2 and [v.name for v in topo.vertices if v.kind == "nic"] == ["mlx5_0"]


# --- the machine's own figures: NVLS, the PCIe NCCL uses, one table of link rates -----

def hgx_dump(sm=90, lanes=(5, 5, 4, 4)):
    """An NCCL_TOPO_DUMP_FILE of an 8-GPU HGX board as the IBM H100 dump has it: two
    sockets of four PCIe bridges, each bridge one GPU and one 400 Gb/s NIC; every GPU's
    NVLinks go to four NVSwitches (tclass 0x068000)."""
    switches = ["0000:f3:00.0", "0000:f4:00.0", "0000:f5:00.0", "0000:f6:00.0"]
    sockets = []
    for cpu in range(2):
        bridges = []
        for k in range(4 * cpu, 4 * cpu + 4):
            links = "".join(f'<nvlink target="{t}" count="{c}" tclass="0x068000"/>'
                            for t, c in zip(switches, lanes))
            bridges.append(
                f'<pci busid="0000:{0x10 * k + 0x10:02x}:00.0" class="0x060400" '
                'link_speed="32.0 GT/s PCIe" link_width="16">'
                f'<pci busid="0000:{0x10 * k + 0x11:02x}:00.0" class="0x020000" '
                'link_speed="32.0 GT/s PCIe" link_width="16"><nic>'
                f'<net name="mlx5_{k}" dev="{k}" speed="400000" port="1" gdr="1"/></nic></pci>'
                f'<pci busid="0000:{0x10 * k + 0x12:02x}:00.0" class="0x030200" '
                'link_speed="32.0 GT/s PCIe" link_width="16">'
                f'<gpu dev="{k}" sm="{sm}" rank="{k}" gdr="1">{links}</gpu></pci></pci>')
        sockets.append(f'<cpu numaid="{cpu}" arch="x86_64" vendor="GenuineIntel" '
                       f'modelid="143">{"".join(bridges)}</cpu>')
    return f'<system version="1">{"".join(sockets)}</system>\n'


def bounds_json(*args):
    made = synth_main("bounds", *args, "--json")
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)


def test_an_imported_h100_dump_reduces_in_its_nvswitches_as_the_builtin(tmp_path):
    dump = tmp_path / "hgx-h100.xml"
    dump.write_text(hgx_dump())
    out = tmp_path / "imported.yaml"
    assert synth_main("topo", "import", str(dump), "-o", str(out)).returncode == 0
    switch = next(s for s in yaml.safe_load(out.read_text())["switches"]
                  if s["kind"] == "nvswitch")
    assert switch["can"] == ["multicast", "reduce"]  # NVLS, as dgxh100.yaml has it
    mine = bounds_json("allreduce", "--topo", str(out))
    theirs = bounds_json("allreduce", "--topo", "dgxh100")
    # in the switch, a GPU sends its buffer once and receives the sum once: n bytes each
    # way over 18 lanes of 25 GB/s, 450 GB/s (without NVLS 2(N-1)/N of it: 7/72 rounds)
    assert mine["rounds_per_chunk"] == theirs["rounds_per_chunk"] == "1/18"
    assert mine["algbw_gbps_max"] == theirs["algbw_gbps_max"] == pytest.approx(450)


@pytest.mark.parametrize("name, gpu", [
    ("azure-ndv5-topo.xml", "h100-sxm"),   # a partial file: the model says NVSwitch
    ("azure-ndv5-topo.xml", "h200-sxm"),
    ("topo-m-sglang30401-h100-8nic.txt", None),  # NV18: read as H100
])
def test_every_way_of_naming_an_h100_gets_nvls(name, gpu):
    topo = imported(fixture(name), gpu=gpu)
    assert [v.can for v in topo.vertices if v.kind == "nvswitch"] == [("multicast", "reduce")]
    allreduce = bounds(lower_with_routes(topo), make_collective("allreduce", 8))
    assert allreduce.rounds_per_chunk == Fraction(1, 18)


@pytest.mark.parametrize("source, gpu", [
    ("topo-m-deepep13-a100-sxm4-8nic.txt", None), ("azure-ndv4-topo.xml", "a100-sxm"),
    ("dump-sm80.xml", None)])
def test_an_a100s_nvswitch_only_forwards(tmp_path, source, gpu):
    if source == "dump-sm80.xml":
        (tmp_path / source).write_text(hgx_dump(sm=80, lanes=(4, 4, 2, 2)))  # 12 NVLink3
        path = str(tmp_path / source)
    else:
        path = fixture(source)
    topo = imported(path, gpu=gpu)
    assert [v.can for v in topo.vertices if v.kind == "nvswitch"] == [()]
    # 2(N-1)/N of a buffer through each GPU's 12 lanes: 7/48 rounds per chunk
    allreduce = bounds(lower_with_routes(topo), make_collective("allreduce", 8))
    assert allreduce.rounds_per_chunk == Fraction(7, 48)


DGX1_SOURCES = [("topo-m-dlperf-v100-sxm2-8gpu.txt", None), ("azure-ndv2-topo.xml", "v100-sxm")]


@pytest.mark.parametrize("name, gpu", DGX1_SOURCES)
def test_an_imported_dgx1_keeps_gpu_traffic_on_nvlink_as_nccl_does(name, gpu):
    topo = imported(fixture(name), gpu=gpu)
    model = lower_with_routes(topo).model
    # the 16 NVLink pairs of the cube mesh, both ways; no pair over PCIe or the sockets
    assert len(model.links) == 32
    assert all(l.alpha_us == 0.7 for l in model.links)
    if name.endswith(".txt"):  # nvidia-smi's numbering: GPU0 and GPU5 are SYS apart
        assert (0, 5) not in model.link and (0, 4) in model.link
        assert switch_mates(topo)["gpu2"] == ["mlx5_0"]  # the NIC on its PIX switch
    # hardware.md: any allgather on this graph takes >= 2 steps and >= 7/6 rounds per
    # chunk, 171.4 GB/s at 25 GB/s a link (dgx1.yaml)
    for b in (bounds(lower_with_routes(topo), make_collective("allgather", 8)),
              bounds(lower_with_routes(resolve("dgx1")), make_collective("allgather", 8))):
        assert (b.steps, b.rounds_per_chunk) == (2, Fraction(7, 6))


def test_the_cli_bounds_an_imported_dgx1_as_the_builtin():
    mine = bounds_json("allgather", "--topo", fixture(DGX1_SOURCES[0][0]))
    theirs = bounds_json("allgather", "--topo", "dgx1")
    for key in ("steps", "rounds_per_chunk", "latency_us", "us_per_mb"):
        assert mine[key] == theirs[key], key
    assert mine["rounds_per_chunk"] == "7/6" and mine["latency_us"] == pytest.approx(1.4)


def test_gpus_that_nvlink_leaves_apart_meet_over_pcie_at_its_latency():
    # NC A100 v4: NVLink pairs 0-1 and 2-3; NCCL rings the pairs together over PCIe
    topo = imported(fixture("azure-ncv4-topo-ncv4sh.xml"))
    link = lower_with_routes(topo).model.link
    assert link[(0, 1)].alpha_us == 0.7  # NVLink
    assert link[(0, 2)].alpha_us == 1.0  # PCIe: NCCL's 1.0 us a PCI hop
    assert any("NVLink does not join every GPU" in a for a in topo.assumptions)


RING_AND_A_NIC = """\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0
GPU0\t X \tNV2\tPIX\tNV2\tPIX
GPU1\tNV2\t X \tNV2\tSYS\tSYS
GPU2\tPIX\tNV2\t X \tNV2\tPIX
GPU3\tNV2\tSYS\tNV2\t X \tSYS
NIC0\tPIX\tSYS\tPIX\tSYS\t X
"""


def test_a_nic_beside_two_gpus_without_an_nvlink_between_them_serves_one(tmp_path):
    # an NVLink ring 0-1-2-3 joins every GPU; GPU0 and GPU2 share the NIC's PCIe switch
    # but no NVLink, so their PCIe route would be a link NCCL never uses
    path = tmp_path / "ring.txt"
    path.write_text(RING_AND_A_NIC)
    topo = imported(str(path), gpu="v100-sxm")
    model = lower_with_routes(topo).model
    assert sorted(model.link) == [(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0),
                                  (3, 2)]
    assert switch_mates(topo) == {"gpu0": ["NIC0"], "gpu1": [], "gpu2": [], "gpu3": []}


def rails_dump(switches, widths=None, more=""):
    """One socket; switch k holds switches[k] = (GPUs, NICs), each NIC 100 Gb/s on its
    own Gen4 link, x8 (16 GB/s) or as `widths` lists them by NIC; `more` inside the
    socket after them (a nested switch)."""
    parts, gpu, nic = [], 0, 0
    for k, (gpus, nics) in enumerate(switches):
        inside = ""
        for _ in range(gpus):
            inside += (f'<pci busid="0000:{k + 1}{gpu:x}:00.0" class="0x030200" link_speed='
                       f'"32.0 GT/s PCIe" link_width="16"><gpu dev="{gpu}" sm="90" '
                       f'rank="{gpu}" gdr="1"/></pci>')
            gpu += 1
        for _ in range(nics):
            inside += (f'<pci busid="0000:{k + 1}{nic + 8:x}:00.0" class="0x020000" '
                       f'link_speed="16.0 GT/s PCIe" link_width="{(widths or {}).get(nic, 8)}">'
                       f'<nic><net name="efa{nic}" dev="{nic}" speed="100000"/></nic></pci>')
            nic += 1
        parts.append(f'<pci busid="0000:0{k}:00.0" class="0x060400" link_speed="16.0 GT/s '
                     f'PCIe" link_width="16">{inside}</pci>')
    return f'<system version="1"><cpu numaid="0">{"".join(parts)}{more}</cpu></system>\n'


def test_a_gpus_rails_are_one_nic_of_their_summed_rate(tmp_path):
    # AWS p5: four 100 Gb/s EFA NICs beside each GPU; NCCL turns the GPU's channels over
    # all four, AWS's plugin joins them into one device: one NIC of 4 x 12.5 GB/s, its
    # PCIe link 4 x 16 GB/s
    topo = imported(fixture("aws-p5.48xl-topo.xml"), gpu="h100-sxm")
    nics = [v.name for v in topo.vertices if v.kind == "nic"]
    assert nics[0] == "rdmap79s0..rdmap82s0" and len(nics) == 8
    assert topo.network.gbps == 50
    link = next(l for l in topo.links if l.dst == nics[0])
    assert (link.gbps, link.count) == (16, 4)
    assert any("DIVUP(nets, GPUs)" in a and "ncclTopoGetLocalNetType" in a
               for a in topo.assumptions)
    assert "each GPU's 4 NICs joined into one" in topo.description
    # across two boxes each GPU leaves through its own rails, and arrives through its
    # peer's: eight NICs a box, one per GPU
    model = lower_with_routes(join_boxes(topo, 2, "x2"))
    names = set(nics)
    for g in range(8):
        through = [v.split(".", 1)[1] for v in model.routes[(g, g + 8)]
                   if v.split(".", 1)[-1] in names]
        assert through == [nics[g], nics[g]], g


def nic_names(source, tmp_path, name="rails.xml"):
    path = tmp_path / name
    path.write_text(source)
    topo = imported(str(path))
    said = any("NICs are routed one at a time" in a for a in topo.assumptions)
    return sorted(v.name for v in topo.vertices if v.kind == "nic"), topo.network.gbps, said


def _pci(bus, cls, width, inside):
    return (f'<pci busid="0000:{bus}:00.0" class="{cls}" link_speed="16.0 GT/s PCIe" '
            f'link_width="{width}">{inside}</pci>')


def _gpu(bus, dev):
    return _pci(bus, "0x030200", 16, f'<gpu dev="{dev}" sm="90" rank="{dev}" gdr="1"/>')


def _nic(bus, name):
    return _pci(bus, "0x020000", 8, f'<nic><net name="{name}" speed="100000"/></nic>')


# switch 70 holds efa0, efa1 and switch 71, which holds GPU0, efa2 and efa3; switch 80
# holds GPU1, efa4 and efa5
NESTED = ('<system version="1"><cpu numaid="0">' + _pci("70", "0x060400", 16, (
    _nic("73", "efa0") + _nic("74", "efa1") + _pci("71", "0x060400", 16,
    _gpu("75", 0) + _nic("76", "efa2") + _nic("77", "efa3")))) + _pci("80", "0x060400", 16,
    _gpu("81", 1) + _nic("82", "efa4") + _nic("83", "efa5")) + "</cpu></system>\n")
# switch 90 holds GPU0 and two switches of one NIC each (efa0, efa1); switch 95 holds
# GPU1, efa2 and efa3: GPU0's NICs hang from two parents, joined by neither
SPLIT = ('<system version="1"><cpu numaid="0">' + _pci("90", "0x060400", 16, (
    _gpu("91", 0) + _pci("92", "0x060400", 16, _nic("93", "efa0")) +
    _pci("94", "0x060400", 16, _nic("96", "efa1")))) + _pci("95", "0x060400", 16,
    _gpu("97", 1) + _nic("98", "efa2") + _nic("99", "efa3")) + "</cpu></system>\n")
CPU_NIC = ('<pci busid="0000:90:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" '
           'link_width="8"><nic><net name="mgmt" dev="9" speed="100000"/></nic></pci>')


@pytest.mark.parametrize("switches, widths, more, nics, gbps, said", [
    ([(1, 2), (1, 2)], None, "", ["efa0..efa1", "efa2..efa3"], 25, False),
    ([(1, 1), (1, 1)], None, "", ["efa0", "efa1"], 12.5, False),  # nothing to join or say
    # one NIC rate joins boxes: GPUs with as many NICs each, or nothing is joined
    ([(1, 2), (1, 1)], None, "", ["efa0", "efa1", "efa2"], 12.5, True),
    ([(1, 2), (1, 4)], None, "", [f"efa{i}" for i in range(6)], 12.5, True),
    ([(1, 2), (1, 2)], {3: 4}, "", [f"efa{i}" for i in range(4)], 12.5, True),  # efa3 x4
    # two GPUs share four NICs: which NCCL gives which GPU hangs on their device numbers
    ([(2, 4)], None, "", [f"efa{i}" for i in range(4)], 12.5, True),
    ([(2, 3)], None, "", [f"efa{i}" for i in range(3)], 12.5, True),
    ([(2, 2)], None, "", ["efa0", "efa1"], 12.5, False),  # each GPU its own (routes.py)
    # a NIC on the socket, nearest no GPU alone, is nobody's rail
    ([(1, 2), (1, 2)], None, CPU_NIC, ["efa0", "efa1", "efa2", "efa3", "mgmt"], 12.5, True),
])
def test_rails_are_joined_only_where_every_nic_is_one_gpus_alone(tmp_path, switches, widths,
                                                                 more, nics, gbps, said):
    assert nic_names(rails_dump(switches, widths, more), tmp_path) == (nics, gbps, said)


def test_nics_nearer_to_a_gpu_below_keep_the_switch_above_from_joining(tmp_path):
    # efa2 and efa3 are GPU0's, nearer to it than efa0 and efa1, which NCCL gives no
    # GPU (they are nobody's rails): nothing is joined, efa4 and efa5 neither
    found, gbps, said = nic_names(NESTED, tmp_path)
    assert found == [f"efa{i}" for i in range(6)] and gbps == 12.5 and said
    found, gbps, said = nic_names(SPLIT, tmp_path)
    assert found == [f"efa{i}" for i in range(4)] and gbps == 12.5 and said


def test_a_matrix_never_joins_nics_its_rates_and_links_are_assumed(tmp_path):
    matrix = ("        GPU0    GPU1    NIC0    NIC1    NIC2    NIC3\n"
              "GPU0     X      NV18    PIX     PIX     SYS     SYS\n"
              "GPU1    NV18     X      SYS     SYS     PIX     PIX\n"
              "NIC0    PIX     SYS      X      PIX     SYS     SYS\n"
              "NIC1    PIX     SYS     PIX      X      SYS     SYS\n"
              "NIC2    SYS     PIX     SYS     SYS      X      PIX\n"
              "NIC3    SYS     PIX     SYS     SYS     PIX      X\n")
    path = tmp_path / "m.txt"
    path.write_text(matrix)
    topo = imported(str(path))
    assert sum(v.kind == "nic" for v in topo.vertices) == 4
    assert any("a matrix gives no NIC rates or links" in a for a in topo.assumptions)


def test_a_file_without_nvlinks_says_so_on_stderr_once(tmp_path):
    out = tmp_path / "ndv4.yaml"
    made = synth_main("topo", "import", fixture("azure-ndv4-topo.xml"), "-o", str(out))
    assert made.returncode == 0, made.stderr
    warned = [line for line in made.stderr.splitlines() if line.startswith("synth: warning:")]
    assert warned == ["synth: warning: azure-ndv4-topo.xml lists no NVLink (a partial "
                      "NCCL_TOPO_FILE has none): imported as PCIe only; if its GPUs have "
                      "NVLink, give --gpu (v100-sxm, a100-sxm, h100-sxm, h200-sxm, b200-sxm, b300-sxm)"]
    assert "WARNING: azure-ndv4-topo.xml lists no NVLink" in yaml.safe_load(
        out.read_text())["description"]
    shown = synth_main("topo", "show", fixture("azure-ndv4-topo.xml"))
    assert shown.returncode == 0 and shown.stderr.count("synth: warning:") == 1
    given = synth_main("topo", "import", fixture("azure-ndv4-topo.xml"), "--gpu", "a100-sxm")
    assert given.returncode == 0 and "warning" not in given.stderr


def test_the_builtins_use_the_one_table_of_link_rates():
    from synth.topology.catalog import GEN_GBPS
    from synth.topology.rates import NVLINK_GBPS, PCIE_LANE_GBPS, XGMI_GBPS

    # line rates per link and direction: NVLink2, 3, 4 all 25 GB/s, NVLink5 50; PCIe x16
    # Gen3 16, Gen4 32, Gen5 64 GB/s
    assert NVLINK_GBPS == {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
    assert [16 * PCIE_LANE_GBPS[g] for g in (3, 4, 5)] == [16, 32, 64]
    assert GEN_GBPS == 25.0
    nvlink = {"dgx1": 2, "ndv2": 2, "dgx2": 2, "dgxa100": 3, "dgxh100": 4, "dgxh200": 4,
              "dgxb200": 5, "gb200tray": 5}
    pcie = {"ndv2": 3, "dgx2": 3, "dgxa100": 4, "dgxh100": 5, "dgxh200": 5, "dgxb200": 5,
            "gb200tray": 5}
    for name, generation in nvlink.items():
        topo = resolve(name)
        kinds = {v.name: v.kind for v in topo.vertices}
        lanes = {l.gbps for l in topo.links if "gpu" == kinds[l.src]
                 and kinds[l.dst] in ("gpu", "nvswitch")}
        assert lanes == {NVLINK_GBPS[generation]}, name
        x16 = {l.gbps for l in topo.links if kinds[l.src] == "gpu"
               and kinds[l.dst] in ("nic", "pcie_switch")}
        assert x16 == ({16 * PCIE_LANE_GBPS[pcie[name]]} if name in pcie else set()), name
    # and AMD's: mi300x's and mi250's xGMI links are the gfx942 and gfx90a line rates an
    # RCCL dump is read at
    for name, gcn, gbps in (("mi300x", "gfx942", 64), ("mi250", "gfx90a", 50)):
        topo = resolve(name)
        assert {l.gbps for l in topo.links if l.src in topo.gpus
                and l.dst in topo.gpus} == {XGMI_GBPS[gcn]} == {gbps}, name


@pytest.mark.parametrize("name, gpu, builtin, allgather, allreduce", [
    # one box: allgather brings 7 chunks into each GPU (18 lanes: 7/18; 12: 7/12; the
    # cube mesh: 7/6, hardware.md); allreduce 1/18 with NVLS, else 2(N-1)/N x that / 2
    ("ibm-gx3d-h100-topo.xml", None, "dgxh100", Fraction(7, 18), Fraction(1, 18)),
    ("azure-ndv5-topo.xml", "h100-sxm", "dgxh100", Fraction(7, 18), Fraction(1, 18)),
    ("topo-m-deepep13-a100-sxm4-8nic.txt", None, "dgxa100", Fraction(7, 12), Fraction(7, 48)),
    ("azure-ndv4-topo.xml", "a100-sxm", "dgxa100", Fraction(7, 12), Fraction(7, 48)),
    ("topo-m-dlperf-v100-sxm2-8gpu.txt", None, "dgx1", Fraction(7, 6), Fraction(7, 24)),
    # RCCL's dump: 7 chunks over 7 xGMI links, 1; allreduce 14 eighths over 7, 1/4
    ("mi300x_rccl.xml", None, "mi300x", Fraction(1), Fraction(1, 4)),
    # Frontier's MI250X node: a package takes 6 chunks in over its 5 links to the other
    # packages, 6/5; allreduce 2 x (4 - 1) crossings between packages over 4 x 5 links
    ("mi250_rccl.xml", None, "mi250", Fraction(6, 5), Fraction(3, 10)),
    # dumps written from the DGX B200's and DGX H200's public structure: 18 lanes to
    # switches that reduce (NVLS), at 50 GB/s (NVLink5, SM100) and 25 (NVLink4, SM90)
    ("dgxb200-topo.xml", None, "dgxb200", Fraction(7, 18), Fraction(1, 18)),
    ("dgxh200-topo.xml", None, "dgxh200", Fraction(7, 18), Fraction(1, 18)),
])
def test_an_imported_machine_has_its_builtins_bounds(name, gpu, builtin, allgather,
                                                     allreduce):
    mine, theirs = lower_with_routes(imported(fixture(name), gpu=gpu)), lower_with_routes(
        resolve(builtin))
    for coll, expected in (("allgather", allgather), ("allreduce", allreduce)):
        ours = bounds(mine, make_collective(coll, 8))
        its = bounds(theirs, make_collective(coll, 8))
        assert ours.rounds_per_chunk == its.rounds_per_chunk == expected, coll
        assert (ours.steps, ours.us_per_byte) == (its.steps, its.us_per_byte), coll


@pytest.mark.parametrize("name, gpu, nic", [("ibm-gx3d-h100-topo.xml", None, 50),
                                            ("azure-ndv5-topo.xml", "h100-sxm", None),
                                            # four 12.5 GB/s EFA rails a GPU: 50 GB/s
                                            ("aws-p5.48xl-topo.xml", "h100-sxm", None)])
def test_two_imported_h100_boxes_have_dgxh100x2s_bounds(name, gpu, nic):
    box = imported(fixture(name), gpu=gpu, nic_gbps=nic)
    mine = lower_with_routes(join_boxes(box, 2, "x2"))
    theirs = lower_with_routes(resolve("dgxh100x2"))
    # allgather: each GPU takes in 15 chunks over 18 NVLink lanes and its NIC's 50 GB/s
    # (2 lanes' worth): 15/20
    for coll in ("allgather", "allreduce"):
        ours = bounds(mine, make_collective(coll, 16))
        assert ours == bounds(theirs, make_collective(coll, 16)), coll
        if coll == "allgather":
            assert ours.rounds_per_chunk == Fraction(3, 4)


@pytest.mark.parametrize("name, builtin, gbps, generation, arch", [
    ("dgxb200-topo.xml", "dgxb200", 50, "NVLink5 line rate (SM100)", "blackwell"),
    ("dgxh200-topo.xml", "dgxh200", 25, "NVLink4 line rate (SM90)", "hopper"),
])
def test_a_dgx_b200_or_h200_dump_has_the_structure_and_figures_of_its_builtin(
        name, builtin, gbps, generation, arch):
    mine, theirs = imported(fixture(name)), resolve(builtin)
    assert mine.ranks == theirs.ranks == 8
    # 9 + 9 links to two NVLink5 switch chips, or 5 + 5 + 4 + 4 to four NVSwitches:
    # one vertex of 18 lanes a GPU, at the built-in's rate, reducing as it does (NVLS)
    assert set(lanes_to(mine, "nvswitch").values()) == set(
        lanes_to(theirs, "nvswitch").values()) == {(18, gbps)}
    assert [v.can for v in mine.vertices if v.kind == "nvswitch"] == [
        v.can for v in theirs.vertices if v.kind == "nvswitch"] == [("multicast", "reduce")]
    assert f"NVLink: {gbps} GB/s per link and direction, the {generation}" in \
        mine.assumptions
    # one 400 Gb/s ConnectX-7 beside each GPU, joined by rails as the built-in's boxes
    assert switch_mates(mine) == {f"gpu{i}": [f"mlx5_{i}"] for i in range(8)}
    assert (mine.network.fabric, mine.network.gbps) == (theirs.network.fabric,
                                                        theirs.network.gbps) == ("rails", 50)
    # cost model 2: the architecture's NCCL tables and default efficiencies, as the
    # built-in's `costs: {arch: ...}`
    assert mine.figures == theirs.figures and mine.figures.arch == arch


@pytest.mark.parametrize("name, builtin", [("dgxb200-topo.xml", "dgxb200x2"),
                                           ("dgxh200-topo.xml", "dgxh200x2")])
def test_two_imported_b200_or_h200_boxes_have_the_builtins_bounds(name, builtin):
    mine = lower_with_routes(join_boxes(imported(fixture(name)), 2, "x2"))
    theirs = lower_with_routes(resolve(builtin))
    for coll in ("allgather", "allreduce"):
        assert bounds(mine, make_collective(coll, 16)) == bounds(
            theirs, make_collective(coll, 16)), coll


# --- RCCL's dump: AMD GPUs, their gcn architecture and xGMI links -------------------

def test_an_mi300x_dump_has_the_structure_and_figures_of_the_builtin_mi300x():
    mine, builtin = imported(fixture("mi300x_rccl.xml")), resolve("mi300x")
    kinds = {v.name: v.kind for v in mine.vertices}
    xgmi = Counter()
    for l in mine.links:
        if kinds[l.src] == kinds[l.dst] == "gpu":
            xgmi[l.src] += l.count
            assert (l.gbps, l.alpha_us) == (64, 0.7)  # MI300X's line rate, as the built-in
    assert mine.ranks == 8 and set(xgmi.values()) == {7}
    # one 400 Gb/s NIC beside each GPU, joined by rails as mi300xx8
    assert switch_mates(mine) == {f"gpu{i}": [f"mlx5_{i}"] for i in range(8)}
    assert (mine.network.fabric, mine.network.gbps) == ("rails", 50)
    # cost model 2: the built-in's stand-in (Hopper's tables, 48 of 64 GB/s counted)
    assert mine.figures == builtin.figures
    assert (mine.figures.arch, mine.figures.nvlink) == ("hopper", 0.75)
    assert mine.figures.library == "rccl"  # RCCL runs there; NCCL's tables stand in
    assert "8 GPUs (gfx942, MI300X (CDNA 3))" in mine.description
    assert any(a.startswith("xGMI joins every GPU") for a in mine.assumptions)


def test_two_imported_mi300x_boxes_have_mi300xx2s_bounds():
    mine = lower_with_routes(join_boxes(imported(fixture("mi300x_rccl.xml")), 2, "x2"))
    theirs = lower_with_routes(resolve("mi300xx2"))
    for coll in ("allgather", "allreduce"):
        assert bounds(mine, make_collective(coll, 16)) == bounds(theirs,
                                                                make_collective(coll, 16))


def test_an_mi250_dump_has_the_structure_and_figures_of_the_builtin_mi250():
    # the counts RCCL writes (rocm-smi's max / min bandwidth of the pair) are the lanes:
    # 4 inside each package, 2 between GCDs 0-6 and 2-4, 1 between six other pairs, as
    # topologies/mi250.yaml has them from OLCF's Frontier node diagram
    mine, builtin = imported(fixture("mi250_rccl.xml")), resolve("mi250")

    def xgmi(topo):
        return {(l.src, l.dst): (l.count, l.gbps, l.alpha_us) for l in topo.links
                if l.src in topo.gpus and l.dst in topo.gpus and l.src < l.dst}
    four, two = {(0, 1), (2, 3), (4, 5), (6, 7)}, {(0, 6), (2, 4)}
    one = {(0, 2), (1, 3), (1, 5), (3, 7), (4, 6), (5, 7)}
    expected = {(f"gpu{a}", f"gpu{b}"): (n, 50, 0.7)
                for pairs, n in ((four, 4), (two, 2), (one, 1)) for a, b in pairs}
    assert xgmi(mine) == xgmi(builtin) == expected
    # a 200 Gb/s Slingshot NIC beside each package's odd GCD, none beside the even ones
    assert switch_mates(mine) == {f"gpu{k}": [f"cxi{k // 2}"] if k % 2 else []
                                  for k in range(8)}
    assert mine.network.gbps == builtin.network.gbps == 25
    # cost model 2: Ampere's tables, 36 of 50 GB/s a link counted, as the built-in
    assert mine.figures == builtin.figures
    assert (mine.figures.arch, mine.figures.nvlink) == ("ampere", 0.72)
    assert "8 GPUs (gfx90a, MI250X/MI250 (CDNA 2))" in mine.description


def test_two_imported_mi250_nodes_on_one_switch_have_mi250x2s_bounds():
    # a dump does not say how NICs are cabled: --fabric single-switch is the built-in's
    # stand-in for a dragonfly group. Allgather: a node takes 8 of 16 chunks in through 4
    # NICs of half a lane, 8 / 2 = 4; allreduce: 2 x (2 - 1) crossings over 2 x 2 units,
    # 1/2; alltoall: 8 x 8 chunks out of a node over 2 units, 32
    box = imported(fixture("mi250_rccl.xml"), fabric="single-switch")
    mine = lower_with_routes(join_boxes(box, 2, "x2"))
    theirs = lower_with_routes(resolve("mi250x2"))
    for coll, rounds in (("allgather", 4), ("allreduce", Fraction(1, 2)), ("alltoall", 32)):
        ours = bounds(mine, make_collective(coll, 16))
        assert ours == bounds(theirs, make_collective(coll, 16)), coll
        assert ours.rounds_per_chunk == rounds, coll


def rccl_dump(edit=None):
    """The MI300X fixture's text, with `edit` (old, new) applied once."""
    text = (FIXTURES / "mi300x_rccl.xml").read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(*edit, 1)
    return text


XGMI_0_TO_1 = '<xgmi target="0000:29:00.0" count="1" tclass="0x120000"/>'
FIRST_SOCKET = rccl_dump().split("</cpu>")[0] + "</cpu>\n</system>\n"


@pytest.mark.parametrize("name, edit, message", [
    # cut short as a crashed job leaves it, and at an element: GPUs 4 to 7 gone
    ("cut.xml", 2500, "line 34: malformed XML (unclosed token)"),
    ("half.xml", FIRST_SOCKET, "line 19: an xgmi to an unknown bus id '0000:91:00.0'"),
    # the two ends of a link disagree
    ("oneway.xml", (XGMI_0_TO_1, ""), "line 34: an xgmi from gpu1 to gpu0, but gpu0 lists "
     "none to gpu1: a truncated or edited dump?"),
    ("count.xml", (XGMI_0_TO_1, XGMI_0_TO_1.replace('"1"', '"2"')),
     "line 16: gpu0 has 2 xGMI link(s) to gpu1, but gpu1 has 1 to gpu0 (line 34)"),
    ("target.xml", (XGMI_0_TO_1, XGMI_0_TO_1.replace("29", "2a")),
     "line 16: an xgmi to an unknown bus id '0000:2a:00.0'"),
    ("mixed.xml", ('gcn="gfx942" arch="38911" rank="3"', 'gcn="gfx90a" arch="38911" rank="3"'),
     "line 68: a GPU of architecture 'gfx90a', but the one at line 14 is 'gfx942'"),
    ("gfx950.xml", ('gcn="gfx942"', 'gcn="gfx950"', -1),
     "line 16: xGMI links of GPU architecture 'gfx950' (their rate is known for gfx942, "
     "gfx90a)"),
], ids=lambda x: x if isinstance(x, str) and x.endswith(".xml") else "")
def test_a_truncated_or_inconsistent_rccl_dump_is_refused_in_one_line(tmp_path, name, edit,
                                                                     message):
    if isinstance(edit, int):
        text = rccl_dump()[:edit]
    elif isinstance(edit, str):
        text = edit
    else:
        text = rccl_dump().replace(*edit) if len(edit) == 3 else rccl_dump(edit)
    path = tmp_path / name
    path.write_text(text)
    said = one_line(synth_main("topo", "import", str(path)), 2)
    assert f"{name}: {message}" in said, said


def test_an_rccl_dump_takes_no_nvidia_gpu_model():
    said = one_line(synth_main("topo", "import", fixture("mi300x_rccl.xml"), "--gpu",
                               "h100-sxm"), 2)
    assert "RCCL's dump of AMD GPUs (gfx942)" in said and "--gpu h100-sxm" in said


def mi250_dump(gcn="gfx90a"):
    """RCCL's dump of two MI250X packages (four dies, each a GPU to software): the dies
    of a package joined by 4 xGMI links, dies of different packages by 2 or 1 (the
    asymmetric wiring of the CDNA 2 white paper's 4-package node, cut to two)."""
    counts = {(0, 1): 4, (2, 3): 4, (0, 2): 2, (1, 3): 1}
    buses = ["0000:c1:00.0", "0000:c6:00.0", "0000:c9:00.0", "0000:ce:00.0"]
    gpus = []
    for k, bus in enumerate(buses):
        links = "".join(f'<xgmi target="{buses[j]}" count="{c}" tclass="0x038000"/>'
                        for (a, b), c in counts.items() for i, j in ((a, b), (b, a))
                        if i == k)
        gpus.append(f'<pci busid="{bus}" class="0x038000" link_speed="16.0 GT/s PCIe" '
                    f'link_width="16"><gpu dev="{k}" sm="110" gcn="{gcn}" arch="38911" '
                    f'rank="{k}" gdr="1">{links}</gpu></pci>')
    return (f'<system version="2"><cpu numaid="0" vendor="AuthenticAMD" familyid="25">'
            f'{"".join(gpus)}</cpu></system>\n')


@pytest.mark.parametrize("gcn", ["gfx90a", "910"])  # 910: older RCCL's number for it
def test_an_mi250_dump_keeps_its_asymmetric_xgmi_counts(tmp_path, gcn):
    path = tmp_path / "mi250.xml"
    path.write_text(mi250_dump(gcn))
    topo = imported(str(path))
    pairs = {(l.src, l.dst): (l.count, l.gbps) for l in topo.links
             if l.src in topo.gpus and l.dst in topo.gpus and l.src < l.dst}
    assert pairs == {("gpu0", "gpu1"): (4, 50), ("gpu2", "gpu3"): (4, 50),
                     ("gpu0", "gpu2"): (2, 50), ("gpu1", "gpu3"): (1, 50)}
    assert (topo.figures.arch, topo.figures.nvlink) == ("ampere", 0.72)
    # allgather: each package must take in the other's 2 shares over the 2 + 1 links
    # between them: 2/3 rounds per chunk (more than a die's own 3 shares over 5 links)
    assert bounds(lower_with_routes(topo), make_collective("allgather", 4)
                  ).rounds_per_chunk == Fraction(2, 3)


def test_topo_import_dash_is_standard_output(tmp_path, monkeypatch):
    # -o - prints the file, as no -o does (it wrote a file named '-')
    monkeypatch.chdir(tmp_path)
    done = synth_main("topo", "import", fixture("topo-m-sglang30401-h100-8nic.txt"), "-o", "-")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "-").exists()
    assert yaml.safe_load(done.stdout)["gpus"]
