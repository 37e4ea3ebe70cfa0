"""Independent checker for MSCCL XML algorithms: the loader's rules and a simulation.

It reads the XML text only (plus the root of a rooted collective, which the format does
not carry) and shares no code with the exporter: it imports only the standard library,
NumPy (its vector clocks are arrays), synth.errors and its own rooms (msccl_run, the
simulation; sim_buffers, what each collective's buffers hold), so an exporter bug cannot
hide behind a helper both trust.

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

Simulation (every threadblock a process, data symbolic, vector clocks):
synth.export.msccl_run.
"""

import re
import xml.etree.ElementTree as ET

import numpy

from synth.export.msccl_run import TYPES, MscclInvalid, _fail, _simulate, _Tb  # noqa: F401
from synth.export.sim_buffers import COLLS, ROOTED, clock_type, layout

STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps",
              "hasdep")
ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
              "outofplace", "minBytes", "maxBytes")


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


def _parse(text, root, max_steps, max_tbs):
    """The algorithm as the simulator runs it, a dict: the collective (coll, n, c, root,
    inplace), what its buffers hold at the start and must hold at the end (start, end),
    its threadblocks by (gpu, position) (tbs) and its channel count (nchannels).
    MscclInvalid at the first loader rule it breaks."""
    algo = _syntax(text)
    head = _algo(algo, root)
    coll, n, c, root, inplace = (head[k] for k in ("coll", "n", "c", "root", "inplace"))
    i_chunks, o_chunks, start, end = layout(coll, n, c, root, inplace)
    tbs = _gpus(algo, head, (i_chunks, o_chunks), max_steps, max_tbs)
    _dependencies(tbs)
    return dict(coll=coll, n=n, c=c, root=root, inplace=inplace, start=start, end=end,
                tbs=tbs, nchannels=head["nchannels"])


def _algo(algo, root):
    """The <algo> element's attributes checked, a dict: coll, n (ngpus), nchannels, c
    (chunks per share), root (None unless the collective is rooted) and inplace."""
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
    if coll in ROOTED:
        if root is None:
            _fail(f"{coll} needs its root (the XML does not name it)")
        if not 0 <= root < n:
            _fail(f"root {root} is not a gpu (0..{n - 1})")
    else:
        root = None
    return dict(coll=coll, n=n, nchannels=nchan, c=loop // per_rank, root=root,
                inplace=bool(inplace))


def _gpus(algo, head, chunks, max_steps, max_tbs):
    """{(gpu, position): _Tb} of every <tb>, its steps read (gid: its place in the
    file); each gpu's i and o buffers checked against the collective's `chunks`."""
    n = head["n"]
    gpus = algo.findall("gpu")
    if len(gpus) != n or sorted(_int(g, "id", "gpu", 0) for g in gpus) != list(range(n)):
        _fail(f"expected gpus with ids 0..{n - 1}, one each (ngpus={n})")
    tbs = {}
    for g in sorted(gpus, key=lambda g: int(g.get("id"))):
        r = int(g.get("id"))
        where = f"gpu {r}"
        size = {"i": _int(g, "i_chunks", where, 0), "o": _int(g, "o_chunks", where, 0),
                "s": _int(g, "s_chunks", where, 0)}
        if (size["i"], size["o"]) != chunks:
            _fail(f"{where}: i_chunks={size['i']} o_chunks={size['o']}, but {head['coll']} "
                  f"{'in place' if head['inplace'] else 'out of place'} with {head['c']} "
                  f"chunks per share needs {chunks[0]} and {chunks[1]}")
        elems = g.findall("tb")
        if len(elems) > max_tbs:
            _fail(f"{where}: {len(elems)} threadblocks (limit {max_tbs})")
        seen = set()  # (role, peer, channel) of the gpu's threadblocks so far
        for pos, t in enumerate(elems):
            tbs[(r, pos)] = _threadblock(t, r, pos, n, head["nchannels"], size, seen,
                                         max_steps, len(tbs))
    return tbs


def _threadblock(t, r, pos, n, nchan, size, seen, max_steps, gid):
    """The _Tb of <tb> element t, at position pos of gpu r: its peers and channel
    checked (and added to the gpu's `seen`), its steps read as the loaders read them."""
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
    return _Tb(r, pos, send, recv, chan, steps, gid)


def _dependencies(tbs):
    """Check that every depid/deps names a step of another threadblock of the same gpu,
    one with hasdep="1"; returns nothing."""
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


# the parsed tree and step records: 6.8-12 bytes a byte measured by tracemalloc, which
# leaves out the allocator's own; 16 keeps a margin over both
PER_TEXT_BYTE = 16


def memory_needed(text_bytes: int, threadblocks: int, depended: int, most_steps: int = 64
                  ) -> int:
    """About the most bytes check_msccl_xml takes for `text_bytes` of XML with
    `threadblocks` threadblocks, `depended` of whose steps others depend on (hasdep):
    the parsed text, and a vector clock (an entry per threadblock) per threadblock, per
    message in flight (at most one per connection, about one per threadblock) and per
    step depended on. dgxh100x16's allreduce (7.3 MB, 2,816 threadblocks, 18,168 steps
    depended on): about 181 MB, where the check took 107; switch:64's alltoall (1.2
    MB, 4,032 threadblocks): 51 MB, where it took 38, 32 of the 51 its clocks."""
    width = numpy.dtype(clock_type(most_steps + 1)).itemsize
    return PER_TEXT_BYTE * text_bytes + (2 * threadblocks + depended) * threadblocks * width


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
