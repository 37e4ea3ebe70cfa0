"""Direct: every rank sends straight to every rank that needs its data, in one step
(allreduce: a direct reducescatter then a direct allgather, two steps). Needs the
links it uses: every ordered pair for the symmetric collectives, the root's own for
the rooted ones. C = 1 (N for allreduce) times lanes (moves.best_lanes).
"""

from __future__ import annotations

from synth.construct.baselines.baseline import Baseline
from synth.construct.baselines.graphs import all_linked
from synth.construct.moves import (assemble_widest, direct_allgather, direct_allreduce,
                                   direct_broadcast, direct_reduce, direct_reducescatter,
                                   missing_link)
from synth.topology.linkmodel import LinkModel

NAME = "direct"
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
               "scatter", "alltoall")


def direct_baseline(model: LinkModel, collective: str, root: int | None) -> Baseline | str:
    """The direct algorithm for `collective`, or why it does not apply."""
    n = model.ranks
    ranks = list(range(n))
    if n < 2:
        return "needs at least 2 ranks"
    if collective in ("allgather", "reducescatter", "allreduce", "alltoall") and \
            not all_linked(model, ranks):
        pair = next((a, b) for a in ranks for b in ranks if a != b and (a, b) not in model.link)
        return f"not every pair of ranks is linked (no link {pair[0]}->{pair[1]})"
    own = {r: [r] for r in ranks}
    chunks = 1
    if collective == "allgather":
        moves = direct_allgather(ranks, own)
    elif collective == "reducescatter":
        moves = direct_reducescatter(ranks, own)
    elif collective == "allreduce":
        moves, chunks = direct_allreduce(ranks, ranks), n
    elif collective == "broadcast":
        moves = direct_broadcast(root, ranks, [0])
    elif collective == "reduce":
        moves = direct_reduce(root, ranks, [0])
    elif collective == "gather":
        moves = [[(r, r, root, "copy") for r in ranks if r != root]]
    elif collective == "scatter":
        moves = [[(r, root, r, "copy") for r in ranks if r != root]]
    elif collective == "alltoall":
        moves = [[(s * n + d, s, d, "copy") for s in ranks for d in ranks if s != d]]
    else:
        return f"no direct algorithm for {collective}"
    pair = missing_link(model, moves)
    if pair:
        return f"no link {pair[0]}->{pair[1]}"
    info = {"algorithm": NAME}
    schedule = assemble_widest(model, collective, chunks, root, moves, info)
    return Baseline(NAME, schedule, NAME)
