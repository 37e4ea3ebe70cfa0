"""The hop bound: how few steps a collective can need."""

from __future__ import annotations

from collections import defaultdict
from itertools import chain

import networkx as nx

from synth.bounds.flows import Clock
from synth.schedule.collectives import Collective
from synth.topology.linkmodel import LinkModel, rank_graph


def step_bound(model: LinkModel, collective: Collective, clock: Clock | None = None,
               among: set[int] | None = None) -> int:
    """Largest hop distance a chunk (or, combining, a contribution) must travel.

    Who holds and who wants a chunk follows from its share, and a share has one holder
    unless every rank holds it (synth.schedule.collectives), so the bound is a maximum
    of hop distances from one rank: one breadth-first search per holder, O(N x links) in
    all, kept one at a time (all pairs at once would be N^2 entries). Past the clock's
    deadline the holders not yet searched are left out: the maximum over the rest is
    still a lower bound. `among`: search only from these (one rank per orbit of the
    machine's automorphisms, the root fixed: an automorphism keeps the routed pairs, so
    hop distances, and maps the wanters of a share onto those of its image, so every
    rank of an orbit is as far from its farthest target; any subset is a lower bound)."""
    clock = clock or Clock()
    graph = rank_graph(model)
    far = model.ranks  # unreachable: never happens in a validated topology
    n = model.ranks
    every = range(n)
    if collective.combining:  # every rank's contribution must reach every wanter
        sources = every
        targets = lambda s: _wanting(collective)  # noqa: E731
    else:  # the holder's copy must reach every wanter of its shares
        sources, targets = _holders_and_wanters(collective)
    if among is not None and among.intersection(sources):
        sources = [s for s in sources if s in among]
    worst, searched = 0, 0
    for s in sources:
        wanted = [t for t in targets(s) if t != s]
        if not wanted:  # gather's root holds only its own: no search, none counted
            continue
        if searched and clock.expired():
            break
        dist = nx.single_source_shortest_path_length(graph, s)
        worst = max([worst] + [dist.get(t, far) for t in wanted])
        searched += 1
    return worst


def _wanting(collective: Collective) -> list[int]:
    """The ranks that want some chunk."""
    return sorted({r for r, _, count in collective.post_ranges() if count})


def _holders_and_wanters(collective: Collective):
    """(the ranks that hold some chunk at the start, rank -> the ranks that want a chunk
    it holds) for a collective whose every share has one holder, from the table's runs
    (no (rank, chunk) pair is built). A rank that wants every chunk is listed once, not
    once per holder (allgather: N, not N^2)."""
    per = collective.share_chunks
    held_by = {}  # share -> holder
    for rank, first, count in collective.pre_ranges():
        for share in range(first // per, (first + count - 1) // per + 1):
            held_by[share] = rank
    wanted: dict[int, set[int]] = defaultdict(set)
    everything = set()  # the ranks that want every chunk
    for rank, first, count in collective.post_ranges():
        if first == 0 and count == collective.num_chunks:
            everything.add(rank)
            continue
        for share in range(first // per, (first + count - 1) // per + 1):
            wanted[held_by[share]].add(rank)
    holders = sorted(set(held_by.values()) if everything else wanted)
    return holders, lambda s: chain(wanted.get(s, ()), everything)
