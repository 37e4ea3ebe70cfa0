"""NCCL-style double binary tree: two spanning trees, each carrying half of the data.

On a fully connected rank graph the trees are the classic in-order binary trees by
rank: tree A puts rank r at position r + 1, tree B at position r (rank 0 at N); in
either, the odd positions are the leaves, so (for even N) every interior node of one
tree is a leaf of the other. On sparser graphs both trees are grown breadth-first from
the links with at most two children per rank, tree B preferring A's leaves as parents.
Allreduce reduces up both trees and broadcasts back down; broadcast and reduce use one
half each way. C = 2 x lanes (moves.best_lanes), so wide ports are filled too.
"""

from __future__ import annotations

from synth.construct.baselines.baseline import Baseline
from synth.construct.baselines.graphs import all_linked, interior, spanning_tree
from synth.construct.moves import (assemble_widest, best_lanes, in_parallel, in_sequence,
                                   tree_broadcast, tree_reduce)
from synth.topology.linkmodel import LinkModel, hop_distances

NAME = "double binary tree"
COLLECTIVES = ("allreduce", "broadcast", "reduce")


def tree_baseline(model: LinkModel, collective: str, root: int | None) -> Baseline | str:
    """The double binary tree for `collective`, or why there is none. Steps: 2 x height
    (allreduce) or height, height ~ log2 N on complete graphs."""
    if collective not in COLLECTIVES:
        return f"only for {', '.join(COLLECTIVES)}"
    n = model.ranks
    if n < 2:
        return "needs at least 2 ranks"
    if all_linked(model, range(n)):
        trees, how = _classic_trees(n, root), "classic binary trees by rank"
    else:
        trees, how = _grown_trees(model, collective, root), "grown from the links"
        if trees is None:
            return "no two spanning trees with at most 2 children per rank found greedily"
    info = {"algorithm": NAME, "trees": how,
            "roots": [top for top, _ in trees],
            "children": [{str(p): ks for p, ks in sorted(c.items())} for _, c in trees]}
    schedule = assemble_widest(model, collective, 2, root, _moves(collective, trees), info)
    return Baseline(NAME, schedule, NAME)


def _moves(collective: str, trees):
    """Tree t carries chunk t: up (reduce), down (broadcast), or up then down."""
    parts = []
    for chunk, (top, children) in enumerate(trees):
        up, down = tree_reduce(children, top, [chunk]), tree_broadcast(children, top, [chunk])
        parts.append({"allreduce": in_sequence(up, down), "broadcast": down,
                      "reduce": up}[collective])
    return in_parallel(*parts)


def _bit_tree(n: int) -> tuple[int, dict[int, list[int]]]:
    """(root, children) over positions 1..n: x's children are x -/+ half its lowest set
    bit (the right one shrunk until it is <= n); odd positions are the leaves."""
    top = 1 << (n.bit_length() - 1)
    children = {}
    for x in range(1, n + 1):
        low = x & -x
        if low == 1:
            continue
        kids = [x - low // 2]
        half = low // 2
        while half >= 1 and x + half > n:
            half //= 2
        if half >= 1:
            kids.append(x + half)
        children[x] = kids
    return top, children


def _classic_trees(n: int, root: int | None):
    """Tree A: rank = position - 1; tree B: rank = position mod n. For a rooted
    collective both are rotated so that A's root is `root`, and `root` then swaps places
    with B's root (it must send or receive everything in both)."""
    top, kids = _bit_tree(n)

    def relabel(label):
        return label(top), {label(p): sorted(label(k) for k in ks) for p, ks in kids.items()}

    shift = 0 if root is None else (root - (top - 1)) % n
    a = relabel(lambda x: (x - 1 + shift) % n)
    b = relabel(lambda x: (x + shift) % n)
    if root is not None and b[0] != root:
        other = b[0]
        swap = {root: other, other: root}
        b = (root, {swap.get(p, p): sorted(swap.get(k, k) for k in ks)
                    for p, ks in b[1].items()})
    return [a, b]


def _grown_trees(model: LinkModel, collective: str, root: int | None):
    """Two breadth-first trees with at most 2 children per rank, or None. Unrooted
    (allreduce): A hangs from a most central rank, B from a most central leaf of A.
    B prefers A's leaves as parents; a few preferences (wide links first, edges A does
    not use) are tried, and the pair whose moves has the fewest rounds per chunk wins."""
    link = model.link
    if collective == "broadcast":
        adjacent = lambda p, k: (p, k) in link
    elif collective == "reduce":
        adjacent = lambda p, k: (k, p) in link
    else:
        adjacent = lambda p, k: (p, k) in link and (k, p) in link
    ranks = range(model.ranks)
    hops = hop_distances(model)
    eccentricity = {r: max(hops[r].get(q, model.ranks) for q in ranks) for r in ranks}

    def width(p, k):  # the narrower direction of the tree edge
        return min(l.capacity for l in (link.get((p, k)), link.get((k, p))) if l)

    top_a = root if root is not None else min(ranks, key=lambda r: (eccentricity[r], r))
    best = None
    for wide_a, wide_b, fresh_b in ((True, True, True), (False, False, True),
                                    (True, False, False), (False, False, False)):
        tree_a = spanning_tree(ranks, top_a, adjacent, max_children=2,
                               prefer=lambda p, k: -width(p, k) if wide_a else 0)
        if tree_a is None:
            return None
        leaves = [r for r in ranks if r not in interior(tree_a)]
        top_b = root if root is not None else min(leaves, key=lambda r: (eccentricity[r], r))
        used = {frozenset((p, k)) for p, ks in tree_a.items() for k in ks}
        tree_b = spanning_tree(
            ranks, top_b, adjacent, max_children=2, avoid_interior=frozenset(interior(tree_a)),
            prefer=lambda p, k: (fresh_b and frozenset((p, k)) in used,
                                 -width(p, k) if wide_b else 0))
        if tree_b is None:
            continue
        trees = [(top_a, tree_a), (top_b, tree_b)]
        moves = _moves(collective, trees)
        key = (best_lanes(model, moves)[1], len(moves))
        if best is None or key < best[0]:
            best = (key, trees)
    return best[1] if best else None
