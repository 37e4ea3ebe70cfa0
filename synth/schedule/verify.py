"""Independent schedule verifier: simulate a schedule file and check it.

Implements docs/schedule-file.md (the format, version 1 and 2, the chunk numbering and
the semantics). It shares no code with the rest of synth on purpose: an encoder or a
construction bug must not be able to hide behind a helper that the verifier also
trusts. Only the standard library and synth.errors.

Version 2 files are checked without unrolling them:
- Ranges: a send of `count` chunks is cut at every boundary any send's range has, so
  each piece (an elementary interval) is moved by exactly the same sends; one chunk per
  piece is simulated, standing for all of it.
- Pipelines: batch b runs the program on chunks shifted by b x stride. Once every
  shifted chunk stays in its share (so it has the same holders and wanters) and no two
  batches touch one chunk (so no batch sees another's data), every batch's data flow is
  batch 0's: batch 0 is simulated, and the union of the batches must reach every chunk
  the postcondition needs. Capacity is checked per expanded step on the loads of the
  batches active in it, kept as a sliding sum over the program's steps.
So time and memory grow with the program and the number of steps, not with chunks x
batches.

Version 4 files (written once per orbit of a group of rank translations) are checked
without unfolding them either: see "version 4" below, and synth/schedule/verify_orbits.py
for the group arithmetic.
"""

import heapq
import json
import math
import os
import stat
from bisect import bisect_left
from collections import Counter, defaultdict, deque, namedtuple

from synth.errors import BadInput, NoAnswer
from synth.schedule.verify_orbits import Group

FORMAT, VERSIONS = "synth.schedule", (1, 2, 3, 4)
SWITCH_OPS = {"multicast": "multicast", "switch_reduce": "reduce"}  # op: capability
MAX_RANKS = 4096  # synth's one cap on GPUs (synth.topology.physical.MAX_GPUS)
MAX_NUMBER = 1e300  # capacities and alphas: finite, and far from a float's end
MAX_ROUNDS = 10 ** 9  # a step's rounds
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
# pre/post: [(rank, chunk, count), ...] as listed; steps: [(rounds, [(chunk, count, src,
# dst, op), ...])]; pipeline: None or (batches, stride, [rounds of each expanded step]);
# compact: the file uses a version 2 form (a count, a range in pre/post, a pipeline);
# credits: per step, {("credit", group index): chunks} a switch operation's one payment
# takes off a group it would otherwise pay several times (see _steps); switched: the
# file uses switch operations (a version 3 form); problem: the first ScheduleInvalid
# one of them raised while parsing, raised after it; symmetry: None or (dims, axes,
# chunks rule) of a version 4 file
Schedule = namedtuple("Schedule", "collective n c g root links groups pre post steps "
                                  "version pipeline compact credits switched problem "
                                  "symmetry", defaults=(None,))


def conditions(collective, n, c, root):
    """(G, pre, post) of the chunk numbering table, as sets of (rank, chunk)."""
    g_kind, pre_kind, post_kind = _TABLE[collective]
    g = {"C": c, "N*C": n * c, "N*N*C": n * n * c}[g_kind]
    return g, {(r, k) for k in range(g) for r in _ranks(pre_kind, k, n, c, root)}, \
        {(r, k) for k in range(g) for r in _ranks(post_kind, k, n, c, root)}


def _ranks(kind, k, n, c, root):
    """The ranks a table column names for chunk k."""
    if kind == "all":
        return range(n)
    return ({"root": root, "own": k // c, "src": k // c // n, "dst": k // c % n}[kind],)


def _intervals(kind, n, c, g, root):
    """A table column as intervals: {rank: [(start, end), ...]}, merged and sorted."""
    if kind == "all":
        return {r: [(0, g)] for r in range(n)} if g else {}
    if kind == "root":
        return {root: [(0, g)]} if g else {}
    if kind == "own":
        return {r: [(r * c, (r + 1) * c)] for r in range(n)}
    if kind == "src":
        return {s: [(s * n * c, (s + 1) * n * c)] for s in range(n)}
    return {d: [((s * n + d) * c, (s * n + d + 1) * c) for s in range(n)] for d in range(n)}


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
    """A non-negative number of at most MAX_NUMBER (compared, never converted: an integer
    of 400 digits does not fit a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _bad(path, "expected a number")
    if not (0 <= value <= MAX_NUMBER) or (isinstance(value, float) and not math.isfinite(value)):
        # a huge integer is not printed: repr of 5000 digits raises, and says nothing
        shown = _cut(repr(value)) if not isinstance(value, int) or abs(value) < 10**30 \
            else "a number"
        _bad(path, f"{shown} is not a non-negative number of at most {MAX_NUMBER:g}")
    return value


def _pairs(doc, key, n):
    """A list of [rank, chunk] (or, in version 2, [rank, chunk, count]) entries, as
    (rank, chunk, count) triples, and whether any had three elements (a version 2 form);
    chunk ranges are left to the table check."""
    out, ranged = [], False
    for i, item in enumerate(_get(doc, key, "", list, "a list")):
        # fast path for the common well-formed pair; the slow one names the problem
        if (type(item) is list and len(item) == 2 and type(item[0]) is int
                and type(item[1]) is int and 0 <= item[0] < n):
            out.append((item[0], item[1], 1))
            continue
        p = f"{key}[{i}]"
        if not isinstance(item, list) or len(item) not in (2, 3):
            _bad(p, "expected [rank, chunk] or [rank, chunk, count]")
        out.append((_int(item[0], f"{p}[0]", 0, n - 1), _int(item[1], f"{p}[1]"),
                    _int(item[2], f"{p}[2]", 1) if len(item) == 3 else 1))
        ranged = ranged or len(item) == 3
    return out, ranged


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


def _steps(doc, n, switches=None, groups=()):
    """The steps as (rounds, [(chunk, count, src, dst, op), ...]), whether any send
    named a count (a version 2 form), each step's group credits, whether any switch
    operation was used, and the first thing wrong with one (a ScheduleInvalid, raised
    only once the whole document is known to be well formed). A switch operation is
    its sends (multicast: a copy from src to each dst; switch_reduce: a reduce from
    each src but dst into dst) with one difference in cost: the switch's port for it
    (a reduction's dst's down port, a multicast's src's up port), holding k > 1 of its
    links, pays count once, not k times: a credit of (k - 1) x count."""
    steps, counted, credits, switched, problem = [], False, [], False, None
    switches = switches or {}
    index = {name: g for g, (name, _, _) in enumerate(groups)}
    for i, step in enumerate(_get(doc, "steps", "", list, "a list")):
        p = f"steps[{i}]"
        rounds = _int(_get(step, "rounds", p), f"{p}.rounds", 1, MAX_ROUNDS)
        sends, credit = [], Counter()
        for j, send in enumerate(_get(step, "sends", p, list, "a list")):
            if type(send) is dict:  # fast path: a well-formed send; else the slow one below
                chunk, src, dst, op = (send.get("chunk"), send.get("src"), send.get("dst"),
                                       send.get("op"))
                count = send.get("count", 1)
                if (type(chunk) is int and type(src) is int and type(dst) is int
                        and type(count) is int and count >= 1
                        and 0 <= src < n and 0 <= dst < n and op in ("copy", "reduce")):
                    sends.append((chunk, count, src, dst, op))
                    counted = counted or "count" in send
                    continue
            q = f"{p}.sends[{j}]"
            op = _get(send, "op", q)
            if isinstance(op, str) and op in SWITCH_OPS:
                switched = True
                chunk = _int(_get(send, "chunk", q), f"{q}.chunk")
                count = _int(send["count"], f"{q}.count", 1) if "count" in send else 1
                pairs, port, wrong = _switch_pairs(send, q, n, op, switches, i)
                problem = problem or wrong
                kind = "copy" if op == "multicast" else "reduce"
                sends += [(chunk, count, src, dst, kind) for src, dst in pairs]
                g = index.get(port)
                k = sum(link in groups[g][1] for link in pairs) if g is not None else 0
                if k > 1:
                    credit[("credit", g)] += (k - 1) * count
                continue
            if op not in ("copy", "reduce"):
                _bad(f"{q}.op", f"unknown op {_cut(repr(op))} (expected 'copy', 'reduce', "
                                "'multicast' or 'switch_reduce')")
            count = _int(send["count"], f"{q}.count", 1) if "count" in send else 1
            counted = counted or "count" in send
            sends.append((_int(_get(send, "chunk", q), f"{q}.chunk"), count,
                          _int(_get(send, "src", q), f"{q}.src", 0, n - 1),
                          _int(_get(send, "dst", q), f"{q}.dst", 0, n - 1), op))
        steps.append((rounds, sends))
        credits.append(credit)
    return steps, counted, credits, switched, problem


def _switch_pairs(send, q, n, op, switches, i):
    """(the (src, dst) links of one switch operation, the group that is its switch's
    port for it or None, what is wrong with it or None): its switch must be able to
    do it and every link must pass through that switch."""
    if op == "multicast":
        src = _int(_get(send, "src", q), f"{q}.src", 0, n - 1)
        dsts = [_int(d, f"{q}.dsts[{k}]", 0, n - 1)
                for k, d in enumerate(_get(send, "dsts", q, list, "a list"))]
        if src in dsts:
            _bad(f"{q}.dsts", f"a multicast to its own src {src}")
        pairs, end = [(src, d) for d in dsts], src
    else:
        dst = _int(_get(send, "dst", q), f"{q}.dst", 0, n - 1)
        srcs = [_int(r, f"{q}.srcs[{k}]", 0, n - 1)
                for k, r in enumerate(_get(send, "srcs", q, list, "a list"))]
        pairs, end = [(r, dst) for r in srcs if r != dst], dst
    if not pairs or len(set(pairs)) != len(pairs):
        _bad(q, f"a {op} needs distinct ranks besides its {'src' if op == 'multicast' else 'dst'}")
    via = _get(send, "via", q, str, "a string")
    if via not in switches:
        return pairs, None, ScheduleInvalid(f"a {op} via {_cut(repr(via))}, which is no "
                                            "switch of topology.switches", i)
    can, links, up, down = switches[via]
    if SWITCH_OPS[op] not in can:
        return pairs, None, ScheduleInvalid(f"a {op} via {_cut(repr(via))}, a switch that "
                                            f"cannot {SWITCH_OPS[op]}", i)
    outside = next((pair for pair in pairs if pair not in links), None)
    if outside is not None:
        return pairs, None, ScheduleInvalid(
            f"a {op} via {_cut(repr(via))} uses {outside[0]}->{outside[1]}, which does not "
            "pass through that switch", i, None, outside)
    return pairs, (up if op == "multicast" else down).get(end), None


def _switches(topo, links, groups):
    """{name: (capabilities, links through it, {rank: up port group}, {rank: down port
    group})} of topology.switches (version 3)."""
    out, named = {}, Counter(name for name, _, _ in groups)
    members_of = {name: links for name, links, _ in groups}
    for i, sw in enumerate(_typed(topo.get("switches", []), list, "topology.switches",
                                  "a list")):
        p = f"topology.switches[{i}]"
        name = _get(sw, "name", p, str, "a string")
        if name in out:
            _bad(f"{p}.name", f"a second switch named {_cut(repr(name))}")
        can = _get(sw, "can", p, list, "a list")
        if not all(isinstance(c, str) and c in ("reduce", "multicast") for c in can):
            _bad(f"{p}.can", "expected a list of 'reduce' and 'multicast'")
        members = set()
        for j, link in enumerate(_get(sw, "links", p, list, "a list")):
            if not isinstance(link, list) or len(link) != 2:
                _bad(f"{p}.links[{j}]", "expected [src, dst]")
            link = (_int(link[0], f"{p}.links[{j}][0]"), _int(link[1], f"{p}.links[{j}][1]"))
            if link not in links:
                _bad(f"{p}.links[{j}]", f"{link[0]}->{link[1]} is not in topology.links")
            members.add(link)
        ports = []
        for side in ("up", "down"):
            port = {}
            for j, entry in enumerate(_typed(sw.get(side, []), list, f"{p}.{side}", "a list")):
                q = f"{p}.{side}[{j}]"
                if not (isinstance(entry, list) and len(entry) == 2
                        and isinstance(entry[1], str) and entry[1] in named):
                    _bad(q, "expected [rank, the name of a group]")
                if named[entry[1]] > 1:
                    _bad(q, f"group {_cut(repr(entry[1]))} is named twice in topology.groups")
                port[_int(entry[0], f"{q}[0]")] = entry[1]
            _check_ports(f"{p}.{side}", side, port, members_of)
            ports.append(port)
        out[name] = (set(can), members, *ports)
    return out


def _check_ports(p, side, port, members_of):
    """Every link of an up port leaves a rank whose up port it is (a down port: enters
    one), as a GPU's link into a switch, or a NIC two GPUs share, does: a group further
    along (a link between two switches) declared as a sender's port would let a
    multicast pay once for copies that cross it separately."""
    owners = defaultdict(set)
    for rank, name in port.items():
        owners[name].add(rank)
    for name, ranks in sorted(owners.items()):
        for src, dst in sorted(members_of[name]):
            if (src if side == "up" else dst) not in ranks:
                _bad(p, f"group {_cut(repr(name))}, the {side} port of rank "
                        f"{min(ranks)}, holds {src}->{dst}, a link "
                        f"{'out of' if side == 'up' else 'into'} rank "
                        f"{src if side == 'up' else dst}, whose {side} port it is not")


def _pipeline(doc):
    """(batches, stride, rounds) of the "pipeline" object, or None."""
    if "pipeline" not in doc:
        return None
    pipe = _get(doc, "pipeline", "", dict, "an object")
    batches = _int(_get(pipe, "batches", "pipeline"), "pipeline.batches", 1)
    stride = _int(_get(pipe, "stride", "pipeline"), "pipeline.stride", 0)
    rounds = _get(pipe, "rounds", "pipeline", list, "a list")
    return batches, stride, [_int(r, f"pipeline.rounds[{t}]", 1, MAX_ROUNDS)
                             for t, r in enumerate(rounds)]


def parse(doc):
    """Check the document's shape and return a Schedule; raises MalformedSchedule."""
    if _get(doc, "format", "") != FORMAT:
        _bad("format", f"expected {FORMAT!r}, got {_cut(repr(doc['format']))}")
    version = _int(_get(doc, "version", ""), "version")
    if version not in VERSIONS:
        _bad("version", f"expected 1, 2, 3 or 4, got {_cut(repr(doc['version']))}")
    coll = _get(doc, "collective", "")
    if not isinstance(coll, str) or coll not in _TABLE:
        _bad("collective", f"unknown collective {_cut(repr(coll))} (expected one of "
                           f"{', '.join(_TABLE)})")
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
    groups = _groups(topo, links)
    (pre, ranged_pre), (post, ranged_post) = _pairs(doc, "pre", n), _pairs(doc, "post", n)
    switches = _switches(topo, links, groups) if version == 3 else {}  # a version 3 key
    steps, counted, credits, switched, problem = _steps(doc, n, switches, groups)
    pipeline = _pipeline(doc)
    compact = pipeline is not None or ranged_pre or ranged_post or counted
    symmetry = _symmetry(doc) if version == 4 else None  # a version 4 key
    return Schedule(coll, n, c, g, root, links, groups, pre, post, steps, version,
                    pipeline, compact, credits, switched, problem, symmetry)


# --- semantics: everything here raises ScheduleInvalid ------------------------------

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
        have = _merged(got)
        for a, b, what in ((want, have, "missing"), (have, want, "extra")):
            for rank in sorted(a):
                k = _first_outside(a[rank], b.get(rank, []))
                if k is not None:
                    raise ScheduleInvalid(f"{name} does not match {s.collective}'s "
                                          f"{name}condition ({what} [{rank}, {k}])")


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


def verify_schedule(doc):
    """Return None if doc is a valid schedule; raise MalformedSchedule or ScheduleInvalid."""
    s = parse(doc)
    if s.symmetry is not None:
        return _verify_orbits(s, doc)
    _check_version(s)
    _check_table(s)
    per = _share_size(s)
    cuts = _pieces(s, per)
    spans, covered = _touched(cuts, s, per)
    if s.pipeline is not None:
        _check_pipeline(s, spans, per)
    # combining: each holder starts with its own contribution only, a bit mask (unions
    # and disjointness of hundreds of ranks are single integer operations); only the
    # first chunk of every piece is simulated
    _, pre_kind, _ = _TABLE[s.collective]
    own = {rank: 1 << rank for rank in range(s.n)}
    state = {(rank, k): own[rank] for k in covered
             for rank in _ranks(pre_kind, k, s.n, s.c, s.root)}
    try:
        simulate(s, state, cuts)
    except ScheduleInvalid as e:
        if s.pipeline is None:
            raise
        raise ScheduleInvalid(f"{e.message} (in batch 0, and so in every batch: the "
                              "program repeats)", e.step, e.chunk, e.ranks) from None
    _check_post(s, state, spans, covered, per)
    if s.pipeline is not None:
        _check_expanded_loads(s)


# --- version 4: a schedule written once per orbit (docs/schedule-file.md) ----------
#
# The group H (translations along some axes of a grid of the ranks) acts freely, so
# every rank is r + v for one representative r and one v in H, and the sends into
# r + v are those into r moved by v. Once every generator maps the topology onto
# itself and H keeps the pre- and postcondition, the state of r + v is the state of r
# moved by v (by induction over the steps): only the representatives are simulated, a
# read at another rank being a representative's value moved (_OrbitState). A link's
# load is the load of the link of its orbit that enters a representative, and a
# group's is the sum of those of its links' orbits (_orbit_groups), so capacities are
# checked on the representatives' sends alone. Time and memory grow with the
# representatives' program, the links and the groups, not with the ranks' sends.

RULES = ("blocks", "pairs")
MAX_DIMS = 32
# the (collective, chunks rule) pairs whose pre- and postcondition every translation
# keeps; with any other, only the trivial group does
KEPT = frozenset({("allgather", "blocks"), ("reducescatter", "blocks"),
                  ("allreduce", "blocks"), ("alltoall", "pairs")})


def _symmetry(doc):
    """(dims, axes, chunks rule) of a version 4 file's "symmetry" object."""
    sym = _get(doc, "symmetry", "", dict, "an object")
    dims = _get(sym, "dims", "symmetry", list, "a list")
    if not 1 <= len(dims) <= MAX_DIMS:
        _bad("symmetry.dims", f"expected 1 to {MAX_DIMS} dimensions")
    dims = [_int(d, f"symmetry.dims[{i}]", 1, MAX_RANKS) for i, d in enumerate(dims)]
    axes = [_int(a, f"symmetry.axes[{i}]", 0, len(dims) - 1)
            for i, a in enumerate(_get(sym, "axes", "symmetry", list, "a list"))]
    if len(set(axes)) != len(axes):
        _bad("symmetry.axes", "an axis is listed twice")
    rule = _get(sym, "chunks", "symmetry")
    if not isinstance(rule, str) or rule not in RULES:
        _bad("symmetry.chunks", f"expected one of {', '.join(map(repr, RULES))}")
    return dims, axes, rule


def _verify_orbits(s, doc):
    dims, axes, rule = s.symmetry
    if math.prod(dims) != s.n:
        raise ScheduleInvalid(f"symmetry.dims multiply to {math.prod(dims)}, not the "
                              f"{s.n} ranks")
    if s.switched:
        raise ScheduleInvalid("a version 4 file uses switch operations, which a schedule "
                              "written once per orbit cannot")
    _check_orbit_table(s, rule, len([d for a, d in enumerate(dims) if a in axes and d > 1]))
    grp = Group(dims, axes, rule, s.n, s.g)
    _check_automorphisms(s, grp, _alphas(doc))
    q = s._replace(groups=_orbit_groups(s, grp))  # capacities: on orbit representatives
    spans, cuts = _canonical_spans(s, grp)
    if s.pipeline is not None:
        _check_pipeline(s, spans, grp.block)
    state = _OrbitState(s, grp)
    try:
        _simulate_orbits(q, grp, state, cuts)
    except ScheduleInvalid as e:
        if s.pipeline is None:
            raise
        raise ScheduleInvalid(f"{e.message} (in batch 0, and so in every batch: the "
                              "program repeats)", e.step, e.chunk, e.ranks) from None
    _check_orbit_post(s, grp, state, spans, cuts)
    if s.pipeline is not None:
        _check_expanded_loads(q)


def _check_orbit_table(s, rule, moving_axes):
    """num_chunks, the chunks rule's blocks, the group keeping the collective's
    conditions, and pre and post as the representatives' part of the table."""
    g_kind, pre_kind, post_kind = _TABLE[s.collective]
    g = {"C": s.c, "N*C": s.n * s.c, "N*N*C": s.n * s.n * s.c}[g_kind]
    if s.g != g:
        raise ScheduleInvalid(f"num_chunks is {s.g}, but {s.collective} on {s.n} ranks "
                              f"with {s.c} chunks has {g}")
    per = s.n if rule == "blocks" else s.n * s.n
    if g % per:
        raise ScheduleInvalid(f"the chunks rule {rule!r} moves blocks of num_chunks / {per} "
                              f"chunks, but num_chunks is {g}")
    if moving_axes and (s.collective, rule) not in KEPT:
        raise ScheduleInvalid(f"translations that move chunks by the rule {rule!r} do not "
                              f"keep {s.collective}'s pre- and postcondition")
    reps = set(_representatives(s))
    for name, kind, got in (("pre", pre_kind, s.pre), ("post", post_kind, s.post)):
        stray = next((r for r, _, _ in got if r not in reps), None)
        if stray is not None:
            raise ScheduleInvalid(f"{name} lists rank {stray}, which is not a representative "
                                  "(a version 4 file lists the representatives' only)")
        if kind == "dst":  # not all of the table: N x N intervals
            want = {d: [((x * s.n + d) * s.c, (x * s.n + d + 1) * s.c) for x in range(s.n)]
                    for d in reps}
        else:
            want = {r: v for r, v in _intervals(kind, s.n, s.c, g, s.root).items() if r in reps}
        have = _merged(got)
        for a, b, what in ((want, have, "missing"), (have, want, "extra")):
            for rank in sorted(a):
                k = _first_outside(a[rank], b.get(rank, []))
                if k is not None:
                    raise ScheduleInvalid(f"{name} does not match {s.collective}'s "
                                          f"{name}condition on the representatives "
                                          f"({what} [{rank}, {k}])")


def _representatives(s):
    dims, axes, rule = s.symmetry
    return Group(dims, axes, rule, s.n, s.g).representatives()


def _alphas(doc):
    """{(src, dst): alpha_us} of topology.links (0 where none is given), already
    checked by parse."""
    return {(item[0], item[1]): item[3] if len(item) == 4 else 0
            for item in doc["topology"]["links"]}


def _check_automorphisms(s, grp, alphas):
    """Each generator maps every link onto a link of the same capacity and alpha, and
    every group onto a group of the same capacity (so H, which they generate, does)."""
    groups = {(frozenset(members), cap) for _, members, cap in s.groups}
    for v in grp.generators():
        move = [grp.shift(u, v) for u in range(s.n)]
        what = f"the translation by {list(grp.coordinates(v))}"
        for (a, b), cap in s.links.items():
            image = (move[a], move[b])
            if s.links.get(image) != cap or alphas[image] != alphas[(a, b)]:
                why = ("is not a link" if image not in s.links else
                       "has another capacity" if s.links[image] != cap else
                       "has another alpha")
                raise ScheduleInvalid(f"{what} maps link {a}->{b} onto {image[0]}->{image[1]}, "
                                      f"which {why}: it is not a symmetry of the topology",
                                      None, None, (a, b))
        for name, members, cap in s.groups:
            if (frozenset((move[a], move[b]) for a, b in members), cap) not in groups:
                raise ScheduleInvalid(f"{what} maps group {_cut(repr(name))} onto links that "
                                      "are no group of the same capacity: it is not a "
                                      "symmetry of the topology")


def _orbit_groups(s, grp):
    """The groups as capacity constraints on the representatives' links: a member link
    replaced by the link of its orbit that enters a representative (repeated as often
    as the group holds that orbit); groups that become the same constraint, once."""
    classes = {}
    for name, members, cap in s.groups:
        links = []
        for a, b in members:
            rep, v = grp.split(b)
            links.append((grp.shift(a, v, -1), rep))
        classes.setdefault((tuple(sorted(links)), cap), name)
    return [(name, list(links), cap) for (links, cap), name in classes.items()]


def _canonical(grp, k):
    """Chunk k moved into the block of its orbit that a representative owns."""
    b, off = divmod(k, grp.block)
    return grp.canonical_block(b) * grp.block + off


def _canonical_spans(s, grp):
    """Every send goes into a representative, and its range stays in one block. The
    chunk intervals the whole program touches in representatives' blocks (each send's
    range moved into the block of its orbit a representative owns), merged; and every
    boundary of those moved ranges, sorted: between two, every block of the orbit is
    moved by the same translated sends (an elementary piece, as in version 2)."""
    spans, cuts = defaultdict(list), set()
    for i, (_, sends) in enumerate(s.steps):
        for chunk, count, src, dst, _ in sends:
            if grp.split(dst)[1]:
                raise ScheduleInvalid(f"a send of chunk {chunk} from rank {src} to rank {dst}, "
                                      f"which is not a representative (a version 4 file "
                                      "lists the sends into them only)", i, chunk, (src, dst))
            last = chunk + count - 1
            if not (0 <= chunk and last < s.g):
                continue  # simulate says so, in its words
            if chunk // grp.block != last // grp.block:
                raise ScheduleInvalid(f"chunks {chunk}..{last} sent from rank {src} to rank "
                                      f"{dst} leave their block of {grp.block} chunks (the "
                                      "chunks rule moves blocks whole)", i, chunk, (src, dst))
            start = _canonical(grp, chunk)
            spans[start // grp.block].append((start, start + count))
            cuts.update((start, start + count))
    return [span for b in sorted(spans) for span in _union(spans[b])], sorted(cuts)


def _simulate_orbits(s, grp, state, cuts):
    """`simulate` on the representatives' sends, one chunk per piece: a send's range is
    cut where its orbit's canonical ranges are (`cuts`), each piece simulated by its
    first chunk in the send's own block; a read at another rank is a representative's
    value (_OrbitState), found at the same piece of another block of the orbit."""
    per = _share_size(s)
    for i, (rounds, sends) in enumerate(s.steps):
        writes = {}
        for chunk, count, src, dst, op in sends:
            _check_range(s, i, chunk, count, src, dst, per)
            start = _canonical(grp, chunk)
            for first in cuts[bisect_left(cuts, start):bisect_left(cuts, start + count)]:
                k = chunk + first - start
                _check_send(s, i, state, k, src, dst, op)
                writes.setdefault((dst, k), []).append((op, src, state[(src, k)]))
        merged = {key: _merge(i, *key, w, state.get(key)) for key, w in writes.items()}
        if s.pipeline is None:
            _check_loads(s, i, rounds, _loads(sends))
        state.update(merged)


class _OrbitState:
    """The state of every rank, kept for the representatives: rank r + v holds at chunk
    k what r holds at k moved by -v, its contributors moved by v. Unwritten pairs hold
    what the precondition gives them."""

    def __init__(self, s, grp):
        self.s, self.grp, self.written = s, grp, {}
        self.pre_kind = _TABLE[s.collective][1]
        self.combining = s.collective in COMBINING

    def _own(self, r, k):
        if (r, k) in self.written:
            return self.written[(r, k)]
        s = self.s
        return 1 << r if r in _ranks(self.pre_kind, k, s.n, s.c, s.root) else None

    def get(self, key, default=None):
        u, k = key
        r, v = self.grp.split(u)
        if not v:
            value = self._own(u, k)
        else:
            value = self._own(r, self.grp.move_chunk(k, v, -1))
            if value is not None and self.combining:
                value = self.grp.move_mask(value, v)
        return default if value is None else value

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def update(self, values):
        self.written.update(values)  # _canonical_spans: every dst is a representative


def _check_orbit_post(s, grp, state, spans, cuts):
    """Every representative that wants a piece some send of batch 0 moves (the spans'
    pieces' translates) holds it right; a block's chunks no batch touches are needed by
    no one."""
    _, pre_kind, post_kind = _TABLE[s.collective]
    everyone = (1 << s.n) - 1
    reps, elements = grp.representatives(), grp.elements()
    block = grp.block
    for lo, hi in spans:
        b = lo // block
        pieces = cuts[bisect_left(cuts, lo):bisect_left(cuts, hi)]
        for v in elements:
            shift = (grp.move_block(b, v) - b) * block
            for k in (first + shift for first in pieces):
                for r in reps:
                    if r in _ranks(post_kind, k, s.n, s.c, s.root):
                        _post_holds(s, state, r, k, everyone)
    batches, stride = (s.pipeline[0], s.pipeline[1]) if s.pipeline else (1, 0)
    by_block = defaultdict(list)
    for lo, hi in spans:
        by_block[lo // block].extend((lo + b * stride, hi + b * stride) for b in range(batches))
    owners = reps if grp.rule == "blocks" else [r * s.n + d for r in reps for d in range(s.n)]
    for b in owners:
        start = b * block
        wanters = set(_ranks(post_kind, start, s.n, s.c, s.root))
        holders = set(_ranks(pre_kind, start, s.n, s.c, s.root))
        if not ((wanters and s.collective in COMBINING and s.n > 1) or (wanters - holders)):
            continue
        k = _first_outside([(start, start + block)], _union(by_block.get(b, [])))
        if k is not None:
            rank = min(wanters - holders) if wanters - holders else min(wanters)
            raise ScheduleInvalid(f"after the last step rank {rank} does not hold chunk {k}"
                                  + (" (no batch moves it)" if s.pipeline else ""),
                                  None, k, (rank,))


MAX_FILE_BYTES = 128 << 20  # a schedule file larger than this is refused unread


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
