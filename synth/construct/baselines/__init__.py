"""NCCL-style baseline algorithms as ordinary Schedules, for comparison with synthesis.

    baselines(model, "allreduce")        -> [Baseline("ring x4 (6 channels)", schedule), ...]
    not_applicable(model, "allreduce")   -> {"recursive doubling": "6 ranks is not ...", ...}

Each Baseline's schedule is in the same IR as synthesized ones (docs/schedule-file.md's chunk
numbering, rounds from synth.topology.linkmodel.min_rounds) and passes the independent
verifier. The algorithms, one module each:

  ring                        rings.py: packed Hamiltonian rings (all but gather, scatter,
                              alltoall)
  double binary tree          trees.py: allreduce, broadcast, reduce
  recursive doubling          recursive.py: allgather, allreduce (N a power of two)
  recursive halving           recursive.py: reducescatter
  recursive halving-doubling  recursive.py: allreduce
  direct                      direct.py: every collective, where the pairs are linked
  hierarchical                hierarchical.py: multi-box topologies
  NVLS                        nvls.py: allreduce through a switch that reduces (H100)
"""

from __future__ import annotations

import time
from functools import lru_cache

from synth.construct.baselines.baseline import Baseline
from synth.construct.baselines.direct import direct_baseline
from synth.construct.baselines.hierarchical import hierarchical_baseline
from synth.construct.baselines.nvls import nvls_baseline
from synth.construct.baselines.recursive import BOTH, DOUBLING, HALVING, recursive_baseline
from synth.construct.baselines.rings import COLLECTIVES as RING_COLLECTIVES
from synth.construct.baselines.rings import pack_rings, ring_baseline
from synth.construct.baselines.trees import tree_baseline
from synth.construct.moves import missing_link
from synth.deadline import Deadline, Pace
from synth.errors import BadInput
from synth.files import quote
from synth.schedule.collectives import COLLECTIVES, ROOTED
from synth.topology.hierarchy import find_boxes
from synth.topology.linkmodel import LinkModel

__all__ = ["ALGORITHMS", "Baseline", "baselines", "baselines_within", "build_baseline",
           "find_boxes", "not_applicable", "pack_rings", "survey", "survey_within"]

ALGORITHMS = {
    "ring": ring_baseline,
    "double binary tree": tree_baseline,
    DOUBLING: lambda m, c, r: recursive_baseline(m, c, DOUBLING),
    HALVING: lambda m, c, r: recursive_baseline(m, c, HALVING),
    BOTH: lambda m, c, r: recursive_baseline(m, c, BOTH),
    "direct": direct_baseline,
    "hierarchical": hierarchical_baseline,
    "NVLS": nvls_baseline,
}


def baselines(model: LinkModel, collective: str, root: int | None = None) -> list[Baseline]:
    """Every baseline that applies to this topology and collective, in ALGORITHMS order.

    Cost: dominated by the ring packing (bounded searches, cached per model) and by
    building the schedules, O(steps x sends); well under a second for 32 ranks.
    """
    return list(survey(model, collective, root)[0])


def not_applicable(model: LinkModel, collective: str, root: int | None = None
                   ) -> dict[str, str]:
    """{algorithm: why it was skipped} for every algorithm that baselines() leaves out."""
    return dict(survey(model, collective, root)[1])


@lru_cache(maxsize=64)
def survey(model: LinkModel, collective: str, root: int | None = None
           ) -> tuple[tuple[Baseline, ...], tuple[tuple[str, str], ...]]:
    """(baselines, ((algorithm, reason), ...)): both answers from one pass."""
    if collective not in COLLECTIVES:
        raise BadInput(f"unknown collective '{collective}' (expected one of "
                       f"{', '.join(COLLECTIVES)})")
    if collective in ROOTED:
        root = 0 if root is None else root
        if not 0 <= root < model.ranks:
            raise BadInput(f"{collective}: root {quote(root)} is not a rank "
                           f"(0..{model.ranks - 1})")
    else:
        root = None
    found, skipped = [], []
    for name in ALGORITHMS:
        result = build_baseline(model, collective, root, name)
        if isinstance(result, str):
            skipped.append((name, result))
        else:
            found.append(result)
    return tuple(found), tuple(skipped)


# building one algorithm's baseline but the ring (RING_PACE), per rank pair: the prior is
# an idle core's for the dearest, the double binary tree (ring:256 allreduce, 1.7e-5 s a
# pair; the others at most 9e-6 on seven machines from 128 to 256 GPUs), until one is
# measured (from 64 ranks), then the slowest measured. It was the ring's, 1e-4, and at
# 512 ranks made the across-boxes level of dgxh100x512 build no baseline in its share
PACE = Pace(2e-5, least=4096)
# rank pairs, at most, for which baselines are built within a deadline: a ring moves a
# chunk per pair (16 million sends at 4096 GPUs, gigabytes once verified)
MAX_PAIRS = 2048 ** 2
# the ring's own pace, per rank pair and ring channel (its sends grow with both: a
# degraded 32-GPU clos cluster packs 314 channels, 623,000 sends in 1.8 s, where the
# pace per pair said 0.2 s and compare ended 10% past its limit)
RING_PACE = Pace(6e-6, least=50_000)


def baselines_within(model: LinkModel, collective: str, root: int | None,
                     deadline: Deadline) -> tuple[list[Baseline], str]:
    """The baselines built before `deadline`, each algorithm only if the time left
    affords it at the pace measured so far (PACE), and why the rest were not ("": all
    were tried); none past MAX_PAIRS rank pairs (counted, not built)."""
    found, _, why = survey_within(model, collective, root, deadline)
    return found, why


def survey_within(model: LinkModel, collective: str, root: int | None, deadline: Deadline
                  ) -> tuple[list[Baseline], list[tuple[str, str]], str]:
    """baselines_within's, with what survey also says: (built, [(algorithm, why it does
    not apply)], why the rest were not built)."""
    found, skipped, pairs = [], [], model.ranks ** 2
    if pairs > MAX_PAIRS:
        return found, skipped, (f"not built: {model.ranks} ranks make {pairs:,} rank "
                                f"pairs, over the {MAX_PAIRS:,} whose schedules fit in memory")
    why = ""
    for name in ALGORITHMS:
        pace, units = _pace(model, collective, name, pairs, deadline)
        need = pace.seconds(units)
        if not deadline.affords(need):  # the next may still fit
            why = why or (f"not built: about {need:.1f} s needed, {deadline.left():.1f} s left "
                          "for the searches")
            continue
        started = time.monotonic()
        built = build_baseline(model, collective, root, name)
        if isinstance(built, str):  # refused at once: no measure of the pace
            skipped.append((name, built))
        else:
            pace.record(units, time.monotonic() - started)
            found.append(built)
    return found, skipped, why


def _pace(model: LinkModel, collective: str, name: str, pairs: int,
          deadline: Deadline = Deadline()) -> tuple[Pace, int]:
    """The pace that prices building `name`'s baseline, and its units of work."""
    if name != "ring" or collective not in RING_COLLECTIVES or deadline.passed():
        return PACE, pairs
    packing = pack_rings(model)  # cached: the ring's own build packs the same
    return RING_PACE, pairs * (len(packing.channels) if packing else 1)


def build_baseline(model: LinkModel, collective: str, root: int | None, name: str
                   ) -> Baseline | str:
    """One algorithm of ALGORITHMS (a valid collective and root, as survey checks), or
    why it does not apply: for a caller that checks a deadline between algorithms."""
    if model.ranks < 2:
        return "needs at least 2 ranks"
    result = ALGORITHMS[name](model, collective, root)
    if isinstance(result, str):
        return result
    pair = missing_link(model, [[(s.chunk, s.src, s.dst, s.op) for s in step.sends]
                                for step in result.schedule.as_sends().steps])
    assert pair is None, f"{name} sends over {pair}, which is not a link"  # a bug here
    return result
