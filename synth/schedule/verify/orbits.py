"""Version 4 files, checked without unfolding them (docs/schedule-file.md, "Version 4").

The group H (translations along some axes of a grid of the ranks) acts freely, so
every rank is r + v for one representative r and one v in H, and the sends into
r + v are those into r moved by v. Once every generator maps the topology onto
itself and H keeps the pre- and postcondition, the state of r + v is the state of r
moved by v (by induction over the steps): only the representatives are simulated, a
read at another rank being a representative's value moved (_OrbitState). A link's
load is the load of the link of its orbit that enters a representative, and a
group's is the sum of those of its links' orbits (_orbit_groups), so capacities are
checked on the representatives' sends alone. Time and memory grow with the
representatives' program, the links and the groups, not with the ranks' sends. A
topology listed per orbit (topology.orbits) is the translates of what it lists, which
H maps onto itself by construction: its links must enter representatives, and its
groups' members be translates of them (_check_listed_per_orbit).
"""

import math
from bisect import bisect_left
from collections import defaultdict

from synth.schedule.verify.document import (COMBINING, _TABLE, ScheduleInvalid, _cut,
                                            _intervals, _ranks)
from synth.schedule.verify.flow import (_check_expanded_loads, _check_loads,
                                        _check_pipeline, _check_range, _check_send,
                                        _first_outside, _loads, _merge, _merged,
                                        _post_holds, _share_size, _union, as_every_batch,
                                        first_mismatch)
from synth.schedule.verify.group import Group

# the (collective, chunks rule) pairs whose pre- and postcondition every translation
# keeps; with any other, only the trivial group does
KEPT = frozenset({("allgather", "blocks"), ("reducescatter", "blocks"),
                  ("allreduce", "blocks"), ("alltoall", "pairs")})


def _verify_orbits(s, doc):
    dims, axes, rule = s.symmetry
    if math.prod(dims) != s.n:
        raise ScheduleInvalid(f"symmetry.dims multiply to {math.prod(dims)}, not the "
                              f"{s.n} ranks")
    if s.switched:
        raise ScheduleInvalid("a version 4 file uses switch operations, which a schedule "
                              "written once per orbit cannot")
    _check_orbit_table(s, rule, len([d for a, d in enumerate(dims) if a in axes and d > 1]))
    grp = Group(dims, axes, rule, s.n, s.g)
    if s.per_orbit:  # the machine is the translates of what is listed: H maps it onto itself
        _check_listed_per_orbit(s, grp)
    else:
        _check_automorphisms(s, grp, _alphas(doc))
    q = s._replace(groups=_orbit_groups(s, grp))  # capacities: on orbit representatives
    spans, cuts = _canonical_spans(s, grp)
    if s.pipeline is not None:
        _check_pipeline(s, spans, grp.block)
    state = _OrbitState(s, grp)
    with as_every_batch(s):
        _simulate_orbits(q, grp, state, cuts)
    _check_orbit_post(s, grp, state, spans, cuts)
    if s.pipeline is not None:
        _check_expanded_loads(q)


def _check_orbit_table(s, rule, moving_axes):
    """num_chunks, the chunks rule's blocks, the group keeping the collective's
    conditions, and pre and post as the representatives' part of the table."""
    g_kind, pre_kind, post_kind = _TABLE[s.collective]
    g = {"C": s.c, "N*C": s.n * s.c, "N*N*C": s.n * s.n * s.c}[g_kind]
    if s.g != g:
        raise ScheduleInvalid(f"num_chunks is {s.g}, but {s.collective} on {s.n} ranks "
                              f"with {s.c} chunks has {g}")
    per = s.n if rule == "blocks" else s.n * s.n
    if g % per:
        raise ScheduleInvalid(f"the chunks rule {rule!r} moves blocks of num_chunks / {per} "
                              f"chunks, but num_chunks is {g}")
    if moving_axes and (s.collective, rule) not in KEPT:
        raise ScheduleInvalid(f"translations that move chunks by the rule {rule!r} do not "
                              f"keep {s.collective}'s pre- and postcondition")
    reps = set(_representatives(s))
    for name, kind, got in (("pre", pre_kind, s.pre), ("post", post_kind, s.post)):
        stray = next((r for r, _, _ in got if r not in reps), None)
        if stray is not None:
            raise ScheduleInvalid(f"{name} lists rank {stray}, which is not a representative "
                                  "(a version 4 file lists the representatives' only)")
        if kind == "dst":  # not all of the table: N x N intervals
            want = {d: [((x * s.n + d) * s.c, (x * s.n + d + 1) * s.c) for x in range(s.n)]
                    for d in reps}
        else:
            want = {r: v for r, v in _intervals(kind, s.n, s.c, g, s.root).items() if r in reps}
        wrong = first_mismatch(want, _merged(got))
        if wrong is not None:
            raise ScheduleInvalid(f"{name} does not match {s.collective}'s {name}condition "
                                  f"on the representatives ({wrong})")


def _representatives(s):
    dims, axes, rule = s.symmetry
    return Group(dims, axes, rule, s.n, s.g).representatives()


def _alphas(doc):
    """{(src, dst): alpha_us} of topology.links (0 where none is given), already
    checked by parse."""
    return {(item[0], item[1]): item[3] if len(item) == 4 else 0
            for item in doc["topology"]["links"]}


def _check_automorphisms(s, grp, alphas):
    """Each generator maps every link onto a link of the same capacity and alpha, and
    every group onto a group of the same capacity (so H, which they generate, does)."""
    groups = {(frozenset(members), cap) for _, members, cap in s.groups}
    for v in grp.generators():
        move = [grp.shift(u, v) for u in range(s.n)]
        what = f"the translation by {list(grp.coordinates(v))}"
        for (a, b), cap in s.links.items():
            image = (move[a], move[b])
            if s.links.get(image) != cap or alphas[image] != alphas[(a, b)]:
                why = ("is not a link" if image not in s.links else
                       "has another capacity" if s.links[image] != cap else
                       "has another alpha")
                raise ScheduleInvalid(f"{what} maps link {a}->{b} onto {image[0]}->{image[1]}, "
                                      f"which {why}: it is not a symmetry of the topology",
                                      None, None, (a, b))
        for name, members, cap in s.groups:
            if (frozenset((move[a], move[b]) for a, b in members), cap) not in groups:
                raise ScheduleInvalid(f"{what} maps group {_cut(repr(name))} onto links that "
                                      "are no group of the same capacity: it is not a "
                                      "symmetry of the topology")


def _check_listed_per_orbit(s, grp):
    """A topology listed per orbit: every link enters a representative (so no two are
    one orbit's), and every group member's orbit is a listed link's."""
    for a, b in s.links:
        if grp.split(b)[1]:
            raise ScheduleInvalid(f"topology.orbits: link {a}->{b} does not enter a "
                                  "representative", None, None, (a, b))
    for name, members, _ in s.groups:
        for a, b in members:
            rep, v = grp.split(b)
            if (grp.shift(a, v, -1), rep) not in s.links:
                raise ScheduleInvalid(f"topology.orbits: group {_cut(repr(name))} holds "
                                      f"{a}->{b}, whose orbit is no listed link")


def _orbit_groups(s, grp):
    """The groups as capacity constraints on the representatives' links: a member link
    replaced by the link of its orbit that enters a representative (repeated as often
    as the group holds that orbit); groups that become the same constraint, once."""
    classes = {}
    for name, members, cap in s.groups:
        links = []
        for a, b in members:
            rep, v = grp.split(b)
            links.append((grp.shift(a, v, -1), rep))
        classes.setdefault((tuple(sorted(links)), cap), name)
    return [(name, list(links), cap) for (links, cap), name in classes.items()]


def _canonical(grp, k):
    """Chunk k moved into the block of its orbit that a representative owns."""
    b, off = divmod(k, grp.block)
    return grp.canonical_block(b) * grp.block + off


def _canonical_spans(s, grp):
    """Every send goes into a representative, and its range stays in one block. The
    chunk intervals the whole program touches in representatives' blocks (each send's
    range moved into the block of its orbit a representative owns), merged; and every
    boundary of those moved ranges, sorted: between two, every block of the orbit is
    moved by the same translated sends (an elementary piece, as in version 2)."""
    spans, cuts = defaultdict(list), set()
    for i, (_, sends) in enumerate(s.steps):
        for chunk, count, src, dst, _ in sends:
            if grp.split(dst)[1]:
                raise ScheduleInvalid(f"a send of chunk {chunk} from rank {src} to rank {dst}, "
                                      f"which is not a representative (a version 4 file "
                                      "lists the sends into them only)", i, chunk, (src, dst))
            last = chunk + count - 1
            if not (0 <= chunk and last < s.g):
                continue  # simulate says so, in its words
            if chunk // grp.block != last // grp.block:
                raise ScheduleInvalid(f"chunks {chunk}..{last} sent from rank {src} to rank "
                                      f"{dst} leave their block of {grp.block} chunks (the "
                                      "chunks rule moves blocks whole)", i, chunk, (src, dst))
            start = _canonical(grp, chunk)
            spans[start // grp.block].append((start, start + count))
            cuts.update((start, start + count))
    return [span for b in sorted(spans) for span in _union(spans[b])], sorted(cuts)


def _simulate_orbits(s, grp, state, cuts):
    """`simulate` on the representatives' sends, one chunk per piece: a send's range is
    cut where its orbit's canonical ranges are (`cuts`), each piece simulated by its
    first chunk in the send's own block; a read at another rank is a representative's
    value (_OrbitState), found at the same piece of another block of the orbit."""
    per = _share_size(s)
    for i, (rounds, sends) in enumerate(s.steps):
        writes = {}
        for chunk, count, src, dst, op in sends:
            _check_range(s, i, chunk, count, src, dst, per)
            start = _canonical(grp, chunk)
            for first in cuts[bisect_left(cuts, start):bisect_left(cuts, start + count)]:
                k = chunk + first - start
                _check_send(s, i, state, k, src, dst, op)
                writes.setdefault((dst, k), []).append((op, src, state[(src, k)]))
        merged = {key: _merge(i, *key, w, state.get(key)) for key, w in writes.items()}
        if s.pipeline is None:
            _check_loads(s, i, rounds, _loads(sends))
        state.update(merged)


class _OrbitState:
    """The state of every rank, kept for the representatives: rank r + v holds at chunk
    k what r holds at k moved by -v, its contributors moved by v. Unwritten pairs hold
    what the precondition gives them."""

    def __init__(self, s, grp):
        self.s, self.grp, self.written = s, grp, {}
        self.pre_kind = _TABLE[s.collective][1]
        self.combining = s.collective in COMBINING

    def _own(self, r, k):
        if (r, k) in self.written:
            return self.written[(r, k)]
        s = self.s
        return 1 << r if r in _ranks(self.pre_kind, k, s.n, s.c, s.root) else None

    def get(self, key, default=None):
        u, k = key
        r, v = self.grp.split(u)
        if not v:
            value = self._own(u, k)
        else:
            value = self._own(r, self.grp.move_chunk(k, v, -1))
            if value is not None and self.combining:
                value = self.grp.move_mask(value, v)
        return default if value is None else value

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def update(self, values):
        self.written.update(values)  # _canonical_spans: every dst is a representative


def _check_orbit_post(s, grp, state, spans, cuts):
    """Every representative that wants a piece some send of batch 0 moves (the spans'
    pieces' translates) holds it right; a block's chunks no batch touches are needed by
    no one."""
    _, pre_kind, post_kind = _TABLE[s.collective]
    everyone = (1 << s.n) - 1
    reps, elements = grp.representatives(), grp.elements()
    block = grp.block
    for lo, hi in spans:
        b = lo // block
        pieces = cuts[bisect_left(cuts, lo):bisect_left(cuts, hi)]
        for v in elements:
            shift = (grp.move_block(b, v) - b) * block
            for k in (first + shift for first in pieces):
                for r in reps:
                    if r in _ranks(post_kind, k, s.n, s.c, s.root):
                        _post_holds(s, state, r, k, everyone)
    batches, stride = (s.pipeline[0], s.pipeline[1]) if s.pipeline else (1, 0)
    by_block = defaultdict(list)
    for lo, hi in spans:
        by_block[lo // block].extend((lo + b * stride, hi + b * stride) for b in range(batches))
    owners = reps if grp.rule == "blocks" else [r * s.n + d for r in reps for d in range(s.n)]
    for b in owners:
        start = b * block
        wanters = set(_ranks(post_kind, start, s.n, s.c, s.root))
        holders = set(_ranks(pre_kind, start, s.n, s.c, s.root))
        if not ((wanters and s.collective in COMBINING and s.n > 1) or (wanters - holders)):
            continue
        k = _first_outside([(start, start + block)], _union(by_block.get(b, [])))
        if k is not None:
            rank = min(wanters - holders) if wanters - holders else min(wanters)
            raise ScheduleInvalid(f"after the last step rank {rank} does not hold chunk {k}"
                                  + (" (no batch moves it)" if s.pipeline else ""),
                                  None, k, (rank,))
