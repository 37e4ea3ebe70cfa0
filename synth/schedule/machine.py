"""Is a schedule file's machine the machine it names?

A schedule file carries the link model it was made for (capacities, alphas, groups,
switches and their ports), and the verifier checks the schedule against that model
alone. A file whose model was edited (every capacity doubled, a switch that reduces
added) would pass. So where the file names a topology synth knows without reading
anything (a built-in, a generator such as ring:8, a built-in's NAMExK, any of these
degraded or on power-of-two lanes), or the user
names one (`--topo`), the embedded model must be the one synth derives from it, or the
file is invalid and the first difference is named. A file whose topology synth cannot
resolve (a user's own file, a plan's communicator view) is checked on its own model,
and `machine_note` says so.

Cost: lowering the named topology once per name (O(N^2 hops) for N GPUs), then one
pass over the two models' links, groups and switches.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from pathlib import Path

from synth.errors import BadInput
from synth.files import SCHEDULE_LIMIT, load_json, quote
from synth.schedule.file import (embedded_model, model_from_dict, model_to_dict,
                                 schedule_from_dict)
from synth.schedule.ir import Schedule
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.topology.catalog import GENERATORS, builtin_names, resolve
from synth.topology.degrade import parse_edit, split_name
from synth.topology.fabric import split_options
from synth.topology.lanes import lanes_of, power_of_two_lanes
from synth.topology.linkmodel import LinkModel, lower
from synth.topology.physical import FABRICS, Topology
from synth.topology.several_routes import SUFFIX, base_of

ALPHA_TOLERANCE = 1e-9  # relative: alphas are floats written as decimals


def known_by_name(name: str) -> bool:
    """Whether `name` resolves without reading a file: built-in, generator, NAMExK, or
    one of those degraded (its name says the edits: synth.topology.degrade), or any of
    these on power-of-two lanes (synth.topology.lanes)."""
    if lanes_of(name) is not None:
        return known_by_name(lanes_of(name))
    if base_of(name) is not None:  # NAME-several-routes (synth.topology.several_routes)
        return known_by_name(base_of(name))
    healthy, edits = split_name(name)
    if edits:  # but a plan's view of a degraded machine's communicator (NAME-without-
        # nic2:tp: its last edit would read "nic2:tp") is not one synth derives by name
        return known_by_name(healthy) and not any(":" in _part(e) for e in edits)
    if ":" in name and name.split(":", 1)[0] in GENERATORS:
        return name.count(":") == 1  # ring:4:world is a plan's view of a communicator
    options = split_options(name)  # NAMExK:FABRIC,...: only where FABRIC is a fabric
    if options and options[1].split(",", 1)[0] not in FABRICS:  # a plan's view of a
        return False  # communicator (dgxh100x2:box_8) is not one synth derives by name
    base = (options or (name,))[0]
    multi = re.fullmatch(r"(.+)x(\d+)", base)
    return name in builtin_names() or bool(multi and multi.group(1) in builtin_names())


def _part(edit: str) -> str:
    """What an edit names, lanes and fraction cut off (":" left in it: not an edit)."""
    try:
        return parse_edit(edit).part
    except BadInput:
        return ":"


@lru_cache(maxsize=8)
def _derived_by_name(name: str) -> LinkModel:
    return _normalised(lower(_as_named(resolve(lanes_of(name) or name), name)))


def _as_named(topo: Topology, name: str) -> Topology:
    """`topo` as a file named `name` was made on it: with its lanes rounded down to a
    power of two for a -p2 file (synth.topology.lanes)."""
    return (power_of_two_lanes(topo) or topo) if lanes_of(name) is not None else topo


def _normalised(model: LinkModel) -> LinkModel:
    """The model as a file holds it (numbers as written and read back)."""
    return model_from_dict(model_to_dict(model), model.ranks)


def check_machine(doc: dict, topo: Topology | None = None) -> str:
    """A note on what the schedule in `doc` (already verified on its own model) was
    checked against; ScheduleInvalid when its model is not the one synth derives from
    `topo`, or from the topology it names (module docstring)."""
    name = str(doc["topology"].get("name", ""))
    if topo is None and not known_by_name(name):
        machine, _, comm = name.rpartition(":")
        if machine and known_by_name(machine):  # --topo MACHINE would compare all of it
            return (f"checked on its own model ({name} is a plan's view of communicator "
                    f"{comm} on {machine}, which no topology names)")
        return f"checked on its own model ({name or 'an unnamed topology'} is not one " \
               "synth can derive; pass it with --topo to check the machine too)"
    if topo is not None:
        topo = _as_named(topo, name)
    try:
        derived = _normalised(lower(topo)) if topo is not None else _derived_by_name(name)
    except BadInput as e:
        raise ScheduleInvalid(f"the topology it names cannot be derived: {e}") from None
    try:
        embedded = embedded_model(doc)
    except KeyError as e:  # the verifier reads no more of the model than it needs
        raise BadInput(f"topology: key {quote(e.args[0])} missing") from None
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
        raise BadInput(f"topology: {e}") from None
    difference = first_difference(embedded, derived)
    what = topo.name if topo is not None else name
    if difference:
        hint = ("; it was made with --routes several: give that too"
                if topo is not None and not topo.several_routes and SUFFIX in name else "")
        raise ScheduleInvalid(f"its embedded model is not {what} as synth derives it: "
                              f"{difference}{hint}")
    return f"on {what} as synth derives it"


def read_verified(path: str | Path, topo: Topology | None = None) -> Schedule:
    """The schedule in a file, once the independent verifier accepts it and its machine
    is the one it names (check_machine): MalformedSchedule (exit 2) when it is not a
    schedule file, ScheduleInvalid (exit 1) when it is one that does not do what it
    claims on that machine. The one way `export`, `draw` and `run` read a schedule."""
    doc = load_json(path, SCHEDULE_LIMIT, "schedule file")
    try:
        verify_schedule(doc)
        check_machine(doc, topo)
        return schedule_from_dict(doc)
    except ScheduleInvalid as e:
        raise ScheduleInvalid(f"{path}: not a valid schedule: {e}") from None
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


def first_difference(embedded: LinkModel, derived: LinkModel) -> str | None:
    """The first way `embedded` differs from `derived`, in words, or None."""
    if embedded.ranks != derived.ranks:
        return f"{embedded.ranks} ranks, not {derived.ranks}"
    if not math.isclose(embedded.unit_gbps, derived.unit_gbps, rel_tol=ALPHA_TOLERANCE):
        return f"unit_gbps {embedded.unit_gbps:g}, not {derived.unit_gbps:g}"
    if embedded.boxes != derived.boxes:
        return "the ranks' boxes differ"
    return (_links_differ(embedded, derived) or _groups_differ(embedded, derived)
            or _switches_differ(embedded, derived))


def _links_differ(embedded: LinkModel, derived: LinkModel) -> str | None:
    for pair in sorted(set(embedded.link) | set(derived.link)):
        have, want = embedded.link.get(pair), derived.link.get(pair)
        where = f"link {pair[0]}->{pair[1]}"
        if have is None or want is None:
            return f"{where} is {'missing' if have is None else 'not in the machine'}"
        if have.capacity != want.capacity:
            return f"{where} has capacity {have.capacity}, not {want.capacity}"
        if not math.isclose(have.alpha_us, want.alpha_us, rel_tol=ALPHA_TOLERANCE):
            return f"{where} has alpha {have.alpha_us:g} us, not {want.alpha_us:g}"
    return None


def _groups_differ(embedded: LinkModel, derived: LinkModel) -> str | None:
    have = {g.name: (sorted(g.links), g.capacity) for g in embedded.groups}
    want = {g.name: (sorted(g.links), g.capacity) for g in derived.groups}
    if len(have) != len(embedded.groups):
        return "a group name is given twice"
    for name in sorted(set(have) | set(want)):
        if name not in have or name not in want:
            return f"group {name} is {'missing' if name not in have else 'not in the machine'}"
        if have[name][0] != want[name][0]:
            return f"group {name} holds other links"
        if have[name][1] != want[name][1]:
            return f"group {name} has capacity {have[name][1]}, not {want[name][1]}"
    return None


def _switches_differ(embedded: LinkModel, derived: LinkModel) -> str | None:
    def table(model):
        return {w.name: (sorted(w.can), sorted(w.links), sorted(w.up), sorted(w.down))
                for w in model.switches}

    have, want = table(embedded), table(derived)
    for name in sorted(set(have) | set(want)):
        if name not in have or name not in want:
            return (f"switch {name} is "
                    f"{'missing' if name not in have else 'not in the machine'}")
        for part, a, b in zip(("capabilities", "links", "up ports", "down ports"),
                              have[name], want[name]):
            if a != b:
                return f"switch {name}'s {part} differ"
    return None
