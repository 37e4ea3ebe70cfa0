"""Cost model 2 for synth's own schedules: what a step takes on the hardware.

A step takes, per protocol p (NCCL's LL, LL128, Simple, which MSCCL's runtime runs too):
- the latency of the link that bounds it (the one its data keeps busy longest): NCCL's
  per-hop figure for that link's kind under p (NVLink, PCIe or the network, ring
  figures of src/graph/tuning.cc; the network's own message latency where the figures
  know it, as for EFA), times the figures' latency_scale;
- its data over achieved rates: on each link and shared group, its chunks x the chunk's
  bytes / (line rate x the efficiency of the link's kind x p's bandwidth factor); a
  switch operation (NVLS, SHARP) moves (k + 1) / k of what it delivers to or takes from
  its k ranks, at the switch's efficiency on top;
- and f.send_us per round of the step (chunks that pass a link one after another:
  the line-rate model's rounds), so 300,000 chunks of 3 KB cost what their sends cost.
A call adds the figures' fixed cost once. Per protocol that is a line in n (latency_us +
us_per_byte x n), floored at the host's launch of the call (launch_us: one process per
GPU launches its part; NCCL's launch figure stands for the runtime's); a schedule's time
at n is the fastest of its lines.

A schedule written once per orbit (version 4, synth.schedule.orbits) is priced on its
representatives' sends: on the quotient model they load each link and group as the whole
step loads every link and group of its orbit, so each is priced at the slowest of its
orbit (`orbit_prices`): the same busiest time as the unfolded step's.

Cost: O(sends + switch operations of the expanded schedule) per schedule (of the
representatives' program, once per orbit), after one pass over the topology's routes
(`prices`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from synth.predict.nccl import HOP_US as NCCL_HOP_US
from synth.predict.nccl import BANDWIDTH_FACTOR as NCCL_BANDWIDTH_FACTOR
from synth.predict.nccl import PROTOCOLS, hardware_net_hop
from synth.schedule.ir import Schedule
from synth.topology.figures import Figures, defaults
from synth.topology.linkmodel import Lowering, lower_with_routes, step_loads
from synth.topology.physical import NIC, Topology

BANDWIDTH_FACTOR = dict(zip(PROTOCOLS, NCCL_BANDWIDTH_FACTOR))  # of achieved (tuning.cc)
# NCCL's ring latency per hop, LL / LL128 / Simple, by what the hop crosses
HOP_US = {kind: hops["ring"] for kind, hops in NCCL_HOP_US.items()}
EFFICIENCY_OF = {"nvlink": "nvlink", "pcie": "pcie", "net": "nic"}


@dataclass(frozen=True)
class Line:
    protocol: str
    latency_us: float
    us_per_byte: float
    floor_us: float = 0.0  # the host's launch: no call is faster, whatever the GPU does

    def time_us(self, nbytes: float) -> float:
        return max(self.floor_us, self.latency_us + self.us_per_byte * nbytes)


@dataclass(frozen=True)
class Prices:
    """A link model's links and groups priced: achieved GB/s and the kind whose
    latency a step bounded by it pays."""

    figures: Figures
    link_gbps: dict
    link_kind: dict
    group_gbps: dict
    group_kind: dict


def prices(topo: Topology) -> Prices:
    """The prices of `topo`'s lowering (one pass over its routes)."""
    return _prices(topo)


@lru_cache(maxsize=8)
def _prices(topo: Topology) -> Prices:
    return prices_of(lower_with_routes(topo))


def prices_of(lowering: Lowering) -> Prices:
    """The prices of a lowering made already (one pass over its routes)."""
    topo = lowering.topology
    figures = topo.figures or defaults("ampere")
    kind = {v.name: v.kind for v in topo.vertices}
    rate = {(l.src, l.dst): l.bandwidth for l in topo.links}

    def hop_kind(u, v):
        a, b = kind[u], kind[v]
        if "net_switch" in (a, b):
            return "net"
        if "pcie_switch" in (a, b) or NIC in (a, b):
            return "pcie"
        return "nvlink"

    def priced(hops):
        """The share of the hops' line-rate bottleneck they achieve (the least of each
        hop's rate at its own kind's efficiency: a PCIe hop at 28.8 GB/s achieves less
        than a network hop at 25), and the slowest kind any hop is."""
        achieved = min(rate[h] * figures.efficiency(EFFICIENCY_OF[hop_kind(*h)])
                       for h in hops)
        kinds = {hop_kind(*h) for h in hops}
        worst = next(k for k in ("net", "pcie", "nvlink") if k in kinds)
        return achieved / min(rate[h] for h in hops), worst

    def added(routes):
        """Routes side by side (synth.topology.several_routes): each its bottleneck at
        its own efficiency, the slowest kind any is."""
        each = [(min(rate[h] for h in hops),) + priced(hops) for hops in routes]
        return (sum(gbps * eff for gbps, eff, _ in each),
                next(k for k in ("net", "pcie", "nvlink") if k in {w for *_, w in each}))

    model = lowering.model
    link_gbps, link_kind = {}, {}
    for l in model.links:
        pair = (l.src, l.dst)
        path = lowering.routes[pair]
        if pair in lowering.further:
            paths = (path,) + lowering.further[pair]
            link_gbps[pair], link_kind[pair] = added([list(zip(p, p[1:])) for p in paths])
            continue
        eff, worst = priced(list(zip(path, path[1:])))
        link_gbps[pair] = float(l.capacity) * model.unit_gbps * eff
        link_kind[pair] = worst
    group_gbps, group_kind = {}, {}
    for g in model.groups:
        hops = [tuple(h.split("->")) for h in lowering.group_sources[g.name]]
        if g.name in lowering.sums:  # one hop per route, their capacities added
            group_gbps[g.name], group_kind[g.name] = added([[h] for h in hops])
            continue
        eff, worst = priced(hops)
        group_gbps[g.name] = float(g.capacity) * model.unit_gbps * eff
        group_kind[g.name] = worst
    return Prices(figures, link_gbps, link_kind, group_gbps, group_kind)


def hop_latencies(f: Figures) -> dict[str, tuple[float, ...]]:
    """{route kind: a step's latency over it per protocol (LL, LL128, Simple), us}."""
    return dict(HOP_US, net=tuple(hardware_net_hop(f, "ring", i) for i in range(3)))


def schedule_lines(schedule: Schedule, p: Prices) -> list[Line]:
    """The schedule's time per protocol, a line in n each (module docstring). A
    pipeline's expanded step carries the loads of the program steps active in it (a
    batch's chunks differ, its loads do not), so each program step is counted once:
    O(program + expanded steps x steps in flight)."""
    f = p.figures
    model, p = priced_model(schedule, p)
    chunks = schedule.collective.buffer_chunks
    program = [step_loads(model, step.switch_ops, step.sends, weight=_switch_weight)
               for step in schedule.steps]
    switched = [bool(step.switch_ops) for step in schedule.steps]
    nvls = f.nvls or 1.0
    ports = {g for w in model.switches for _, g in w.up + w.down}
    per_byte, sends_us = 0.0, 0.0
    hops = {proto: 0.0 for proto in PROTOCOLS}
    hop_us = hop_latencies(f)
    windows = {}  # the program steps active at once -> their bottleneck (a pipeline's
    for t in range(schedule.num_steps):  # steady state repeats one window)
        active = tuple(i for _, i in schedule.active(t))
        if active not in windows:
            windows[active] = _bottleneck(p, [program[i] for i in active],
                                          nvls if any(switched[i] for i in active) else 1.0,
                                          ports)
        if windows[active] is None:
            continue
        seconds, kind = windows[active]
        per_byte += float(seconds) / (chunks * 1e3)
        sends_us += f.send_us * schedule.step_rounds(t)
        for i, proto in enumerate(PROTOCOLS):
            hops[proto] += hop_us[kind][i] * f.latency_scale
    # a switch's reductions and multicasts (NVLS's multimem loads and stores) run in
    # Simple only, as NCCL's NVLS algorithms do (tuning.cc gives them no LL or LL128)
    protocols = ("Simple",) if any(switched) else PROTOCOLS
    return [Line(proto, f.call_us + hops[proto] + sends_us,
                 per_byte / BANDWIDTH_FACTOR[proto], f.launch_us) for proto in protocols]


def _bottleneck(p: Prices, loads: list, nvls: float, ports: set):
    """(seconds a chunk-unit of load takes on the busiest link or group, its kind) of
    program steps' (link, group) loads running at once, or None where nothing moves;
    `nvls` derates the switch ports where a switch operation runs."""
    links, groups = _summed([x[0] for x in loads]), _summed([x[1] for x in loads])
    if not links and not groups:
        return None
    busy = [(load / p.link_gbps[pair], p.link_kind[pair]) for pair, load in links.items()]
    busy += [(load / (p.group_gbps[name] * (nvls if name in ports else 1.0)),
              p.group_kind[name]) for name, load in groups.items()]
    return max(busy, key=lambda b: b[0])


def priced_model(schedule: Schedule, p: Prices) -> tuple:
    """(the link model the schedule's steps are priced on, its prices): the machine's,
    or for a schedule written once per orbit the quotient and its orbit prices (made
    once per machine: a pass over every link and group link, seconds at 512 GPUs)."""
    if schedule.symmetry is None:
        return schedule.model, p
    return (schedule.symmetry.quotient(schedule.model),
            orbit_prices(p, schedule.symmetry, schedule.model))


def orbit_prices(p: Prices, orbits, model) -> Prices:
    """`p` on the quotient model (synth.schedule.orbits): each link that enters a
    representative and each class of groups priced as the slowest of its orbit or
    class (and the kind of that one), so that the busiest link or group of a step is
    found among them. Remembered for the last (p, orbits, model): a job's points share
    them, and at 512 GPUs they cost seconds."""
    from synth.schedule.orbits import last_made

    def make():
        link_gbps, link_kind = {}, {}
        for pair, rep in zip(p.link_gbps, orbits.link_orbits(list(p.link_gbps))):
            gbps = p.link_gbps[pair]
            if rep not in link_gbps or gbps < link_gbps[rep]:
                link_gbps[rep], link_kind[rep] = gbps, p.link_kind[pair]
        group_gbps, group_kind = {}, {}
        for _, _, names in orbits.classes(model):
            slowest = min(names, key=lambda name: p.group_gbps[name])
            group_gbps[names[0]] = p.group_gbps[slowest]
            group_kind[names[0]] = p.group_kind[slowest]
        return replace(p, link_gbps=link_gbps, link_kind=link_kind, group_gbps=group_gbps,
                       group_kind=group_kind)

    # the chunks rule moves no link: dims and axes are the whole key
    return last_made(_ORBIT_PRICES, (orbits.dims, orbits.axes), (p, model), make)


_ORBIT_PRICES: dict = {}


def _summed(counters: list):
    if len(counters) == 1:
        return counters[0]
    total = Counter()
    for c in counters:
        total.update(c)
    return total


def fastest(lines: list[Line], nbytes: int) -> Line:
    """The line (protocol) that is fastest at nbytes."""
    return min(lines, key=lambda line: line.time_us(nbytes))


def _switch_weight(op) -> Fraction:
    k = len(op.srcs) if op.op == "switch_reduce" else len(op.dsts)
    return Fraction(k + 1, k)


SIZES = tuple(1 << k for k in range(37))  # 1 byte to 64 GB, every power of two


def fastest_somewhere(points: list, p: Prices, protocols=PROTOCOLS) -> tuple[list, list]:
    """The points (anything with .schedule and .steps) that are the fastest in cost
    model 2 at one or more of SIZES, and the others; a point's time is its fastest line
    among `protocols` (a runtime that runs only some). Of equal times the one with fewer
    steps counts. O(points x (schedule + SIZES))."""
    lines = [[x for x in schedule_lines(pt.schedule, p) if x.protocol in protocols]
             for pt in points]
    winners = set()
    for n in SIZES:
        times = [fastest(ls, n).time_us(n) for ls in lines]
        best = min(range(len(points)), key=lambda i: (times[i], points[i].steps))
        winners.add(best)
    kept = [pt for i, pt in enumerate(points) if i in winners]
    return kept, [pt for i, pt in enumerate(points) if i not in winners]
