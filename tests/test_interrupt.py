"""Ctrl-C during a frontier search stops at once and keeps what was found; SIGTERM
during `synth run` leaves no process behind."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def test_sigint_keeps_found_points_and_exits_130(tmp_path):
    # allreduce on dgx1: the 2-step point comes within a second or two, the whole
    # search (3 steps, then the reducescatter and allgather phases) takes several more
    proc = subprocess.Popen(
        [sys.executable, "-m", "synth", "allreduce", "--topo", "dgx1",
         "--out", str(tmp_path), "--time-limit", "600", "--progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # wait for the first point
        seen.append(line)
        if line.strip().startswith("found S=2"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # stopped at all (not how fast: load varies)
    assert proc.returncode == 130, "".join(seen) + err
    assert "interrupted" in out and "Traceback" not in err
    written = sorted(p.name for p in (tmp_path / "dgx1" / "allreduce").glob("*.json"))
    # the 2-step point, and those found before the search (the baselines come first)
    assert any(name.startswith("allreduce-s2-") for name in written)
    check = subprocess.run([sys.executable, "-m", "synth", "verify",
                            *(str(tmp_path / "dgx1" / "allreduce" / w) for w in written)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("command", ["compare", "report"])
def test_sigint_during_compare_or_report_exits_130_and_says_so(command, tmp_path):
    # dgx1's exact searches run about 20 s on an idle core (a test's solver cache is
    # empty); whenever Ctrl-C lands (even while starting up) the command must not print
    # a partial result as if it were complete and exit 0
    args = ["-o", str(tmp_path / "r")] if command == "report" else []
    _interrupted_after(4, command, "allreduce", "--topo", "dgx1", "--time-limit", "600",
                       *args)


def test_sigint_during_a_z3_solve_is_an_interrupt(tmp_path):
    # z3 took SIGINT for itself: its solve ended "unknown", read as out of time (exit 1,
    # "not decided within 600 s"); torus:4x4's instance is not decided for minutes
    _interrupted_after(5, "allgather", "--topo", "torus:4x4", "--steps", "4", "--rounds",
                       "8", "--chunks", "8", "--solver", "z3", "--out", str(tmp_path),
                       "--time-limit", "600", env={**os.environ, "SYNTH_CACHE": "0"})


def test_a_ctrl_c_swallowed_while_a_model_is_built_still_stops_the_solve(monkeypatch,
                                                                        capsys):
    # z3's objects free themselves in __del__ by the thousand while a model is built; a
    # KeyboardInterrupt raised there is swallowed by Python ("Exception ignored"), and on
    # a busy machine the Ctrl-C above was lost, its solve left running for minutes. The
    # handler's record of it stops the build and the wait, and no solver is started
    import synth.signals
    from synth.cli import app
    from synth.search import constraints
    from synth.search.constraints import ConstraintModel

    monkeypatch.setattr(synth.signals, "SEEN", [signal.SIGINT])
    started = []
    with pytest.raises(KeyboardInterrupt):
        constraints._interruptible(lambda: started.append(1), lambda: None, 60)
    model = ConstraintModel()
    model.bools = 2
    model.clauses = [[1, 2], [-1, 2]]
    with pytest.raises(KeyboardInterrupt):  # z3's build looks before each constraint
        constraints.solve(model, "z3", time_limit=60)
    assert started == []
    monkeypatch.setattr(synth.signals, "SEEN", [])
    assert constraints.solve(model, "z3", time_limit=60).status == "sat"
    # what Python reports of the swallowed one is kept off stderr; anything else is not

    class Raises:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    monkeypatch.setattr(sys, "unraisablehook", app._unraisable)
    Raises(KeyboardInterrupt())
    assert capsys.readouterr().err == ""
    Raises(ValueError("a real one"))
    assert "a real one" in capsys.readouterr().err


def _interrupted_after(seconds: float, *args, env=None) -> None:
    """`synth ARGS` sent SIGINT after `seconds` (whenever it lands, even while starting
    up): it stops at all (not how fast: load varies), exit 130, and says so."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "synth", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err


def _descendants(pid):
    """The pids below `pid` now, from /proc's parent links."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_during_synth_run_leaves_no_process_behind(tmp_path):
    made = subprocess.run([sys.executable, "-m", "synth", "allgather", "--topo", "ring:4",
                           "--out", str(tmp_path), "--json"], capture_output=True, text=True)
    path = json.loads(made.stdout)["frontier"][0]["file"]
    proc = subprocess.Popen([sys.executable, "-m", "synth", "run", path, "--iters", "10000",
                             "--size", "16MB"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = set()
    try:
        guard = time.monotonic() + 120  # a hang guard: the four workers exist by then
        while len(_descendants(proc.pid)) < 4 and time.monotonic() < guard:
            time.sleep(0.2)
        started = _descendants(proc.pid)
        assert len(started) >= 4, "the workers never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
        guard = time.monotonic() + 60
        while any(_alive(p) for p in started) and time.monotonic() < guard:
            time.sleep(0.2)
        assert not [p for p in started if _alive(p)], "a worker or server outlived synth run"
    finally:  # whatever failed, nothing of this test keeps running
        for pid in started | {proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()


def test_ctrl_c_inside_a_native_import_is_an_interrupt_not_a_bug(monkeypatch, capsys):
    # a Ctrl-C that lands while a native module initialises (OR-Tools, SciPy) comes out
    # of the import as ImportError("initialization failed"), the KeyboardInterrupt lost
    import synth.frontier
    from synth.cli.app import main

    def importing(*args, **kwargs):
        try:  # raise_signal runs the handler before it returns (os.kill may not, under load)
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:  # what pybind11's module init makes of it
            raise ImportError("initialization failed") from None
        raise AssertionError("the Ctrl-C never came")

    monkeypatch.setattr(synth.frontier, "synthesize", importing)
    # Python's own handler, whatever this process inherited: a test run started in the
    # background by a shell ignores SIGINT, and the Ctrl-C never came
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stop:
            main(["allgather", "--topo", "ring:4", "--time-limit", "5"])
    finally:
        signal.signal(signal.SIGINT, before)
    assert stop.value.code == 130
    assert capsys.readouterr().err == "synth: interrupted\n"
    # the command's record of its Ctrl-C ended with it: a later solve in this process
    # (another test) is not stopped by it
    import synth.signals
    assert synth.signals.SEEN == []


def test_a_command_gives_back_the_handlers_it_set_however_it_ends(monkeypatch, capsys):
    # SIGTERM's handler stayed installed after the command: a SIGTERM later in the
    # process was recorded as the command's and stopped every later solve; an internal
    # error shown with SYNTH_TRACEBACK left the Ctrl-C handler and unraisable hook set
    import synth.frontier
    from synth.cli.app import main

    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(synth.frontier, "synthesize", broken)
    monkeypatch.setenv("SYNTH_TRACEBACK", "1")
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM),
              sys.unraisablehook)
    with pytest.raises(ValueError, match="a bug"):
        main(["allgather", "--topo", "ring:4", "--time-limit", "5"])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM),
            sys.unraisablehook) == before
    monkeypatch.delenv("SYNTH_TRACEBACK")
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--time-limit", "5"])
    assert stop.value.code == 3 and "internal error" in capsys.readouterr().err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM),
            sys.unraisablehook) == before


def _interrupted_exact_search(monkeypatch):
    """Every exact search ends as Ctrl-C ends one (it catches it and says so)."""
    from synth.search.pareto import Search

    monkeypatch.setattr("synth.frontier.frontier",
                        lambda *a, **k: Search(stopped="interrupted", complete=False))


def test_after_ctrl_c_no_runtime_is_asked_and_every_point_is_kept(monkeypatch):
    # dgxh100x4's allreduce asked its runtimes for 10 s after the Ctrl-C, before a file
    # was written
    from synth.export import loads
    from synth.frontier import synthesize
    from synth.search.pareto import Limits
    from synth.topology.catalog import resolve

    asked = []
    real = loads.loads_within
    monkeypatch.setattr(loads, "loads_within", lambda *a, **k: asked.append(1) or real(*a, **k))
    topo = resolve("ring:4")
    whole = loads.chosen(synthesize(topo, "allgather", None, Limits(time_limit=60)), topo,
                         "calibrated")
    assert asked and whole.runtimes_stopped != "interrupted"
    asked.clear()
    _interrupted_exact_search(monkeypatch)
    cut = synthesize(topo, "allgather", None, Limits(time_limit=60))
    assert cut.interrupted and cut.points
    shown = loads.chosen(cut, topo, "calibrated")
    assert asked == [] and shown.runtimes_stopped == "interrupted"
    assert {id(p.schedule) for p in shown.points} == {id(p.schedule) for p in cut.points}
    assert not cut.out_of_time and not shown.out_of_time  # nothing untimed by the limit


def test_after_ctrl_c_the_json_says_interrupted_not_out_of_time(monkeypatch, tmp_path):
    from tests.in_process import synth_main

    _interrupted_exact_search(monkeypatch)
    cut = synth_main("allgather", "--topo", "ring:4", "--time-limit", "60", "--json",
                     "-o", tmp_path)
    assert cut.returncode == 130, cut.stderr
    summary = json.loads(cut.stdout)
    assert summary["interrupted"] is True and summary["out_of_time"] is False
    assert summary["frontier"] and all(p["file"] for p in summary["frontier"])


def test_after_ctrl_c_the_report_draws_only_what_fits_in_a_second(monkeypatch, tmp_path):
    # dgxh100x4's page drew every point for 14 s after the Ctrl-C; a drawing guessed at
    # 4 s or more (its pace unmeasured) fits in a 60 s job, not in the second after one
    import synth.deadline
    from synth.deadline import Pace
    from tests.in_process import synth_main

    monkeypatch.setattr(synth.deadline, "_PACES", [])
    monkeypatch.setattr("synth.pictures.report.DRAWING", Pace(0.5, least=8))
    args = ("report", "allgather", "--topo", "ring:4", "--time-limit", "60", "-o")
    whole = synth_main(*args, tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    assert len(list((tmp_path / "whole").glob("allgather-s[0-9]*.svg"))) >= 2
    monkeypatch.setattr("synth.pictures.report.DRAWING", Pace(0.5, least=8))
    _interrupted_exact_search(monkeypatch)
    cut = synth_main(*args, tmp_path / "cut")
    assert cut.returncode == 130 and "interrupted" in cut.stderr
    assert (tmp_path / "cut" / "index.html").exists()
    assert list((tmp_path / "cut").glob("allgather-s[0-9]*.svg")) == []


def test_ctrl_c_while_a_plan_searches_ends_it_with_nothing_written(monkeypatch, tmp_path):
    # the searches kept what Ctrl-C left them, and the plan went on to write a whole
    # folder of cut-short schedules and exit 0 (a user trial's finding)
    import synth.signals
    from synth.search.pareto import Search
    from tests.in_process import synth_main

    def ctrl_c(*args, **kwargs):  # what the handler and the exact search do
        synth.signals.SEEN.append(signal.SIGINT)
        return Search(stopped="interrupted", complete=False)

    workload = tmp_path / "w.yaml"
    workload.write_text("communicators:\n  tp: {per: box}\ncollectives:\n"
                        "  - {communicator: tp, collective: allgather, size: 1MB}\n")
    args = ("plan", workload, "--topo", "ring:4", "--time-limit", "60", "-o")
    whole = synth_main(*args, tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    assert (tmp_path / "whole" / "plan.json").exists()
    monkeypatch.setattr("synth.frontier.frontier", ctrl_c)
    cut = synth_main(*args, tmp_path / "cut")
    assert cut.returncode == 130 and cut.stderr.strip().endswith("synth: interrupted")
    assert not (tmp_path / "cut").exists()


def test_ctrl_c_while_a_plan_writes_its_folder_writes_it_whole_and_exits_130(monkeypatch,
                                                                           tmp_path):
    # the Ctrl-C held while the folder was written was dropped: exit 0, the summary
    # printed as if nothing had come (a reviewer's finding)
    import synth.plan.output
    from tests.in_process import synth_main

    real = synth.plan.output.write_files

    def write_files(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # held until the folder is whole
        return real(*args, **kwargs)

    monkeypatch.setattr(synth.plan.output, "write_files", write_files)
    workload = tmp_path / "w.yaml"
    workload.write_text("communicators:\n  tp: {per: box}\ncollectives:\n"
                        "  - {communicator: tp, collective: allgather, size: 1MB}\n")
    said = synth_main("plan", workload, "--topo", "ring:4", "--time-limit", "60", "-o",
                      tmp_path / "p")
    assert said.returncode == 130 and said.stderr.strip().endswith("synth: interrupted")
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert doc["files"] and all((tmp_path / "p" / f).exists() for f in doc["files"])
