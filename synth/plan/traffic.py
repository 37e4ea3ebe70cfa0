"""What a schedule puts on the physical links of the whole topology when it runs on every
group of its communicator at once (synth plan): the bytes per link, and from them the
time per byte the busiest link needs, which is more than the schedule's own where the
groups' traffic meets on a link (two GPUs behind one NIC, say) that each group's own
view of the topology does not show.

Routes are each group's view's (synth.topology.communicator.view): the same physical
paths the full topology's lowering takes between those GPUs. Cost: one lowering per
group (memoised per group), then linear in the schedule's program.
"""

from __future__ import annotations

from functools import lru_cache

from synth.topology.communicator import view
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import Topology


@lru_cache(maxsize=256)
def _routes(topo: Topology, group: tuple[int, ...]):
    """The group's routes, the computing switches, and the pairs of several routes
    (synth.topology.several_routes) with each route's share of their traffic: its
    bottleneck's share of the routes' summed bottlenecks, as the model's summed
    capacity assumes."""
    sub = view(topo, list(group))
    lowering = lower_with_routes(sub)
    bw = bandwidth(sub)
    split = {}
    for pair, more in lowering.further.items():
        paths = (lowering.routes[pair],) + more
        widths = [min(bw[h] for h in zip(p, p[1:])) for p in paths]
        split[pair] = [(p, w / sum(widths)) for p, w in zip(paths, widths)]
    return lowering.routes, frozenset(v.name for v in sub.vertices if v.can), split


def physical_use(topo: Topology, groups, schedule, n: int) -> dict[tuple[str, str], float]:
    """Bytes each physical link carries when `schedule` runs at message size n on every
    one of `groups` (global ranks, in the schedule's rank order) at once. A switch
    operation crosses the hops on the single side of its switch once (a multicast's
    source side, a reduction's destination side) and the others once per rank, as the
    switch moves it."""
    chunk = n / schedule.collective.buffer_chunks
    batches = schedule.pipeline.batches if schedule.pipeline else 1
    load: dict = {}
    steps = schedule.unfolded().steps  # every rank's sends (a version 4 file lists some)

    def add(hops, count):
        for hop in hops:
            load[hop] = load.get(hop, 0.0) + count * chunk * batches

    for group in groups:
        routes, computing, split = _routes(topo, tuple(group))  # computing: its switches
        for step in steps:
            for x in step.sends:
                for path, share in split.get((x.src, x.dst), ((routes[x.src, x.dst], 1),)):
                    add(zip(path, path[1:]), x.count * share)
            for op in step.switch_ops:
                once = set()
                for a, b in op.pairs():
                    path = routes[(a, b)]
                    cut = next((i for i, v in enumerate(path) if v in computing), None)
                    if cut is None:  # no computing switch on this route: plain sends
                        add(zip(path, path[1:]), op.count)
                        continue
                    near, far = list(zip(path[:cut + 1], path[1:cut + 1])), \
                        list(zip(path[cut:], path[cut + 1:]))
                    single, each = (near, far) if op.op == "multicast" else (far, near)
                    once.update(single)
                    add(each, op.count)
                add(once, op.count)
    return load


def bandwidth(topo: Topology) -> dict[tuple[str, str], float]:
    """Bytes per microsecond of each physical link."""
    return {(l.src, l.dst): l.bandwidth * 1e3 for l in topo.links}


def busiest_rate(topo: Topology, groups, schedule) -> float:
    """Microseconds per byte of message size that the busiest physical link needs when
    `schedule` runs on every one of `groups` at once: the least bandwidth term any of
    them can have, whatever the schedule's own rounds say."""
    bw = bandwidth(topo)
    use = physical_use(topo, groups, schedule, 1)
    return max((b / bw[hop] for hop, b in use.items()), default=0.0)
