"""Recursive doubling, recursive halving and their composition, on N = 2^L ranks whose
partners r xor 2^k are linked both ways (hypercubes, complete graphs, dgx1).

  allgather, recursive doubling: L steps; step i doubles what each rank holds by
      swapping it with the partner across dimension i.
  reducescatter, recursive halving: L steps; step i hands the partner the half of the
      still-wanted sums that lie on its side of dimension i.
  allreduce, recursive doubling: L steps, each swapping and adding the whole buffer.
  allreduce, recursive halving-doubling (Rabenseifner): halving then doubling, 2L steps.

The order of the dimensions is free; with links of mixed capacity it matters (the last
doubling step moves half the data), so every order is tried when L <= 4, else the
rank order, its reverse and the orders by the dimensions' capacities.
"""

from __future__ import annotations

import itertools

from synth.construct.baselines.baseline import Baseline
from synth.construct.moves import Moves, assemble_widest, best_lanes, in_sequence
from synth.topology.linkmodel import LinkModel

DOUBLING, HALVING, BOTH = "recursive doubling", "recursive halving", "recursive halving-doubling"
APPLIES = {DOUBLING: ("allgather", "allreduce"), HALVING: ("reducescatter",),
           BOTH: ("allreduce",)}
MAX_ORDERED_DIMS = 4  # try all L! dimension orders up to this L (24 orders)


def recursive_baseline(model: LinkModel, collective: str, algorithm: str) -> Baseline | str:
    """`algorithm` (DOUBLING, HALVING or BOTH) for `collective`, or why it does not apply.
    C = 1 (allgather, reducescatter, allreduce by doubling) or N (halving-doubling),
    times lanes."""
    if collective not in APPLIES[algorithm]:
        return f"only for {' and '.join(APPLIES[algorithm])}"
    n = model.ranks
    if n < 2 or n & (n - 1):
        return f"{n} ranks is not a power of two"
    dims = n.bit_length() - 1
    for r in range(n):
        for k in range(dims):
            if (r, r ^ (1 << k)) not in model.link:
                return f"no link {r}->{r ^ (1 << k)} between partners across bit {k}"
    orders = _orders(model, dims)
    make = {("allgather", DOUBLING): lambda o: _doubling(n, o),
            ("reducescatter", HALVING): lambda o: _halving(n, o),
            ("allreduce", DOUBLING): lambda o: _exchange(n, o),
            ("allreduce", BOTH): lambda o: in_sequence(_halving(n, o), _doubling(n, o[::-1]))
            }[(collective, algorithm)]
    order = min(orders, key=lambda o: best_lanes(model, make(o))[1])
    chunks = n if algorithm == BOTH else 1
    info = {"algorithm": algorithm, "dimension_order": list(order)}
    return Baseline(algorithm, assemble_widest(model, collective, chunks, None, make(order),
                                               info), algorithm)


def _orders(model: LinkModel, dims: int) -> list[tuple[int, ...]]:
    """Dimension orders worth trying (the best is then picked by its cost)."""
    if dims <= MAX_ORDERED_DIMS:
        return list(itertools.permutations(range(dims)))
    width = {d: min(model.link[(r, r ^ (1 << d))].capacity for r in range(model.ranks))
             for d in range(dims)}
    by_width = tuple(sorted(range(dims), key=lambda d: (width[d], d)))
    orders = [tuple(range(dims)), tuple(reversed(range(dims))), by_width, by_width[::-1]]
    return list(dict.fromkeys(orders))


def _block(r: int, dims) -> list[int]:
    """The ranks that differ from r only in the bits `dims`."""
    out = [r]
    for d in dims:
        out += [q ^ (1 << d) for q in out]
    return sorted(out)


def _doubling(n: int, order) -> Moves:
    """Allgather, chunk q owned by rank q: before step i, r holds the chunks of the
    ranks differing from it in the first i dimensions, and sends them all across."""
    return [[(q, r, r ^ (1 << d), "copy") for r in range(n) for q in _block(r, order[:i])]
            for i, d in enumerate(order)]


def _halving(n: int, order) -> Moves:
    """Reducescatter, chunk o owned by rank o: in step i, r sends (adds) to its partner p
    the chunks it still carries whose owners lie on p's side of dimension i: owners
    agreeing with r on the dimensions before i and with p on dimension i."""
    moves = []
    for i, d in enumerate(order):
        rest = [e for e in range(n.bit_length() - 1) if e not in order[:i + 1]]
        step = []
        for r in range(n):
            p = r ^ (1 << d)
            step += [(o, r, p, "reduce") for o in _block(p, rest)]
        moves.append(step)
    return moves


def _exchange(n: int, order) -> Moves:
    """Allreduce of one chunk: in each step every rank adds its sum into its partner's."""
    return [[(0, r, r ^ (1 << d), "reduce") for r in range(n)] for d in order]
