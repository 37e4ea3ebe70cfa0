"""A collective's whole frontier: bounds, the searches, and allreduce's composition.

Multi-node topologies (synth.topology.hierarchy finds boxes) first get the decomposition
(synth.construct.decompose): pipelined schedules built from small exact problems per
level, in seconds; the exact searches then run in the time left, where the instance is
small enough to encode (with method "auto", on at most synth.exact.AUTO_EXACT_GPUS).
Allreduce gets three exact searches sharing that time (synth.exact): allreduce
directly, and the reducescatter and allgather frontiers, whose every pairing (cut to a
common number of chunks per rank) is a composed allreduce candidate. Every collective
but alltoall also gets packed spanning trees (gather and scatter: a flow's paths),
pipelined (synth.construct.tree_schedules), and with method "auto" (or "constructed",
which leaves out the exact search) the baselines are candidates too. All candidates
meet on one frontier, Pareto in latency and us/MB. Every schedule returned has passed
the verifier.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from synth.bounds import Bounds, bounds
from synth.construct.baselines import ALGORITHMS, baselines_within
from synth.construct.baselines import PACE as BASELINE_PACE
from synth.construct.decompose import COLLECTIVES as DECOMPOSED
from synth.construct.decompose import MAX_STEPS as DECOMPOSED_MAX_STEPS
from synth.construct.decompose import decompose
from synth.construct.greedy import COLLECTIVES as GREEDY
from synth.construct.greedy import greedy_search
from synth.construct.hints import Hints
from synth.construct.paced import verified_within
from synth.construct.relayed_alltoall import forwarded_search
from synth.construct.switch_searches import KEYS as IN_NETWORK
from synth.construct.switch_searches import switch_searches
from synth.construct.tree_schedules import COLLECTIVES as PACKED
from synth.construct.tree_schedules import tree_search, tree_search_again
from synth.cost_choice import ROUTING
from synth.cycles import cycles_paused
from synth.deadline import Deadline, OutOfTime
from synth.errors import BadInput, NoAnswer
from synth.exact import allreduce_searches, compose, exact_left_out
from synth.pareto_front import baselines_kept, pareto_filter, within_steps
from synth.schedule.collectives import make_collective
from synth.schedule.cost import schedule_cost
from synth.search.pareto import Limits, Point, Search, frontier
from synth.signals import interrupt_seen
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import LinkModel, Lowering, TimeLimit, lower_with_routes
from synth.topology.physical import Topology


@dataclass
class Result:
    collective: str
    root: int | None
    model: LinkModel
    bounds: Bounds
    points: list[Point]
    searches: dict[str, Search] = field(default_factory=dict)
    seconds: float = 0.0
    steps_searched: tuple[int, int] = (1, 0)  # the step counts some search covered
    not_decomposed: str = ""  # why a cluster (a network switch) was not decomposed
    not_searched: str = ""  # why the exact search did not run (synth.exact)
    cost_model: str = "line-rate"  # what chose the points (synth.cost_choice.COST_MODELS)
    left_out: list[Point] = field(default_factory=list)  # line-rate points it did not keep
    topology: Topology | None = None
    # every verified candidate (the frontier is their Pareto front), for the runtimes'
    # own frontiers (synth.export.loads.with_runtimes); and why those stopped early
    candidates: list[Point] = field(default_factory=list, repr=False)
    runtimes_stopped: str = ""
    out_of_time: bool = False  # the deadline passed: the points are those found by then
    # cost model 2's lines of the points timed (id of the schedule -> lines), once
    # synth.cost_choice.in_cost_model has run; a point the deadline left untimed has none
    lines: dict | None = None
    limits: Limits = field(default_factory=Limits)  # as asked: what is built again keeps them

    @property
    def complete(self) -> bool:
        """Whether nothing was cut short: no construction stopped by the time limit or
        Ctrl-C, every exact search asked all it meant to. (A construction proves
        nothing and says so in its Search; every NVLS machine read as cut short.)"""
        return all(not (s.stopped.startswith(TIMED_OUT) or s.stopped == "interrupted")
                   and (key in CONSTRUCTED or s.complete)
                   for key, s in self.searches.items())

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C (or SIGTERM) ended a search, or came since (a KeyboardInterrupt
        Python swallowed: synth.signals): the points are those found so far."""
        return interrupt_seen() or any(s.stopped == "interrupted"
                                       for s in self.searches.values())


def default_max_steps(b: Bounds) -> int:
    """3 steps past the hop bound; allreduce: room for two phases."""
    return 2 * b.steps + 2 if b.collective == "allreduce" else b.steps + 3


METHODS = ("auto", "exact", "decomposed", "constructed")
BUILDING = ("auto", "constructed")  # the methods that run every construction
SEARCHING = ("auto", "exact")  # the methods that run the exact search
# built, not searched: they prove nothing
CONSTRUCTED = ("decomposed", "greedy", "trees", "forwarded", *IN_NETWORK, "baselines")
BOUNDS_SHARE = 0.4  # of the time limit, at most, for the bounds (the rest: the searches)
DECOMPOSED_SHARE = 0.5  # of the time left, at most, for the decomposition (then the rest)


def synthesize(topo: Topology, name: str, root: int | None = None, limits: Limits | None = None,
               on_event=None, method: str = "auto", hints: Hints | None = None,
               deadline: Deadline | None = None) -> Result:
    """The Pareto frontier of `name` on `topo` within `limits`, by `deadline` (default:
    limits.time_limit from now; every stage gets it, or a share of what is left).

    method: "auto" decomposes multi-node topologies, runs the other constructions and
    then, on at most synth.exact.AUTO_EXACT_GPUS (or where they found nothing), searches
    exactly in the time left; "exact" or "decomposed" do only that; "constructed" all
    but the exact search (an answer in the constructions' time and memory on small
    machines too).
    hints: synth.construct.hints, for the decomposition. on_event(kind, data): progress
    ("stage", "search", "ask", "build", "point"), and ("frontier", the points in hand,
    every one verified) as greedy matching verifies each point, once the baselines are
    built, as each construction begins, and once they are all done (synth.anytime
    writes them).
    Raises NoAnswer when "decomposed" does not apply.
    """
    if method not in METHODS:
        raise BadInput(f"unknown method '{method}' (expected {', '.join(METHODS)})")
    start = time.monotonic()
    limits = limits or Limits()
    deadline = deadline or Deadline.after(limits.time_limit)
    total = deadline.left()
    on_event = on_event or (lambda kind, data: None)
    # routes, bounds and schedules are many objects in few cycles; the exact search's
    # solver (below) keeps the collector
    with cycles_paused():
        lowering = _lowered(topo, limits, deadline, on_event)
        model = lowering.model
        coll = make_collective(name, model.ranks, 1, root)
        hints = hints or Hints()
        hierarchy, why = _hierarchy(lowering, name, method, hints, deadline)
        # the bounds may take at most a share of the time (a partial bound is still one)
        on_event("stage", "computing the lower bounds")
        b = bounds(lowering, coll, deadline.share(BOUNDS_SHARE))
        searches, checked = {}, set()  # checked: the baselines verified so far (by id)
        if method in BUILDING and name in GREEDY and hierarchy is None:
            _greedy(model, name, coll.root, limits, deadline.within(GREEDY_SHARE * total),
                    b, searches, checked, on_event, topo.translations)
        if method in BUILDING and baselines_cheap(model.ranks, deadline) and \
                not _interrupted(searches):
            # a quick answer early (anytime): on small clusters the baselines take a
            # fraction of a second, and whatever follows may take all the time there is
            on_event("stage", "building the baselines")
            searches["baselines"] = _baselines(model, name, coll.root, limits, deadline)
            _verify_baselines(pareto_filter(searches["baselines"].points), searches,
                              deadline, checked)
            _hand_over(on_event, _in_hand(searches, checked, limits), searches)
        if hierarchy is not None:
            on_event("search", f"{name} by decomposition: {hierarchy.describe()}")
            # the first design may take all the time where nothing is in hand yet
            none_yet = not searches.get("baselines", Search()).points
            searches["decomposed"] = decompose(model, hierarchy, name, limits, on_event,
                                               hints.batches, deadline.share(DECOMPOSED_SHARE),
                                               deadline if none_yet else None)
        if method in BUILDING:
            _constructions(model, name, coll.root, limits, deadline, total, b, hierarchy,
                           searches, _staged(on_event, searches, checked, limits),
                           topo.translations)
        built = within_steps([p for key in CONSTRUCTED
                              for p in searches.get(key, Search()).points], limits)
        # the baselines on the frontier so far are verified now, while there is time
        # (what the exact search adds can only push more off it)
        points = _verified_frontier(built, searches, deadline, checked)
    _hand_over(on_event, points, searches)
    candidates = list(built)  # every candidate, for the runtimes' own frontiers
    not_searched = exact_left_out(method, model.ranks, bool(points))
    if method in SEARCHING and not not_searched and not _interrupted(searches):
        exact = within_steps(_exact_searches(lowering, name, coll.root, b, limits, deadline,
                                             built, searches, on_event), limits)
        candidates += exact
        points = pareto_filter(points + exact)
    again = within_steps(_trees_again(model, name, coll.root, limits, deadline, b, searches,
                                      points, topo.translations), limits)
    candidates += again
    points = pareto_filter(points + again) if again else points
    baselines_kept(points, searches)
    covered = _covered(model, b, limits, searches, points)
    # a cluster whose boxes differ falls back to the methods that need no alike boxes:
    # say why, as its users expect the decomposition
    not_decomposed = why if (hierarchy is None and name in DECOMPOSED and method in BUILDING
                             and any(v.kind == "net_switch" for v in topo.vertices)
                             and topo.network_joined()) else ""
    out_of_time = deadline.passed() or timed_out(searches)
    return Result(name, coll.root, model, b, points, searches,
                  time.monotonic() - start, (max(1, limits.min_steps), covered),
                  not_decomposed, out_of_time=out_of_time, candidates=candidates, limits=limits,
                  not_searched=not_searched)


def _lowered(topo: Topology, limits: Limits, deadline: Deadline, on_event):
    """The topology's lowering (every GPU pair routed), its pace recorded; NoAnswer
    when the time limit runs out first."""
    start = time.monotonic()
    on_event("stage", "routing every GPU pair")
    try:
        lowering = lower_with_routes(topo, deadline)
    except TimeLimit as e:
        raise NoAnswer(f"no schedule: the time limit ({limits.time_limit:g} s) ran out "
                       f"while {e}") from None
    model = lowering.model
    ROUTING.record(len(model.links) + len(model.groups), time.monotonic() - start)
    return lowering


def _hierarchy(lowering, name: str, method: str, hints: Hints, deadline: Deadline):
    """(the boxes and network the decomposition works on, or None; why not). BadInput
    when hints name boxes that are not there; NoAnswer when "decomposed" cannot run."""
    hierarchy, why = None, f"{name} is not decomposed (only {', '.join(DECOMPOSED)} are)"
    if method != "exact" and name in DECOMPOSED:
        hierarchy, why = find_hierarchy(lowering, hints.boxes, deadline)
        if hierarchy is None and hints.boxes is not None:
            raise BadInput(f"hints: {why}")
    if method == "decomposed" and hierarchy is None:
        raise NoAnswer(f"cannot decompose {name} on {lowering.topology.name}: {why}")
    return hierarchy, why


def _trees_again(model: LinkModel, name: str, root, limits: Limits, deadline: Deadline,
                 b: Bounds, searches: dict, points: list[Point],
                 translations: tuple[int, ...] = ()) -> list[Point]:
    """The trees' second try, in the time the others left, where no point reached the
    bound (their new points; searches["trees"] says what it did)."""
    if "trees" not in searches or _interrupted(searches) or \
            any(p.ratio <= b.rounds_per_chunk for p in points):
        return []
    first = searches["trees"]
    searches["trees"] = tree_search_again(first, model, name, root, limits,
                                          deadline.share(TREES_AGAIN),
                                          _plain(b).rounds_per_chunk, translations)
    return [] if searches["trees"] is first else list(searches["trees"].points)


# how a search says the time limit stopped it (or kept it from starting)
TIMED_OUT = ("out of time", "not built: about")


def timed_out(searches: dict) -> bool:
    """Whether the time limit stopped any of the searches (or kept one from starting)."""
    return any(s.stopped.startswith(TIMED_OUT) for s in searches.values())


def _constructions(model: LinkModel, name: str, root, limits: Limits, deadline: Deadline,
                   total: float, b: Bounds, hierarchy, searches: dict, on_event,
                   translations: tuple[int, ...] = ()) -> None:
    """The constructions of methods "auto" and "constructed" after greedy matching,
    into `searches`: quick and bounded, so that the exact search's time-out cannot
    starve them: trees, alltoall by forwarding, computed in the network, then the
    baselines, which join the frontier so that it is never slower than one of them."""
    if name in PACKED and not _interrupted(searches):
        on_event("search", f"{name} by packed trees")
        # a share of the time limit from now, as the decomposition may have used some
        searches["trees"] = tree_search(model, name, root, limits,
                                        deadline.within(TREES_SHARE * total),
                                        _plain(b).rounds_per_chunk, translations)
    if name == "alltoall" and not _interrupted(searches):
        on_event("search", "alltoall forwarded: relayed at rail peers, or routed")
        searches["forwarded"] = forwarded_search(model, limits, deadline)
    if not _interrupted(searches):  # NVLS, SHARP, and NVLS beside the NICs
        searches.update(switch_searches(model, name, root, limits, deadline, hierarchy,
                                        on_event))
    if "baselines" not in searches and not _interrupted(searches):
        on_event("stage", "building the baselines")
        searches["baselines"] = _baselines(model, name, root, limits, deadline)


def _exact_searches(lowering: Lowering, name: str, root, b: Bounds, limits: Limits,
                    deadline: Deadline, points: list[Point], searches: dict,
                    on_event) -> list[Point]:
    """The exact search in the time left, into `searches`, asking only for what beats
    the constructions' `points` (the baselines' steps and rounds are no target: they
    are only there to be beaten on cost); its points (allreduce: and the compositions
    of its reducescatter and allgather frontiers, while time lasts)."""
    model = lowering.model
    exact = replace(limits, max_steps=limits.max_steps or default_max_steps(b),
                    time_limit=deadline.left())
    known = tuple((p.steps, p.ratio) for p in points if "baseline" not in p.schedule.info)
    if name != "allreduce":  # said: a long exact search must not look like the last one
        on_event("search", f"{name} exactly ({model.ranks} ranks)")
        searches[name] = frontier(model, name, root, b.steps, b.rounds_per_chunk, exact,
                                  on_event, known, deadline)
        return searches[name].points
    searches.update(allreduce_searches(lowering, b, exact, on_event, known, deadline,
                                       BOUNDS_SHARE))
    found = list(searches["allreduce"].points)
    for rs in searches.get("reducescatter", Search()).points:
        for ag in searches.get("allgather", Search()).points:
            try:
                found.append(Point(compose(rs.schedule, ag.schedule, deadline), proven=False))
            except OutOfTime:
                searches["allreduce"].stopped = "out of time (composing)"
                return found
    return found


def _covered(model: LinkModel, b: Bounds, limits: Limits, searches: dict,
             points: list[Point]) -> int:
    """The most steps over which stale files are replaced: the step counts a search
    covered, the decomposition's depths and the exact search's range where it ran (trees
    and baselines sit at a few step counts of their own, and say nothing of the others;
    where auto left the exact search out, a file of an earlier run in its range may be
    better than anything this one found: it stays)."""
    covered = 0
    if "decomposed" in searches:
        covered = limits.max_steps or DECOMPOSED_MAX_STEPS
    if any(key not in CONSTRUCTED for key in searches):
        covered = max(covered, limits.max_steps or default_max_steps(b))
    # a point at the bandwidth bound with latency L beats, in both costs, any schedule
    # of more than L / (least alpha) steps: if those start inside the covered range,
    # every step count past it is covered too
    alpha = min((l.alpha_us for l in model.links), default=0.0)
    if alpha > 0 and limits.min_steps <= 1 and any(p.ratio == b.rounds_per_chunk and
                         schedule_cost(p.schedule).latency_us / alpha <= covered + 1e-9
                         for p in points):
        covered = 1 << 30
    return covered


TREES_SHARE = 0.25  # of the time limit, at most, for packing trees (from their start)
TREES_AGAIN = 0.8  # of the time left, where their share ran out before any point
GREEDY_SHARE = 0.25  # the same for greedy matching
BASELINES_FIRST = 0.1  # of the time left: baselines this cheap are built first
# seconds at most (as guessed: the guess runs up to 10 x the baselines' real time),
# however long the job: past that the trees and greedy matching answer sooner
# (torus:16x16 built and checked its ring first, 1.8 s of a 2 s job, for a point at
# twice the bound the trees then beat; dgxh100x16's first answer came at 3.3 s, not
# 0.75); under it gb200nvl72's come first (direct and NVLS: its best ratio, at 0.6 s)
BASELINES_FIRST_S = 2.0


def baselines_cheap(ranks: int, deadline: Deadline) -> bool:
    """Whether every baseline algorithm together, at the pace measured so far, would
    take at most BASELINES_FIRST of the time left and BASELINES_FIRST_S (at the prior
    pace, unmeasured, as in a fresh command: 16 GPUs about 0.06 s, 64 about 1,
    gb200nvl72's 72 about 1.2, 128 about 4)."""
    guess = len(ALGORITHMS) * BASELINE_PACE.seconds(ranks ** 2)
    return guess <= min(BASELINES_FIRST * deadline.left(), BASELINES_FIRST_S)


def _greedy(model: LinkModel, name: str, root, limits: Limits, deadline: Deadline, b: Bounds,
            searches: dict, checked: set, on_event, translations: tuple[int, ...]) -> None:
    """Greedy matching, into `searches`, before anything else where no boxes are
    decomposed (tori, meshes, one switch; on a cluster the decomposition is far
    better): its first schedule is the quickest good answer (torus:8x8's allgather in
    0.026 CPU s, faster at every size than TACOS's: bench/results/tori-2026-12-05c.md),
    handed over the moment it is verified, as is each better one."""

    def handed(points: list[Point]) -> bool:
        try:
            in_hand = pareto_filter(_in_hand(searches, checked, limits) + points)
        except KeyboardInterrupt:
            searches["anytime files"] = Search(stopped="interrupted")
            return True
        _hand_over(on_event, in_hand, searches)
        return _interrupted(searches)

    on_event("search", f"{name} by greedy link-chunk matching")
    searches["greedy"] = greedy_search(model, name, root, limits, deadline,
                                       _plain(b).rounds_per_chunk, translations, handed)


def _hand_over(on_event, points: list[Point], searches: dict[str, Search]) -> None:
    """on_event("frontier", points), every one verified: the caller may write them now.
    A Ctrl-C meanwhile ends the job as one during a search does, the points kept."""
    try:
        on_event("frontier", points)
    except KeyboardInterrupt:
        searches["anytime files"] = Search(stopped="interrupted")


def _staged(on_event, searches: dict[str, Search], checked: set, limits: Limits):
    """on_event, but each construction begun first hands over what the ones before it
    built (on a cluster, the decomposition's points while the trees are packed)."""
    def staged(kind: str, data) -> None:
        if kind == "search":
            _hand_over(on_event, _in_hand(searches, checked, limits), searches)
        on_event(kind, data)
    return staged


def _in_hand(searches: dict[str, Search], checked: set, limits: Limits) -> list[Point]:
    """The Pareto front of what the constructions built so far within the steps asked
    for, every point verified (each construction verifies its own; baselines not
    verified yet left out)."""
    return pareto_filter(within_steps([
        p for key in CONSTRUCTED for p in searches.get(key, Search()).points
        if "baseline" not in p.schedule.info or id(p) in checked], limits))


def _interrupted(searches: dict[str, Search]) -> bool:
    return any(s.stopped == "interrupted" for s in searches.values())


def _verify_baselines(points: list[Point], searches: dict[str, Search],
                      deadline: Deadline, checked: set) -> list[Point]:
    """The frontier's baselines verified (the others were when built; `checked`: those
    verified before, by id); the frontier without those that Ctrl-C or the deadline
    left unverified."""
    found = searches.get("baselines", Search()).points
    if not found:
        return points
    kept, cut = [], ""
    for p in points:
        if "baseline" not in p.schedule.info or id(p) in checked:
            kept.append(p)
            continue
        if cut:
            continue
        try:
            verified_within(p.schedule, deadline)
            kept.append(p)
            checked.add(id(p))
        except KeyboardInterrupt:
            cut = "interrupted"
        except OutOfTime:
            cut = "out of time"
    searches["baselines"].stopped = searches["baselines"].stopped or cut
    return kept


def _verified_frontier(built: list[Point], searches: dict[str, Search],
                       deadline: Deadline, checked: set) -> list[Point]:
    """The Pareto frontier of `built` with its baselines verified: a baseline the time
    left cannot verify is dropped, and the points it alone kept off come back (dgx2x32's
    direct alltoall, one step at the bound, beat every relayed point, could not be
    verified in time, and the job ended with none). Each round drops at least one."""
    pool = list(built)
    while True:
        front = pareto_filter(pool)
        kept = _verify_baselines(front, searches, deadline, checked)
        if len(kept) == len(front):
            return kept
        dropped = {id(p) for p in front} - {id(p) for p in kept}
        pool = [p for p in pool if id(p) not in dropped]


def _baselines(model: LinkModel, name: str, root: int | None, limits: Limits,
               deadline: Deadline) -> Search:
    """The baselines `synth compare` prints, within the step range asked for, as
    candidates (verified only if they reach the frontier): each algorithm only if the
    time left affords it (baselines_within)."""
    try:
        built, why = baselines_within(model, name, root, deadline)
    except KeyboardInterrupt:
        return Search(stopped="interrupted")
    search = Search(points=[Point(replace(b.schedule, info={
        **b.schedule.info, "method": f"baseline: {b.name}", "baseline": b.name}),
        proven=False) for b in built if limits.allows(b.schedule.num_steps)], stopped=why)
    if not search.points and not search.stopped:  # none of them, or none in the steps
        search.stopped = ("none applies within the steps asked for" if built else
                          f"none applies to {name} here")
    return search


def _plain(b: Bounds) -> Bounds:
    """The bounds for schedules without switch operations (what trees make): where the
    switches reduce, the higher of the two."""
    if b.without_in_network is None:
        return b
    return replace(b, rounds_per_chunk=b.without_in_network, without_in_network=None)
