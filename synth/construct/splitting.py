"""Share out the switches: per-link capacities that respect every group, for tree packing.

A link model's groups say that several rank links share one resource (a GPU's port into
an NVSwitch, a NIC two GPUs use, a PCIe uplink). Packing trees needs plain capacities:
any x with x_l <= capacity_l and sum(x_l for l in g) <= capacity_g for every group g
will do, because a step that moves at most x_l x L chunks over each link l moves at most
capacity_g x L over every group, so it fits in L rounds (this is what ForestColl's edge
splitting of switch vertices achieves on the physical graph; here the lowering's routes
already say which GPU pairs a switch joins, and the split is a choice of how much of
each shared resource each pair may use).

Which x: the one that lets the most trees through. Edmonds' branching theorem (1973)
says that spanning arborescences with roots r_1 .. r_K pack edge-disjointly exactly when
every vertex set S receives at least as many edges as there are roots outside it; with a
source s* joined to each root by as many edges as it roots trees, that is max-flow(s*,
v) >= K for every v (Menger). So the largest rate lam (trees per root per unit of
capacity) that a split allows is a linear program: x in the group polytope, and for each
sink v a flow from s* (lam to every root) delivering lam x (roots other than v) to v.
A gather's flow has one sink, its root (candidate_splits' `sinks`).

The simplest splits come first (candidate_splits): an even share of each group, with
rail peers alone between boxes, reaches the bound on every symmetric built-in; the
program runs only where it falls short.

Allreduce runs reducescatter trees (on the reversed links) and allgather trees at once,
so the two phases share every link. One packing used both ways can load a link with
both in full (mesh:4x4: 1.3 x the allreduce bound); allreduce_split instead gives each
link class two capacities, one per phase, their sum within the link's and every group's,
with both phases' flows at one rate: the same program with twice the variables.

Symmetry keeps the program small and its answer round. Colour refinement (1-dimensional
Weisfeiler-Leman) splits ranks and links into classes that every automorphism of the
model preserves; averaging an optimal x over the automorphism group gives an optimal x
constant on orbits, so x gets one variable per link class and one sink per rank class
needs a flow. Where refinement merges ranks that no automorphism maps onto each other,
the program may promise more than x gives: the packing measures what x really allows
(max-flows over every rank), so a loose promise costs rate, never correctness. Few
classes give a vertex solution of small denominators, so x is a Fraction of small
denominator and the lanes (capacity x L) stay few.

Cost: refinement O(rounds x links); the program has (link classes + 1 + rank classes x
(links + ranks)) variables: about 2,000 for dgx2x2, solved by HiGHS in well under a
second.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.deadline import Deadline, OutOfTime
from synth.schedule.transform import reverse_model
from synth.topology.linkmodel import Group, LinkModel, RankLink, box_places

MILP_SECONDS = 5.0  # whole_split's program at most (dgx2x2 on several routes: 0.3 s)
DENOMINATOR = 10_000  # an LP vertex here has small denominators; past this, the nearest


def candidate_splits(model: LinkModel, roots: list[int], sinks: list[int] | None = None,
                     deadline: Deadline = Deadline()):
    """Splits of `model` (models without groups, the same links), simplest first, each
    made only when asked for: the model itself when it has no groups; else even splits
    (rail peers alone between boxes, then every link), then the program's split of
    each. Simplest first because between boxes rail peers alone (GPU i to GPU i) make
    few, wide links where every pair would make many thin ones (dgx2x2: 1/4 against
    1/64 of a chunk per round), and an even split keeps denominators small: far fewer
    lanes and trees, and often the same rate as the program's split. The caller
    measures each one's rate and stops when it has what it wants. The program's splits
    end where `deadline` passes first (a degraded 64-GPU cluster's took 6 s)."""
    if not model.groups:
        yield model
        return
    rails = rails_only(model)
    bases = ([rails] if rails is not None else []) + [model]
    for base in bases:
        yield _even(base)
    for base in bases:
        try:
            split = program_split(base, roots, sinks, deadline)
        except OutOfTime:
            return
        yield split


def program_split(model: LinkModel, roots: list[int], sinks: list[int] | None = None,
                  deadline: Deadline = Deadline()) -> LinkModel:
    """The split that lets the most trees rooted at `roots` (each rank once: [root] for
    a broadcast, every rank for an allgather) through: the linear program of the
    module docstring, one variable per link class. Links it gives nothing are dropped.
    OutOfTime past `deadline`."""
    ranks, links = rank_classes(model, roots)
    split = _split_program(model, roots, ranks, links, sinks, (False,), deadline)[0][0]
    return _kept(model, links, split)


def _even(model: LinkModel) -> LinkModel:
    """Each group's capacity shared evenly by its links (no groups left)."""
    share = {(l.src, l.dst): l.capacity for l in model.links}
    for g in model.groups:
        for pair in g.links:
            share[pair] = min(share[pair], g.capacity / len(g.links))
    links = tuple(RankLink(l.src, l.dst, share[(l.src, l.dst)], l.alpha_us)
                  for l in model.links)
    return LinkModel(model.name, model.unit_gbps, model.ranks, links, (), model.boxes)


def rails_only(model: LinkModel) -> LinkModel | None:
    """The links inside boxes and those between rail peers (the same place in their
    boxes); None for one box, or when nothing would be dropped."""
    if len(set(model.boxes)) < 2:
        return None
    _, place, _ = box_places(model.boxes)
    kept = tuple(l for l in model.links if model.boxes[l.src] == model.boxes[l.dst]
                 or place[l.src] == place[l.dst])
    if len(kept) == len(model.links):
        return None
    pairs = {(l.src, l.dst) for l in kept}
    groups = tuple(Group(g.name, inside, g.capacity) for g in model.groups
                   if len(inside := tuple(p for p in g.links if p in pairs)) > 1)
    return LinkModel(model.name, model.unit_gbps, model.ranks, kept, groups, model.boxes)


def rank_classes(model: LinkModel, roots: list[int]) -> tuple[list[int], list[int]]:
    """Colour refinement: a class per rank and per link, preserved by every automorphism
    of the model that maps roots to roots (capacities, groups and directions kept)."""
    in_groups: dict[tuple[int, int], list] = defaultdict(list)
    for g in model.groups:
        for pair in g.links:
            in_groups[pair].append((g.capacity, len(g.links)))
    label = [(l.capacity, tuple(sorted(in_groups[(l.src, l.dst)]))) for l in model.links]
    # links of one group are alike only if their groups are alike: a group's colour joins
    # its links' labels below through the multiset of its members' rank colours
    roots_set = set(roots)
    colour = [int(r in roots_set) for r in range(model.ranks)]
    while True:
        signature = [(colour[r], [], []) for r in range(model.ranks)]
        for i, l in enumerate(model.links):
            signature[l.src][1].append((label[i], colour[l.dst]))
            signature[l.dst][2].append((label[i], colour[l.src]))
        keys = [(c, tuple(sorted(out)), tuple(sorted(inn))) for c, out, inn in signature]
        numbering = {k: n for n, k in enumerate(sorted(set(keys)))}
        refined = [numbering[k] for k in keys]
        if len(set(refined)) == len(set(colour)):
            break
        colour = refined
    edge_keys = [(label[i], colour[l.src], colour[l.dst]) for i, l in enumerate(model.links)]
    numbering = {k: n for n, k in enumerate(sorted(set(edge_keys)))}
    return colour, [numbering[k] for k in edge_keys]


def allreduce_split(model: LinkModel, deadline: Deadline = Deadline()
                    ) -> tuple[LinkModel, LinkModel, float]:
    """Two splits of `model`, for allgather trees and for reducescatter trees (packed
    on the reversed links), that together fit every link and group, at the most trees
    per root per round that both phases reach at once: the program of the module
    docstring with two capacities per link class (their sum within the class's and
    every group's) and both phases' flows. Reducescatter + allgather trees over them,
    overlapped in one pipeline, move every link at most its capacity: on mesh:4x4 the
    allreduce bound, where one packing used both ways gets 1.3 x it. Also the rate the
    program promises (trees per root per round, each phase). OutOfTime past `deadline`."""
    everyone = list(range(model.ranks))
    ranks, links = rank_classes(model, everyone)
    (down, up), rate = _split_program(model, everyone, ranks, links, None, (False, True),
                                      deadline)
    return _kept(model, links, down), reverse_model(_kept(model, links, up)), rate


def _kept(model: LinkModel, links: list[int], split: dict[int, Fraction]) -> LinkModel:
    """`model`'s links at their class's share (those given nothing dropped), no groups."""
    kept = tuple(RankLink(l.src, l.dst, split[links[i]], l.alpha_us)
                 for i, l in enumerate(model.links) if split[links[i]] > 0)
    return LinkModel(model.name, model.unit_gbps, model.ranks, kept, (), model.boxes)


@dataclass
class _Program:
    """The split program's rows (module docstring): variables are each phase's link
    class capacities (`n_split`, phase by phase), then lam (`lam_col`), then the flows;
    every row is `lower` <= rows x <= `upper`, and each variable within 0 and `cap`."""

    rows: object  # scipy.sparse
    lower: np.ndarray
    upper: np.ndarray
    cap: np.ndarray
    n_split: int
    lam_col: int
    caps: dict[int, Fraction]
    phase_cols: list[list[int]]


def _split_program(model: LinkModel, roots: list[int], ranks: list[int],
                   links: list[int], sinks: list[int] | None, phases: tuple[bool, ...],
                   deadline: Deadline) -> tuple[list[dict[int, Fraction]], float]:
    """One capacity per link class and phase (a phase True runs on the reversed
    links), all phases at one rate lam with their flows to `sinks` (None: to every
    rank, one per class, as trees span them all), their capacities' sum within each
    class's and each group's; and lam. OutOfTime past `deadline`, building the program
    or solving it (HiGHS is told the time left)."""
    from synth.lp import solve

    program = _program(model, roots, ranks, links, sinks, phases, deadline)
    cost = np.zeros(len(program.cap))
    cost[program.lam_col] = -1.0
    result = solve(cost, program.rows, program.lower, program.upper, 0.0, program.cap,
                   seconds=deadline.solver_seconds())
    # HiGHS stopped at its time limit (solver_seconds: the time left, maybe a moment
    # before the deadline itself passes); with no deadline, "time" is its iterations'
    if result.status == "time" and math.isfinite(deadline.moment):
        raise OutOfTime
    if result.status != "optimal":  # cannot happen for a feasible model (x = 0 is one)
        raise RuntimeError(f"splitting {model.name}: {result.status}")
    n_split, n_classes = program.n_split, len(program.phase_cols)
    split = _rounded(model, links, program.caps, program.phase_cols, result.x[:n_split])
    return ([{c: split[p * n_classes + c] for c in range(n_classes)}
             for p in range(len(phases))], float(result.x[program.lam_col]))


def whole_split(model: LinkModel, roots: list[int], sinks: list[int] | None,
                rate: Fraction, lanes: int, deadline: Deadline = Deadline()
                ) -> LinkModel | None:
    """A split (program_split's) at exactly `rate` trees per root per round whose every
    capacity is a whole number of 1/`lanes` of a unit: the program with its link
    classes integer in those units and lam fixed, a question of feasibility for HiGHS.
    program_split's vertex has denominators of its own (dgx2x2 on several routes: 4,143
    and 4,340), and its lanes coarsened to MAX_TREES trees per root fall 0.2% short;
    in L lanes, with L a multiple of the rate's denominator, whole trees reach the rate
    itself. None where the program finds no such split in time (it may promise what the
    classes' ranks do not all get: the packing measures)."""
    from synth.lp import solve

    ranks, links = rank_classes(model, roots)
    try:
        program = _program(model, roots, ranks, links, sinks, (False,), deadline)
    except OutOfTime:
        return None
    n_split = program.n_split
    scale = np.ones(len(program.cap))  # a class's column counts 1/lanes units
    scale[:n_split] = 1.0 / lanes
    cap = program.cap.copy()
    cap[:n_split] = np.floor(cap[:n_split] * lanes + 1e-9)
    low = np.zeros(len(cap))
    low[program.lam_col] = cap[program.lam_col] = float(rate)
    result = solve(np.zeros(len(cap)), program.rows.multiply(scale).tocsc(), program.lower,
                   program.upper, low, cap, integer=np.arange(len(cap)) < n_split,
                   seconds=deadline.solver_seconds(MILP_SECONDS))
    if result.x is None or result.status not in ("optimal", "time"):
        return None
    split = {c: Fraction(round(result.x[c]), lanes) for c in range(n_split)}
    return _kept(model, links, split)


def _program(model: LinkModel, roots: list[int], ranks: list[int], links: list[int],
             sinks: list[int] | None, phases: tuple[bool, ...], deadline: Deadline
             ) -> _Program:
    """_split_program's rows. OutOfTime past `deadline`."""
    from scipy.sparse import coo_matrix, vstack

    n_classes, m = max(links) + 1, len(model.links)
    if sinks is None:
        sinks = [next(r for r in range(model.ranks) if ranks[r] == c)
                 for c in sorted(set(ranks))]
    sinks = [v for v in sinks if not (len(roots) == 1 and v == roots[0])]
    n_split = n_classes * len(phases)
    lam_col = n_split  # the column of lam, after every phase's link classes
    per_sink = m + len(roots)  # a flow on every link, and from s* into every root
    n_vars = n_split + 1 + len(phases) * len(sinks) * per_sink
    ub_rows, ub_cols, ub_vals, ub_rhs = [], [], [], []
    eq_rows, eq_cols, eq_vals = [], [], []
    eq_rhs: list[float] = []

    def ub(entries, rhs):
        for col, val in entries:
            ub_rows.append(len(ub_rhs))
            ub_cols.append(col)
            ub_vals.append(val)
        ub_rhs.append(rhs)

    for p, backwards in enumerate(phases):
        for j, v in enumerate(sinks):
            if deadline.passed():
                raise OutOfTime
            base = n_split + 1 + (p * len(sinks) + j) * per_sink
            for i in range(m):  # the flow within the phase's split
                ub([(base + i, 1.0), (p * n_classes + links[i], -1.0)], 0.0)
            for a, _ in enumerate(roots):  # lam from s* into each root
                ub([(base + m + a, 1.0), (lam_col, -1.0)], 0.0)
            row_of = {}
            for w in range(model.ranks):
                row_of[w] = len(eq_rhs)
                eq_rhs.append(0.0)
            for i, l in enumerate(model.links):
                head, tail = (l.src, l.dst) if backwards else (l.dst, l.src)
                eq_rows += [row_of[head], row_of[tail]]
                eq_cols += [base + i, base + i]
                eq_vals += [1.0, -1.0]
            for a, r in enumerate(roots):
                eq_rows.append(row_of[r])
                eq_cols.append(base + m + a)
                eq_vals.append(1.0)
            # everything s* sends ends at v: v absorbs it, the others pass it on
            eq_rows.append(row_of[v])
            eq_cols.append(lam_col)
            eq_vals.append(-float(len(roots)))
    caps: dict[int, Fraction] = {}
    for i, l in enumerate(model.links):
        caps[links[i]] = min(caps.get(links[i], l.capacity), l.capacity)
    phase_cols = [[p * n_classes + c for p in range(len(phases))] for c in range(n_classes)]
    if len(phases) > 1:  # the phases share each class's capacity
        for c in range(n_classes):
            ub([(col, 1.0) for col in phase_cols[c]], float(caps[c]))
    index = {(l.src, l.dst): i for i, l in enumerate(model.links)}
    for g in model.groups:
        counts: dict[int, int] = defaultdict(int)
        for pair in g.links:
            counts[links[index[pair]]] += 1
        ub([(col, float(k)) for c, k in counts.items() for col in phase_cols[c]],
           float(g.capacity))
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(len(ub_rhs), n_vars))
    a_eq = coo_matrix((eq_vals, (eq_rows, eq_cols)), shape=(len(eq_rhs), n_vars))
    cap = np.r_[[float(caps[c % n_classes]) for c in range(n_split)],
                np.full(n_vars - n_split, np.inf)]
    return _Program(vstack([a_ub, a_eq]).tocsc(), np.r_[np.full(len(ub_rhs), -np.inf), eq_rhs],
                    np.r_[ub_rhs, eq_rhs], cap, n_split, lam_col, caps, phase_cols)


def _rounded(model: LinkModel, links: list[int], caps: dict[int, Fraction],
             phase_cols: list[list[int]], x) -> list[Fraction]:
    """The program's capacities (per phase and link class, `x`) as small fractions
    within each class's capacity; a rounding that overshoots a class or a group
    shrinks every one by the worst overshoot."""
    n_classes = len(phase_cols)
    split = [min(max(Fraction(float(v)).limit_denominator(DENOMINATOR), Fraction(0)),
                 caps[c % n_classes]) for c, v in enumerate(x)]
    index = {(l.src, l.dst): i for i, l in enumerate(model.links)}
    used = [(sum(split[col] for pair in g.links for col in phase_cols[links[index[pair]]]),
             g.capacity) for g in model.groups]
    used += [(sum(split[col] for col in phase_cols[c]), caps[c]) for c in range(n_classes)]
    shrink = min((cap / total for total, cap in used if total > cap), default=Fraction(1))
    return [v * shrink for v in split]
