"""Independent schedule verifier: simulate a schedule file and check it.

Implements docs/schedule-file.md (the format, chunk numbering and semantics). It shares no code
with the rest of synth on purpose: an encoder bug must not be able to hide behind a
helper that the verifier also trusts. Only the standard library and synth.errors.
"""

import json
import math
import os
import stat
from collections import Counter, namedtuple

from synth.errors import BadInput, NoAnswer

FORMAT, VERSION = "synth.schedule", 1
MAX_RANKS = 4096  # synth's one cap on GPUs (synth.topology.physical.MAX_GPUS)
TOLERANCE = 1e-9  # fractional capacities: 0.5 * 2 rounds must allow exactly 1 chunk
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})

# collective: (G, who holds chunk k at the start, who must hold it at the end).
# "own": rank k // C; "src"/"dst": the s/d of alltoall chunk (s*N + d)*C + j.
_TABLE = {
    "allgather": ("N*C", "own", "all"),
    "reducescatter": ("N*C", "all", "own"),
    "allreduce": ("C", "all", "all"),
    "broadcast": ("C", "root", "all"),
    "reduce": ("C", "all", "root"),
    "gather": ("N*C", "own", "root"),
    "scatter": ("N*C", "root", "own"),
    "alltoall": ("N*N*C", "src", "dst"),
}


class ScheduleInvalid(NoAnswer):
    """A well-formed schedule that does not do what it claims."""

    def __init__(self, message, step=None, chunk=None, ranks=()):
        self.message, self.step, self.chunk, self.ranks = message, step, chunk, tuple(ranks)
        super().__init__(message if step is None else f"step {step}: {message}")


class MalformedSchedule(BadInput):
    """The document is not a schedule file at all."""


# links: {(src, dst): capacity}; groups: [(name, {(src, dst), ...}, capacity)];
# pre/post: {(rank, chunk)}; steps: [(rounds, [(chunk, src, dst, op), ...])]
Schedule = namedtuple("Schedule", "collective n c g root links groups pre post steps")


def conditions(collective, n, c, root):
    """(G, pre, post) of the chunk numbering table, as sets of (rank, chunk)."""
    g_kind, pre_kind, post_kind = _TABLE[collective]
    g = {"C": c, "N*C": n * c, "N*N*C": n * n * c}[g_kind]

    def holders(kind):
        if kind == "all":
            return {(r, k) for r in range(n) for k in range(g)}
        rank_of = {"root": lambda k: root, "own": lambda k: k // c,
                   "src": lambda k: k // c // n, "dst": lambda k: k // c % n}[kind]
        return {(rank_of(k), k) for k in range(g)}

    return g, holders(pre_kind), holders(post_kind)


# --- structure: everything here raises MalformedSchedule naming the path -------------

def _bad(path, what):
    raise MalformedSchedule(f"{path}: {what}")


def _get(obj, key, path, kind=object, name=""):
    """obj[key], which must exist and be a `kind`; path is the object's own path."""
    if not isinstance(obj, dict):
        _bad(path or "schedule", "expected an object")
    where = f"{path}.{key}" if path else key
    if key not in obj:
        _bad(where, "missing")
    return _typed(obj[key], kind, where, name)


def _typed(value, kind, path, name):
    if not isinstance(value, kind):
        _bad(path, f"expected {name}")
    return value


def _int(value, path, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):  # JSON true is not 1
        _bad(path, "expected an integer")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        _bad(path, f"{_cut(repr(value))} is out of range {lo}..{'' if hi is None else hi}")
    return value


def _number(value, path):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _bad(path, "expected a number")
    if not math.isfinite(value) or value < 0:
        _bad(path, f"{value} is not a non-negative number")
    return value


def _pairs(doc, key, n):
    """A list of [rank, chunk] pairs as a set; chunk ranges are left to the table check."""
    out = set()
    for i, item in enumerate(_get(doc, key, "", list, "a list")):
        # fast path for the common well-formed pair; the slow one names the problem
        if (type(item) is list and len(item) == 2 and type(item[0]) is int
                and type(item[1]) is int and 0 <= item[0] < n):
            out.add((item[0], item[1]))
            continue
        p = f"{key}[{i}]"
        if not isinstance(item, list) or len(item) != 2:
            _bad(p, "expected [rank, chunk]")
        out.add((_int(item[0], f"{p}[0]", 0, n - 1), _int(item[1], f"{p}[1]")))
    return out


def _links(topo, n):
    links = {}
    for i, item in enumerate(_get(topo, "links", "topology", list, "a list")):
        p = f"topology.links[{i}]"
        if not isinstance(item, list) or len(item) not in (3, 4):
            _bad(p, "expected [src, dst, capacity] or [src, dst, capacity, alpha_us]")
        src, dst = _int(item[0], f"{p}[0]", 0, n - 1), _int(item[1], f"{p}[1]", 0, n - 1)
        if src == dst or (src, dst) in links:
            _bad(p, f"{'self-loop' if src == dst else 'duplicate link'} {src}->{dst}")
        links[(src, dst)] = _number(item[2], f"{p}[2]")
        if len(item) == 4:
            _number(item[3], f"{p}[3]")
    return links


def _groups(topo, links):
    groups = []
    for i, grp in enumerate(_typed(topo.get("groups", []), list, "topology.groups", "a list")):
        p = f"topology.groups[{i}]"
        name = _get(grp, "name", p, str, "a string")
        members = set()
        for j, link in enumerate(_get(grp, "links", p, list, "a list")):
            q = f"{p}.links[{j}]"
            if not isinstance(link, list) or len(link) != 2:
                _bad(q, "expected [src, dst]")
            link = (_int(link[0], f"{q}[0]"), _int(link[1], f"{q}[1]"))
            if link not in links:
                _bad(q, f"{link[0]}->{link[1]} is not in topology.links")
            members.add(link)
        groups.append((name, members, _number(_get(grp, "capacity", p), f"{p}.capacity")))
    return groups


def _steps(doc, n):
    steps = []
    for i, step in enumerate(_get(doc, "steps", "", list, "a list")):
        p = f"steps[{i}]"
        rounds = _int(_get(step, "rounds", p), f"{p}.rounds", 1)
        sends = []
        for j, send in enumerate(_get(step, "sends", p, list, "a list")):
            if type(send) is dict:  # fast path: a well-formed send; else the slow one below
                chunk, src, dst, op = (send.get("chunk"), send.get("src"), send.get("dst"),
                                       send.get("op"))
                if (type(chunk) is int and type(src) is int and type(dst) is int
                        and 0 <= src < n and 0 <= dst < n and op in ("copy", "reduce")):
                    sends.append((chunk, src, dst, op))
                    continue
            q = f"{p}.sends[{j}]"
            op = _get(send, "op", q)
            if op not in ("copy", "reduce"):
                _bad(f"{q}.op", f"unknown op {_cut(repr(op))} (expected 'copy' or 'reduce')")
            sends.append((_int(_get(send, "chunk", q), f"{q}.chunk"),
                          _int(_get(send, "src", q), f"{q}.src", 0, n - 1),
                          _int(_get(send, "dst", q), f"{q}.dst", 0, n - 1), op))
        steps.append((rounds, sends))
    return steps


def parse(doc):
    """Check the document's shape and return a Schedule; raises MalformedSchedule."""
    if _get(doc, "format", "") != FORMAT:
        _bad("format", f"expected {FORMAT!r}, got {_cut(repr(doc['format']))}")
    if _int(_get(doc, "version", ""), "version") != VERSION:
        _bad("version", f"expected {VERSION}, got {_cut(repr(doc['version']))}")
    coll = _get(doc, "collective", "")
    if not isinstance(coll, str) or coll not in _TABLE:
        _bad("collective", f"unknown collective {_cut(repr(coll))} (expected one of {', '.join(_TABLE)})")
    n = _int(_get(doc, "ranks", ""), "ranks", 1, MAX_RANKS)
    c = _int(_get(doc, "chunks", ""), "chunks", 1)
    g = _int(_get(doc, "num_chunks", ""), "num_chunks", 0)
    root = doc.get("root")
    if coll in ROOTED:
        root = _int(root, "root", 0, n - 1) if root is not None else _bad("root", "missing")
    elif root is not None:
        _bad("root", f"{coll} takes no root")
    topo = _get(doc, "topology", "", dict, "an object")
    links = _links(topo, n)
    return Schedule(coll, n, c, g, root, links, _groups(topo, links),
                    _pairs(doc, "pre", n), _pairs(doc, "post", n), _steps(doc, n))


# --- semantics: everything here raises ScheduleInvalid ------------------------------

def _check_table(s):
    # sizes first, by arithmetic: a file claiming 10**12 ranks must not make us build
    # sets that large; once the sizes match, the sets are no larger than the file
    g_kind, pre_kind, post_kind = _TABLE[s.collective]
    g = {"C": s.c, "N*C": s.n * s.c, "N*N*C": s.n * s.n * s.c}[g_kind]
    if s.g != g:
        raise ScheduleInvalid(f"num_chunks is {s.g}, but {s.collective} on {s.n} ranks "
                              f"with {s.c} chunks has {g}")
    for name, kind, got in (("pre", pre_kind, s.pre), ("post", post_kind, s.post)):
        size = s.n * g if kind == "all" else g
        if len(got) != size and size > 100_000:  # small ones get the exact difference below
            raise ScheduleInvalid(f"{name} lists {len(got)} (rank, chunk) pairs, but "
                                  f"{s.collective}'s {name}condition has {size}")
    g, pre, post = conditions(s.collective, s.n, s.c, s.root)
    for name, got, want in (("pre", s.pre, pre), ("post", s.post, post)):
        if got != want:
            diff = [f"missing {list(x)}" for x in sorted(want - got)[:1]]
            diff += [f"extra {list(x)}" for x in sorted(got - want)[:1]]
            raise ScheduleInvalid(f"{name} does not match {s.collective}'s {name}condition "
                                  f"({', '.join(diff)})")


def _check_send(s, i, state, chunk, src, dst, op):
    if (0 <= chunk < s.g and (src, dst) in s.links and (src, chunk) in state
            and (op == "copy" or (s.collective in COMBINING and (dst, chunk) in state))):
        return  # the common case, without building the messages below
    where = dict(step=i, chunk=chunk, ranks=(src, dst))
    what = f"chunk {chunk} {'sent' if op == 'copy' else 'reduced'} from rank {src} to rank {dst}"
    if not 0 <= chunk < s.g:
        raise ScheduleInvalid(f"{what}, but chunks are 0..{s.g - 1}", **where)
    if (src, dst) not in s.links:
        raise ScheduleInvalid(f"{what}, but there is no link {src}->{dst}", **where)
    if op == "reduce" and s.collective not in COMBINING:
        raise ScheduleInvalid(f"{what}, but {s.collective} does not combine", **where)
    if (src, chunk) not in state:
        raise ScheduleInvalid(f"{what}, but rank {src} does not hold it", **where)
    if op == "reduce" and (dst, chunk) not in state:
        raise ScheduleInvalid(f"{what}, but rank {dst} holds nothing to reduce into", **where)


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
                                  f"the contribution of ranks {sorted(total & value)} twice",
                                  i, chunk, (src, dst))
        total |= value
    return total


def _check_bandwidth(s, i, rounds, sends):
    use = Counter((src, dst) for _, src, dst, _ in sends)
    for (src, dst), count in use.items():
        cap = s.links[(src, dst)]
        if count > cap * rounds + TOLERANCE:
            raise ScheduleInvalid(f"link {src}->{dst} carries {count} chunks, over its capacity "
                                  f"{cap:g} x {rounds} rounds", i, None, (src, dst))
    for name, members, cap in s.groups:
        count = sum(use[link] for link in members)
        if count > cap * rounds + TOLERANCE:
            ranks = sorted({r for link in members if use[link] for r in link})
            raise ScheduleInvalid(f"group {_cut(repr(name))} carries {count} chunks, over its capacity "
                                  f"{cap:g} x {rounds} rounds", i, None, ranks)


def simulate(s, state):
    """Run every step on state {(rank, chunk): frozenset of contributors}, in place."""
    for i, (rounds, sends) in enumerate(s.steps):
        writes = {}  # reads happen before any write: a step sees its start state
        for chunk, src, dst, op in sends:
            _check_send(s, i, state, chunk, src, dst, op)
            writes.setdefault((dst, chunk), []).append((op, src, state[(src, chunk)]))
        merged = {key: _merge(i, *key, w, state.get(key)) for key, w in writes.items()}
        _check_bandwidth(s, i, rounds, sends)
        state.update(merged)
    return state


def _check_post(s, state):
    everyone = frozenset(range(s.n))
    for rank, chunk in sorted(s.post):
        value = state.get((rank, chunk))
        if value is None:
            raise ScheduleInvalid(f"after the last step rank {rank} does not hold chunk {chunk}",
                                  None, chunk, (rank,))
        if s.collective in COMBINING and value != everyone:
            raise ScheduleInvalid(f"after the last step rank {rank} holds chunk {chunk} summed "
                                  f"over ranks {sorted(value)} only, not all {s.n}",
                                  None, chunk, (rank,))


def verify_schedule(doc):
    """Return None if doc is a valid schedule; raise MalformedSchedule or ScheduleInvalid."""
    s = parse(doc)
    _check_table(s)
    # combining: each holder starts with its own contribution only (one set per rank,
    # shared: a composed allreduce has millions of (rank, chunk) pairs)
    own = {rank: frozenset({rank}) for rank in range(s.n)}
    state = {(rank, chunk): own[rank] for rank, chunk in s.pre}
    _check_post(s, simulate(s, state))


MAX_FILE_BYTES = 2 << 30  # a schedule file larger than this is refused unread


def verify_file(path):
    """Read a schedule JSON file, verify it and return the document. Only a regular file
    of at most MAX_FILE_BYTES is read (a pipe or /dev/zero would never end)."""
    name = _cut(os.fspath(path), 120)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise MalformedSchedule(f"{name}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise MalformedSchedule(f"{name}: {st.st_size:,} bytes, over the "
                                    f"{MAX_FILE_BYTES:,}-byte limit")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: bad JSON, bad UTF-8, 5000 digits
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise MalformedSchedule(f"{name}: cannot read a schedule: {_cut(reason, 120)}"
                                ) from None
    except RecursionError:
        raise MalformedSchedule(f"{name}: cannot read a schedule: nested too deeply"
                                ) from None
    verify_schedule(doc)
    return doc


def _cut(text, width=40):
    text = str(text)
    return text if len(text) <= width else text[:width - 3] + "..."
