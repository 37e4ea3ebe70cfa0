"""Pictures: `synth topo draw`, `synth draw`, the plots, `synth report`.

Each file must be whole and well formed: SVG that parses with the expected nodes and
panels, PNG with its signature, an HTML page whose every local reference exists.
"""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from synth.bounds import bounds
from synth.construct.baselines import baselines
from synth.frontier import default_limits, synthesize
from synth.pictures.graphviz import hamiltonian_cycle, rank_positions, render
from synth.pictures.plots import write_plots
from synth.pictures.schedule import panel_columns, schedule_graph
from synth.pictures.topology import topology_graph
from synth.schedule.collectives import make_collective
from synth.schedule.file import write_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower, lower_with_routes

SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def synth_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, cwd=cwd)


def svg_groups(path, kind):
    """The <g> elements of graphviz class `kind` ("node", "edge", "cluster", or a
    node's own class such as "panel")."""
    root = ET.parse(path).getroot()
    return [g for g in root.iter(f"{SVG}g") if kind in g.get("class", "").split()]


def texts(group):
    return [t.text for t in group.iter(f"{SVG}text") if t.text]


def baseline(topo, collective, name):
    model = lower(resolve(topo))
    return next(b.schedule for b in baselines(model, collective) if b.name.startswith(name))


# --- topologies ---------------------------------------------------------------------

def test_dgx1_picture_has_every_gpu_and_one_line_per_link_pair(tmp_path):
    path = render(topology_graph(resolve("dgx1")), tmp_path / "dgx1.svg")
    gpus = svg_groups(path, "gpu")
    assert len(gpus) == 8
    labels = [" ".join(texts(g)) for g in gpus]
    assert sorted(labels) == sorted(f"gpu{r} rank {r}" for r in range(8))
    edges = svg_groups(path, "edge")
    assert len(edges) == 16  # 32 directed links, both directions alike: 16 lines
    edge_labels = sorted(" ".join(texts(e)) for e in edges)
    assert edge_labels.count("2x25") == 8 and edge_labels.count("25") == 8


def test_multi_node_picture_frames_each_box(tmp_path):
    topo = resolve("dgx2x2")
    path = render(topology_graph(topo), tmp_path / "dgx2x2.svg")
    clusters = svg_groups(path, "cluster")
    assert sorted(" ".join(texts(c)) for c in clusters) == ["box 0", "box 1"]
    assert len(svg_groups(path, "gpu")) == 32
    assert len(svg_groups(path, "nvswitch")) == 4
    assert len(svg_groups(path, "nic")) == 16
    assert len(svg_groups(path, "net_switch")) == 1
    assert len(svg_groups(path, "edge")) == len(topo.links) // 2
    all_text = " ".join(t for g in svg_groups(path, "node") for t in texts(g))
    assert "rank 31" in all_text and "48x25" in " ".join(
        t for e in svg_groups(path, "edge") for t in texts(e))


def test_one_way_links_are_arrows():
    from synth.topology.physical import topology_from_dict

    topo = topology_from_dict({"gpus": 2, "links": [
        {"from": "gpu0", "to": "gpu1", "gbps": 25}, {"from": "gpu1", "to": "gpu0", "gbps": 50}]})
    source = topology_graph(topo).source
    assert source.count("->") == 2 and "dir=none" not in source


def test_topology_png(tmp_path):
    path = render(topology_graph(resolve("dgx2")), tmp_path / "dgx2.png")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


def test_positions():
    ring = {(i, (i + 1) % 8): 1 for i in range(8)}
    assert hamiltonian_cycle(8, ring) == list(range(8))
    assert hamiltonian_cycle(4, {(0, 1): 1, (1, 2): 1, (2, 3): 1}) is None  # a line
    grid = rank_positions(16, {}, "torus:4x4")
    assert len({(round(x), round(y)) for x, y in grid.values()}) == 16
    assert [panel_columns(k, 3) for k in (1, 3, 4, 15)] == [1, 3, 2, 3]


# --- schedules ----------------------------------------------------------------------

def test_sixteen_rank_schedule_one_panel_per_step(tmp_path):
    schedule = baseline("ring:16", "allgather", "ring")
    path = render(schedule_graph(schedule), tmp_path / "ring16.svg")
    panels = svg_groups(path, "panel")
    assert len(panels) == schedule.num_steps == 15
    assert sorted(texts(p)[0] for p in panels) == sorted(
        f"step {i}: 1 round, 32 sends" for i in range(15))
    assert len(svg_groups(path, "rank")) == 15 * 16
    loads = [" ".join(texts(g)) for g in svg_groups(path, "load")]
    assert len(loads) == 15 * 32 and all(l.endswith("1/1") for l in loads)


def test_dgx1_schedule_loads_and_origin_colouring(tmp_path):
    schedule = baseline("dgx1", "allgather", "ring")
    path = render(schedule_graph(schedule, "origin"), tmp_path / "dgx1.svg")
    assert len(svg_groups(path, "panel")) == schedule.num_steps
    loads = [" ".join(texts(g)) for g in svg_groups(path, "load")]
    sends = sum(len(s.sends) for s in schedule.steps)
    # every send is counted once in some link's "load/limit"
    assert sum(int(re.search(r"(\d+)/\d+$", l).group(1)) for l in loads) == sends
    # origin colouring: the chunks of rank 0 share rank 0's colour, its node is tinted
    ranks = svg_groups(path, "rank")
    fills = {g.find(f"{SVG}title").text: g.find(f"{SVG}ellipse").get("fill") for g in ranks}
    assert fills["s0r0"] != fills["s0r1"] and fills["s0r0"] == fills["s1r0"]


def test_switch_schedule_becomes_matrices(tmp_path):
    schedule = baseline("dgx2", "allgather", "direct")
    path = render(schedule_graph(schedule), tmp_path / "dgx2.svg")
    assert len(svg_groups(path, "panel")) == 1
    matrix, = svg_groups(path, "matrix")
    assert "2/30" in texts(matrix)


def test_schedule_png(tmp_path):
    path = render(schedule_graph(baseline("dgx1", "allreduce", "double binary tree")),
                  tmp_path / "tree.png")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


# --- the command line ---------------------------------------------------------------

def test_draw_commands_and_bad_input(tmp_path):
    schedule = write_schedule(baseline("dgx1", "allgather", "ring"), tmp_path / "s.json")
    ok = synth_cli("draw", str(schedule), "-o", str(tmp_path / "s.svg"), "--color", "origin")
    assert ok.returncode == 0, ok.stderr
    ET.parse(tmp_path / "s.svg")
    ok = synth_cli("topo", "draw", "dgx1", "-o", str(tmp_path / "t.png"))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_SIGNATURE)

    (tmp_path / "not.json").write_text('{"hello": 1}')
    for args in (["topo", "draw", "nosuch", "-o", str(tmp_path / "x.svg")],
                 ["topo", "draw", "dgx1", "-o", str(tmp_path / "x.pdf")],
                 ["draw", str(tmp_path / "not.json"), "-o", str(tmp_path / "x.svg")],
                 ["draw", str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.svg")],
                 ["draw", str(schedule), "-o", str(tmp_path / "x.gif")]):
        bad = synth_cli(*args)
        assert bad.returncode == 2, args
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "x.svg").exists() and not list(tmp_path.glob(".x.*"))


# --- plots and the report -----------------------------------------------------------

@pytest.fixture(scope="module")
def ring4_result():
    topo = resolve("ring:4")
    b = bounds(lower_with_routes(topo), make_collective("allgather", 4))
    return synthesize(topo, "allgather", None, default_limits(b, time_limit=30))


def test_write_plots(tmp_path, ring4_result):
    base = [(b.name, b.schedule) for b in baselines(ring4_result.model, "allgather")]
    paths = write_plots(ring4_result, base, tmp_path)
    assert [p.name for p in paths] == ["allgather-frontier.png", "allgather-time.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


def test_synthesis_plots_flag(tmp_path):
    run = synth_cli("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--plots")
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "ring_4" / "allgather"
    assert (folder / "allgather-frontier.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (folder / "allgather-time.png").read_bytes().startswith(PNG_SIGNATURE)


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]


def test_report_page(tmp_path):
    out = tmp_path / "report"
    run = synth_cli("report", "allgather", "--topo", "ring:4", "-o", str(out),
                    "--time-limit", "30")
    assert run.returncode == 0, run.stderr
    page = (out / "index.html").read_text()
    assert '<table class="frontier">' in page and "allgather-s2-r3-c2.json" in page
    assert '<table class="comparison">' in page and "ring" in page
    parser = _Refs()
    parser.feed(page)
    images = [r for r in parser.refs if r.startswith("data:image/svg+xml;base64,")]
    assert len(images) == 4  # frontier plot, time plot, topology, one schedule
    for ref in parser.refs:
        if not ref.startswith("data:"):
            assert (out / ref).is_file(), ref
    for name in ("topology.svg", "allgather-s2-r3-c2.svg", "allgather-frontier.svg",
                 "allgather-time.svg"):
        ET.parse(out / name)

    bad = synth_cli("report", "allgather", "--topo", "nosuch", "-o", str(tmp_path / "r2"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert not (tmp_path / "r2").exists()
