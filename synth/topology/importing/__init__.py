"""Import the cluster a user has: NCCL's (or RCCL's) topology XML or `nvidia-smi topo -m`
output.

    import_source(path, gpu=None, nic_gbps=None, fabric=None) -> Draft

A Draft (draft.py) is an ordinary topology file's content with a note on every number
saying where it came from; `Draft.to_yaml()` writes it (`synth topo import`), and
`synth.topology.catalog.resolve` reads a source given as `--topo` the same way. The
kind is told from the content: XML (nccl_xml.py; RCCL's dump of AMD GPUs, with
xGMI links, rccl.py) or a GPU0 matrix header (smi_matrix.py). What neither source says (NVLink bandwidth per link, a partial file's
NVLinks, NIC speeds the matrix omits) comes from hardware.py and is listed in the
file's `assumptions:`; which PCIe paths GPUs use, NCCL's rule, is paths.py's, and how
a GPU uses several NICs at once, rails.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from synth.errors import BadInput
from synth.files import quote
from synth.topology.importing.draft import Draft, vertex_name
from synth.topology.importing.hardware import GPU_MODELS
from synth.topology.importing.nccl_xml import from_xml
from synth.topology.importing.paths import apply_runtime_paths
from synth.topology.importing.rails import join_rails
from synth.topology.importing.smi_matrix import from_matrix, is_matrix

MAX_SOURCE_BYTES = 16 << 20  # a dump of a large node is tens of kB


def say_on_stderr(text: str) -> None:
    """A warning, one line on stderr (before the command's own output)."""
    print(f"synth: warning: {text}", file=sys.stderr, flush=True)


def import_source(path: str | Path, gpu: str | None = None, nic_gbps: float | None = None,
                  fabric: str | None = None, name: str | None = None,
                  warn: Callable[[str], None] | None = say_on_stderr) -> Draft:
    """The Draft of the source at `path`; BadInput (one line) for anything else. What
    the user must not miss (a file without NVLinks) goes to `warn` (None: kept in
    draft.warnings only), once the import has succeeded."""
    path = Path(path)
    where = path.name
    model = None
    if gpu is not None:
        model = GPU_MODELS.get(gpu)
        if model is None:
            raise BadInput(f"unknown --gpu {quote(gpu)} (known: {', '.join(GPU_MODELS)})")
    text = _read_text(path).removeprefix("\ufeff")  # a byte order mark is no content
    name = name or _name(path)
    xml = text.lstrip(" \t\r\n").startswith("<")
    if xml:
        draft = from_xml(text, where, name, model, nic_gbps, fabric)
    elif is_matrix(text):
        draft = from_matrix(text, where, name, model, nic_gbps, fabric)
    else:
        raise BadInput(f"{where}: neither NCCL topology XML nor nvidia-smi topo -m output "
                       "(expected '<system' or a 'GPU0 ...' header)")
    apply_runtime_paths(draft)
    join_rails(draft, rates_read=xml)
    draft.description += "".join(f". WARNING: {w}" for w in draft.warnings)
    if warn is not None:
        for text in draft.warnings:
            warn(text)
    return draft


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: a directory, not a topology source") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise BadInput(f"{path.name}: over {MAX_SOURCE_BYTES >> 20} MB, not a topology "
                       "source")
    if b"\x00" in data:
        raise BadInput(f"{path.name}: a binary file, not NCCL topology XML or nvidia-smi "
                       "output")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path.name}: not UTF-8 text (byte {e.start}): a binary file?") \
            from None


def _name(path: Path) -> str:
    return vertex_name(path.name.split(".")[0], "imported", fill="-")


__all__ = ["Draft", "import_source", "GPU_MODELS"]
