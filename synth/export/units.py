"""Which message sizes an exported file runs, and how a call of any other size is cut:
the size contract of docs/runtimes.md ("Any message size").

A call of n bytes (nccl-tests' n: the larger per-rank buffer) is P equal parts: the
ranks' shares for allgather, reducescatter, gather, scatter and alltoall (P = ranks),
the whole buffer for allreduce, broadcast and reduce (P = 1).

- MSCCL runs an algorithm for a call whose element count (of the larger buffer) is a
  multiple of `nchunksperloop` (msccl-executor-nccl since 2024-09; RCCL and earlier
  releases ask it of the per-rank count, one share); for any other call it skips the
  file and NCCL's own algorithm runs the whole call. Gather and scatter files are the
  exception: NCCL's API has no gather or scatter, so no call selects them under
  msccl-executor-nccl; RCCL's ncclGather and ncclScatter reach MSCCL with one share's
  count (sizeMultiplier 1), against which synth's nchunksperloop (the larger buffer's
  chunks) would make chunks `ranks` times too small (`Header.contract`).
- The MSCCL++ executor runs a plan for n a multiple of 16 x its chunks and throws for
  any other n (`checkMessageSize`).

`Unit.split(n)` cuts any call into a bulk that the file runs (every part cut at the
same offset, a multiple of the granule) and a tail (the rest of every part, smaller
than a granule) that a second call gives to the runtime's own algorithm: the file
does not cut it (msccl-executor-nccl since 2024-09 may still take it, and run it).
Both calls together are the call asked for: each part's bytes go, in order, to one of
them.
synth.run splits so (the `synth run` check, the PyTorch wrapper).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

from synth.errors import BadInput

MAX_ELEMENT_BYTES = 4  # MSCCL counts elements: whole loops for 1-, 2- and 4-byte types
ALIGNMENT = 16  # the MSCCL++ executor's buffer_alignment: chunks of 16-byte units
WHOLE_BUFFER = frozenset({"allreduce", "broadcast", "reduce"})  # one part: the buffer
RUNTIME_NAMES = {"msccl-xml": "MSCCL", "mscclpp": "MSCCL++"}


def parts_of(collective: str, ranks: int) -> int:
    """The equal parts of a call's larger buffer (module docstring)."""
    return 1 if collective in WHOLE_BUFFER else ranks


@dataclass(frozen=True)
class Split:
    """A call of parts x part bytes: bulk_part bytes of every part through the file,
    the rest of every part through the runtime's own algorithm."""

    parts: int
    part: int  # bytes of each part
    bulk_part: int

    @property
    def bulk(self) -> int:
        return self.parts * self.bulk_part

    @property
    def tail(self) -> int:
        return self.parts * (self.part - self.bulk_part)


@dataclass(frozen=True)
class Unit:
    """How a runtime cuts a message for one file (module docstring): `chunks` of the
    larger buffer, `parts` equal parts of it."""

    fmt: str
    chunks: int
    parts: int = 1
    min_bytes: int = 0  # the smallest call the runtime picks the file for
    max_bytes: int | None = None  # the largest (None: no limit)
    per_share: bool = False  # MSCCL as RCCL runs it: whole loops in every share

    def quantum(self, element_bytes: int | None = None) -> int:
        """The sizes it runs are the multiples of this (MSCCL: for an element type of
        element_bytes; None: every type up to MAX_ELEMENT_BYTES; per_share: in every
        one of the call's parts, as RCCL asks it)."""
        if self.fmt == "msccl-xml":
            return self.chunks * (element_bytes or MAX_ELEMENT_BYTES) * (
                self.parts if self.per_share else 1)
        return ALIGNMENT * self.chunks

    def cuts(self, n: int, element_bytes: int | None = None) -> bool:
        return n % self.quantum(element_bytes) == 0 and self.within(n)

    def runs_some_size(self) -> bool:
        """Whether some size in [min_bytes, max_bytes] is one the file runs (MSCCL: in
        1-byte elements, the finest cut): one cut at least, as a call of 0 bytes moves
        nothing (--max-bytes 50 under a cut of 96 ran no call, and was written)."""
        q = self.quantum(1)
        first = max(q, -(-self.min_bytes // q) * q)
        return self.max_bytes is None or first <= self.max_bytes

    def within(self, n: int) -> bool:
        return self.min_bytes <= n and (self.max_bytes is None or n <= self.max_bytes)

    def granule(self, element_bytes: int) -> int:
        """Bytes of each part that the bulk is a multiple of: parts x granule is a size
        the file runs, in whole elements. MSCCL: whole loops in every part, which RCCL
        and msccl-executor-nccl before 2024-09 ask of a call's per-rank count (later
        releases count the larger buffer: `cuts`)."""
        if self.fmt == "msccl-xml":
            return self.chunks * element_bytes
        q = self.quantum(element_bytes)
        return math.lcm(q // math.gcd(q, self.parts), element_bytes)

    def split(self, n: int, element_bytes: int) -> Split:
        """n bytes as a bulk the file runs and a tail for the runtime's own algorithm
        (module docstring). BadInput unless every part is whole elements. A bulk
        outside the file's size range is none: the runtime's own runs the whole call."""
        if n < 0 or n % (self.parts * element_bytes):
            raise BadInput(f"{n:,} bytes is not {self.parts} equal part(s) of whole "
                           f"{element_bytes}-byte elements")
        part, g = n // self.parts, self.granule(element_bytes)
        bulk = part // g * g
        if not self.within(bulk * self.parts):
            bulk = 0
        return Split(self.parts, part, bulk)

    def contract(self) -> str:
        """The one line `synth export` prints: which sizes the file runs, what runs the
        others (docs/runtimes.md, "Any message size")."""
        if self.fmt == "msccl-xml":
            what = f"calls of k x {self.chunks:,} elements of any type"
            if self.parts > 1:
                what += (f" (RCCL and msccl-executor-nccl before 2024-09: k x "
                         f"{self.chunks:,} a share)")
            other = "MSCCL gives any other call to NCCL's own algorithm"
        else:
            what = f"calls of k x {self.quantum():,} bytes"
            if self.parts > 1:
                what += f" (k x {self.granule(ALIGNMENT):,} a share)"
            other = ("the executor fails on any other size: register the plan with "
                     "synth.run.mscclpp_shim, whose selector leaves other sizes to the "
                     "shim's own algorithms")
        low = f" from {self.min_bytes:,} bytes" if self.min_bytes else ""
        top = f" up to {self.max_bytes:,} bytes" if self.max_bytes is not None else ""
        return (f"sizes: runs {what}{low}{top}; {other}; synth.run.pytorch runs any "
                "call as the largest such part through the file and the rest through "
                "the runtime's own (docs/runtimes.md, \"Any message size\")")


@dataclass(frozen=True)
class Header:
    """What a runtime reads from an exported file before it runs it: its name, the
    collective, the ranks, the in-place form, and the sizes it runs (`unit`)."""

    fmt: str
    name: str
    collective: str
    ranks: int
    inplace: bool
    unit: Unit

    def contract(self) -> str:
        """The `sizes:` line `synth export` prints (Unit.contract)."""
        return self.unit.contract()


def header_of(fmt: str, text: str) -> Header:
    """The Header of a rendered file (`synth.export.render`'s text) of format `fmt`;
    ValueError when the text is not such a file."""
    def attr(name):
        found = re.search(rf'<algo [^>]*\b{name}="([^"]*)"', text)
        if found is None:
            raise ValueError(f"no {name} in an <algo> element")
        return found.group(1)

    try:
        if fmt == "msccl-xml":
            chunks, ranks, coll = int(attr("nchunksperloop")), int(attr("ngpus")), attr("coll")
            low, top = int(attr("minBytes")), int(attr("maxBytes"))
            return Header(fmt, attr("name"), coll, ranks, attr("inplace") == "1",
                          Unit(fmt, chunks, parts_of(coll, ranks), low, top or None))
        doc = json.loads(text)
        gpu, ranks, coll = doc["gpus"][0], len(doc["gpus"]), doc["collective"]
        low, top = doc.get("min_message_size", 0), doc.get("max_message_size")
        if coll == "gather":  # the executor compares the input, n / ranks
            low, top = low * ranks, None if top is None else top * ranks
        return Header(fmt, doc["name"], coll, ranks, bool(doc["inplace"]),
                      Unit(fmt, max(gpu["input_chunks"], gpu["output_chunks"]),
                           parts_of(coll, ranks), low, top))
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None


def unit_of(fmt: str, text: str, library: str = "nccl") -> Unit:
    """The Unit of a rendered file (`synth.export.render`'s text) of format `fmt`, as
    `library` runs it (an MSCCL XML file under RCCL: whole loops in every share)."""
    unit = header_of(fmt, text).unit
    return replace(unit, per_share=True) if fmt == "msccl-xml" and library == "rccl" else unit
