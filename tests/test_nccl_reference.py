"""NCCL as it runs (synth.predict.nccl): its tuner's numbers on hand-derived cases, its
choice per size as NCCL 2.30.7's tuner makes it, and cost model 2's parts one by one.

Every expected number below is worked out by hand from NCCL 2.30.7's src/graph/
tuning.cc tables (quoted where used) and the topology's line rates, not by the code.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from synth.errors import BadInput
from synth.topology.figures import defaults, figures_from_dict
from synth.predict.machine import Machine, machine_of
from synth.predict.nccl import (achieved_rates, channel_share, choose, model_us, nccl_rates,
                                options, predicted_us)
from synth.predict.nccl_fill import nvls_channels, nvls_chunk, nvls_tree_chunk
from synth.topology.catalog import resolve
from tests.test_reliability import synth_cli

GB = 1 << 30
FIXTURES = Path(__file__).parent / "fixtures" / "topologies"


def option(machine, coll, algo, proto):
    return next(o for o in options(machine, coll, nccl_rates(machine))
                if (o.algorithm, o.protocol) == (algo, proto))


def test_ring_on_dgxa100_is_twelve_channels_of_20_gbps_as_nccl_counts_them():
    m = machine_of(resolve("dgxa100"))
    # 12 NVLinks x 20 GB/s (NCCL's SM80 figure) = 240; the ladder's 40 fits six times,
    # ncclTopoDupChannels doubles to 12 of 20: bus 240, algorithm 240 x 8 / 14
    simple = option(m, "allreduce", "ring", "Simple")
    assert simple.channels == 12
    assert simple.gbps == pytest.approx(240 * 8 / 14)
    # Ring Simple: base 8.4 + 2(N-1) = 14 NVLink hops of 3.4 us
    assert simple.latency_us == pytest.approx(8.4 + 14 * 3.4)
    # LL: half of 240, capped at Ampere's one-node 87.7; base 6.6 + 14 x 0.6
    ll = option(m, "allreduce", "ring", "LL")
    assert ll.gbps == pytest.approx(87.7 * 8 / 14)
    assert ll.latency_us == pytest.approx(6.6 + 14 * 0.6)
    # LL128: x 0.92, under 12 channels x 20 per-channel cap
    assert option(m, "allreduce", "ring", "LL128").gbps == pytest.approx(240 * 0.92 * 8 / 14)


def test_at_8_bytes_nccl_picks_ring_ll_over_tree_ll_by_its_latencies():
    for name in ("dgxa100", "dgxh100"):
        m = machine_of(resolve(name))
        pick = choose(m, "allreduce", 8)
        # ring LL 6.6 + 14 x 0.6 = 15.0 us against tree LL 6.8 + 2 x 7 x 0.6 = 15.2
        assert pick.name == "ring/LL", name
        assert pick.nccl_us == pytest.approx(15.0, abs=1e-3)
        assert "next tree/LL 15.2 us" in pick.reason


def test_nccl_runs_nvls_on_dgxh100_allreduce_at_large_sizes():
    m = machine_of(resolve("dgxh100"))
    pick = choose(m, "allreduce", GB)
    assert pick.name == "nvls/Simple"
    # NVLS: 8 channels (one per GPU); 18 x 20.6 x 8/7 / 8 = 52.97 -> the SM90 ladder's 50;
    # 50 x 0.85 x 7/8 x 2 = 74.4 but bwInter = 50 binds: bus 400, x 8/14; latency 25 us
    assert pick.option.gbps == pytest.approx(400 * 8 / 14)
    assert pick.nccl_us == pytest.approx(25 + GB / (1e3 * 400 * 8 / 14))
    # ring Simple there: 12 channels of 30 (60 fits six times, doubled): 360 x 8/14
    ring = option(m, "allreduce", "ring", "Simple")
    assert model_us(m, "allreduce", ring, GB) == pytest.approx(56 + GB / (1e3 * 360 * 8 / 14))


def test_nccl_runs_nvls_tree_on_two_dgxh100_and_tree_ll_when_small():
    m = machine_of(resolve("dgxh100x2"))
    big = choose(m, "allreduce", GB)
    assert big.name == "nvls_tree/Simple"
    # min(74.4, 2 x 48 (two nodes), perChMaxNVLSTreeBw 57.7) x 8 channels, x 16/30;
    # latency 25 (NVLink) + 2 x log2(2) x 20.9 (network)
    assert big.option.gbps == pytest.approx(57.7 * 8 * 16 / 30)
    assert big.option.latency_us == pytest.approx(25 + 2 * 20.9)
    small = choose(m, "allreduce", 8)
    # tree LL: 6.8 + 2 x ((8 - 1) x 0.6 + 1 x 5.0); ring LL pays 28 hops of the 1 us
    # network overhead and 2 of 2.7: 6.6 + 28 + 5.4
    assert small.name == "tree/LL"
    assert small.nccl_us == pytest.approx(25.2, abs=1e-3)
    assert "next ring/LL 40.0 us" in small.reason


def one_gpu_per_node(nodes: int) -> Machine:
    return Machine("h100 one per node", defaults("hopper"), nodes, nodes, "nvlink", 450.0,
                   450.0, 1, 50.0, True, True, False)


def test_pat_runs_allgather_with_one_gpu_per_node_and_nowhere_else():
    m = one_gpu_per_node(8)
    names = {f"{o.algorithm}/{o.protocol}" for o in options(m, "allgather", nccl_rates(m))}
    assert "pat/Simple" in names
    # PAT 8 + log2(8) x 14 / 3.5 + 8 x 2.8 = 42.4 us against ring Simple's
    # 8.4 + 7 x 14 = 106.4 and ring LL's bandwidth of under 20.4 GB/s at 1 MB
    assert choose(m, "allgather", 1 << 20).name == "pat/Simple"
    assert option(m, "allgather", "pat", "Simple").latency_us == pytest.approx(42.4)
    h = machine_of(resolve("dgxh100x2"))
    assert all(o.algorithm != "pat" for o in options(h, "allgather", nccl_rates(h)))


def test_nvls_tree_is_single_node_never_and_nvls_needs_sharp_across_nodes():
    one = machine_of(resolve("dgxh100"))
    two = machine_of(resolve("dgxh100x2"))
    assert all(o.algorithm != "nvls_tree" for o in options(one, "allreduce", nccl_rates(one)))
    assert all(o.algorithm != "nvls" for o in options(two, "allreduce", nccl_rates(two)))
    a100 = machine_of(resolve("dgxa100"))
    assert all(not o.algorithm.startswith("nvls")
               for o in options(a100, "allreduce", nccl_rates(a100)))


def test_a_nic_behind_a_half_width_pcie_link_runs_at_that_links_rate():
    # dgxh100's GPU 2 reaches its 50 GB/s NIC over a 64 GB/s PCIe link; at half width
    # (32 GB/s) NCCL's path to the NIC is no faster than that hop, and the hop runs at
    # PCIe's efficiency (hopper's defaults: 0.75 against the NIC's 0.95)
    from synth.topology.communicator import view

    healthy = machine_of(view(resolve("dgxh100x2"), [2, 10]))
    degraded = machine_of(view(resolve("dgxh100x2", edits=("box1.gpu2-nic2=0.5",)), [2, 10]))
    assert (healthy.nics, healthy.nic_gbps, healthy.nic_path_gbps) == (1, 50.0, 64.0)
    assert (degraded.nics, degraded.nic_gbps, degraded.nic_path_gbps) == (1, 50.0, 32.0)
    assert achieved_rates(healthy, healthy.figures).nic == pytest.approx(50 * 0.95)
    assert achieved_rates(degraded, degraded.figures).nic == pytest.approx(32 * 0.75)
    # NCCL's tuner sees the path's narrowest hop (its share of it, 0.96)
    assert nccl_rates(degraded).nic == pytest.approx(32 * 0.96)
    assert nccl_rates(healthy).nic == pytest.approx(50 * 0.96)
    # dgx2: two GPUs behind each NIC, over 16 GB/s PCIe links; GPU 0's at half width is
    # its own way out, whatever GPU 1's (each GPU's widest path, the slowest GPU's)
    dgx2 = machine_of(resolve("dgx2x2", edits=("box0.gpu0-pcie0=0.5",)))
    assert (dgx2.nic_path_gbps, machine_of(resolve("dgx2x2")).nic_path_gbps) == (8.0, 16.0)


def test_a_forced_algorithm_nccl_lacks_there_is_one_clear_error():
    with pytest.raises(BadInput, match="has no nvls/protocol for allreduce"):
        choose(machine_of(resolve("dgxa100")), "allreduce", GB, "nvls")


# --- cost model 2's parts ----------------------------------------------------------

def test_a_call_costs_its_fixed_cost_plus_nccls_latency():
    m = machine_of(resolve("dgxa100"))
    m = replace(m, figures=replace(m.figures, call_us=20.0))
    # 8 bytes: ring LL, 15 us of NCCL latency + 20 us of call + 8 B on one of the
    # communicator's 24 channels (the search's 12, doubled by connect.cc): 1/24 of 12 x
    # 25 x 0.77 = 231 GB/s, at half rate (LL; far under LL's cap of 87.7), x 8/14
    t = predicted_us(m, "allreduce", choose(m, "allreduce", 8).option, 8)
    assert t == pytest.approx(20 + 15 + 8 / (1e3 * 231 / 24 * 0.5 * 8 / 14), rel=1e-6)


def test_the_protocol_switches_where_simples_latency_pays_for_itself():
    m = machine_of(resolve("dgxa100"))
    ll, simple = option(m, "allreduce", "ring", "LL"), option(m, "allreduce", "ring", "Simple")
    # ring LL 15 + n / 50.11e3 against ring Simple 56 + n / 137.1e3: equal at
    # n = 41 / (1/50.114e3 - 1/137.14e3) = about 3.24 MB
    cross = (simple.latency_us - ll.latency_us) / (1 / (1e3 * ll.gbps) - 1 / (1e3 * simple.gbps))
    assert cross == pytest.approx(41 / (1 / (1e3 * 87.7 * 8 / 14) - 1 / (1e3 * 240 * 8 / 14)))
    before = choose(m, "allreduce", int(cross * 0.8)).option.protocol
    after = choose(m, "allreduce", int(cross * 1.5)).option.protocol
    assert before != "Simple" and after in ("Simple", "LL128")


def test_nvls_is_charged_n_plus_one_over_n_of_the_port_at_its_efficiency():
    m = machine_of(resolve("dgxh100"))
    f = m.figures  # NVLink 0.82 of 450, NVLS 0.85 of that
    pick = choose(m, "allreduce", 8 * GB)
    assert pick.name == "nvls/Simple"
    port = 450 * 0.82 * 0.85
    expected = f.nvls_call_us + 25 + 8 * GB / (1e3 * port * 8 / 9)
    # plus the pipeline's fill: two more stages (scatter, reduce and multicast, gather)
    # of one loop of a channel, 8 heads x NCCL's full 128 KB chunk, on 16 channels
    fill = 2 * 8 * 128 * 1024 / (1e3 * port * 8 / 9 / 16)
    assert pick.predicted_us == pytest.approx(expected + fill, rel=1e-6)


def test_nvls_chunks_shrink_at_mid_sizes_as_nccls_ladder_does():
    m = machine_of(resolve("dgxh100"))
    assert nvls_channels(m) == 16  # NVLS_NCHANNELS_SM90
    # calcCollChunking per channel, 8 heads, from 128 KB: 64 KB below 64 x 8 x 128 KB
    # = 64 MB a channel, 32 KB below 8 x 8 x 64 KB = 4 MB, 16 KB below 2 x 8 x 32 KB
    # = 512 KB. Over 16 channels: 1 GB is 64 MB each (128 KB), 128 MB is 8 MB (64 KB),
    # 16 MB is 1 MB (32 KB), 1 MB is 64 KB (16 KB)
    assert [nvls_chunk(m, n / 16) for n in (GB, 128 << 20, 16 << 20, 1 << 20)] == \
        [131072, 65536, 32768, 16384]
    assert nvls_chunk(m, 64 << 20) == 131072 and nvls_chunk(m, (64 << 20) - 1) == 65536


def test_an_nvls_calls_fill_is_two_loops_of_its_chunk():
    m = machine_of(resolve("dgxh100"))
    f = m.figures
    port = 450 * 0.82 * 0.85 * 8 / 9  # what a GPU's port carries of an allreduce
    n = 16 << 20
    pick = choose(m, "allreduce", n)
    assert pick.name == "nvls/Simple"
    # 32 KB chunks (above): a loop of a channel is 8 x 32 KB, two stages of it at the
    # channel's 1 / 16 of the port before the last stage starts
    fill = 2 * 8 * 32768 / (1e3 * port / 16)
    assert pick.predicted_us == pytest.approx(
        f.nvls_call_us + 25 + n / (1e3 * port) + fill, rel=1e-6)
    # at 1 GB the chunk is 128 KB: four times the fill of 16 MB
    big = choose(m, "allreduce", GB).predicted_us
    assert big == pytest.approx(f.nvls_call_us + 25 + GB / (1e3 * port) + 4 * fill, rel=1e-6)


def test_nvls_tree_chunks_follow_nccls_tree_ladder_from_its_smaller_cap():
    two, eight = machine_of(resolve("dgxh100x2")), machine_of(resolve("dgxh100x8"))
    # ncclNvlsTuning: the tree's largest chunk is the NVLS chunk (128 KB) below 4 nodes,
    # 64 KB from 4. calcCollChunking per channel, 8 heads: 128 KB below 16 x 8 x 128 KB
    # = 16 MB a channel (no change from 128 KB), 64 KB below 4 x 8 x 128 KB = 4 MB,
    # 32 KB below 1 x 8 x 64 KB = 512 KB
    assert [nvls_tree_chunk(two, n) for n in (64 << 20, 4 << 20, (4 << 20) - 1,
                                              512 << 10, (512 << 10) - 1)] == \
        [131072, 131072, 65536, 65536, 32768]
    assert nvls_tree_chunk(eight, 64 << 20) == 65536


def test_an_nvls_tree_calls_fill_is_its_depth_of_loops_on_nvls_channels():
    m = machine_of(resolve("dgxh100x2"))
    pick = choose(m, "allreduce", GB)
    assert pick.name == "nvls_tree/Simple"
    # achieved: NCCL's cap binds, 8 channels x 57.7 x 16/30 = 246.19 GB/s (the port's
    # 450 x 0.82 x 0.85 x 8/9 = 278.8 and 8 NICs x 50 x 0.95 = 380 are more); latency
    # 25 (NVLink) + 2 x 20.9 (network); 2.2 us of call
    gbps = 8 * 57.7 * 16 / 30
    # fill: depth 2 + 2 x log2(2) = 4, so 3 stages of one loop: 1 GB / 16 NVLS channels
    # = 64 MB a channel, chunk 128 KB, a loop 8 heads x 128 KB = 1 MB, at 1/16 of gbps
    fill = 3 * 8 * 131072 / (1e3 * gbps / 16)
    assert pick.predicted_us == pytest.approx(2.2 + 66.8 + GB / (1e3 * gbps) + fill, rel=1e-6)


def test_few_bytes_use_few_channels():
    m = machine_of(resolve("dgxa100"))
    ring = option(m, "allreduce", "ring", "Simple")
    # 512 threads x 64 bytes a channel before NCCL adds one: 96 KB runs on 3 of the
    # communicator's 24 channels (the search's 12, doubled)
    slow = predicted_us(m, "allreduce", ring, 96 * 1024)
    rates = ring.gbps * 0.77 / 0.8  # achieved rates: 0.77 of line rate, not NCCL's 0.8
    assert slow == pytest.approx(m.figures.call_us + ring.latency_us
                                 + 96 * 1024 / (1e3 * rates * 3 / 24), rel=1e-6)


def test_a_call_waits_for_its_host_when_one_thread_launches_many_gpus():
    m = machine_of(resolve("dgxa100"))
    ring_ll = choose(m, "allreduce", 8).option
    # the GPU's part: 2.2 us of call + ring LL's 6.6 + 14 x 0.6 = 15 us + 8 bytes on one
    # of 24 channels (as above); the host's: 4.2 us per GPU it launches
    gpu = 2.2 + 15 + 8 / (1e3 * 231 / 24 * 0.5 * 8 / 14)
    assert predicted_us(m, "allreduce", ring_ll, 8, launches=1) == pytest.approx(gpu)
    assert predicted_us(m, "allreduce", ring_ll, 8, launches=8) == pytest.approx(8 * 4.2)
    assert predicted_us(m, "allreduce", ring_ll, 8, launches=0) == pytest.approx(gpu)  # graphs
    assert choose(m, "allreduce", 8, launches=8).predicted_us == pytest.approx(8 * 4.2)


def efa_pair() -> Machine:
    """Two DGX-H100-like boxes on EFA (p5: NCCL sees one 400 Gb/s device of 4 rails per
    GPU), figures of the kind: aws-ofi-nccl reports 75 us, a message takes 20 (+3)."""
    topo = resolve("dgxh100x2")
    return machine_of(replace(topo, figures=defaults("hopper", "efa")))


def test_efa_steers_nccls_choice_by_its_plugins_latency_and_costs_its_own_on_the_wire():
    m = efa_pair()
    # NCCL's view at 8 bytes: tree LL 6.8 + 2 x (7 x 0.6 + 1 x (5.0 + 75)) = 175.2 us;
    # ring LL 6.6 + 28 x 1.0 + 2 x (2.7 + 75) = 190.0; NVLS-tree 25 + 2 x (20.9 + 2 x 75)
    pick = choose(m, "allreduce", 8)
    assert pick.name == "tree/LL"
    assert pick.option.latency_us == pytest.approx(175.2)
    assert "next ring/LL 190.0 us" in pick.reason
    # on the wire a network hop is EFA's 20 us: 6.8 + 2 x (4.2 + 20) = 55.2, plus 2.2
    hardware = options(m, "allreduce", nccl_rates(m), achieved_rates(m, m.figures))
    tree_ll = next(o for o in hardware if (o.algorithm, o.protocol) == ("tree", "LL"))
    assert tree_ll.latency_us == pytest.approx(55.2)
    assert pick.predicted_us == pytest.approx(2.2 + 55.2, abs=0.05)  # + 8 bytes' time
    # Simple pays the completion too: ring Simple crosses the network twice at 20 + 3
    ring = next(o for o in hardware if (o.algorithm, o.protocol) == ("ring", "Simple"))
    assert ring.latency_us == pytest.approx(8.4 + 28 * 3.4 + 2 * 23)


def test_an_amd_host_doubles_nccls_network_overhead_and_takes_its_ll_cap():
    m = machine_of(resolve("dgxh100x2"))
    amd = replace(m, figures=replace(m.figures, cpu="amd"))
    # ring LL across 2 nodes: 6.6 + 28 x max(0.6, overhead) + 2 x 2.7, the overhead 1 us
    # on Intel and 2 on AMD (getNetOverhead); LL's cap across 2 nodes 39.0 / 22.5
    assert option(m, "allreduce", "ring", "LL").latency_us == pytest.approx(6.6 + 28 + 5.4)
    assert option(amd, "allreduce", "ring", "LL").latency_us == pytest.approx(6.6 + 56 + 5.4)
    assert option(amd, "allreduce", "ring", "LL").gbps == pytest.approx(22.5 * 16 / 30)
    assert option(m, "allreduce", "ring", "LL").gbps == pytest.approx(39.0 * 16 / 30)


def test_nccl_algo_may_allow_several_algorithms():
    m = machine_of(resolve("dgxh100x2"))
    # Ring,Tree with Simple only (GPUDirect-TCPXO's profile): tree Simple's 8.4 +
    # 2 x (7 x 4.0 + 14) = 92.4 us beats ring Simple's 8.4 + 28 x 3.4 + 2 x 14 = 131.6
    pick = choose(m, "allreduce", 8, "ring,tree", "Simple")
    assert pick.name == "tree/Simple" and pick.option.latency_us == pytest.approx(92.4)
    assert "next ring/Simple 131.6 us" in pick.reason and "of 2 " in pick.reason


def test_a_tree_over_one_gpu_per_node_is_nccls_plain_tree_at_085():
    m = one_gpu_per_node(4)
    # the search: 48 GB/s (a 400 Gb/s NIC as NCCL counts it) fits once, doubled to 2
    # channels of 24; tree allreduce over 4 nodes: 2 x 24 x 0.92 (under 2 x 36.0), then
    # x 0.85 (the search's pattern is a plain tree with one GPU a node), x 0.5
    tree = option(m, "allreduce", "tree", "Simple")
    assert tree.channels == 2
    assert tree.gbps == pytest.approx(2 * 24 * 0.92 * 0.85 * 0.5)


def test_an_alltoall_is_its_sends_latency_and_its_busiest_link():
    m = machine_of(resolve("dgxa100"))
    # 1 KB: 128 bytes a peer, under NCCL_P2P_LL_THRESHOLD, so LL: 2.2 us of call + ring
    # LL's base 6.6 + one NVLink hop 0.6; 7/8 of the buffer over 12 x 25 x 0.77 GB/s at
    # half rate
    small = choose(m, "alltoall", 1024)
    assert small.name == "p2p/LL"
    assert small.predicted_us == pytest.approx(2.2 + 6.6 + 0.6 + 1024 * 7 / 8 / (231e3 * 0.5))
    big = choose(m, "alltoall", GB)  # Simple: base 8.4, hop 3.4
    assert big.name == "p2p/Simple"
    assert big.predicted_us == pytest.approx(2.2 + 8.4 + 3.4 + GB * 7 / 8 / 231e3)


def test_an_alltoall_where_gpus_reach_only_their_neighbours_pays_for_the_hops():
    # ring:8: a GPU's 7 peers lie 1, 1, 2, 2, 3, 3 and 4 hops away, 16 in all, so its
    # shares take 16 / 7 of the time its own two links would; torus:4x4: 4 peers at 1
    # hop, 6 at 2, 4 at 3 and 1 at 4, 32 for 15 peers. Before, every peer counted at the
    # GPU's whole rate: torus:4x4's 10^9 bytes took 13,087 us, under the 20 us a MB that
    # its links allow at the least (16 GPUs x 32 hops x 1/16 of it, 64 links of 25 GB/s)
    assert machine_of(resolve("ring:8")).alltoall_spread == pytest.approx(16 / 7)
    torus = machine_of(resolve("torus:4x4"))
    assert torus.alltoall_spread == pytest.approx(32 / 15)
    assert choose(torus, "alltoall", GB).predicted_us > 20 * GB / 1e6
    # Azure NCv4: NVLinked pairs 0-1 and 2-3, each GPU on PCIe (16 GB/s) to its own CPU:
    # a pair's 4 shares to the other pair leave over its 2 PCIe links, 4 x 1/4 GB over
    # 32 GB/s, 31,250 us for 10^9 bytes; the NVLinks join no pair to the other, and
    # every peer counted at NVLink rate (3,261 us, before)
    ncv4 = machine_of(resolve(str(FIXTURES / "azure-ncv4-topo-ncv4sh.xml")))
    assert choose(ncv4, "alltoall", 10 ** 9).predicted_us > 31_250
    # and its rings cross the same PCIe between the pairs: in an allreduce of 10^9
    # bytes each way between the pairs cross half of it as partial sums and half as
    # final sums, 10^9 bytes over 2 x 16 GB/s, at least 31,250 us (the NVLink rate of
    # every GPU gave NCCL's ring 7,003 us, 4.5 x under that bound)
    assert ncv4.intra == "pcie"
    assert choose(ncv4, "allreduce", 10 ** 9).predicted_us > 31_250

    for name in ("dgxh100", "mi300x", "fc:8"):
        assert machine_of(resolve(name)).alltoall_spread == 1.0


def test_the_alltoall_spread_is_computed_only_for_alltoall(monkeypatch):
    # on fc:1100, one box, its program and searches took 40 s of a 30 s allreduce's
    # summary, which never reads it
    import synth.predict.machine as machine

    def spread(*args):
        raise AssertionError("computed")

    monkeypatch.setattr(machine, "node_alltoall_spread", spread)
    ring = machine_of(resolve("ring:8"))
    assert choose(ring, "allreduce", GB).predicted_us > 0
    with pytest.raises(AssertionError, match="computed"):
        choose(ring, "alltoall", GB)
    # and once for every copy calibrate's fit makes (one a row and a step: a 16-row
    # alltoall log ran past 15 s)
    calls = []
    monkeypatch.setattr(machine, "node_alltoall_spread", lambda *a: calls.append(1) or 2.0)
    ring = machine_of(resolve("ring:8"))
    for _ in range(5):
        assert replace(ring, figures=ring.figures).alltoall_spread == 2.0
    assert len(calls) == 1


def test_a_gpu_alone_in_its_box_and_with_no_pcie_switch_sends_at_its_nic_link():
    # mi300xx2's GPU 0 and GPU 8, one a box, as a data-parallel communicator sees them:
    # each reaches its 400 Gb/s NIC by a link of its own (64 GB/s), no PCIe switch. A
    # reducescatter of 2 x 384 MiB sends 384 MiB a GPU over its NIC, 8,053 us at 50 GB/s
    # at the least; the GPU's rate came out 1 GB/s, and NCCL 470,000 us (synth plan
    # showed 63 x). dgxh100x2's GPUs reach the same NICs through PCIe switches
    from synth.topology.communicator import view

    mi300x = machine_of(view(resolve("mi300xx2"), [0, 8]))
    assert mi300x.intra_gbps == 64.0
    least = 384 * 2 ** 20 / 50e3
    took = choose(mi300x, "reducescatter", 2 * 384 * 2 ** 20).predicted_us
    assert least < took < 1.2 * least
    h100 = machine_of(view(resolve("dgxh100x2"), [0, 8]))
    assert took == pytest.approx(choose(h100, "reducescatter", 2 * 384 * 2 ** 20).predicted_us)


def test_a_ring_slower_than_pcie_gen3_runs_simple_on_256_threads():
    # 8 GPUs on PCIe Gen3 x16 (16 GB/s, NCCL counts 12): one ring channel of 12 GB/s,
    # 12 <= PCI_BW, so Simple runs 256 threads: a channel per 256 x 64 B = 16 KB (not
    # 512 x 64 = 32 KB); the communicator has the search's 1 channel doubled, 2
    m = Machine("pcie box", defaults("ampere"), 8, 1, "pcie", 16.0, 16.0, 0, 0.0, False,
                False, False)
    ring = option(m, "allreduce", "ring", "Simple")
    assert channel_share(m, ring, 40 * 1024) == 1.0  # 2 channels of 16 KB fit
    assert channel_share(m, ring, 20 * 1024) == 0.5


def test_lls_cap_is_on_the_whole_bus_not_on_each_channel():
    m = machine_of(resolve("dgxh100"))
    # 32 KB: ring LL on one channel (512 threads x 8 B x 8 ranks = 32 KB a channel) of
    # the communicator's 24: 18 x 25 x 0.82 = 369 GB/s / 24 at half rate, 7.7 GB/s, which
    # LL's cap of 141 GB/s on the whole bus bandwidth leaves alone (not 141 / 24)
    pick = choose(m, "allreduce", 32 * 1024)
    assert pick.name == "ring/LL"
    bus = 369 / 24 * 0.5
    assert pick.predicted_us == pytest.approx(2.2 + 6.6 + 14 * 0.6 + 32768 / (1e3 * bus * 8 / 14))


def test_costs_section_overrides_the_architectures_defaults_and_refuses_typos():
    f = figures_from_dict({"arch": "hopper", "call_us": 12, "nic": 0.9})
    assert (f.nvlink, f.nvls, f.call_us, f.nic) == (0.82, 0.85, 12.0, 0.9)
    with pytest.raises(BadInput, match="unknown key 'nvlnk'"):
        figures_from_dict({"nvlnk": 0.5})
    with pytest.raises(BadInput, match="costs.nic: expected a number from 0.01 to 1"):
        figures_from_dict({"nic": 1.5})
    with pytest.raises(BadInput, match="costs.arch: expected one of"):
        figures_from_dict({"arch": "kepler"})
    efa = figures_from_dict({"arch": "hopper", "net": "efa"})
    assert (efa.net, efa.net_us, efa.source) == ("efa", 20.0, "the topology file")
    assert figures_from_dict({"net": "roce", "net_us": 3}).net_us == 3.0
    assert figures_from_dict({}).library == "nccl"
    assert figures_from_dict({"library": "rccl"}).library == "rccl"
    with pytest.raises(BadInput, match="costs.library: expected one of nccl, rccl"):
        figures_from_dict({"library": "mpi"})
    with pytest.raises(BadInput, match="costs.net: expected one of ib, roce, efa, tcpxo"):
        figures_from_dict({"net": "myrinet"})
    with pytest.raises(BadInput, match="costs.net: expected one of"):
        figures_from_dict({"net": ["efa"]})
    assert figures_from_dict({"cpu": "amd"}).cpu == "amd"
    with pytest.raises(BadInput, match="costs.cpu: expected one of intel, amd"):
        figures_from_dict({"cpu": "arm"})


@pytest.mark.parametrize("spec,rccl", [("mi300x", True), ("dgxh100", False)])
def test_on_amd_gpus_the_reference_says_nccls_tuner_stands_in_for_rccls(spec, rccl):
    # RCCL runs the collectives there, and cost model 2 prices them with NCCL's tables
    run = synth_cli("compare", "allreduce", "--topo", spec, "--sizes", "1MB",
                    "--time-limit", "30")
    assert run.returncode == 0, run.stderr
    said = next(line for line in run.stdout.splitlines() if "as it runs there" in line)
    assert ("standing in for RCCL" in said) == rccl


def test_machine_reads_rates_and_nodes_from_the_topology():
    m = machine_of(resolve("dgx2x2"))
    # 16 V100 a box, 6 NVLinks of 25 GB/s into the switches; 8 EDR NICs of 12.5 a box
    assert (m.ranks, m.nodes, m.per_node, m.intra_gbps) == (32, 2, 16, 150.0)
    assert (m.nics, m.nic_gbps, m.arch, m.nvls) == (8, 12.5, "volta", False)
    assert math.isclose(machine_of(resolve("dgx1")).pair_gbps, 50.0)  # a double NVLink
