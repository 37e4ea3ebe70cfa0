"""A schedule file read into the verifier's terms (docs/schedule-file.md, the format):
every field checked for type and range (MalformedSchedule), the topology's links,
groups, switches and ports resolved, and the chunk numbering table of each collective.
"""

import math
from collections import Counter, defaultdict, namedtuple

from synth.errors import BadInput, NoAnswer

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
# chunks rule) of a version 4 file; per_orbit: its topology lists one member of each
# orbit of links and groups (topology.orbits), the links those into representatives
Schedule = namedtuple("Schedule", "collective n c g root links groups pre post steps "
                                  "version pipeline compact credits switched problem "
                                  "symmetry per_orbit", defaults=(None, False))


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


def _groups(topo, links, n, per_orbit=False):
    """[(name, member links, capacity)]; a member must be a listed link, or with
    `per_orbit` any link whose orbit's is (checked with the symmetry, orbits.py)."""
    groups = []
    for i, grp in enumerate(_typed(topo.get("groups", []), list, "topology.groups", "a list")):
        p = f"topology.groups[{i}]"
        name = _get(grp, "name", p, str, "a string")
        members = set()
        for j, link in enumerate(_get(grp, "links", p, list, "a list")):
            q = f"{p}.links[{j}]"
            if not isinstance(link, list) or len(link) != 2:
                _bad(q, "expected [src, dst]")
            link = (_int(link[0], f"{q}[0]", 0, n - 1), _int(link[1], f"{q}[1]", 0, n - 1))
            if link not in links and not per_orbit:
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
    if isinstance(doc, dict) and "format" not in doc and "gpus" in doc and "name" in doc:
        # beside the schedules, ending in .json too: a glob takes both
        _bad("format", "missing, and it has an MSCCL++ execution plan's name and gpus: "
                       "a plan, not a synth schedule (a point's schedule is STEM.json, "
                       "its plan STEM.mscclpp.json; a synth plan's plan.json names each "
                       "file's schedule)")
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
    per_orbit = topo.get("orbits", False)
    if type(per_orbit) is not bool or (per_orbit and version != 4):  # not 1, not 1.0
        _bad("topology.orbits", "expected true or false, and true only in version 4")
    groups = _groups(topo, links, n, per_orbit)
    (pre, ranged_pre), (post, ranged_post) = _pairs(doc, "pre", n), _pairs(doc, "post", n)
    switches = _switches(topo, links, groups) if version == 3 else {}  # a version 3 key
    steps, counted, credits, switched, problem = _steps(doc, n, switches, groups)
    pipeline = _pipeline(doc)
    compact = pipeline is not None or ranged_pre or ranged_post or counted
    symmetry = _symmetry(doc) if version == 4 else None  # a version 4 key
    return Schedule(coll, n, c, g, root, links, groups, pre, post, steps, version,
                    pipeline, compact, credits, switched, problem, symmetry, per_orbit)



# version 4: the symmetry object (the checks are in orbits.py)
RULES = ("blocks", "pairs")
MAX_DIMS = 32


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


def _cut(text, width=40):
    text = str(text)
    return text if len(text) <= width else text[:width - 3] + "..."
