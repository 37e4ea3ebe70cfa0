"""The schedule file ("synth.schedule", versions 1 to 4 of docs/schedule-file.md): the IR to
and from JSON, exactly (capacities are written as numbers and read back as the nearest small
fraction), and `verified`, which runs what would be written through the independent
verifier.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

from synth.errors import BadInput, InternalError
from synth.files import SCHEDULE_LIMIT, load_json, quote, write_atomic
from synth.schedule.collectives import make_collective
from synth.schedule.cost import cost_summary
from synth.schedule.ir import Pipeline, Schedule, Send, Step, SwitchOp
from synth.schedule.orbit_machine import expanded, listed
from synth.schedule.orbits import RULES, Orbits
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.topology.linkmodel import Group, LinkModel, RankLink, Switch

FORMAT = "synth.schedule"
VERSIONS = (1, 2, 3, 4)
SWITCH_OPS = ("multicast", "switch_reduce")
MAX_ROUNDS = 10 ** 9  # a step's rounds, as the verifier allows


def file_version(schedule: Schedule) -> int:
    """The version of the file `schedule` is written as (schedule_to_dict)."""
    return (4 if schedule.symmetry is not None else 3 if schedule.in_network
            else 2 if schedule.compact else 1)


def schedule_to_dict(schedule: Schedule, topology: dict | None = None) -> dict:
    """The file's document: version 1, or version 2 when the schedule uses a compact form
    (chunk ranges or a pipeline; pre and post are then written as ranges too), 3 with
    switch operations, 4 when it is written once per orbit (`symmetry`: pre, post and
    steps then hold the representatives' entries only). `topology`: in place of the
    model's (schedule_text puts its text there)."""
    coll, model = schedule.collective, schedule.model
    compact, orbits = schedule.compact, schedule.symmetry
    if orbits is not None and schedule.in_network:
        raise ValueError("a schedule written once per orbit has no switch operations")
    version = file_version(schedule)
    mine = (lambda r: True) if orbits is None else set(orbits.representatives).__contains__
    doc = {
        "format": FORMAT, "version": version,
        "collective": coll.name, "root": coll.root,
        "ranks": coll.ranks, "chunks": coll.chunks, "num_chunks": coll.num_chunks,
        "topology": model_to_dict(model) if topology is None else topology,
        **({"symmetry": orbits.to_dict()} if orbits else {}),
        "pre": _condition([x for x in coll.pre_ranges() if mine(x[0])], compact),
        "post": _condition([x for x in coll.post_ranges() if mine(x[0])], compact),
        "steps": [{"rounds": s.rounds, "sends": [_send(x) for x in s.sends]
                   + [_switch_op(x) for x in s.switch_ops]} for s in schedule.steps],
    }
    if schedule.pipeline is not None:
        p = schedule.pipeline
        doc["pipeline"] = {"batches": p.batches, "stride": p.stride, "rounds": list(p.rounds)}
    doc["cost"] = cost_summary(schedule)
    if schedule.info:
        doc["synthesis"] = schedule.info
    return doc


def _send(x: Send) -> dict:
    if x.count == 1:
        return {"chunk": x.chunk, "src": x.src, "dst": x.dst, "op": x.op}
    return {"chunk": x.chunk, "count": x.count, "src": x.src, "dst": x.dst, "op": x.op}


def _switch_op(x: SwitchOp) -> dict:
    ends = ({"src": x.srcs[0], "dsts": list(x.dsts)} if x.op == "multicast" else
            {"srcs": list(x.srcs), "dst": x.dsts[0]})
    return {"chunk": x.chunk, **({"count": x.count} if x.count > 1 else {}), **ends,
            "via": x.via, "op": x.op}


def _condition(ranges, compact: bool) -> list[list[int]]:
    """(rank, first, count) runs as version 2's [rank, chunk, count] (count 1: [rank,
    chunk]) or version 1's [rank, chunk] pairs, sorted."""
    if compact:
        return sorted([r, k, n] if n > 1 else [r, k] for r, k, n in ranges if n)
    return sorted([r, k] for r, first, n in ranges for k in range(first, first + n))


def model_to_dict(model: LinkModel, orbits: Orbits | None = None) -> dict:
    """The topology as a file holds it: the whole machine, or with `orbits` (a version 4
    file's) one member of each orbit of its links and groups where that says the
    machine exactly (synth.schedule.orbit_machine; `orbits: true`)."""
    per_orbit = listed(orbits, model) if orbits is not None and orbits.order > 1 else None
    links, groups = per_orbit or (model.links, [(g, None) for g in model.groups])
    doc = {"name": model.name, "unit_gbps": model.unit_gbps,
           **({"orbits": True} if per_orbit else {}),
           "links": [[l.src, l.dst, _number(l.capacity), l.alpha_us] for l in links],
           "groups": [{"name": g.name, **({"names": names} if names else {}),
                       "links": [list(p) for p in g.links],
                       "capacity": _number(g.capacity)} for g, names in groups]}
    if model.boxes:  # an extra key (readers ignore keys they do not know)
        doc["boxes"] = list(model.boxes)
    if model.switches:  # what version 3's switch operations may use
        doc["switches"] = [{"name": w.name, "can": list(w.can),
                            "links": [list(p) for p in w.links],
                            "up": [[r, g] for r, g in w.up],
                            "down": [[r, g] for r, g in w.down]} for w in model.switches]
    return doc


def schedule_from_dict(doc: dict) -> Schedule:
    """Read a schedule document (versions 1 to 4); BadInput names what is missing or of
    the wrong type. pre and post are not read: the collective's table defines them
    (the verifier checks that the file's lists agree)."""
    try:
        if doc.get("format") != FORMAT or doc.get("version") not in VERSIONS:
            raise BadInput(f"not a {FORMAT} file of version 1 to 4")
        coll = make_collective(doc["collective"], _int(doc["ranks"]), _int(doc["chunks"]),
                               doc.get("root"))
        symmetry = _read_symmetry(doc["symmetry"], coll.ranks) if doc["version"] == 4 \
            else None
        model = model_from_dict(doc["topology"], coll.ranks, symmetry)
        steps = tuple(Step(_int(s["rounds"], 1, MAX_ROUNDS),
                           tuple(_read_send(x, coll) for x in s["sends"]
                                 if x.get("op") not in SWITCH_OPS),
                           tuple(_read_switch_op(x, coll) for x in s["sends"]
                                 if x.get("op") in SWITCH_OPS))
                      for s in doc["steps"])
        pipeline = None
        if "pipeline" in doc:
            p = doc["pipeline"]
            pipeline = Pipeline(_int(p["batches"], 1), _int(p["stride"], 0),
                                tuple(_int(r, 1, MAX_ROUNDS) for r in p["rounds"]))
            if len(pipeline.rounds) != len(steps) + pipeline.batches - 1:
                raise ValueError("pipeline.rounds has the wrong length")
        info = doc.get("synthesis")  # an extra key: anything but an object is ignored
        return Schedule(coll, model, steps, dict(info) if isinstance(info, dict) else {},
                        pipeline, symmetry)
    except KeyError as e:
        raise BadInput(f"schedule file: missing key {quote(e.args[0])}") from None
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
        raise BadInput(f"schedule file: malformed ({str(e)[:80]})") from None


def embedded_model(doc: dict) -> LinkModel:
    """The whole machine a schedule document holds (a version 4 file's may be listed per
    orbit of its symmetry). KeyError, TypeError or ValueError where it is malformed."""
    ranks = _int(doc["ranks"])
    symmetry = _read_symmetry(doc["symmetry"], ranks) if doc.get("version") == 4 else None
    return model_from_dict(doc["topology"], ranks, symmetry)


def _read_symmetry(x: dict, ranks: int) -> Orbits:
    dims = tuple(_int(d, 1) for d in x["dims"])
    axes = tuple(_int(a, 0, len(dims) - 1) for a in x["axes"])
    if math.prod(dims) != ranks or len(set(axes)) != len(axes) or x["chunks"] not in RULES:
        raise ValueError("symmetry: dims must multiply to the ranks, axes be distinct, "
                         f"chunks one of {', '.join(RULES)}")
    return Orbits(dims, axes, x["chunks"])


def _read_send(x: dict, coll) -> Send:
    count = _int(x.get("count", 1), 1, coll.num_chunks)
    return Send(_int(x["chunk"], 0, coll.num_chunks - count), _int(x["src"], 0, coll.ranks - 1),
                _int(x["dst"], 0, coll.ranks - 1), _op(x.get("op", "copy")), count)


def _read_switch_op(x: dict, coll) -> SwitchOp:
    count = _int(x.get("count", 1), 1, coll.num_chunks)
    rank = lambda r: _int(r, 0, coll.ranks - 1)  # noqa: E731
    if x["op"] == "multicast":
        srcs, dsts = (rank(x["src"]),), tuple(rank(d) for d in x["dsts"])
    else:
        srcs, dsts = tuple(rank(r) for r in x["srcs"]), (rank(x["dst"]),)
    return SwitchOp(x["op"], _int(x["chunk"], 0, coll.num_chunks - count), srcs, dsts,
                    str(x["via"]), count)


def model_from_dict(doc: dict, ranks: int, orbits: Orbits | None = None) -> LinkModel:
    """The topology of a file (model_to_dict's), the whole machine; `orbits`: a version 4
    file's symmetry, which a topology listed per orbit needs."""
    rank = lambda r: _int(r, 0, ranks - 1)  # noqa: E731 (a translation indexes by it)
    links = tuple(RankLink(rank(l[0]), rank(l[1]), _fraction(l[2]),
                           _finite(l[3]) if len(l) > 3 else 0.0) for l in doc["links"])
    groups = tuple(Group(str(g["name"]), tuple((rank(a), rank(b)) for a, b in g["links"]),
                         _fraction(g["capacity"])) for g in doc.get("groups", []))
    if doc.get("orbits") is True:
        if orbits is None:
            raise ValueError("topology.orbits is for version 4 files (their symmetry)")
        links, groups = expanded(orbits, links, list(zip(groups, (
            [str(n) for n in g["names"]] for g in doc.get("groups", [])))))
    unit = _finite(doc["unit_gbps"])
    if unit <= 0:
        raise ValueError(f"topology.unit_gbps must be positive, got {quote(unit)}")
    boxes = tuple(_int(b, 0) for b in doc.get("boxes", ()))
    if boxes and len(boxes) != ranks:
        raise BadInput(f"schedule file: topology.boxes names {len(boxes)} ranks, not {ranks}")
    switches = tuple(Switch(str(w["name"]), tuple(str(c) for c in w["can"]),
                            tuple((_int(a), _int(b)) for a, b in w["links"]),
                            tuple((_int(r), str(g)) for r, g in w.get("up", [])),
                            tuple((_int(r), str(g)) for r, g in w.get("down", [])))
                     for w in doc.get("switches", []))
    return LinkModel(str(doc.get("name", "custom")), unit, ranks, links, groups, boxes,
                     switches)


def write_schedule(schedule: Schedule, path: str | Path, follow_links: bool = True) -> Path:
    return write_atomic(path, schedule_text(schedule), follow_links)


def schedule_text(schedule: Schedule) -> str:
    """schedule_json(schedule_to_dict(schedule)), the same text, with the topology's
    made once per model and kept for the next schedule on it: every point of a job
    writes the whole machine, and at 1024 GPUs behind a spine (a million rank links)
    that took about 20 s a file, for each of its points."""
    doc = schedule_to_dict(schedule, topology={})
    doc["topology"] = _Raw(topology_text(schedule.model, schedule.symmetry))
    return schedule_json(doc)


class _Raw(str):
    """Text _pretty writes as it is (already JSON)."""


_TOPOLOGY_TEXT: dict = {}


def topology_kept(model: LinkModel, orbits: Orbits | None = None) -> bool:
    """Whether the model's text (for files written per `orbits`) is made and kept
    (schedule_text)."""
    hit = _TOPOLOGY_TEXT.get(_text_key(model, orbits))
    return hit is not None and hit[0] is model


def topology_text(model: LinkModel, orbits: Orbits | None = None) -> str:
    """_pretty(model_to_dict(model, orbits), 1): the topology as a schedule file holds it
    (at depth 1), made once and kept for the last model asked (by identity, as
    capacity_tables keys them) and symmetry (a version 4 file lists it per orbit)."""
    key = _text_key(model, orbits)
    hit = _TOPOLOGY_TEXT.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    text = _pretty(model_to_dict(model, orbits), 1)
    _TOPOLOGY_TEXT.clear()
    _TOPOLOGY_TEXT[key] = (model, text)
    return text


def _text_key(model: LinkModel, orbits: Orbits | None):
    return id(model), None if orbits is None else (orbits.dims, orbits.axes)


def schedule_json(doc: dict) -> str:
    """The schedule file's text (json_text)."""
    return json_text(doc)


def json_text(doc: dict) -> str:
    """A JSON file's text as synth writes it: indented, with every value short enough
    on one line, so a small file reads easily and one of millions of sends (one per
    line) is written fast (json's own indenting encoder is pure Python, and puts every
    number on a line of its own)."""
    return _pretty(doc, 0) + "\n"


LINE = 80  # characters: a value this short is written on one line


def _pretty(value, depth: int) -> str:
    if isinstance(value, _Raw):
        return value
    if isinstance(value, (dict, list)) and value and not _short(value):
        pad = " " * (depth + 1)
        if isinstance(value, dict):
            items = [f"{pad}{json.dumps(k)}: {_pretty(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
        if all(isinstance(v, list) and len(v) == 2 for v in value):
            items = _wrapped([json.dumps(v) for v in value], pad)  # (rank, chunk) pairs
        else:
            items = [pad + _pretty(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return json.dumps(value)


def _wrapped(texts: list[str], pad: str) -> list[str]:
    """The texts joined by ", " into lines of about LINE characters."""
    lines, line = [], []
    width = len(pad)
    for text in texts:
        if line and width + len(text) > LINE:
            lines.append(pad + ", ".join(line))
            line, width = [], len(pad)
        line.append(text)
        width += len(text) + 2
    return lines + [pad + ", ".join(line)]


def _short(value) -> bool:
    """Whether json.dumps(value) has at most about LINE characters; stops early."""
    room, todo = LINE, [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            room -= 2 + sum(len(k) + 6 for k in v)
            todo.extend(v.values())
        elif isinstance(v, list):
            room -= 2 + 2 * len(v)
            todo.extend(v)
        else:
            room -= len(str(v)) + 2
        if room < 0:
            return False
    return True


def read_schedule(path: str | Path) -> Schedule:
    """The schedule in a file, read but not verified."""
    doc = load_json(path, SCHEDULE_LIMIT, "schedule file")
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: not a schedule (expected a JSON object)")
    try:
        return schedule_from_dict(doc)
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


def _number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


def _fraction(x) -> Fraction:
    return Fraction(_finite(x)).limit_denominator(1_000_000)


def _finite(x) -> float:
    """A non-negative number of at most 1e300, the verifier's own rule (JSON allows
    1e400 and NaN; an integer of 400 digits is compared, never converted)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1e300 \
            or (isinstance(x, float) and not math.isfinite(x)):
        raise ValueError(f"expected a number from 0 to 1e300, got {quote(x)}")
    return x


def _int(x, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"expected an integer, got {quote(x)}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ValueError(f"{x} is out of range {lo}..{'' if hi is None else hi}")
    return x


def _op(x) -> str:
    if x not in ("copy", "reduce"):
        raise ValueError(f"unknown op {quote(x)}")
    return x


def verified(schedule: Schedule) -> Schedule:
    """The schedule itself, once the independent verifier accepts its file form."""
    try:
        verify_schedule(schedule_to_dict(schedule))
    except ScheduleInvalid as e:
        how = schedule.info.get("method") or schedule.info.get("algorithm") or "synthesized"
        raise InternalError(f"a {how} schedule fails verification: {e}") from e
    return schedule
