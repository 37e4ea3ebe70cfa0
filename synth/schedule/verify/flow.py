"""The semantics of a parsed schedule (docs/schedule-file.md): the simulation of its
steps and every check on it; everything here raises ScheduleInvalid.

Version 2 forms are checked without unrolling them (the package's docstring says how):
ranges as elementary intervals, one chunk of each simulated; pipelines as batch 0 plus
the arithmetic that every batch does what batch 0 does, with capacities checked per
expanded step on a sliding sum of the active batches' loads.
"""

import heapq
import math
from bisect import bisect_left
from collections import Counter, defaultdict, deque
from contextlib import contextmanager

from synth.schedule.verify.document import (COMBINING, TOLERANCE, _TABLE, ScheduleInvalid,
                                            _cut, _intervals, _ranks)
def _share_size(s):
    """Chunks per share: allreduce, broadcast and reduce have one share, the buffer;
    the others C (a rank's share, or for alltoall one (source, destination) block)."""
    return s.g if _TABLE[s.collective][0] == "C" else s.c


def _check_version(s):
    if s.version < 3 and s.switched:
        raise ScheduleInvalid(f"a version {s.version} file uses switch operations, a "
                              "version 3 form")
    if s.problem is not None:  # a switch operation its switch cannot do
        raise s.problem
    if s.version == 1 and s.compact:
        what = ("a pipeline" if s.pipeline is not None else
                "chunk ranges (a count, or [rank, chunk, count] in pre or post)")
        raise ScheduleInvalid(f"a version 1 file uses {what}, a version 2 form")


def _merged(entries):
    """{rank: sorted disjoint [start, end) intervals} of (rank, chunk, count) entries."""
    by_rank = defaultdict(list)
    for rank, chunk, count in entries:
        by_rank[rank].append((chunk, chunk + count))
    return {r: _union(spans) for r, spans in by_rank.items()}


def _union(spans):
    out = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _first_outside(spans, cover):
    """The first chunk of `spans` (sorted disjoint intervals) not in `cover`, or None."""
    j = 0
    for lo, hi in spans:
        k = lo
        while k < hi:
            while j < len(cover) and cover[j][1] <= k:
                j += 1
            if j == len(cover) or cover[j][0] > k:
                return k
            k = cover[j][1]
    return None


def _check_table(s):
    # sizes first, by arithmetic: a file claiming 10**12 chunks must not make us build
    # anything that large; once they match, nothing built is larger than the file
    g_kind, pre_kind, post_kind = _TABLE[s.collective]
    g = {"C": s.c, "N*C": s.n * s.c, "N*N*C": s.n * s.n * s.c}[g_kind]
    if s.g != g:
        raise ScheduleInvalid(f"num_chunks is {s.g}, but {s.collective} on {s.n} ranks "
                              f"with {s.c} chunks has {g}")
    for name, kind, got in (("pre", pre_kind, s.pre), ("post", post_kind, s.post)):
        # entries the column needs at least (as ranges), and (rank, chunk) pairs it has
        pieces = {"dst": s.n * s.n, "root": 1}.get(kind, s.n) if g else 0
        covered = sum(count for _, _, count in got)
        size = s.n * g if kind == "all" else g
        if len(got) < pieces or (covered < size and size > 100_000):
            raise ScheduleInvalid(f"{name} lists {covered} (rank, chunk) pairs, but "
                                  f"{s.collective}'s {name}condition has {size}")
        want = _intervals(kind, s.n, s.c, g, s.root)
        wrong = first_mismatch(want, _merged(got))
        if wrong is not None:
            raise ScheduleInvalid(f"{name} does not match {s.collective}'s "
                                  f"{name}condition ({wrong})")


def first_mismatch(want: dict, have: dict) -> str | None:
    """'missing [rank, chunk]' or 'extra [rank, chunk]': the first chunk one of two
    {rank: intervals} tables holds and the other does not; None where they match."""
    for a, b, what in ((want, have, "missing"), (have, want, "extra")):
        for rank in sorted(a):
            k = _first_outside(a[rank], b.get(rank, []))
            if k is not None:
                return f"{what} [{rank}, {k}]"
    return None


@contextmanager
def as_every_batch(s):
    """Batch 0 of a pipeline stands for every batch: what its simulation finds wrong
    is said of every batch."""
    try:
        yield
    except ScheduleInvalid as e:
        if s.pipeline is None:
            raise
        raise ScheduleInvalid(f"{e.message} (in batch 0, and so in every batch: the "
                              "program repeats)", e.step, e.chunk, e.ranks) from None


def _check_send(s, i, state, chunk, src, dst, op):
    if ((src, dst) in s.links and (src, chunk) in state
            and (op == "copy" or (s.collective in COMBINING and (dst, chunk) in state))):
        return  # the common case, without building the messages below
    where = dict(step=i, chunk=chunk, ranks=(src, dst))
    what = f"chunk {chunk} {'sent' if op == 'copy' else 'reduced'} from rank {src} to rank {dst}"
    if (src, dst) not in s.links:
        raise ScheduleInvalid(f"{what}, but there is no link {src}->{dst}", **where)
    if op == "reduce" and s.collective not in COMBINING:
        raise ScheduleInvalid(f"{what}, but {s.collective} does not combine", **where)
    if (src, chunk) not in state:
        raise ScheduleInvalid(f"{what}, but rank {src} does not hold it", **where)
    if op == "reduce" and (dst, chunk) not in state:
        raise ScheduleInvalid(f"{what}, but rank {dst} holds nothing to reduce into", **where)


def _check_range(s, i, chunk, count, src, dst, per):
    """A send's chunks must exist and lie in one share."""
    last = chunk + count - 1
    if 0 <= chunk and last < s.g and chunk // per == last // per:
        return
    what = (f"chunk {chunk}" if count == 1 else f"chunks {chunk}..{last}") + \
        f" sent from rank {src} to rank {dst}"
    if not (0 <= chunk and last < s.g):
        raise ScheduleInvalid(f"{what}, but chunks are 0..{s.g - 1}", i, chunk, (src, dst))
    raise ScheduleInvalid(f"{what} leave their share: a range stays within one share of "
                          f"{per} chunks", i, chunk, (src, dst))


def _merge(i, dst, chunk, writes, current):
    """The value of (dst, chunk) after a step's writes [(op, src, value), ...]."""
    srcs = tuple(src for _, src, _ in writes)
    if len(writes) > 1 and any(op == "copy" for op, _, _ in writes):
        raise ScheduleInvalid(f"conflicting writes to chunk {chunk} at rank {dst} from ranks "
                              f"{', '.join(map(str, srcs))}", i, chunk, srcs + (dst,))
    if writes[0][0] == "copy":
        return writes[0][2]
    total = current  # reduce: every contributor set must be pairwise disjoint
    for _, src, value in writes:
        if total & value:
            raise ScheduleInvalid(f"chunk {chunk} reduced from rank {src} into rank {dst} counts "
                                  f"the contribution of ranks {_bits(total & value)} twice",
                                  i, chunk, (src, dst))
        total |= value
    return total


def _bits(mask):
    """The ranks of a contributor mask, for messages."""
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _loads(sends):
    """Chunks per link of one step's sends."""
    use = Counter()
    for _, count, src, dst, _ in sends:
        use[(src, dst)] += count
    return use


def _check_loads(s, step, rounds, use, where=""):
    """Every link and group carries at most capacity x rounds chunks."""
    for (src, dst), count in use.items():
        cap = s.links.get((src, dst))
        if cap is not None and count > cap * rounds + TOLERANCE:
            raise ScheduleInvalid(f"link {src}->{dst} carries {count} chunks, over its capacity "
                                  f"{cap:g} x {rounds} rounds{where}", step, None, (src, dst))
    for g, count in _group_loads(s, use).items():
        name, members, cap = s.groups[g]
        if count > cap * rounds + TOLERANCE:
            ranks = sorted({r for link in members if use.get(link) for r in link})
            raise ScheduleInvalid(f"group {_cut(repr(name))} carries {count} chunks, over its "
                                  f"capacity {cap:g} x {rounds} rounds{where}", step, None,
                                  ranks)


_GROUPS_OF = {}


def _groups_of(s):
    """{link: indices of the groups holding it}, made once per schedule."""
    key = id(s.groups)
    if key not in _GROUPS_OF or _GROUPS_OF[key][0] is not s.groups:
        of = defaultdict(list)
        for g, (_, members, _) in enumerate(s.groups):
            for link in members:
                of[link].append(g)
        _GROUPS_OF.clear()
        _GROUPS_OF[key] = (s.groups, of)
    return _GROUPS_OF[key][1]


def _pieces(s, per):
    """The sorted boundaries of every well-formed send range: each interval between two
    consecutive boundaries is moved by exactly the same sends (an elementary piece)."""
    cuts = set()
    for _, sends in s.steps:
        for chunk, count, _, _, _ in sends:
            last = chunk + count - 1
            if 0 <= chunk and last < s.g and chunk // per == last // per:
                cuts.add(chunk)
                cuts.add(chunk + count)
    return sorted(cuts)


def _touched(cuts, s, per):
    """The pieces some send covers, as (start, end) intervals, and their first chunks."""
    covered = set()
    for _, sends in s.steps:
        for chunk, count, _, _, _ in sends:
            last = chunk + count - 1
            if 0 <= chunk and last < s.g and chunk // per == last // per:
                if count == 1:
                    covered.add(chunk)
                else:
                    covered.update(cuts[bisect_left(cuts, chunk):
                                        bisect_left(cuts, chunk + count)])
    by_share = defaultdict(list)  # merged within a share, never across one
    for k in covered:
        by_share[k // per].append((k, cuts[bisect_left(cuts, k) + 1]))
    spans = [span for share in sorted(by_share) for span in _union(by_share[share])]
    return spans, covered


def simulate(s, state, cuts=None):
    """Run every step of the (batch) program on state {(rank, chunk): contributors, a
    bit mask of ranks (bit r: rank r's contribution; 1 for non-combining)}, in place; `cuts`: the pieces' boundaries (default: every chunk its
    own piece). A step's sends read the state at its start."""
    per = _share_size(s)
    for i, (rounds, sends) in enumerate(s.steps):
        writes = {}  # reads happen before any write: a step sees its start state
        for chunk, count, src, dst, op in sends:
            _check_range(s, i, chunk, count, src, dst, per)
            if count == 1 or cuts is None:
                firsts = range(chunk, chunk + count) if cuts is None else (chunk,)
            else:
                firsts = cuts[bisect_left(cuts, chunk):bisect_left(cuts, chunk + count)]
            for k in firsts:
                _check_send(s, i, state, k, src, dst, op)
                writes.setdefault((dst, k), []).append((op, src, state[(src, k)]))
        merged = {key: _merge(i, *key, w, state.get(key)) for key, w in writes.items()}
        if s.pipeline is None:
            _check_loads(s, i, rounds, _loads(sends) + s.credits[i])
        state.update(merged)
    return state


def _check_pipeline(s, spans, per):
    """Rounds for every expanded step; every batch's chunks in their shares and apart.
    O(spans log spans): the batches' chunks are never listed (chunks x batches)."""
    batches, stride, rounds = s.pipeline
    expected = len(s.steps) + batches - 1
    if len(rounds) != expected:
        raise ScheduleInvalid(f"pipeline.rounds lists {len(rounds)} steps, but {len(s.steps)} "
                              f"steps in {batches} batches expand to {expected}")
    for lo, hi in spans:
        top = (hi - 1) + (batches - 1) * stride  # the last chunk the last batch touches
        if top // per != lo // per or top >= s.g:
            b = next(b for b in range(1, batches)
                     if (hi - 1 + b * stride) // per != lo // per or hi - 1 + b * stride >= s.g)
            k = hi - 1
            raise ScheduleInvalid(f"batch {b} moves chunk {k} to {k + b * stride}, out of "
                                  f"its share (stride {stride})", None, k)
    clash = _first_clash(spans, stride, batches)
    if clash is not None:
        chunk, later = clash
        raise ScheduleInvalid(f"batches 0 and {later} both touch chunk {chunk} (stride "
                              f"{stride} is too small for the program's chunks)", None, chunk)


def _first_clash(spans, stride, batches):
    """(chunk, b) for the least chunk that batch 0 and a batch b > 0 both touch (batch b
    touches `spans`, sorted disjoint intervals, shifted by b x stride), or None.

    Chunk x is (x // stride) x stride + x % stride: batch b moves x to the same residue,
    b quotients on, so two batches meet exactly where two chunks of batch 0 share a
    residue and their quotients differ by less than `batches`. A span of stride chunks or
    more meets itself one batch on; shorter ones are cut into at most two pieces of one
    quotient each. The pieces, in chunk order, are matched against those of the last
    batches - 1 quotients (their residues are disjoint until the first clash, so a
    sorted list finds the overlap), which finds the least clashing chunk first."""
    if batches < 2 or not spans:
        return None
    if stride == 0:  # every batch on batch 0's chunks
        return spans[0][0], 1
    forced = min((lo + stride for lo, hi in spans if hi - lo > stride), default=None)
    pieces = []  # (quotient, residue start, residue end), in chunk order
    for lo, hi in spans:
        hi = min(hi, lo + stride)
        q, r = divmod(lo, stride)
        pieces.append((q, r, min(r + hi - lo, stride)))
        if r + hi - lo > stride:
            pieces.append((q + 1, 0, r + hi - lo - stride))
    active, starts, window = [], [], deque()  # residue intervals of the recent quotients
    for q, r_lo, r_hi in pieces:
        if forced is not None and q * stride + r_lo >= forced:
            break
        while window and window[0][0] < q - (batches - 1):
            _, old = window.popleft()
            i = bisect_left(starts, old)
            del starts[i], active[i]
        i = bisect_left(starts, r_lo)
        for j in (i - 1, i):  # the one that may hold r_lo, then the first after it
            if 0 <= j < len(active) and active[j][1] > r_lo and active[j][0] < r_hi:
                first, _, quotient = active[j]
                chunk = q * stride + max(first, r_lo)
                if forced is None or chunk < forced:
                    return chunk, q - quotient
                return forced, 1
        starts.insert(i, r_lo)
        active.insert(i, (r_lo, r_hi, q))
        window.append((q, r_lo))
    return None if forced is None else (forced, 1)


def _check_expanded_loads(s):
    """Each expanded step carries the loads of the batches active in it: a sliding sum
    over the program's steps (a window of `batches` of them)."""
    batches, _, rounds = s.pipeline
    program = [_loads(sends) + credit for (_, sends), credit in zip(s.steps, s.credits)]
    for i, (own, use) in enumerate(zip((r for r, _ in s.steps), program)):
        _check_loads(s, i, own, use, " (one batch alone: the program's own rounds)")
    # expanded step t runs program steps lo..hi; a long pipeline repeats the same full
    # window for many t, so the rounds each window needs are worked out once
    window, span = Counter(), (0, -1)
    needed = {}
    last = len(program) - 1
    for t in range(len(rounds)):
        if t <= last:
            window.update(program[t])
        if t - batches >= 0:
            window.subtract(program[t - batches])
        span = (max(0, t - batches + 1), min(t, last))
        if span not in needed:
            needed[span] = _rounds_needed(s, +window)
        if rounds[t] < needed[span]:
            active = f"batches {max(0, t - last)}..{min(t, batches - 1)}"
            _check_loads(s, t, rounds[t], +window, f" (expanded step, {active} active)")


def _rounds_needed(s, use):
    """The fewest rounds in which every link and group carries the load `use`."""
    need = 1
    for link, count in use.items():
        cap = s.links.get(link)
        if cap is not None:
            need = max(need, _rounds_for(count, cap))
    for g, count in _group_loads(s, use).items():
        need = max(need, _rounds_for(count, s.groups[g][2]))
    return need


def _group_loads(s, use) -> Counter:
    """{group index: chunks its links carry} for the link loads `use`, less the
    credits of switch operations in it."""
    load = Counter()
    of = _groups_of(s)
    for link, count in use.items():
        if link[0] == "credit":
            load[link[1]] -= count
            continue
        for g in of.get(link, ()):
            load[g] += count
    return load


def _rounds_for(count, cap):
    """The least whole r >= 1 with count <= cap x r + TOLERANCE (an impossible count on a
    capacity of 0: more than any step has)."""
    if count <= TOLERANCE:
        return 1
    if cap <= 0:
        return math.inf
    return max(1, math.ceil((count - TOLERANCE) / cap))


def _check_post(s, state, spans, covered, per):
    """Every piece simulated ends right at its wanters; every chunk no batch touches
    must already be right, as the precondition leaves it."""
    _, pre_kind, post_kind = _TABLE[s.collective]
    everyone = (1 << s.n) - 1
    for k in sorted(covered):
        for rank in _ranks(post_kind, k, s.n, s.c, s.root):
            _post_holds(s, state, rank, k, everyone)
    batches, stride = (s.pipeline[0], s.pipeline[1]) if s.pipeline else (1, 0)
    by_share = defaultdict(list)
    for lo, hi in spans:
        by_share[lo // per].append((lo, hi))
    for share in range(s.g // per if per else 0):
        start = share * per
        wanters = set(_ranks(post_kind, start, s.n, s.c, s.root))
        holders = set(_ranks(pre_kind, start, s.n, s.c, s.root))
        needed = (wanters and s.collective in COMBINING and s.n > 1) or (wanters - holders)
        if not needed:
            continue
        # the batches' chunks are apart and in the share (_check_pipeline): they cover it
        # exactly when they are as many as its chunks
        mine = by_share.get(share, [])
        if batches * sum(hi - lo for lo, hi in mine) == per:
            continue
        k = _first_gap(start, start + per, mine, batches, stride)
        if k is not None:
            rank = min(wanters - holders) if wanters - holders else min(wanters)
            raise ScheduleInvalid(f"after the last step rank {rank} does not hold chunk {k}"
                                  + (" (no batch moves it)" if s.pipeline else ""),
                                  None, k, (rank,))


def _first_gap(start, end, spans, batches, stride):
    """The first chunk of start..end - 1 that no batch touches (batch b: `spans` shifted
    by b x stride), or None: the shifted spans merged lazily, in chunk order."""
    def batches_of(lo, hi):
        return ((lo + b * stride, hi + b * stride) for b in range(batches))

    shifted = heapq.merge(*(batches_of(lo, hi) for lo, hi in spans))
    at = start
    for lo, hi in shifted:
        if lo > at:
            break
        at = max(at, hi)
        if at >= end:
            return None
    return at if at < end else None


def _post_holds(s, state, rank, chunk, everyone):
    value = state.get((rank, chunk))
    if value is None:
        raise ScheduleInvalid(f"after the last step rank {rank} does not hold chunk {chunk}",
                              None, chunk, (rank,))
    if s.collective in COMBINING and value != everyone:
        raise ScheduleInvalid(f"after the last step rank {rank} holds chunk {chunk} summed "
                              f"over ranks {_bits(value)} only, not all {s.n}",
                              None, chunk, (rank,))
