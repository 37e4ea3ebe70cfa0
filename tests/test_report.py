"""Reports people can open: the speed-up against size, pages that keep to their byte
limit, plots whose labels never collide and whose lines are told apart, the plan's
HTML page, and every page opened in a real headless browser (Chromium).

The browser check is not a speed test: it asks that Chromium loads the page and draws a
screenshot that is not blank within minutes; it is skipped, saying so, only where
Chromium is not installed (.ci/run installs it from Debian).
"""

import html
import itertools
import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.text import Text
from PIL import Image

from synth.construct.baselines import ALGORITHMS, baselines
from synth.cost_choice import in_cost_model
from synth.frontier import synthesize
from synth.html import markdown_html
from synth.pictures import report as report_module
from synth.pictures.labels import crosses, overlaps, place_labels
from synth.pictures.page import Picture, fit_pictures, inlined_size
from synth.pictures.plots import _frontier, frontier_figure, line_styles, time_figure
from synth.pictures.report import _schedule_versions, write_report
from synth.pictures.speedup import speedup_curve, speedup_figure, speedup_words
from synth.plan.page import plan_page
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from tests.in_process import synth_main

KB, GB = 1 << 10, 1 << 30
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_TIMEOUT = 300  # seconds: "it opens at all", not a speed assertion


# --- the speed-up against size -------------------------------------------------------

def test_speedup_crosses_where_the_lines_meet():
    """a = 10 us + 1 ns/B, b = 2 us + 2 ns/B meet at 10 + n/1000 = 2 + n/500: n = 8000;
    from 8001 bytes a is faster, at 4 GB by (2 + 2^32/500) / (10 + 2^32/1000)."""
    curve = speedup_curve({"a": lambda n: 10 + n / 1000}, {"b": lambda n: 2 + n / 500},
                          lines=("b",))
    assert curve.sizes[0] == KB and curve.sizes[-1] == 4 * GB
    assert len(curve.sizes) == 22 * 4 + 1  # 4 a doubling over 22 doublings
    assert [(c.nbytes, c.rising) for c in curve.crossings] == [(8001, True)]
    assert curve.speedup[0] == pytest.approx((2 + 1024 / 500) / (10 + 1024 / 1000))
    top = (2 + 2 ** 32 / 500) / (10 + 2 ** 32 / 1000)
    assert curve.speedup[-1] == pytest.approx(top) and curve.over["b"] == curve.speedup
    words = speedup_words(curve)
    assert "at 7.81 KB..4 GB" in words  # from the crossing, 8001 B (the grid said 8 KB)
    # rounded down: 1.99 for 1.99999..., 0.36 for 4.048 / 11.024 = 0.3672
    assert "by up to 1.99 x at 4 GB" in words and "0.36 x at 1 KB, 1.99 x at 4 GB" in words
    assert "crossings: 7.81 KB (faster from there)" in words
    fig = speedup_figure(curve, "t", "a model")
    marks = [l for l in fig.axes[0].lines if list(l.get_xdata()) == [8001]]
    assert len(marks) == 1 and list(marks[0].get_ydata()) == [1.0]


def test_speedup_against_the_best_of_several_and_ties():
    """Alternatives b = 50 us + 1 ns/B and c = 20 us + 2 ns/B (c the faster below
    30,000 bytes); candidates low = 2 us + 3 ns/B and b itself (low the faster below
    24,000 bytes). low beats c while 20 + 2n/1000 > 2 + 3n/1000: below 18,000 bytes;
    at 18,000 they tie (56 us each), and from 30,000 bytes the fastest of each side is
    b: a tie, never a speed-up."""
    b = lambda n: 50 + n / 1000  # noqa: E731
    curve = speedup_curve({"low": lambda n: 2 + 3 * n / 1000, "b itself": b},
                          {"b": b, "c": lambda n: 20 + 2 * n / 1000})
    assert [(x.nbytes, x.rising) for x in curve.crossings] == [(18_000, False)]
    assert curve.speedup[0] == pytest.approx((20 + 2.048) / (2 + 3.072))
    assert all(r <= 1 for n, r in zip(curve.sizes, curve.speedup) if n >= 18_000)
    assert curve.speedup[-1] == 1.0 and curve.over == {}
    assert (curve.fastest[0], curve.alternative[0]) == ("low", "c")
    assert (curve.fastest[-1], curve.alternative[-1]) == ("b itself", "b")
    assert speedup_words(curve) == (
        # to the crossing's last faster size, 17,999 B (the grid said 16 KB, beside a
        # crossing at 17.6 KB)
        "The fastest frontier point beats the best alternative at 1 KB..17.6 KB (of 1 KB "
        "to 4 GB), by up to 4.34 x at 1 KB (low against c); 4.34 x at 1 KB, 1.00 x at "
        "4 GB; crossings: 17.6 KB (not faster from there).")


# --- pages keep to their limit -------------------------------------------------------

def test_pictures_share_the_room_smallest_first():
    """Room 30,000 bytes for three pictures of 3,000, 30,000 and 60,000 bytes (inlined:
    4 x ceil(n / 3) + 400 = 4,400, 40,400, 80,400): the first takes 4,400 of its share
    of 10,000; the second, a share of 25,600 / 2 = 12,800, is too big whole and takes
    its version of 9,000 bytes (12,400), offered when told its room is 30,000 x 12,800
    / 40,400 = 9,504 bytes; the third, a share of 13,200, has nothing that fits."""
    asked = []

    def coarser(room):
        asked.append(room)
        yield b"x" * 9_000, "smaller"
        yield b"x" * 3_000, "smaller still"

    small = Picture(b"a" * 3_000, lambda room: asked.append(("small", room)) or iter(()))
    fitted = fit_pictures([Picture(b"c" * 60_000), Picture(b"b" * 30_000, coarser), small],
                          30_000)
    assert [inlined_size(b"a" * 3_000), inlined_size(b"b" * 30_000)] == [4_400, 40_400]
    assert fitted[0] is None
    assert fitted[1] == (b"x" * 9_000, "smaller") and fitted[2] == (b"a" * 3_000, "")
    assert asked == [9_504]  # the small one's coarser versions were never made


def test_a_big_schedule_has_smaller_drawings(tmp_path):
    """32 ranks in two boxes: its matrices in 16 blocks, then 8 blocks of 4, then fewer
    panels too, each drawing no bigger than the one before."""
    schedule = ALGORITHMS["hierarchical"](lower(resolve("dgx2x2")), "allgather",
                                          None).schedule
    versions = list(_schedule_versions(schedule, "chunk", 10 ** 9, 10 ** 9))
    words = [w for _, w in versions]
    assert words == ["drawn smaller: ranks in at most 16 blocks",
                     "drawn smaller: ranks in at most 8 blocks",
                     "drawn smaller: fewer panels, ranks in at most 8 blocks"]
    sizes = [len(svg) for svg, _ in versions]
    assert sizes[0] > sizes[1] >= sizes[2]
    assert b"32 ranks in 8 blocks (4 ranks each, 4 per box)" in versions[1][0]
    # a version reckoned too big for the room is not made: 32 ranks, blocks of 16 are
    # (17/33)^2 of the full drawing's bytes
    assert [w for _, w in _schedule_versions(schedule, "chunk", 33 ** 2, 17 ** 2 - 1)] == \
        words[1:]


@pytest.fixture(scope="module")
def ring4():
    """allreduce on ring:4 in cost model 2: two frontier points and the baselines."""
    topo = resolve("ring:4")
    result = in_cost_model(synthesize(topo, "allreduce", None, Limits(
        max_chunks=8, time_limit=20)), topo, "calibrated")
    base = [(b.name, b.schedule) for b in baselines(result.model, "allreduce")]
    return topo, result, base


@pytest.fixture(scope="module")
def report_page(ring4, tmp_path_factory):
    topo, result, base = ring4
    out = tmp_path_factory.mktemp("report")
    return write_report(topo, result, base, [KB, 1 << 20, 64 << 20], out)


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "a":
            self.links.append(attrs["href"])


def refs(page: Path) -> _Refs:
    parser = _Refs()
    parser.feed(page.read_text())
    return parser


def test_the_report_keeps_to_its_limit(ring4, tmp_path, monkeypatch, report_page):
    """With room for little more than its text, the page inlines what fits, links the
    rest (each full drawing a file beside it) and keeps to the limit."""
    whole = refs(report_page)
    assert len(whole.images) == 3 + 1 + len(ring4[1].points)  # plots, topology, schedules
    assert all(src.startswith("data:image/svg+xml;base64,") for src in whole.images)
    limit = len(report_page.read_bytes()) // 3
    monkeypatch.setattr(report_module, "PAGE_LIMIT", limit)
    small = write_report(*ring4, [KB], tmp_path)
    assert len(small.read_bytes()) <= limit
    parsed = refs(small)
    assert 1 <= len(parsed.images) < len(whole.images)
    assert "too big to show here" in small.read_text()
    for href in parsed.links:
        assert (tmp_path / href).is_file(), href


def test_past_its_deadline_the_page_says_which_schedules_it_did_not_draw(ring4, tmp_path):
    """report drew every schedule however long it took (7 s of a 12 s limit on a
    degraded 64-GPU cluster): past the deadline a schedule is named, not drawn, with the
    command that draws it, and the rest of the page is still there."""
    from synth.deadline import Deadline

    topo, result, base = ring4
    page = write_report(topo, result, base, [KB], tmp_path, deadline=Deadline(0.0))
    text = page.read_text()
    assert text.count("Not drawn: the time limit ran out first") == len(result.points) >= 2
    for p in result.points:
        stem = next(f.stem for f in tmp_path.glob("*.json")
                    if f.stem.endswith(f"s{p.steps}-r{p.rounds}-c{p.chunks}"))
        assert f"synth draw {stem}.json -o {stem}.svg" in text
        assert not (tmp_path / f"{stem}.svg").exists()
    assert len(refs(page).images) == 3 + 1  # the plots and the topology


def test_a_drawing_the_time_left_does_not_afford_is_not_begun(ring4, tmp_path, monkeypatch):
    """One drawing of a 64-rank schedule takes 1-3 s: begun just before the page's
    deadline it ran past it. At the pace of the slowest drawing so far, one that would
    end past the deadline is not begun."""
    from synth.deadline import Deadline

    topo, result, base = ring4
    monkeypatch.setattr(report_module.DRAWING, "seconds", lambda units: 3600.0 * units)
    page = write_report(topo, result, base, [KB], tmp_path, deadline=Deadline.after(600))
    assert page.read_text().count("Not drawn: the time limit ran out first") == \
        len(result.points)


def test_a_small_report_short_of_time_still_draws_its_schedules(ring4, tmp_path,
                                                              monkeypatch):
    """Every drawing was guessed at half a second (a 64-rank one's pace), so a 4-rank
    report under a 3 s limit, with about half a second left for its pictures, drew none.
    A drawing's guess goes with its ranks."""
    import synth.deadline as deadline_module
    from synth.deadline import Deadline

    class HalfASecondLeft(Deadline):
        def affords(self, seconds: float) -> bool:
            return seconds <= 0.5

    monkeypatch.setattr(deadline_module, "machine_slowdown", lambda: 1.0)  # an idle core
    topo, result, base = ring4
    page = write_report(topo, result, base, [KB], tmp_path, deadline=HalfASecondLeft())
    assert "Not drawn" not in page.read_text()
    for p in result.points:
        stem = next(f.stem for f in tmp_path.glob("*.json")
                    if f.stem.endswith(f"s{p.steps}-r{p.rounds}-c{p.chunks}"))
        assert (tmp_path / f"{stem}.svg").stat().st_size > 0


# --- plots: labels never collide, lines told apart ------------------------------------

def _boxes(texts, renderer):
    """The labels' text boxes (an annotation's own extent includes its leader line)."""
    out = []
    for t in texts:
        t.get_window_extent(renderer)  # places the annotation's text
        out.append(Text.get_window_extent(t, renderer))
    return out


def test_labels_never_overlap_each_other_the_points_or_the_edge():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = [(1 + 0.05 * k, 1 + 0.04 * k) for k in range(25)]  # a tight diagonal
    ax.scatter(*zip(*points))
    ax.set_xlim(0, 4)
    ax.set_ylim(0, 3)
    placed = place_labels(ax, points, [f"label number {k}" for k in range(25)])
    renderer = fig.canvas.get_renderer()
    drawn = [t for t in placed if t is not None]
    assert 5 <= len(drawn) < 25  # crowded: some found no clear spot and are left out
    boxes = _boxes(drawn, renderer)
    for a, b in itertools.combinations(boxes, 2):
        assert not overlaps((a.x0, a.y0, a.x1, a.y1), (b.x0, b.y0, b.x1, b.y1))
    frame = ax.get_window_extent(renderer)
    for box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1
        for x, y in (ax.transData.transform(p) for p in points):
            assert not (box.x0 - 4 < x < box.x1 + 4 and box.y0 - 4 < y < box.y1 + 4)
    # a leader line, from its point to its label's centre, crosses no other label
    led = 0
    for t, mine in zip(drawn, boxes):
        if t.arrow_patch is None:
            continue
        led += 1
        line = (tuple(ax.transData.transform(t.xy)), ((mine.x0 + mine.x1) / 2,
                                                      (mine.y0 + mine.y1) / 2))
        for box in boxes:
            if box is not mine:
                assert not crosses(line, (box.x0, box.y0, box.x1, box.y1))
    assert led  # some labels are far from their points, on a line


def _no_overlap(fig, ax):
    renderer = fig.canvas.get_renderer()
    boxes = [(b.x0, b.y0, b.x1, b.y1) for b in _boxes(ax.texts, renderer)]
    return not any(overlaps(a, b) for a, b in itertools.combinations(boxes, 2))


def test_frontier_labels_and_legend(ring4):
    topo, result, base = ring4
    fig = frontier_figure(result, base)
    ax = fig.axes[0]
    names = {t.get_text() for t in ax.texts}
    assert {f"S{p.steps} R{p.rounds} C{p.chunks}" for p in result.points} <= names
    assert {name for name, _ in base} <= names and _no_overlap(fig, ax)
    legend = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    assert legend.x0 >= frame.x1  # beside the plot, never over it
    # numbered: a number beside each point, the key in the legend
    fig, fits = _frontier(result, base, numbered=True)
    count = len(result.points) + len(base)
    assert fits and sorted(t.get_text() for t in fig.axes[0].texts) == \
        sorted(str(k + 1) for k in range(count))
    keys = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"{count}: {base[-1][0]}" in keys and _no_overlap(fig, fig.axes[0])


class _Row:
    def __init__(self, name, kind, k):
        self.name, self.kind, self.k = name, kind, k

    def time_us(self, n):
        return 5 + self.k + n * (1 + self.k) / 1e4


def test_22_lines_are_told_apart_and_the_legend_is_outside(ring4):
    styles = line_styles(14, 8)
    assert len(set(styles)) == 22
    assert {s[1] for s in styles[:14]} == {"-"} and {s[1] for s in styles[14:]} == {"--"}
    rows = [_Row(f"s{k}", "synth", k) for k in range(14)]
    rows += [_Row(f"b{k}", "baseline", 14 + k) for k in range(8)]
    fig = time_figure(ring4[1], [], rows=rows, model="a model")
    fig.canvas.draw()  # the layout
    t_ax = fig.axes[0]
    looks = {(l.get_color(), l.get_linestyle(), l.get_marker()) for l in t_ax.lines[:22]}
    assert len(looks) == 22
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert legend.x0 >= ax.get_window_extent(renderer).x1
    assert len(fig.legends[0].get_texts()) == 23  # every line and the bound


# --- the plan's page ----------------------------------------------------------------

PLAN = """name: small
communicators:
  tp: {per: box}
collectives:
  - {communicator: tp, collective: allgather, size: 1MB, count: 2}
"""


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    (out / "w.yaml").write_text(PLAN)
    run = synth_main("plan", out / "w.yaml", "--topo", "dgxh100x2", "-o", out / "p",
                     "--time-limit", "20", "--plots", "--format", "none")
    assert run.returncode == 0, run.stderr
    return out / "p"


def test_the_plan_writes_an_html_report(plan_dir):
    """report.html: report.md's text, its table as a table (numbers right-aligned, as
    the Markdown's ---: says), and the plots from plots/."""
    md = (plan_dir / "report.md").read_text()
    page = (plan_dir / "report.html").read_text()
    assert "report.html" in json.loads((plan_dir / "plan.json").read_text())["files"]
    assert "<h1>Communication plan: small on dgxh100x2</h1>" in page
    lines = md.splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("| communicator"))
    right = [c.strip().endswith(":") for c in lines[head + 1].strip("|").split("|")]
    cells = [c.strip() for c in lines[head + 2].strip("|").split("|")]
    assert cells[:2] == ["tp", "allgather"]
    assert "".join(("<td>" if r else '<td class="name">') + html.escape(c) + "</td>"
                   for r, c in zip(right, cells)) in page
    images = refs(plan_dir / "report.html").images
    assert images[0] == "plots/step.png" and "plots/tp-allgather.png" in images
    assert all((plan_dir / src).is_file() for src in images)


def test_markdown_as_html():
    text = "# T\n\nsome **bold** `x<y`\nmore\n\n- a\n- b\n\n| h | n |\n| --- | ---: |\n" \
           "| x | 1 |\n\n```\ncode <1>\n```\n"
    assert markdown_html(text).splitlines() == [
        "<h1>T</h1>", "<p>some <b>bold</b> <code>x&lt;y</code> more</p>",
        "<ul><li>a</li><li>b</li></ul>",
        '<table><tr><th class="name">h</th><th class="name">n</th></tr>'
        '<tr><td class="name">x</td><td>1</td></tr></table>',
        "<pre>code &lt;1&gt;</pre>"]


def test_the_plan_page_shows_its_plots_or_says_how_to_get_them():
    files = {Path("plots/tp-allreduce.png"): b"", Path("plots/step.png"): b"",
             Path("schedules/tp/allreduce-0.json"): ""}
    page = plan_page("# Plan\n\ntext", files)
    assert page.index('src="plots/step.png"') < page.index('src="plots/tp-allreduce.png"')
    assert "schedules/" not in page and "--plots adds plots" not in page
    assert "synth plan --plots adds plots here" in plan_page("# Plan", {})


# --- every page in a real browser ---------------------------------------------------

def screenshot(page: Path, out: Path, width: int = 1400, height: int = 2000) -> Image.Image:
    """The page as headless Chromium draws it (its networking off: this machine's network
    is closed, and a page of synth's needs none)."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed here (Debian: apt-get install chromium; "
                    ".ci/run installs it): the pages were not opened in a browser")
    with tempfile.TemporaryDirectory() as profile:
        try:
            run = subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                 f"--screenshot={out}", f"--window-size={width},{height}", page.as_uri()],
                capture_output=True, text=True, timeout=BROWSER_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Chromium did not finish drawing {page} in {BROWSER_TIMEOUT} s")
    assert run.returncode == 0 and out.is_file(), run.stderr[-2000:]
    return Image.open(out).convert("RGB")


def _dark(a):  # text and lines
    return a.sum(axis=2) < 300


def _blue(a):  # the plots' #1f77b4 (31, 119, 180), not a link's blue
    r, g, b = a[..., 0], a[..., 1], a[..., 2]
    return (10 < r) & (r < 70) & (95 < g) & (g < 145) & (155 < b) & (b < 205)


def _share(image: Image.Image, test) -> float:
    return float(test(np.asarray(image, dtype=int)).mean())


def test_the_report_opens_in_a_browser(report_page, tmp_path):
    image = screenshot(report_page, tmp_path / "report.png")
    assert image.size == (1400, 2000)
    assert _share(image, _dark) > 0.005  # text and lines drawn
    assert _share(image, _blue) > 0.0003  # the speed-up plot (first on the page) drawn


def test_the_plan_page_opens_in_a_browser(plan_dir, tmp_path):
    image = screenshot(plan_dir / "report.html", tmp_path / "plan.png", height=3000)
    assert _share(image, _dark) > 0.005
    assert _share(image, _blue) > 0.001  # the plan's bars and curves (plots/*.png) drawn


def test_the_headline_names_a_point_no_runtime_loads_as_such(ring4, tmp_path):
    # the headline credits the fastest frontier point at each size; one that loads in
    # neither runtime is no file to load, and the page says so beside its name
    from dataclasses import replace

    topo, result, base = ring4
    refused = {"msccl-xml": "refused here", "mscclpp": "refused here"}
    marked = replace(result, points=[replace(p, loads=refused) for p in result.points])
    page = write_report(topo, marked, base, [KB, 1 << 20], tmp_path / "marked")
    headline = page.read_text().split('class="headline">')[1].split("</p>")[0]
    assert "(no runtime loads it)" in headline
    page = write_report(topo, result, base, [KB, 1 << 20], tmp_path / "plain")
    headline = page.read_text().split('class="headline">')[1].split("</p>")[0]
    assert "(no runtime loads it)" not in headline
