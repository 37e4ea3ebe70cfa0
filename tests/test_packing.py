"""Packed spanning trees (synth.construct.packing) and the schedules made from them
(synth.construct.tree_schedules): broadcast, reduce, allgather, reducescatter, allreduce."""

import json
import random
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import networkx as nx
import pytest

from synth.bounds import bounds
from synth.construct.packing import pack_paths, pack_trees
from synth.construct.splitting import candidate_splits
import synth.construct.tree_schedules as tree_schedules
from synth.construct.tree_schedules import (allgather_schedule, allreduce_schedule,
                                            broadcast_schedule, steady_rounds_per_chunk,
                                            tree_search)
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict
from synth.schedule.ir import Step
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower_with_routes
from synth.topology.physical import topology_from_dict
from tests.in_process import synth_main


def random_direct_topology(seed, gpus=7):
    """A connected random graph of direct links (no switch), 1 to 3 lanes each."""
    rng = random.Random(seed)
    pairs = {(i, i + 1) for i in range(gpus - 1)}  # a path: connected
    pairs |= {tuple(sorted(rng.sample(range(gpus), 2))) for _ in range(gpus)}
    links = [{"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25, "count": rng.randint(1, 3),
              "alpha_us": 0.7} for a, b in sorted(pairs)]
    return topology_from_dict({"name": f"random{seed}", "unit_gbps": 25, "gpus": gpus,
                               "links": links})


def random_switched_topology(seed, gpus=6):
    """Random direct links, an NVSwitch-like switch under some GPUs (random port
    widths), and two NICs on a network switch, one of them shared by two GPUs: groups
    of every kind the lowering makes."""
    rng = random.Random(seed)
    on_switch = sorted(rng.sample(range(gpus), 4))
    links = [{"between": [f"gpu{g}", "sw"], "gbps": 25, "count": rng.randint(1, 3),
              "alpha_us": 0.7} for g in on_switch]
    links += [{"between": [f"gpu{a}", f"gpu{b}"], "gbps": 25, "alpha_us": 0.7}
              for a, b in {tuple(sorted(rng.sample(range(gpus), 2))) for _ in range(3)}]
    off = [g for g in range(gpus) if g not in on_switch]  # reach the others by NIC
    nic = {g: "nic0" for g in off} | {on_switch[0]: "nic1"}
    links += [{"between": [f"gpu{g}", name], "gbps": 12.5, "alpha_us": 1.0}
              for g, name in nic.items()]
    links += [{"between": [name, "net"], "gbps": 12.5, "alpha_us": 1.0}
              for name in ("nic0", "nic1")]
    return topology_from_dict({
        "name": f"switched{seed}", "unit_gbps": 25, "gpus": gpus, "links": links,
        "switches": [{"name": "sw", "kind": "nvswitch"}, {"name": "net",
                                                         "kind": "net_switch"}],
        "nics": ["nic0", "nic1"]})


# (topology, collective, root): direct links, switches, NICs shared by two GPUs; every
# one of these reaches the cut bound of the physical graph in the steady state
CASES = [(resolve("dgx1"), "broadcast", 3), (resolve("dgx1"), "allgather", None),
         (resolve("ring:5"), "allgather", None), (resolve("line:3"), "broadcast", 1),
         (resolve("torus:3x3"), "broadcast", 4), (resolve("switch:4"), "allgather", None),
         (resolve("switch:4"), "broadcast", 0), (resolve("dgxh100"), "broadcast", 2),
         (random_direct_topology(1), "allgather", None),
         (random_direct_topology(2), "broadcast", 0),
         (random_switched_topology(3), "allgather", None),
         (random_switched_topology(3), "broadcast", 1),
         (random_switched_topology(4), "allgather", None),
         (random_switched_topology(4), "broadcast", 0)]


def _id(case):
    return getattr(case, "name", str(case))


def _packable(lanes: dict, roots: dict, n: int) -> bool:
    """Edmonds' condition, by networkx max-flows: a source joined to each root by as
    many lanes as trees it roots reaches every rank with the total."""
    g = nx.DiGraph()
    g.add_edges_from((u, v, {"capacity": c}) for (u, v), c in lanes.items() if c > 0)
    g.add_edges_from(("s", r, {"capacity": k}) for r, k in roots.items())
    total = sum(roots.values())
    return all(v in g and nx.maximum_flow_value(g, "s", v) >= total for v in range(n))


@pytest.mark.parametrize("topo,name,root", CASES, ids=_id)
def test_packed_trees_are_spanning_arborescences_within_the_lanes_and_reach_the_bound(
        topo, name, root):
    lowering = lower_with_routes(topo)
    model = lowering.model
    roots = [root] if root is not None else list(range(model.ranks))
    packing = pack_trees(model, roots)
    scale = packing.lanes_per_capacity
    # the lanes must fit every link and every group of the real model, whatever split
    # the packing chose
    used = Counter()
    for tree in packing.trees:
        for v, u in tree.parent.items():
            used[(u, v)] += tree.weight
    for (u, v), n in used.items():
        assert n <= model.link[(u, v)].capacity * scale
    for g in model.groups:
        assert sum(used[p] for p in g.links) <= g.capacity * scale, g.name
    for tree in packing.trees:
        t = nx.DiGraph(list((u, v) for v, u in tree.parent.items()))
        assert set(t) == set(range(model.ranks))
        assert nx.is_arborescence(t) and t.in_degree(tree.root) == 0
    assert all(packing.weight(r) == packing.per_root for r in roots)
    # k / L trees per root per round: exactly the physical cut bound
    b = bounds(lowering, make_collective(name, model.ranks, 1, root))
    assert packing.rate == 1 / b.rounds_per_chunk


@pytest.mark.parametrize("name,root", [("allgather", None), ("broadcast", 0)])
def test_where_an_even_share_of_the_switch_falls_short_the_program_split_reaches_the_bound(
        name, root):
    # random switched topology 4: sharing each switch port and NIC evenly among its
    # links lets 1/4 chunk per round out of every GPU (allgather; 5/4 from rank 0 for
    # broadcast), the cuts of the physical graph allow 3/10 (3/2)
    lowering = lower_with_routes(random_switched_topology(4))
    model = lowering.model
    roots = [root] if root is not None else list(range(model.ranks))
    b = bounds(lowering, make_collective(name, model.ranks, 1, root))
    even = next(candidate_splits(model, roots))
    assert pack_trees(even, roots).rate < 1 / b.rounds_per_chunk
    assert pack_trees(model, roots).rate == 1 / b.rounds_per_chunk


def test_the_program_split_stops_at_the_deadline_and_the_even_splits_stand(monkeypatch):
    # the split's linear program ran 6 s past a report's deadline on a degraded 64-GPU
    # cluster (HiGHS had no time limit): past the deadline no program split is made,
    # only the even one
    import synth.lp
    from synth.construct import splitting
    from synth.deadline import Deadline

    model = lower_with_routes(random_switched_topology(4)).model
    everyone = list(range(model.ranks))
    assert len(list(candidate_splits(model, everyone))) == 2  # one even, one program
    told = []  # HiGHS is told the time left
    solve = synth.lp.solve
    monkeypatch.setattr(synth.lp, "solve",
                        lambda *a, **k: told.append(k["seconds"]) or solve(*a, **k))
    splitting.program_split(model, everyone, deadline=Deadline.after(60))
    assert 0 < told[0] <= 60
    assert len(list(candidate_splits(model, everyone, None, Deadline(0.0)))) == 1  # even
    with pytest.raises(splitting.OutOfTime):
        splitting.program_split(model, everyone, deadline=Deadline(0.0))
    packing = pack_trees(model, everyone, Deadline.after(60))
    assert packing.rate == Fraction(3, 10)  # the program's split, given the time
    # HiGHS's limit is the time left, taken a moment before the deadline: stopped by it
    # just before the deadline passed was an internal error (a RuntimeError, exit 3)
    stopped = synth.lp.Solution("time", None, None)
    monkeypatch.setattr(synth.lp, "solve", lambda *a, **k: stopped)
    with pytest.raises(splitting.OutOfTime):
        splitting.program_split(model, everyone, deadline=Deadline.after(60))


@pytest.mark.parametrize("topo,root", [(resolve("dgx1"), 3), (resolve("ring:5"), None),
                                       (random_direct_topology(2), None)], ids=_id)
def test_one_tree_more_per_root_does_not_pack_edmonds_says_so(topo, root):
    model = lower_with_routes(topo).model
    roots = [root] if root is not None else list(range(model.ranks))
    packing = pack_trees(model, roots)
    lanes = {(l.src, l.dst): int(l.capacity * packing.lanes_per_capacity)
             for l in model.links}  # no groups here: the lanes are the links
    assert _packable(lanes, dict.fromkeys(roots, packing.per_root), model.ranks)
    assert not _packable(lanes, dict.fromkeys(roots, packing.per_root + 1), model.ranks)


SCHEDULE_CASES = [(resolve("dgx1"), "gather", 3), (resolve("dgx1"), "scatter", 0),
                  (resolve("switch:4"), "gather", 1), (resolve("dgxh100"), "scatter", 5),
                  (random_switched_topology(3), "gather", 2),
                  (random_switched_topology(4), "scatter", 0),
                  (resolve("dgx1"), "reduce", 3), (resolve("ring:5"), "reducescatter", None),
                  (resolve("switch:4"), "allreduce", None),
                  (random_switched_topology(3), "reducescatter", None)] + CASES


@pytest.mark.parametrize("topo,name,root", SCHEDULE_CASES, ids=_id)
def test_tree_schedules_verify_and_reach_the_bound_up_to_the_pipeline_fill(
        topo, name, root):
    lowering = lower_with_routes(topo)
    b = bounds(lowering, make_collective(name, topo.ranks, 1, root))
    search = tree_search(lowering.model, name, root, Limits())
    assert search.points
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
        depth, batches = len(p.schedule.steps), p.schedule.batches
        # a step carries at most a link's lanes, so R / C is at most the rate the trees
        # reach (here the bound) times the fill; no schedule beats the bound
        assert p.ratio >= b.rounds_per_chunk
        if name != "allreduce":  # an allreduce's two phases may share a link direction
            assert p.ratio <= b.rounds_per_chunk * Fraction(depth + batches - 1, batches)
    best = min(search.points, key=lambda p: p.ratio)
    assert best.ratio / b.rounds_per_chunk <= Fraction(101, 100)


@pytest.mark.parametrize("topo,root", [(resolve("dgx1"), 3), (resolve("torus:3x3"), 4),
                                       (random_switched_topology(4), 0)], ids=_id)
def test_gather_paths_carry_every_source_s_share_within_the_lanes_at_the_bound(topo, root):
    lowering = lower_with_routes(topo)
    model = lowering.model
    sources = [r for r in range(model.ranks) if r != root]
    paths = pack_paths(model, sources, root)
    scale, used, carried = paths.lanes_per_capacity, Counter(), Counter()
    for source, path, units in paths.paths:
        assert path[0] == source and path[-1] == root and len(set(path)) == len(path)
        carried[source] += units
        for a, b in zip(path, path[1:]):
            used[(a, b)] += units
    assert all(carried[s] == paths.per_source for s in sources)
    for (a, b), n in used.items():
        assert n <= model.link[(a, b)].capacity * scale
    for g in model.groups:
        assert sum(used[p] for p in g.links) <= g.capacity * scale, g.name
    b = bounds(lowering, make_collective("gather", model.ranks, 1, root))
    assert Fraction(paths.per_source, scale) == 1 / b.rounds_per_chunk


def test_the_verifier_rejects_a_scatter_whose_hops_run_forwards():
    # a scatter is the gather on the reversed links run backwards; without the reversal
    # in time a chunk leaves a rank before it has arrived there
    model = lower_with_routes(resolve("dgx1")).model
    search = tree_search(model, "scatter", 0, Limits())
    good = min(search.points, key=lambda p: p.steps).schedule
    verify_schedule(schedule_to_dict(good))
    if len(good.steps) > 1:
        forwards = replace(good, steps=tuple(reversed(good.steps)))
        with pytest.raises(ScheduleInvalid):
            verify_schedule(schedule_to_dict(forwards))
    assert len(good.steps) > 1  # dgx1's root reaches some ranks only through others


def test_dgx2x2_broadcast_packs_through_nvswitches_and_shared_nics_at_the_bound():
    lowering = lower_with_routes(resolve("dgx2x2"))
    b = bounds(lowering, make_collective("broadcast", 32, 1, 0))
    search = tree_search(lowering.model, "broadcast", 0, Limits())
    best = min(search.points, key=lambda p: p.ratio)
    verify_schedule(schedule_to_dict(best.schedule))
    depth, batches = len(best.schedule.steps), best.schedule.batches
    fill = Fraction(depth + batches - 1, batches)
    assert b.rounds_per_chunk <= best.ratio <= b.rounds_per_chunk * fill
    assert best.ratio / b.rounds_per_chunk < Fraction(1003, 1000)


def test_the_verifier_rejects_broken_tree_schedules():
    model = lower_with_routes(resolve("dgx1")).model
    good = broadcast_schedule(model, pack_trees(model, [3]), 4)
    verify_schedule(schedule_to_dict(good))
    first = good.steps[0]
    dropped = replace(good, steps=(Step(first.rounds, first.sends[1:]),) + good.steps[1:])
    early = replace(good, steps=(good.steps[1], good.steps[0]) + good.steps[2:])
    overlapping = replace(good, pipeline=replace(good.pipeline, stride=1))
    for broken in (dropped, early, overlapping):
        with pytest.raises(ScheduleInvalid):
            verify_schedule(schedule_to_dict(broken))


def test_the_verifier_rejects_an_allgather_tree_schedule_that_overloads_a_nic():
    # the trees fit the split of each shared NIC; a step that sends more over a NIC
    # than its group allows in the rounds stated is refused
    topo = random_switched_topology(3)
    model = lower_with_routes(topo).model
    good = allgather_schedule(model, pack_trees(model, list(range(model.ranks))), 1)
    verify_schedule(schedule_to_dict(good))
    nic = max(model.groups, key=lambda g: len(g.links))
    loads = [sum(x.count for x in step.sends if (x.src, x.dst) in nic.links)
             for step in good.steps]
    busiest = loads.index(max(loads))
    squeezed = Step(max(1, int(loads[busiest] / nic.capacity) - 1) if loads[busiest] > 1
                    else 1, good.steps[busiest].sends)
    if squeezed.rounds == good.steps[busiest].rounds:  # nothing to squeeze: double up
        squeezed = Step(good.steps[busiest].rounds, good.steps[busiest].sends * 2)
    broken = replace(good, steps=good.steps[:busiest] + (squeezed,)
                     + good.steps[busiest + 1:])
    with pytest.raises(ScheduleInvalid):
        verify_schedule(schedule_to_dict(broken))


def test_the_cli_frontier_of_dgx1_broadcast_reaches_the_bound_within_2_percent(tmp_path):
    result = synth_main("broadcast", "--topo", "dgx1", "--root", "3", "--json", "--out",
                        str(tmp_path), "--no-progress", "--time-limit", "60")
    assert result.returncode == 0, result.stderr
    frontier = json.loads(result.stdout)["frontier"]
    best = min(frontier, key=lambda p: p["ratio_to_bound"])
    assert best["ratio_to_bound"] < 1.02 and best["method"].startswith("trees")
    out = tmp_path / "best.xml"
    exported = synth_main("export", best["file"], "--to", "msccl-xml", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "right result" in exported.stdout + exported.stderr
    checked = synth_main("verify", best["file"])
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("spec", ["line:3", "line:4", "dgx1", "ring:5", "switched4"])
def test_allreduce_by_trees_verifies(spec):
    topo = random_switched_topology(4) if spec == "switched4" else resolve(spec)
    lowering = lower_with_routes(topo)
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks, 1))
    search = tree_search(lowering.model, "allreduce", None, Limits())
    assert search.points
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
        assert p.ratio >= b.rounds_per_chunk
    # symmetric ones: reducescatter + allgather rates add up to the allreduce bound (lines:
    # reduce + broadcast through the middle, whose phases never meet on a link)
    if spec != "switched4":
        best = min(search.points, key=lambda p: p.ratio)
        assert best.ratio / b.rounds_per_chunk <= Fraction(101, 100)


def test_mesh_allreduce_reaches_the_bound_on_links_split_between_the_phases():
    # one packing used both ways loads a link with both phases: 1.3 x the bound here
    lowering = lower_with_routes(resolve("mesh:4x4"))
    model = lowering.model
    bound = bounds(lowering, make_collective("allreduce", model.ranks, 1)).rounds_per_chunk
    shared = pack_trees(model, list(range(model.ranks)))
    alone = allreduce_schedule(model, shared, shared, 64)
    assert steady_rounds_per_chunk(alone) == bound * Fraction(13, 10)
    search = tree_search(model, "allreduce", None, Limits(), None, bound)
    deepest = [p.schedule for p in search.points if p.schedule.batches == 1024]
    assert min(steady_rounds_per_chunk(s) for s in deepest) == bound
    assert "on links split between the phases" in search.stopped


def test_the_verifier_rejects_an_allreduce_whose_reduction_is_a_copy():
    from synth.schedule.transform import reverse_model

    model = lower_with_routes(resolve("line:3")).model
    good = allreduce_schedule(model, pack_trees(reverse_model(model), [1]),
                              pack_trees(model, [1]), 4)
    verify_schedule(schedule_to_dict(good))
    first = good.steps[0]
    copied = replace(good, steps=(Step(first.rounds, tuple(replace(x, op="copy")
                                                           for x in first.sends)),)
                     + good.steps[1:])
    with pytest.raises(ScheduleInvalid):
        verify_schedule(schedule_to_dict(copied))


def test_the_allreduce_root_is_chosen_by_what_its_pipeline_costs():
    # random graph 26: root 4 packs as many trees, shallower, but its two phases share
    # link directions (2 rounds a step, 2x the bound); roots 1 and 3 reach 1.01x
    lowering = lower_with_routes(random_direct_topology(26, 5))
    b = bounds(lowering, make_collective("allreduce", lowering.model.ranks, 1))
    search = tree_search(lowering.model, "allreduce", None, Limits())
    best = min(search.points, key=lambda p: p.ratio)
    assert best.ratio / b.rounds_per_chunk <= Fraction(102, 100)


@pytest.mark.parametrize("name,root", [("broadcast", 0), ("allgather", None)])
def test_capacities_of_awkward_ratio_are_packed_on_coarser_lanes_near_the_bound(name, root):
    # PCIe at 15.754 GB/s beside NVLink at 25: the exact rate needs tens of thousands of
    # trees per root; capped at 1024 on the exact lanes, the first trees took the thin
    # links a thousand times over (4x the bound). Coarser lanes keep it near the bound.
    topo = topology_from_dict({
        "name": "pcie4", "unit_gbps": 25, "gpus": 4,
        "links": [{"between": ["gpu0", "gpu1"], "gbps": 25},
                  {"between": ["gpu2", "gpu3"], "gbps": 25}]
        + [{"between": [f"gpu{i}", "plx"], "gbps": 15.754} for i in range(4)],
        "switches": [{"name": "plx", "kind": "pcie_switch"}]})
    lowering = lower_with_routes(topo)
    b = bounds(lowering, make_collective(name, 4, 1, root))
    search = tree_search(lowering.model, name, root, Limits())
    for p in search.points:
        verify_schedule(schedule_to_dict(p.schedule))
    best = min(search.points, key=lambda p: p.ratio)
    assert b.rounds_per_chunk <= best.ratio <= b.rounds_per_chunk * Fraction(101, 100)


def test_trees_are_packed_again_only_where_the_first_share_built_nothing():
    # the frontier's second try: a first try the time stopped before any point is
    # replaced by a packing in the time left (ring:4's allgather: two trees per root,
    # 3 rounds a chunk over its 2 links each way, the bound 3/2 per chunk); a first try
    # that built points, or one that was not stopped by the time, is kept as it was
    from synth.construct.tree_schedules import tree_search_again
    from synth.deadline import Deadline
    from synth.search.pareto import Search
    model = lower_with_routes(resolve("ring:4")).model
    limits = Limits(time_limit=60)
    stopped = Search(stopped="out of time", complete=False)
    again = tree_search_again(stopped, model, "allgather", None, limits, Deadline.after(60))
    assert again is not stopped and again.points
    for p in again.points:
        verify_schedule(schedule_to_dict(p.schedule))
    assert min(Fraction(p.rounds, p.chunks) for p in again.points) >= Fraction(3, 2)
    built = Search(points=[again.points[0]], stopped="out of time", complete=False)
    assert tree_search_again(built, model, "allgather", None, limits,
                             Deadline.after(60)) is built
    done = Search(stopped="2 trees per root")
    assert tree_search_again(done, model, "allgather", None, limits,
                             Deadline.after(60)) is done
    # no time left: the first try stands
    assert tree_search_again(stopped, model, "allgather", None, limits,
                             Deadline.after(0)) is stopped


def test_ctrl_c_in_the_second_packing_is_kept(monkeypatch):
    # an interrupted second try built nothing, but the interrupt must reach the command
    # (handing back the first try hid it, and the job went on as if not interrupted)
    from synth.construct import tree_schedules
    from synth.deadline import Deadline
    from synth.search.pareto import Search
    monkeypatch.setattr(tree_schedules, "tree_search",
                        lambda *a, **k: Search(stopped="interrupted", complete=False))
    first = Search(stopped="out of time", complete=False)
    again = tree_schedules.tree_search_again(first, lower_with_routes(resolve("ring:4")).model,
                                             "allgather", None, Limits(), Deadline.after(60))
    assert again.stopped == "interrupted"


@pytest.mark.parametrize("name", ["allgather", "allreduce"])
def test_trees_too_many_to_hold_are_refused_before_packing(name, monkeypatch):
    # a tree per root is at least N - 1 sends a root: at 4096 GPUs 16.7 million a batch,
    # and packing and building them took 18 GB before running out of time. Past the cap
    # nothing is packed; under it the same search builds verified points
    model = lower_with_routes(resolve("ring:8")).model
    monkeypatch.setattr(tree_schedules, "pack_trees", lambda *a, **k: pytest.fail("packed"))
    monkeypatch.setattr(tree_schedules, "pack_symmetric",
                        lambda *a, **k: pytest.fail("packed"))
    monkeypatch.setattr(tree_schedules, "MAX_BATCH_MOVES", 8 * 7 - 1)
    refused = tree_search(model, name, None, Limits())
    assert not refused.points
    assert refused.stopped == ("not packed: a batch of at least 56 sends, over the 55 a "
                               "build can hold in memory")
    # gather and scatter are paths into one root (about N - 1 sends), not a tree per
    # rank: the cap does not count them so
    gathered = tree_search(model, "gather", 0, Limits())
    assert gathered.points
    verify_schedule(schedule_to_dict(gathered.points[0].schedule))
    monkeypatch.undo()
    built = tree_search(model, name, None, Limits())
    assert built.points
    for p in built.points:
        verify_schedule(schedule_to_dict(p.schedule))
