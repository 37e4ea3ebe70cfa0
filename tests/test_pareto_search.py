"""The exact frontier search's own rules (synth.search.pareto), with the solver replaced
by a script: which instances it asks, and which it no longer asks once one found nothing
in its whole budget. No solver runs, so nothing here depends on the machine's speed."""

from fractions import Fraction

from synth.schedule.file import schedule_to_dict
from synth.schedule.verify import verify_schedule
from synth.search import pareto
from synth.search.constraints import UNKNOWN
from synth.search.instance import Outcome
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower


def _scripted(monkeypatch, answer):
    """Replace the solver: every call is recorded and answered by answer(call)."""
    asked = []

    def solve(model, coll, steps, rounds, backend, budget, workers, minimize, floor):
        asked.append((steps, coll.chunks, budget))
        return answer(asked[-1])

    monkeypatch.setattr(pareto, "solve_instance", solve)
    return asked


def _search(limit=100.0, max_steps=4):
    model = lower(resolve("ring:4"))
    limits = pareto.Limits(max_steps=max_steps, max_chunks=4, time_limit=limit)
    # allgather on a 4-ring: 2 hops, 3 rounds per chunk over one link (3/2 on two)
    return model, pareto.frontier(model, "allgather", None, 2, Fraction(3, 2), limits)


def test_a_call_that_found_nothing_in_its_budget_stops_larger_ones(monkeypatch):
    # every call uses its whole budget (a fifth of 100 s) and finds nothing. At S=2 the
    # chunk counts asked are 4 (meets 3/2 exactly: first) and 3; C=3 is the smaller
    # instance (variables grow with chunks x steps), so it is still asked; with nothing
    # found, the window below, C=2 and C=1, smaller still; then every later step count
    # holds more variables than S=2 C=1, and none is asked
    asked = _scripted(monkeypatch, lambda call: Outcome(UNKNOWN, None, call[2], "exact"))
    _, search = _search()
    assert [(s, c) for s, c, _ in asked] == [(2, 4), (2, 3), (2, 2), (2, 1)]
    assert search.points == [] and not search.complete
    assert search.stopped == "larger instances not asked: S=2 C=1 found nothing in 20 s"


def test_where_every_large_chunk_count_runs_out_of_time_fewer_chunks_are_asked(monkeypatch):
    # C=4 and C=3 find nothing in their budget; C=2 is solved (the real solver, on a
    # 4-ring): the search keeps its point instead of ending with none
    solve = pareto.solve_instance
    asked = []

    def answer(model, coll, steps, rounds, backend, budget, workers, minimize, floor):
        asked.append((steps, coll.chunks))
        if coll.chunks > 2:
            return Outcome(UNKNOWN, None, budget, "exact")
        return solve(model, coll, steps, rounds, backend, 60.0, workers, minimize, floor)

    monkeypatch.setattr(pareto, "solve_instance", answer)
    _, search = _search(max_steps=2)
    assert asked[:3] == [(2, 4), (2, 3), (2, 2)]
    (point,) = search.points
    schedule = point.schedule
    verify_schedule(schedule_to_dict(schedule))
    # the 4-ring's allgather in 2 steps: 3 rounds a chunk at one chunk a share, 3/2 at 2
    assert (schedule.num_steps, Fraction(schedule.rounds, schedule.collective.chunks)) == (
        2, Fraction(3, 2))
    assert not search.complete  # C=4 and C=3 went unanswered


def test_a_call_cut_short_by_the_deadline_stops_nothing(monkeypatch):
    # a call handed less than a full budget (the search's end was nearer) proves
    # nothing about its instance: every step count and chunk count is still asked
    monkeypatch.setattr(pareto.Deadline, "solver_seconds", lambda self, at_most=0: 3.0)
    asked = _scripted(monkeypatch, lambda call: Outcome(UNKNOWN, None, call[2], "exact"))
    _, search = _search()
    assert [(s, c) for s, c, _ in asked] == [(s, c) for s in (2, 3, 4) for c in (4, 3, 2, 1)]
    assert search.stopped == "reached --max-steps 4"


def test_an_instance_the_cache_answers_is_still_read_after_a_give_up(monkeypatch):
    # every call finds nothing in its budget, but S=3 C=4's answer is remembered: the
    # give-up skips asking the solver, not reading what an earlier run proved
    asked = _scripted(monkeypatch, lambda call: Outcome(UNKNOWN, None, call[2], "exact"))
    read = []

    def remembered(model, coll, steps, rounds, backend, minimize, floor):
        read.append((steps, coll.chunks))
        return Outcome("unsat", None, 0.0, "exact") if (steps, coll.chunks) == (3, 4) else None

    monkeypatch.setattr(pareto, "remembered", remembered)
    _search()
    # S=3 C=4 goes on to solve_instance, which reads the cache first (scripted here);
    # every other larger instance is looked up and, remembered by no one, skipped
    assert [(s, c) for s, c, _ in asked] == [(2, 4), (2, 3), (2, 2), (2, 1), (3, 4)]
    assert {(3, 4), (3, 3), (4, 4), (4, 3)} <= set(read)
