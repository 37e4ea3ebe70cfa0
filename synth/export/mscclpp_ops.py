"""The ops of an MSCCL++ execution plan, read and checked for the plan simulator
(synth/export/mscclpp_sim.py, which reads the rest of the plan): each op's name, its
lists within the targeted releases' room, its channel ids, semaphores and buffer ranges
resolved through its thread block's tables. Part of the independent checker: it imports
the standard library and synth.export.mscclpp_launches' failure only.
"""

from synth.export.mscclpp_launches import _fail

ACCEPTED = {"nop", "barrier", "signal", "wait", "rlxsignal", "rlxwait", "put", "pws", "pwsf",
            "get", "flush", "copy", "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt",
            "upkt", "repkt", "recpkt", "respkt", "recspkt", "glres", "gstore", "gstorepkt",
            "pipeline", "sem_acquire", "sem_release"}
SIMULATED = {"nop", "signal", "wait", "rlxsignal", "rlxwait", "put", "pws", "pwsf", "flush",
             "copy", "re", "glres", "sem_acquire", "sem_release"}
TYPES = ("memory", "port")  # channels between two ranks; switch channels join a group
# The smallest limits of the releases synth targets, v0.8.0, v0.9.0 and v0.10.0
# (docs/runtimes.md, "Versions synth targets"); SINCE: ops the older ones do not know.
MAX_OPS, MAX_CHANNELS, MAX_IDS, MAX_SEMS = 64, 16, 8, 16
MAX_ENTRIES = 8  # per src_buff / dst_buff: v0.8.0 has room for 8 (v0.9.0 and later: 10)
SINCE = {"recpkt": "v0.9.0", "recspkt": "v0.9.0", "gstore": "v0.10.0", "gstorepkt": "v0.10.0"}


def _need(obj, key, kind, where, name):
    if not isinstance(obj, dict) or key not in obj:
        _fail(f"{where}: missing {key!r}")
    value = obj[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        _fail(f"{where}.{key}: expected an integer")
    if kind is not int and not isinstance(value, kind):
        _fail(f"{where}.{key}: expected {name}")
    return value


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _switch_entry(entry, where, chans, switch, counts):
    """A switch buffer entry {switch_channel_id, index, size}: the chunk range on every
    member of its channel's group."""
    if not isinstance(entry, dict) or "switch_channel_id" not in entry or "type" in entry \
            or "buffer_id" in entry:
        _fail(f"{where}: expected a switch entry {{switch_channel_id, index, size}}")
    c, table = entry["switch_channel_id"], chans.get("switch", [])
    if not _int(c) or not 0 <= c < len(table):
        _fail(f"{where}: switch_channel_id {c!r} is not in the thread block's table "
              f"({len(table)} switch channels)")
    buf, ranks, size = switch[table[c]]
    ranges = [_range(dict(entry, type=buf), where, m, counts) for m in ranks]
    if ranges[0][2] + ranges[0][3] > size:
        _fail(f"{where}: {buf}[{ranges[0][2]}..{ranges[0][2] + ranges[0][3] - 1}] is outside "
              f"the switch channel's {size} chunks")
    return ranges


def _range(entry, where, owner, counts):
    for key in ("index", "size"):
        if key not in entry or not _int(entry[key]):
            _fail(f"{where}: missing or non-integer {key!r}")
    buf, idx, size = entry["type"], entry["index"], entry["size"]
    if size < 1:
        _fail(f"{where}: size {size} (data ops move at least one chunk)")
    if idx < 0 or idx + size > counts[owner][buf]:
        _fail(f"{where}: {buf}[{idx}..{idx + size - 1}] is outside gpu {owner}'s {buf} "
              f"buffer ({counts[owner][buf]} chunks)")
    return (owner, buf, idx, size)


def _local(entry, where, rank, counts):
    if not isinstance(entry, dict) or entry.get("type") not in ("i", "o", "s") \
            or "buffer_id" in entry:
        _fail(f"{where}: expected a local entry {{type, index, size}}")
    return _range(entry, where, rank, counts)


def _ids(op, where, kind, chans, threads):
    """An op's channel ids, resolved to GPU-level ids of type kind."""
    ids = _need(op, "channel_ids", list, where, "a list")
    if not ids or len(ids) > MAX_IDS or len(ids) > threads:
        _fail(f"{where}: {len(ids)} channel ids (1..{MAX_IDS}, and at most one per thread)")
    table = chans.get(kind, [])
    for i in ids:
        if not _int(i) or not 0 <= i < len(table):
            _fail(f"{where}: channel id {i!r} is not in the thread block's table "
                  f"({len(table)} {kind} channels)")
    return [table[i] for i in ids]


def _op(op, where, rank, chans, rbufs, ctx):
    """One op of a thread block, checked and read as the simulator runs it: a tuple
    whose first item is its kind (nop, a semaphore op, signal/wait/flush, or a data op
    with its source and destination ranges)."""
    counts, threads = ctx["counts"], ctx["threads"]
    name = _need(op, "name", str, where, "a string")
    if name not in ACCEPTED:
        _fail(f"{where}: Invalid operation type: {name}")
    if name not in SIMULATED:
        since = f" (and MSCCL++ before {SINCE[name]} does not know it)" if name in SINCE else ""
        _fail(f"{where}: op {name} is not simulated{since}")
    for key in ("src_buff", "dst_buff", "channel_ids"):
        if key in op and not isinstance(op[key], list):
            _fail(f"{where}.{key}: expected a list")
    for key in ("src_buff", "dst_buff"):
        if key in op and len(op[key]) > MAX_ENTRIES:
            _fail(f"{where}.{key}: {len(op[key])} entries, but MSCCL++ v0.8.0 has room for "
                  f"{MAX_ENTRIES} per list (MAX_CHANNEL_PER_OPERATION; 10 from v0.9.0) and "
                  "writes the rest over the op's other fields (a 9th source becomes the "
                  "destination)")
    if len(op.get("channel_ids", ())) > MAX_IDS:  # the loader copies every one it is given
        _fail(f"{where}.channel_ids: {len(op['channel_ids'])} ids, but every MSCCL++ release "
              f"has room for {MAX_IDS} per op (MAX_CHANNEL_PER_OPERATION)")
    if name == "nop":
        return ("nop",)
    if name in ("sem_acquire", "sem_release"):
        return _semaphore_op(op, where, name, rank, ctx)
    kind = op.get("channel_type")
    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        return _sync_op(op, where, name, kind, chans, threads)
    srcs, dsts = op.get("src_buff"), op.get("dst_buff")
    if not srcs or not dsts:
        _fail(f"{where}: {name} needs src_buff and dst_buff")
    if name == "glres":
        return _glres_op(where, name, kind, srcs, dsts, rank, chans, ctx)
    if name in ("put", "pws", "pwsf"):
        return _put_op(op, where, name, kind, srcs, dsts, rank, chans, rbufs, ctx)
    if name == "copy" and (len(srcs) != 1 or len(dsts) != 1):
        _fail(f"{where}: copy takes one source and one destination")
    if name == "re" and len(dsts) != 1:
        _fail(f"{where}: re takes one destination")
    src = [_local(e, f"{where}.src_buff[{i}]", rank, counts) for i, e in enumerate(srcs)]
    dst = _local(dsts[0], f"{where}.dst_buff[0]", rank, counts)
    if any(s[3] != dst[3] for s in src):
        _fail(f"{where}: {name} operands of different sizes")
    return (name, None, (src, dst), ())


def _semaphore_op(op, where, name, rank, ctx):
    threads = ctx["threads"]
    ids = _need(op, "semaphore_ids", list, where, "a list")
    if not ids or len(ids) > MAX_SEMS or len(ids) > threads or len(set(ids)) != len(ids):
        _fail(f"{where}: {len(ids)} semaphore ids (1..{MAX_SEMS}, distinct)")
    for s in ids:
        if not _int(s) or not 0 <= s < len(ctx["sems"][rank]):
            _fail(f"{where}: semaphore id {s!r} is not one of gpu {rank}'s "
                  f"({len(ctx['sems'][rank])})")
    return (name, ids, None, ())


def _sync_op(op, where, name, kind, chans, threads):
    if kind not in TYPES or (name == "flush" and kind != "port"):
        want = "port" if name == "flush" else "memory or port"
        _fail(f"{where}: {name} needs channel_type {want} (without a type it does "
              "nothing)")
    ids = _ids(op, where, kind, chans, threads)
    if name == "flush":  # the kernel flushes as many channels as dst_buff has entries
        return ("flush", kind, None, ids[:len(op.get("dst_buff") or [])])
    if "wait" in name and len(set(ids)) != len(ids):
        _fail(f"{where}: a channel twice in one wait (two threads would race on its "
              "counter)")
    relaxed = name.startswith("rlx") and kind == "memory"  # the same as strict on port
    return ("signal" if "signal" in name else "wait", kind, relaxed, ids)


def _glres_op(where, name, kind, srcs, dsts, rank, chans, ctx):
    """The chunks of every member of the source switch channel's group summed by the
    switch (multimem.ld_reduce from its multicast address), the sum stored to every
    member of the destination switch channel's group (multimem.st to its own): two
    channels, each a group holding the rank (S5), the same group or not."""
    counts = ctx["counts"]
    if kind != "switch" or len(srcs) != 1 or len(dsts) != 1:
        _fail(f"{where}: glres takes channel_type switch, one source and one destination")
    switch = ctx["flat"]["switch"][rank]
    src = _switch_entry(srcs[0], f"{where}.src_buff[0]", chans, switch, counts)
    dst = _switch_entry(dsts[0], f"{where}.dst_buff[0]", chans, switch, counts)
    if src[0][3] != dst[0][3]:
        _fail(f"{where}: glres operands of different sizes")
    return (name, "switch", (src, dst), ())


def _put_op(op, where, name, kind, srcs, dsts, rank, chans, rbufs, ctx):
    counts, threads = ctx["counts"], ctx["threads"]
    if kind not in TYPES or (name != "put" and kind != "port"):
        want = "port" if name != "put" else "memory or port"
        _fail(f"{where}: {name} needs channel_type {want}")
    if len(srcs) != len(dsts):
        _fail(f"{where}: {name} with {len(srcs)} sources and {len(dsts)} destinations")
    src = [_local(e, f"{where}.src_buff[{i}]", rank, counts) for i, e in enumerate(srcs)]
    if kind == "memory" and len({s[1] for s in src}) > 1:
        _fail(f"{where}: memory put sources of more than one buffer type")
    gids = None
    if kind == "port":
        gids = _ids(op, where, "port", chans, threads)
        if len(gids) != len(dsts):
            _fail(f"{where}: port {name} with {len(dsts)} destinations and {len(gids)} "
                  "channel ids")
    table = rbufs.get(kind, [])
    dst = []
    for i, e in enumerate(dsts):
        w = f"{where}.dst_buff[{i}]"
        if not isinstance(e, dict) or "buffer_id" not in e or "type" in e:
            _fail(f"{w}: expected a remote entry {{buffer_id, index, size}}")
        b = e["buffer_id"]
        if not _int(b) or not 0 <= b < len(table):
            _fail(f"{w}: buffer_id {b!r} is not in the thread block's remote table "
                  f"({len(table)} {kind} entries)")
        owner, buf, _ = ctx["remote"][rank][table[b]]
        if gids is not None and ctx["flat"]["port"][rank][gids[i]] != owner:
            _fail(f"{w}: gpu {owner}'s buffer over port channel {gids[i]}, which goes to "
                  f"gpu {ctx['flat']['port'][rank][gids[i]]}")
        dst.append(_range(dict(e, type=buf), w, owner, counts))
    for s, d in zip(src, dst):
        if s[3] != d[3]:
            _fail(f"{where}: {name} pair sizes {s[3]} and {d[3]} differ")
    return (name, kind, (src, dst), gids or ())
