"""The ops of one thread block of an MSCCL++ plan, in program order (synth.export.mscclpp's
recipe, "Ops of a thread block"): the handshake on its channels, then per step the
acquires, the copies that gather a switch operation's operands, the puts (memory; or port,
with the nops and pws/pwsf that keep a signal behind the data it covers), the releases,
the signals and waits, the switch operations (glres) and reductions, and last the final
copies.

synth.export.mscclpp decides everything these ops name (thread blocks, channels,
remote buffers, semaphores, where hand-offs release and acquire); this module only
writes it down within each op's limits.
"""

from __future__ import annotations

from collections import defaultdict

from synth.export.layout import coalesce

MAX_IDS = 8           # channel_ids per op
MAX_PUT = 8           # entries per put
MAX_RE = 8            # sources per re: v0.8.0 has room for 8 (v0.9.0 and later: 10)
MAX_SEM = 16          # semaphore ids per op

# The fixed points of a step in a thread block's program, in program order.
ACQ_SEND, SENT, RECV, ACQ_RE, REDUCED = range(5)


def thread_block_ops(plan, tb) -> list:
    """The ops (JSON-ready dicts) of thread block tb of `plan`, a
    synth.export.mscclpp._Plan whose ids and tables are set; one nop when it has nothing
    to do."""
    out = _Ops(plan, tb)
    out.handshake()
    # the steps with work or hand-offs (a step with neither writes no op: with many
    # thread blocks most are idle in most steps, and visiting them was a third of a build)
    last = len(plan.flow.steps)
    for t in sorted({*tb.steps, *(q[0] for q in tb.acquire), *(p[0] for p in tb.release)}):
        if t < last:
            out.step(t, tb.steps.get(t))
    out.final_copies((len(plan.flow.steps), ACQ_SEND))
    return out.ops or [{"name": "nop"}]


def _local(slot, size=1):
    """A local buffer entry: `size` chunks from slot."""
    return {"type": slot.buf, "index": slot.idx, "size": size}


class _Ops:
    """The ops of one thread block, appended step by step (ops)."""

    def __init__(self, plan, tb):
        self.plan, self.tb, self.ops = plan, tb, []
        self.ref_pos = {rid: i for i, rid in enumerate(tb.remote_refs)}
        self.remote = plan.remote[tb.rank]

    # --- single ops ---------------------------------------------------------------------

    def nop(self):
        """A nop, unless the last op is one."""
        if self.ops and self.ops[-1]["name"] != "nop":
            self.ops.append({"name": "nop"})

    def control(self, name, targets, kd):
        """signal, wait (or the relaxed ones) on the channels to `targets`, 8 ids an op."""
        ids = sorted(self.tb.position[p] for p in targets)
        for i in range(0, len(ids), MAX_IDS):
            self.ops.append({"name": name, "channel_ids": ids[i:i + MAX_IDS],
                             "channel_type": kd})

    def far(self, peer, slot, size=1):
        """A remote buffer entry: `size` chunks from slot of peer's buffer."""
        return {"buffer_id": self.ref_pos[self.remote[(peer, slot.buf)]], "index": slot.idx,
                "size": size}

    def semaphores(self, name, ids):
        """sem_acquire or sem_release of the semaphores `ids`, 16 an op."""
        ids = sorted(set(ids))
        for i in range(0, len(ids), MAX_SEM):
            self.ops.append({"name": name, "semaphore_ids": ids[i:i + MAX_SEM]})

    def acquire(self, point):
        """The acquires of the hand-offs to this thread block at point, then a nop."""
        tb = self.tb
        if tb.acquire.get(point):
            self.semaphores("sem_acquire", [self.plan._sem(x, tb) for x in tb.acquire[point]])
            self.ops.append({"name": "nop"})

    def release(self, point):
        """A nop, then the releases of the hand-offs from this thread block at point."""
        tb = self.tb
        if tb.release.get(point):
            self.nop()
            self.semaphores("sem_release", [self.plan._sem(tb, y) for y in tb.release[point]])

    def puts(self, name, entries, kd):
        """put, pws or pwsf ops of `entries` (src, peer, dst, count), 8 an op."""
        for i in range(0, len(entries), MAX_PUT):
            part = entries[i:i + MAX_PUT]
            op = {"name": name, "src_buff": [_local(s, c) for s, _, _, c in part],
                  "dst_buff": [self.far(p, d, c) for _, p, d, c in part], "channel_type": kd}
            if kd == "port":
                op["channel_ids"] = [self.tb.position[p] for _, p, _, _ in part]
            self.ops.append(op)

    def copies(self, pairs):
        """One copy per run of consecutive slots of `pairs` (src, dst)."""
        for src, dst, cnt in coalesce(pairs):
            self.ops.append({"name": "copy", "src_buff": [_local(src, cnt)],
                             "dst_buff": [_local(dst, cnt)]})

    # --- the program's parts ------------------------------------------------------------

    def handshake(self):
        """A signal to every peer and a wait for every peer (relaxed on memory
        channels), then a nop."""
        tb = self.tb
        if tb.peers:
            self.control("rlxsignal" if tb.kind == "memory" else "signal", tb.peers, tb.kind)
            self.control("rlxwait" if tb.kind == "memory" else "wait", tb.peers, tb.kind)
            self.ops.append({"name": "nop"})

    def step(self, t, step):
        """The ops of step t (`step`: the thread block's work in it, or None)."""
        self.acquire((t, ACQ_SEND))
        if step is not None and step["align"]:  # values a switch reads, gathered
            self.copies(step["align"])
            self.ops.append({"name": "nop"})
        if step is not None and step["puts"]:
            self.put_ops(step["puts"])
        self.release((t, SENT))  # after a nop: the put sources are free
        if step is not None:
            self.signals_and_waits(t, step)
        self.release((t, RECV))
        self.acquire((t, ACQ_RE))
        if step is not None and step["glres"]:
            self.switch_operations(step["glres"])
            if not step["re"]:
                self.ops.append({"name": "nop"})
        if step is not None and step["re"]:
            self.reductions(step["re"])
            self.ops.append({"name": "nop"})
        self.release((t, REDUCED))

    def put_ops(self, step_puts):
        """The puts of one step, `step_puts` (the flow's moves: chunk, rank, peer, src,
        dst): per peer in runs of consecutive slots; on memory channels one op per
        source buffer type, then a nop; on port channels as port_puts says."""
        per_peer = defaultdict(list)
        for _, _, p, src, dst in step_puts:
            per_peer[p].append((src, dst))
        runs = {p: [(s, p, d, c) for s, d, c in coalesce(pairs)]
                for p, pairs in sorted(per_peer.items())}
        if self.tb.kind == "memory":
            by_buf = defaultdict(list)
            for p in runs:
                for e in runs[p]:
                    by_buf[e[0].buf].append(e)
            for buf in sorted(by_buf):
                self.puts("put", by_buf[buf], "memory")
            self.ops.append({"name": "nop"})
        else:
            self.port_puts(runs, per_peer)

    def port_puts(self, runs, per_peer):
        """The port puts of one step: after a nop if requests were pushed since the last
        one; each peer's runs but its last as puts (then a nop unless one thread pushes
        each peer's entries), then each peer's last run as pws, or pwsf when any of the
        peer's sources is written in a launch (the proxy reads it later)."""
        ops, flow, r = self.ops, self.plan.flow, self.tb.rank
        # thread j pushes entry j of an op; the signal of a peer's last entry
        # is behind its earlier entries if one thread pushed them all, or
        # after a nop; so is everything pushed in earlier steps
        if _pushed_since_nop(ops):
            ops.append({"name": "nop"})
        early = [e for p in runs for e in runs[p][:-1]]
        last = {"pws": [], "pwsf": []}
        for p in runs:
            reused = any(s in flow.written[r] for s, _ in per_peer[p])
            last["pwsf" if reused else "pws"].append(runs[p][-1])
        if early:
            self.puts("put", early, "port")
            thread = {e[1]: i % MAX_PUT for name in ("pws", "pwsf")
                      for i, e in enumerate(last[name])}
            if any(i % MAX_PUT != thread[e[1]] for i, e in enumerate(early)):
                ops.append({"name": "nop"})
        for name in ("pws", "pwsf"):
            self.puts(name, last[name], "port")

    def signals_and_waits(self, t, step):
        """The signals of step t (the memory destinations of its puts, and the peers it
        tells), its waits, and the nop after them unless an acquire's follows."""
        tb = self.tb
        told = step["notify"] | ({p for _, _, p, _, _ in step["puts"]}
                                 if tb.kind == "memory" else set())
        if told:
            self.control("signal", told, tb.kind)
        if step["wait"]:
            self.control("wait", step["wait"], tb.kind)
            if tb.release.get((t, RECV)) or not tb.acquire.get((t, ACQ_RE)):
                self.ops.append({"name": "nop"})  # else the acquire's nop serves

    def switch_operations(self, summed):
        """One glres per run of consecutive slots of `summed` (src, dst, source group,
        destination group): it loads from the source group's switch channel over src's
        buffer and stores to the destination group's over dst's."""
        switch = self.tb.switch
        for src, dst, readers, writers, cnt in _glres_runs(summed):
            self.ops.append({"name": "glres", "channel_type": "switch",
                             "src_buff": [{"switch_channel_id": switch[(readers, src.buf)],
                                           "index": src.idx, "size": cnt}],
                             "dst_buff": [{"switch_channel_id": switch[(writers, dst.buf)],
                                           "index": dst.idx, "size": cnt}]})

    def reductions(self, sums):
        """One re per run of consecutive chunks of `sums` (dst, srcs); more than 8
        sources are chained, a nop between, accumulating in dst."""
        for dst, srcs, cnt in _re_runs(sums):
            part, rest = srcs[:MAX_RE], srcs[MAX_RE:]
            while True:  # more sources than one op takes: accumulate in dst
                self.ops.append({"name": "re", "src_buff": [_local(s, cnt) for s in part],
                                 "dst_buff": [_local(dst, cnt)]})
                if not rest:
                    break
                self.ops.append({"name": "nop"})
                part, rest = [dst, *rest[:MAX_RE - 1]], rest[MAX_RE - 1:]

    def final_copies(self, end):
        """The acquires at the end (point `end`), a nop, and the copies of the results
        into their output slots."""
        if self.tb.epilogue:
            self.acquire(end)
            self.nop()
            self.copies(self.tb.epilogue)


def _pushed_since_nop(ops):
    """Whether a port request was pushed since the last nop: requests pushed later by
    other threads might reach the proxy's FIFO before it."""
    for op in reversed(ops):
        if op["name"] == "nop":
            return False
        if op.get("channel_type") == "port" and op["name"] != "wait":
            return True
    return False


def _glres_runs(summed):
    """The switch operations (src, dst, source group, destination group) of one step
    merged into runs (src, dst, source group, destination group, count) of consecutive
    slots."""
    out = []
    for src, dst, readers, writers in sorted(summed, key=lambda e: (e[2], e[3], e[0].buf,
                                                                     e[0].idx)):
        if out:
            s0, d0, r0, w0, cnt = out[-1]
            if ((r0, w0) == (readers, writers) and (s0.buf, d0.buf) == (src.buf, dst.buf)
                    and s0.idx + cnt == src.idx and d0.idx + cnt == dst.idx):
                out[-1] = (s0, d0, r0, w0, cnt + 1)
                continue
        out.append((src, dst, readers, writers, 1))
    return out


def _re_runs(reductions):
    """The reductions (dst, srcs) of one step merged into runs (dst, srcs, count) of
    consecutive chunks: every operand one slot further than in the previous one."""
    out = []
    for dst, srcs in sorted(reductions, key=lambda e: (e[0].buf, e[0].idx)):
        if out:
            d0, s0, cnt = out[-1]
            if (d0.buf == dst.buf and d0.idx + cnt == dst.idx and len(s0) == len(srcs)
                    and all(a.buf == b.buf and a.idx + cnt == b.idx for a, b in zip(s0, srcs))):
                out[-1] = (d0, s0, cnt + 1)
                continue
        out.append((dst, srcs, 1))
    return out
