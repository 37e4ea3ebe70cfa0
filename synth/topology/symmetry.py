"""Translations: a group of symmetries that acts on the ranks as a grid's shifts do.

Rank r has mixed-radix coordinates over `dims` (the last varies fastest: a torus's
row-major numbering; a hypercube's bits over dims (2, 2, ...)); the translation by v
maps u to u + v, coordinate by coordinate, modulo dims. The group is abelian, and for
any two ranks exactly one translation maps the first onto the second (it acts
regularly), so a schedule that every translation maps onto itself is fixed by what one
rank receives: synth.construct.greedy builds such schedules for rank 0 alone.

The generators (synth.topology.catalog.generate) know which of their graphs the shifts
map onto themselves (rings, tori, hypercubes, fully connected graphs, GPUs around one
switch); `translations_of` checks that against the link model (each shift by one along
a dimension maps every link onto a link of the same capacity and latency, and every
group onto a group of the same capacity), so a wrong claim is refused, not trusted.
Cost: O(len(dims) x (links + group links)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from synth.topology.linkmodel import LinkModel


@dataclass(frozen=True)
class Translations:
    dims: tuple[int, ...]

    @cached_property
    def _weights(self) -> tuple[int, ...]:
        weights, w = [], 1
        for d in reversed(self.dims):
            weights.append(w)
            w *= d
        return tuple(reversed(weights))

    @property
    def order(self) -> int:
        return math.prod(self.dims)

    def coordinates(self, rank: int) -> tuple[int, ...]:
        return tuple(rank // w % d for w, d in zip(self._weights, self.dims))

    def shift(self, u: int, v: int) -> int:
        """u translated by v (the translation that maps rank 0 onto rank v)."""
        return sum((a + b) % d * w for a, b, d, w in
                   zip(self.coordinates(u), self.coordinates(v), self.dims, self._weights))

    def back(self, u: int, v: int) -> int:
        """u translated by -v."""
        return sum((a - b) % d * w for a, b, d, w in
                   zip(self.coordinates(u), self.coordinates(v), self.dims, self._weights))

    def table(self):
        """shift(u, v) for every u (rows) and v, as a numpy array of N x N ints: for
        writing a schedule out, which holds about as many sends anyway."""
        import numpy as np

        coords = np.array([self.coordinates(r) for r in range(self.order)], dtype=np.int64)
        summed = (coords[:, None, :] + coords[None, :, :]) % np.array(self.dims)
        return summed @ np.array(self._weights)


def translations_of(model: LinkModel, dims: tuple[int, ...]) -> Translations | None:
    """Translations over `dims` if each unit shift is a symmetry of `model` (module
    docstring), else None."""
    if not dims or math.prod(dims) != model.ranks:
        return None
    t = Translations(tuple(dims))
    links = {(l.src, l.dst): (l.capacity, l.alpha_us) for l in model.links}
    groups = {frozenset(g.links): g.capacity for g in model.groups}
    for axis in range(len(dims)):
        unit = t._weights[axis] if dims[axis] > 1 else 0
        move = [t.shift(r, unit) for r in range(model.ranks)]
        if any(links.get((move[a], move[b])) != value for (a, b), value in links.items()):
            return None
        if any(groups.get(frozenset((move[a], move[b]) for a, b in members)) != capacity
               for members, capacity in groups.items()):
            return None
    return t
