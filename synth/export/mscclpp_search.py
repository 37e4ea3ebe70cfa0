"""The search for an MSCCL++ plan's split into thread blocks (synth.export.mscclpp.build).

A split puts chunk k in lane k mod `lanes` and at most `cap` peers in a thread block;
every limit of the executor (ops, channels, remote buffers a thread block) must hold.
The search tries cap 16 first, lanes by doubling while more lanes shorten the longest
thread block, then bisects to the fewest lanes that fit; smaller caps only where they
could need fewer thread blocks (a try whose peers alone need as many as the best found
is not made).

Past SAMPLE_PAST ranks, where there are no switch operations (they join ranks), the
search runs first on a sample of the ranks (thread blocks counted, and tries skipped by
their floor, on the sample alone), and the split it chooses (the fewest thread blocks
on the sample) is then made once for every rank: a rank's thread blocks and ops read
its own moves alone, so each try on the sample is exact for the sampled ranks. Where
that split does not fit every rank, or the sample's search finds none (which lane
counts it tries depends on the longest thread block it sees), the search runs over
every rank as before. Either way an ask and an export answer as the search over every
rank would: a split fits only if it fits every rank. At 512 GPUs a try on every rank
took 2.5-3 s and an export made 29 of them.
"""

from __future__ import annotations

from collections import defaultdict

CAPS = (16, 8, 4, 2, 1)  # peers per thread block, tried in this order
SAMPLE_PAST = 64  # ranks: up to here every try is made on every rank


def sample_ranks(n: int, boxes) -> list[int] | None:
    """The ranks a split is searched on first, None for every rank (n <= SAMPLE_PAST, or
    a sample that would be all of them): the first box whole and, of box b, its member
    b mod its size (every local position and every box); without boxes, every
    ceil(n / SAMPLE_PAST)-th rank (at most SAMPLE_PAST)."""
    if n <= SAMPLE_PAST:
        return None
    if not boxes:
        return list(range(0, n, -(-n // SAMPLE_PAST)))
    members = defaultdict(list)
    for r in range(n):
        members[boxes[r]].append(r)
    groups = list(members.values())
    sample = sorted(set(groups[0]) | {g[b % len(g)] for b, g in enumerate(groups)})
    return sample if len(sample) < n else None


def fewest_split(attempt, floor, widest: int, most: int, fewest: bool = True):
    """The plan with the fewest thread blocks the search finds (fewest=False: the first
    plan found), None if no split fits. attempt(lanes, cap, enough) -> (plan or None,
    its longest thread block's ops: a failed try goes on until one reaches `enough`);
    floor(lanes, cap): at least how many thread blocks that split needs; widest: the
    most peers of one channel type a rank has; most: the most lanes."""
    best = None  # (thread blocks, plan)

    def tried(lanes, cap, enough=0):
        if best is not None and floor(lanes, cap) >= best[0]:
            return None, float("inf")  # not fewer thread blocks than the best: not tried
        return attempt(lanes, cap, enough)

    for cap in CAPS:
        if widest <= cap < CAPS[0]:
            continue  # no group reaches cap peers: the same plans as the first cap's
        lo, hi, plan = _first_fit(tried, cap, most, early_widest=not fewest)
        if plan is None:
            continue
        if not fewest:
            return plan
        while hi - lo > 1:
            mid = (lo + hi) // 2
            found, _ = tried(mid, cap)
            if found is None:
                lo = mid
            else:
                plan.drop()
                hi, plan = mid, found
        size = max(len(tbs) for tbs in plan.tbs.values())
        if best is None or size < best[0]:
            if best is not None:
                best[1].drop()
            best = (size, plan)
        else:
            plan.drop()
        if plan.t == 1:  # smaller groups only add thread blocks
            break
    return best and best[1]


def _first_fit(attempt, cap: int, most: int, early_widest: bool):
    """(lo, hi, plan): a plan on hi lanes, lo having failed (0: none tried), or plan None.
    Lanes double from 1 while the longest thread block shortens, then the most lanes
    (more lanes split runs of consecutive chunks, one op each: no steady shortening);
    early_widest (an ask): the most right after one (dgxh100x64: 2 tries, not 6). Both
    orders try the same lane counts, so an ask and an export agree."""
    lo, hi, longest, tried = 0, 1, None, set()
    while hi not in tried:
        plan, worst = attempt(hi, cap, longest or float("inf"))  # is it under longest?
        tried.add(hi)
        if plan is not None:
            return lo, hi, plan
        if hi == most or (longest is not None and worst >= longest):
            break
        lo, hi, longest = hi, min(2 * hi, most), worst
        if early_widest and lo == 1 and most not in tried:
            plan, _ = attempt(most, cap)
            tried.add(most)
            if plan is not None:
                return lo, most, plan
    if most in tried:
        return lo, hi, None
    plan, _ = attempt(most, cap)
    return hi, most, plan
