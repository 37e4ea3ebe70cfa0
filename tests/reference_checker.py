"""A second checker of schedule files, written from docs/schedule-file.md alone, for the
mutation tests (tests/test_mutations.py, tests/test_mutations_v2_v3.py) and the property
tests.

It shares no code with synth: not the verifier (synth/schedule/verify/), not the
constructions, not synth.schedule.file. It is naive on purpose where the verifier is
clever: every chunk range, pipeline batch and switch operation is expanded into
single-chunk sends of the expanded steps, each (rank, chunk) holds the multiset of
contributions summed into it (a double count shows as a multiplicity of 2, not as a
rule), and the loads are counted link by link and group by group from those sends.
Its time grows with chunks x batches x steps: small schedules only.

    judge(doc) -> ("ok" | "invalid" | "malformed", reason)
"""

import math
from collections import Counter

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
COMBINING = ("reducescatter", "allreduce", "reduce")
SWITCH_OPS = {"switch_reduce": "reduce", "multicast": "multicast"}  # op: capability
SLACK = 1e-9  # "Comparisons allow 1e-9 of slack"


class Malformed(Exception):
    pass


class Invalid(Exception):
    pass


def judge(doc):
    """("ok", ""), or the stage the file fails in and why."""
    try:
        form = read(doc)
    except Malformed as e:
        return "malformed", str(e)
    try:
        check(form)
    except Invalid as e:
        return "invalid", str(e)
    return "ok", ""


# --- the tables of "Keys": a file that breaks one is malformed ------------------------

def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def need(ok, what):
    if not ok:
        raise Malformed(what)


def integer(x, what, lo=None, hi=None):
    need(is_int(x) and (lo is None or x >= lo) and (hi is None or x <= hi), what)
    return x


def number(x, what):
    need(isinstance(x, (int, float)) and not isinstance(x, bool)
         and math.isfinite(x) and x >= 0, what)
    return x


def field(obj, key, what):
    need(isinstance(obj, dict) and key in obj, f"{what}.{key} missing")
    return obj[key]


def read(doc):
    """The file's fields, each checked against the tables; Malformed otherwise."""
    need(isinstance(doc, dict), "not an object")
    need(field(doc, "format", "") == "synth.schedule", "format")
    version = integer(field(doc, "version", ""), "version", 1, 3)
    coll = field(doc, "collective", "")
    need(isinstance(coll, str) and coll in COLLECTIVES, "collective")
    n = integer(field(doc, "ranks", ""), "ranks", 1, 4096)
    c = integer(field(doc, "chunks", ""), "chunks", 1)
    g = integer(field(doc, "num_chunks", ""), "num_chunks", 0)
    root = doc.get("root")
    if coll in ROOTED:
        integer(root, "root", 0, n - 1)
    else:
        need(root is None, "root of a collective without one")
    topo = field(doc, "topology", "")
    need(isinstance(topo, dict), "topology")
    links = {}
    entries = field(topo, "links", "topology")
    need(isinstance(entries, list), "topology.links")
    for item in entries:
        need(isinstance(item, list) and len(item) in (3, 4), "a link")
        s, d = integer(item[0], "link src", 0, n - 1), integer(item[1], "link dst", 0, n - 1)
        need(s != d and (s, d) not in links, "a self-loop or a link twice")
        links[(s, d)] = number(item[2], "capacity")
        if len(item) == 4:
            number(item[3], "alpha")
    groups = []  # (name, set of links, capacity)
    listed = topo.get("groups", [])
    need(isinstance(listed, list), "topology.groups")
    for grp in listed:
        name = field(grp, "name", "group")
        need(isinstance(name, str), "group name")
        members = field(grp, "links", "group")
        need(isinstance(members, list), "group links")
        pairs = set()
        for pair in members:
            need(isinstance(pair, list) and len(pair) == 2, "a group's link")
            pairs.add((integer(pair[0], "group link"), integer(pair[1], "group link")))
        need(pairs <= set(links), "a group's link that is no link")
        groups.append((name, pairs, number(field(grp, "capacity", "group"), "group capacity")))
    switches = read_switches(topo, links, groups) if version == 3 else {}
    pre, post = read_pairs(doc, "pre", n), read_pairs(doc, "post", n)
    steps = read_steps(doc, n)
    pipeline = None
    if "pipeline" in doc:
        pipe = doc["pipeline"]
        need(isinstance(pipe, dict), "pipeline")
        rounds = field(pipe, "rounds", "pipeline")
        need(isinstance(rounds, list), "pipeline.rounds")
        pipeline = (integer(field(pipe, "batches", "pipeline"), "batches", 1),
                    integer(field(pipe, "stride", "pipeline"), "stride", 0),
                    [integer(r, "pipeline rounds", 1) for r in rounds])
    return dict(version=version, coll=coll, n=n, c=c, g=g, root=root, links=links,
                groups=groups, switches=switches, pre=pre, post=post, steps=steps,
                pipeline=pipeline)


def read_switches(topo, links, groups):
    """{name: (capabilities, links through it, {rank: up group}, {rank: down group})}."""
    times_named = Counter(name for name, _, _ in groups)
    members = {name: pairs for name, pairs, _ in groups}
    out = {}
    listed = topo.get("switches", [])
    need(isinstance(listed, list), "topology.switches")
    for sw in listed:
        name = field(sw, "name", "switch")
        need(isinstance(name, str) and name not in out, "a switch's name, or one twice")
        can = field(sw, "can", "switch")
        need(isinstance(can, list) and all(x in ("reduce", "multicast") for x in can),
             "a switch's capabilities")
        through, listed_links = set(), field(sw, "links", "switch")
        need(isinstance(listed_links, list), "a switch's links")
        for pair in listed_links:
            need(isinstance(pair, list) and len(pair) == 2, "a switch's link")
            pair = (integer(pair[0], "switch link"), integer(pair[1], "switch link"))
            need(pair in links, "a switch's link that is no link")
            through.add(pair)
        ports = []
        for side in ("up", "down"):
            port = {}
            entries = sw.get(side, [])
            need(isinstance(entries, list), f"{side} ports")
            for entry in entries:
                need(isinstance(entry, list) and len(entry) == 2, "a port")
                rank, group = integer(entry[0], "a port's rank"), entry[1]
                need(isinstance(group, str) and times_named[group] == 1,
                     "a port naming no group, or a group named twice")
                port[rank] = group
            # a port is its ranks' own: each link of an up port leaves one of the ranks
            # whose up port it is (a down port: enters one)
            for group in set(port.values()):
                owners = {r for r, grp in port.items() if grp == group}
                end = 0 if side == "up" else 1
                need(all(pair[end] in owners for pair in members[group]),
                     f"a {side} port that is not its ranks' own")
            ports.append(port)
        out[name] = (set(can), through, ports[0], ports[1])
    return out


def read_pairs(doc, key, n):
    entries = field(doc, key, "")
    need(isinstance(entries, list), key)
    out = []
    for e in entries:
        need(isinstance(e, list) and len(e) in (2, 3), f"a {key} entry")
        out.append((integer(e[0], "rank", 0, n - 1), integer(e[1], "chunk"),
                    integer(e[2], "count", 1) if len(e) == 3 else None))
    return out


def read_steps(doc, n):
    """[(rounds, [move, ...])]; a move: dict of op, chunk, count (None when not given),
    and pairs (the (src, dst) links it uses) and, for switch operations, via and end
    (the rank whose port it pays once: a reduction's dst, a multicast's src)."""
    steps = field(doc, "steps", "")
    need(isinstance(steps, list), "steps")
    out = []
    for step in steps:
        rounds = integer(field(step, "rounds", "step"), "rounds", 1)
        sends = field(step, "sends", "step")
        need(isinstance(sends, list), "sends")
        moves = []
        for x in sends:
            op = field(x, "op", "send")
            need(isinstance(op, str) and op in ("copy", "reduce", *SWITCH_OPS), "op")
            move = {"op": op, "chunk": integer(field(x, "chunk", "send"), "chunk"),
                    "count": integer(x["count"], "count", 1) if "count" in x else None}
            if op in SWITCH_OPS:
                if op == "multicast":
                    src = integer(field(x, "src", "multicast"), "src", 0, n - 1)
                    dsts = field(x, "dsts", "multicast")
                    need(isinstance(dsts, list), "dsts")
                    dsts = [integer(d, "a dst", 0, n - 1) for d in dsts]
                    need(src not in dsts, "a multicast to its own src")
                    pairs, end = [(src, d) for d in dsts], src
                else:
                    dst = integer(field(x, "dst", "switch_reduce"), "dst", 0, n - 1)
                    srcs = field(x, "srcs", "switch_reduce")
                    need(isinstance(srcs, list), "srcs")
                    srcs = [integer(s, "a src", 0, n - 1) for s in srcs]
                    pairs, end = [(s, dst) for s in srcs if s != dst], dst
                need(pairs and len(set(pairs)) == len(pairs),
                     "an operation without a link, or with one twice")
                via = field(x, "via", "operation")
                need(isinstance(via, str), "via")
                move.update(pairs=pairs, via=via, end=end)
            else:
                move["pairs"] = [(integer(field(x, "src", "send"), "src", 0, n - 1),
                                  integer(field(x, "dst", "send"), "dst", 0, n - 1))]
            moves.append(move)
        out.append((rounds, moves))
    return out


# --- "Chunk numbering" and "Semantics": a file that breaks one is invalid ---------------

def table(coll, n, c, root):
    """(G, pre, post) of the chunk numbering table, as sets of (rank, chunk)."""
    if coll == "alltoall":
        g = n * n * c
        return g, {(k // c // n, k) for k in range(g)}, {(k // c % n, k) for k in range(g)}
    g = c if coll in ("allreduce", "broadcast", "reduce") else n * c
    every = {(r, k) for r in range(n) for k in range(g)}
    own = {(k // c, k) for k in range(g)}
    at_root = {(root, k) for k in range(g)}
    return g, *{"allgather": (own, every), "reducescatter": (every, own),
                "allreduce": (every, every), "broadcast": (at_root, every),
                "reduce": (every, at_root), "gather": (own, at_root),
                "scatter": (at_root, own)}[coll]


def refuse(ok, what):
    if not ok:
        raise Invalid(what)


def check(f):
    coll, n, c = f["coll"], f["n"], f["c"]
    moves = [m for _, ms in f["steps"] for m in ms]
    switched = any(m["op"] in SWITCH_OPS for m in moves)
    refuse(not (switched and f["version"] < 3), "a switch operation before version 3")
    compact = (f["pipeline"] is not None or any(m["count"] is not None for m in moves)
               or any(e[2] is not None for e in f["pre"] + f["post"]))
    refuse(not (compact and f["version"] == 1), "a version 2 form in a version 1 file")
    for m in moves:
        if m["op"] in SWITCH_OPS:
            sw = f["switches"].get(m["via"])
            refuse(sw is not None, "via names no switch")
            refuse(SWITCH_OPS[m["op"]] in sw[0], "the switch lacks the capability")
            refuse(all(p in sw[1] for p in m["pairs"]), "a link not through the switch")
    g, pre, post = table(coll, n, c, f["root"])
    refuse(f["g"] == g, "num_chunks")

    def as_set(entries):
        return {(r, k + j) for r, k, count in entries for j in range(count or 1)}

    refuse(as_set(f["pre"]) == pre and as_set(f["post"]) == post, "pre or post")
    per = g if coll in ("allreduce", "broadcast", "reduce") else c  # chunks a share
    batches, stride, rounds = f["pipeline"] or (1, 0, [r for r, _ in f["steps"]])
    refuse(len(rounds) == len(f["steps"]) + batches - 1, "pipeline.rounds' length")
    touched = set()
    for m in moves:
        first, last = m["chunk"], m["chunk"] + (m["count"] or 1) - 1
        refuse(0 <= first and last < g and first // per == last // per,
               "a range outside the chunks or its share")
        touched |= set(range(first, last + 1))
    seen = set()
    for b in range(batches):
        moved = {k + b * stride for k in touched}
        refuse(all(k + b * stride < g and (k + b * stride) // per == k // per
                   for k in touched), "a batch out of its share")
        refuse(not moved & seen, "two batches touch one chunk")
        seen |= moved
    for own_rounds, program_step in f["steps"]:  # each program step alone, its rounds
        check_loads(f, [(program_step, 0)], own_rounds)
    state = {key: Counter([key[0]]) for key in pre}
    for t, r in enumerate(rounds):  # the expanded steps
        active = [(f["steps"][t - b][1], b * stride) for b in range(batches)
                  if 0 <= t - b < len(f["steps"])]
        check_loads(f, active, r)
        run(f, active, state)
    everyone = Counter(range(n))
    for key in post:
        refuse(key in state, f"{key} not held at the end")
        refuse(coll not in COMBINING or state[key] == everyone, f"{key} not fully summed")


def single_sends(active):
    """The (chunk, src, dst, op, move) single-chunk sends of the active batches'
    program steps, each chunk shifted by its batch's offset."""
    for moves, shift in active:
        for m in moves:
            op = {"multicast": "copy", "switch_reduce": "reduce"}.get(m["op"], m["op"])
            for j in range(m["count"] or 1):
                for s, d in m["pairs"]:
                    yield m["chunk"] + j + shift, s, d, op, m


def check_loads(f, active, rounds):
    """Every link carries at most capacity x rounds chunks, and every group, where a
    switch operation's port for it (a reduction's dst's down group, a multicast's src's
    up group) pays each chunk once however many of its links it holds."""
    link_load = Counter()
    group_load = Counter()
    for moves, _ in active:
        for m in moves:
            port = None
            if m["op"] in SWITCH_OPS:
                sw = f["switches"][m["via"]]
                port = (sw[3] if m["op"] == "switch_reduce" else sw[2]).get(m["end"])
            for _ in range(m["count"] or 1):
                for pair in m["pairs"]:
                    link_load[pair] += 1
                for i, (name, members, _) in enumerate(f["groups"]):
                    inside = sum(pair in members for pair in m["pairs"])
                    group_load[i] += min(inside, 1) if name == port else inside
    for pair, load in link_load.items():
        refuse(pair in f["links"], f"no link {pair}")
        refuse(load <= f["links"][pair] * rounds + SLACK, f"link {pair} over capacity")
    for i, load in group_load.items():
        refuse(load <= f["groups"][i][2] * rounds + SLACK, f"group {i} over capacity")


def run(f, active, state):
    """One expanded step on state {(rank, chunk): Counter of contributions}: every send
    reads the state at the step's start, the writes land together."""
    combining = f["coll"] in COMBINING
    writes = {}
    for k, s, d, op, _ in single_sends(active):
        refuse((s, d) in f["links"], f"no link {s}->{d}")
        refuse(op == "copy" or combining, "a reduce in a collective that does not combine")
        refuse((s, k) in state, f"rank {s} sends chunk {k} it does not hold")
        refuse(op == "copy" or (d, k) in state, f"rank {d} has nothing to reduce {k} into")
        writes.setdefault((d, k), []).append((op, state[(s, k)]))
    for key, ws in writes.items():
        if any(op == "copy" for op, _ in ws):
            refuse(len(ws) == 1, f"conflicting writes to {key}")
            state[key] = Counter(ws[0][1])
            continue
        total = Counter(state[key])
        for _, value in ws:
            total += value
        refuse(all(times == 1 for times in total.values()), f"{key} counted twice")
        state[key] = total
