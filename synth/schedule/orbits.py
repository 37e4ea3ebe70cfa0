"""Orbits: a schedule written once per orbit of a group of rank translations.

docs/schedule-file.md, "Version 4". Ranks are mixed-radix coordinates over `dims` (the
last varies fastest, synth.topology.symmetry.Translations); the group H is the
translations along `axes` (the whole grid of a torus: every axis; K alike boxes of G
GPUs: dims (K, G), axis 0). H acts freely (u + v = u only for v = 0), so every rank is
h(r) for exactly one representative r (its coordinates along `axes` set to 0) and one
h in H. A translation moves chunks by the `chunks` rule:

    blocks   the G / N chunks of block b (chunks b G/N .. (b+1) G/N - 1) move with rank b
             (allgather, reducescatter: a block is a share; allreduce built as
             reducescatter then allgather: chunk c is reduced onto rank c // (G/N))
    pairs    alltoall's chunk (s N + d) P + j, P = G / N^2, moves with both s and d

A schedule that H maps onto itself is fixed by the sends into the representatives:
the sends into h(r) are h applied to the sends into r. So `Schedule.steps` hold only
those (with `Schedule.symmetry` set), and `unfold` spells the rest out where a runtime
needs every rank. Step rounds are those of the whole step; `quotient` gives the link
model on which the representatives' loads price a whole step (every link orbit has one
link into a representative, and a group's load is the sum of its links' orbit
representatives' loads).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property

from synth.topology.linkmodel import Group, LinkModel
from synth.topology.symmetry import Translations

RULES = ("blocks", "pairs")
# the collectives whose pre- and postcondition translations keep, by chunks rule (a
# rooted collective's root would move): docs/schedule-file.md, "Version 4"
KEPT = {"blocks": ("allgather", "reducescatter", "allreduce"), "pairs": ("alltoall",)}


@dataclass(frozen=True)
class Orbits:
    dims: tuple[int, ...]
    axes: tuple[int, ...]
    chunks: str = "blocks"  # how a translation moves chunks: RULES

    @cached_property
    def _grid(self) -> Translations:
        return Translations(self.dims)

    @property
    def ranks(self) -> int:
        return math.prod(self.dims)

    @property
    def order(self) -> int:
        """|H|: ranks per orbit."""
        return math.prod(self.dims[a] for a in self.axes)

    @cached_property
    def _parts(self) -> tuple[list[int], list[int]]:
        """Per rank u: its representative r and its translation v (u = r + v)."""
        reps, moves = [], []
        for u in range(self.ranks):
            rep = sum(x * w for a, (x, w) in enumerate(zip(self._grid.coordinates(u),
                                                           self._grid._weights))
                      if a not in self.axes)
            reps.append(rep)
            moves.append(u - rep)  # mixed radix: the two parts' coordinates do not overlap
        return reps, moves

    def split(self, u: int) -> tuple[int, int]:
        """(r, v): rank u is representative r translated by v (v a rank: its
        coordinates are the translation's)."""
        reps, moves = self._parts
        return reps[u], moves[u]

    @cached_property
    def representatives(self) -> tuple[int, ...]:
        return tuple(r for r in range(self.ranks) if self._parts[1][r] == 0)

    @cached_property
    def elements(self) -> tuple[int, ...]:
        """H, each translation as the rank its vector names (0: the identity)."""
        return tuple(r for r in range(self.ranks) if self._parts[0][r] == 0)

    def permutation(self, v: int, back: bool = False) -> list[int]:
        """Every rank translated by v (by -v with `back`): O(N) array operations."""
        import numpy as np  # a schedule's translates are many: not one rank at a time

        coords = self._coordinates
        moved = (coords + (-1 if back else 1) * coords[v]) % np.array(self.dims)
        return (moved @ np.array(self._grid._weights)).tolist()

    @cached_property
    def _coordinates(self):
        import numpy as np

        return np.array([self._grid.coordinates(r) for r in range(self.ranks)],
                        dtype=np.int64).reshape(self.ranks, len(self.dims))

    def move(self, u: int, v: int) -> int:
        return self._grid.shift(u, v)

    def back(self, u: int, v: int) -> int:
        return self._grid.back(u, v)

    def block(self, num_chunks: int) -> int:
        """Chunks per block: G / N (blocks) or G / N^2 (pairs)."""
        n = self.ranks
        return num_chunks // (n if self.chunks == "blocks" else n * n)

    def _move_chunk(self, k: int, perm: list[int], size: int) -> int:
        b, off = divmod(k, size)
        if self.chunks == "blocks":
            return perm[b] * size + off
        s, d = divmod(b, self.ranks)
        return (perm[s] * self.ranks + perm[d]) * size + off

    def move_chunk(self, k: int, v: int, num_chunks: int, back: bool = False) -> int:
        return self._move_chunk(k, self.permutation(v, back), self.block(num_chunks))

    def _images(self, sends, perm: list[int], size: int) -> list:
        # type(x): the sends' own class (synth.schedule.ir.Send: chunk, src, dst, op,
        # count), which imports this module
        return [type(x)(self._move_chunk(x.chunk, perm, size), perm[x.src], perm[x.dst],
                        x.op, x.count) for x in sends]

    def image(self, x, v: int, num_chunks: int, back: bool = False):
        """The send (its range within one block) translated by v (by -v with `back`)."""
        return self._images([x], self.permutation(v, back), self.block(num_chunks))[0]

    def unfold(self, sends, num_chunks: int) -> tuple:
        """Every translate of every send: what the representatives' sends stand for."""
        size, out = self.block(num_chunks), []
        for v in self.elements:
            out += self._images(sends, self.permutation(v), size) if v else sends
        return tuple(out)

    def normalised(self, sends, num_chunks: int) -> tuple:
        """The same sends' orbits, each written by its member into a representative."""
        size, out, perms = self.block(num_chunks), [], {}
        for x in sends:
            v = self.split(x.dst)[1]
            if v and v not in perms:
                perms[v] = self.permutation(v, back=True)
            out.append(self._images([x], perms[v], size)[0] if v else x)
        return tuple(out)

    def fold(self, sends, num_chunks: int) -> tuple | None:
        """The sends into representatives, if H maps `sends` (a set, ranges within
        blocks) onto itself; else None. Checked on the generators: O(sends x axes)."""
        have, size = set(sends), self.block(num_chunks)
        for axis in self.axes:
            if self.dims[axis] == 1:
                continue
            perm = self.permutation(self._grid._weights[axis])
            if any(y not in have for y in self._images(sends, perm, size)):
                return None
        return tuple(x for x in sends if self._parts[1][x.dst] == 0)

    def link_orbit(self, a: int, b: int) -> tuple[int, int]:
        """The link of (a, b)'s orbit that enters a representative."""
        rep, v = self.split(b)
        return (self.back(a, v), rep)

    def link_orbits(self, pairs) -> list[tuple[int, int]]:
        """link_orbit of each (a, b) of `pairs`, in one array pass: at 512 GPUs a
        machine's 2 million group links took 7 s one at a time."""
        import numpy as np

        pairs = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        reps, moves = (np.array(x, dtype=np.int64) for x in self._parts)
        v = moves[pairs[:, 1]]
        back = ((self._coordinates[pairs[:, 0]] - self._coordinates[v])
                % np.array(self.dims)) @ np.array(self._grid._weights)
        return list(zip(back.tolist(), reps[pairs[:, 1]].tolist()))

    def translates(self, pairs):
        """Every translate of the rank pairs by each element of H (in `elements` order):
        an array of shape (|H|, len(pairs), 2), made in one pass."""
        import numpy as np

        pairs = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        shifts = self._coordinates[np.array(self.elements, dtype=np.int64)]
        moved = (self._coordinates[pairs][None, :, :, :] + shifts[:, None, None, :]) \
            % np.array(self.dims)
        return moved @ np.array(self._grid._weights)

    def classes(self, model: LinkModel) -> list[tuple[tuple, object, list[str]]]:
        """The groups by the load they carry under H: (their links' orbit
        representatives, with repetition; capacity; the names of the groups alike).
        Remembered for the last model asked about (each schedule of a job asks)."""
        def make():
            orbit = iter(self.link_orbits([pair for g in model.groups for pair in g.links]))
            found = defaultdict(list)
            for g in model.groups:
                found[(tuple(sorted(next(orbit) for _ in g.links)), g.capacity)].append(
                    g.name)
            return [(links, cap, names) for (links, cap), names in found.items()]

        # the chunks rule moves no link: dims and axes are the whole key
        return last_made(_CLASSES, (self.dims, self.axes), (model,), make)

    def quotient(self, model: LinkModel) -> LinkModel:
        """`model` with each class of groups as one group on orbit representatives:
        the representatives' sends put on its links and groups exactly the loads the
        whole step puts on any link or group of their orbits."""
        def make():
            return replace(model, groups=tuple(Group(names[0], links, cap)
                                               for links, cap, names in self.classes(model)))

        return last_made(_QUOTIENTS, (self.dims, self.axes), (model,), make)

    def to_dict(self) -> dict:
        return {"dims": list(self.dims), "axes": list(self.axes), "chunks": self.chunks}


_QUOTIENTS: dict = {}
_CLASSES: dict = {}


def made_for(table: dict, key, anchors: tuple) -> bool:
    """Whether last_made has `key` made for these very `anchors` (asking costs nothing)."""
    hit = table.get(key)
    return hit is not None and len(hit[0]) == len(anchors) and all(
        a is b for a, b in zip(hit[0], anchors))


def last_made(table: dict, key, anchors: tuple, make):
    """make(), remembered as `table`'s one entry under `key` while each of `anchors` is
    the very object it was made for (compared by identity: an id can be reused): one
    machine at a time, whose schedules in a job share what is made from it."""
    if made_for(table, key, anchors):
        return table[key][1]
    value = make()
    table.clear()
    table[key] = (anchors, value)
    return value


def orbits_of(model: LinkModel, dims: tuple[int, ...], axes: tuple[int, ...],
              chunks: str = "blocks") -> Orbits | None:
    """Orbits over `dims` along `axes` if every unit translation along them maps each
    link onto a link of the same capacity and alpha and each group onto a group of the
    same capacity; else None. O(axes x (links + group links))."""
    if not dims or math.prod(dims) != model.ranks or len(set(axes)) != len(axes) or \
            any(not 0 <= a < len(dims) for a in axes):
        return None
    orbits = Orbits(tuple(dims), tuple(axes), chunks)
    links = {(l.src, l.dst): (l.capacity, l.alpha_us) for l in model.links}
    groups = {(frozenset(g.links), g.capacity) for g in model.groups}
    for axis in axes:
        if dims[axis] == 1:
            continue
        unit = orbits._grid._weights[axis]
        move = [orbits.move(r, unit) for r in range(model.ranks)]
        if any(links.get((move[a], move[b])) != value for (a, b), value in links.items()):
            return None
        if any((frozenset((move[a], move[b]) for a, b in members), cap) not in groups
               for members, cap in groups):
            return None
    return orbits


def box_grid(model: LinkModel, boxes: int, run: int | None = None,
             chunks: str = "blocks") -> Orbits | None:
    """Orbits that move whole boxes, for `boxes` alike boxes of consecutive ranks: the
    shifts of the box index (dims (K, G), axis 0) where they are symmetries; else, for
    the first m dividing K that works, the shifts of the index of runs of m boxes and of
    the box index within every run at once (dims (K / m, m, G), axes 0 and 1: a fabric's
    leaf groups or pods, behind whose oversubscribed uplinks one box shift moves a box
    across a pod's edge); else None. `run`, where known (the pods'), is tried first.
    Each try is first checked on the links at rank 0, so the wrong m mostly costs
    O(their links), not O(all of them)."""
    n = model.ranks
    if boxes < 2 or n % boxes:
        return None
    g = n // boxes
    at_zero = [l for l in model.links if l.src == 0 or l.dst == 0]
    runs = sorted((m for m in range(2, boxes) if boxes % m == 0), key=lambda m: m != run)
    tries = [((boxes, g), (0,))] + [((boxes // m, m, g), (0, 1)) for m in runs]
    for dims, axes in tries:
        if _near_zero(model, at_zero, dims, axes):
            found = orbits_of(model, dims, axes, chunks)
            if found is not None:
                return found
    return None


def _near_zero(model: LinkModel, at_zero: list, dims: tuple[int, ...],
               axes: tuple[int, ...]) -> bool:
    """Whether each unit translation along `axes` maps every link at rank 0 (`at_zero`)
    onto a link of the same capacity and alpha: orbits_of's check where it is cheap."""
    grid = Translations(dims)
    for axis in axes:
        unit = grid._weights[axis]
        for l in at_zero:
            image = model.link.get((grid.shift(l.src, unit), grid.shift(l.dst, unit)))
            if image is None or (image.capacity, image.alpha_us) != (l.capacity, l.alpha_us):
                return False
    return True
