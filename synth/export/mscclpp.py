"""Lower a Schedule to an MSCCL++ execution plan (the JSON the executor loads, v0.8.0+).

Produced: protocol Simple, memory channels (CUDA IPC / NVLink, so every rank must be in
one node or NVLink domain), every collective out of place; in place for allgather,
gather, allreduce, broadcast and reduce (the data sits in o alone; a peer's i is never
addressed). Reducescatter and scatter in place, and alltoall in place, are refused (the
first two leave a rank's output at a different offset on each rank, which the
executor's symmetric-offset rule forbids; alltoall has no in-place form). Buffers follow
synth.export.layout, with input_chunks/output_chunks the nominal sizes on every rank
(so one chunk is the same number of bytes in i, o and s, as the executor requires).

The recipe (docs/runtimes.md, "The plan synth writes"):
- Chunk lanes: chunk k is handled by thread block k mod T on every rank, T the fewest
  that keep each thread block within 64 ops, 16 channels and 16 remote buffers. Every
  slot belongs to one chunk, so thread blocks never touch each other's data.
- Channels: one memory channel per (lane, peer pair that exchanges data in the lane),
  declared on both ranks in (lane, peer) order, so the k-th channel from A to B pairs
  with the k-th from B to A.
- Each thread block opens with a handshake (rlxsignal, rlxwait on all its channels,
  nop), then per schedule step: put for every send (the sender writes the peer's
  memory), nop, signal each destination, wait for each source, nop, then a local re for
  every reduction that arrived, nop. Sends read the value at the start of the step.
- A copy is put straight into a slot the receiver has not touched in this launch: its
  output slot, or else a fresh scratch slot. A reduction is put into a fresh scratch slot
  and summed into the receiver's value by the re after the wait (all of one chunk's
  arrivals in one re). Scratch slots are never reused in a launch. Results not in their
  output slot at the end are copied there.
- max_message_size is the largest size that keeps every buffer offset within the
  executor's 32-bit fields (unless given).
"""

from __future__ import annotations

from collections import defaultdict

from synth.errors import BadInput
from synth.export.layout import Layout, Slot, coalesce, drop_redundant

MAX_OPS = 64
MAX_IDS = 8           # channel_ids per op
MAX_PUT = 8           # entries per put
MAX_RE = 9            # sources per re (10 entries at most, one is the destination)
MAX_TB_CHANNELS = 16
MAX_TB_REMOTE = 16
MAX_LANES = 64
ALIGNMENT = 16
IN_PLACE = frozenset({"allgather", "gather", "allreduce", "broadcast", "reduce"})


class _Lane:
    """One thread block of one rank."""

    def __init__(self, rank, lane):
        self.rank, self.lane = rank, lane
        self.peers = set()
        self.steps = defaultdict(lambda: {"puts": [], "signal": set(), "wait": set(),
                                          "re": []})
        self.epilogue = []


class _Plan:
    def __init__(self, schedule, layout: Layout, lanes: int):
        self.layout, self.t = layout, lanes
        coll, lay = schedule.collective, layout
        self.tbs = {(r, l): _Lane(r, l) for r in range(lay.n) for l in range(lanes)}
        loc, accessed = {}, defaultdict(set)
        for r in range(lay.n):
            for k in range(lay.g):
                slot = lay.init_slot(r, k)
                if slot is not None:
                    loc[(r, k)] = slot
                    accessed[r].add(slot)
        self.scratch = defaultdict(int)

        def fresh(rank):
            self.scratch[rank] += 1
            slot = Slot("s", self.scratch[rank] - 1)
            accessed[rank].add(slot)
            return slot

        def untouched(rank, k):
            out = lay.out_slot(rank, k)
            if out is not None and out not in accessed[rank]:
                accessed[rank].add(out)
                return out
            return fresh(rank)

        steps = drop_redundant(coll, schedule.steps)
        self.nsteps = len(steps)
        for t, sends in enumerate(steps):
            moved, arrived = {}, defaultdict(list)
            for x in sorted(sends, key=lambda x: (x.chunk, x.src, x.dst)):
                lane = x.chunk % lanes
                src = loc[(x.src, x.chunk)]
                if x.op == "copy":
                    dst = untouched(x.dst, x.chunk)
                    moved[(x.dst, x.chunk)] = dst
                else:
                    dst = fresh(x.dst)
                    arrived[(x.dst, x.chunk)].append(dst)
                sender, receiver = self.tbs[(x.src, lane)], self.tbs[(x.dst, lane)]
                sender.peers.add(x.dst)
                receiver.peers.add(x.src)
                sender.steps[t]["puts"].append((src, x.dst, dst))
                sender.steps[t]["signal"].add(x.dst)
                receiver.steps[t]["wait"].add(x.src)
            loc.update(moved)
            for (d, k), slots in sorted(arrived.items()):
                cur = loc[(d, k)]
                if lay.writable(d, k, cur):
                    dst, srcs = cur, [cur, *slots]
                else:
                    out = lay.out_slot(d, k)
                    if out is not None and out not in accessed[d]:
                        accessed[d].add(out)
                        dst, srcs = out, [cur, *slots]
                    else:
                        dst, srcs = slots[0], [slots[0], cur, *slots[1:]]
                loc[(d, k)] = dst
                self.tbs[(d, k % lanes)].steps[t]["re"].append((dst, srcs))
        for r, k in sorted(coll.post):
            out = lay.out_slot(r, k)
            if loc.get((r, k)) not in (None, out):
                self.tbs[(r, k % lanes)].epilogue.append((loc[(r, k)], out))
        self._channels()
        self._remote_buffers()
        self.ops = {key: self._ops(tb) for key, tb in self.tbs.items()}

    def _channels(self):
        """GPU-level memory channels, in (lane, peer) order on every rank."""
        self.channels = defaultdict(list)  # rank -> peers, position = channel id
        self.chan_id = {}  # (rank, lane, peer) -> GPU-level id
        for r in range(self.layout.n):
            for lane in range(self.t):
                for p in sorted(self.tbs[(r, lane)].peers):
                    self.chan_id[(r, lane, p)] = len(self.channels[r])
                    self.channels[r].append(p)

    def _remote_buffers(self):
        self.remote = defaultdict(list)  # rank -> [(peer, buf)], position = id
        for (r, lane), tb in sorted(self.tbs.items()):
            for t in sorted(tb.steps):
                for _, peer, dst in tb.steps[t]["puts"]:
                    if (peer, dst.buf) not in self.remote[r]:
                        self.remote[r].append((peer, dst.buf))

    def _ops(self, tb):
        peers = sorted(tb.peers)
        position = {p: i for i, p in enumerate(peers)}
        refs = sorted({self.remote[tb.rank].index((peer, dst.buf))
                       for t in tb.steps for _, peer, dst in tb.steps[t]["puts"]})
        ref_pos = {rid: i for i, rid in enumerate(refs)}
        tb.channel_ids = [self.chan_id[(tb.rank, tb.lane, p)] for p in peers]
        tb.remote_refs = refs
        ops = []

        def control(name, targets):
            ids = sorted(position[p] for p in targets)
            for i in range(0, len(ids), MAX_IDS):
                ops.append({"name": name, "channel_ids": ids[i:i + MAX_IDS],
                            "channel_type": "memory"})

        def local(slot):
            return {"type": slot.buf, "index": slot.idx, "size": 1}

        if peers:
            control("rlxsignal", peers)
            control("rlxwait", peers)
            ops.append({"name": "nop"})
        for t in range(self.nsteps):
            if t not in tb.steps:
                continue
            step = tb.steps[t]
            groups = defaultdict(list)
            for src, peer, dst in step["puts"]:
                groups[src.buf].append((src, peer, dst))
            for buf in sorted(groups):
                entries = groups[buf]
                for i in range(0, len(entries), MAX_PUT):
                    part = entries[i:i + MAX_PUT]
                    ops.append({"name": "put", "src_buff": [local(s) for s, _, _ in part],
                                "dst_buff": [{"buffer_id": ref_pos[self.remote[tb.rank].index(
                                    (p, d.buf))], "index": d.idx, "size": 1} for _, p, d in part],
                                "channel_type": "memory"})
            if step["puts"]:
                ops.append({"name": "nop"})
            control("signal", step["signal"])
            control("wait", step["wait"])
            if step["wait"]:
                ops.append({"name": "nop"})
            for dst, srcs in step["re"]:
                part, rest = srcs[:MAX_RE], srcs[MAX_RE:]
                while True:  # more sources than one op takes: accumulate in dst
                    ops.append({"name": "re", "src_buff": [local(s) for s in part],
                                "dst_buff": [local(dst)]})
                    if not rest:
                        break
                    ops.append({"name": "nop"})
                    part, rest = [dst, *rest[:MAX_RE - 1]], rest[MAX_RE - 1:]
            if step["re"]:
                ops.append({"name": "nop"})
        if tb.epilogue:
            if ops and ops[-1]["name"] != "nop":
                ops.append({"name": "nop"})
            for src, dst, cnt in coalesce(tb.epilogue):
                ops.append({"name": "copy", "src_buff": [dict(local(src), size=cnt)],
                            "dst_buff": [dict(local(dst), size=cnt)]})
        return ops or [{"name": "nop"}]

    def check_limits(self):
        for (r, lane), tb in self.tbs.items():
            if len(self.ops[(r, lane)]) > MAX_OPS:
                return f"a thread block of rank {r} needs {len(self.ops[(r, lane)])} ops " \
                       f"(limit {MAX_OPS})"
            if len(tb.peers) > MAX_TB_CHANNELS:
                return f"a thread block of rank {r} needs {len(tb.peers)} channels " \
                       f"(limit {MAX_TB_CHANNELS})"
            if len(tb.remote_refs) > MAX_TB_REMOTE:
                return f"a thread block of rank {r} needs {len(tb.remote_refs)} remote " \
                       f"buffers (limit {MAX_TB_REMOTE})"
        return None


def build(schedule, inplace: bool = False) -> _Plan:
    coll = schedule.collective
    crossing = _between_boxes(schedule)
    if crossing:
        raise BadInput(f"cannot export to MSCCL++: ranks {crossing[0]} and {crossing[1]} "
                       "are in different boxes, and the plans synth writes use memory "
                       "channels, which need one node (no port channels yet)")
    if inplace and coll.name not in IN_PLACE:
        raise BadInput(f"cannot export {coll.name} in place to MSCCL++ (in place: "
                       f"{', '.join(sorted(IN_PLACE))}); export it out of place")
    layout = Layout(coll, inplace)
    most = max(1, min(coll.num_chunks, MAX_LANES))
    why = None
    for lanes in range(1, most + 1):
        plan = _Plan(schedule, layout, lanes)
        why = plan.check_limits()
        if why is None:
            return plan
    raise BadInput(f"cannot export to MSCCL++: even with {most} thread blocks, {why}")


def _between_boxes(schedule) -> tuple[int, int] | None:
    """A (src, dst) the schedule sends over between two machines (the topology's boxes,
    as NAMExK records them), or None."""
    boxes = schedule.model.boxes
    if not boxes:
        return None
    return next(((x.src, x.dst) for step in schedule.steps for x in step.sends
                 if boxes[x.src] != boxes[x.dst]), None)


def max_message_size(layout: Layout, scratch: int) -> int:
    """Largest message (the size the executor compares: the output for allgather, else
    the input) whose every buffer offset fits the executor's 32-bit fields."""
    largest = max(layout.input_chunks, layout.output_chunks, scratch)
    per_chunk = (2 ** 32 - 1) // largest // ALIGNMENT * ALIGNMENT
    return per_chunk * (layout.output_chunks if layout.name == "allgather"
                        else layout.input_chunks)


def to_mscclpp_plan(schedule, inplace: bool = False, name: str | None = None,
                    min_bytes: int = 0, max_bytes: int | None = None) -> dict:
    """The plan as a JSON-ready dict. BadInput when it cannot be expressed."""
    from synth.export.msccl import default_name

    plan = build(schedule, inplace)
    lay, coll = plan.layout, schedule.collective
    scratch = max(plan.scratch.values(), default=0)
    gpus = []
    for r in range(lay.n):
        tbs = []
        for lane in range(plan.t):
            tb = plan.tbs[(r, lane)]
            tbs.append({
                "id": lane,
                "channels": ([{"channel_type": "memory", "channel_ids": tb.channel_ids}]
                             if tb.channel_ids else []),
                "remote_buffer_refs": ([{"access_channel_type": "memory",
                                         "remote_buffer_ids": tb.remote_refs}]
                                       if tb.remote_refs else []),
                "ops": plan.ops[(r, lane)],
            })
        gpus.append({
            "id": r, "input_chunks": lay.input_chunks, "output_chunks": lay.output_chunks,
            "scratch_chunks": scratch,
            "channels": ([{"channel_type": "memory", "connected_to": plan.channels[r]}]
                         if plan.channels[r] else []),
            "remote_buffers": [{"rank": peer, "type": buf, "access_channel_types": ["memory"]}
                               for peer, buf in plan.remote[r]],
            "semaphores": [],
            "threadblocks": tbs,
        })
    return {
        "name": name or default_name(schedule, inplace),
        "collective": coll.name,
        "protocol": "Simple",
        "inplace": bool(inplace),
        "reuse_resources": False,
        "num_threads_per_block": 1024,
        "use_double_scratch_buffer": False,
        "buffer_alignment": ALIGNMENT,
        "min_message_size": int(min_bytes),
        "max_message_size": int(max_bytes if max_bytes is not None
                                else max_message_size(lay, scratch)),
        "gpus": gpus,
        "synth": {"collective": coll.name, "root": coll.root, "ranks": lay.n,
                  "chunks": coll.chunks, "steps": schedule.num_steps,
                  "rounds": schedule.rounds, "topology": schedule.model.name},
    }
