"""A bench record names the code it measured: every bench script that writes files goes
through bench/machine.py's recorded_machine, which refuses a record from a tree with
uncommitted changes. No benchmark runs here: the scripts are read with `ast`, and
recorded_machine runs on a small git repository made for the test."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from bench.machine import Snapshot, content_sha256, recorded_machine

BENCH = Path(__file__).resolve().parent.parent / "bench"
WRITERS = {"write_text", "write_bytes", "savefig", "dump"}


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _writes_files(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in WRITERS:
            return True
        if isinstance(node.func, ast.Name) and node.func.id == "open":
            modes = node.args[1:2] + [k.value for k in node.keywords if k.arg == "mode"]
            if any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax")
                   for m in modes):
                return True
    return False


def _calls_recorded_machine(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "recorded_machine") or \
        (isinstance(f, ast.Attribute) and f.attr == "recorded_machine")


def _refuses(function: ast.FunctionDef, name: str) -> bool:
    """`if NAME is None: return 2` somewhere in `function`."""
    for node in ast.walk(function):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == name
                and isinstance(node.test.ops[0], ast.Is)
                and isinstance(node.test.comparators[0], ast.Constant)
                and node.test.comparators[0].value is None
                and len(node.body) == 1 and isinstance(node.body[0], ast.Return)
                and isinstance(node.body[0].value, ast.Constant)
                and node.body[0].value.value == 2):
            return True
    return False


def problems(source: str) -> list[str]:
    """Why a bench script's source breaks the rule; empty when it keeps it."""
    tree = ast.parse(source)
    if not any(_is_main_guard(n) for n in tree.body) or not _writes_files(tree):
        return []  # a module of helpers, or a script that writes nothing
    out = []
    guard = next(n for n in tree.body if _is_main_guard(n))
    if "sys.exit(main())" not in ast.unparse(guard):
        out.append("its __main__ does not exit with main()'s status")
    guarded = []
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(function):
            if (isinstance(node, ast.Assign) and _calls_recorded_machine(node.value)
                    and isinstance(node.targets[0], ast.Name)):
                recording = node.value.args[2] if len(node.value.args) > 2 else None
                if isinstance(recording, ast.Constant) and not recording.value:
                    out.append(f"{function.name} calls recorded_machine with recording "
                               "False")
                elif _refuses(function, node.targets[0].id):
                    guarded.append(function.name)
    if not guarded:
        out.append("writes files without `X = recorded_machine(...)` followed by "
                   "`if X is None: return 2`")
    return out


def test_every_bench_script_that_writes_a_record_goes_through_recorded_machine():
    scripts = {p.name: p.read_text() for p in sorted(BENCH.glob("*.py"))}
    writers = {name for name, text in scripts.items()
               if _writes_files(ast.parse(text))
               and any(_is_main_guard(n) for n in ast.parse(text).body)}
    # the detector sees the scripts known to write records (else this test proves nothing)
    assert {"bench_scale.py", "bench_synthesis.py", "bench_import.py", "bench_tori.py",
            "runner_sweep.py"} <= writers
    assert "machine.py" not in writers
    broken = {name: problems(text) for name, text in scripts.items() if problems(text)}
    assert broken == {}


def test_the_check_flags_a_script_that_skips_the_rule():
    plain = ("import sys\nfrom pathlib import Path\n\ndef main():\n"
             "    Path('bench/results/x.md').write_text('x')\n    return 0\n\n"
             "if __name__ == '__main__':\n    sys.exit(main())\n")
    assert problems(plain) == ["writes files without `X = recorded_machine(...)` followed "
                               "by `if X is None: return 2`"]
    unguarded = plain.replace("    Path(", "    m = recorded_machine('.', 'x', True)\n"
                                       "    Path(")
    assert len(problems(unguarded)) == 1
    kept = unguarded.replace("    Path(", "    if m is None:\n        return 2\n    Path(")
    assert problems(kept) == []
    assert "main calls recorded_machine with recording False" in problems(
        kept.replace("'x', True", "'x', False"))
    assert problems(kept.replace("sys.exit(main())", "main()")) == [
        "its __main__ does not exit with main()'s status"]


# --- recorded_machine on a repository of the test's own ---------------------------

def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", "-c", "commit.gpgsign=false", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "code.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "old.md").write_text("old\n")
    (tmp_path / "bench" / "bench_x.py").write_text("y = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def test_a_clean_tree_is_recorded_with_its_commit(repo, capsys):
    # a record written into bench/results/ (new or rewritten) is not a code change
    (repo / "bench" / "results" / "old.md").write_text("rewritten\n")
    (repo / "bench" / "results" / "new.json").write_text("{}\n")
    m = recorded_machine(repo, "bench_x", True)
    assert m is not None
    assert m["commit"] == _git(repo, "rev-parse", "--short", "HEAD")
    assert m["uncommitted"] == []
    assert "code_sha256" not in m
    assert capsys.readouterr().err == ""


def test_a_dirty_tree_is_refused_a_record_and_said_so_when_only_printing(repo, capsys):
    (repo / "synth" / "code.py").write_text("x = 2\n")
    assert recorded_machine(repo, "bench_x", True) is None
    err = capsys.readouterr().err
    assert err == ("bench_x: uncommitted changes (synth/code.py); commit them before "
                   "recording\n")
    m = recorded_machine(repo, "bench_x", False)
    head = _git(repo, "rev-parse", "--short", "HEAD")
    assert m["commit"] == head + "+dirty"
    assert m["uncommitted"] == ["synth/code.py"]
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "bench_x: not recorded: uncommitted changes (synth/code.py)"


def test_staged_untracked_and_renamed_files_count_as_changes(repo, capsys):
    (repo / "synth" / "new.py").write_text("z = 1\n")
    assert recorded_machine(repo, "bench_x", True) is None  # untracked
    _git(repo, "add", "synth/new.py")
    assert recorded_machine(repo, "bench_x", True) is None  # staged
    _git(repo, "commit", "-q", "-m", "new")
    _git(repo, "mv", "synth/new.py", "synth/renamed.py")
    assert recorded_machine(repo, "bench_x", True) is None
    assert "synth/renamed.py, synth/new.py" in capsys.readouterr().err


def test_a_snapshot_allows_changes_under_its_paths_only_and_records_its_hash(repo, capsys):
    (repo / "synth" / "code.py").write_text("x = 2\n")
    head = _git(repo, "rev-parse", "--short", "HEAD")
    copy = Snapshot(("synth",), "0123456789abcdef", committed=False)
    m = recorded_machine(repo, "bench_x", True, copy)
    assert (m["commit"], m["code_sha256"]) == (head + "+dirty", "0123456789abcdef")
    archive = Snapshot(("synth",), "fedcba9876543210", committed=True)
    m = recorded_machine(repo, "bench_x", True, archive)
    assert (m["commit"], m["code_sha256"]) == (head, "fedcba9876543210")
    assert m["uncommitted"] == ["synth/code.py"]
    # the bench script itself is outside every snapshot: still refused
    (repo / "bench" / "bench_x.py").write_text("y = 2\n")
    assert recorded_machine(repo, "bench_x", True, copy) is None
    assert "(bench/bench_x.py)" in capsys.readouterr().err


def test_outside_a_git_repository_nothing_is_recorded(tmp_path, capsys):
    assert recorded_machine(tmp_path, "bench_x", True) is None
    assert capsys.readouterr().err.count("\n") == 1


def test_content_sha256_names_the_files_and_their_bytes_not_the_compiled_ones(tmp_path):
    import hashlib

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_bytes(b"x")
    # by hand: the one file's relative path, NUL, its bytes
    assert content_sha256(tmp_path) == hashlib.sha256(b"a/m.py\0x").hexdigest()[:16]
    (tmp_path / "a" / "__pycache__").mkdir()
    (tmp_path / "a" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"compiled")
    assert content_sha256(tmp_path) == hashlib.sha256(b"a/m.py\0x").hexdigest()[:16]
    (tmp_path / "a" / "m.py").write_bytes(b"y")
    assert content_sha256(tmp_path) == hashlib.sha256(b"a/m.py\0y").hexdigest()[:16]
