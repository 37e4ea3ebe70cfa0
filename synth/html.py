"""HTML pages: the style synth's pages share, escaping, and the Markdown synth writes
(report.md) as HTML. Used by the run report (synth.pictures.report, synth.pictures.page)
and the plan's report.html (synth.plan.page); no picture code, so every stage may use it.

    page(title, body)                  a whole page with its style
    markdown_html(text)                report.md's Markdown as HTML
    markdown_page(text, pictures)      report.md as a page, with pictures beside it
"""

from __future__ import annotations

import html
import re

STYLE = """
body { font-family: Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td.name, th.name { text-align: left; }
tr.synth td.name { color: #1f4f8f; } td.best { background: #e5f5e0; font-weight: bold; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
.note { color: #555; font-size: 0.9em; }
.headline { font-size: 1.05em; background: #f4f8fc; padding: 0.5em 0.8em;
            border-left: 4px solid #1f77b4; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
"""


def esc(text) -> str:
    return html.escape(str(text))


def page(title: str, body: list[str]) -> str:
    return "\n".join(['<!DOCTYPE html>', '<html lang="en"><head><meta charset="utf-8">',
                      f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
                      *body, "</body></html>", ""])


def _inline(text: str) -> str:
    """`code` and **bold**, the rest escaped."""
    out = []
    for k, part in enumerate(re.split(r"(`[^`]*`)", text)):
        if k % 2:
            out.append(f"<code>{esc(part[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", esc(part)))
    return "".join(out)


def _table(rows: list[str]) -> str:
    """A Markdown table (its second row the alignments) as HTML."""
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    right = [c.endswith(":") for c in cells[1]] if len(cells) > 1 else []
    head = "".join(f'<th class="name">{_inline(c)}</th>' for c in cells[0])
    body = []
    for row in cells[2:]:
        tds = [("<td>" if k < len(right) and right[k] else '<td class="name">')
               + _inline(c) + "</td>" for k, c in enumerate(row)]
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def markdown_html(text: str) -> str:
    """The Markdown report.md uses (headings, paragraphs, lists, tables, code blocks,
    `code`, **bold**) as HTML; anything else is a paragraph of escaped text."""
    out, block, lines = [], [], text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("```"):
            end = next((j for j in range(k + 1, len(lines)) if lines[j].startswith("```")),
                       len(lines))
            out.append(f"<pre>{esc(chr(10).join(lines[k + 1:end]))}</pre>")
            k = end + 1
            continue
        kind = ("h" if re.match(r"#{1,6} ", line) else "li" if line.startswith("- ")
                else "table" if line.startswith("|") else "" if not line.strip() else "p")
        if kind == "h":
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line[level + 1:])}</h{level}>")
        elif kind in ("li", "table", "p"):
            block = [line]
            while k + 1 < len(lines) and _same(kind, lines[k + 1]):
                k += 1
                block.append(lines[k])
            out.append("<ul>" + "".join(f"<li>{_inline(x[2:])}</li>" for x in block)
                       + "</ul>" if kind == "li" else _table(block) if kind == "table"
                       else f"<p>{_inline(' '.join(block))}</p>")
        k += 1
    return "\n".join(out)


def markdown_page(text: str, pictures: list[tuple[str, str]] = (), note: str = "") -> str:
    """A page of the Markdown `text` (its first heading the title), then `pictures`:
    (file beside the page, caption) pairs, shown by reference (a plan's plots are
    files of its folder); `note` closes the page."""
    title = next((line.lstrip("#").strip() for line in text.splitlines()
                  if line.startswith("#")), "synth")
    shown = [f'<figure><a href="{esc(href)}"><img src="{esc(href)}" alt="{esc(caption)}">'
             f"</a><figcaption>{esc(caption)}</figcaption></figure>"
             for href, caption in pictures]
    return page(title, [markdown_html(text)] + (["<h2>Plots</h2>"] + shown if shown else [])
                + ([f'<p class="note">{esc(note)}</p>'] if note else []))


def _same(kind: str, line: str) -> bool:
    """Whether `line` continues a block of `kind`."""
    if kind == "li":
        return line.startswith("- ")
    if kind == "table":
        return line.startswith("|")
    return bool(line.strip()) and not re.match(r"(#{1,6} |- |\||```)", line)
