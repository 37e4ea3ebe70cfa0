"""Which constructions computed in the network a job tries, in the order it tries them.

One switch joining every rank (NVLS on one box): synth.construct.in_network for
allreduce and the collectives of its ONE_STEP; boxes each around a reducing switch:
its across-box allreduce, or where a NIC is missing synth.construct.relayed_network's;
and where the boxes' NICs could carry more than one copy of each share into a box,
synth.construct.nic_assisted for allgather, reducescatter and allreduce. Each search
keeps what it found when the deadline passes; Ctrl-C ends the rest.
"""

from __future__ import annotations

from synth.construct.in_network import ONE_STEP, box_switches, nvls_search, reducing_switch
from synth.construct.nic_assisted import nic_applies, nic_search
from synth.construct.relayed_network import relayed_search, relayed_switches
from synth.deadline import Deadline
from synth.search.pareto import Limits, Search

KEYS = ("in-network", "nic-assisted")  # the searches' names in a job's searches


def switch_searches(model, name: str, root, limits: Limits, deadline: Deadline,
                    hierarchy, on_event) -> dict[str, Search]:
    """The searches that apply to `name` on `model`, by KEYS, each run in turn."""
    found = {}
    if (name == "allreduce" and (reducing_switch(model) or box_switches(model, hierarchy))) \
            or (name in ONE_STEP and reducing_switch(model)):
        on_event("search", f"{name} in the network: switch reductions and multicasts")
        found["in-network"] = nvls_search(model, limits, deadline, hierarchy, name, root)
    elif name == "allreduce" and relayed_switches(model, hierarchy):
        # boxes alike inside, a NIC missing
        on_event("search", f"{name} in each box's switch, balanced over every NIC")
        found["in-network"] = relayed_search(model, limits, deadline, hierarchy)
    if found.get("in-network", Search()).stopped != "interrupted" and \
            nic_applies(model, name, hierarchy):
        on_event("search", f"{name} through each box's switch and every NIC at once")
        found["nic-assisted"] = nic_search(model, name, limits, deadline, hierarchy)
    return found
