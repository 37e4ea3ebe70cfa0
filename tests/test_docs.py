"""The documentation keeps its promises: README.md and docs/**/*.md.

- Every relative link (and image) leads to a file or folder the repository has, and an
  anchor (`file.md#heading`, `#heading`) to a heading that file has, slugged as GitHub
  does. A file named in code (`synth/files.py`, `docs/cli.md`) exists too.
- README.md is a landing page: at most 200 lines, and no TODO.
- A measured figure names its record the way these pages do it: a file of bench/results/
  in the same paragraph or list item ("Measured (`bench/bench_trees.py`,
  `bench/results/trees-2026-12-01.md`): ... 1.0624 x ..." or "... 1.0156 x
  (`bench/results/in-network-2026-12-01.md`)"). Every file cited exists (a pattern such
  as `fidelity-*.md` matches one), and every figure of that paragraph, a decimal number
  as written ("1.06", "38.27"; a version such as 2.30.7 is not a figure), appears in one
  of the files it cites as a number of its own ("1.06" is not found in "1.0625"). So a
  figure is written as its record has it; one worked out from a record (a ratio of two
  of its numbers) goes beside the numbers it comes from, outside the citing paragraph.

Cheap on purpose: it reads text and runs no synthesis. Each check is a function of the
repository root, and the last tests run them on broken copies in tmp_path.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200

# [text](target) and ![alt](target), an optional "title"; the text may hold [brackets]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CITE = re.compile(r"bench/results/[\w.+*-]*[\w*]")
# a decimal number standing alone: not part of a word, a path or a version (2.30.7)
FIGURE = re.compile(r"(?<![\w./])\d+\.\d+(?![\w]|\.\d)")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s|\s{0,3}(#|\|)")  # starts a list item, heading, table row
CODE_PATH = re.compile(r"`((?:synth|docs|bench|tests|topologies|examples)/[\w./-]*)`")


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def prose_lines(text: str, spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) for every line; code blocks (fenced, or indented after a
    blank line outside a list) come back empty, and code spans blanked unless `spans`."""
    out: list[tuple[int, str]] = []
    fenced, blank_before, in_list = False, True, False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            out.append((number, ""))
            continue
        indented_code = line.startswith("    ") and blank_before and not in_list
        if fenced or indented_code:
            out.append((number, ""))
            continue
        if line.strip():
            if re.match(r"\s*([-*+]|\d+[.)])\s", line):
                in_list = True
            elif not line.startswith(" "):
                in_list = False
        blank_before = not line.strip()
        out.append((number, line if spans else re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), line)))
    return out


def blocks(text: str, spans: bool = True) -> list[tuple[int, str]]:
    """Paragraphs and list items (each heading and table row a block of its own), with
    the line each starts on; code blocks left out."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, line in prose_lines(text, spans=spans):
        if current and (not line.strip() or ITEM.match(line)):
            out.append((start, "\n".join(current)))
            current = []
        if line.strip():
            if not current:
                start = number
            current.append(line)
    if current:
        out.append((start, "\n".join(current)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link's text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    for _, line in prose_lines(text, spans=True):
        match = re.match(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link in the prose, a link's text may wrap a line."""
    found = []
    for start, block in blocks(text, spans=False):
        for match in LINK.finditer(block):
            found.append((start + block.count("\n", 0, match.start()), match.group(1)))
        for offset, line in enumerate(block.splitlines()):
            if match := REFERENCE.match(line):
                found.append((start + offset, match.group(1)))
    return found


def broken_links(root: Path) -> list[str]:
    problems = []
    for doc in doc_files(root):
        if not doc.exists():
            continue
        where = doc.relative_to(root)
        text = doc.read_text(encoding="utf-8")
        for number, target in links(text):
            if SCHEME.match(target) or target.startswith("//"):
                continue  # a web address: not checked here (the tests use no network)
            path_part, _, anchor = target.partition("#")
            dest = Path(os.path.normpath(doc.parent / path_part)) if path_part else doc
            if not dest.exists():
                problems.append(f"{where}:{number}: link to missing {target}")
            elif not dest.is_relative_to(root):
                problems.append(f"{where}:{number}: link out of the repository: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}:{number}: no heading #{anchor} in {dest.relative_to(root)}")
        for number, line in prose_lines(text, spans=True):
            for name in CODE_PATH.findall(line):
                # topologies/NAME.yaml, out/TOPO/...: placeholders in capitals, not files
                if not (root / name).exists() and not re.search(r"[A-Z]{3,}", name):
                    problems.append(f"{where}:{number}: names missing file {name}")
    return problems


def readme_problems(root: Path) -> list[str]:
    text = (root / "README.md").read_text(encoding="utf-8")
    problems = []
    count = len(text.splitlines())
    if count > README_MAX_LINES:
        problems.append(f"README.md: {count} lines, more than {README_MAX_LINES}: "
                        "move the rest to docs/guide/")
    problems += [f"README.md:{n}: TODO" for n, line in enumerate(text.splitlines(), 1)
                 if "TODO" in line]
    return problems


def figure_problems(root: Path) -> list[str]:
    problems = []
    records: dict[str, list[str]] = {}
    for doc in doc_files(root):
        if not doc.exists():
            continue
        where = doc.relative_to(root)
        for number, block in blocks(doc.read_text(encoding="utf-8")):
            cited = sorted(set(CITE.findall(block)))
            texts = []
            for name in cited:
                if name not in records:
                    paths = sorted(root.glob(name)) if "*" in name else [root / name]
                    records[name] = [p.read_text(encoding="utf-8", errors="replace")
                                     for p in paths if p.is_file()]
                if not records[name]:
                    problems.append(f"{where}:{number}: cites {name}, which does not exist")
                texts += records[name]
            if not texts:
                continue
            # the figures: the block without its citations, link targets, and code that
            # names a path or an option value
            words = CITE.sub(" ", block)
            words = re.sub(r"\]\([^)]*\)", "]", words)
            words = re.sub(r"`[^`]*[/=][^`]*`", " ", words)
            for figure in FIGURE.findall(words):
                alone = re.compile(r"(?<![\d.])" + re.escape(figure) + r"(?!\d)")
                if not any(alone.search(text) for text in texts):
                    problems.append(f"{where}:{number}: {figure} is in none of {', '.join(cited)}")
    return problems


def test_every_relative_link_leads_somewhere():
    problems = broken_links(REPO)
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_landing_page():
    problems = readme_problems(REPO)
    assert not problems, "\n".join(problems)


def test_every_cited_figure_is_in_its_record():
    problems = figure_problems(REPO)
    assert not problems, "\n".join(problems)


def test_the_guide_has_a_table_of_contents_the_readme_links():
    guide = REPO / "docs" / "guide"
    contents = [target for _, target in links((guide / "README.md").read_text(encoding="utf-8"))]
    chapters = sorted(p.name for p in guide.glob("[0-9][0-9]-*.md"))
    assert chapters and [c for c in chapters if c not in contents] == []
    readme = [target for _, target in links((REPO / "README.md").read_text(encoding="utf-8"))]
    assert "docs/guide/README.md" in readme


# The checks can fail: a copy of the pages and the records, broken one way at a time.

def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "bench").mkdir(parents=True)
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copytree(REPO / "bench" / "results", root / "bench" / "results",
                    ignore=shutil.ignore_patterns("*.png", "*.json"))
    # what else the pages name, unchanged: linked in, not copied
    for source in [*REPO.iterdir(), *(REPO / "bench").iterdir()]:
        target = root / source.relative_to(REPO)
        if not target.exists() and source.name != ".git":
            target.symlink_to(source, target_is_directory=source.is_dir())
    return root


def test_the_checks_agree_on_a_faithful_copy(tmp_path):
    root = _copy(tmp_path)
    assert broken_links(root) == broken_links(REPO)
    assert readme_problems(root) == readme_problems(REPO)
    assert figure_problems(root) == figure_problems(REPO)


def test_a_broken_link_fails(tmp_path):
    root = _copy(tmp_path)
    chapter = sorted((root / "docs" / "guide").glob("[0-9][0-9]-*.md"))[0]
    chapter.write_text(chapter.read_text() + "\nSee [the part that\nmoved](99-nowhere.md).\n")
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\n[a lost heading](docs/cli.md#no-such-heading)\n"
                      "`synth/no_such_module.py`\n")
    problems = broken_links(root)
    assert any("guide/01" in p and "missing 99-nowhere.md" in p for p in problems), problems
    assert any("no heading #no-such-heading in docs/cli.md" in p for p in problems), problems
    assert any("missing file synth/no_such_module.py" in p for p in problems), problems
    # in code, a link is text: not checked
    readme.write_text(readme.read_text().replace("[a lost heading](docs/cli.md#no-such-heading)",
                                                 "`[a lost heading](docs/cli.md#no-such-heading)`"))
    assert not any("no-such-heading" in p for p in broken_links(root))


def test_a_long_readme_or_a_todo_fails(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    readme.write_text(text + "more\n" * (README_MAX_LINES + 1 - len(text.splitlines())))
    assert any("more than 200" in p for p in readme_problems(root))
    readme.write_text(text.replace("\n\n", "\n\nTODO: say more.\n\n", 1))
    assert any("TODO" in p for p in readme_problems(root))


def test_a_figure_its_record_does_not_hold_fails(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    record = "bench/results/in-network-2026-12-01.md"
    assert "1.0156" in (root / record).read_text() and "1.016 " not in (root / record).read_text()
    cases = {
        f"\nMeasured (`{record}`): 9.8765 x faster.\n": "9.8765 is in none",
        f"\nAt 1.016 x the bound (`{record}`).\n": "1.016 is in none",  # rounded off
        f"\n- at 1.0156 x, and\n  then 1.07 x (`{record}`).\n": "1.07 is in none",  # wrapped
        "\nIn 2.5 s (`bench/results/nothing-2026-01-01.md`).\n": "nothing-2026-01-01.md, which does not exist",
        "\nIn 2.5 s (`bench/results/nothing-*.md`).\n": "nothing-*.md, which does not exist",
    }
    for added, expected in cases.items():
        readme.write_text(text + added)
        assert any(expected in p for p in figure_problems(root)), (added, figure_problems(root))
    # the figure as its record has it passes; so does one in another paragraph
    readme.write_text(text + f"\nAt 1.0156 x (`{record}`).\n\nAbout 1.016 x.\n")
    assert figure_problems(root) == figure_problems(REPO)


def test_the_helpers_read_markdown_as_github_does():
    assert slug("Version 3: switch operations (in-network reduction)") == \
        "version-3-switch-operations-in-network-reduction"
    assert slug("`bench_readme.py`: the figures README.md quotes") == \
        "bench_readmepy-the-figures-readmemd-quotes"
    assert slug("Running with torch.distributed") == "running-with-torchdistributed"
    assert FIGURE.findall("NCCL 2.30.7 at 1.06 x, 38.27 s, v0.8.0, dgx2x4, 1.0-1.5") == \
        ["1.06", "38.27", "1.0", "1.5"]
    text = "a [b](c.md) and\n[d\ne](f.md)\n\n    [g](h.md)\n\n```\n[i](j.md)\n```\n`[k](l.md)`\n\n" \
           "- item\n\n    [m](n.md)\n"
    assert [target for _, target in links(text)] == ["c.md", "f.md", "n.md"]
