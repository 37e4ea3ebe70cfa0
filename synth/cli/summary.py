"""What `synth COLLECTIVE --topo TOPO` prints and --json writes of a frontier: the
summary (synth.output.result_summary), a degraded machine's distance to its healthy one,
and the answer at --size (synth.answer), whose asks the table then reads."""

from __future__ import annotations

from dataclasses import replace


def frontier_summary(result, topo, name, backend, paths, why, nbytes, deadline, directory,
                     failed) -> dict:
    """result_summary, with a degraded machine's distance to its healthy one (first: the
    --size answer's asks may take the time left) and the answer at `nbytes`, whose asks
    the table then reads (loads_learned)."""
    from synth.output import degraded_summary, result_summary

    degraded = degraded_summary(topo, name, result.root, result.bounds, deadline) \
        if topo.healthy is not None else None
    answer = size_answer(result, nbytes, deadline, directory, failed) \
        if nbytes is not None else None
    summary = result_summary(loads_learned(result), topo.name, backend, paths, why)
    if degraded is not None:
        summary["degraded"] = degraded
    if nbytes is not None:
        summary["answer"] = answer
    return summary


def loads_learned(result):
    """`result` with what the --size answer learned of the points the table's asking
    left unasked (gb200nvl72's direct point read `?` beside an answer that had asked
    both runtimes about it)."""
    from synth.export.answers import remembered_loads
    from synth.export.loads import RUNTIMES

    points = [p if p.loads is not None else
              replace(p, loads=remembered_loads(p.schedule, RUNTIMES)) for p in result.points]
    return replace(result, points=points)


def size_answer(result, nbytes: int, deadline, directory, failed) -> dict | None:
    """--size's answer (synth.answer), written beside the points; None where the files
    failed or the deadline passed first."""
    timed = timed_points(result)
    if not timed or failed is not None or deadline.passed():
        return None
    from synth.answer import answer_at, with_variants, write_answer
    from synth.cli.options import say_kept

    answer, kept = answer_at(replace(result, points=timed), nbytes, deadline), []
    said = write_answer(with_variants(answer, result, deadline), directory, kept)
    say_kept(kept)
    return said


def timed_points(result) -> list:
    """The points cost model 2 timed (all, in the line-rate model)."""
    return [p for p in result.points if result.lines is None or id(p.schedule)
            in result.lines]
