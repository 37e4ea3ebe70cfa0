"""Collectives as pre- and postconditions over global chunks (docs/schedule-file.md's table).

N ranks, C chunks per rank share, G global chunks. For combining collectives the
precondition says which ranks contribute to a chunk (every holder does) and the
postcondition asks for the full sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.errors import BadInput

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce",
               "gather", "scatter", "alltoall")
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
# Past this many (rank, chunk) pairs the conditions alone would fill gigabytes.
MAX_PAIRS = 20_000_000
# The non-combining collective whose reversal gives each combining one (SCCL's duality).
DUAL = {"reducescatter": "allgather", "reduce": "broadcast"}


@dataclass(frozen=True)
class Collective:
    name: str
    ranks: int
    chunks: int  # C: pieces of one rank's share
    root: int | None
    num_chunks: int  # G
    pre: frozenset[tuple[int, int]]  # (rank, chunk)
    post: frozenset[tuple[int, int]]

    @property
    def combining(self) -> bool:
        return self.name in COMBINING

    @property
    def buffer_chunks(self) -> int:
        """Chunks in the per-rank buffer nccl-tests sizes messages by (docs/schedule-file.md)."""
        return self.chunks if self.name in ("allreduce", "broadcast", "reduce") \
            else self.ranks * self.chunks

    def holders(self, chunk: int) -> list[int]:
        return sorted(r for r, c in self.pre if c == chunk)

    def wanters(self, chunk: int) -> list[int]:
        return sorted(r for r, c in self.post if c == chunk)


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
            raise BadInput(f"{name}: root {root} is not a rank (0..{ranks - 1})")
    elif root is not None:
        raise BadInput(f"{name} takes no root")

    n, c = ranks, chunks
    g = {"alltoall": n * n * c, "allreduce": c, "broadcast": c, "reduce": c}.get(name, n * c)
    pairs = n * g  # the largest pre- or postcondition: every rank, every chunk
    if pairs > MAX_PAIRS:
        raise BadInput(f"{name} on {ranks} ranks with {chunks} chunks is too large "
                       f"({pairs:,} (rank, chunk) pairs; the limit is {MAX_PAIRS:,})")
    everyone = range(n)
    if name == "alltoall":
        g = n * n * c
        pre = {(k // c // n, k) for k in range(g)}
        post = {(k // c % n, k) for k in range(g)}
    elif name in ("allreduce", "broadcast", "reduce"):
        g = c
        full = {(r, k) for r in everyone for k in range(g)}
        at_root = {(root, k) for k in range(g)}
        pre, post = {"allreduce": (full, full), "broadcast": (at_root, full),
                     "reduce": (full, at_root)}[name]
    else:
        g = n * c
        owned = {(k // c, k) for k in range(g)}
        full = {(r, k) for r in everyone for k in range(g)}
        at_root = {(root, k) for k in range(g)}
        pre, post = {"allgather": (owned, full), "reducescatter": (full, owned),
                     "gather": (owned, at_root), "scatter": (at_root, owned)}[name]
    return Collective(name, n, c, root, g, frozenset(pre), frozenset(post))
