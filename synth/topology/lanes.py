"""A topology on power-of-two lanes: every link's lanes rounded down to a power of two
(18 NVLink lanes to 16). The runtimes cut a message into power-of-two pieces, and
synth's constructions cut by lanes, so an 18-lane machine's trees and shards cut no
power-of-two size; on 16 of its lanes they do, a little slower in the model and valid
on the real links (synth.plan.planner, synth.answer). The variant is named after its
machine, so that a schedule file made on it names a machine synth derives
(synth.schedule.machine)."""

from __future__ import annotations

from dataclasses import replace

from synth.topology.physical import Topology

SUFFIX = " (power-of-two lanes)"


def power_of_two_lanes(topo: Topology) -> Topology | None:
    """The topology with every link's lanes rounded down to a power of two, named NAME
    (power-of-two lanes), or None where that changes nothing. O(links)."""
    links = tuple(replace(l, count=1 << (l.count.bit_length() - 1)) for l in topo.links)
    if links == topo.links:
        return None
    return replace(topo, links=links, name=f"{topo.name}{SUFFIX}")


def lanes_of(name: str) -> str | None:
    """The machine a variant's name was made from (power_of_two_lanes), or None where
    `name` names no variant."""
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else None
