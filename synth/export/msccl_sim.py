"""Independent checker for MSCCL XML algorithms: the loader's rules and a simulation.

It reads the XML text only (plus the root of a rooted collective, which the format does
not carry) and shares no code with the exporter: it imports only the standard library,
NumPy (its vector clocks are arrays) and synth.errors, so an exporter bug cannot hide
behind a helper both trust.

Static checks (what the runtimes' loaders enforce, the strictest of them):
  algo attributes present and well-formed, ngpus = number of gpus, known coll and step
  types, gpu ids 0..N-1, threadblock ids contiguous, one send and one receive peer per
  threadblock (never itself, < ngpus), chan < nchannels, at most one threadblock per
  (peer, channel, direction), steps numbered 0, 1, ... with every attribute, 0 < cnt < 72,
  offsets of the buffers a step uses inside those buffers, send types only with a send
  peer and receive types only with a receive peer, depid/deps naming an existing step of
  another threadblock that has hasdep="1", at most 64 steps per threadblock and 64
  threadblocks per GPU; buffer sizes and nchunksperloop as the collective needs.
  Integer widths: attributes fit an int, minBytes <= maxBytes fit an int64 (maxBytes="0"
  is no limit to msccl-executor-nccl and RCCL, 0 to microsoft/msccl), used offsets an
  int16. What the loaders fold: every nop carries a dependency and no hasdep and is
  followed by a step with its own dependency; a re they fuse into the one before it has
  its cnt. The summary names the runtimes whose loader knows the collective.

Simulation: every threadblock is a process running its steps in order. A step waits for
its dependency; a receive waits until its connection (sender, receiver, channel) holds a
message, and a send until the connection has room (`slots` messages; MSCCL's Simple
protocol buffers two one-chunk sends, the default of one is stricter). A fused step
(rcs, rrs, rrcs) streams: it takes its message, then sends on once there is room. The k-th send on
a connection is the k-th receive. No process able to move while some are unfinished is a
deadlock. Data is symbolic: each slot holds a sorted tuple of (rank, chunk) contributions
(reductions concatenate, so a double count shows). Reading a slot never written,
reducing in a collective that does not combine, writing the input buffer of an
out-of-place call, and two threadblocks touching a slot (one writing) without a chain of
program order, dependencies and messages between them (vector clocks) are errors. At the
end every connection is empty and each output slot holds exactly what the collective
requires:

    collective      rank r starts with (out of place / in place)  rank r ends with
    allgather       i[j] / o[r*C+j] = chunk r*C+j                  o[k] = chunk k
    reducescatter   i[k] = r's share of chunk k                    o[j] / i[r*C+j] = sum
    allreduce       i[k] / o[k]                                    o[k] = sum
    broadcast       root: i[k] / o[k]                              o[k] = root's chunk k
    reduce          i[k] / o[k]                                    root: o[k] = sum
    gather          i[j] / o[r*C+j] = chunk r*C+j                  root: o[k] = chunk k
    scatter         root: i[k] = chunk k                           o[j] / i[r*C+j] = chunk r*C+j
    alltoall        i[d*C+j] = chunk (r*N+d)*C+j                   o[s*C+j] = chunk (s*N+r)*C+j
"""

import re
import xml.etree.ElementTree as ET
from collections import deque

import numpy as np

from synth.errors import NoAnswer

COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter", "alltoall")
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps",
              "hasdep")
ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
              "outofplace", "minBytes", "maxBytes")
# step type: (reads src, writes dst, receives, sends, reduces)
TYPES = {
    "s": (True, False, False, True, False),
    "r": (False, True, True, False, False),
    "rcs": (False, True, True, True, False),
    "rrs": (True, False, True, True, True),
    "rrc": (True, True, True, False, True),
    "rrcs": (True, True, True, True, True),
    "cpy": (True, True, False, False, False),
    "re": (True, True, False, False, True),
    "nop": (False, False, False, False, False),
}


# The runtimes' integers (docs/runtimes.md, "Versions synth targets"): attributes an int
# (strtol), minBytes and maxBytes an int64 (strtoll), a step's offsets an int16. LOADERS:
# the `coll` each runtime's loader knows (microsoft/msccl: "reduce_scatter", not ours).
INT_MAX, BYTES_MAX, OFFSET_MAX = 2 ** 31 - 1, 2 ** 63 - 1, 2 ** 15 - 1
LOADERS = {"msccl-executor-nccl": frozenset(COLLS), "RCCL": frozenset(COLLS),
           "microsoft/msccl": frozenset({"allreduce", "allgather", "reduce", "broadcast",
                                         "alltoall"})}


# what no targeted runtime runs as the file means (docs/runtimes.md, "Gather and scatter
# XML"): parsed as the format says, then refused
UNRUN = frozenset({"gather", "scatter"})


class MscclInvalid(NoAnswer):
    """The XML would not load, would hang, or would compute the wrong thing."""


def _fail(message):
    raise MscclInvalid(message)


_INTEGER = re.compile(r"-?\d+")  # compiled once: read for every attribute of every step


def _int(elem, attr, where, lo=None, hi=None):
    text = elem.get(attr)
    if text is None:
        _fail(f"{where}: missing attribute {attr}")
    if not _INTEGER.fullmatch(text):
        _fail(f"{where}: {attr}={text!r} is not an integer")
    value = int(text)
    width = BYTES_MAX if hi == BYTES_MAX else INT_MAX
    if not -width - 1 <= value <= width:
        _fail(f"{where}: {attr}={value} does not fit the {width.bit_length() + 1}-bit int "
              "the runtimes read it into")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        _fail(f"{where}: {attr}={value} is out of range {lo}..{hi}")
    return value


def layout(coll, n, c, root, inplace):
    """(i_chunks, o_chunks, start, end): start/end map (rank, buf, idx) to a value."""
    def one(rank, chunk):
        return ((rank, chunk),)

    def total(chunk):
        return tuple((q, chunk) for q in range(n))

    start, end = {}, {}
    if coll in ("allgather", "gather"):
        sizes = (0 if inplace else c, n * c)
        for r in range(n):
            for j in range(c):
                start[(r, "o", r * c + j) if inplace else (r, "i", j)] = one(r, r * c + j)
        for r in range(n) if coll == "allgather" else [root]:
            for k in range(n * c):
                end[(r, "o", k)] = one(k // c, k)
    elif coll == "broadcast":
        sizes = (0 if inplace else c, c)
        for k in range(c):
            start[(root, "o" if inplace else "i", k)] = one(root, k)
            for r in range(n):
                end[(r, "o", k)] = one(root, k)
    elif coll in ("allreduce", "reduce"):
        sizes = (0 if inplace else c, c)
        for k in range(c):
            for r in range(n):
                start[(r, "o" if inplace else "i", k)] = one(r, k)
            for r in range(n) if coll == "allreduce" else [root]:
                end[(r, "o", k)] = total(k)
    elif coll in ("reducescatter", "scatter"):
        sizes = (n * c, 0 if inplace else c)
        for k in range(n * c):
            if coll == "reducescatter":
                for r in range(n):
                    start[(r, "i", k)] = one(r, k)
            else:
                start[(root, "i", k)] = one(root, k)
            want = total(k) if coll == "reducescatter" else one(root, k)
            end[(k // c, "i", k) if inplace else (k // c, "o", k % c)] = want
    else:  # alltoall
        sizes = (n * c, n * c)
        for s in range(n):
            for d in range(n):
                for j in range(c):
                    k = (s * n + d) * c + j
                    start[(s, "i", d * c + j)] = one(s, k)
                    end[(d, "o", s * c + j)] = one(s, k)
    return sizes[0], sizes[1], start, end


def _syntax(text):
    if "<?xml" in text:
        _fail("an <?xml ...?> declaration (the runtimes' tokenizer does not accept one)")
    body = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    for tag in re.findall(r"<[^>]*>", body):
        if "\n" in tag:
            _fail(f"element split over lines: {tag.splitlines()[0].strip()} ...")
        if re.search(r"=\s*'", tag):
            _fail(f"single-quoted attribute in {tag}")
    try:
        return ET.fromstring(text)
    except ET.ParseError as e:
        _fail(f"not well-formed XML: {e}")


class _Tb:
    def __init__(self, gpu, tid, send, recv, chan, steps, gid):
        self.gpu, self.id, self.send, self.recv, self.chan = gpu, tid, send, recv, chan
        self.steps, self.gid, self.pc = steps, gid, 0
        self.clock = None
        self.history = []  # clock after each finished step
        self.partial = None  # a fused step's message, taken before it can send on

    def __str__(self):
        return f"gpu {self.gpu} threadblock {self.id}"


def _parse(text, root, max_steps, max_tbs):
    algo = _syntax(text)
    if algo.tag != "algo":
        _fail(f"root element is <{algo.tag}>, expected <algo>")
    for attr in ALGO_ATTRS:
        if algo.get(attr) is None:
            _fail(f"algo: missing attribute {attr}")
    coll = algo.get("coll")
    if coll not in COLLS:
        _fail(f"algo: coll={coll!r} is not one of {', '.join(COLLS)}")
    if coll in UNRUN:
        _fail(f"algo: coll={coll!r}: no runtime synth targets runs it as the file means "
              "(NCCL has no gather or scatter call; RCCL's counts one share against "
              "nchunksperloop: docs/runtimes.md, \"Gather and scatter XML\")")
    if algo.get("proto") not in ("Simple", "LL", "LL128"):
        _fail(f"algo: proto={algo.get('proto')!r} (expected Simple, LL or LL128)")
    n = _int(algo, "ngpus", "algo", 1)
    nchan = _int(algo, "nchannels", "algo", 1, 32)
    loop = _int(algo, "nchunksperloop", "algo", 1)
    inplace, outofplace = _int(algo, "inplace", "algo", 0, 1), _int(algo, "outofplace", "algo", 0, 1)
    if inplace == outofplace:
        _fail("algo: exactly one of inplace and outofplace must be 1")
    low = _int(algo, "minBytes", "algo", 0, BYTES_MAX)
    high = _int(algo, "maxBytes", "algo", 0, BYTES_MAX)
    if low > high:
        _fail(f"algo: minBytes={low} is above maxBytes={high}: microsoft/msccl refuses the "
              "file at load (\"minBytes cannot be greater than maxBytes\"; it reads "
              "maxBytes=\"0\" as 0, msccl-executor-nccl and RCCL as no limit)")
    if coll == "alltoall" and inplace:
        _fail("algo: alltoall runs out of place only")
    per_rank = 1 if coll in ("allreduce", "broadcast", "reduce") else n
    if loop % per_rank:
        _fail(f"algo: nchunksperloop={loop} is not a multiple of {per_rank} for {coll}")
    c = loop // per_rank
    if coll in ROOTED:
        if root is None:
            _fail(f"{coll} needs its root (the XML does not name it)")
        if not 0 <= root < n:
            _fail(f"root {root} is not a gpu (0..{n - 1})")
    else:
        root = None
    i_chunks, o_chunks, start, end = layout(coll, n, c, root, bool(inplace))

    gpus = algo.findall("gpu")
    if len(gpus) != n or sorted(_int(g, "id", "gpu", 0) for g in gpus) != list(range(n)):
        _fail(f"expected gpus with ids 0..{n - 1}, one each (ngpus={n})")
    tbs, sizes, gid = {}, {}, 0
    for g in sorted(gpus, key=lambda g: int(g.get("id"))):
        r = int(g.get("id"))
        where = f"gpu {r}"
        size = {"i": _int(g, "i_chunks", where, 0), "o": _int(g, "o_chunks", where, 0),
                "s": _int(g, "s_chunks", where, 0)}
        if (size["i"], size["o"]) != (i_chunks, o_chunks):
            _fail(f"{where}: i_chunks={size['i']} o_chunks={size['o']}, but {coll} "
                  f"{'in place' if inplace else 'out of place'} with {c} chunks per share "
                  f"needs {i_chunks} and {o_chunks}")
        sizes[r] = size
        elems = g.findall("tb")
        if len(elems) > max_tbs:
            _fail(f"{where}: {len(elems)} threadblocks (limit {max_tbs})")
        seen = set()
        for pos, t in enumerate(elems):
            where = f"gpu {r} tb {pos}"
            if _int(t, "id", where) != pos:
                _fail(f"{where}: id={t.get('id')} (ids must run 0, 1, ... in order)")
            send, recv = _int(t, "send", where, -1, n - 1), _int(t, "recv", where, -1, n - 1)
            chan = _int(t, "chan", where, 0, nchan - 1)
            if r in (send, recv):
                _fail(f"{where}: a threadblock's peer is its own gpu")
            for role, peer in (("send", send), ("recv", recv)):
                if peer >= 0:
                    if (role, peer, chan) in seen:
                        _fail(f"{where}: a second threadblock with {role} peer {peer} "
                              f"on channel {chan}")
                    seen.add((role, peer, chan))
            steps = [_step(st, i, f"{where} step {i}", send, recv, size)
                     for i, st in enumerate(t.findall("step"))]
            if len(steps) > max_steps:
                _fail(f"{where}: {len(steps)} steps (limit {max_steps})")
            _as_loaded(steps, where)
            tbs[(r, pos)] = _Tb(r, pos, send, recv, chan, steps, gid)
            gid += 1
    for (r, pos), tb in tbs.items():
        for i, st in enumerate(tb.steps):
            if st["depid"] < 0:
                continue
            where = f"gpu {r} tb {pos} step {i}"
            target = tbs.get((r, st["depid"]))
            if target is None or st["depid"] == pos:
                _fail(f"{where}: depid={st['depid']} is not another threadblock of gpu {r}")
            if not 0 <= st["deps"] < len(target.steps):
                _fail(f"{where}: deps={st['deps']} is not a step of tb {st['depid']}")
            if not target.steps[st["deps"]]["hasdep"]:
                _fail(f"{where}: waits on tb {st['depid']} step {st['deps']}, "
                      f"which does not have hasdep=\"1\"")
    return dict(coll=coll, n=n, c=c, root=root, inplace=bool(inplace), start=start, end=end,
                tbs=tbs, nchannels=nchan)


def _as_loaded(steps, where):
    """The loaders keep no nop: they hand its dependency to the next step that is not a
    nop, and number the steps as if each nop carried one dependency; they fuse a re into
    the re before it (same destination, same source buffer, no dependency of its own,
    none waiting on the first) and run both with the later cnt. A program they would
    read differently from its text is refused."""
    pending, prev = 0, None  # nops since the last step; the re a next one would fuse with
    for i, st in enumerate(steps):
        w = f"{where} step {i}"
        if st["type"] == "nop":
            if st["depid"] < 0:
                _fail(f"{w}: a nop without a dependency (the loaders drop it, so the numbers "
                      "of the steps after it shift)")
            if st["hasdep"]:
                _fail(f"{w}: hasdep on a nop (the runtimes signal only steps that move data)")
            pending += 1
            continue
        if pending and st["depid"] < 0:
            _fail(f"{w}: follows a nop but has no dependency of its own (the loaders refuse "
                  "it, or fold the nop's dependency into a later step)")
        pending = 0
        if st["type"] == "re" and prev is not None and st["depid"] < 0 \
                and (prev["dst"], prev["src"][0]) == (st["dst"], st["src"][0]) \
                and prev["cnt"] != st["cnt"]:
            _fail(f"{w}: the loaders fuse this re into the one before it (same destination "
                  f"and source buffer) and run both with cnt={st['cnt']}, not "
                  f"{prev['cnt']}")
        prev = st if st["type"] == "re" and not st["hasdep"] else None
    if pending:
        _fail(f"{where}: ends with a nop (the loaders drop its dependency)")


def _step(st, i, where, send, recv, size):
    for attr in STEP_ATTRS:
        if st.get(attr) is None:
            _fail(f"{where}: missing attribute {attr}")
    if _int(st, "s", where) != i:
        _fail(f"{where}: s={st.get('s')} (steps must run 0, 1, ... in order)")
    kind = st.get("type")
    if kind not in TYPES:
        _fail(f"{where}: unknown step type {kind!r}")
    reads, writes, receives, sends, _ = TYPES[kind]
    if sends and send < 0:
        _fail(f"{where}: {kind} sends, but the threadblock has no send peer")
    if receives and recv < 0:
        _fail(f"{where}: {kind} receives, but the threadblock has no receive peer")
    cnt = _int(st, "cnt", where)
    if not 0 < cnt < 72:
        _fail(f"{where}: cnt={cnt} (the loader needs 0 < cnt < 72)")
    out = {"type": kind, "cnt": cnt, "depid": _int(st, "depid", where, -1),
           "deps": _int(st, "deps", where, -1), "hasdep": _int(st, "hasdep", where, 0, 1)}
    if (out["depid"] < 0) != (out["deps"] < 0):
        _fail(f"{where}: depid={out['depid']} but deps={out['deps']}")
    for role, used in (("src", reads or kind == "s"), ("dst", writes)):
        buf, off = st.get(f"{role}buf"), _int(st, f"{role}off", where)
        if not used:
            continue
        if buf not in size:
            _fail(f"{where}: {role}buf={buf!r} (expected i, o or s)")
        if off > OFFSET_MAX:
            _fail(f"{where}: {role}off={off}, but the runtimes keep a step's offsets in 16 "
                  f"bits (int16_t in msccl-executor-nccl, RCCL and microsoft/msccl: at most "
                  f"{OFFSET_MAX})")
        if off < 0 or off + cnt > size[buf]:
            _fail(f"{where}: {role} {buf}[{off}..{off + cnt - 1}] is outside the {buf} "
                  f"buffer ({size[buf]} chunks)")
        out[role] = (buf, off)
    return out


def _joined(a, b):
    return np.maximum(a, b)


def _simulate(p, slots):
    tbs = p["tbs"]
    order = sorted(tbs.values(), key=lambda tb: tb.gid)
    for tb in order:  # vector clocks as arrays: joins are the simulator's inner loop
        tb.clock = np.zeros(len(order), dtype=np.int32)
    value = dict(p["start"])
    access = {}  # (gpu, buf, idx) -> [last write (gid, seq) or None, {gid: seq} reads since]
    conns = {}  # (src gpu, dst gpu, chan) -> deque of (values, clock)
    by_conn = {}
    for tb in order:
        if tb.send >= 0:
            by_conn[("send", tb.gpu, tb.send, tb.chan)] = tb
        if tb.recv >= 0:
            by_conn[("recv", tb.recv, tb.gpu, tb.chan)] = tb
    combining = p["coll"] in COMBINING

    def touch(tb, slot, write, where):
        entry = access.setdefault(slot, [None, {}])
        earlier = ([entry[0]] if entry[0] else []) + (list(entry[1].items()) if write else [])
        for gid, seq in earlier:
            if gid != tb.gid and tb.clock[gid] < seq:
                other = order[gid]
                _fail(f"{where}: {'writes' if write else 'reads'} {slot[1]}[{slot[2]}] "
                      f"unordered with gpu {other.gpu} tb {other.id} step {seq - 1} "
                      f"(no dependency or message chain between them)")
        if write:
            entry[0], entry[1] = (tb.gid, tb.pc + 1), {}
        else:
            entry[1][tb.gid] = tb.pc + 1

    def get(tb, slot, where):
        touch(tb, slot, False, where)
        v = value.get(slot)
        if v is None:
            _fail(f"{where}: reads {slot[1]}[{slot[2]}], which holds no data yet")
        return v

    def put(tb, slot, v, where):
        if slot[1] == "i" and not p["inplace"]:
            _fail(f"{where}: writes the input buffer i[{slot[2]}] of an out-of-place call")
        touch(tb, slot, True, where)
        value[slot] = v

    def ready(tb):
        """Can tb's current step move: start (dependency met, message in), or, a fused
        step that has taken its message, finish (room to send on)?"""
        st = tb.steps[tb.pc]
        _, _, receives, sends, _ = TYPES[st["type"]]
        if tb.partial is None:
            if st["depid"] >= 0 and tbs[(tb.gpu, st["depid"])].pc <= st["deps"]:
                return False
            if receives and not conns.get((tb.recv, tb.gpu, tb.chan)):
                return False
            if receives and sends:
                return True  # takes the message now, sends when there is room
        if sends and len(conns.get((tb.gpu, tb.send, tb.chan), ())) >= slots:
            return False
        return True

    def run(tb):
        st = tb.steps[tb.pc]
        where = f"gpu {tb.gpu} tb {tb.id} step {tb.pc} ({st['type']})"
        reads, writes, receives, sends, reduces = TYPES[st["type"]]
        if reduces and not combining:
            _fail(f"{where}: reduces, but {p['coll']} does not combine")
        if tb.partial is None:
            if st["depid"] >= 0:
                tb.clock = _joined(tb.clock, tbs[(tb.gpu, st["depid"])].history[st["deps"]])
            if receives:
                incoming, clock = conns[(tb.recv, tb.gpu, tb.chan)].popleft()
                if len(incoming) != st["cnt"]:
                    _fail(f"{where}: receives {st['cnt']} chunks, but the matching send "
                          f"from gpu {tb.recv} has {len(incoming)}")
                tb.clock = _joined(tb.clock, clock)
                tb.partial = incoming
                if sends:
                    return  # streaming: the forward waits for room on its own
        incoming, tb.partial = tb.partial, None
        tb.clock[tb.gid] = tb.pc + 1
        cnt, g = st["cnt"], tb.gpu
        src = [get(tb, (g, st["src"][0], st["src"][1] + i), where) for i in range(cnt)] \
            if reads else None
        if st["type"] in ("re",):
            dst_now = [get(tb, (g, st["dst"][0], st["dst"][1] + i), where) for i in range(cnt)]
            result = [tuple(sorted(a + b)) for a, b in zip(dst_now, src)]
        elif reduces:
            result = [tuple(sorted(a + b)) for a, b in zip(incoming, src)]
        elif receives:
            result = list(incoming)
        else:
            result = src
        if writes:
            for i in range(cnt):
                put(tb, (g, st["dst"][0], st["dst"][1] + i), result[i], where)
        if sends:
            conns.setdefault((g, tb.send, tb.chan), deque()).append((result, tb.clock.copy()))
        tb.history.append(tb.clock.copy())
        tb.pc += 1

    moved = True
    while moved:
        moved = False
        for tb in order:
            while tb.pc < len(tb.steps) and ready(tb):
                run(tb)
                moved = True
    stuck = [tb for tb in order if tb.pc < len(tb.steps)]
    if stuck:
        tb = stuck[0]
        st = tb.steps[tb.pc]
        if tb.partial is None and st["depid"] >= 0 and tbs[(tb.gpu, st["depid"])].pc <= st["deps"]:
            why = f"waits on tb {st['depid']} step {st['deps']}"
        elif tb.partial is None and TYPES[st["type"]][2] \
                and not conns.get((tb.recv, tb.gpu, tb.chan)):
            why = f"waits for a message from gpu {tb.recv} on channel {tb.chan}"
        else:
            why = f"waits for room to send to gpu {tb.send} on channel {tb.chan}"
        _fail(f"deadlock: {len(stuck)} threadblocks cannot finish; {tb} at step {tb.pc} "
              f"({st['type']}) {why}")
    for (a, b, chan), q in sorted(conns.items()):
        if q:
            _fail(f"gpu {a} sends {len(q)} message(s) to gpu {b} on channel {chan} that "
                  f"no step receives")
    for (r, buf, idx), want in sorted(p["end"].items()):
        got = value.get((r, buf, idx))
        if got != want:
            _fail(f"gpu {r} ends with {buf}[{idx}] = {_show(got)}, expected {_show(want)}")
    return order


def _show(v):
    if v is None:
        return "nothing"
    return "{" + ", ".join(f"{r}:{k}" for r, k in v) + "}"


def check_msccl_xml(text, root=None, max_steps=64, max_tbs=64, slots=1):
    """Check an MSCCL XML algorithm; return a summary dict or raise MscclInvalid."""
    p = _parse(text, root, max_steps, max_tbs)
    order = _simulate(p, max(1, slots))
    types = {}
    for tb in order:
        for st in tb.steps:
            types[st["type"]] = types.get(st["type"], 0) + 1
    return {"collective": p["coll"], "ranks": p["n"], "chunks": p["c"], "root": p["root"],
            "inplace": p["inplace"], "channels": p["nchannels"], "threadblocks": len(order),
            "steps": sum(len(tb.steps) for tb in order),
            "max_steps_per_threadblock": max((len(tb.steps) for tb in order), default=0),
            "step_types": types,
            "loaded_by": [name for name, colls in LOADERS.items() if p["coll"] in colls]}
