"""One command-line grammar (docs/cli.md, "Grammar"; issue 30, item 2): every output is
-o/--out, shared options have one name, metavar and default, byte counts take units,
help lists every command and shows examples, and the previous release's spellings
still work with one line of deprecation on stderr.

Cheap by design: the help texts and option tables are read in-process, an old
spelling's parse is compared with the new one's without running the command, and only
the commands that take well under a second (export, topo import) are run whole.
"""

import re
from pathlib import Path

import click
import pytest

from synth.cli import cli
from synth.cli.options import Size, Sizes
from synth.deadline import DEFAULT_TIME_LIMIT
from tests.in_process import synth_main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
SMI = Path(__file__).resolve().parent / "fixtures" / "topologies" / \
    "topo-m-sglang30401-h100-8nic.txt"
COLLECTIVES = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall"]
# the commands that write a file or folder, and so take -o/--out
WRITERS = {*COLLECTIVES, "plan", "report", "export", "draw", "topo draw", "topo import",
           "calibrate"}


def commands(group=cli, prefix=""):
    """Every command, by its path (`topo draw`), groups included."""
    found = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        found[path] = command
        if isinstance(command, click.Group):
            found.update(commands(command, f"{path} "))
    return found


ALL = commands()


def options(command):
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def help_of(path: str) -> str:
    done = synth_main(*path.split(), "--help")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def helps():
    return {path: help_of(path) for path in ["", *ALL]}


def test_every_command_that_writes_takes_o_out_and_no_other(helps):
    for path, text in helps.items():
        writes = path in WRITERS
        assert ("-o, --out " in text) == writes, path
        assert "--output" not in text, path  # the old spelling is not taught


def test_help_lists_every_command_with_a_whole_summary(helps):
    for group, text in [("", helps[""]), ("topo", helps["topo"])]:
        listed = text.split("Commands:")[1].split("Examples:")[0]
        for name in (cli if not group else cli.commands[group]).commands:
            line = re.search(rf"^  {name} +(\S.*)$", listed, re.M)
            assert line, f"synth {group} --help does not list {name}"
            assert not line.group(1).endswith("..."), f"{name}: the summary is cut"
    assert "import" in helps["topo"].split("Usage")[1].splitlines()[2]  # its summary too


def test_every_help_ends_with_examples(helps):
    for path, text in helps.items():
        if path != "topo list":  # it takes nothing: its one line is its example
            assert "synth " in text.split("Examples:")[-1], f"synth {path}: no example"


def test_no_metavar_is_a_bare_type(helps):
    for path, text in helps.items():
        for bare in ("TEXT", "INTEGER", "FLOAT", "RANGE", "PATH"):
            assert not re.search(rf"\b{bare}\b", text), f"synth {path} --help: {bare}"


def test_the_default_time_limit_is_one_and_the_docs_say_it_once():
    limits = {path: p.default for path, c in ALL.items() for p in options(c)
              if p.name == "time_limit"}
    assert set(limits) >= {*COLLECTIVES, "bounds", "compare", "report", "plan", "topo show"}
    assert set(limits.values()) == {DEFAULT_TIME_LIMIT}, limits
    # a default said beside --time-limit: a table's default column, or "(default 60 s"
    said = re.findall(r"--time-limit[^|\n]*\|\s*\d+|--time-limit(?: SECONDS)?`?,? \(?default \d+",
                      DOCS.read_text())
    assert said == [], f"docs/cli.md states a time-limit default outside Grammar: {said}"
    assert DOCS.read_text().count(f"**{DEFAULT_TIME_LIMIT:g} s**") == 1


# options whose default or help is the command's own: what it writes, prints or plots
OWN = {"out_dir", "output", "path", "formats", "as_json", "plots", "nbytes", "size",
       "spec", "name"}


def test_shared_options_are_one_option_everywhere():
    seen = {}
    for path, command in ALL.items():
        for p in options(command):
            if p.name in OWN:
                continue
            key = (p.opts[-1], p.default, p.metavar, type(p.type).__name__, p.help,
                   getattr(p.type, "choices", None))
            seen.setdefault(p.opts[-1], {}).setdefault(key, []).append(path)
    for name, kinds in seen.items():
        assert len(kinds) == 1, f"{name} differs between commands: {list(kinds.values())}"


def test_every_byte_count_takes_units():
    for path, command in ALL.items():
        for p in options(command):
            if re.search(r"bytes|size", p.name):
                assert isinstance(p.type, (Size, Sizes)), f"synth {path} {p.opts[-1]}"


def test_no_option_name_has_two_meanings():
    plan = {o for p in options(ALL["plan"]) for o in p.opts}
    assert "--training-steps" in plan and "--steps" not in plan
    assert all("--steps" in {o for p in options(ALL[c]) for o in p.opts} for c in COLLECTIVES)


def schedule(tmp_path) -> Path:
    made = synth_main("allgather", "--topo", "dgx1", "--steps", "2", "--rounds", "3",
                      "--chunks", "2", "-o", tmp_path / "out")
    assert made.returncode == 0, made.stderr
    return tmp_path / "out" / "dgx1" / "allgather" / "allgather-s2-r3-c2.json"


def test_export_takes_byte_bounds_with_units(tmp_path):
    done = synth_main("export", schedule(tmp_path), "--to", "msccl-xml", "--min-bytes", "1KB",
                      "--max-bytes", "64MB", "-o", tmp_path / "ag.xml")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "from 1,024 bytes up to 67,108,864 bytes" in done.stdout
    assert 'maxBytes="67108864"' in (tmp_path / "ag.xml").read_text()
    bad = synth_main("export", schedule(tmp_path), "--to", "msccl-xml", "--max-bytes",
                     "64XB", "-o", tmp_path / "no.xml")
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1
    assert "'64XB': expected a number with an optional unit" in bad.stderr
    assert not (tmp_path / "no.xml").exists()


# per renamed option: the command, its arguments with {} for the option, old and new
RENAMED = [
    ("report", ["allgather", "--topo", "ring:4", "{}", "r"], "--output", "-o"),
    ("export", ["f.json", "--to", "json", "{}", "x.json"], "--output", "--out"),
    ("draw", ["f.json", "{}", "x.svg"], "--output", "-o"),
    ("topo draw", ["dgx1", "{}", "x.svg"], "--output", "--out"),
    ("topo import", ["smi.txt", "{}", "x.yaml"], "--output", "-o"),
    ("calibrate", ["a.log", "--topo", "dgx1", "{}", "x.yaml"], "--output", "--out"),
    ("plan", ["w.yaml", "--topo", "dgx1", "{}", "3"], "--steps", "--training-steps"),
]


def parsed(path, args, spelling, capsys):
    """The values the command would be called with, and what parsing said on stderr."""
    with ALL[path].make_context(path, [a.replace("{}", spelling) for a in args]) as ctx:
        params = dict(ctx.params)
    return params, capsys.readouterr().err


@pytest.mark.parametrize("path, args, old, new", RENAMED, ids=lambda x: str(x))
def test_an_old_spelling_does_what_the_new_one_does_and_says_so_once(path, args, old, new,
                                                                       capsys):
    with_new, quiet = parsed(path, args, new, capsys)
    with_old, said = parsed(path, args, old, capsys)
    assert with_old == with_new and quiet == ""
    lines = said.splitlines()
    assert len(lines) == 1 and lines[0].startswith("synth: note: ")
    assert old in lines[0] and new in lines[0].split("use ")[1]


def test_old_spellings_still_run_whole(tmp_path):
    src = schedule(tmp_path)
    new = synth_main("export", src, "--to", "mscclpp", "-o", tmp_path / "new.json")
    old = synth_main("export", src, "--to", "mscclpp", "--output", tmp_path / "old.json")
    assert old.returncode == new.returncode == 0
    assert old.stdout == new.stdout.replace("new.json", "old.json")
    assert old.stderr == ("synth: note: --output is deprecated and goes in the next "
                          "release; use -o/--out\n")
    assert (tmp_path / "old.json").read_text() == (tmp_path / "new.json").read_text()
    imported = synth_main("topo", "import", SMI, "--gpu", "h100-sxm", "--output",
                          tmp_path / "box.yaml")
    assert imported.returncode == 0 and (tmp_path / "box.yaml").exists()
    assert imported.stderr.splitlines()[0].startswith("synth: note: --output is deprecated")
    assert len(imported.stderr.splitlines()) == 2  # the note, then what was imported
    # both spellings with different files: one was never written, without a word
    both = synth_main("export", src, "--to", "mscclpp", "--output", tmp_path / "a.json",
                      "-o", tmp_path / "b.json")
    assert both.returncode == 2 and both.stderr.count("\n") == 1
    assert "given twice: --output and -o/--out name different values" in both.stderr
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()
    # one file named two ways is one value
    same = synth_main("export", src, "--to", "mscclpp", "--output", tmp_path / "c.json",
                      "-o", f"{tmp_path}/./c.json")
    assert same.returncode == 0 and (tmp_path / "c.json").exists()


def test_a_renamed_option_without_its_value_is_one_line_and_exit_2(tmp_path):
    done = synth_main("export", "f.json", "--to", "json", "--output", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "'--output' requires an argument" in done.stderr
