"""The vertical plan: for each communicator and collective of a workload, its candidate
schedules and the fastest of them at every message size (the workload's sizes and the
ranges between the candidates' crossings).

A communicator is planned once, on the topology as one of its groups sees it
(synth.topology.communicator.view): the first, or on a degraded machine the one every
other group carries (synth.plan.shapes). Candidates: the
frontier synth finds there (synthesized, constructed, and the baselines on it) plus
every baseline (so the plan is never slower than one of them). In the alpha-beta model
a candidate's time is latency + us_per_byte x n, a line in n; the fastest candidate per
size is the lower envelope of those lines (`envelope`), a list of spans that tile the
sizes with no gap or overlap. NCCL's own choice is modelled as its tuner's: the faster
of ring and double binary tree at each size (direct for alltoall, gather and scatter,
which NCCL runs as point-to-point sends).

All times are model predictions; the report says which model and gives the
nccl-tests commands that measure them. In cost model 2 (the default, "calibrated") a
candidate is one line per protocol (synth.predict.timing) and NCCL's own is what NCCL
2.30.7's tuner runs at each size (synth.predict.nccl): one candidate per algorithm and
protocol it considers, the NCCL-style baseline of that family standing in for its
traffic; in the line-rate model NCCL's choice is the faster of the ring and tree
baselines, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from synth.bounds import Bounds
from synth.construct.baselines import baselines
from synth.errors import BadInput, NoAnswer
from synth.frontier import Result, synthesize
from synth.plan.traffic import busiest_rate
from synth.plan.workload import Call, Workload
from synth.predict.machine import Machine, machine_of
from synth.predict.nccl import (COLLECTIVES, achieved_rates, alltoall_us, call_us, choose,
                                nccl_rates, options)
from synth.predict.timing import Prices, prices, schedule_lines
from synth.schedule.cost import MAX_SIZE, schedule_cost
from synth.schedule.ir import Schedule
from synth.search.pareto import Limits
from synth.topology.lanes import power_of_two_lanes
from synth.topology.physical import Topology

# what NCCL's tuner picks between, per collective (alltoall, gather and scatter it runs
# as sends and receives)
REFERENCE = {"allreduce": {"ring", "double binary tree"}, "alltoall": {"direct"},
             "gather": {"direct"}, "scatter": {"direct"}}


@dataclass(frozen=True)
class Candidate:
    label: str  # how it was made (the schedule's method, or the baseline's name)
    schedule: Schedule
    latency_us: float
    us_per_byte: float
    shared: float = 1.0  # how much the groups meeting on a link raised us_per_byte
    protocol: str = "Simple"  # the runtime's protocol the times are for (cost model 2)

    def time_us(self, n: int) -> float:
        return self.latency_us + self.us_per_byte * n


@dataclass(frozen=True)
class Span:
    """Sizes low..high bytes (inclusive; high None: no upper limit) and the fastest
    candidate there."""

    low: int
    high: int | None
    candidate: Candidate


@dataclass
class Entry:
    """One communicator and collective (and root) of the workload, planned."""

    communicator: str
    collective: str
    root: int | None
    ranks: int  # of one group
    topology: str  # the view it was planned on
    bounds: Bounds
    candidates: list[Candidate]
    reference: list[Candidate]  # NCCL-style: ring and tree (or direct)
    spans: list[Span]  # the fastest candidate, tiling 1..no limit
    calls: list[Call]
    groups: list[list[int]]  # every group of the communicator (global ranks)
    seconds: float = 0.0
    modelled_nccl: bool = True  # False: no NCCL-style baseline here (reference = ours)
    machine: Machine | None = None  # cost model 2: NCCL's choice is its tuner's, here
    library: str = "nccl"  # the machine's collective library (rccl: MSCCL per share)

    def best(self, n: int) -> Candidate:
        """The plan's choice at n: the fastest candidate, or NCCL's own where that is
        faster still (cost model 2, where NCCL runs algorithms synth has no schedule
        of); a plan is never slower than NCCL."""
        mine = next(s.candidate for s in self.spans if s.high is None or n <= s.high)
        if self.machine is None:
            return mine
        theirs = self.nccl(n)
        if theirs.time_us(n) < mine.time_us(n):
            return replace(theirs, label=f"NCCL's own ({theirs.label.removeprefix('NCCL ')})")
        return mine

    def nccl(self, n: int) -> Candidate:
        """What NCCL runs at n: its tuner's choice, timed exactly at n (cost model 2), or
        the fastest NCCL-style baseline (line-rate)."""
        if self.machine is None or self.collective not in COLLECTIVES:
            return min(self.reference, key=lambda c: c.time_us(n))
        return nccl_pick(self.machine, self.collective, self.reference, n)


@dataclass
class Plan:
    workload: Workload
    topology: str
    entries: list[Entry] = field(default_factory=list)
    overlaps: list = field(default_factory=list)  # synth.plan.overlap.Overlapped per tag
    seconds: float = 0.0
    cost_model: str = "calibrated"  # what its times are (synth.cost_choice.COST_MODELS)
    # communicator -> the groups whose view it was planned on (synth.plan.shapes)
    planned_on: dict[str, list[list[int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the planner chose, in words
    # one route per GPU pair or several (synth.topology.several_routes.routes_summary)
    routes: dict = field(default_factory=lambda: {"routes": "widest"})

    def step_time(self, which: str) -> float:
        """Predicted communication time of one training step (us): every call one after
        the other with the plan's choice ("plan") or NCCL-style ("nccl"); or each
        overlap tag's calls together ("overlapped", "nccl overlapped")."""
        total = 0.0
        together = {o.tag: o for o in self.overlaps} if which.endswith("overlapped") else {}
        for e in self.entries:
            for call in e.calls:
                if call.overlap in together:
                    continue
                n = typical(call)
                pick = e.nccl(n) if which.startswith("nccl") else e.best(n)
                total += call.count * pick.time_us(n)
        return total + sum(o.nccl_overlapped_us if which.startswith("nccl")
                           else o.overlapped_us for o in together.values())


def typical(call: Call) -> int:
    """The size a call of a range stands for in the step's total: the geometric mean of
    its ends (the middle of a range that spans decades)."""
    return call.low if call.low == call.high else round(math.sqrt(call.low * call.high))


def candidates_of(result: Result, p: Prices | None = None) -> list[Candidate]:
    """The frontier's points and every baseline of the same instance within the steps
    the search was asked for (result.limits), as candidates: one line each (line-rate),
    or one per protocol priced with `p` (cost model 2)."""
    out = [c for pt in result.points
           for c in _candidate(pt.schedule, pt.schedule.info.get("method", "synthesized"), p)]
    for b in baselines(result.model, result.collective, result.root):
        if result.limits.allows(b.schedule.num_steps):
            out += _candidate(b.schedule, b.name, p)
    return out


def runtime_variants(sub: Topology, result: Result, limits: Limits,
                     method: str = "auto") -> list[Candidate]:
    """Candidates the runtimes can run where the frontier's cannot. The runtimes cut a
    message into whole chunks (16-byte units for MSCCL++, whole loops for MSCCL), and
    synth cuts by lanes: 9 pieces a shard, 18 packed trees or ring channels for 18
    NVLink lanes, so no power-of-two message runs them. Synthesized again with every
    link's lanes rounded down to a power of two, the constructions cut in powers of two
    (16 trees, 8 pieces): a little slower in the model (their rounds are those of the
    fewer lanes), valid on the real links. The plan's runtime sets take them where
    they cut a workload size the others cannot (synth.plan.output). `method`: the
    plan's own (synth.frontier.synthesize's)."""
    fewer = power_of_two_lanes(sub)
    if fewer is None:
        return []
    try:
        found = synthesize(fewer, result.collective, result.root, limits, method=method)
    except NoAnswer:  # none in the time given: the variants are extras, the plan goes on
        return []
    p = prices(sub) if result.cost_model == "calibrated" else None
    return [replace(c, label=f"{c.label} (power-of-two lanes)")
            for c in candidates_of(found, p)]


def with_groups(c: Candidate, topo: Topology, groups) -> Candidate:
    """c as it runs on every group at once: where their traffic meets on a physical link
    (synth.plan.traffic.busiest_rate), the bandwidth term that link needs. Linear in n
    still, so the envelope holds; a little pessimistic where latency dominates. One
    group meets no other: its own model is the truth there (on several routes the
    physical split is a guess, proportional to the routes' bottlenecks)."""
    if len(groups) < 2:
        return c
    rate = busiest_rate(topo, groups, c.schedule)
    alone = schedule_cost(c.schedule).us_per_byte  # the line-rate term the rate compares with
    if rate <= alone * (1 + 1e-9):
        return c
    return replace(c, us_per_byte=c.us_per_byte * rate / alone, shared=rate / alone)


def _candidate(schedule: Schedule, label: str, p: Prices | None = None) -> list[Candidate]:
    if p is None:
        cost = schedule_cost(schedule)
        return [Candidate(label, schedule, cost.latency_us, cost.us_per_byte)]
    return [Candidate(f"{label} [{line.protocol}]", schedule, line.latency_us,
                      line.us_per_byte, protocol=line.protocol)
            for line in schedule_lines(schedule, p)]


def nccl_pick(m: Machine, collective: str, reference: list[Candidate], n: int) -> Candidate:
    """The candidate of NCCL's choice at n among `reference` (nccl_reference's), its
    line moved to pass through the choice's exact time at n (the channels NCCL launches
    there, a tree's fill) plus what sharing links with other groups adds."""
    pick = choose(m, collective, n)
    # alltoall's grouped sends change protocol with the size (p2p/LL at small ones), and
    # the reference keeps one line per algorithm there: its line, moved to the time
    c = next((c for c in reference if c.label == f"NCCL {pick.name}"), None) or next(
        c for c in reference if c.label.startswith(f"NCCL {pick.option.algorithm}/"))
    return replace(c, latency_us=pick.predicted_us - c.us_per_byte / c.shared * n)


def nccl_reference(sub: Topology, collective: str, model, root) -> list[Candidate]:
    """NCCL as it runs on `sub` (cost model 2): a candidate per algorithm and protocol
    NCCL's tuner considers, timed at full channels with the call's cost, labelled
    "NCCL ring/LL" and so on; the NCCL-style baseline of its family (ring, double binary
    tree) stands in for its traffic. [] where NCCL has no such collective."""
    if collective not in COLLECTIVES:
        return []
    m = machine_of(sub)
    made = {b.algorithm or b.name.split(" x")[0]: b for b in baselines(model, collective, root)}
    if not made:
        return []
    fallback = made.get("ring") or next(iter(made.values()))

    def stand_in(algorithm):
        return made.get({"tree": "double binary tree"}.get(algorithm, "ring"), fallback)

    f = m.figures
    if collective == "alltoall":
        call = f.alltoall_call_us
        slope = (alltoall_us(m, 1 << 30, achieved_rates(m, f), call) - call) / (1 << 30)
        return [Candidate("NCCL p2p/Simple", stand_in("p2p").schedule, call, slope)]
    out = []
    for o in options(m, collective, nccl_rates(m), achieved_rates(m, f), f.latency_scale):
        out.append(Candidate(f"NCCL {o.algorithm}/{o.protocol}", stand_in(o.algorithm).schedule,
                             call_us(f, o.algorithm) + o.latency_us, 1 / (1e3 * o.gbps)))
    return out


def reference_of(collective: str, model, root) -> list[Candidate]:
    """NCCL-style candidates: ring, and double binary tree for allreduce; direct for the
    collectives NCCL runs as point-to-point sends. Where none applies, every baseline
    (none at all: the caller stands its own candidates in, a ratio of 1)."""
    made = baselines(model, collective, root)
    wanted = REFERENCE.get(collective, {"ring"})
    picked = [b for b in made if (b.algorithm or b.name.split(" x")[0]) in wanted]
    return [c for b in (picked or made) for c in _candidate(b.schedule, b.name)]


def preference(c: Candidate, n: int) -> tuple:
    """The order of candidates at n bytes: the fastest, and of equals the one with the
    smaller slope, then the fewer steps, then the label. The envelope takes the first of
    those that overtake its span's candidate together; where one overtakes it exactly on
    a byte, that byte stays the span's."""
    return (c.time_us(n), c.us_per_byte, c.schedule.num_steps, c.label)


def envelope(candidates: list[Candidate], low: int = 1) -> list[Span]:
    """The lower envelope of the candidates' time lines from `low` bytes up: spans in
    size order, each with the fastest candidate there (of equals, as `preference` says;
    a crossing on a whole byte stays the lower span's), consecutive, the last without
    an upper limit. O(K^2) for K candidates."""
    if not candidates:
        raise BadInput("no candidate schedule to plan with")
    spans, n = [], low
    best = min(candidates, key=lambda c: preference(c, n))
    while True:
        # the next size where a line with a smaller slope gets strictly faster
        nxt = None
        for c in candidates:
            at = _overtakes(c, best, n)
            if at is not None and (nxt is None or (at, preference(c, at))
                                   < (nxt[0], preference(nxt[1], at))):
                nxt = (at, c)
        if nxt is None:
            spans.append(Span(n, None, best))
            return spans
        spans.append(Span(n, nxt[0] - 1, best))
        n, best = nxt[0], nxt[1]


def _overtakes(c: Candidate, best: Candidate, n: int) -> int | None:
    """The first size above n where c is strictly faster than best, or None (never, up
    to MAX_SIZE). The lines' crossing, corrected for float rounding."""
    if c.us_per_byte >= best.us_per_byte:
        return None
    cross = (c.latency_us - best.latency_us) / (best.us_per_byte - c.us_per_byte)
    if cross >= MAX_SIZE:
        return None
    at = max(n + 1, math.floor(cross) + 1)
    for _ in range(64):
        if at > n + 1 and c.time_us(at - 1) < best.time_us(at - 1):
            at -= 1
        elif c.time_us(at) >= best.time_us(at):
            at += 1
        else:
            return at
    return None  # nearly parallel lines: no size where it matters
