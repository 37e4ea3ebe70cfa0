"""Lower a Schedule to an MSCCL++ execution plan (the JSON the executor loads, v0.8.0+).

Produced: protocol Simple; memory channels (CUDA IPC / NVLink) between ranks of one box
and port channels (the host proxy: InfiniBand between nodes) between ranks of different
boxes (the topology's boxes, `schedule.model.boxes`; without boxes every rank is taken
to be in one node). Every collective out of place; in place for allgather, gather,
allreduce, broadcast and reduce (the data sits in o alone; a peer's i is never
addressed). Reducescatter and scatter in place, and alltoall in place, are refused (the
first two leave a rank's output at a different offset on each rank, which the
executor's symmetric-offset rule forbids; alltoall has no in-place form). Buffers follow
synth.export.layout, with input_chunks/output_chunks the nominal sizes on every rank
(so one chunk is the same number of bytes in i, o and s, as the executor requires).

The recipe (docs/runtimes.md, "The plan synth writes"):
- Slots first (independent of the thread blocks): a copy is put straight into the
  receiver's output slot if the receiver has not touched it in this launch, or if its
  only accesses since its last write to it are sends to the same peer in earlier steps
  (whose signals that peer has waited for); else into a fresh scratch slot. A
  reduction is put into a fresh scratch slot and summed into the receiver's value by
  one re after the waits (all of one chunk's arrivals in one re). Scratch slots are
  never reused in a launch; they are handed out per receiver in chunk order
  (reductions: per receiver and sender), so runs of consecutive chunks land in runs of
  consecutive slots. Results not in their output slot at the end are copied there.
- Thread blocks: chunk k belongs to lane k mod T. In a lane, a rank's peers are split by
  channel type (memory peers in its box, port peers in other boxes) into groups of at
  most `cap` peers whose remote buffers fit 16 (greedy, in rank order); one thread block
  per (lane, type, group). Everything a rank exchanges with one peer in one lane goes
  through one thread block, so each thread block waits on its own channels only. (T, cap)
  are the fewest thread blocks found within 64 ops per thread block: cap 16 first, T by
  doubling (while more lanes shorten the longest thread block) then bisection; smaller
  caps only when they need fewer thread blocks (a try whose peers alone need as many
  as the best found is not made).
- Channels: one per (lane, peer pair that exchanges data in the lane) and type, declared
  on both ranks in (lane, peer) order, so the k-th channel from A to B pairs with the
  k-th from B to A.
- Hand-offs: when a slot written or read by one thread block of a rank is next accessed
  (the access conflicting) by another thread block of the same rank and lane, the first
  releases a GPU semaphore after a nop and the second acquires it before a nop. Each
  step has fixed points: acquires before the sends, releases after the sends (their
  sources are then free), after the waits (the data arrived), after the reductions;
  acquires before the reductions and before the final copies. An acquire only waits for
  releases of earlier steps or of earlier points of the same step, so there is no cycle.
- Ops of a thread block: synth.export.mscclpp_emit writes them (the handshake; per step
  the acquires, puts, releases, signals and waits, reductions; then the final copies),
  as docs/runtimes.md spells out op by op.
- max_message_size is the largest size that keeps every buffer offset within the
  executor's 32-bit fields (unless given; a larger one is refused), min_message_size
  at most 2^31 - 1 (every release reads it as a 32-bit int).

Its rooms: the slots and the log of their accesses, synth.export.mscclpp_flow; the ops
of a thread block, synth.export.mscclpp_emit; the search for the fewest thread blocks,
synth.export.mscclpp_search; here, thread blocks, channels, hand-offs and the plan's
JSON. Without switch operations a plan is made rank by rank as its ops are asked for (a
rank's part reads its own moves alone), so a refused try costs the ranks up to the
first over a limit.
"""

from __future__ import annotations

from collections import defaultdict

from synth.deadline import Deadline
from synth.errors import BadInput
from synth.export.layout import Layout
from synth.export.mscclpp_emit import ACQ_RE, ACQ_SEND, RECV, REDUCED, SENT, thread_block_ops
from synth.export.mscclpp_flow import Accesses, _Flow, most_peers, thread_block_floor
from synth.export.mscclpp_search import fewest_split, sample_ranks

MAX_OPS = 64
MAX_MIN_MESSAGE = 2 ** 31 - 1  # min_message_size: a 32-bit int in every release
MAX_TB_CHANNELS = 16  # per thread block and channel type
MAX_TB_REMOTE = 16    # per thread block and access type
MAX_LANES = 64
ALIGNMENT = 16
IN_PLACE = frozenset({"allgather", "gather", "allreduce", "broadcast", "reduce"})
KINDS = ("memory", "port")


class _Tb:
    """A rank's thread block: one channel type's peer group in one lane (none: local work)."""

    def __init__(self, rank, lane, kind, peers):
        self.rank, self.lane, self.kind, self.peers = rank, lane, kind, peers
        self.steps = defaultdict(lambda: {"puts": [], "wait": set(), "re": [],
                                          "notify": set(), "glres": [], "align": []})
        self.epilogue = []
        self.acquire = defaultdict(list)  # (step, point) -> [thread blocks released by]
        self.release = defaultdict(list)  # (step, point) -> [thread blocks released to]


class _Plan:
    """One split of the work (chunk k in lane k mod `lanes`, at most `cap` peers a thread
    block): its thread blocks and hand-offs (with switch operations, all at once; else
    each rank's as finish comes to it), then (finish) ids, channels, buffers, ops."""

    def __init__(self, flow: _Flow, layout: Layout, boxes, lanes: int, cap: int):
        self.layout, self.flow, self.t, self.cap = layout, flow, lanes, cap
        self.kind = (lambda a, b: "port" if boxes[a] != boxes[b] else "memory") if boxes \
            else (lambda a, b: "memory")
        self.switch = defaultdict(list)  # rank -> (ranks, buffer type) of its switch channels
        keys = {key for _, _, summed in flow.steps for _, readers, writers, _, src, out
                in summed for key in ((readers, src.buf), (writers, out.buf))}
        for key in sorted(keys):  # one order on every rank: the members set them up together
            for m in key[0]:
                self.switch[m].append(key)
        self.tbs = defaultdict(list)  # rank -> thread blocks in id order
        self.tb_of = {}  # (rank, lane, peer) -> thread block
        self.first = {}  # (rank, lane) -> its first thread block
        # without switch operations a rank's part needs its own moves alone, so it is
        # made when finish asks for it: a refused try stops at its first rank over a limit
        self.pending = set() if keys else set(range(layout.n))
        if keys:
            self._thread_blocks(range(layout.n), flow.steps)
            self._handoffs([(t, *step) for t, step in enumerate(flow.steps)], flow.epilogue)

    def _thread_blocks(self, ranks, steps):
        """The thread blocks of `ranks`, one per (lane, channel type, group of peers), from
        the moves and switch operations of `steps` (which must hold every one that
        involves those ranks; others are read and left unused)."""
        peers = defaultdict(set)  # (rank, lane, kind) -> peers
        refs = defaultdict(set)  # (rank, lane, peer) -> buffer types written there
        for moves, _, summed in steps:
            for k, a, b, _, dst in moves:
                lane = k % self.t
                peers[(a, lane, self.kind(a, b))].add(b)
                peers[(b, lane, self.kind(a, b))].add(a)
                refs[(a, lane, b)].add(dst.buf)
            for k, readers, writers, d, src, out in summed:  # channels for the hand-shakes
                for m in {*readers, *writers} - {d}:  # one box (mscclpp_flow)
                    peers[(d, k % self.t, "memory")].add(m)
                    peers[(m, k % self.t, "memory")].add(d)
        for r in ranks:
            for lane in range(self.t):
                for kd in KINDS:
                    group, used = [], set()
                    for p in sorted(peers.get((r, lane, kd), ())):
                        mine = {(p, b) for b in refs.get((r, lane, p), ())}
                        if group and (len(group) >= min(self.cap, MAX_TB_CHANNELS)
                                      or len(used | mine) > MAX_TB_REMOTE):
                            self._add(r, lane, kd, group)
                            group, used = [], set()
                        group.append(p)
                        used |= mine
                    if group:
                        self._add(r, lane, kd, group)

    def _ready(self, r):
        """Rank r's thread blocks and hand-offs, made now if they were left for later."""
        if r not in self.pending:
            return
        self.pending.discard(r)
        steps, epilogue = self.flow.of_rank(r)
        self._thread_blocks((r,), [step[1:] for step in steps])
        self._handoffs(steps, epilogue, r)

    def drop(self):
        """Break the plan's cycles (hand-offs name thread blocks): builds run with gc off."""
        for tbs in self.tbs.values():
            for tb in tbs:
                tb.acquire.clear()
                tb.release.clear()

    def _add(self, rank, lane, kind, peers):
        tb = _Tb(rank, lane, kind, peers)
        self.tbs[rank].append(tb)
        self.first.setdefault((rank, lane), tb)
        for p in peers:
            self.tb_of[(rank, lane, p)] = tb
        return tb

    def _local(self, rank, lane):
        """A thread block of rank in lane for local work (one is made if there is none)."""
        return self.first.get((rank, lane)) or self._add(rank, lane, "memory", [])

    def _handoffs(self, steps, epilogue, only=None):
        """Assign the accesses of `steps` ((t, moves, reductions, switch operations)) and
        of the final copies to thread blocks (`only`: that rank's alone; every rank's
        where switch operations join ranks); where a slot passes between thread blocks
        of a rank, record a release at the first and an acquire at the second."""
        acc = Accesses()
        for t, moves, reductions, summed in steps:
            self._move_accesses(acc, t, moves, only)
            self._reduction_accesses(acc, t, reductions)
            self._switch_accesses(acc, t, summed)
        self._final_accesses(acc, epilogue)
        for (y, x, q), p in acc.needs.items():
            y.acquire[q].append(x)
            x.release[p].append(y)

    def _move_accesses(self, acc, t, moves, only=None):
        """The sends of step t: each on the thread block of its (lane, peer) on both
        ranks (`only`: on that rank's side alone), the sender reading its source, the
        receiver's slot written on arrival."""
        for move in moves:
            k, a, b, src, dst = move
            lane = k % self.t
            if only is None or a == only:
                sender = self.tb_of[(a, lane, b)]
                acc.access(sender, (a, src), False, (t, ACQ_SEND), (t, SENT))
                # the flow's move itself, not a tuple of its own: 124,000 puts of
                # dgx2x2's trees held 8.6 MiB more
                sender.steps[t]["puts"].append(move)
            if only is None or b == only:
                receiver = self.tb_of[(b, lane, a)]
                receiver.steps[t]["wait"].add(a)
                acc.access(receiver, (b, dst), True, None, (t, RECV))

    def _reduction_accesses(self, acc, t, reductions):
        """The sums of step t: each on the thread block that received its first
        arrival, reading every source and writing the sum."""
        for d, k, dst, srcs, first in reductions:
            tb = self.tb_of[(d, k % self.t, first)]
            for s in srcs:
                acc.access(tb, (d, s), False, (t, ACQ_RE), (t, REDUCED))
            acc.access(tb, (d, dst), True, (t, ACQ_RE), (t, REDUCED))
            tb.steps[t]["re"].append((dst, srcs))

    def _switch_accesses(self, acc, t, summed):
        """The switch operations of step t, each a glres by d. Step t: every other
        member tells d that its value is ready (a reader) and that the slot the glres
        stores to is free (a writer); d's glres sums and stores; step t + 1: d tells
        every member it is done (a reader's value was read, a writer's arrived). In
        program order: the readies, the glres, then the signals after it."""
        moved = {(m, k): (a, b) for m, k, a, b in self.flow.aligned[t]}
        for k, readers, writers, d, src, out in summed:
            lane = k % self.t
            others = sorted({*readers, *writers} - {d})
            for m in readers:  # first, a member whose value sits elsewhere copies it
                if (m, k) in moved:
                    tb = self.tb_of[(m, lane, d if m != d else others[0])]
                    a, b = moved[(m, k)]
                    acc.access(tb, (m, a), False, (t, ACQ_SEND), (t, SENT))
                    acc.access(tb, (m, b), True, (t, ACQ_SEND), (t, SENT))
                    tb.steps[t]["align"].append((a, b))
            for m in others:
                mine, theirs = self.tb_of[(m, lane, d)], self.tb_of[(d, lane, m)]
                if m in readers:
                    acc.access(mine, (m, src), False, (t, ACQ_SEND), (t + 1, RECV))
                if m in writers:
                    acc.access(mine, (m, out), True, (t, ACQ_SEND), (t + 1, RECV))
                mine.steps[t]["notify"].add(d)
                theirs.steps[t]["wait"].add(m)
                acc.access(theirs, (d, ("ready", k, m)), True, None, (t, RECV))
            tb = self.tb_of[(d, lane, others[0])]
            for m in others:
                acc.access(tb, (d, ("ready", k, m)), False, (t, ACQ_RE), (t, REDUCED))
            acc.access(tb, (d, src), False, (t, ACQ_RE), (t, REDUCED))
            acc.access(tb, (d, out), True, (t, ACQ_RE), (t, REDUCED))
            acc.access(tb, (d, ("summed", k)), True, (t, ACQ_RE), (t, REDUCED))
            tb.steps[t]["glres"].append((src, out, readers, writers))
            for m in others:
                mine, theirs = self.tb_of[(m, lane, d)], self.tb_of[(d, lane, m)]
                acc.access(theirs, (d, ("summed", k)), False, (t + 1, ACQ_SEND),
                           (t + 1, SENT))
                theirs.steps[t + 1]["notify"].add(m)
                mine.steps[t + 1]["wait"].add(d)

    def _final_accesses(self, acc, epilogue):
        """The final copies: each on the thread block that last held its source (else
        the lane's first), after every step."""
        end = (len(self.flow.steps), ACQ_SEND)
        for r, k, src, out in epilogue:
            entry = acc.log.get((r, src))
            holder = entry and (entry[0][0] if entry[0] else next(iter(entry[1]), None))
            tb = holder or self._local(r, k % self.t)
            acc.access(tb, (r, src), False, end, end)
            acc.access(tb, (r, out), True, end, end)
            tb.epilogue.append((src, out))

    # --- the plan's tables and ops ------------------------------------------------------

    def finish(self, enough=float("inf"), ranks=None):
        """Ids, channels, remote buffers, semaphores and ops, rank by rank (a rank's thread
        blocks and hand-offs made first if left for now). None, or why a limit fails (then
        made only until a thread block needs `enough` ops: all a failed try tells).
        ranks: only those (a search's sample: the plan is then not whole)."""
        n = self.layout.n
        self.channels = {kd: defaultdict(list) for kd in KINDS}  # rank -> peers (id = position)
        self.remote = defaultdict(dict)  # rank -> {(peer, buf): id}
        self.semaphores = defaultdict(dict)  # rank -> {(releaser, acquirer): id}
        chan_id, self.ops, self.worst, why = {}, {}, 0, None
        for r in range(n) if ranks is None else ranks:
            self._ready(r)
            peers = defaultdict(list)  # (lane, kind) -> peers
            for tb_id, tb in enumerate(self.tbs[r]):
                tb.id = tb_id
                peers[(tb.lane, tb.kind)].extend(tb.peers)
            for (lane, kd), mine in sorted(peers.items(),
                                           key=lambda e: (e[0][0], KINDS.index(e[0][1]))):
                for p in sorted(mine):
                    chan_id[(r, lane, p)] = len(self.channels[kd][r])
                    self.channels[kd][r].append(p)
            for tb in self.tbs[r]:
                tb.channel_ids = [chan_id[(r, tb.lane, p)] for p in tb.peers]
                tb.position = {p: i for i, p in enumerate(tb.peers)}
                used = set()
                for t in sorted(tb.steps):
                    for _, _, p, _, dst in tb.steps[t]["puts"]:
                        key = (p, dst.buf)
                        if key not in self.remote[r]:
                            self.remote[r][key] = len(self.remote[r])
                        used.add(self.remote[r][key])
                tb.remote_refs = sorted(used)
                keys = sorted({key for t in tb.steps for src, dst, readers, writers
                               in tb.steps[t]["glres"]
                               for key in ((readers, src.buf), (writers, dst.buf))})
                tb.switch_ids = [self.switch[r].index(key) for key in keys]
                tb.switch = {key: i for i, key in enumerate(keys)}
                if len(keys) > MAX_TB_CHANNELS:
                    return (f"a thread block of rank {r} needs {len(keys)} switch channels "
                            f"(limit {MAX_TB_CHANNELS})")
                if len(tb.remote_refs) > MAX_TB_REMOTE:
                    return (f"a thread block of rank {r} needs {len(tb.remote_refs)} remote "
                            f"buffers (limit {MAX_TB_REMOTE})")
                ops = thread_block_ops(self, tb)
                if len(ops) > self.worst:
                    self.worst = len(ops)
                    if len(ops) > MAX_OPS:
                        why = f"a thread block of rank {r} needs {len(ops)} ops (limit {MAX_OPS})"
                if why is not None and self.worst >= enough:
                    return why
                self.ops[(r, tb.id)] = ops
        return why

    def _sem(self, x, y):
        table = self.semaphores[x.rank]
        return table.setdefault((x.id, y.id), len(table))


def build(schedule, inplace: bool = False, fewest: bool = True,
          deadline: Deadline = Deadline()) -> _Plan:
    """The plan with the fewest thread blocks the search finds
    (synth.export.mscclpp_search); BadInput when it finds none. fewest=False: the first
    plan it finds (whether there is one, answered sooner: synth.export.loads).
    OutOfTime when the deadline passes before a try."""
    coll = schedule.collective
    if inplace and coll.name not in IN_PLACE:
        raise BadInput(f"cannot export {coll.name} in place to MSCCL++ (in place: "
                       f"{', '.join(sorted(IN_PLACE))}); export it out of place")
    layout = Layout(coll, inplace)
    flow = _Flow(schedule, layout)
    boxes = schedule.model.boxes or None
    most = max(1, min(coll.num_chunks, MAX_LANES))
    refused = []  # the last try's refusal

    def attempt(lanes, cap, enough=0, ranks=None):  # a failed try's worst: >= `enough`
        deadline.check("exporting to MSCCL++")
        plan = _Plan(flow, layout, boxes, lanes, cap)
        why = plan.finish(enough, ranks)
        if why is not None:
            refused[:] = [why]
            plan.drop()
        return plan if why is None else None, plan.worst

    def floor(lanes, cap, ranks=None):
        return thread_block_floor(flow, boxes, lanes, min(cap, MAX_TB_CHANNELS), ranks)

    widest = most_peers(flow, boxes)
    switched = any(summed for _, _, summed in flow.steps)  # ranks joined: no sample
    sample = None if switched else sample_ranks(layout.n, boxes)
    plan = None
    if sample is not None:  # its sizes and floor count the sampled ranks alone
        found = fewest_split(lambda lanes, cap, enough=0: attempt(lanes, cap, enough, sample),
                             lambda lanes, cap: floor(lanes, cap, sample), widest, most,
                             fewest)
        if found is not None:  # made for every rank
            found.drop()
            plan = attempt(found.t, found.cap)[0]
    if plan is None:  # no sample, or its split does not fit every rank (or it found none:
        # which lane counts are tried depends on the longest thread block seen)
        plan = fewest_split(attempt, floor, widest, most, fewest)
    if plan is None:
        raise BadInput(f"cannot export to MSCCL++: no split into thread blocks (up to {most} "
                       f"chunk lanes, down to one peer each) fits the limits: {refused[0]}")
    return plan


def max_message_size(layout: Layout, scratch: int) -> int:
    """Largest message (the size the executor compares: the output for allgather, else
    the input) whose every buffer offset fits the executor's 32-bit fields."""
    largest = max(layout.input_chunks, layout.output_chunks, scratch)
    per_chunk = (2 ** 32 - 1) // largest // ALIGNMENT * ALIGNMENT
    return per_chunk * (layout.output_chunks if layout.name == "allgather"
                        else layout.input_chunks)


def to_mscclpp_plan(schedule, inplace: bool = False, name: str | None = None,
                    min_bytes: int = 0, max_bytes: int | None = None, plan=None) -> dict:
    """The plan as a JSON-ready dict. BadInput when it cannot be expressed. A compact
    schedule (ranged sends, a pipeline) is lowered in its runtime form
    (synth.export.form.runtime_form), as `synth export` does. `plan`: build's, when the
    caller has it (synth.export.loads.lowered)."""
    from synth.export.form import runtime_form
    from synth.export.msccl import default_name

    name = name or default_name(schedule, inplace)  # after the schedule asked for
    if min_bytes > MAX_MIN_MESSAGE:
        raise BadInput(f"cannot export to MSCCL++ with --min-bytes {min_bytes}: every "
                       "release (v0.8.0 to v0.10.0) reads min_message_size as a 32-bit "
                       f"signed int (at most {MAX_MIN_MESSAGE})")
    schedule = runtime_form(schedule, switch_ops=True)[0]
    plan = plan or build(schedule, inplace)
    lay, coll = plan.layout, schedule.collective
    scratch = max(plan.flow.scratch.values(), default=0)
    top = max_message_size(lay, scratch)
    if max_bytes is not None and max_bytes > top:
        raise BadInput(f"cannot export to MSCCL++ with --max-bytes {max_bytes}: past {top} "
                       "bytes this plan's buffer offsets overflow the executor's 32-bit "
                       "fields")
    if max_bytes is None and min_bytes > top:
        raise BadInput(f"cannot export to MSCCL++ with --min-bytes {min_bytes}: above the "
                       f"largest message the plan takes ({top} bytes, where its buffer "
                       "offsets stop fitting 32 bits)")
    chunks = {"i": lay.input_chunks, "o": lay.output_chunks, "s": scratch}
    gpus = []
    for r in range(lay.n):
        tbs = []
        for tb in plan.tbs[r] or [_Tb(r, 0, "memory", [])]:
            kd = tb.kind
            tbs.append({
                "id": len(tbs),
                "channels": ([{"channel_type": kd, "channel_ids": tb.channel_ids}]
                             if tb.peers else [])
                + ([{"channel_type": "switch", "channel_ids": tb.switch_ids}]
                   if getattr(tb, "switch_ids", None) else []),
                "remote_buffer_refs": ([{"access_channel_type": kd,
                                         "remote_buffer_ids": tb.remote_refs}]
                                       if tb.peers and tb.remote_refs else []),
                "ops": plan.ops.get((r, len(tbs)), [{"name": "nop"}]),
            })
        gpus.append({
            "id": r, "input_chunks": lay.input_chunks, "output_chunks": lay.output_chunks,
            "scratch_chunks": scratch,
            "channels": [{"channel_type": kd, "connected_to": plan.channels[kd][r]}
                         for kd in KINDS if plan.channels[kd][r]]
            + [{"channel_type": "switch", "buffer_type": buf,
                "rank_groups": [{"size": chunks[buf], "ranks": list(group)}]}
               for group, buf in plan.switch[r]],
            "remote_buffers": [{"rank": peer, "type": buf,
                                "access_channel_types": [plan.kind(r, peer)]}
                               for (peer, buf) in plan.remote[r]],
            "semaphores": [{"init_value": 0} for _ in plan.semaphores[r]],
            "threadblocks": tbs,
        })
    return {
        "name": name,
        "collective": coll.name,
        "protocol": "Simple",
        "inplace": bool(inplace),
        "reuse_resources": False,
        "num_threads_per_block": 1024,
        "use_double_scratch_buffer": False,
        "buffer_alignment": ALIGNMENT,
        "min_message_size": int(min_bytes),
        "max_message_size": int(max_bytes if max_bytes is not None else top),
        "gpus": gpus,
        "synth": {"collective": coll.name, "root": coll.root, "ranks": lay.n,
                  "chunks": coll.chunks, "steps": schedule.num_steps,
                  "rounds": schedule.rounds, "topology": schedule.model.name},
    }
