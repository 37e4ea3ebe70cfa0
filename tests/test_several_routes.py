"""Several routes per GPU pair (synth.topology.several_routes, `--routes several`).

Every expectation is worked out from the topology files' numbers in the comments, and
the split feasibility from the physical links directly, never by lowering twice. Units:
capacities in chunks per round, gbps x lanes / unit_gbps (dgx2: unit 25 GB/s, so a
GPU's 6 NVLink lanes are 6, its PCIe link to the switch it shares with its partner
16/25).
"""

import json
import random
from fractions import Fraction as F

import networkx as nx

from synth.construct.packing import _best_lanes
from synth.construct.splitting import whole_split
from synth.deadline import Deadline
from synth.schedule.machine import known_by_name
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower, lower_with_routes
from tests.in_process import synth_main

NV, PCIE = F(6), F(16, 25)  # dgx2: a GPU's NVSwitch port, its PCIe link (each way)


def test_partners_on_one_pcie_switch_get_both_routes():
    lowering = lower_with_routes(resolve("dgx2", routes="several"))
    link = lowering.model.link
    # gpu0 and gpu1 share pcie0: NVSwitch and PCIe side by side
    assert link[0, 1].capacity == link[1, 0].capacity == NV + PCIE
    assert lowering.further[0, 1] == (("gpu0", "pcie0", "gpu1"),)
    # gpu0 and gpu2 share no PCIe switch: NVSwitch alone, as on the one-route machine
    assert link[0, 2].capacity == NV and (0, 2) not in lowering.further
    assert lower(resolve("dgx2")).link[0, 1].capacity == NV
    assert len(lowering.further) == 16  # 8 partner pairs, both ways


def _loads(rng):
    """Random loads on every rank link of one dgx2, in hundredths so the checks are
    exact: about 4 out of and into each GPU, but one GPU sends and another receives
    near its NVSwitch port's 6 and past it, and partners' loads reach past 16/25."""
    load = {(a, b): F(rng.randint(15, 35), 100) for a in range(16) for b in range(16)
            if a != b}
    busy, taking = rng.sample(range(16), 2)
    for x in range(16):
        if x != busy:
            load[busy, x] = F(rng.randint(37, 47), 100)
        if x != taking:
            load[x, taking] = F(rng.randint(37, 47), 100)
    for a in range(16):
        load[a, a ^ 1] = F(rng.randint(0, 90), 100)
    return load


def _fits_physically(load):
    """Whether a dgx2 carries `load` when each partner pair may send part of its load
    over its PCIe switch (worked out from dgx2.yaml, not from synth): each GPU has one
    partner, so the part s(a, b) that partners a, b = a ^ 1 send over PCIe must cover
    what a's NVSwitch port and b's cannot, out(a) - 6 and in(b) - 6, within its PCIe
    link (16/25) and its own load; and the 48-lane trunk between the boards carries
    its side's sum."""
    out = {a: sum(v for (s, _), v in load.items() if s == a) for a in range(16)}
    into = {b: sum(v for (_, d), v in load.items() if d == b) for b in range(16)}
    for a in range(16):
        b = a ^ 1
        if max(F(0), out[a] - NV, into[b] - NV) > min(load[a, b], PCIE):
            return False
    across = [sum(v for (s, d), v in load.items() if (s < 8) == side and (d < 8) != side)
              for side in (True, False)]
    return max(across) <= 48


def _fits_model(model, load):
    return (all(load[l.src, l.dst] <= l.capacity for l in model.links)
            and all(sum(load[p] for p in g.links) <= g.capacity for g in model.groups))


def test_the_groups_allow_every_split_and_nothing_more():
    several = lower(resolve("dgx2", routes="several"))
    widest = lower(resolve("dgx2"))
    rng = random.Random(28)
    seen = {True: 0, False: 0}
    only_with_pcie = 0
    for _ in range(300):
        load = _loads(rng)
        physical = _fits_physically(load)
        assert _fits_model(several, load) == physical
        seen[physical] += 1
        only_with_pcie += physical and not _fits_model(widest, load)
    assert min(seen.values()) > 30  # both answers tried often
    assert only_with_pcie > 10  # loads only the second route carries


def test_a_hop_carries_one_pair_of_several_routes_at_most(tmp_path):
    # three GPUs on one NVSwitch (2 lanes of 25) and one PCIe switch (16 GB/s): in rank
    # order, (0, 1) takes its PCIe route first, which claims gpu0->pcie and pcie->gpu1;
    # (0, 2) would cross gpu0->nvswitch, already (0, 1)'s, and so keeps one route; (1, 0)
    # crosses none of (0, 1)'s hops and takes both; the rest each cross a claimed hop
    doc = {"name": "three", "unit_gbps": 25, "gpus": 3,
           "switches": [{"name": "nvs", "kind": "nvswitch"},
                        {"name": "pcie", "kind": "pcie_switch"}],
           "links": [{"between": [f"gpu{i}", "nvs"], "gbps": 25, "count": 2} for i in range(3)]
           + [{"between": [f"gpu{i}", "pcie"], "gbps": 16} for i in range(3)]}
    path = tmp_path / "three.json"
    path.write_text(json.dumps(doc))
    link = lower(resolve(str(path), routes="several")).link
    both = F(2) + F(16, 25)
    assert {p: l.capacity for p, l in link.items()} == {
        (0, 1): both, (1, 0): both, (0, 2): 2, (1, 2): 2, (2, 0): 2, (2, 1): 2}
    # where the NVSwitch computes (NVLS), its ports belong to one route: none split
    doc["switches"][0]["can"] = ["reduce", "multicast"]
    path.write_text(json.dumps(doc))
    assert lower(resolve(str(path), routes="several")).link[0, 1].capacity == 2


def test_a_pair_crossed_twice_keeps_one_route(tmp_path):
    # gpu0 reaches gpu1 over s1, t1 and over s2, t2 (3 hops each, 25 GB/s a link); with
    # t1 joined to s2, gpu2's only route to gpu3 (gpu2 s1 t1 s2 t2 gpu3) crosses s1->t1
    # and s2->t2, one hop of each: the groups would count its load twice, so (0, 1)
    # keeps one route, and so does (1, 0), crossed by (3, 2)
    pairs = [("gpu0", "s1"), ("gpu0", "s2"), ("s1", "t1"), ("t1", "gpu1"), ("s2", "t2"),
             ("t2", "gpu1"), ("gpu2", "s1"), ("t2", "gpu3")]
    doc = {"name": "crossed", "unit_gbps": 25, "gpus": 4,
           "switches": [{"name": n, "kind": "pcie_switch"} for n in ("s1", "t1", "s2", "t2")]}
    path = tmp_path / "crossed.json"
    for joined, expected in ((False, 2), (True, 1)):
        links = pairs + [("t1", "s2")] * joined
        doc["links"] = [{"between": list(p), "gbps": 25} for p in links]
        path.write_text(json.dumps(doc))
        link = lower(resolve(str(path), routes="several")).link
        assert link[0, 1].capacity == link[1, 0].capacity == expected


def test_the_name_says_the_routes_and_resolves_back():
    machine = resolve("dgx2x2", routes="several")
    assert machine.name == "dgx2x2-several-routes"
    assert lower(resolve("dgx2x2-several-routes")) == lower(machine)
    degraded = resolve("dgx2x2", edits=("nic2",), routes="several")
    assert degraded.name == "dgx2x2-several-routes-without-nic2"
    assert degraded.healthy.name == "dgx2x2-several-routes"  # compared like with like
    assert lower(resolve(degraded.name)) == lower(degraded)
    # the suffix after the edits names the same machine (a user trial wrote it so)
    assert resolve("dgx2x2-without-nic2-several-routes").name == degraded.name
    assert known_by_name(degraded.name) and known_by_name("dgx2-several-routes")
    assert not known_by_name("nosuch-several-routes")


def test_whole_split_reaches_the_bound_in_whole_lanes():
    # dgx2x2 on several routes: each GPU takes in at most 6 + 16/25 = 166/25 a round and
    # needs 31 shards, so at most 166/775 trees per root a round; in L = 775 lanes that
    # is k = 166 trees per root. Checked here with networkx's max-flow (Edmonds: the
    # trees pack iff a source joined to every root by k lanes reaches every rank with
    # 32 k)
    model = lower(resolve("dgx2x2", routes="several"))
    rate, lanes = F(166, 775), 775
    split = whole_split(model, list(range(32)), None, rate, lanes, Deadline.after(60))
    assert split is not None
    assert all((l.capacity * lanes).denominator == 1 for l in split.links)
    kept = {(l.src, l.dst): l.capacity for l in split.links}
    assert all(c <= model.link[p].capacity for p, c in kept.items())
    assert all(sum(kept.get(p, 0) for p in g.links) <= g.capacity for g in model.groups)
    graph = nx.DiGraph()
    for (a, b), c in kept.items():
        graph.add_edge(a, b, capacity=int(c * lanes))
    for r in range(32):
        graph.add_edge("s", r, capacity=166)
    for v in range(32):
        assert nx.maximum_flow_value(graph, "s", v) >= 32 * 166


def test_the_packing_takes_the_whole_split_at_the_bound():
    # dgx2x2's program split falls 0.2% short of 166/775 in the lanes MAX_TREES allows
    # (its vertex's denominators); the lanes the packing grows its trees in are the
    # whole split's instead: 166 trees per root in 775 lanes, the bound itself
    model = lower(resolve("dgx2x2", routes="several"))
    lanes, per_capacity, per_root = _best_lanes(model, list(range(32)), None, Deadline(),
                                                F(166, 775))
    assert (per_capacity, per_root) == (775, 166)


def test_allgather_on_several_routes_verifies_by_name(tmp_path):
    out = tmp_path / "out"
    ran = synth_main("allgather", "--topo", "dgx2", "--routes", "several", "--method",
                     "constructed", "--model", "line-rate", "--time-limit", "120", "-o", out)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("allgather on dgx2-several-routes (16 ranks)")
    # one GPU takes in 6 + 16/25 = 166/25 a round and needs 15 shards: 375/166 rounds a
    # chunk at best; on one route it would be 15/6 = 5/2
    assert "375/166 rounds per chunk" in ran.stdout.splitlines()[0]
    files = sorted(out.rglob("*.json"))
    assert files
    checked = synth_main("verify", files[0])
    assert checked.returncode == 0, checked.stderr
    assert "own model" not in checked.stdout  # the machine derived from its name


FOUR = """name: four
unit_gbps: 25
gpus: 4
switches:
  - {name: nvswitch, kind: nvswitch}
  - {name: pcie0, kind: pcie_switch}
  - {name: pcie1, kind: pcie_switch}
links:
  - {between: [gpu0, nvswitch], gbps: 25, count: 4, alpha_us: 0.35}
  - {between: [gpu1, nvswitch], gbps: 25, count: 4, alpha_us: 0.35}
  - {between: [gpu2, nvswitch], gbps: 25, count: 4, alpha_us: 0.35}
  - {between: [gpu3, nvswitch], gbps: 25, count: 4, alpha_us: 0.35}
  - {between: [gpu0, pcie0], gbps: 16, alpha_us: 0.35}
  - {between: [gpu1, pcie0], gbps: 16, alpha_us: 0.35}
  - {between: [gpu2, pcie1], gbps: 16, alpha_us: 0.35}
  - {between: [gpu3, pcie1], gbps: 16, alpha_us: 0.35}
costs: {arch: volta}
"""
WORKLOAD = """name: one allreduce
communicators:
  world: {per: box}
collectives:
  - {communicator: world, collective: allreduce, size: 64MB, count: 1}
"""


def test_a_plan_compares_with_nccl_on_one_route(tmp_path):
    # NCCL sends each pair's chunks over NVLink alone, whatever the plan's schedules
    # assume: its time is the same on --routes several as on widest (the NCCL-style
    # stand-in made on the summed links, with each group's traffic on one route, made
    # it 1.16 x slower), and the plan says what the routes assume
    (tmp_path / "four.yaml").write_text(FOUR)
    (tmp_path / "wl.yaml").write_text(WORKLOAD)
    docs = {}
    for routes in ("widest", "several"):
        ran = synth_main("plan", "wl.yaml", "--topo", "four.yaml", "--routes", routes,
                         "--method", "constructed", "--time-limit", "60", "-o", routes,
                         "--json", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        docs[routes] = json.loads(ran.stdout)
    assert docs["several"]["step_us"]["nccl"] == docs["widest"]["step_us"]["nccl"]
    assert (docs["several"]["routes"], docs["several"]["several_route_pairs"]) == ("several", 4)
    assert docs["widest"]["routes"] == "widest" and "several_route_pairs" not in docs["widest"]
    assert "4 GPU pairs on two routes or more" in (tmp_path / "several" / "report.md").read_text()
    schedule = next((tmp_path / "several" / "schedules").rglob("*.json"))
    exported = synth_main("export", schedule, "--to", "msccl-xml", "-o", tmp_path / "a.xml")
    assert exported.returncode == 0 and "sends each pair's chunks over one" in exported.stderr
    mismatched = synth_main("verify", schedule, "--topo", tmp_path / "four.yaml")
    assert mismatched.returncode == 1
    assert mismatched.stderr.rstrip().endswith("made with --routes several: give that too")


def test_a_name_of_several_routes_with_widest_or_twice_is_refused():
    for args in (("--topo", "dgx2-several-routes", "--routes", "widest"),
                 ("--topo", "dgx2-several-routes-several-routes"),
                 ("--topo", "dgx2-several-routes-without-nic0-several-routes")):
        ran = synth_main("bounds", "allgather", *args)
        assert ran.returncode == 2 and ran.stderr.count("\n") == 1
        assert "names a machine of several routes" in ran.stderr
    # calibrate fits NCCL's times, one route's, and its file could not say several
    log = synth_main("calibrate", "no.log", "--topo", "dgx2", "--routes", "several", "-o",
                     "out.yaml")
    assert log.returncode == 2 and "calibrate the machine without --routes several" in log.stderr
    shown = json.loads(synth_main("topo", "show", "dgx1", "--routes", "several", "--json").stdout)
    assert (shown["routes"], shown["several_route_pairs"]) == ("several", 0)
    shown = json.loads(synth_main("topo", "show", "dgx2", "--routes", "several", "--json").stdout)
    assert shown["several_route_pairs"] == 16


def test_a_pair_of_too_many_hop_choices_keeps_one_route(tmp_path):
    # gpu0 and gpu1 joined by k rails of 6 hops (gpu, NIC, leaf, spine, leaf, NIC, gpu),
    # each 25 GB/s: k routes of as few hops, 6^k choices of one hop per route; 6^3 = 216
    # are within MAX_CHOICES (256) and the pair gets all three rails, 6^4 = 1,296 are
    # not and it keeps one (the groups would be that many)
    for k, expected in ((3, 3), (4, 1)):
        chain = [["gpu0", f"nica{r}", f"leafa{r}", f"spine{r}", f"leafb{r}", f"nicb{r}",
                  "gpu1"] for r in range(k)]
        doc = {"name": f"rails{k}", "unit_gbps": 25, "gpus": 2,
               "switches": [{"name": n, "kind": "net_switch"} for c in chain for n in c[2:5]],
               "nics": [n for c in chain for n in (c[1], c[5])],
               "links": [{"between": [u, v], "gbps": 25} for c in chain
                         for u, v in zip(c, c[1:])]}
        path = tmp_path / f"rails{k}.json"
        path.write_text(json.dumps(doc))
        assert lower(resolve(str(path), routes="several")).link[0, 1].capacity == expected


def test_one_group_is_timed_on_its_own_model():
    # a communicator of one group shares no link with another: its schedules' own
    # model is what they cost. On several routes the physical traffic is only a guess
    # (each pair's split over its routes by their bottlenecks, 150:16 on dgx2), and
    # it made the bandwidth-bound ring look 1.096 x slower than its model, every
    # candidate of a plan with it
    from synth.construct.baselines import baselines
    from synth.plan.planner import Candidate, with_groups
    from synth.plan.traffic import busiest_rate
    from synth.schedule.cost import schedule_cost

    topo = resolve("dgx2", routes="several")
    ring = next(b.schedule for b in baselines(lower(topo), "allgather")
                if b.name.startswith("ring"))
    alone = schedule_cost(ring).us_per_byte
    assert busiest_rate(topo, [list(range(16))], ring) > alone * 1.01  # the guess
    c = Candidate("ring", ring, 1.0, alone)
    assert with_groups(c, topo, [list(range(16))]) == c
