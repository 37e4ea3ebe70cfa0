"""The group arithmetic of version 4 schedule files, for the independent verifier.

docs/schedule-file.md, "Version 4". Part of the checker (synth/schedule/verify/): it
imports nothing of synth's, and synth's own constructions do not use it
(synth/schedule/orbits.py is their side), so a bug in one cannot hide behind the other.

Rank u has coordinates over `dims` (the last varies fastest); the group is the
translations along `axes`. A translation is named by the rank whose coordinates are its
vector (zero off the axes), so rank u = r + v with r its representative (its
coordinates along the axes zeroed) and v its translation: freeness and the
decomposition are plain arithmetic. A translation moves chunk blocks by the file's rule
("blocks": block b of G/N chunks with rank b; "pairs": alltoall block (s, d) of G/N^2
chunks with both), offsets within a block kept; and a set of contributing ranks (a bit
mask) by rotating it along each axis, a few big-integer operations.
"""

import math


class Group:
    def __init__(self, dims, axes, rule, n, g):
        self.dims, self.axes, self.rule, self.n = tuple(dims), tuple(axes), rule, n
        weights, w = [], 1
        for d in reversed(self.dims):
            weights.append(w)
            w *= d
        self.weights = tuple(reversed(weights))
        self.order = math.prod(self.dims[a] for a in self.axes)
        self.block = g // (n if rule == "blocks" else n * n)  # chunks per block
        self._rotations = {}

    def coordinates(self, u):
        return tuple(u // w % d for w, d in zip(self.weights, self.dims))

    def split(self, u):
        """(representative, translation) of rank u."""
        rep = sum(u // w % d * w for a, (w, d) in enumerate(zip(self.weights, self.dims))
                  if a not in self.axes)
        return rep, u - rep

    def shift(self, u, v, sign=1):
        """u translated by v (by -v with sign -1)."""
        return sum((a + sign * b) % d * w for a, b, d, w in
                   zip(self.coordinates(u), self.coordinates(v), self.dims, self.weights))

    def generators(self):
        """The unit translation along each axis (none along an axis of size 1)."""
        return [self.weights[a] for a in self.axes if self.dims[a] > 1]

    def elements(self):
        """Every translation: the ranks whose coordinates off the axes are zero."""
        out = [0]
        for a in self.axes:
            out = [v + i * self.weights[a] for v in out for i in range(self.dims[a])]
        return out

    def representatives(self):
        out = [0]
        for a in range(len(self.dims)):
            if a not in self.axes:
                out = [r + i * self.weights[a] for r in out for i in range(self.dims[a])]
        return sorted(out)

    def move_block(self, b, v, sign=1):
        if self.rule == "blocks":
            return self.shift(b, v, sign)
        s, d = divmod(b, self.n)
        return self.shift(s, v, sign) * self.n + self.shift(d, v, sign)

    def move_chunk(self, k, v, sign=1):
        b, off = divmod(k, self.block)
        return self.move_block(b, v, sign) * self.block + off

    def canonical_block(self, b):
        """The block of b's orbit that a representative owns (pairs: as source)."""
        owner = b if self.rule == "blocks" else b // self.n
        return self.move_block(b, self.split(owner)[1], -1)

    def move_mask(self, mask, v):
        """A set of ranks (bit r: rank r) translated by v."""
        for a in self.axes:
            x = v // self.weights[a] % self.dims[a]
            if x:
                low, span, s = self._rotation(a, x)
                mask = ((mask & low) << s) | ((mask & ~low) >> (span - s))
        return mask

    def _rotation(self, a, x):
        """For a shift by x along axis a: the bits that stay in their run of
        dims[a] x weights[a] bits when moved up by x x weights[a], the run, the move."""
        key = (a, x)
        if key not in self._rotations:
            span, s = self.dims[a] * self.weights[a], x * self.weights[a]
            pattern = (1 << (span - s)) - 1
            runs = self.n // span
            low = sum(pattern << (i * span) for i in range(runs))
            self._rotations[key] = (low, span, s)
        return self._rotations[key]
