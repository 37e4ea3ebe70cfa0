"""What the second round of outside testing broke, case by case: folders and links in
the output and cache, runs at the same time, numbers that YAML or JSON can hold but
synth cannot, and inputs built to make a step take forever.

Like tests/test_reliability.py, each test drives the command line (or the one function
a fault lives in) and checks the exit code, the one line on stderr and the files; its
batteries of bad numbers and names run `main` in process, the first case of each also
as the program (test_reliability.both_ways)."""

import json
import os
import signal
import time
from fractions import Fraction
from pathlib import Path

import pytest

import synth.output
from synth.cli import main
from synth.output import _remove_stale
from synth.output_folder import MANIFEST, MARKER, fingerprint, output_dir, record
from synth.schedule.collectives import make_collective
from synth.search import cache
from synth.search.instance import solve_instance
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower
from tests.in_process import synth_main
from tests.test_reliability import SMALL, both_ways, one_line, synth_cli, write_topology



# --- the output folder -------------------------------------------------------------

def test_two_topologies_whose_names_look_alike_never_share_a_folder(tmp_path):
    lookalike = write_topology(tmp_path / "t.yaml", 'name: "ring_4"\n' + SMALL)
    first = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path / "o"),
                       "--json")
    second = synth_main("allgather", "--topo", lookalike, "--out", str(tmp_path / "o"),
                        "--json")
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    ring = {Path(p["file"]) for p in json.loads(first.stdout)["frontier"]}
    other = {Path(p["file"]) for p in json.loads(second.stdout)["frontier"]}
    assert all(p.exists() for p in ring | other)  # the second run removed nothing
    assert {p.parent.parent for p in ring}.isdisjoint({p.parent.parent for p in other})
    marker = (tmp_path / "o" / "ring_4" / MARKER).read_text()
    assert marker == f"ring:4\n{fingerprint(resolve('ring:4'))}\n"
    assert synth_main("verify", *map(str, ring | other)).returncode == 0


def test_a_file_synth_did_not_write_is_never_removed_whatever_its_name(tmp_path):
    # a user's own schedule (or any file) named as synth names its files, in the folder
    # a run writes: it was removed as an earlier run's
    folder = tmp_path / "o" / "ring_4" / "allgather"
    first = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path / "o"),
                       "--json")
    assert first.returncode == 0, first.stderr
    mine = folder / "allgather-s3-r3-c1.json"
    assert not mine.exists()
    mine.write_text("precious")
    assert synth_main("allgather", "--topo", "ring:4", "--out",
                      str(tmp_path / "o")).returncode == 0
    assert mine.read_text() == "precious"
    # a file synth wrote and the user then edited stays too; one left as written goes
    written = [Path(p["file"]) for p in json.loads(first.stdout)["frontier"]]
    edited, untouched = written[0], folder / "allgather-s5-r5-c1.json"
    edited.write_text(edited.read_text() + " ")
    untouched.write_text(written[-1].read_text())
    record(folder, [untouched])  # as an earlier run of synth's leaves it
    again = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path / "o"),
                       "--max-steps", "6")
    assert again.returncode == 0, again.stderr
    assert mine.read_text() == "precious" and edited.exists()
    assert not untouched.exists()


def test_a_users_file_at_a_name_a_run_writes_is_kept_aside(tmp_path):
    # an edited schedule at a name the next run writes again was written over, unsaid
    out = tmp_path / "o"
    args = ("allgather", "--topo", "ring:6", "--out", str(out), "--max-chunks", "3",
            "--time-limit", "30")
    first = synth_main(*args, "--json")
    assert first.returncode == 0, first.stderr
    edited = Path(json.loads(first.stdout)["frontier"][0]["file"])
    edited.write_text('{"my hand-tuned": true}')
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    kept = edited.with_name(edited.name + ".kept")
    assert kept.read_text() == '{"my hand-tuned": true}'
    assert f"synth: note: {edited} was not synth's as it wrote it" in again.stderr
    assert synth_main("verify", str(edited)).returncode == 0  # this run's, in its place
    # a stale file of synth's that the user only made read-only is theirs now too
    stale = edited.with_name("allgather-s4-r9-c1.json")
    stale.write_text(edited.read_text())
    record(edited.parent, [stale])
    stale.chmod(0o444)
    assert synth_main(*args).returncode == 0 and stale.exists()


def test_a_folder_whose_marker_went_is_not_taken_by_a_namesake(tmp_path):
    # two machines named box; the first's marker removed: the second took its folder
    # over and wrote over its schedules
    for sub in "ab":
        (tmp_path / sub).mkdir()
    a = write_topology(tmp_path / "a" / "box.yaml", SMALL)
    b = write_topology(tmp_path / "b" / "box.yaml", SMALL.replace("25", "50"))
    out = str(tmp_path / "o")
    first = synth_main("allgather", "--topo", a, "--out", out, "--json")
    assert first.returncode == 0, first.stderr
    theirs = {Path(p["file"]): Path(p["file"]).read_bytes()
              for p in json.loads(first.stdout)["frontier"]}
    (tmp_path / "o" / "box" / MARKER).unlink()
    for _ in range(2):  # and again, into the folder it took the first time
        second = synth_main("allgather", "--topo", b, "--out", out, "--json")
        assert second.returncode == 0, second.stderr
        assert all(Path(p["file"]).parent.parent.name.startswith("box-")
                   for p in json.loads(second.stdout)["frontier"])
    assert all(path.read_bytes() == data for path, data in theirs.items())


def test_two_machines_of_one_name_never_share_a_folder(tmp_path):
    # two files named box.yaml (one name, box), different machines: the second run
    # removed the first's schedules, and a file named dgxh100 wrote into the built-in's
    for sub in "ab":
        (tmp_path / sub).mkdir()
    a = write_topology(tmp_path / "a" / "box.yaml", SMALL)
    b = write_topology(tmp_path / "b" / "box.yaml", SMALL.replace("25", "50"))
    runs = [synth_main("allgather", "--topo", t, "--out", str(tmp_path / "o"), "--json")
            for t in (a, b)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    files = [{Path(p["file"]) for p in json.loads(r.stdout)["frontier"]} for r in runs]
    assert all(p.exists() for p in files[0] | files[1])
    assert {p.parent.parent for p in files[0]}.isdisjoint({p.parent.parent for p in files[1]})
    assert synth_main("verify", *map(str, files[0] | files[1])).returncode == 0


def test_a_link_in_the_output_folder_is_replaced_not_followed(tmp_path):
    first = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    target = Path(json.loads(first.stdout)["frontier"][0]["file"])
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target.unlink()
    target.symlink_to(victim)
    again = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and synth_main("verify", str(target)).returncode == 0


def test_files_written_after_a_run_started_are_another_runs_and_stay(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    old, new = folder / "allgather-s2-r3-c1.json", folder / "allgather-s3-r3-c1.json"
    old.write_text("{}")
    os.utime(old, ns=(time.time_ns() - 10**10,) * 2)  # ten seconds before
    started = time.time_ns() - 10**9
    new.write_text("{}")  # written by a run going on beside this one
    odd = folder / "allgather-s02-r3-c1.json"  # not a name synth writes
    odd.write_text("{}")
    record(folder, [old, new, odd])  # as if synth wrote all three
    _remove_stale(folder, "allgather", (1, 10), set(), {".json"}, started)
    assert not old.exists() and new.exists() and odd.exists()


def test_a_run_in_one_format_leaves_another_formats_files(tmp_path):
    # a frontier written as JSON, then the same run in MSCCL XML: the XML run removed
    # the earlier JSON files of the very points it wrote again, where docs/cli.md says
    # only files of points no longer on the frontier go
    out = tmp_path / "out"
    args = ["allgather", "--topo", "ring:4", "--time-limit", "30", "--out", str(out),
            "--no-progress"]
    assert synth_main(*args).returncode == 0
    jsons = sorted(p.name for p in out.rglob("*.json"))
    assert jsons
    assert synth_main(*args, "--format", "msccl-xml").returncode == 0
    assert sorted(p.name for p in out.rglob("*.json")) == jsons
    assert sorted(p.name for p in out.rglob("*.xml"))


def test_an_out_under_a_file_is_refused_before_any_work(tmp_path, monkeypatch):
    # `-o afile/sub`: a plan of minutes, a synthesis, a report failed only at their end
    import synth.frontier
    import synth.plan.make

    def no_work(*args, **kwargs):
        raise AssertionError("the work began before the folder was checked")

    monkeypatch.setattr(synth.plan.make, "make_plan", no_work)
    monkeypatch.setattr(synth.frontier, "synthesize", no_work)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    workload = tmp_path / "w.yaml"
    workload.write_text("communicators: {tp: {per: box}}\n"
                        "collectives: [{communicator: tp, collective: allgather, "
                        "size: 1MB}]\n")
    for args in (["plan", workload, "--topo", "ring:4", "-o", afile / "sub"],
                 ["plan", workload, "--topo", "ring:4", "-o", afile],
                 ["allgather", "--topo", "ring:4", "-o", afile / "sub"],
                 ["report", "allgather", "--topo", "ring:4", "-o", afile / "x" / "y"]):
        said = one_line(synth_main(*args), 2)
        assert f"{afile}': exists and is not a folder" in said, said
    assert afile.read_text() == "mine"


def test_an_empty_out_is_refused():
    one_line(synth_main("allgather", "--topo", "ring:4", "--out", ""), 2)
    with pytest.raises(Exception, match="empty"):
        output_dir("", resolve("ring:4"), "allgather")


# --- a plan's folder (synth plan -o DIR, synth report -o DIR) -----------------------

WORKLOAD = ("communicators:\n  tp: {per: box}\ncollectives:\n"
            "  - {communicator: tp, collective: allgather, size: 1MB}\n")


def plan_into(tmp_path, out, *extra, run=synth_main):
    workload = tmp_path / "w.yaml"
    if not workload.exists():
        workload.write_text(WORKLOAD)
    return run("plan", str(workload), "--topo", "ring:4", "-o", str(out),
               "--time-limit", "10", *extra)


def test_a_plan_json_synth_did_not_write_removes_nothing(tmp_path):
    out = tmp_path / "project"
    (out / "src").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    (out / "src" / "main.py").write_text("print('mine')")
    (out / "plan.json").write_text(json.dumps({"files": ["notes.txt", "src/main.py"]}))
    assert plan_into(tmp_path, out).returncode == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "src" / "main.py").read_text() == "print('mine')"
    # synth's own format, listing a user's files: only names a plan writes are removed
    doc = json.loads((out / "plan.json").read_text())
    doc["files"] += ["notes.txt", "src/main.py", "msccl/notes.txt"]
    (out / "plan.json").write_text(json.dumps(doc))
    (out / "msccl" / "notes.txt").write_text("mine too")
    assert plan_into(tmp_path, out).returncode == 0
    assert (out / "notes.txt").exists() and (out / "src" / "main.py").exists()
    assert (out / "msccl" / "notes.txt").read_text() == "mine too"


def test_an_earlier_plans_file_changed_since_is_kept_and_said(tmp_path):
    # a plan of allgather and reducescatter, then one of allgather alone: the
    # reducescatter files go, but not one the user edited in between
    out, workload = tmp_path / "plan", tmp_path / "w.yaml"
    workload.write_text(WORKLOAD + "  - {communicator: tp, collective: reducescatter, "
                                   "size: 1MB}\n")
    assert plan_into(tmp_path, out).returncode == 0
    gone = sorted(str(p.relative_to(out)) for p in out.rglob("reducescatter*")
                  if p.is_file())
    assert len(gone) >= 2, gone
    edited = out / gone[0]
    mine = edited.read_text() + "\n"
    edited.write_text(mine)
    workload.write_text(WORKLOAD)
    again = plan_into(tmp_path, out)
    assert again.returncode == 0, again.stderr
    assert all(not (out / g).exists() for g in gone)
    # moved out of the runtime's folder, which loads every file there (it was left in
    # place, and MSCCL would have run it)
    aside = out / "kept" / f"{gone[0]}.kept" if gone[0].startswith("msccl") \
        else edited.with_name(f"{edited.name}.kept")
    assert aside.read_text() == mine
    assert (f"synth: note: moved 1 file an earlier plan wrote and this one does not aside "
            f"({edited} to {aside}...): changed since") in again.stderr


def test_a_users_runtime_file_is_kept_out_of_the_runtimes_folder(tmp_path):
    # a trial's: an edited file at a name the plan writes was kept beside it, as
    # msccl/tp/NAME.xml.kept, in the folder MSCCL loads every file of
    out, workload = tmp_path / "plan", tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    first = plan_into(tmp_path, out)
    assert first.returncode == 0 and "workload on ring:4: 1 collective planned" in first.stdout
    xml = sorted((out / "msccl").rglob("*.xml"))[0]
    xml.write_text(xml.read_text() + "<!-- mine -->\n")
    again = plan_into(tmp_path, out)
    assert again.returncode == 0, again.stderr
    aside = out / "kept" / xml.relative_to(out).parent / f"{xml.name}.kept"
    assert aside.read_text().endswith("<!-- mine -->\n")
    assert f"kept as {aside}" in again.stderr
    assert not [p for p in (out / "msccl").rglob("*") if p.name.endswith(".kept")]


def test_a_plan_folder_copied_without_its_dotfiles_keeps_the_users_edits(tmp_path):
    # `cp -r plan/* copy/` leaves the manifest behind: an edited file of an earlier
    # plan's was removed as a folder of before the manifest's. With no list, an edit
    # and synth's own file look alike (a copy resets both times): none is removed, and
    # a file at a name the plan writes is written over only where it holds those bytes
    import shutil

    out, workload = tmp_path / "plan", tmp_path / "w.yaml"
    workload.write_text(WORKLOAD + "  - {communicator: tp, collective: reducescatter, "
                                   "size: 1MB}\n")
    assert plan_into(tmp_path, out).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=lambda d, names: [n for n in names if n[0] == "."])
    assert not (copy / MANIFEST).exists()
    stale = sorted(p for p in copy.rglob("reducescatter*") if p.is_file())
    assert len(stale) >= 2
    same = {p: p.read_bytes() for p in copy.rglob("allgather*") if p.is_file()}
    assert same
    stale[0].write_text(stale[0].read_text() + "\n")
    workload.write_text(WORKLOAD)
    again = plan_into(tmp_path, copy)
    assert again.returncode == 0, again.stderr
    assert f"synth: note: moved {len(stale)} files an earlier plan wrote" in again.stderr
    for p in stale:  # none lost, none left where a runtime loads it
        rel = p.relative_to(copy)
        aside = copy / "kept" / f"{rel}.kept" if rel.parts[0] in ("msccl", "mscclpp") \
            else p.with_name(f"{p.name}.kept")
        assert not p.exists() and aside.exists()
    assert not [p for p in (copy / "msccl").rglob("*") if p.name.endswith(".kept")]
    # the allgather's files hold what this plan writes: written over, none kept aside
    assert all(p.read_bytes() == data for p, data in same.items())
    assert not any(p.name.startswith("allgather") for p in copy.rglob("*.kept"))
    # plan.json lists other files now: the earlier one, not known to be synth's, aside
    assert "plan.json was not synth's as it wrote it" in again.stderr
    assert json.loads((copy / "plan.json.kept").read_text())["format"] == "synth.plan"
    # a user's file at a name the plan writes is moved aside, not written over
    (copy / "report.md").write_text("my notes")
    again = plan_into(tmp_path, copy)
    assert (copy / "report.md.kept-2").read_text() == "my notes"  # .kept: the earlier's
    assert "report.md was not synth's as it wrote it" in again.stderr


def test_a_linked_folder_in_a_plan_is_refused_and_nothing_is_written(tmp_path):
    out, elsewhere = tmp_path / "plan", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "schedules").symlink_to(elsewhere)
    assert "symbolic link" in one_line(plan_into(tmp_path, out), 2)
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == \
        ["schedules"]


def test_a_linked_report_in_a_plan_is_replaced_not_followed(tmp_path):
    out, victim = tmp_path / "plan", tmp_path / "victim.md"
    out.mkdir()
    victim.write_text("keep me")
    (out / "report.md").symlink_to(victim)
    assert plan_into(tmp_path, out).returncode == 0
    assert victim.read_text() == "keep me"
    assert not (out / "report.md").is_symlink() and "allgather" in \
        (out / "report.md").read_text()


def test_a_plan_on_a_full_disk_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    import errno

    import synth.files
    from synth.errors import BadInput
    from synth.plan.output import write_files

    out = tmp_path / "plan"
    (out / "msccl").mkdir(parents=True)
    old = {"plan.json": json.dumps({"format": "synth.plan", "files": ["msccl/a.xml"]}),
           "msccl/a.xml": "<algo/>", "report.md": "old report"}
    for name, text in old.items():
        (out / name).write_text(text)
    real_chmod, calls = os.chmod, []

    def chmod_then_full(path, mode):  # the third file's data does not fit
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_chmod(path, mode)

    monkeypatch.setattr(synth.files.os, "chmod", chmod_then_full)
    new = {Path("report.md"): "new", Path("schedules/tp/a.json"): "{}",
           Path("msccl/tp/b.xml"): "<algo/>", Path("plan.json"): "{}"}
    with pytest.raises(BadInput, match="no space left.*as it was"):
        write_files(out, new, [str(p) for p in new])
    monkeypatch.undo()
    now = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert now == old  # no temporary, no new file, the old plan whole
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == \
        ["msccl", "msccl/a.xml", "plan.json", "report.md"]  # no folder left behind


def test_a_linked_page_in_a_report_folder_is_replaced_not_followed(tmp_path):
    out, victim = tmp_path / "report", tmp_path / "victim.html"
    out.mkdir()
    victim.write_text("keep me")
    (out / "index.html").symlink_to(victim)
    run = synth_main("report", "allgather", "--topo", "ring:4", "-o", str(out),
                     "--time-limit", "10")
    assert run.returncode == 0, run.stderr
    assert victim.read_text() == "keep me" and not (out / "index.html").is_symlink()
    assert "<html" in (out / "index.html").read_text()


def test_a_communicator_whose_gpus_share_no_path_is_one_line(tmp_path):
    # dgx1's GPUs 0 and 5 share no NVLink; the other GPUs are outside the communicator
    workload = tmp_path / "pair.yaml"
    workload.write_text("communicators:\n  pair: {ranks: [[0, 5]]}\ncollectives:\n"
                        "  - {communicator: pair, collective: allgather, size: 1MB}\n")
    refused = synth_main("plan", str(workload), "--topo", "dgx1", "-o", str(tmp_path / "p"))
    assert "GPU 0 cannot reach GPU 5" in one_line(refused, 2)
    # a profiler trace's process group [0, 9] on dgxh100x2: two rails, no GPU between
    trace = Path(__file__).parent / "fixtures" / "trace-group-0-9.json"
    refused = synth_main("plan", str(trace), "--topo", "dgxh100x2", "-o", str(tmp_path / "q"))
    assert "GPU 0 cannot reach GPU 9" in one_line(refused, 2)
    assert not (tmp_path / "p").exists() and not (tmp_path / "q").exists()


def test_a_log_tagged_by_mpirun_is_read_as_a_log(tmp_path):
    from synth.plan.reading import load_workload

    plain = Path(__file__).parent.parent / "examples" / "nccl-debug-dgxh100x2.log"
    tagged = tmp_path / "tagged.log"  # mpirun --tag-output: "[1,R]<stdout>:" a line
    ranks: dict = {}  # each process (HOST:PID) its rank R, in order of its first line
    lines = plain.read_text().splitlines(keepends=True)
    for line in lines:
        ranks.setdefault(":".join(line.split(":")[:2]), len(ranks))
    tagged.write_text("".join(f"[1,{ranks[':'.join(line.split(':')[:2])]}]<stdout>:{line}"
                              for line in lines))
    assert len(ranks) > 1
    topo = resolve("dgxh100x2")
    want, got = load_workload(str(plain), topo), load_workload(str(tagged), topo)
    assert got.calls == want.calls and got.communicators == want.communicators


@pytest.mark.parametrize("kind", ["yaml-comment", "one-line-json"])
def test_a_long_line_of_colons_is_sniffed_in_linear_time(kind, tmp_path):
    # the log sniffing pattern once backtracked on these: 40 KB took 38 s, 1 MB hours
    path = tmp_path / "w.yaml"
    if kind == "yaml-comment":
        path.write_text("# " + "1:" * 50_000 + "\n" + WORKLOAD)
        # as the program: a regression would hang, and the subprocess's timeout ends it
        assert plan_into(tmp_path, tmp_path / "p", "--format", "none",
                         run=synth_cli).returncode == 0
        return
    path.write_text('{"x": "' + "1:" * 500_000 + ' NCCL INFO "}')
    refused = synth_cli("plan", str(path), "--topo", "ring:4", "-o", str(tmp_path / "p"))
    assert "unknown key 'x'" in one_line(refused, 2)


def test_a_run_too_large_for_memory_is_refused_before_any_process_starts(tmp_path):
    made = synth_main("allgather", "--topo", "ring:4", "--out", str(tmp_path), "--json")
    path = json.loads(made.stdout)["frontier"][0]["file"]
    refused = synth_main("run", path, "--size", "1024GB")
    assert "gloo processes would hold" in one_line(refused, 2)


@pytest.mark.parametrize("text, key, line", [
    ("name: a\nname: b\ngpus: 2\nlinks:\n  - {between: [gpu0, gpu1], gbps: 25}\n",
     "name", 2),
    ("gpus: 2\nlinks:\n  - {between: [gpu0, gpu1], gbps: 25, gbps: 50}\n", "gbps", 3)])
def test_a_key_given_twice_in_a_topology_is_refused(text, key, line, tmp_path):
    path = write_topology(tmp_path / "dup.yaml", text)
    said = one_line(both_ways(key == "name", "topo", "show", path), 2)
    assert f"line {line}: the key '{key}' is given twice" in said


def test_exports_past_the_plans_deadline_are_left_to_nccl_and_listed(monkeypatch):
    import synth.plan.output
    from synth.construct.paced import WRITE
    from synth.plan.output import render_plan
    from synth.plan.make import make_plan
    from synth.plan.workload import parse_workload
    from synth.files import parse_yaml
    from synth.search.pareto import Limits

    monkeypatch.setattr(synth.plan.output, "_RENDERED", type(synth.plan.output._RENDERED)())
    topo = resolve("ring:4")
    plan = make_plan(parse_workload(parse_yaml(WORKLOAD), topo), topo, Limits(time_limit=10))
    labels = [c.label for c in plan.entries[0].candidates]

    def left_to_nccl(texts, doc):
        entry = doc["runtimes"]["msccl-xml"][0]
        return entry["not_exported"] == labels and labels and not any(
            str(p).startswith("msccl/") for p in texts) and all(
            f["file"] is None and f["algorithm"].startswith("NCCL's own")
            for f in entry["files"])

    # past the deadline: nothing is exported
    assert left_to_nccl(*render_plan(plan, ("msccl-xml",), deadline=time.monotonic() - 1))
    # before it, but each export would take longer than what is left (at the pace
    # measured: dgxh100x2's plan ran 71 s at --time-limit 60 when an export of 16 GPUs
    # started just before its deadline): none starts
    WRITE["msccl-xml"].record(1000, 1e9)
    assert left_to_nccl(*render_plan(plan, ("msccl-xml",), deadline=time.monotonic() + 100))
    WRITE["msccl-xml"].per_unit = WRITE["msccl-xml"].prior
    _, on_time = render_plan(plan, ("msccl-xml",))
    assert on_time["runtimes"]["msccl-xml"][0]["not_exported"] == []
    assert any(f["file"] for f in on_time["runtimes"]["msccl-xml"][0]["files"])
    # what is rendered already costs nothing: past the deadline it is still written
    _, again = render_plan(plan, ("msccl-xml",), deadline=time.monotonic() - 1)
    assert again["runtimes"]["msccl-xml"] == on_time["runtimes"]["msccl-xml"]


# --- the solver cache --------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dangling", "folder"])
def test_an_odd_file_for_the_cache_secret_never_hangs_or_fails_a_run(kind, tmp_path):
    folder = cache.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / ".secret"
    if kind == "fifo":
        os.mkfifo(secret)  # reading it would block for ever
    elif kind == "dev-zero":
        secret.symlink_to("/dev/zero")  # reading it would never end
    elif kind == "dangling":
        secret.symlink_to(folder / "nowhere")
    else:
        secret.mkdir()
    for _ in range(2):  # in a child, so that a regression hangs no longer than a minute
        run = synth_cli("allgather", "--topo", "ring:4", "--steps", "2", "--rounds", "2",
                        "--chunks", "1", "--out", str(tmp_path), timeout=60,
                        env={"SYNTH_CACHE_DIR": str(folder)})
        assert run.returncode == 0, run.stderr
    out = solve_instance(lower(resolve("ring:4")), make_collective("allgather", 4), 2, 2)
    # a file synth can replace is replaced by a real secret; a folder is left alone
    # and the cache is off
    assert secret.is_dir() if kind == "folder" else \
        (secret.is_file() and not secret.is_symlink() and out.schedule.info.get("cached"))


def test_a_cache_entry_that_is_a_link_is_not_read_or_written_through(tmp_path):
    model, coll = lower(resolve("ring:4")), make_collective("allgather", 4)
    solve_instance(model, coll, 2, 2)
    (entry,) = cache.cache_dir().glob("*.json")
    planted = tmp_path / "planted.json"
    planted.write_text(entry.read_text())  # a valid entry, kept elsewhere
    entry.unlink()
    entry.symlink_to(planted)
    out = solve_instance(model, coll, 2, 2)
    assert "cached" not in out.schedule.info  # not answered from the link
    assert not entry.is_symlink() and planted.read_text() != ""


# --- numbers -----------------------------------------------------------------------

@pytest.mark.parametrize("value, gbps", [("010", "10"), ("1_000", None), ("0x19", "25"),
                                        ("0o31", "25"), ("0x" + "f" * 400, None)])
def test_yaml_1_2_integers(tmp_path, value, gbps):
    """YAML 1.2: 010 is ten (not octal eight), 1_000 is a string; huge hex is refused
    in one short line."""
    path = write_topology(tmp_path / "t.yaml", SMALL.replace("gbps: 25", f"gbps: {value}"))
    result = both_ways(value == "010", "topo", "show", path, "--json")
    if gbps is None:
        one_line(result, 2)
    else:
        assert result.returncode == 0, result.stderr
        assert {link["gbps"] for link in json.loads(result.stdout)["links"]} == {int(gbps)}


@pytest.mark.parametrize("name", ["gpu\x1b[31m", "gpu\n1", "nv\x00"])
def test_control_characters_in_names_are_refused(tmp_path, name):
    text = f"gpus: [gpu0, {json.dumps(name)}]\nlinks:\n" \
           f"  - {{between: [gpu0, {json.dumps(name)}], gbps: 25}}\n"
    err = one_line(both_ways(name == "nv\x00", "topo", "show",
                             write_topology(tmp_path / "t.yaml", text)), 2)
    assert "\x1b" not in err


@pytest.mark.parametrize("text", ["gpus: 1\nlinks: []\n", "gpus: [a]\nlinks: []\n"])
@pytest.mark.parametrize("command", [["broadcast"], ["allgather"], ["alltoall"],
                                     ["bounds", "reduce"]])
def test_a_topology_of_one_gpu_is_refused_in_one_line(tmp_path, text, command):
    # found by the third hostile pass: it reached the bounds and raised a TypeError
    topo = write_topology(tmp_path / "one.yaml", text)
    first = command == ["broadcast"] and text.startswith("gpus: 1")
    err = one_line(both_ways(first, *command, "--topo", topo, "--out", str(tmp_path / "o"))
                   if command[0] != "bounds" else both_ways(first, *command, "--topo", topo),
                   2)
    assert "between 2 and 4096 GPUs" in err


@pytest.mark.parametrize("mutate", [
    lambda d: d["steps"][0].__setitem__("rounds", 10 ** 400),
    lambda d: d["steps"][0].__setitem__("rounds", 10 ** 12),
    lambda d: d.__setitem__("synthesis", None),
    lambda d: d.__setitem__("synthesis", [1]),
], ids=["rounds-1e400", "rounds-1e12", "synthesis-null", "synthesis-list"])
def test_the_reader_and_the_verifier_agree_on_every_file(tmp_path, schedule_file, mutate):
    doc = json.loads(schedule_file.read_text())
    mutate(doc)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    first = doc.get("synthesis") is None
    verify = both_ways(first, "verify", str(path))
    export = both_ways(first, "export", str(path), "--to", "json", "-o",
                       str(tmp_path / "x.json"))
    assert "Traceback" not in verify.stderr + export.stderr
    # a file the verifier passes, every other command reads, and the other way round
    assert (verify.returncode == 0) == (export.returncode == 0), (verify, export)


# --- the command line --------------------------------------------------------------

def test_export_to_standard_output(schedule_file):
    result = synth_main("export", str(schedule_file), "--to", "msccl-xml", "-o", "-")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("<!-- synth: allgather")  # the file alone
    assert result.stdout.endswith("</algo>\n") and "wrote standard output" in result.stderr


def test_verify_of_a_folder_is_one_line_per_file(tmp_path, schedule_file):
    result = synth_main("verify", str(tmp_path), str(schedule_file))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "folder" in result.stderr
    assert "OK" in result.stdout or "ok" in result.stdout.lower()


# --- inputs built to make one step take forever ------------------------------------

def test_a_long_chain_of_switches_is_refused_before_routing(tmp_path):
    chain = 200
    switches = "".join(f"  - {{name: s{i}, kind: net_switch}}\n" for i in range(chain))
    links = "".join(f"  - {{between: [s{i}, s{i + 1}], gbps: 25}}\n"
                    for i in range(chain - 1))
    text = (f"gpus: 2\nswitches:\n{switches}links:\n  - {{between: [gpu0, s0], gbps: 25}}\n"
            f"  - {{between: [gpu1, s{chain - 1}], gbps: 25}}\n{links}")
    # as the program: synth_cli's timeout ends a routing that never does
    err = one_line(synth_cli("allgather", "--topo", write_topology(tmp_path / "t.yaml", text),
                             "--out", str(tmp_path)), 2)
    assert "deep" in err


def test_one_instance_too_large_to_encode_is_refused_by_arithmetic(tmp_path):
    # as the program: synth_cli's timeout ends an encoding that never does
    err = one_line(synth_cli("allgather", "--topo", "fc:64", "--steps", "64", "--rounds",
                             "64", "--chunks", "64", "--out", str(tmp_path)), 1)
    assert "too large" in err


def test_a_name_in_a_script_the_font_lacks_is_drawn_without_warnings(tmp_path):
    path = write_topology(tmp_path / "t.yaml", 'name: "集群"\n' + SMALL)
    # as the program: in process, pytest captures Python warnings and each is printed
    # once a process, so stderr would be empty whatever the drawing warned
    result = synth_cli("allgather", "--topo", path, "--out", str(tmp_path), "--plots")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert len(list(tmp_path.rglob("allgather-*.png"))) == 2


def test_encoding_stops_at_the_time_limit_and_says_undecided():
    from synth.search.encoding import Instance, encode

    model = lower(resolve("fc:16"))
    coll = make_collective("allgather", 16, 4)
    with pytest.raises(TimeoutError):
        encode(Instance(model, coll, 6, 12), deadline=time.monotonic())
    out = solve_instance(model, coll, 6, 12, time_limit=1e-6)
    assert out.status == "unknown" and out.schedule is None


def test_ctrl_c_while_the_files_are_written_waits_for_them(tmp_path, monkeypatch, capsys):
    # imported first, synth.anytime keeps the real write_points for its early files: a
    # first import under the patch bound every later job of this process to Ctrl-C
    import synth.anytime  # noqa: F401

    write_points = synth.output.write_points

    def interrupted_midway(points, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # a second Ctrl-C, as the files are written
        return write_points(points, *args, **kwargs)

    monkeypatch.setattr(synth.output, "write_points", interrupted_midway)
    # what this process had (a job started in the background by a shell ignores SIGINT)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as stop:
        main(["allgather", "--topo", "ring:4", "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    files = [Path(p["file"]) for p in json.loads(captured.out)["frontier"]]
    kept = f"{len(files)} point{'s' * (len(files) != 1)} kept"
    assert stop.value.code == 130 and f"interrupted ({kept})" in captured.err
    assert files and synth_main("verify", *map(str, files)).returncode == 0
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back


def test_a_root_of_200_digits_is_described_not_printed():
    err = one_line(synth_main("broadcast", "--topo", "dgx1", "--root", "9" * 200), 2)
    assert "9" * 30 not in err and "is not a rank" in err


# --- the paths added last: degraded machines, fabrics, calibrate, costs (issue 31) ---

def test_an_edit_of_every_box_costs_its_links_not_boxes_squared(monkeypatch):
    """`--degrade gpu0-nic0=F` names that link in every box: it paired every box's gpu0
    with every box's nic0 (half a second an edit on 512 boxes, so 1024 edits ran for
    minutes past any --time-limit) and copied each link once per edit. Counted, not
    timed."""
    import synth.topology.degrade as degrade

    named, copies = [], []
    real_named, real_replace = degrade._named, degrade.replace
    monkeypatch.setattr(degrade, "_named", lambda *a: named.append(1) or real_named(*a))
    monkeypatch.setattr(degrade, "replace",
                        lambda *a, **k: copies.append(1) or real_replace(*a, **k))
    healthy = resolve("dgxh100x16")
    machine = degrade.degraded(healthy, ["gpu0-nic0=0.5"] * 4)
    assert len(named) <= 4 * 4  # a few names looked up an edit, not one per box
    assert len(copies) <= 2 * 16 + 1  # each narrowed link made once, then the machine
    was = {(l.src, l.dst): l.gbps for l in healthy.links}
    now = {(l.src, l.dst): l.gbps for l in machine.links}
    for b in range(16):
        for key in ((f"n{b}.gpu0", f"n{b}.nic0"), (f"n{b}.nic0", f"n{b}.gpu0")):
            assert now[key] == was[key] / 16
    assert sum(now[k] != was[k] for k in was) == 32


@pytest.mark.parametrize("over", ["1.000001", "3.333333", "999.999999"])
def test_a_fabrics_name_keeps_every_digit_of_its_oversubscription(over):
    # over=1.000001 was named over=1: resolved again (verify derives a file's machine
    # from its name) it was another machine, and synth's own files failed verify
    machine = resolve(f"dgxh100x4:clos,leaf=1,pod=4,over={over}")
    assert machine.name == f"dgxh100x4:clos,leaf=1,pod=4,over={over}"
    assert resolve(machine.name).links == machine.links
    err = one_line(synth_main("topo", "show", "dgxh100x4:clos,over=1000.0001"), 2)
    assert "over=1000.0001:" in err


@pytest.mark.parametrize("fraction", ["+0.5", " 0.5", "0.5_0", "٠.5"])
def test_a_fraction_spelt_as_no_name_resolves_is_refused(fraction):
    # float() takes these, and the machine was named after the text as given
    # (dgxh100-with-gpu0-nic0-at-+0.5): a name that resolves to nothing, so verify
    # could not derive the machine of synth's own files for it
    err = one_line(both_ways(fraction == "+0.5", "topo", "show", "dgxh100", "--degrade",
                             f"gpu0-nic0={fraction}"), 2)
    assert "expected a fraction" in err
    machine = resolve("dgxh100", edits=("gpu0-nic0=5e-1",))
    assert resolve(machine.name).links == machine.links


@pytest.mark.parametrize("old, new", [("86.80", "nan"), ("86.80", "inf"),
                                      ("86.80", "1e-308"), ("86.80", "1e308"),
                                      ("           8 ", "99999999999999999999 ")])
def test_a_log_row_no_call_could_take_is_one_line_and_writes_nothing(old, new, tmp_path):
    # nan and inf passed the `time <= 0` test and failed the fit (exit 3, one with
    # scipy's warning as two more lines); 1e308 us and a size of 10^20 B were fitted
    from tests.test_calibrate import log_text

    log, out = tmp_path / "ar.log", tmp_path / "fitted.yaml"
    text = log_text("allreduce")
    assert old in text
    log.write_text(text.replace(old, new, 1))
    err = one_line(both_ways(new == "nan", "calibrate", str(log), "--topo", "dgxa100",
                             "-o", str(out)), 2)
    assert "line 17: expected a size from 1 B to 1 PB and a time" in err
    assert not out.exists()


@pytest.mark.parametrize("key", ["call_us", "nvlink"])
def test_a_figure_of_400_digits_is_one_line(key, tmp_path):
    # math.isfinite(10**400) raises OverflowError: exit 3, "a bug in synth"
    path = write_topology(tmp_path / "t.yaml", SMALL + f"costs: {{{key}: 1{'0' * 400}}}\n")
    err = one_line(both_ways(key == "call_us", "topo", "show", path), 2)
    assert f"costs.{key}: expected a number" in err


def test_an_oversubscription_of_400_digits_is_one_line(tmp_path):
    # as costs: above, in checked(): OverflowError, exit 3
    path = write_topology(tmp_path / "t.yaml", SMALL.replace("gpus: 2", "gpus: 2\nnics: [nic0]")
                          + "  - {between: [gpu0, nic0], gbps: 25}\nnetwork: {fabric: clos, "
                          f"gbps: 50, alpha_us: 2, over: 1{'0' * 400}}}\n")
    err = one_line(synth_main("topo", "show", path), 2)
    assert "network.over: expected an oversubscription" in err


@pytest.fixture
def late(monkeypatch):
    """A clock the test moves: every deadline has passed once late["now"] is set, so a
    test says at which point a limit ran out, whatever the machine's speed."""
    from synth.deadline import Deadline

    state = {"now": False}
    affords = Deadline.affords
    monkeypatch.setattr(Deadline, "passed", lambda self: state["now"] or False)
    monkeypatch.setattr(Deadline, "affords",
                        lambda self, seconds: not state["now"] and affords(self, seconds))
    return state


def _after(monkeypatch, module, name, state):
    real = getattr(module, name)

    def then_late(*args, **kwargs):
        out = real(*args, **kwargs)
        state["now"] = True
        return out

    monkeypatch.setattr(module, name, then_late)


def test_topo_show_looks_at_the_limit_while_it_lists_a_large_machine(monkeypatch, late):
    # on 1024 GPUs the lists of routes, rank links and groups, the boxes and the
    # diameter's graph took two or three seconds past --time-limit before a check
    import synth.topology.report as report

    _after(monkeypatch, report, "lower_with_routes", late)
    err = one_line(synth_main("topo", "show", "dgxh100x2", "--time-limit", "100"), 1)
    assert "ran out while describing dgxh100x2 (16 GPUs)" in err


def test_topo_show_json_looks_at_the_limit_while_it_writes(monkeypatch, late):
    # json.dumps of a 1024-GPU machine's 29 MB took two seconds past the limit
    import synth.topology.report as report

    _after(monkeypatch, report, "topology_summary", late)
    result = synth_main("topo", "show", "dgxh100x2", "--json", "--time-limit", "100")
    assert "ran out while writing dgxh100x2 as JSON" in one_line(result, 1)
    assert result.stdout == ""


def test_finding_the_boxes_stops_at_the_limit(late):
    from synth.deadline import Deadline
    from synth.topology.hierarchy import find_boxes
    from synth.topology.linkmodel import TimeLimit, diameter

    model = lower(resolve("dgxh100x2"))
    assert len(find_boxes(model)[0]) == 2
    late["now"] = True
    assert find_boxes(model, Deadline()) == ([], "out of time finding the boxes")
    with pytest.raises(TimeLimit, match="diameter"):
        diameter(model, Deadline())


def test_a_calibrated_file_keeps_a_link_narrowed_twice(tmp_path):
    # degrade: is a mapping: the second 0.5 overwrote the first, and the file was
    # another machine than the one measured (gpu0's link at half, not a quarter)
    from tests.test_calibrate import log_text

    log, out = tmp_path / "ar.log", tmp_path / "fitted.yaml"
    log.write_text(log_text("allreduce"))
    edits = "gpu0-nvswitch=0.5,gpu0-nvswitch=0.5"
    done = synth_main("calibrate", str(log), "--topo", "dgxa100", "--degrade", edits,
                      "-o", str(out))
    assert done.returncode == 0, done.stderr
    measured = resolve("dgxa100", edits=tuple(edits.split(",")))
    assert set(resolve(str(out)).links) == set(measured.links)


def test_collective_is_for_the_logs_that_do_not_say(tmp_path):
    # --collective took precedence over the log's own all_reduce_perf, and the rows of
    # an allreduce were fitted as an alltoall's (docs/cli.md: the log, its name, else
    # the flag, which serves the logs given with it that say nothing)
    from tests.test_calibrate import log_text

    said, nameless, out = tmp_path / "ar.log", tmp_path / "x.log", tmp_path / "fit.yaml"
    said.write_text(log_text("allreduce"))
    nameless.write_text(log_text("allgather").replace("all_gather_perf", "my_test"))
    done = synth_main("calibrate", str(said), str(nameless), "--topo", "dgxa100",
                      "--collective", "allgather", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines()[1:33]]
    assert rows == ["allreduce"] * 16 + ["allgather"] * 16


def test_compare_builds_no_baseline_the_time_left_does_not_afford(monkeypatch, late):
    # compare built every baseline again after the frontier, unchecked: on a degraded
    # cluster (the ring packs 314 rings) four seconds past a 10 s limit
    import synth.cli.synthesize as synthesize
    import synth.construct.baselines as baselines

    _after(monkeypatch, synthesize, "frontier_within", late)
    built = []
    real = baselines.build_baseline
    monkeypatch.setattr(baselines, "build_baseline",
                        lambda *a: built.append(late["now"]) or real(*a))
    result = synth_main("compare", "allgather", "--topo", "ring:4", "--time-limit", "100")
    assert "baselines left out by the time limit" in one_line(result, 0)
    assert True not in built and "synth S" in result.stdout


def test_report_builds_no_baseline_the_time_left_does_not_afford(monkeypatch, late,
                                                                tmp_path):
    # as compare: report built every baseline again after the frontier, and once more
    # to say which do not apply, unchecked
    import synth.cli.synthesize as synthesize
    import synth.construct.baselines as baselines

    _after(monkeypatch, synthesize, "frontier_within", late)
    built = []
    real = baselines.build_baseline
    monkeypatch.setattr(baselines, "build_baseline",
                        lambda *a: built.append(late["now"]) or real(*a))
    result = synth_main("report", "allgather", "--topo", "ring:4", "-o", tmp_path / "r",
                        "--time-limit", "100")
    assert "baselines left out by the time limit" in one_line(result, 0)
    assert True not in built and (tmp_path / "r" / "index.html").exists()


def test_calibrate_predicts_each_distinct_call_once(monkeypatch):
    # a log of the same sizes run again and again (2,000 rows of 16 calls) took a
    # minute: one prediction per row per evaluation of the fit. Counted, not timed
    import synth.predict.calibrate as calibrate
    from synth.predict.machine import machine_of
    from synth.topology.figures import defaults

    calls = []
    real = calibrate.choose
    monkeypatch.setattr(calibrate, "choose", lambda *a: calls.append(a) or real(*a))
    machine = machine_of(resolve("dgxa100"))
    samples = [calibrate.Sample(machine, "allreduce", 1 << k, 10.0 + k)
               for k in range(3, 19)] * 50
    theta = [getattr(defaults("ampere"), t) for t in calibrate.TIMES] \
        + [1.0] * len(calibrate.RATIOS)
    fitted = calibrate.predict(samples, theta)
    assert len(calls) == 16 and len(fitted) == 800
    assert fitted[0].choice is fitted[16].choice


def test_lowering_makes_one_fraction_per_width_and_looks_at_the_limit(monkeypatch, late):
    # fc:1049's 1.1 million links each made a Fraction from a string (13 s) before the
    # lowering first looked at --time-limit: 24 s of a 10 s limit. Counted, not timed
    import synth.topology.linkmodel as linkmodel

    made = []
    monkeypatch.setattr(linkmodel, "Fraction",
                        lambda *a: made.append(a) or Fraction(*a))
    model = linkmodel.lower(resolve("fc:16"))
    assert len(model.links) == 240 and len(made) < 10
    machine = resolve("fc:16")
    late["now"] = True
    with pytest.raises(linkmodel.TimeLimit, match="lowering fc:16"):
        linkmodel.lower_with_routes(machine, 1e300)


@pytest.mark.parametrize("args,doing", [
    (("topo", "show", "fc:64"), "building fc:64"),
    (("allgather", "--topo", "fc:64"), "building fc:64"),
    (("compare", "allgather", "--topo", "fc:64"), "building fc:64"),
    (("bounds", "allgather", "--topo", "fc:64"), "building fc:64"),
    (("topo", "show", "fc:64", "--without", "gpu0-gpu1"), "building fc:64"),
])
def test_building_a_machine_looks_at_the_limit(late, args, doing):
    # fc:1049 took 4 s to build and 3 s more to edit before any command first looked at
    # --time-limit (topo show at 3 s ended at 5.7 s). Counted, not timed: the limit has
    # passed from the start, and the command stops while building, saying so
    late["now"] = True
    line = one_line(synth_main(*args, "--time-limit", "60"), 1)
    assert f"the time limit (60 s) ran out while {doing}" in line


def test_editing_a_machine_looks_at_the_limit(late):
    from synth.deadline import Deadline
    from synth.topology.catalog import resolve
    from synth.topology.degrade import degraded
    from synth.topology.linkmodel import TimeLimit

    machine = resolve("fc:64")
    assert len(degraded(machine, ["gpu0-gpu1"]).links) == 64 * 63 - 2
    late["now"] = True
    with pytest.raises(TimeLimit, match=r"editing fc:64 \(4,032 links\)"):
        degraded(machine, ["gpu0-gpu1"], Deadline())


def test_checking_an_edited_machine_looks_at_the_limit(late, monkeypatch):
    # after the edits, checking that every GPU still reaches every other, and saying
    # what each edit did, took 1.2 s and 2.2 s on fc:1049 that no deadline looked at
    import synth.topology.degrade as degrade
    from synth.deadline import Deadline
    from synth.topology.catalog import resolve
    from synth.topology.linkmodel import TimeLimit

    machine = degrade.degraded(resolve("fc:16"), ["gpu0-gpu1"])
    twice = degrade.degraded(machine, ["gpu2-gpu3=0.5"])
    assert degrade.changes(twice) == ["gpu0-gpu1 removed", "gpu2-gpu3 at 0.5 of its "
                                      "bandwidth"]
    _after(monkeypatch, degrade, "changes", late)  # the edits are done, the check not
    with pytest.raises(TimeLimit, match=r"checking fc:16-without-gpu0-gpu1"):
        degrade.degraded(resolve("fc:16"), ["gpu0-gpu1"], Deadline())


def test_a_failed_stage_is_freed_by_the_exit_not_before_it(monkeypatch):
    # freeing fc:1049's lowering after its time limit ran out took 0.6 s past the limit:
    # the failure (and with it what the stage built) is kept until os._exit
    import gc

    import synth.cli.app as app
    from synth.errors import BadInput

    kept = []
    monkeypatch.setattr(app.sys, "argv", ["synth", "topo", "show", "nosuchmachine"])
    monkeypatch.setattr(app, "timed_job", lambda: True)
    monkeypatch.setattr(app.atexit, "_run_exitfuncs", lambda: None)

    def exit_now(code):
        kept.extend(o for o in gc.get_referrers(BadInput) if isinstance(o, BadInput))
        raise SystemExit(code)

    monkeypatch.setattr(app.os, "_exit", exit_now)
    with pytest.raises(SystemExit) as stop:
        app.main()
    assert stop.value.code == 2 and kept


@pytest.mark.parametrize("formats", ["", " , "])
def test_an_empty_format_is_refused(formats):
    # it meant json without a word; plan refused it: an unset variable in a script
    line = one_line(synth_main("allgather", "--topo", "ring:4", "--format", formats), 2)
    assert "--format: no format given" in line


@pytest.mark.parametrize("edits", [("nic0,nic0",), ("nic0", "box1.nic0")])
def test_a_part_removed_twice_is_said_so(edits):
    # the second edit said the machine had no NIC of that name, which it has
    args = [a for e in edits for a in ("--without", e)]
    err = one_line(synth_main("topo", "show", "dgxh100x2", *args), 2)
    assert "nic0 is already removed by an earlier edit" in err


@pytest.mark.parametrize("size,said", [("1.5B", "1.5 bytes"), ("0.1KB", "102.4 bytes")])
def test_a_size_that_is_not_whole_bytes_is_refused(size, said):
    # it was cut to whole bytes without a word (--size 1.5B answered for "1 bytes")
    line = one_line(synth_main("allgather", "--topo", "ring:4", "--size", size), 2)
    assert f"{said} is not a whole number of bytes" in line


def test_a_fraction_that_makes_whole_bytes_is_taken_exactly():
    from synth.schedule.cost import parse_size
    assert parse_size("1.5KB") == 1536 and parse_size("0.25MB") == 262144


def test_a_folder_whose_manifest_was_deleted_is_written_over_as_an_older_synths(tmp_path):
    # the job's first (anytime) write made a manifest of its own files only, and the
    # last write then kept the earlier run's files aside as the user's, with a note
    # saying so (dgxh100's allreduce: its trees first, the NVLS pipelines later)
    out = tmp_path / "o"
    args = ("allreduce", "--topo", "dgxh100", "--out", out, "--no-progress",
            "--time-limit", "60")
    assert synth_main(*args).returncode == 0
    folder = out / "dgxh100" / "allreduce"
    names = sorted(p.name for p in folder.iterdir())
    (folder / MANIFEST).unlink()
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    assert "not synth's" not in again.stderr
    assert sorted(p.name for p in folder.iterdir()) == names
    written = json.loads((folder / MANIFEST).read_text())["files"]
    assert sorted(written) == sorted(n for n in names if n != MANIFEST)


def ring4_without_its_list(tmp_path):
    """(the arguments of a ring:4 allgather into tmp_path/o, its frontier's folder),
    once run, its list then deleted."""
    args = ("allgather", "--topo", "ring:4", "--out", tmp_path / "o", "--no-progress")
    assert synth_main(*args).returncode == 0
    folder = tmp_path / "o" / "ring_4" / "allgather"
    (folder / MANIFEST).unlink()
    return args, folder


def test_an_edit_in_a_folder_whose_manifest_was_deleted_is_kept_aside(tmp_path):
    # with no list, the frontier's files were written over as an older synth's, a
    # user's edit at a point's name too; now only a file holding this run's bytes is
    args, folder = ring4_without_its_list(tmp_path)
    edited = sorted(folder.glob("allgather-s*.json"))[0]
    theirs = edited.read_text().replace('"allgather"', '"allgather" ', 1)
    edited.write_text(theirs)
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    assert (folder / f"{edited.name}.kept").read_text() == theirs
    assert f"{edited.name} was not synth's" in again.stderr
    assert [p.name for p in folder.glob("*.kept")] == [f"{edited.name}.kept"]
    assert synth_main("verify", edited).returncode == 0


def test_a_size_answers_files_in_a_folder_whose_manifest_was_deleted(tmp_path):
    # the answer's runtime files came after the run's first write had made a list, and
    # were kept aside as the user's though they held the very bytes written
    args = ("allreduce", "--topo", "ring:4", "--size", "1MB", "--out", tmp_path)
    assert synth_main(*args).returncode == 0
    folder = tmp_path / "ring_4" / "allreduce"
    runtime_files = sorted(folder.glob("*.xml")) + sorted(folder.glob("*.mscclpp.json"))
    assert runtime_files
    (folder / MANIFEST).unlink()
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    # the runtime files hold this run's bytes: written over (a schedule file says how
    # long its solver took, so an exact point's differs and is kept aside)
    assert not [p for p in folder.glob("*.kept") if not p.name.endswith(".json.kept")
                or p.name.endswith(".mscclpp.json.kept")]
    # an edit of the same size is told apart by its bytes
    data = runtime_files[0].read_bytes()
    (folder / MANIFEST).unlink()
    runtime_files[0].write_bytes(data.replace(b"<", b"[", 1))
    edited = synth_main(*args)
    assert edited.returncode == 0, edited.stderr
    kept = runtime_files[0].with_name(runtime_files[0].name + ".kept")
    assert kept.read_bytes() == data.replace(b"<", b"[", 1)
    assert runtime_files[0].read_bytes() == data


def test_files_of_a_run_before_the_list_are_written_over_with_their_own_bytes(tmp_path):
    # a user trial: the list deleted, a run at another size made a new one naming its
    # own files only, and the next run at the first size kept its earlier, identical,
    # runtime files aside as not synth's
    def at(size):
        return synth_main("allreduce", "--topo", "ring:4", "--size", size, "--out", tmp_path)
    assert at("1MB").returncode == 0
    folder = tmp_path / "ring_4" / "allreduce"
    (folder / MANIFEST).unlink()
    assert at("1KB").returncode == 0
    again = at("1MB")
    assert again.returncode == 0, again.stderr
    assert not [p for p in folder.glob("*.kept") if p.name.endswith((".xml.kept",
                                                                      ".mscclpp.json.kept"))]


def test_a_users_file_is_put_back_when_the_write_fails(tmp_path, monkeypatch):
    # moved aside, then the write (or the list) failed: the name was left empty, or
    # the file moved aside with no note
    from synth.files import OutputError
    import synth.output_folder as folder

    def full(*args, **kwargs):
        raise OutputError("cannot write: no space left on device")
    (tmp_path / "a.json").write_text("mine")
    with monkeypatch.context() as patched:
        patched.setattr(folder, "record", full)
        with pytest.raises(OutputError):
            folder.write_guarded(tmp_path, {"a.json": "synth's"})
    assert (tmp_path / "a.json").read_text() == "mine"
    assert not list(tmp_path.glob("*.kept"))
    # synthesis: a point's file fails to write after the user's was moved aside
    args = ("allgather", "--topo", "ring:4", "--out", tmp_path / "o", "--no-progress")
    assert synth_main(*args).returncode == 0
    first = sorted((tmp_path / "o" / "ring_4" / "allgather").glob("allgather-s*.json"))[0]
    first.write_text("mine")
    write = synth.output.write_atomic

    def full_at_points(path, *args, **kwargs):
        if Path(path).name.startswith("allgather-"):
            full()
        return write(path, *args, **kwargs)
    monkeypatch.setattr(synth.output, "write_atomic", full_at_points)
    failed = synth_main(*args)
    assert failed.returncode != 0 and "no space left on device" in failed.stderr
    assert first.read_text() == "mine" and not list(first.parent.glob("*.kept"))


def test_a_plans_kept_folder_is_checked_before_anything_moves(tmp_path):
    # a reviewer's: a link at DIR/kept was found only after the plan was written, the
    # earlier plan's edited leftover left where the runtime loads it, and no note
    out, workload = tmp_path / "plan", tmp_path / "w.yaml"
    workload.write_text(WORKLOAD + "  - {communicator: tp, collective: reducescatter, "
                                   "size: 1MB}\n")
    assert plan_into(tmp_path, out).returncode == 0
    leftover = sorted((out / "msccl").rglob("reducescatter*.xml"))[0]
    leftover.write_text(leftover.read_text() + "<!-- mine -->\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / "elsewhere").mkdir()
    (out / "kept").symlink_to(tmp_path / "elsewhere")
    workload.write_text(WORKLOAD)
    again = plan_into(tmp_path, out)
    assert "symbolic link" in one_line(again, 2)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list((tmp_path / "elsewhere").iterdir())
    (out / "kept").unlink()
    (out / "kept").write_text("a file of mine")  # a file where the folder would go
    assert "not a folder" in one_line(plan_into(tmp_path, out), 2)
    assert leftover.read_text().endswith("<!-- mine -->\n")


def test_a_copied_list_entry_of_other_types_vouches_for_nothing(tmp_path):
    # a reviewer's: [0, SIZE, 0, "x"] in a copied list reached an integer division
    # (exit 3, internal error)
    from synth.output_folder import manifest_of, users_file

    ours = tmp_path / "ours.json"
    ours.write_text("{}")
    os.utime(ours, ns=(10**18, 10**18))  # on a whole second, as a copy by tar has it
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "synth.written", "folder": [1, 2],
                                                 "files": {"ours.json": [0, 2, 0, "x"]}}))
    manifest = manifest_of(tmp_path)
    assert manifest.moved
    assert users_file(tmp_path, ours, manifest)  # not synth's: kept, not removed
    assert not users_file(tmp_path, ours, manifest, "{}")  # its own bytes: written over


def test_a_file_the_list_does_not_name_is_written_over_only_with_its_own_bytes(tmp_path):
    # from before the list, the user's, or a run's whose list was lost: nothing tells
    # them apart, in the run that made the list or any later one; their bytes tell what
    # writing over them would lose
    from synth.output_folder import manifest_of, users_file

    (tmp_path / "before.json").write_text("an older synth's")
    (tmp_path / "ours.json").write_text("this run's")
    record(tmp_path, [tmp_path / "ours.json"])
    manifest = manifest_of(tmp_path)
    assert not users_file(tmp_path, tmp_path / "ours.json", manifest)
    assert not users_file(tmp_path, tmp_path / "ours.json", manifest, "other bytes")
    assert not users_file(tmp_path, tmp_path / "before.json", manifest, "an older synth's")
    assert users_file(tmp_path, tmp_path / "before.json", manifest, "an older synth!s")
    assert users_file(tmp_path, tmp_path / "before.json", manifest)  # to remove: never


def test_with_no_list_a_file_is_written_over_only_with_its_own_bytes(tmp_path):
    # a folder copied without its dotfiles (or of before the lists): a copy resets
    # every time, so times cannot tell an edit from synth's own file; the bytes can
    from synth.output_folder import users_file, write_guarded

    (tmp_path / "same.json").write_text("synth's text")
    (tmp_path / "edited.json").write_text("synth's text, edited")
    assert not users_file(tmp_path, tmp_path / "same.json", None, "synth's text")
    assert not users_file(tmp_path, tmp_path / "same.json", None, b"synth's text")
    assert users_file(tmp_path, tmp_path / "edited.json", None, "synth's text")
    assert users_file(tmp_path, tmp_path / "same.json", None)  # to remove: never
    written, moved = write_guarded(tmp_path, {"same.json": "synth's text",
                                              "edited.json": "synth's text"})
    assert moved == [(tmp_path / "edited.json", tmp_path / "edited.json.kept")]
    assert (tmp_path / "edited.json.kept").read_text() == "synth's text, edited"
    assert (tmp_path / "edited.json").read_text() == "synth's text"


def test_a_users_file_left_alone_by_the_run_that_made_the_manifest_stays_theirs(tmp_path):
    # a reviewer's case: the list deleted, a file of the user's at a name a later
    # format writes; the run that lists anew leaves it (it writes json only), and the
    # next run, in both formats, wrote over it without a word
    args, folder = ring4_without_its_list(tmp_path)
    stem = sorted(folder.glob("allgather-s*.json"))[0].name.removesuffix(".json")
    (folder / f"{stem}.xml").write_text("mine")
    assert synth_main(*args, "--format", "json").returncode == 0
    both = synth_main(*args, "--format", "json,msccl-xml")
    assert both.returncode == 0, both.stderr
    assert (folder / f"{stem}.xml.kept").read_text() == "mine"
    assert f"{stem}.xml was not synth's" in both.stderr


def test_an_older_list_gains_the_files_written_and_vouches_for_no_other(tmp_path):
    # one of before 2026-12-06 (no folder, no date): a file it does not name is the
    # user's unless it holds the bytes written, as in any list
    from synth.output_folder import manifest_of, users_file

    (tmp_path / "mine.json").write_text("the user's")
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "synth.written", "files": {}}))
    (tmp_path / "ours.json").write_text("this run's")
    record(tmp_path, [tmp_path / "ours.json"])
    manifest = manifest_of(tmp_path)
    assert "ours.json" in manifest.files and "mine.json" not in manifest.files
    assert users_file(tmp_path, tmp_path / "mine.json", manifest, "this run's")
    assert not users_file(tmp_path, tmp_path / "mine.json", manifest, "the user's")


def test_a_folder_copied_with_its_list_keeps_synths_files_by_size_and_time(tmp_path):
    # every copy has a new inode: the list read each of synth's own files as the user's,
    # and the next run kept a `.kept` copy of every one (a runtime loading the folder
    # would load them all); read as no list instead, a user's edit was written over.
    # Matched by size and modification time, a copy keeping times (cp -a) is synth's,
    # an edited file the user's, and a copy that resets times (cp -r) kept aside
    import shutil

    out = tmp_path / "o"
    args = ("allgather", "--topo", "ring:4", "--no-progress", "--out")
    assert synth_main(*args, out).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)  # copy2: times kept, as cp -a
    edited = sorted(copy.rglob("allgather-s*.json"))[0]
    time.sleep(0.01)
    edited.write_text('{"mine": 1}')
    again = synth_main(*args, copy)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in copy.rglob("*.kept")] == [edited.name + ".kept"]
    assert (edited.parent / (edited.name + ".kept")).read_text() == '{"mine": 1}'
    third = synth_main(*args, copy)  # the list is the copy's own now
    assert third.returncode == 0 and "not synth's" not in third.stderr
    plain = tmp_path / "plain"
    shutil.copytree(out, plain, copy_function=shutil.copy)  # times reset, as cp -r
    before = {p: p.read_bytes() for p in plain.rglob("allgather-s*.json")}
    fourth = synth_main(*args, plain)
    assert fourth.returncode == 0
    # the list cannot vouch for them, the bytes can: one holding this run's is written
    # over (every one was kept aside), and none is lost
    for path, data in before.items():
        aside = path.with_name(path.name + ".kept")
        assert path.read_bytes() == data or aside.read_bytes() == data
        assert not aside.exists() or path.read_bytes() != data
    assert any(path.read_bytes() == data for path, data in before.items())
    # a plan's folder: an edit after a copy that keeps times is kept aside
    plan, workload = tmp_path / "plan", tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    assert plan_into(tmp_path, plan).returncode == 0
    plan_copy = tmp_path / "plan-copy"
    shutil.copytree(plan, plan_copy)
    xml = sorted(p for p in plan_copy.rglob("*.xml"))[0]
    time.sleep(0.01)
    xml.write_text(xml.read_text() + "\n")
    replanned = plan_into(tmp_path, plan_copy)
    assert replanned.returncode == 0, replanned.stderr
    assert [p.name for p in plan_copy.rglob("*.kept")] == [xml.name + ".kept"]


@pytest.mark.parametrize("folder", ['"x"', "null", "5", '{"a": 1}', "[1e400, 2]", "[1, 2, 3]"])
def test_a_list_whose_folder_is_malformed_claims_no_file(tmp_path, folder):
    from synth.output_folder import manifest_of, users_file

    (tmp_path / "ours.json").write_text("{}")
    record(tmp_path, [tmp_path / "ours.json"])
    doc = (tmp_path / MANIFEST).read_text()
    (tmp_path / MANIFEST).write_text(doc.replace('"folder": [', f'"folder": {folder}, "x": ['))
    manifest = manifest_of(tmp_path)
    assert manifest is not None and manifest.files == {}
    assert users_file(tmp_path, tmp_path / "ours.json", manifest, "other bytes")


def test_report_moves_a_users_file_aside_and_writes_over_its_own(tmp_path):
    # a user's file at a name the page writes was written over without a word
    out = tmp_path / "r"
    args = ("report", "allgather", "--topo", "ring:4", "--time-limit", "60", "-o", out)
    assert synth_main(*args).returncode == 0
    page = sorted(out.glob("allgather-s*.json"))[0]
    page.write_text('{"mine": 1}')
    again = synth_main(*args)
    assert again.returncode == 0, again.stderr
    assert (out / f"{page.name}.kept").read_text() == '{"mine": 1}'
    assert f"{page.name} was not synth's as it wrote it" in again.stderr
    assert synth_main("verify", page).returncode == 0  # synth's own in its place
    third = synth_main(*args)  # synth's own files are written over, none kept
    assert third.returncode == 0 and "not synth's" not in third.stderr
    assert len(list(out.glob("*.kept"))) == 1
    # a folder with no list (an older synth's, or copied without it): a file is written
    # over only where it holds this run's bytes (the same report: every file), and an
    # edit is kept aside (a copy resets times, so they cannot tell an edit apart)
    (out / MANIFEST).unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    older = synth_main(*args)
    assert older.returncode == 0 and "not synth's" not in older.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()
            and p.name != MANIFEST} == {n: b for n, b in before.items()}
    (out / MANIFEST).unlink()
    page.write_text('{"mine": 2}')
    edited = synth_main(*args)
    assert edited.returncode == 0, edited.stderr
    assert (out / f"{page.name}.kept-2").read_text() == '{"mine": 2}'
    assert edited.stderr.count("not synth's") == 1


@pytest.mark.parametrize("command", ["report", "plan"])
def test_a_pipe_at_the_page_or_listing_is_refused_not_waited_on(tmp_path, command):
    # report opened DIR/index.html to see whether synth wrote it, and a pipe there
    # waited for a writer past any time limit; plan the same with plan.json
    out = tmp_path / "o"
    out.mkdir()
    name = "index.html" if command == "report" else "plan.json"
    os.mkfifo(out / name)
    if command == "report":
        args = ("report", "allgather", "--topo", "ring:4")
    else:
        (tmp_path / "w.yaml").write_text(WORKLOAD)
        args = ("plan", tmp_path / "w.yaml", "--topo", "ring:4")
    said = synth_cli(*map(str, args), "--time-limit", "10", "-o", str(out), timeout=100)
    assert f"{name}: is not a regular file" in one_line(said, 2)


def test_a_list_of_before_modification_times_still_names_synths_files(tmp_path):
    # its entries are inode, size and status-change time: a file unchanged since is synth's
    from synth.output_folder import manifest_of, users_file

    ours = tmp_path / "ours.json"
    ours.write_text("{}")
    st = ours.lstat()
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "synth.written", "files": {
        "ours.json": [st.st_ino, st.st_size, st.st_ctime_ns]}}))
    assert not users_file(tmp_path, ours, manifest_of(tmp_path))
    ours.write_text("{ }")  # changed since: the user's
    assert users_file(tmp_path, ours, manifest_of(tmp_path))


def test_the_size_answer_moves_a_users_file_aside(tmp_path):
    # --size wrote its runtime files with no look at what was there: an edited file of
    # a format the frontier's write did not ask for was written over (a reviewer's case)
    args = ("allgather", "--topo", "ring:4", "--no-progress", "--out", tmp_path)
    assert synth_main(*args, "--format", "json,msccl-xml").returncode == 0
    folder = tmp_path / "ring_4" / "allgather"
    edited = sorted(folder.glob("*.xml"))[-1]
    edited.write_text("mine")
    said = synth_main(*args, "--size", "1MB")
    assert said.returncode == 0, said.stderr
    assert (folder / f"{edited.name}.kept").read_text() == "mine"
    assert f"{edited.name} was not synth's as it wrote it" in said.stderr


def test_a_copy_keeping_times_to_the_second_is_still_synths(tmp_path):
    # GNU tar's default format, zip and scp -p keep whole seconds: every file was kept
    # aside as the user's (a reviewer's case)
    import shutil

    out, copy = tmp_path / "o", tmp_path / "copy"
    args = ("allgather", "--topo", "ring:4", "--no-progress", "--out")
    assert synth_main(*args, out).returncode == 0
    shutil.copytree(out, copy)
    for path in copy.rglob("allgather-s*.json"):
        whole = path.stat().st_mtime_ns // 10**9 * 10**9
        os.utime(path, ns=(whole, whole))
    again = synth_main(*args, copy)
    assert again.returncode == 0 and "not synth's" not in again.stderr
    assert not list(copy.rglob("*.kept"))
