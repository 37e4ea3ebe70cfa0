"""Collectives as pre- and postconditions over global chunks (docs/schedule-file.md's table).

N ranks, C chunks per rank share, G global chunks. For combining collectives the
precondition says which ranks contribute to a chunk (every holder does) and the
postcondition asks for the full sum.

Who holds and who wants chunk k follows from k's share alone (`holders`, `wanters`,
by formula), so a collective of millions of (rank, chunk) pairs costs nothing until
`pre` or `post` is asked for as a set; `pre_ranges` and `post_ranges` give them as
(rank, first chunk, count) runs, as a version 2 file writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from synth.errors import BadInput
from synth.files import quote

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce",
               "gather", "scatter", "alltoall")
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
WHOLE_BUFFER = frozenset({"allreduce", "broadcast", "reduce"})  # one share: the buffer
# Past this many (rank, chunk) pairs in a condition, asking for it as a set would fill
# gigabytes: pre and post are refused as sets past it (ranges and formulas still work).
MAX_PAIRS = 20_000_000
# The non-combining collective whose reversal gives each combining one (SCCL's duality).
DUAL = {"reducescatter": "allgather", "reduce": "broadcast"}

# name: (who holds chunk k at the start, who must hold it at the end); "own": the rank
# k // C, "src" / "dst": s / d of alltoall chunk (s N + d) C + j
_CONDITIONS = {
    "allgather": ("own", "all"), "reducescatter": ("all", "own"),
    "allreduce": ("all", "all"), "broadcast": ("root", "all"), "reduce": ("all", "root"),
    "gather": ("own", "root"), "scatter": ("root", "own"), "alltoall": ("src", "dst"),
}


@dataclass(frozen=True)
class Collective:
    name: str
    ranks: int
    chunks: int  # C: pieces of one rank's share
    root: int | None
    num_chunks: int  # G

    @property
    def combining(self) -> bool:
        return self.name in COMBINING

    @property
    def buffer_chunks(self) -> int:
        """Chunks in the per-rank buffer nccl-tests sizes messages by (docs/schedule-file.md)."""
        return self.chunks if self.name in WHOLE_BUFFER else self.ranks * self.chunks

    @property
    def share_chunks(self) -> int:
        """Chunks per share: a chunk range (and a pipeline's shift) stays in one share."""
        return self.num_chunks if self.name in WHOLE_BUFFER else self.chunks

    def holders(self, chunk: int) -> list[int]:
        return self._who(_CONDITIONS[self.name][0], chunk)

    def wanters(self, chunk: int) -> list[int]:
        return self._who(_CONDITIONS[self.name][1], chunk)

    def _who(self, kind: str, k: int) -> list[int]:
        n, c = self.ranks, self.chunks
        if kind == "all":
            return list(range(n))
        return [{"root": self.root, "own": k // c, "src": k // c // n,
                 "dst": k // c % n}[kind]]

    def pre_ranges(self) -> list[tuple[int, int, int]]:
        return self._ranges(_CONDITIONS[self.name][0])

    def post_ranges(self) -> list[tuple[int, int, int]]:
        return self._ranges(_CONDITIONS[self.name][1])

    def _ranges(self, kind: str) -> list[tuple[int, int, int]]:
        """The condition as sorted (rank, first chunk, count) runs."""
        n, c, g = self.ranks, self.chunks, self.num_chunks
        if kind == "all":
            return [(r, 0, g) for r in range(n)]
        if kind == "root":
            return [(self.root, 0, g)]
        if kind == "own":
            return [(r, r * c, c) for r in range(n)]
        if kind == "src":
            return [(s, s * n * c, n * c) for s in range(n)]
        return [(d, (s * n + d) * c, c) for d in range(n) for s in range(n)]

    @cached_property
    def pre(self) -> frozenset[tuple[int, int]]:
        """(rank, chunk) pairs of the precondition, built on first use."""
        return self._pairs(self.pre_ranges())

    @cached_property
    def post(self) -> frozenset[tuple[int, int]]:
        return self._pairs(self.post_ranges())

    def _pairs(self, ranges) -> frozenset[tuple[int, int]]:
        size = sum(count for _, _, count in ranges)
        if size > MAX_PAIRS:
            raise BadInput(f"{self.name} on {self.ranks} ranks with {self.chunks} chunks is "
                           f"too large to list ({size:,} (rank, chunk) pairs; the limit is "
                           f"{MAX_PAIRS:,})")
        return frozenset((r, k) for r, first, count in ranges
                         for k in range(first, first + count))


def make_collective(name: str, ranks: int, chunks: int = 1, root: int | None = None
                    ) -> Collective:
    """The collective `name` on `ranks` ranks with `chunks` pieces per share."""
    if name not in COLLECTIVES:
        raise BadInput(f"unknown collective '{name}' (expected one of {', '.join(COLLECTIVES)})")
    if ranks < 1:
        raise BadInput(f"{name}: expected at least one rank")
    if chunks < 1:
        raise BadInput(f"{name}: chunks must be at least 1, got {chunks}")
    if name in ROOTED:
        root = 0 if root is None else root
        if not 0 <= root < ranks:
            raise BadInput(f"{name}: root {quote(root)} is not a rank (0..{ranks - 1})")
    elif root is not None:
        raise BadInput(f"{name} takes no root")
    g = {"alltoall": ranks * ranks * chunks}.get(name, chunks if name in WHOLE_BUFFER
                                                   else ranks * chunks)
    return Collective(name, ranks, chunks, root, g)
