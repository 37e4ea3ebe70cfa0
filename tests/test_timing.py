"""Cost model 2 for synth's schedules (synth.predict.timing), on hand-derived cases.

The figures are the defaults (docs/cost-model.md): Ampere's for generators (NVLink 0.77
of line rate, a call 2.2 us, 0.5 us a round), Hopper's for dgxh100 (NVLink 0.82, NIC
0.95); NCCL's per-hop latencies are LL / LL128 / Simple = 0.6 / 1.9 / 3.4 us over
NVLink and 2.7 / 4.0 / 14.0 us over the network.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.construct.baselines import baselines
from synth.predict.timing import fastest, fastest_somewhere, prices, schedule_lines
from synth.schedule.collectives import make_collective
from synth.schedule.ir import Schedule, Send, Step
from synth.topology.catalog import resolve
from synth.topology.figures import defaults
from synth.topology.linkmodel import lower


def test_one_step_over_one_nvlink_costs_the_call_the_hop_a_round_and_the_bytes():
    topo = resolve("line:2")  # two GPUs, one 25 GB/s link each way
    ring = next(b for b in baselines(lower(topo), "allgather", None) if b.name.startswith("ring"))
    s = ring.schedule
    assert (s.num_steps, s.rounds, s.collective.buffer_chunks) == (1, 1, 2)
    lines = {line.protocol: line for line in schedule_lines(s, prices(topo))}
    rate = 25 * 0.77 * 1e3  # bytes per us achieved
    # one chunk (n / 2 bytes) each way at once; LL moves half as fast, LL128 0.92
    for proto, hop, factor in (("LL", 0.6, 0.5), ("LL128", 1.9, 0.92), ("Simple", 3.4, 1.0)):
        assert lines[proto].latency_us == pytest.approx(2.2 + hop + 0.5)
        assert lines[proto].us_per_byte == pytest.approx(1 / (2 * rate * factor))
    assert fastest(list(lines.values()), 8).protocol == "LL"
    assert fastest(list(lines.values()), 1 << 30).protocol == "Simple"
    # LL's 2.2 + 0.6 + 0.5 = 3.3 us is under the host's launch of the call, 4.2 us
    assert lines["LL"].time_us(8) == pytest.approx(4.2)


def two_box_step(nvlink_sends: int) -> Schedule:
    """One step of an allgather on dgxh100x2: chunks 0..k-1 of rank 0 to rank 1 over
    NVLink, and one chunk of rank 0 to rank 8 (the other box) over the network."""
    topo = resolve("dgxh100x2")
    coll = make_collective("allgather", 16, 18)
    sends = tuple(Send(c, 0, 1) for c in range(nvlink_sends)) + (Send(0, 0, 8),)
    return Schedule(coll, lower(topo), (Step(1, sends),))


@pytest.mark.parametrize("nvlink_sends, bound_by", [(18, "nvlink"), (1, "net")])
def test_a_step_pays_the_latency_of_the_link_that_bounds_it(nvlink_sends, bound_by):
    topo = resolve("dgxh100x2")
    lines = {l.protocol: l for l in schedule_lines(two_box_step(nvlink_sends), prices(topo))}
    nvlink = 18 * 25 * 0.82  # GB/s: gpu0's 18 lanes into the NVSwitch
    nic = 50 * 0.95  # the 400 Gb/s NIC, the slowest hop to the other box
    per_chunk = max(nvlink_sends / nvlink, 1 / nic)  # the busiest link: chunks / (GB/s)
    hop = {"nvlink": 3.4, "net": 14.0}[bound_by]
    assert lines["Simple"].latency_us == pytest.approx(2.2 + hop + 0.5)
    # C = 16 ranks x 18 chunks: a chunk is n / 288 bytes
    assert lines["Simple"].us_per_byte == pytest.approx(per_chunk / (288 * 1e3))


def test_a_step_over_efa_pays_efas_message_latency():
    # the same step bound by the network, the boxes joined by EFA: its message takes 20
    # us (aws-ofi-nccl's p5 figure) and Simple's completion 3 more, in place of 14.0
    topo = replace(resolve("dgxh100x2"), figures=defaults("hopper", "efa"))
    lines = {l.protocol: l for l in schedule_lines(two_box_step(1), prices(topo))}
    assert lines["Simple"].latency_us == pytest.approx(2.2 + 23 + 0.5)
    assert lines["LL"].latency_us == pytest.approx(2.2 + 20 + 0.5)


def test_only_points_fastest_at_some_size_are_kept():
    topo = resolve("line:2")
    made = baselines(lower(topo), "allgather", None)

    class P:  # the frontier's points, as far as the choice reads them
        def __init__(self, schedule):
            self.schedule, self.steps = schedule, schedule.num_steps

    points = [P(b.schedule) for b in made]
    kept, dropped = fastest_somewhere(points, prices(topo))
    # the three baselines are one and the same single step: the first is kept (equal
    # times, equal steps: the first listed), the other two never win
    assert kept == points[:1] and dropped == points[1:]


def test_a_switch_operation_runs_in_simple_only():
    # dgxh100's NVLS: a one-step broadcast as one multicast from rank 0 through the
    # switch. NVLS's multimem loads and stores run in Simple (NCCL gives its NVLS
    # algorithms no LL or LL128), so the schedule has a Simple line alone; the same
    # broadcast by plain sends has all three
    from synth.construct.in_network import one_step, reducing_switch

    topo = resolve("dgxh100")
    model = lower(topo)
    switched = one_step(model, reducing_switch(model), "broadcast", 0, 1)
    assert switched.in_network
    assert [line.protocol for line in schedule_lines(switched, prices(topo))] == ["Simple"]
    plain = next(b.schedule for b in baselines(model, "broadcast", 0))
    assert not plain.in_network
    assert {line.protocol for line in schedule_lines(plain, prices(topo))} == \
        {"LL", "LL128", "Simple"}


def test_a_route_achieves_its_least_hop_each_at_its_own_kinds_efficiency():
    # GPU 10's PCIe link to its NIC at 0.45 (28.8 GB/s, PCIe 0.75: 21.6 achieved) and
    # the rail at 0.5 (25 GB/s, the NIC's 0.95: 23.75): the route achieves 21.6, though
    # the rail is its narrowest line rate (hopper's defaults)
    from synth.topology.communicator import view

    topo = resolve("dgxh100x2", edits=("box1.gpu2-nic2=0.45", "box1.nic2-rail2=0.5"))
    p = prices(view(topo, [2, 10]))
    assert p.link_gbps[(0, 1)] == pytest.approx(21.6)
    assert p.link_gbps[(1, 0)] == pytest.approx(21.6)
    assert p.link_kind[(0, 1)] == "net"
