"""Graph helpers for the baselines: complete subsets, Hamiltonian cycles, trees.

Everything here reads only the LinkModel (ranks, links, groups); searches are bounded
by explicit budgets so that baselines stay cheap on 64+ ranks.
"""

from __future__ import annotations

import random
from collections import defaultdict

from synth.topology.linkmodel import LinkModel

# Depth-first search for one Hamiltonian cycle: at most this many nodes pushed.
HAMILTON_BUDGET = 4000


def all_linked(model: LinkModel, ranks) -> bool:
    """Whether every ordered pair of distinct `ranks` is a link."""
    return all((a, b) in model.link for a in ranks for b in ranks if a != b)


def hamiltonian_cycle(nodes, succ, budget: int = HAMILTON_BUDGET, weight=None,
                      edge_groups=None, group_room=None, rng: random.Random | None = None):
    """A directed cycle through every node of `nodes` as a tuple, or None.

    succ: node -> successors it may use. weight: (u, v) -> preference (higher first,
    after Warnsdorff's rule: fewest onward choices first). edge_groups / group_room:
    each edge uses one unit of room in each of its groups; a cycle may not exceed the
    room. Iterative depth-first search starting from the node with the fewest
    predecessors; it gives up after `budget` pushes, so it costs O(budget x degree).
    """
    nodes = list(nodes)
    n = len(nodes)
    if n < 2:
        return None
    inside = set(nodes)
    weight = weight or {}
    edge_groups = edge_groups or {}
    room = dict(group_room or {})
    succ = {u: [v for v in succ.get(u, ()) if v in inside and v != u
                and all(room.get(g, 1) >= 1 for g in edge_groups.get((u, v), ()))]
            for u in nodes}
    pred = defaultdict(list)
    for u in nodes:
        for v in succ[u]:
            pred[v].append(u)
    if not _strongly_connected(nodes, succ, pred):
        return None  # cheap certain failure: spares the search its whole budget
    tiebreak = {u: (rng.random() if rng else i) for i, u in enumerate(nodes)}
    start = min(nodes, key=lambda u: (len(pred[u]), tiebreak[u]))
    onward = {u: len(succ[u]) for u in nodes}  # unvisited successors (Warnsdorff)
    start_preds = len(pred[start])  # unvisited predecessors of start: the way home

    def fits(u, v):
        return all(room.get(g, 1) >= 1 for g in edge_groups.get((u, v), ()))

    def use(u, v, sign):
        for g in edge_groups.get((u, v), ()):
            if g in room:
                room[g] -= sign

    def visit(v, sign):
        nonlocal start_preds
        for p in pred[v]:
            onward[p] -= sign
        if v in home:  # one of start's predecessors
            start_preds -= sign

    def choices(u):
        options = [v for v in succ[u] if v not in visited]
        options.sort(key=lambda v: (onward[v], -weight.get((u, v), 0), tiebreak[v]))
        return iter(options)

    home = set(pred[start])
    path, visited = [start], {start}
    visit(start, 1)
    stack = [choices(start)]
    pushes = 0
    while stack:
        u = path[-1]
        if len(path) == n:
            if start in succ[u] and fits(u, start):
                return tuple(path)
            v = None
        else:
            v = next((w for w in stack[-1] if w not in visited and fits(u, w)), None)
        if v is None:  # exhausted: step back
            stack.pop()
            if len(path) > 1:
                last = path.pop()
                visited.discard(last)
                visit(last, -1)
                use(path[-1], last, -1)
            continue
        pushes += 1
        if pushes > budget:
            return None
        path.append(v)
        visited.add(v)
        visit(v, 1)
        use(u, v, 1)
        stack.append(choices(v) if len(path) < n else iter(()))
        dead = len(path) < n and (start_preds == 0 or onward[v] == 0)
        if dead:  # no way on, or no way back to start: undo at once
            stack[-1] = iter(())
    return None


def _strongly_connected(nodes, succ, pred) -> bool:
    """Whether every node reaches nodes[0] and is reached from it: O(nodes + edges)."""
    for step in (succ, pred):
        seen, todo = {nodes[0]}, [nodes[0]]
        while todo:
            for v in step.get(todo.pop(), ()):
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        if len(seen) < len(nodes):
            return False
    return True


def spanning_tree(nodes, root, adjacent, max_children: int | None = None,
                  avoid_interior=frozenset(), prefer=lambda p, k: 0):
    """children: parent -> [children] of a spanning tree of `nodes` rooted at `root`, or
    None when the greedy attachment gets stuck (or the nodes are not connected).

    adjacent(p, k): whether k may hang below p. Breadth-first: each round attaches every
    node it can to an attached node with room (fewer than max_children children): the
    shallowest, then the smallest prefer(p, k), then one not in avoid_interior, then the
    least loaded; the most constrained nodes choose first. Cost: O(rounds x nodes^2).
    """
    depth = {root: 0}
    children: dict[int, list[int]] = defaultdict(list)
    rest = [u for u in nodes if u != root]
    while rest:
        open_parents = [p for p in depth
                        if max_children is None or len(children[p]) < max_children]
        options = {u: [p for p in open_parents if adjacent(p, u)] for u in rest}
        ready = sorted((u for u in rest if options[u]), key=lambda u: (len(options[u]), u))
        attached = []
        for u in ready:
            free = [p for p in options[u]
                    if max_children is None or len(children[p]) < max_children]
            if not free:
                continue
            p = min(free, key=lambda p: (depth[p], prefer(p, u), p in avoid_interior,
                                         len(children[p]), p))
            children[p].append(u)
            attached.append((u, depth[p] + 1))
        if not attached:
            return None
        for u, d in attached:
            depth[u] = d
        done = {u for u, _ in attached}
        rest = [u for u in rest if u not in done]
    return {p: sorted(ks) for p, ks in children.items() if ks}


def interior(children) -> set[int]:
    return {p for p, ks in children.items() if ks}

