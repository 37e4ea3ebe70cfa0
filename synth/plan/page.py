"""The plan's report as a page (DIR/report.html, beside report.md): the same text, its
tables as tables, and the plan's plots when it has them (`synth plan --plots`), shown
from their files in DIR/plots/. Light to import: no matplotlib."""

from __future__ import annotations

from pathlib import Path

from synth.html import markdown_page


def plan_page(report_md: str, files: dict) -> str:
    """report.html: `report_md` as HTML, then the plots among `files` ({path in DIR:
    data}), the step's first."""
    plots = sorted((Path(p) for p in files if Path(p).parts[0] == "plots"
                    and Path(p).suffix in (".png", ".svg")),
                   key=lambda p: (p.stem != "step", p.as_posix()))
    return markdown_page(report_md, [(p.as_posix(), _caption(p)) for p in plots],
                         "" if plots else "synth plan --plots adds plots here: the step, and "
                                          "each collective's time against message size.")


def _caption(path: Path) -> str:
    if path.stem == "step":
        return ("One training step: each collective's predicted time, the plan's against "
                "NCCL's, and the step's.")
    return (f"{path.stem}: predicted time against message size, the plan's fastest "
            "candidate against NCCL's; the workload's sizes marked.")
