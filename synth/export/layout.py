"""Where each global chunk lives in a rank's input, output and scratch buffers.

Both exporters (MSCCL XML and the MSCCL++ plan) address data as (buffer, index) with
buffers "i" (input, the user's send buffer), "o" (output, the receive buffer) and "s"
(scratch). This module maps the global chunk numbering onto those buffers, the
way NCCL lays out each collective's arguments. N ranks, C chunks per share; a chunk of
the buffer is the runtime's unit (the larger per-rank buffer cut into nchunksperloop
pieces):

    collective      input (chunks)  output (chunks)  rank r starts with  rank r ends with
    allgather       C               N*C              k//C==r: i[k%C]     o[k]
    reducescatter   N*C             C                i[k]                k//C==r: o[k%C]
    allreduce       C               C                i[k]                o[k]
    broadcast       C               C                root: i[k]          o[k]
    reduce          C               C                i[k]                root: o[k]
    gather          C               N*C              k//C==r: i[k%C]     root: o[k]
    scatter         N*C             C                root: i[k]          k//C==r: o[k%C]
    alltoall        N*C             N*C              k=(r*N+d)*C+j:      k=(s*N+r)*C+j:
                                                     i[d*C+j]            o[s*C+j]

In place, the smaller buffer is part of the larger one and only the larger one is named
(NCCL's convention): allgather and gather keep rank r's share in o[r*C..(r+1)*C), so
it starts in o[k]; reducescatter and scatter leave rank r's result in i[r*C..(r+1)*C),
so it ends in i[k]; allreduce, broadcast and reduce use o alone. Alltoall has no
in-place form (MSCCL runs it out of place only).

A rank writes only its own output slots and scratch: the input is never modified, nor
the parts of a buffer that the collective does not give that rank a result in (a
non-root's buffer in reduce and gather, the other ranks' shares in reducescatter).
A value a rank relays or accumulates without a slot of its own goes to scratch.
"""

from __future__ import annotations

from typing import NamedTuple

from synth.errors import BadInput
from synth.schedule.collectives import Collective

# Collectives whose in-place form drops the input buffer (its data sits in the output)
# and those whose in-place form drops the output buffer (the result sits in the input).
INPUT_IN_OUTPUT = frozenset({"allgather", "gather", "broadcast", "allreduce", "reduce"})
OUTPUT_IN_INPUT = frozenset({"reducescatter", "scatter"})


class Slot(NamedTuple):
    """A chunk's place in one of a rank's buffers. A tuple, not a dataclass: the
    exporters key millions of dict entries by slots, and a tuple hashes and compares in
    C (a tenth of an MSCCL++ build went to a dataclass's generated __hash__ and __eq__)."""
    buf: str  # "i", "o" or "s"
    idx: int

    def __str__(self) -> str:
        return f"{self.buf}[{self.idx}]"


class Layout:
    """The buffer mapping of one collective, in place or out of place."""

    def __init__(self, coll: Collective, inplace: bool):
        if inplace and coll.name == "alltoall":
            raise BadInput("alltoall has no in-place form; export it out of place")
        self.coll, self.inplace = coll, inplace
        self.name, self.n, self.c, self.g = coll.name, coll.ranks, coll.chunks, coll.num_chunks
        self.root = coll.root
        n, c = self.n, self.c
        share = {"allgather": (c, n * c), "gather": (c, n * c), "broadcast": (c, c),
                 "allreduce": (c, c), "reduce": (c, c), "reducescatter": (n * c, c),
                 "scatter": (n * c, c), "alltoall": (n * c, n * c)}
        # Nominal sizes: what a caller passes, in chunks of the runtime's unit.
        self.input_chunks, self.output_chunks = share[self.name]
        self.loop_chunks = max(self.input_chunks, self.output_chunks)
        # Sizes of the buffers the program names (in place: the aliased one is unnamed).
        self.i_chunks = 0 if inplace and self.name in INPUT_IN_OUTPUT else self.input_chunks
        self.o_chunks = 0 if inplace and self.name in OUTPUT_IN_INPUT else self.output_chunks
        self._slots: dict[Slot, Slot] = {}

    def interned(self, slot: Slot) -> Slot:
        """The one Slot object equal to `slot` in this layout: every rank names the same
        slots, and a program holds one per move (a dgx2x2 tree batch's 132,000 took 8 MB
        where 8,000 differ)."""
        return self._slots.setdefault(slot, slot)

    def _alltoall(self, k: int) -> tuple[int, int, int]:
        n, c = self.n, self.c
        return k // (n * c), k // c % n, k % c  # source, destination, piece

    def init_slot(self, rank: int, k: int) -> Slot | None:
        """Where rank's starting value of chunk k is (None: it has none)."""
        slot = self._init_slot(rank, k)
        return slot if slot is None else self._slots.setdefault(slot, slot)

    def _init_slot(self, rank: int, k: int) -> Slot | None:
        name, c, ip = self.name, self.c, self.inplace
        if name in ("allgather", "gather"):
            if k // c != rank:
                return None
            return Slot("o", k) if ip else Slot("i", k % c)
        if name == "broadcast":
            if rank != self.root:
                return None
            return Slot("o", k) if ip else Slot("i", k)
        if name == "scatter":
            return Slot("i", k) if rank == self.root else None
        if name == "alltoall":
            s, d, j = self._alltoall(k)
            return Slot("i", d * c + j) if rank == s else None
        if name == "reducescatter":
            return Slot("i", k)
        return Slot("o", k) if ip else Slot("i", k)  # allreduce, reduce

    def out_slot(self, rank: int, k: int) -> Slot | None:
        """Where the collective wants chunk k on rank at the end (None: nowhere)."""
        slot = self._out_slot(rank, k)
        return slot if slot is None else self._slots.setdefault(slot, slot)

    def _out_slot(self, rank: int, k: int) -> Slot | None:
        name, c, ip = self.name, self.c, self.inplace
        if name in ("allgather", "broadcast", "allreduce"):
            return Slot("o", k)
        if name in ("gather", "reduce"):
            return Slot("o", k) if rank == self.root else None
        if name in ("scatter", "reducescatter"):
            if k // c != rank:
                return None
            return Slot("i", k) if ip else Slot("o", k % c)
        s, d, j = self._alltoall(k)
        return Slot("o", s * c + j) if rank == d else None

    def writable(self, rank: int, k: int, slot: Slot) -> bool:
        """May rank overwrite slot while working on chunk k? Scratch, and its own result."""
        return slot.buf == "s" or slot == self.out_slot(rank, k)

    def describe(self) -> str:
        return (f"{self.name}, {'in place' if self.inplace else 'out of place'}, "
                f"{self.n} ranks, {self.c} chunks per share")


def drop_redundant(coll: Collective, steps) -> list[list]:
    """The sends of each step, without copies to a rank that already holds the chunk in
    a non-combining collective (they change nothing, and exporting them would make a
    rank overwrite a slot it may be reading)."""
    if coll.combining:
        return [list(step.sends) for step in steps]
    g = coll.num_chunks  # (rank, chunk) as one int: a tree batch's 124,000 tuples, 7 MB
    held = {r * g + k for r, k in coll.pre}
    out = []
    for step in steps:
        kept = [x for x in step.sends if x.dst * g + x.chunk not in held]
        held |= {x.dst * g + x.chunk for x in kept}
        out.append(kept)
    return out


def coalesce(copies, max_count: int | None = None) -> list[tuple[Slot, Slot, int]]:
    """Copies (src, dst) of consecutive slots merged into runs (src, dst, count), each
    run at most max_count long: one runtime operation per run instead of per chunk."""
    out = []
    for src, dst in sorted(copies):
        if out:
            s0, d0, cnt = out[-1]
            if ((src.buf, dst.buf) == (s0.buf, d0.buf) and src.idx == s0.idx + cnt
                    and dst.idx == d0.idx + cnt and (max_count is None or cnt < max_count)):
                out[-1] = (s0, d0, cnt + 1)
                continue
        out.append((src, dst, 1))
    return out
