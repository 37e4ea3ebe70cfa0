"""Lower bounds: the known values on dgx1, rings and fully connected graphs."""

import json
import subprocess
import sys
from fractions import Fraction

import pytest

from synth.bounds import collective_bounds
from synth.construct.baselines import baselines
from synth.schedule.collectives import COLLECTIVES
from synth.schedule.cost import schedule_cost
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower, lower_with_routes
from synth.topology.physical import topology_from_dict


def bounds_of(topo, name, root=None):
    """The bounds of `name` on a topology or a topology name."""
    topo = resolve(topo) if isinstance(topo, str) else topo
    return collective_bounds(lower_with_routes(topo), name, root)


def test_dgx1_allgather_needs_2_steps_and_7_6_rounds_per_chunk():
    b = bounds_of("dgx1", "allgather")
    assert b.steps == 2 and b.rounds_per_chunk == Fraction(7, 6)
    # 7/6 of a share (n/8) at 25 GB/s: the published 171.4 GB/s algbw bound
    assert 1 / (b.us_per_byte * 1e3) == pytest.approx(171.43, abs=0.01)


def test_dgx1_allreduce_needs_2_n_minus_1_transfers_over_48_links():
    # 14 transfers per chunk, 48 units of GPU egress: 7/24 (twice 7/6 over 8 shares)
    b = bounds_of("dgx1", "allreduce")
    assert b.rounds_per_chunk == Fraction(7, 24) and "2(N-1)" in b.note


def test_allreduce_ports_count_what_a_gpu_can_pass_on_not_its_links():
    # dgxh100x2: each GPU's 64 GB/s PCIe link leads to a 50 GB/s NIC, so a GPU sends at
    # most 450 (NVLink) + 50 GB/s: 30 transfers per chunk over 16 x 500 GB/s = 3/32 of a
    # round per chunk at the 25 GB/s unit (266.7 GB/s algbw; the link sum gave 274.1)
    b = bounds_of("dgxh100x2", "allreduce")
    assert b.without_in_network == Fraction(3, 32)


def test_switches_that_reduce_lower_the_allreduce_bound_and_both_are_shown():
    # one dgxh100 box: a GPU's 18 NVLinks carry each chunk once each way when the
    # NVSwitch adds (1/18), against 2(N-1)/N of it without (7/72): 1.75 x
    b = bounds_of("dgxh100", "allreduce")
    assert (b.rounds_per_chunk, b.without_in_network) == (Fraction(1, 18), Fraction(7, 72))
    assert 1 / (b.us_per_byte * 1e3) == pytest.approx(450.0)
    # dgxh100x2: the boxes' NICs, 8 x 50 GB/s each way, are the thinnest cut (1/16)
    assert bounds_of("dgxh100x2", "allreduce").rounds_per_chunk == Fraction(1, 16)
    # no capable switch: one bound, as before
    assert bounds_of("dgxa100", "allreduce").without_in_network is None


def test_allreduce_bound_allows_overlapping_phases():
    # line:3: reducescatter's bound plus allgather's would say 4/3, but a pipeline that
    # reduces chunk s into the middle while copying chunk s-1 out reaches 5/4
    assert bounds_of("line:3", "allreduce").rounds_per_chunk == 1
    assert bounds_of("switch:4", "allreduce").rounds_per_chunk == \
        Fraction(3, 2)  # the classic 2(N-1)/N per port


def test_allreduce_counts_transfers_between_packages_joined_by_narrow_links():
    # three packages of two GPUs, 4 lanes inside each, a ring of single lanes between
    # them (MI250's shape, cut to three packages): each chunk crosses between the 3
    # packages 2 x (3 - 1) = 4 times, and a package has 2 lanes out: 4 / (3 x 2) = 2/3
    # of a round per chunk. The thinnest cut (a package's 2 lanes: 1/2) and the ports
    # (2 x 5 transfers over 6 GPUs x 5 lanes: 1/3) say less.
    pairs = [("gpu0", "gpu1", 4), ("gpu2", "gpu3", 4), ("gpu4", "gpu5", 4),
             ("gpu1", "gpu2", 1), ("gpu3", "gpu4", 1), ("gpu5", "gpu0", 1)]
    topo = topology_from_dict({"name": "packages", "gpus": 6, "links": [
        {"between": [a, b], "gbps": 50, "count": n} for a, b, n in pairs]})
    assert bounds_of(topo, "allreduce").rounds_per_chunk == Fraction(2, 3)
    # links of one width split nothing: the ring's count is the ports' 2 x 7 / (8 x 2)
    assert bounds_of("ring:8", "allreduce").rounds_per_chunk == Fraction(7, 8)


def test_a_switch_that_copies_counts_arrivals_whatever_switch_no_route_crosses():
    # three GPUs on a switch that multicasts but does not add, two lanes into each GPU
    # and one out. A send out can arrive at both others, so 2(N-1) = 4 transfers a
    # chunk bound only the 6 lanes in (2/3); the bound is GPU 0's one lane out, which
    # a whole buffer must cross: 1. Counted against the 3 lanes out it said 4/3, which
    # the exact search beats (test_synthesis). A switch that could add, on a path no
    # route takes, changes nothing: it turned the count back to sends.
    def copies(far: bool):
        doc = {"name": "copies", "gpus": 3, "unit_gbps": 25,
               "switches": [{"name": "sw", "kind": "nvswitch", "can": ["multicast"]}],
               "links": [link for g in range(3) for link in (
                   {"from": f"gpu{g}", "to": "sw", "gbps": 25},
                   {"from": "sw", "to": f"gpu{g}", "gbps": 25, "count": 2})]}
        if far:
            doc["switches"] += [{"name": "far", "kind": "nvswitch", "can": ["reduce"]},
                                {"name": "pcie", "kind": "pcie_switch"}]
            doc["links"] += [{"between": ["gpu0", "pcie"], "gbps": 1},
                             {"between": ["pcie", "far"], "gbps": 1},
                             {"between": ["far", "gpu1"], "gbps": 1}]
        return topology_from_dict(doc)

    assert bounds_of(copies(False), "allreduce").rounds_per_chunk == 1
    assert bounds_of(copies(True), "allreduce").rounds_per_chunk == 1


@pytest.mark.parametrize("spec, steps, rpc", [("ring:8", 4, Fraction(7, 2)),
                                              ("fc:8", 1, Fraction(1)),
                                              ("line:4", 3, Fraction(3))])
def test_allgather_on_uniform_graphs(spec, steps, rpc):
    b = bounds_of(spec, "allgather")
    assert (b.steps, b.rounds_per_chunk) == (steps, rpc)


def test_broadcast_is_one_over_the_min_cut():
    # ring:8: two links leave the root, so the buffer needs half a round per chunk
    assert bounds_of("ring:8", "broadcast").rounds_per_chunk == Fraction(1, 2)
    # dgx1: 6 NVLinks out of every GPU
    assert bounds_of("dgx1", "broadcast", root=3).rounds_per_chunk == Fraction(1, 6)


def test_multinode_bound_is_set_by_the_nics():
    # dgx2x4 allgather: 48 of 64 shares must enter a box through its 8 NICs of 12.5 GB/s
    b = bounds_of("dgx2x4", "allgather")
    assert b.rounds_per_chunk == 12 and b.us_per_mb == pytest.approx(48 / 64 / 100e3 * 1e6)


def test_dual_collectives_have_equal_bounds_on_symmetric_graphs():
    topo = resolve("dgx1")
    ag, rs = bounds_of(topo, "allgather"), bounds_of(topo, "reducescatter")
    assert (ag.steps, ag.rounds_per_chunk) == (rs.steps, rs.rounds_per_chunk)


@pytest.mark.parametrize("spec", ["dgx1", "ring:8", "fc:8", "dgx2", "dgx2x2", "hypercube:3"])
def test_no_baseline_beats_a_bound(spec):
    topo = resolve(spec)
    model = lower(topo)
    for name in ("allgather", "reducescatter", "allreduce", "broadcast"):
        b = bounds_of(topo, name)
        for base in baselines(model, name):
            cost = schedule_cost(base.schedule)
            assert base.schedule.num_steps >= b.steps, base.name
            assert cost.us_per_byte >= b.us_per_byte * (1 - 1e-9), base.name
            assert cost.latency_us >= b.latency_us - 1e-9


def test_synth_bounds_cli():
    result = subprocess.run([sys.executable, "-m", "synth", "bounds", "allgather", "--topo",
                             "dgx1", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["steps"] == 2 and shown["rounds_per_chunk"] == "7/6"
    text = subprocess.run([sys.executable, "-m", "synth", "bounds", "allreduce", "--topo",
                           "dgx1"], capture_output=True, text=True)
    assert text.returncode == 0 and "7/24" in text.stdout


def test_every_collective_has_bounds():
    topo = resolve("dgx1")
    for name in COLLECTIVES:
        b = bounds_of(topo, name)
        assert b.steps >= 1 and b.rounds_per_chunk > 0


def test_alltoall_bound_sees_dgx1s_bisection():
    # the two K4 halves of dgx1 exchange 16 shares over 6 links: 8/3, above any
    # single-GPU cut (7/6)
    assert bounds_of("dgx1", "alltoall").rounds_per_chunk == Fraction(8, 3)
    assert bounds_of("fc:8", "alltoall").rounds_per_chunk == 1


def test_one_sink_stands_for_all_only_where_translations_prove_it(monkeypatch):
    import dataclasses

    import synth.bounds
    from synth.bounds import bandwidth_bound_shares

    tried = []
    real = synth.bounds.flows.max_ratio_cut

    def counted(graph, sources, sink, *args, **kwargs):
        tried.append(sink)
        return real(graph, sources, sink, *args, **kwargs)

    monkeypatch.setattr(synth.bounds.flows, "max_ratio_cut", counted)
    # torus:4x4: the shifts are symmetries, one sink; 15 shards over 4 links in
    assert bandwidth_bound_shares(lower_with_routes(resolve("torus:4x4")),
                                  "allgather") == Fraction(15, 4)
    assert tried == ["gpu0"]
    # a 3 x 5 mesh claiming the shifts of a torus: the links refuse the claim, so one
    # GPU is tried per orbit of the mesh's own symmetries (its two reflections: 6 orbits,
    # synth.bounds.orbits), and the bound is the mesh's own (a corner: 14 shards over 2
    # links)
    tried.clear()
    mesh = dataclasses.replace(resolve("mesh:3x5"), translations=(3, 5))
    assert bandwidth_bound_shares(lower_with_routes(mesh), "allgather") == 7
    assert tried == ["gpu0", "gpu1", "gpu2", "gpu5", "gpu6", "gpu7"]


def test_a_minimum_cut_the_time_left_cannot_afford_is_not_started(monkeypatch):
    # fc:1100's one cut takes 20 s; where the deadline cannot afford it, the bound is
    # the cuts known without a flow (each source alone, everything but the sink), and
    # partial. Paced here as if every cut took an hour: fc:8's allgather still gets its
    # true bound, 7 shares over the 7 links into a GPU
    import synth.bounds.flows as flows
    from synth.bounds.flows import Clock, max_ratio_cut, unit_graph
    from synth.deadline import Deadline, Pace
    from synth.topology.linkmodel import lower_with_routes

    monkeypatch.setattr(flows, "MIN_CUT", Pace(3600.0, least=1))
    graph, gpus = unit_graph(lower_with_routes(resolve("fc:8")))
    clock = Clock(Deadline.after(60))
    assert max_ratio_cut(graph, gpus[1:], gpus[0], clock=clock) == 1
    assert clock.skipped and clock.looser and not clock.expired()


def test_a_cut_left_out_for_time_leaves_the_other_bounds_whole(monkeypatch):
    # the left-out cut marked the clock expired, with a minute left: the hop bound then
    # stopped too, and gather's (its first source the root, which sends nothing) was 0
    import synth.bounds.flows as flows
    from synth.deadline import Deadline, Pace
    from synth.topology.linkmodel import lower_with_routes

    lowering = lower_with_routes(resolve("dgx1"))
    full = collective_bounds(lowering, "gather", 0, Deadline.after(60))
    monkeypatch.setattr(flows, "MIN_CUT", Pace(3600.0, least=1))
    cut = collective_bounds(lowering, "gather", 0, Deadline.after(60))
    assert full.steps == 2 and cut.steps == 2  # dgx1: some GPU is 2 NVLink hops away
    assert cut.partial and not full.partial
