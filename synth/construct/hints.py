"""Optional hints for the decomposition, from a small YAML or JSON file (`--hints FILE`).

Nothing here is required: synth.topology.hierarchy finds the boxes and their alignment
itself. A hint overrides what it names and is checked like any input:

    boxes: [[0, 1, 2, 3], [4, 5, 6, 7]]   # the boxes, each in local order: position i
                                          # of every box forms peer group i, the GPUs
                                          # that exchange data across the network
    batches: [1, 4, 16]                   # pipeline depths to try (default: DEPTHS)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from synth.errors import BadInput
from synth.files import load_yaml

KEYS = {"boxes", "batches"}
MAX_BATCHES = 256


@dataclass(frozen=True)
class Hints:
    boxes: tuple[tuple[int, ...], ...] | None = None
    batches: tuple[int, ...] | None = None


def read_hints(path: str | Path, ranks: int) -> Hints:
    """The hints in `path` for a topology of `ranks` GPUs; BadInput names the problem."""
    try:
        doc = load_yaml(path, what="hints file")
    except BadInput as e:
        raise BadInput(f"hints: {e}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"hints {path}: expected a mapping with keys {', '.join(sorted(KEYS))}")
    unknown = sorted(set(map(str, doc)) - KEYS)
    if unknown:
        raise BadInput(f"hints {path}: unknown key '{unknown[0]}' (expected "
                       f"{', '.join(sorted(KEYS))})")
    return Hints(_boxes(doc.get("boxes"), ranks, path), _batches(doc.get("batches"), path))


def _boxes(value, ranks: int, path) -> tuple[tuple[int, ...], ...] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) < 2
            or not all(isinstance(b, list) and b for b in value)):
        raise BadInput(f"hints {path}: boxes: expected a list of at least two rank lists")
    flat = [r for box in value for r in box]
    if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < ranks for r in flat):
        raise BadInput(f"hints {path}: boxes: every entry must be a rank 0..{ranks - 1}")
    if sorted(flat) != list(range(ranks)):
        raise BadInput(f"hints {path}: boxes: every rank 0..{ranks - 1} must appear exactly once")
    if len({len(box) for box in value}) != 1:
        raise BadInput(f"hints {path}: boxes: all boxes must have the same size")
    if len(value[0]) < 2:
        raise BadInput(f"hints {path}: boxes: a box needs at least two GPUs")
    return tuple(tuple(box) for box in value)


def _batches(value, path) -> tuple[int, ...] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not value or not all(
            isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BATCHES
            for b in value)):
        raise BadInput(f"hints {path}: batches: expected a list of integers 1..{MAX_BATCHES}")
    return tuple(sorted(set(value)))
