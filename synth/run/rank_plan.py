"""What one rank does in every run of a schedule, in chunks, worked out once before any
run (plan_rank): pure Python, no torch. synth.run.p2p turns a RankPlan into
torch.distributed point-to-point messages.

The steps are read from the compact form of a version 2 file (a pipeline's batches,
shifted, in the expanded step they run in); a ranged send is one message, one slice of
the buffer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

from synth.schedule.ir import Schedule

# --- the plan: what one rank does, in chunks, worked out once before any run ----------
#
# A rank keeps every chunk it touches in one work buffer: first the output buffer of the
# layout (the chunks it must end with, in their output slots), then scratch for the
# chunks it only relays or accumulates, numbered in chunk order. Every send of a step
# becomes one message per run of chunks that is contiguous in both the sender's and the
# receiver's work buffer (a ranged send is one message: synth's layout keeps a share in
# consecutive output slots, and scratch is contiguous over every range a rank touches;
# a layout that does not is cut into runs), and runs of one (src, dst, op) that
# continue each other at both ends are joined into one message. Both ends compute
# the same messages in the same order, so tags match. A received copy lands in place
# unless the rank reads or writes that part of its buffer elsewhere in the step; other
# receives go to a temporary buffer and are applied (added, or copied) after every
# message of the step has arrived, so every send reads its rank's start-of-step value.


@dataclass
class StepPlan:
    step: int  # of the expanded schedule
    sends: list  # (peer, work slot, chunks, tag)
    recvs: list  # (peer, work slot or temp slot, chunks, tag, into temp)
    applies: list  # (op, work slot, chunks, temp slot): after the step's messages


@dataclass
class RankPlan:
    rank: int
    work_chunks: int  # output region (the layout's output buffer), then scratch
    out_chunks: int
    out_segments: list  # (first chunk, end chunk, first work slot): the rank's results
    load: list  # (work slot, input slot, chunks): the rank's starting values
    steps: list  # StepPlan per expanded step where the rank sends or receives
    temp_chunks: int

    @property
    def messages(self) -> int:
        return sum(len(s.sends) + len(s.recvs) for s in self.steps)


class _Slots:
    """Where one rank keeps chunks: sorted, disjoint segments (first chunk, end chunk,
    first slot), the slot affine in the chunk inside each."""

    def __init__(self, segments, size: int = 0):
        self.size = size  # slots in all
        merged = []
        for a, b, s in sorted(segments):
            if merged and merged[-1][1] == a and merged[-1][2] + a - merged[-1][0] == s:
                merged[-1][1] = b
            else:
                merged.append([a, b, s])
        self.segments = merged
        self._starts = [m[0] for m in merged]

    def pieces(self, lo: int, hi: int, strict: bool = True) -> list[tuple[int, int, int]]:
        """Chunks lo..hi-1 as (first, end, slot) pieces, each contiguous in slots.
        strict: every chunk must have a place; otherwise those without are left out."""
        out = []
        i = max(0, bisect_right(self._starts, lo) - 1)
        while lo < hi:
            if i < len(self.segments) and self.segments[i][1] <= lo:
                i += 1
                continue
            if i >= len(self.segments) or self.segments[i][0] > lo:
                if strict:
                    raise ValueError(f"chunk {lo} has no place")
                if i >= len(self.segments):
                    break
                lo = min(hi, self.segments[i][0])
                continue
            a, b, s = self.segments[i]
            end = min(hi, b)
            out.append((lo, end, s + lo - a))
            lo = end
        return out


def merged(intervals) -> list[list[int]]:
    """Sorted, disjoint [lo, hi) intervals covering the given ones."""
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def minus(intervals, holes) -> list[tuple[int, int]]:
    """intervals minus holes, both sorted and disjoint."""
    out, j = [], 0
    for lo, hi in intervals:
        while j < len(holes) and holes[j][1] <= lo:
            j += 1
        k = j
        while lo < hi:
            if k < len(holes) and holes[k][0] < hi:
                if holes[k][0] > lo:
                    out.append((lo, holes[k][0]))
                lo = max(lo, holes[k][1])
                k += 1
            else:
                out.append((lo, hi))
                break
    return out


def _runs(slot_of, first: int, count: int) -> list[list[int]]:
    """Chunks first .. first+count-1 as [first, end, slot] runs of consecutive slots.
    synth's layout keeps a share in consecutive slots, so this is one run per share; a
    layout that does not is followed chunk by chunk (and each run is then one message)."""
    out = []
    for k in range(first, first + count):
        slot = slot_of(k)
        if out and out[-1][2] + k - out[-1][0] == slot:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1, slot])
    return out


def _out_segments(layout, rank: int) -> list[tuple[int, int, int]]:
    """(first chunk, end chunk, output slot) of the chunks rank must end with."""
    coll, out = layout.coll, []
    for r, first, count in coll.post_ranges():
        if r == rank:
            out += [tuple(run) for run in _runs(lambda k: layout.out_slot(rank, k).idx,
                                                first, count)]
    return out


def _rank_slots(layout, rank: int, touched) -> _Slots:
    """rank's work buffer: its results in their output slots, every other chunk it sends
    or receives in scratch after them, in chunk order."""
    out = _out_segments(layout, rank)
    scratch = minus(merged(touched), merged((a, b) for a, b, _ in out))
    segments, cursor = list(out), layout.output_chunks
    for lo, hi in scratch:
        segments.append((lo, hi, cursor))
        cursor += hi - lo
    return _Slots(segments, cursor)


def _both(src_pieces, dst_pieces):
    """Two piece lists of the same chunks cut where either is: (first, end, src slot,
    dst slot)."""
    i = j = 0
    lo = src_pieces[0][0]
    while i < len(src_pieces) and j < len(dst_pieces):
        (a, b, s), (c, d, t) = src_pieces[i], dst_pieces[j]
        hi = min(b, d)
        yield lo, hi, s + lo - a, t + lo - c
        lo = hi
        i += b == hi
        j += d == hi


def _exclusive(intervals) -> list[bool]:
    """For each [lo, hi) interval: whether it overlaps none of the others."""
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    alone = [True] * len(intervals)
    reach = None  # the largest end before the current interval
    for pos, i in enumerate(order):
        lo, hi = intervals[i]
        if reach is not None and reach > lo:
            alone[i] = False
        if pos + 1 < len(order) and intervals[order[pos + 1]][0] < hi:
            alone[i] = False
        reach = hi if reach is None else max(reach, hi)
    return alone


def plan_rank(schedule: Schedule, rank: int, layout) -> RankPlan:
    """What `rank` does in every run of `schedule`, in chunk units (synth.export.layout's
    out-of-place layout). The expanded steps are read from the compact form, one at a
    time: the sends of Schedule.step_sends(t), taken from the program steps active in t
    (Schedule.active) with their batch's shift, ranges kept; never unrolled chunk by
    chunk, nor into Send objects per batch."""
    coll = schedule.collective
    stride = schedule.pipeline.stride if schedule.pipeline else 0
    # the chunk intervals each rank sends or receives: batch 0's, then every batch's
    program = [[] for _ in range(coll.ranks)]
    for step in schedule.steps:
        for x in step.sends:
            program[x.src].append((x.chunk, x.chunk + x.count))
            program[x.dst].append((x.chunk, x.chunk + x.count))

    def touched(r: int) -> list:
        batch0 = merged(program[r])
        if schedule.batches == 1 or not stride:
            return batch0
        return merged((lo + b * stride, hi + b * stride) for b in range(schedule.batches)
                       for lo, hi in batch0)

    # per program step, the sends rank takes part in
    involved = [[x for x in step.sends if rank in (x.src, x.dst)] for step in schedule.steps]
    mine = [[(x.src, x.dst, x.op, x.chunk + b * stride, x.count)
             for b, i in schedule.active(t) for x in involved[i]]
            for t in range(schedule.num_steps)]

    slots: dict[int, _Slots] = {}

    def slots_of(r: int) -> _Slots:
        if r not in slots:
            slots[r] = _rank_slots(layout, r, touched(r))
        return slots[r]

    me = slots_of(rank)
    steps, temp_chunks = [], 0
    for t, here in enumerate(mine):
        if here:
            step = _step_plan(t, here, rank, slots_of)
            temp_chunks = max(temp_chunks, sum(n for _, _, n, _ in step.applies))
            steps.append(step)
    load = _initial_load(schedule.collective, rank, layout, me)
    return RankPlan(rank, me.size, layout.output_chunks, _out_segments(layout, rank),
                    [tuple(x) for x in load], steps, temp_chunks)


def _initial_load(coll, rank: int, layout, me: _Slots) -> list:
    """[(slot, chunk of the input, chunks)]: where the rank's input is copied before
    the first step, runs of consecutive slots joined; chunks it never uses are left."""
    load = []
    for r, first, count in coll.pre_ranges():
        if r != rank:
            continue
        for c, d, i in _runs(lambda k: layout.init_slot(rank, k).idx, first, count):
            for lo, hi, w in me.pieces(c, d, strict=False):  # chunks it never uses: left
                if load and load[-1][0] + load[-1][2] == w \
                        and load[-1][1] + load[-1][2] == i + lo - c:
                    load[-1][2] += hi - lo
                else:
                    load.append([w, i + lo - c, hi - lo])
    return load


def _step_plan(t: int, here: list, rank: int, slots_of) -> StepPlan:
    """Step t for `rank`: its sends and receives, joined into runs of consecutive
    slots and tagged per peer pair; a received copy lands in place when nothing else
    of the step touches that part of the buffer, anything else goes through temporary
    space (applies: the reduce or copy from there)."""
    runs = defaultdict(list)  # (src, dst, op) -> [src slot, dst slot, chunks]
    for src, dst, op, chunk, count in here:
        for lo, hi, s, d in _both(slots_of(src).pieces(chunk, chunk + count),
                                  slots_of(dst).pieces(chunk, chunk + count)):
            runs[(src, dst, op)].append((s, d, hi - lo))
    sends, recvs = _tagged_runs(runs, rank)
    intervals = [(s, s + n) for _, s, n, _ in sends] + [(d, d + n) for _, d, n, _, _
                                                         in recvs]
    alone = _exclusive(intervals)[len(sends):]
    step = StepPlan(t, sends, [], [])
    cursor = 0
    for (src, d, n, tag, op), free in zip(recvs, alone):
        if op == "copy" and free:
            step.recvs.append((src, d, n, tag, False))
        else:
            step.recvs.append((src, cursor, n, tag, True))
            step.applies.append((op, d, n, cursor))
            cursor += n
    return step


def _tagged_runs(runs: dict, rank: int) -> tuple[list, list]:
    """(sends as (peer, slot, chunks, tag), receives as (peer, slot, chunks, tag, op)):
    each (src, dst, op)'s pieces joined where consecutive on both sides, tags counted
    per (src, dst) in the order both ends see them."""
    sends, recvs = [], []
    tags = defaultdict(int)
    for (src, dst, op), pieces in sorted(runs.items()):
        joined = []
        for s, d, n in sorted(pieces):
            if joined and joined[-1][0] + joined[-1][2] == s \
                    and joined[-1][1] + joined[-1][2] == d:
                joined[-1][2] += n
            else:
                joined.append([s, d, n])
        for s, d, n in joined:
            tag = tags[(src, dst)]
            tags[(src, dst)] += 1
            if src == rank:
                sends.append((dst, s, n, tag))
            if dst == rank:
                recvs.append((src, d, n, tag, op))
    return sends, recvs
