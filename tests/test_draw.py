"""Pictures: `synth topo draw`, `synth draw`, the plots, `synth report`.

Each file must be whole and well formed: SVG that parses with the expected nodes and
panels, PNG with its signature, an HTML page whose every local reference exists.
"""

import re
import struct
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from collections import Counter

import pytest

from synth.bounds import bounds
from synth.construct.baselines import ALGORITHMS, baselines
from synth.frontier import synthesize
from synth.pictures.graphviz import (Unreadable, drawing_inches, hamiltonian_cycle,
                                     png_dpi, rank_positions, render)
from synth.pictures.plots import write_plots
from synth.pictures.schedule import panel_columns, rank_blocks, schedule_graph
from synth.pictures.topology import topology_graph
from synth.schedule.collectives import make_collective
from synth.schedule.file import verified, write_schedule
from synth.schedule.ir import Pipeline, Schedule, Send, Step
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower, lower_with_routes
from tests.shared_frontiers import default_limits
from tests.in_process import synth_main

SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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

def test_a_labels_overlap_is_summed_over_its_neighbours_as_over_every_box():
    # placing each label summed its overlap with every box placed before it: 20 s on a
    # 64-rank panel of thousands of arrows. Filed by grid cell, the sum is the same
    import random

    from synth.pictures.arrow_labels import _Boxes

    rng = random.Random(7)
    boxes, filed = [], _Boxes()
    for _ in range(400):
        box = (rng.uniform(-300, 300), rng.uniform(-300, 300), rng.uniform(1, 150),
               rng.uniform(1, 20))
        every = 0
        for other in boxes:  # the overlapping area, by hand
            w = min(box[0] + box[2], other[0] + other[2]) - max(box[0] - box[2],
                                                                   other[0] - other[2])
            h = min(box[1] + box[3], other[1] + other[3]) - max(box[1] - box[3],
                                                                   other[1] - other[3])
            every += w * h if w > 0 and h > 0 else 0.0
        assert filed.overlap(box) == every
        boxes.append(box)
        filed.add(box)
    assert filed.overlap((0.0, 0.0, 400.0, 400.0)) > 0


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
    frames = svg_groups(path, "box")  # outlines placed around each box's vertices
    assert sorted(" ".join(texts(c)) for c in frames) == ["box 0", "box 1"]
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


def test_a_box_of_many_switched_gpus_is_drawn_in_rows(tmp_path):
    # gb200nvl72's 72 GPUs stood in one row of dot's: a PNG 8158 x 412 pixels. Placed
    # now: at most 18 GPUs a row, each NIC under its GPU, the NVSwitch above them
    import re as _re

    graph = topology_graph(resolve("gb200nvl72"))
    place = {name: tuple(map(float, xy.split(","))) for name, xy in
             _re.findall(r'\t"?([\w.]+)"? \[[^\]]*pos="([-\d.]+,[-\d.]+)!"', graph.source)}
    gpus = [name for name in place if name.startswith("gpu")]
    assert len(gpus) == 72
    rows = Counter(place[name][1] for name in gpus)
    assert len(rows) == 4 and max(rows.values()) <= 18
    for i in range(72):
        (gx, gy), (nx_, ny) = place[f"gpu{i}"], place[f"nic{i}"]
        assert nx_ == gx and ny < gy  # under its own GPU
    assert place["nvswitch"][1] > max(rows)
    # its 72 links' one label once, in the caption, not 72 times piled between the rows
    assert graph.source.count('label="18x50"') == 0
    assert "every link of nvswitch: 18x50, drawn light" in graph.source
    inches = drawing_inches(graph)
    assert inches[0] < 2.5 * inches[1]  # no longer a strip 20 times as wide as tall


def test_a_clusters_boxes_and_gpus_are_drawn_in_rank_order():
    # dot put dgxh100x16's boxes as 0, 2, 4, 10, 12, ... and a box's GPUs as gpu0, gpu4,
    # gpu5, ..., and drew the 16 boxes in a strip 8153 pixels wide
    import re as _re

    graph = topology_graph(resolve("dgxh100x16"))
    place = {name: tuple(map(float, xy.split(","))) for name, xy in
             _re.findall(r'\t"?([\w.]+)"? \[[^\]]*pos="([-\d.]+,[-\d.]+)!"', graph.source)}
    order = [(-place[f"n{b}.gpu{i}"][1], place[f"n{b}.gpu{i}"][0])
             for b in range(16) for i in range(8)]
    # box after box down the rows, each box's GPUs left to right
    rows = sorted({y for y, _ in order})
    assert [rows.index(y) for y, _ in order] == sorted(rows.index(y) for y, _ in order)
    for b in range(16):
        xs = [place[f"n{b}.gpu{i}"][0] for i in range(8)]
        assert xs == sorted(xs)
    width, height = drawing_inches(graph)
    assert width < 3 * height


def test_a_long_title_is_wrapped():
    # an imported box's title, its warning included, made a PNG 6156 pixels wide
    from dataclasses import replace

    topo = replace(resolve("ring:4"), description="word " * 80)
    label = topology_graph(topo).source.split("label=<", 1)[1].split("<font", 1)[0]
    lines = label.split("<br/>")
    assert len(lines) >= 4 and all(len(line) <= 110 for line in lines)


def test_topology_png(tmp_path):
    """A drawing small enough is drawn at 144 dpi, at its natural size (no scaling)."""
    graph = topology_graph(resolve("dgx2"))
    path = render(graph, tmp_path / "dgx2.png")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    inches = drawing_inches(graph)
    assert max(inches) < 8192 / 144 - 1  # small enough for 144 dpi
    width, height = png_size(data)
    for pixels, size in zip((width, height), inches):  # + its padding, under 1 inch
        assert 144 * size <= pixels <= 144 * (size + 1)


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


def test_arrow_labels_stay_inside_their_panel():
    from synth.pictures.arrow_labels import place_arrow_labels

    # an arrow along a panel's right edge with a label 120 points wide: beside its curve
    # the label would reach past the frame (x1 = 100), over the next panel
    curve = ((90.0, 0.0), (95.0, 30.0), (95.0, 60.0), (90.0, 90.0), (90.0, 100.0))
    (x, y), = place_arrow_labels([(curve, 120.0)], [], 16.0, bounds=(-100, -50, 100, 150))
    assert -100 <= x - 61 and x + 61 <= 100 and -50 <= y <= 150
    # and in a whole drawing, every label's centre lies in its own step's panel
    import re as _re

    source = schedule_graph(baseline("ring:16", "allgather", "ring")).source

    def attribute(line, key):
        return _re.search(rf'\b{key}="?([-\d.,]+)', line).group(1)

    panels, labels = {}, []
    for line in source.splitlines():
        step = _re.match(r"\tstep(\d+) \[", line)
        label = _re.match(r"\ts(\d+)l\d+_\d+ \[", line)
        if step:
            panels[int(step.group(1))] = (
                tuple(map(float, attribute(line, "pos").split(","))),
                float(attribute(line, "width")) * 72, float(attribute(line, "height")) * 72)
        elif label:
            labels.append((label.group(1), attribute(line, "pos")))
    assert len(panels) == 15 and len(labels) == 15 * 32
    for i, xy in labels:
        (cx, cy), w, h = panels[int(i)]
        x, y = map(float, xy.split(","))
        assert abs(x - cx) <= w / 2 and abs(y - cy) <= h / 2


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


# --- pipelined and big schedules ------------------------------------------------------

def png_size(data):
    assert data.startswith(PNG_SIGNATURE)
    return struct.unpack(">II", data[16:24])


def svg_size(path):
    """The declared width and height in points (graphviz writes "...pt")."""
    root = ET.parse(path).getroot()
    return tuple(float(root.get(k).removesuffix("pt")) for k in ("width", "height"))


@pytest.fixture(scope="module")
def pipelined():
    """The decomposition's deepest pipeline on dgx2x2 (two boxes of 16 GPUs)."""
    result = synthesize(resolve("dgx2x2"), "allgather",
                        limits=Limits(max_steps=8, time_limit=30), method="decomposed")
    schedule = max((p.schedule for p in result.points), key=lambda s: s.batches)
    assert schedule.pipeline is not None and schedule.batches >= 2
    return schedule


def test_pipelined_schedule_is_one_batch_and_a_timeline(tmp_path, pipelined, monkeypatch):
    def refuse(self):
        raise AssertionError("a picture must not expand the schedule")

    monkeypatch.setattr(Schedule, "expanded", refuse)
    path = render(schedule_graph(pipelined), tmp_path / "pipe.svg")
    # written for box 0 (version 4), drawn for both boxes: the program's sends spelled out
    program, pipe = pipelined.unfolded().steps, pipelined.pipeline
    panels = svg_groups(path, "panel")
    assert len(panels) == len(program) < pipelined.num_steps  # one batch, not the expansion
    # a send of a range of chunks (a box's own pieces, spread beside the crossing) counts
    # once among the sends, and the chunks it carries are said too
    assert sorted(texts(p)[0] for p in panels) == sorted(
        f"program step {i}: {st.rounds} rounds, {len(st.sends)} sends"
        + (f" of {sum(x.count for x in st.sends)} chunks"
           if any(x.count > 1 for x in st.sends) else "")
        for i, st in enumerate(program))
    # where each program step's sends go, read off the sends: across with a box's own
    # pieces inside it, then the other box's pieces inside
    assert [texts(p)[1] for p in panels] == ["between and inside boxes", "inside boxes"]
    assert len(svg_groups(path, "timeline")) == 1
    ticks = svg_groups(path, "tick")
    assert len(ticks) == pipelined.num_steps
    assert [texts(t) for t in ticks] == [[str(t), str(r)] for t, r in enumerate(pipe.rounds)]
    slots = svg_groups(path, "slot")
    assert len(slots) == pipe.batches * len(program)  # every batch runs every program step
    cells = {g.find(f"{SVG}title").text: texts(g) for g in slots}
    for i in range(len(program)):
        for b in range(pipe.batches):
            assert cells[f"slot{i}_{b + i}"] == [str(b)]  # batch b: program step i at b + i
    caption = " ".join(t for g in svg_groups(path, "graph") for t in texts(g)[:8])
    assert f"{pipe.batches} batches of a {len(program)}-step program" in caption
    assert "decomposed over 2 identical boxes" in caption


def test_a_long_pipelines_timeline_is_no_wider_than_its_panels_need(pipelined):
    # 256 batches of a short program: 128 columns beside its few panels made a picture
    # 5711 pixels wide, most of it empty; the columns now fit the panels' width (at
    # least 32), the middle steps elided and said so
    import re as _re
    from dataclasses import replace

    from synth.schedule.ir import Pipeline

    program = len(pipelined.steps)
    longer = replace(pipelined, pipeline=Pipeline(256, pipelined.pipeline.stride,
                                                  (1,) * (program + 255)))
    graph = schedule_graph(longer)
    ticks = _re.findall(r"\ttick\d+ \[", graph.source)
    assert 32 <= len(ticks) < 128
    assert _re.search(r"steps \d+-\d+ are not drawn", graph.source)
    timeline = _re.search(r'\ttimeline \[[^\]]*width=([\d.]+)', graph.source)
    panels = [float(w) for w in _re.findall(r'\tstep\d+ \[[^\]]*width=([\d.]+)',
                                            graph.source)]
    assert float(timeline.group(1)) <= sum(panels) + len(panels)  # gaps between them


def test_chunk_ranges_are_labelled_compactly(tmp_path):
    """The documented version 2 example: an allgather on a ring of 4, C = 4, two batches
    of two pieces; every send moves a range of two chunks."""
    model = lower(resolve("ring:4"))
    first = tuple(Send(4 * r, r, d, count=2) for r in range(4) for d in ((r + 1) % 4, (r - 1) % 4))
    second = tuple(Send(4 * r, (r + 1) % 4, (r + 2) % 4, count=2) for r in range(4))
    schedule = verified(Schedule(make_collective("allgather", 4, 4), model,
                                 (Step(2, first), Step(2, second)), {}, Pipeline(2, 2, (2, 4, 2))))
    path = render(schedule_graph(schedule), tmp_path / "ring4.svg")
    assert [texts(p)[0] for p in svg_groups(path, "panel")] == [
        "program step 0: 2 rounds, 8 sends of 16 chunks",
        "program step 1: 2 rounds, 4 sends of 8 chunks"]
    loads = sorted(" ".join(" ".join(texts(g)).split()) for g in svg_groups(path, "load"))
    assert len(loads) == 12 and "0-1 2/2" in loads and "12-13 2/2" in loads
    assert all(re.fullmatch(r"\d+-\d+ 2/2", l) for l in loads), loads
    assert len(svg_groups(path, "slot")) == 4 and len(svg_groups(path, "tick")) == 3


def test_ranges_in_matrices(tmp_path):
    """dgxh100x2's decomposition moves 18 pieces of a share at once: a matrix cell names
    each range once, never a chunk each."""
    result = synthesize(resolve("dgxh100x2"), "allgather",
                        limits=Limits(max_steps=8, time_limit=30), method="decomposed")
    schedule = max((p.schedule for p in result.points), key=lambda s: s.batches)
    assert max(x.count for st in schedule.steps for x in st.sends) > 1
    path = render(schedule_graph(schedule), tmp_path / "h100.svg")
    matrices = svg_groups(path, "matrix")
    assert len(matrices) == len(schedule.steps)
    words = [t for m in matrices for t in texts(m)]
    assert "0-17" in words  # rank 0's first piece range crossing to its peer
    assert not any(re.fullmatch(r"\d+( \d+){4,}", w) for w in words)  # no lists of chunks


def test_big_schedules_stay_small_and_readable(tmp_path):
    """A big drawing's PNG is drawn at its natural size, a point a pixel at least (72
    dpi: its 8-point text 8 pixels tall) within 8192 pixels a side and 40 megapixels
    (png_dpi; rasterizing it takes seconds, so this checks the arithmetic on its
    natural size); an SVG declares at most 45 x 45 inches. Past 64 ranks a panel is a
    matrix of blocks of ranks, none spanning two boxes."""
    model = lower(resolve("dgx2x8"))  # 128 ranks in 8 boxes of 16
    blocks = rank_blocks(model)
    assert len(blocks) == 64 and all(len(b) == 2 for b in blocks)
    assert all(len({model.boxes[r] for r in b}) == 1 for b in blocks)
    schedule = ALGORITHMS["hierarchical"](model, "allgather", None).schedule
    graph = schedule_graph(schedule)
    natural = tmp_path / "natural.svg"
    natural.write_bytes(graph.pipe(format="svg", neato_no_op=2))  # uncapped
    points = svg_size(natural)
    assert max(points) > 60 * 72  # past the 4320 pixels that once made its text tiny
    inches = drawing_inches(graph)  # without its padding, under 1 inch
    assert all(0 <= p / 72 - x < 1 for p, x in zip(points, inches))
    dpi = png_dpi(inches[0] + 1, inches[1] + 1)
    assert 72 <= dpi < 144 and max(inches) * dpi <= 8192
    svg = render(graph, tmp_path / "big.svg")
    assert max(svg_size(svg)) <= 45 * 72 + 1
    assert len(svg_groups(svg, "rank")) == 0
    assert len(svg_groups(svg, "matrix")) == len(svg_groups(svg, "panel")) == 2
    heads = texts(svg_groups(svg, "matrix")[0])
    assert heads[:3] == ["0-1", "2-3", "4-5"] and "126-127" in heads


def test_png_dpi_follows_the_drawing():
    """144 dpi for a small drawing; less for a bigger one, down to 72; none past that."""
    assert png_dpi(10, 5) == 144
    assert png_dpi(100, 10) == pytest.approx(81.92)  # 8192 pixels a side
    assert png_dpi(80, 80) == pytest.approx(79.06, abs=0.01)  # 40 megapixels: 6325 a side
    assert png_dpi(113, 10) == pytest.approx(72.50, abs=0.01)  # 8192 / 113
    assert png_dpi(114, 10) is None  # 8192 / 114 = 71.9: under a point a pixel
    assert png_dpi(90, 90) is None  # 40 megapixels: 70.3 dpi


def test_long_schedules_draw_their_first_steps(tmp_path, monkeypatch):
    schedule = ALGORITHMS["ring"](lower(resolve("ring:128")), "allgather", None).schedule
    graph = schedule_graph(schedule)
    path = render(graph, tmp_path / "ring128.svg")
    panels = len(svg_groups(path, "panel"))
    assert 1 <= panels < schedule.num_steps == 127  # as many as PANEL_AREA holds
    caption = " ".join(t for g in svg_groups(path, "graph") for t in texts(g)[:12])
    assert f"the first {panels} steps of 127 are drawn" in caption
    assert "128 ranks in 64 blocks (2 consecutive ranks each)" in caption
    with pytest.raises(Unreadable, match="write .svg instead"):  # 125 inches a side
        render(graph, tmp_path / "ring128.png")
    assert not (tmp_path / "ring128.png").exists()
    # as a PNG, `synth draw` draws fewer panels, few enough to be read (drawn here as
    # the graph it hands to graphviz: rasterizing it takes seconds)
    drawn = []
    monkeypatch.setattr("synth.pictures.graphviz.render",
                        lambda graph, out: drawn.append(graph) or out)
    file = write_schedule(schedule, tmp_path / "ring128.json")
    run = synth_main("draw", file, "-o", tmp_path / "ring128.png")
    assert run.returncode == 0, run.stderr
    fewer = drawn[0].source.count('class=panel')
    assert 1 <= fewer < panels
    assert png_dpi(*(x + 1 for x in drawing_inches(drawn[0]))) is not None


# --- the command line ---------------------------------------------------------------

def test_draw_commands_and_bad_input(tmp_path):
    schedule = write_schedule(baseline("dgx1", "allgather", "ring"), tmp_path / "s.json")
    ok = synth_main("draw", str(schedule), "-o", str(tmp_path / "s.svg"), "--color", "origin")
    assert ok.returncode == 0, ok.stderr
    ET.parse(tmp_path / "s.svg")
    ok = synth_main("topo", "draw", "dgx1", "-o", str(tmp_path / "t.png"))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_SIGNATURE)

    (tmp_path / "not.json").write_text('{"hello": 1}')
    for args in (["topo", "draw", "nosuch", "-o", str(tmp_path / "x.svg")],
                 ["topo", "draw", "dgx1", "-o", str(tmp_path / "x.pdf")],
                 ["draw", str(tmp_path / "not.json"), "-o", str(tmp_path / "x.svg")],
                 ["draw", str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.svg")],
                 ["draw", str(schedule), "-o", str(tmp_path / "x.gif")]):
        bad = synth_main(*args)
        assert bad.returncode == 2, args
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "x.svg").exists() and not list(tmp_path.glob(".x.*"))
    # a folder, and a name with no suffix, are named as such (both read "unknown picture
    # type '.'" before)
    (tmp_path / "pics").mkdir()
    for target, words in ((tmp_path / "pics", "a folder"), (tmp_path / "x", "no picture type")):
        bad = synth_main("draw", str(schedule), "-o", str(target))
        assert bad.returncode == 2 and words in bad.stderr, bad.stderr
    assert list((tmp_path / "pics").iterdir()) == []
    # a topology of 64 boxes cannot be a PNG whose text reads: one line, exit 2 (16,
    # in one row of dot's, could not either; in rows they make 8142 x 4749 pixels)
    big = synth_main("topo", "draw", "dgx2", "--boxes", "64", "-o", tmp_path / "big.png")
    assert big.returncode == 2 and big.stderr.count("\n") == 1, big.stderr
    assert "write .svg instead" in big.stderr and not (tmp_path / "big.png").exists()


# --- plots and the report -----------------------------------------------------------

@pytest.fixture(scope="module")
def ring4_result():
    topo = resolve("ring:4")
    b = bounds(lower_with_routes(topo), make_collective("allgather", 4))
    return synthesize(topo, "allgather", None, default_limits(b, time_limit=30))


def test_write_plots(tmp_path, ring4_result):
    base = [(b.name, b.schedule) for b in baselines(ring4_result.model, "allgather")]
    paths, moved = write_plots(ring4_result, base, tmp_path)
    assert [p.name for p in paths] == ["allgather-frontier.png", "allgather-time.png"]
    assert moved == []
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000


def test_plots_never_write_over_a_users_file(tmp_path):
    # --plots wrote its PNGs with no look at what was there: a user's file at
    # COLLECTIVE-frontier.png was lost without a word
    args = ("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--plots")
    assert synth_main(*args).returncode == 0
    frontier = tmp_path / "ring_4" / "allgather" / "allgather-frontier.png"
    frontier.write_text("my annotated plot")
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    assert (frontier.parent / "allgather-frontier.png.kept").read_text() == "my annotated plot"
    assert frontier.read_bytes().startswith(PNG_SIGNATURE)
    assert "allgather-frontier.png was not synth's" in again.stderr
    third = synth_main(*args)  # its own plot, listed: written over without a note
    assert third.returncode == 0 and "not synth's" not in third.stderr


def test_synthesis_plots_flag(tmp_path):
    run = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--plots")
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "ring_4" / "allgather"
    assert (folder / "allgather-frontier.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (folder / "allgather-time.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_rooted_collectives_plots_carry_the_root(tmp_path):
    # broadcast at root 3, then at root 0: the second replaced the first's plots
    for root in ("3", "0"):
        run = synth_main("broadcast", "--topo", "ring:4", "--root", root, "--out",
                         str(tmp_path), "--plots", "--time-limit", "20")
        assert run.returncode == 0, run.stderr
    folder = tmp_path / "ring_4" / "broadcast"
    for root in (3, 0):
        for kind in ("frontier", "time"):
            assert (folder / f"broadcast-root{root}-{kind}.png").read_bytes().startswith(
                PNG_SIGNATURE)
    # a report's plots carry it too, the speed-up's as well (it had no root)
    page = synth_main("report", "broadcast", "--topo", "ring:4", "--root", "3", "-o",
                      str(tmp_path / "r"), "--time-limit", "30")
    assert page.returncode == 0, page.stderr
    for kind in ("speedup", "frontier", "time"):
        ET.parse(tmp_path / "r" / f"broadcast-root3-{kind}.svg")


def test_the_frontier_plots_staircase_joins_only_undominated_points():
    from synth.pictures.plots import _undominated

    # (us/MB, latency): (3.889, 0.7) beats (10.0, 0.7); (4.688, 78) is beaten by (4.375, 13.7)
    points = [(10.0, 0.7), (3.889, 0.7), (4.375, 13.7), (4.688, 78.0), (2.0, 100.0)]
    assert _undominated(points) == [(2.0, 100.0), (3.889, 0.7)]


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]


def test_report_page(tmp_path):
    out = tmp_path / "report"
    run = synth_main("report", "allgather", "--topo", "ring:4", "-o", str(out),
                     "--time-limit", "30")
    assert run.returncode == 0, run.stderr
    page = (out / "index.html").read_text()
    assert '<table class="frontier">' in page and "allgather-s2-r3-c2.json" in page
    # every point on 4 GPUs in a ring loads in both runtimes: no reason on the cell
    assert "<th>loads</th>" in page and '<td title="">both</td>' in page
    assert "does not load" not in page
    assert '<table class="comparison">' in page and "ring" in page
    parser = _Refs()
    parser.feed(page)
    images = [r for r in parser.refs if r.startswith("data:image/svg+xml;base64,")]
    # speed-up, frontier and time plots, topology, two schedules (S2 R3 C2, and S2 R2
    # C1, the fastest the runtimes load at the smallest sizes in cost model 2)
    assert len(images) == 6
    for ref in parser.refs:
        if not ref.startswith("data:"):
            assert (out / ref).is_file(), ref
    for name in ("topology.svg", "allgather-s2-r3-c2.svg", "allgather-frontier.svg",
                 "allgather-time.svg", "allgather-speedup.svg"):
        ET.parse(out / name)
    # the speed-up against size comes first, before the tables
    assert page.index("allgather-speedup.svg") < page.index('<table class="frontier">')

    bad = synth_main("report", "allgather", "--topo", "nosuch", "-o", str(tmp_path / "r2"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert not (tmp_path / "r2").exists()
