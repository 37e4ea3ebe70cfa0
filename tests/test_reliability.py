"""What outside testing broke, case by case (the reliability issue): files a user did
not ask to lose, limits that did not hold, tracebacks and wrong exit codes, first use.

Each test drives the command line and checks the exit code, the one line on stderr, and
the files on disk: in process (tests.in_process.synth_main: the same output, exit code
and files, without a fresh Python and its imports per command; `main` itself where a
fault has to be injected), or as the program (synth_cli, a subprocess) where the test is
about the process: a signal, another process's files, or input that a regression would
read for ever or expand to fill the memory (the subprocess's timeout ends a hang). The
batteries of bad numbers and shapes run in process; the first case of each also runs as
the program.
"""

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

import synth.files
from synth.bounds import bounds
from synth.cli import main
from synth.deadline import Deadline
from synth.schedule.collectives import make_collective
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from tests.in_process import synth_main

REPO = Path(__file__).resolve().parent.parent


def synth_cli(*args, cwd=None, env=None, timeout=120, stdin=None):
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, stdin=stdin,
                          env=None if env is None else {**os.environ, **env})


def one_line(result, code):
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("synth: "), \
        result.stderr[-2000:]
    assert len(result.stderr) < 500  # values quoted in messages are cut short
    return result.stderr



def both_ways(first: bool, *args, **kwargs):
    """synth ARGS in process; in the first case of a battery (`first`) also as the
    program, which must say the same."""
    here = synth_main(*args, **kwargs)
    if first:
        real = synth_cli(*args, **kwargs)
        assert (real.returncode, real.stdout, real.stderr) == \
            (here.returncode, here.stdout, here.stderr)
    return here


def write_topology(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


SMALL = """
gpus: 2
links:
  - {between: [gpu0, gpu1], gbps: 25}
"""


# --- files a user did not ask to lose -----------------------------------------------

def test_an_output_path_that_is_a_fifo_or_a_folder_is_refused_not_replaced(
        tmp_path, schedule_file):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    for target in (fifo, folder):
        one_line(synth_main("export", str(schedule_file), "--to", "json", "-o", str(target)),
                 2)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and folder.is_dir()
    if os.geteuid() == 0:  # only root could have replaced the device
        one_line(synth_main("export", str(schedule_file), "--to", "json", "-o", "/dev/null"),
                 2)
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not list(tmp_path.glob(".synth-*"))


def test_a_symlink_is_written_through_and_a_file_keeps_its_mode(tmp_path, schedule_file):
    target = tmp_path / "real.json"
    target.write_text("old")
    os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = synth_main("export", str(schedule_file), "--to", "json", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == schedule_file.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_no_folder_is_made_where_a_link_leads_nowhere(tmp_path, schedule_file):
    """A link at the file is written through only into a folder that exists, and a link
    among the folders must lead somewhere: mkdir -p refuses both, and synth made the
    folders at the far end of the link."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "far" / "away" / "real.json")
    folder_link = tmp_path / "gone"
    folder_link.symlink_to(tmp_path / "nowhere")
    said = one_line(synth_main("export", str(schedule_file), "--to", "json",
                               "-o", str(link)), 2)
    assert f"link to {tmp_path / 'far' / 'away' / 'real.json'}, whose folder does not " \
        "exist" in said
    said = one_line(synth_main("export", str(schedule_file), "--to", "json",
                               "-o", str(folder_link / "sub" / "x.json")), 2)
    assert f"{folder_link} is a symbolic link that leads to nothing" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "link.json"]
    too_long = tmp_path / "sub" / ("x" * 300 + ".json")  # the check's own error, named
    assert "cannot write" in one_line(synth_main("export", str(schedule_file), "--to",
                                                 "json", "-o", str(too_long)), 2)
    (tmp_path / "far" / "away").mkdir(parents=True)  # where the link's folder exists
    result = synth_main("export", str(schedule_file), "--to", "json", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "far" / "away" / "real.json").read_text() == \
        schedule_file.read_text()


def test_a_path_ending_in_a_slash_names_a_folder_and_long_names_fit(tmp_path,
                                                                    schedule_file):
    one_line(synth_main("export", str(schedule_file), "--to", "json",
                        "-o", str(tmp_path / "newdir") + "/"), 2)
    assert not (tmp_path / "newdir").exists()
    long_name = tmp_path / ("x" * 245 + ".json")  # the temporary name must still fit
    result = synth_main("export", str(schedule_file), "--to", "json", "-o", str(long_name))
    assert result.returncode == 0, result.stderr
    assert long_name.read_text() == schedule_file.read_text()


@pytest.mark.parametrize("name", ["..", "../../escape", "a/b", ".hidden"])
def test_a_topology_name_never_leads_out_of_the_output_folder(tmp_path, name):
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "keep.json").write_text("{}")
    path = write_topology(tmp_path / "t.yaml", f"name: {json.dumps(name)}\n" + SMALL)
    result = synth_main("allgather", "--topo", path, "--out", str(victim / "sub"),
                        "--time-limit", "20")
    assert result.returncode == 0, result.stderr
    assert (victim / "keep.json").read_text() == "{}"
    written = [p for p in tmp_path.rglob("*.json") if p.name.startswith("allgather-")]
    assert written and all((victim / "sub") in p.parents for p in written)
    assert all(not part.startswith(".") for p in written
               for part in p.relative_to(victim / "sub").parts)


def test_generator_names_become_portable_folder_names(tmp_path):
    result = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ring_4" / "allgather").is_dir()
    assert all(":" not in p.name for p in tmp_path.rglob("*"))


def test_one_instance_and_steps_runs_replace_only_their_own_files(tmp_path):
    from synth.output_folder import record

    folder = tmp_path / "dgx1" / "allgather"
    frontier = synth_main("allgather", "--topo", "dgx1", "--out", str(tmp_path))
    assert frontier.returncode == 0, frontier.stderr
    before = sorted(p.name for p in folder.glob("*.json"))
    assert len(before) >= 2
    one = synth_main("allgather", "--topo", "dgx1", "--steps", "3", "--rounds", "9",
                     "--chunks", "1", "--out", str(tmp_path))
    assert one.returncode == 0, one.stderr
    after = sorted(p.name for p in folder.glob("*.json"))
    assert set(before) <= set(after)  # nothing of the frontier was lost
    # --steps S alone replaces only files with S steps
    (folder / "allgather-s2-r9-c9.json").write_text("{}")  # an old 2-step file
    (folder / "allgather-s5-r9-c9.json").write_text("{}")  # and a 5-step one
    record(folder, [folder / "allgather-s2-r9-c9.json",  # as synth leaves its own
                    folder / "allgather-s5-r9-c9.json"])
    again = synth_main("allgather", "--topo", "dgx1", "--steps", "2", "--out",
                       str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert not (folder / "allgather-s2-r9-c9.json").exists()
    assert (folder / "allgather-s5-r9-c9.json").exists()
    draw = synth_main("draw", str(folder / before[0]), "-o", str(tmp_path / "x.svg"))
    assert draw.returncode == 0, draw.stderr  # the README's tour goes on working


def test_stale_files_that_vanish_during_clean_up_are_no_error(tmp_path, monkeypatch):
    from synth.output import _remove_stale
    from synth.output_folder import MANIFEST, record

    folder = tmp_path / "f"
    folder.mkdir()
    names = ["allgather-s1-r2-c1.json",    # stale: removed
             "allgather-s3-r4-c1.xml",     # stale: removed, after the vanished one
             "allgather-s4-r5-c1.json",    # this run's own: kept
             "allgather-s11-r12-c1.json",  # past the steps searched: kept
             "allgather-s2-r3-c1.json.bak"]  # not a name synth writes: kept
    for name in names:
        (folder / name).write_text("{}")
    ghost = folder / "allgather-s2-r3-c1.json"  # listed, then removed by another run
    record(folder, [folder / name for name in names])  # synth wrote them all
    listed = sorted(folder.iterdir())
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter([listed[0], ghost,
                                                                   *listed[1:]]))
    _remove_stale(folder, "allgather", (1, 10), {names[2]}, {".json", ".xml"})  # no error
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir() if p.name != MANIFEST) == sorted(names[2:])


def test_sigterm_keeps_found_points_and_leaves_no_temporary_files(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "synth", "allreduce", "--topo", "dgx1",
         "--out", str(tmp_path), "--time-limit", "600", "--progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # wait for the first point
        if line.strip().startswith("found S=2"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "interrupted" in out
    written = list((tmp_path / "dgx1" / "allreduce").glob("allreduce-s2-*.json"))
    assert written and synth_main("verify", *map(str, written)).returncode == 0
    assert not list(tmp_path.rglob(".synth-*"))


def test_a_killed_runs_temporary_files_are_removed_by_the_next_run(tmp_path,
                                                                   schedule_file):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".synth-{synth.files._HOST}-{dead.pid}-0.tmp"
    stale.write_text("half a file")  # what SIGKILL leaves
    alive = tmp_path / f".synth-{synth.files._HOST}-{os.getpid()}-999.tmp"
    alive.write_text("still being written")
    # as the program: the live process is this one, not synth (in process, synth's own
    # pid, and the sweep runs once a folder per process)
    result = synth_cli("export", str(schedule_file), "--to", "json",
                       "-o", str(tmp_path / "x.json"))
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and alive.exists()


def test_a_full_disk_is_one_line_after_the_table(tmp_path, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(synth.files.os, "replace", full)
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert stop.value.code == 2
    assert "allgather on ring:4" in captured.out  # the results are still shown
    assert captured.err.count("\n") == 1 and "no space left" in captured.err
    assert not list(tmp_path.rglob(".synth-*"))


def test_an_out_folder_that_is_a_file_is_refused_before_the_search(tmp_path):
    file = tmp_path / "file"
    file.write_text("mine")
    err = one_line(synth_main("allgather", "--topo", "dgx1", "--out", str(file)), 2)
    assert "not a folder" in err and file.read_text() == "mine"


# --- limits -----------------------------------------------------------------------

def test_the_bounds_stop_at_their_deadline_and_stay_valid():
    lowering = lower_with_routes(resolve("hypercube:6"))
    coll = make_collective("allgather", lowering.model.ranks)
    full = bounds(lowering, coll)
    cut = bounds(lowering, coll, deadline=time.monotonic())  # already past
    assert cut.partial and not full.partial and "partial" in cut.note
    assert 0 < cut.rounds_per_chunk <= full.rounds_per_chunk
    assert 0 < cut.steps <= full.steps


# A time limit is checked by what the run says and leaves (it stopped at the limit,
# the exit code, no half files), never by a stopwatch: how long a run takes depends on
# how fast and how busy the machine is. Where a stage must be cut whatever the machine,
# a sleep makes it late: a sleep lasts at least what it was asked for on any machine.

def _sleep_past(deadline) -> None:
    time.sleep(Deadline.of(deadline).left() + 0.05)


def test_the_time_limit_covers_routing(tmp_path):
    # routing dgx2x64's 1024 GPUs takes about 5 s on an idle core (and the rest of its
    # lowering longer): 0.1 s stops it on any machine, and a busy one sooner
    out = tmp_path / "out"
    result = synth_main("allgather", "--topo", "dgx2x64", "--time-limit", "0.1",
                        "--out", str(out), "--json")
    err = one_line(result, 1)
    assert "the time limit (0.1 s) ran out while lowering dgx2x64 (1024 GPUs)" in err
    assert result.stdout == "" and not out.exists()


def test_the_time_limit_covers_the_bounds_and_all_that_follows(tmp_path, monkeypatch,
                                                              capsys):
    import synth.frontier

    real = synth.frontier.lower_with_routes

    deadlines = []

    def late(topo, deadline=None):  # the routing is done just as the whole limit runs out
        deadlines.append(deadline)
        lowering = real(topo)
        _sleep_past(deadline)
        return lowering

    monkeypatch.setattr(synth.frontier, "lower_with_routes", late)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "dgx1", "--time-limit", "0.5", "--out", str(out),
              "--json"])
    captured = capsys.readouterr()
    assert deadlines and deadlines[0] is not None  # the limit reaches the routing
    assert stop.value.code == 1  # no schedule: nothing had time to make one
    assert captured.err.count("\n") == 1 and "no schedule found" in captured.err
    summary = json.loads(captured.out)
    assert summary["bounds"]["note"].startswith("partial: the time limit cut the bounds")
    assert not summary["complete"] and not summary["frontier"]
    stopped = summary["stopped"]
    assert stopped.keys() == {"greedy", "trees", "baselines", "allgather"}  # each was cut
    assert stopped["trees"] == stopped["allgather"] == "out of time"
    assert stopped["greedy"].startswith("out of time before 1 chunk a share")
    assert stopped["baselines"].startswith("not built: ")
    assert not out.exists()  # nothing written, not even in part
    full = bounds(lower_with_routes(resolve("dgx1")), make_collective("allgather", 8))
    assert summary["bounds"]["steps"] <= full.steps  # partial bounds still hold
    assert Fraction(summary["bounds"]["rounds_per_chunk"]) <= full.rounds_per_chunk


def test_the_bounds_commands_time_limit_covers_its_routing(monkeypatch, capsys):
    import synth.topology.linkmodel

    real = synth.topology.linkmodel.lower_with_routes

    def slow(topo, deadline=None):  # longer than the whole limit, 0.1 s
        lowering = real(topo, deadline)
        time.sleep(0.15)
        return lowering

    monkeypatch.setattr(synth.topology.linkmodel, "lower_with_routes", slow)
    with pytest.raises(SystemExit) as stop:
        main(["bounds", "allgather", "--topo", "hypercube:6", "--time-limit", "0.1",
              "--json"])
    captured = capsys.readouterr()
    assert stop.value.code == 0 and captured.err == ""
    cut = json.loads(captured.out)
    assert cut["partial"] and cut["note"].startswith("partial: the time limit cut")
    full = bounds(real(resolve("hypercube:6")), make_collective("allgather", 64))
    assert not full.partial
    assert 0 < cut["steps"] <= full.steps
    assert 0 < Fraction(cut["rounds_per_chunk"]) <= full.rounds_per_chunk


def _peak_memory_mib(args, tmp_path):
    """Run synth with `args`; its result and its peak memory (resident, MiB), which
    unlike its duration does not depend on the machine's speed or load."""
    peak_path = tmp_path / "peak"
    script = ("import atexit, sys\n"
              f"PEAK = {str(peak_path)!r}\n"
              "def report():\n"
              "    for line in open('/proc/self/status'):\n"
              "        if line.startswith('VmHWM:'):\n"
              "            open(PEAK, 'w').write(line.split()[1])\n"
              "atexit.register(report)\n"
              "sys.argv = ['synth', *sys.argv[1:]]\n"
              "from synth.cli import main\n"
              "main()\n")
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                            text=True, timeout=120)  # a hang guard, not a speed check
    return result, int(peak_path.read_text()) / 1024  # VmHWM is in KiB


@pytest.mark.parametrize("spec, why", [
    ("dgx2x1024", "expected between 1 and 256 boxes (4096 GPUs at most)"),
    ("dgx2x257", "expected between 1 and 256 boxes (4096 GPUs at most)"),
    ("fc:4096", "16,773,120 links, over the 2,200,000"),  # 4096 x 4095
    ("switch:4096", "16,773,120 GPU pairs with a route of their own, over the 2,200,000"),
])
def test_gpu_counts_and_sizes_have_one_cap_checked_by_arithmetic(spec, why, tmp_path):
    result, peak = _peak_memory_mib(["topo", "show", spec], tmp_path)
    assert why in one_line(result, 2)
    # refused before anything large is built: the start-up takes about 40 MiB, building
    # and routing dgx2x64 (1024 GPUs, allowed) well over 1 GiB
    assert peak < 256, peak


def test_yaml_aliases_deep_nesting_and_endless_files_are_refused(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi"))
    deep_yaml = "gpus: " + "[" * 5000 + "]" * 5000 + "\n"
    deep_json = '{"gpus": ' + "[" * 100000 + "]" * 100000 + "}"
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # the alias bomb, /dev/zero and the FIFO as the program: read, they would fill the
    # memory or never end (the subprocess's timeout guards the hang); too deep a nesting
    # is one line either way, in process
    for path, run in ((write_topology(tmp_path / "bomb.yaml", bomb), synth_cli),
                      (write_topology(tmp_path / "deep.yaml", deep_yaml), synth_main),
                      (write_topology(tmp_path / "deep.json", deep_json), synth_main),
                      ("/dev/zero", synth_cli), (str(fifo), synth_cli)):
        one_line(run("topo", "show", path), 2)  # refused, not read to the end
    schedule = tmp_path / "deep-schedule.json"
    schedule.write_text('{"steps": ' + "[" * 100000 + "]" * 100000 + "}")
    for args, run in ((["verify", str(schedule)], synth_main),
                      (["verify", "/dev/zero"], synth_cli), (["verify", str(fifo)], synth_cli)):
        one_line(run(*args), 2)
    hints = write_topology(tmp_path / "hints.yaml", bomb)
    one_line(synth_cli("allgather", "--topo", "dgx2x2", "--hints", hints), 2)


def test_a_schedule_of_300000_steps_is_drawn_in_part(tmp_path, schedule_file):
    doc = json.loads(schedule_file.read_text())
    doc["steps"] += [{"rounds": 1, "sends": []}] * 300_000
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    # as the program: the timeout ends a draw of every step, should one start
    result = synth_cli("draw", str(big), "-o", str(tmp_path / "big.svg"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "the first 64 steps of 300002 are drawn" in (tmp_path / "big.svg").read_text()


# --- tracebacks and exit codes ------------------------------------------------------

@pytest.mark.parametrize("value", ["1" + "0" * 400, ".inf", ".nan", "1e308", "0", "-1",
                                   "[1]", "true"])
@pytest.mark.parametrize("field", ["gbps", "alpha_us", "count", "unit_gbps"])
def test_numbers_in_topology_files(tmp_path, field, value):
    if field == "unit_gbps":
        text = f"unit_gbps: {value}\n" + SMALL
    else:
        text = SMALL.replace("gbps: 25}", f"gbps: 25, {field}: {value}}}") \
            if field != "gbps" else SMALL.replace("gbps: 25", f"gbps: {value}")
    if field == "alpha_us" and value == "0":
        return  # a zero latency is fine
    one_line(both_ways(field == "gbps" and value == ".inf", "topo", "show",
                       write_topology(tmp_path / "t.yaml", text)), 2)


def test_yaml_1_2_numbers_are_numbers(tmp_path):
    text = SMALL.replace("gbps: 25", "gbps: 2.5e1")
    result = synth_main("topo", "show", write_topology(tmp_path / "t.yaml", text))
    assert result.returncode == 0 and "25" in result.stdout
    err = one_line(synth_main("topo", "show", write_topology(
        tmp_path / "u.yaml", SMALL.replace("gbps: 25", "gbps: 1e308"))), 2)
    assert "1e+308" in err and "'1e308'" not in err  # a number, not a string


@pytest.mark.parametrize("mutate", [
    lambda d: d["topology"]["links"][0].__setitem__(2, 1e400),
    lambda d: d["topology"]["links"][0].__setitem__(2, float("nan")),
    lambda d: d["topology"].__setitem__("unit_gbps", 0),
    lambda d: d["topology"].__setitem__("unit_gbps", float("inf")),
    lambda d: d["topology"]["links"].__setitem__(0, [0, 1]),
    lambda d: d.__setitem__("ranks", 10 ** 400),
], ids=["huge-capacity", "nan-capacity", "zero-unit", "inf-unit", "short-link",
        "huge-ranks"])
def test_numbers_and_shapes_in_schedule_files(tmp_path, schedule_file, mutate):
    doc = json.loads(schedule_file.read_text())
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for args in (["verify", "--cost", str(bad)], ["draw", str(bad), "-o",
                                                   str(tmp_path / "x.svg")],
                 ["export", str(bad), "--to", "msccl-xml", "-o", str(tmp_path / "x.xml")]):
        result = both_ways(doc["ranks"] == 10 ** 400, *args)
        assert result.returncode in (1, 2)
        one_line(result, result.returncode)
    assert not (tmp_path / "x.svg").exists() and not (tmp_path / "x.xml").exists()


@pytest.mark.parametrize("args", [
    ["allgather", "--topo", "ring:4", "--time-limit", "nan"],
    ["allgather", "--topo", "ring:4", "--time-limit", "inf"],
    ["compare", "allgather", "--topo", "ring:4", "--sizes", "9" * 300],
    ["verify", "--cost", "--sizes", "1" + "0" * 30 + "GB", "x.json"],
    ["allgather", "--topo", "x" * 5000],
    ["allgather", "--topo", ""],
    ["allgather", "--topo", "ring:4", "--root", "1"],
    ["allgather", "--topo", "/"],
])
def test_bad_values_on_the_command_line(args, tmp_path):
    one_line(both_ways(args[-1] == "nan", *args, cwd=tmp_path), 2)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("text", [
    SMALL.replace("[gpu0, gpu1]", "[[gpu0], gpu1]"),
    "name: 5\n" + SMALL,
    "name: [a]\n" + SMALL,
    SMALL.replace("gpus: 2", "gpus: [gpu0, [gpu1]]"),
])
def test_bad_shapes_in_topology_files(tmp_path, text):
    one_line(both_ways(text.startswith("name: 5"), "topo", "show",
                       write_topology(tmp_path / "t.yaml", text)), 2)


def test_non_utf8_files_are_bad_input(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"name: caf\xe9\n" + SMALL.encode())
    one_line(synth_main("topo", "show", str(path)), 2)
    one_line(synth_main("allgather", "--topo", "dgx2x2", "--hints", str(path)), 2)


def test_an_instance_too_large_for_the_encoder_is_a_no(tmp_path):
    err = one_line(synth_main("allgather", "--topo", "dgx1", "--steps", "64", "--rounds",
                              "1", "--chunks", "256", "--out", str(tmp_path)), 1)
    assert "too large" in err


def test_run_under_half_a_torchrun_environment_is_bad_input(schedule_file):
    err = one_line(synth_main("run", str(schedule_file), env={"RANK": "0",
                                                              "WORLD_SIZE": "4"}), 2)
    assert "MASTER_ADDR" in err
    err = one_line(synth_main("run", str(schedule_file), env={
        "RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "x9"}), 2)
    assert "MASTER_PORT 'x9'" in err


def test_bare_commands_print_help_and_a_closed_pipe_is_no_error():
    for args in ([], ["topo"]):
        result = synth_main(*args)
        assert result.returncode == 0 and result.stderr == ""
        assert result.stdout.startswith("Usage: synth")
    listing = subprocess.run(f"{sys.executable} -m synth topo list | head -1; "
                             "echo ${PIPESTATUS[0]}", shell=True, capture_output=True,
                             text=True, executable="/bin/bash")
    assert listing.stdout.splitlines()[-1] == "0" and listing.stderr == ""


# --- first use ----------------------------------------------------------------------

def test_only_rooted_collectives_offer_a_root_and_every_option_is_explained():
    from synth.cli.app import cli

    for name, command in cli.commands.items():
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert param.help, f"synth {name} {param.opts[0]} has no help text"
    rooted = {"broadcast", "reduce", "gather", "scatter"}
    for name in ("allgather", "reducescatter", "allreduce", "alltoall", *rooted):
        names = {p.name for p in cli.commands[name].params}
        assert ("root" in names) == (name in rooted), name


def test_a_quiet_log_still_hears_from_a_long_search(monkeypatch, capsys):
    from synth.cli import synthesize

    monkeypatch.setattr(synthesize, "HEARTBEAT", 0.3)
    progress = synthesize._Progress(enabled=False, overwrite=False, heartbeat=True)
    progress.event("search", "allgather")
    # wait for two beats, not a fixed time: on a busy machine a beat may come late
    heard, guard = "", time.monotonic() + 60  # the guard: a heartbeat that never comes
    while heard.count("\n") < 2 and time.monotonic() < guard:
        time.sleep(0.1)
        heard += capsys.readouterr().err
    progress.done()
    lines = (heard + capsys.readouterr().err).splitlines()
    assert len(lines) >= 2 and all("searching allgather" in line for line in lines)


def test_the_readme_names_only_files_the_repository_has():
    readme = (REPO / "README.md").read_text()
    assert "../shared" not in readme and "DESIGN.md" not in readme
    import re

    named = set(re.findall(r"`((?:synth|docs|bench|tests|topologies)/[\w./-]*)`", readme))
    assert named
    missing = [p for p in sorted(named) if not (REPO / p).exists()
               and not re.search(r"[A-Z]{3,}", p)]  # topologies/NAME.yaml is a pattern
    assert not missing, missing


def test_the_log_says_when_the_exact_search_starts(tmp_path):
    # on ndv2x4 the exact search ran for minutes after the trees, under the line
    # "searching allgather by packed trees": the log must not blame the last construction
    result = synth_main("allgather", "--topo", "ring:4", "--out", tmp_path, "--progress")
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("searching ")]
    assert said[-1] == "searching allgather exactly (4 ranks) ...", said
