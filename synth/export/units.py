"""How a runtime cuts a message for one exported file: which sizes it runs.

MSCCL runs an algorithm over loops of `nchunksperloop` chunks of whole elements, so a
message of n bytes runs when its element count is a multiple of that (for every element
type up to MAX_ELEMENT_BYTES wide: n a multiple of chunks x 4). The MSCCL++ executor
cuts a message into the plan's chunks of 16-byte units and fails otherwise: n a
multiple of 16 x chunks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_ELEMENT_BYTES = 4  # MSCCL counts elements: whole loops for 1-, 2- and 4-byte types


@dataclass(frozen=True)
class Unit:
    """How a runtime cuts a message for one file (module docstring)."""

    fmt: str
    chunks: int

    def cuts(self, n: int) -> bool:
        if self.fmt == "msccl-xml":
            return n % (self.chunks * MAX_ELEMENT_BYTES) == 0
        return n % 16 == 0 and (n // 16) % self.chunks == 0


def unit_of(fmt: str, text: str) -> Unit:
    """The Unit of a rendered file (`synth.export.render`'s text) of format `fmt`."""
    if fmt == "msccl-xml":
        return Unit(fmt, int(re.search(r'nchunksperloop="(\d+)"', text).group(1)))
    gpu = json.loads(text)["gpus"][0]
    return Unit(fmt, max(gpu["input_chunks"], gpu["output_chunks"]))
