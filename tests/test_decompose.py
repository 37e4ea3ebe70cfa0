"""Multi-node synthesis: the hierarchy found from the topology, the composed and
pipelined schedules (synth.construct.decompose), the hints file and the CLI around them.

Every composed schedule is checked by the independent verifier and by its numbers: its
rounds per chunk never beat the proven bound, the pricing shortcut agrees with the
schedule actually built, and deeper pipelines buy bandwidth with steps.
"""

import json
import time
from collections import Counter, defaultdict
from fractions import Fraction
from functools import lru_cache

import pytest

from synth.bounds import bounds
from synth.construct import decompose as decompose_module
from synth.construct.batches import batch_loads, batch_moves
from synth.construct.decompose import (_allgather_floor, _build, _designs, decompose,
                                       level_allgathers)
from synth.deadline import Deadline
from synth.schedule.collectives import make_collective
from synth.schedule.file import schedule_to_dict, topology_kept
from synth.schedule.ir import Schedule, Send, Step
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.search.pareto import Limits
from synth.topology.catalog import resolve
from synth.topology.hierarchy import find_hierarchy
from synth.topology.linkmodel import Group, LinkModel, RankLink, lower_with_routes, restrict
from synth.topology.physical import topology_from_dict
from tests.in_process import synth_main

LIMITS = Limits(max_steps=12, time_limit=30)


@lru_cache(maxsize=None)
def lowered(spec):
    topo = resolve(spec)
    return topo, lower_with_routes(topo)


def hierarchy_of(spec):
    topo, lowering = lowered(spec)
    return find_hierarchy(lowering)


# --- the hierarchy ---------------------------------------------------------------------

def test_dgx2_boxes_share_one_switch_and_pairs_of_gpus_share_a_nic():
    h, why = hierarchy_of("dgx2x2")
    assert why == ""
    assert h.boxes == (tuple(range(16)), tuple(range(16, 32)))
    assert h.peers[3] == (3, 19)
    assert h.rails == (("net", tuple(range(16))),)  # one non-blocking switch: one rail
    assert h.gpus_per_nic == 2


@pytest.mark.parametrize("spec, boxes", [("dgxh100x2", 2), ("dgxh100x4", 4), ("dgxa100x2", 2)])
def test_rail_optimised_boxes_have_one_rail_per_local_rank(spec, boxes):
    h, _ = hierarchy_of(spec)
    assert len(h.boxes) == boxes and all(len(box) == 8 for box in h.boxes)
    assert h.rails == tuple((f"rail{j}", (j,)) for j in range(8))
    assert h.peers[5] == tuple(8 * b + 5 for b in range(boxes))
    assert h.gpus_per_nic == 1


@pytest.mark.parametrize("spec, reason", [
    ("dgx1", "no class of slow links"),
    ("dgx2", "no boxes"),
])
def test_topologies_without_identical_reachable_boxes_are_not_decomposed(spec, reason):
    h, why = hierarchy_of(spec)
    assert h is None and reason in why


def test_ndv2_boxes_cross_the_network_through_their_two_gateways():
    # one NIC per box behind the PCIe switch of GPUs 0 and 1: the others go through the
    # nearer of the two, half each, along shortest NVLink paths both ways
    h, why = hierarchy_of("ndv2x2")
    assert why == "" and h.gateways == (0, 1) and h.gpus_per_nic == 2
    assert h.proxy == (0, 1, 0, 1, 0, 1, 0, 1)
    links = lowered("ndv2x2")[1].model.link
    for i, (there, back) in enumerate(zip(h.to_proxy, h.from_proxy)):
        assert there[0] == back[-1] == i and there[-1] == back[0] == h.proxy[i]
        assert all((u, v) in links for path in (there, back) for u, v in zip(path, path[1:]))
    assert max(len(p) for p in h.to_proxy) == 3  # GPUs 6 and 7: two NVLink hops
    assert "2 gateways (local ranks 0, 1)" in h.describe()


def test_ndv2_decomposed_pipelines_are_at_the_bound_in_the_steady_state():
    # each batch more costs exactly what the NIC must carry: (K - 1) x 8 shares of 1/2
    _, lowering = lowered("ndv2x2")
    h, _ = hierarchy_of("ndv2x2")
    for name in ("allgather", "allreduce"):
        search = decompose(lowering.model, h, name, Limits(max_steps=40, time_limit=30))
        bound = bounds(lowering, make_collective(name, 16)).rounds_per_chunk
        alike = defaultdict(list)  # the same batch program in pipelines of two depths:
        for p in search.points:  # its design whole (a busy machine may build others)
            design = {k: v for k, v in p.schedule.info["decomposition"].items()
                      if k != "batches"}
            alike[json.dumps(design, sort_keys=True)].append(p.schedule)
        a, b = max((two for two in alike.values() if len(two) > 1), key=len)[-2:]
        assert a.batches < b.batches
        assert Fraction(b.rounds - a.rounds, b.collective.chunks - a.collective.chunks) \
            == bound


def _rail_topology(rail_of_box1):
    """Two boxes of 4 GPUs on a switch each, one NIC per GPU; GPU i of box 0 on rail i,
    GPU 4 + j of box 1 on rail rail_of_box1[j] (a permuted numbering)."""
    links = [{"between": [f"gpu{g}", f"sw{g // 4}"], "gbps": 100} for g in range(8)]
    links += [{"between": [f"gpu{g}", f"nic{g}"], "gbps": 25} for g in range(8)]
    rails = list(range(4)) + list(rail_of_box1)
    links += [{"between": [f"nic{g}", f"rail{rails[g]}"], "gbps": 25} for g in range(8)]
    return topology_from_dict({
        "name": "permuted", "unit_gbps": 25, "gpus": 8,
        "switches": [{"name": "sw0", "kind": "nvswitch"}, {"name": "sw1", "kind": "nvswitch"}]
        + [{"name": f"rail{j}", "kind": "net_switch"} for j in range(4)],
        "nics": [f"nic{g}" for g in range(8)], "links": links})


def test_isomorphism_aligns_boxes_numbered_differently_by_their_rails():
    topo = _rail_topology([2, 0, 3, 1])
    h, why = find_hierarchy(lower_with_routes(topo))
    assert why == ""
    assert h.peers == ((0, 5), (1, 7), (2, 4), (3, 6))  # each pair on one rail
    result = decompose(lower_with_routes(topo).model, h, "allgather", LIMITS)
    assert result.points
    for p in result.points:
        verify_schedule(schedule_to_dict(p.schedule))


# --- composed schedules ----------------------------------------------------------------

def limits_for(spec):
    # ndv2's GPUs relay to their gateway and back: a batch of allreduce is 14 steps
    return Limits(max_steps=24, time_limit=30) if spec.startswith("ndv2") else LIMITS


@lru_cache(maxsize=None)
def composed(spec, name):
    topo, lowering = lowered(spec)
    h, _ = hierarchy_of(spec)
    search = decompose(lowering.model, h, name, limits_for(spec))
    return search, bounds(lowering, make_collective(name, lowering.model.ranks))


@pytest.mark.parametrize("spec", ["dgx2x2", "dgxh100x2", "ndv2x2"])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce"])
def test_composed_schedules_pass_the_verifier_and_respect_the_bound(spec, name):
    search, b = composed(spec, name)
    assert len(search.points) >= 3
    for p in search.points:
        doc = schedule_to_dict(p.schedule)
        verify_schedule(doc)
        assert doc["collective"] == name and doc["ranks"] == lowered(spec)[1].model.ranks
        assert p.ratio >= b.rounds_per_chunk  # nothing beats a proven bound
        assert p.steps <= limits_for(spec).max_steps
    steps = [p.steps for p in search.points]
    ratios = [p.ratio for p in search.points]
    assert steps == sorted(steps) and ratios == sorted(ratios, reverse=True)
    assert len(set(ratios)) == len(ratios)  # more steps only where they buy bandwidth


def test_deeper_pipelines_approach_the_bound_on_dgx2x2():
    # the NICs carry one share per GPU pair each batch; the NVSwitch phase of one batch
    # overlaps the next batch's NIC phase, so only the ends cost extra
    search, b = composed("dgx2x2", "allgather")
    first, last = search.points[0], search.points[-1]
    assert first.steps == 2  # across, then inside: no pipeline
    # (the cut bound counts each GPU's PCIe link in full, though its NIC is shared, so
    # even the best schedule stays a few percent above it here)
    assert last.ratio / b.rounds_per_chunk < Fraction(6, 5)
    assert last.ratio < first.ratio * Fraction(17, 20)


@pytest.mark.parametrize("name", ["allgather", "reducescatter"])
def test_a_box_spreads_its_own_pieces_while_the_others_cross(name):
    # two boxes of 4 GPUs, 100 Gb/s switch ports, a 25 Gb/s NIC per GPU (a round: 25
    # Gb/s). One batch of 4 pieces a share: the crossing takes 4 rounds on each NIC, and
    # beside it each GPU sends its own 4 pieces to its 3 mates, 12 on a port of 4: 3
    # rounds; then the 4 pieces from the other box, 3 rounds more. 7 rounds for 4
    # chunks, where the box's own pieces after the crossing took 4 + 6 (5 / 2)
    topo = _rail_topology([0, 1, 2, 3])
    lowering = lower_with_routes(topo)
    h, _ = find_hierarchy(lowering)
    first = decompose(lowering.model, h, name, LIMITS).points[0]
    doc = schedule_to_dict(first.schedule)
    verify_schedule(doc)
    assert (first.steps, first.schedule.rounds, first.schedule.collective.chunks) == (2, 7, 4)
    # allgather's first step (reducescatter's last, run backwards) sends a GPU's own
    # pieces inside its box and others' across the network
    step = doc["steps"][0 if name == "allgather" else 1]
    inside = [x for x in step["sends"] if x["src"] // 4 == x["dst"] // 4]
    assert inside and len(inside) < len(step["sends"])
    owner = 0 if name == "allgather" else 1  # reducescatter: to the share's owner
    assert all(x["chunk"] // 4 == (x["src"], x["dst"])[owner] for x in inside)


def test_allreduce_overlaps_its_reducescatter_and_allgather():
    # one pipeline: a batch's reducescatter then its allgather, so its steps are far
    # fewer than a reducescatter followed by an allgather of the same depth
    search, _ = composed("dgxh100x2", "allreduce")
    for p in search.points:
        batches = p.schedule.info["decomposition"]["batches"]
        assert p.steps == batches + 3  # inside, across, across, inside


@pytest.mark.parametrize("spec", ["dgx2x2", "dgxh100x2"])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce"])
def test_pricing_agrees_with_the_schedules_built(spec, name):
    _, lowering = lowered(spec)
    h, _ = hierarchy_of(spec)
    designs = _designs(lowering.model, h, name, limits_for(spec), lambda kind, data: None)
    for design in designs[:4]:
        built = _build(lowering.model, h, name, design)
        assert (built.num_steps, built.rounds) == (design.steps, design.rounds)
        # the file holds one batch: its chunk moves are the design's, widened by lanes
        moved = sum(x.count for s in built.steps for x in s.sends)
        assert moved * built.batches == sum(len(s.sends) for s in built.expanded().steps)
        assert moved % design.sends == 0
        # the compact file and its expansion are the same schedule to the verifier
        verify_schedule(schedule_to_dict(built.expanded()))
        assert built.expanded().rounds == built.rounds


THREE_TIERS = "dgxh100x4:clos,leaf=2,pod=2,over=7"
ONE_CHUNK = Limits(max_steps=12, max_chunks=1, time_limit=30)


@lru_cache(maxsize=None)
def level_options(spec):
    _, lowering = lowered(spec)
    h, _ = hierarchy_of(spec)
    return decompose_module._level_options(lowering.model, h, ONE_CHUNK, Deadline.after(30),
                                           lambda kind, data: None)


@pytest.mark.parametrize("spec, option", [("dgx2x2", 0), (THREE_TIERS, 0), ("dgx1ibx2", -1)])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce"])
def test_a_batch_is_priced_from_its_levels_as_its_moves_load_the_links(spec, option, name):
    # the loads batch_loads counts from the levels are those of the moves listed, step by
    # step, pair by pair (dgx2x2: two GPUs on a NIC; the three-tier fabric: the across
    # level itself decomposed by pods; dgx1ibx2's last option: an inside level of more
    # steps than the crossing, so a box's own pieces spread after it, not beside it)
    h, _ = hierarchy_of(spec)
    options = level_options(spec)
    levels = (options[option],) if name != "allreduce" else (options[option], options[-1])
    pieces = decompose_module._base(levels) * 2
    moves = batch_moves(name, h, levels, pieces, 0, pieces)
    loads, sends = batch_loads(name, h, levels, pieces)
    assert loads == [Counter((s, d) for _, s, d, _ in step) for step in moves]
    assert sends == sum(map(len, moves))


def test_designs_are_priced_without_listing_a_batch(monkeypatch):
    # at 1024 GPUs a batch is about a million moves a piece: listing one to price each
    # level pairing outlasted the decomposition's share; only the pods' own level, built
    # whole, lists its moves
    _, lowering = lowered(THREE_TIERS)
    h, _ = hierarchy_of(THREE_TIERS)
    listed = []

    def listing(name, hierarchy, *args, **kwargs):
        listed.append(hierarchy)
        return batch_moves(name, hierarchy, *args, **kwargs)
    monkeypatch.setattr(decompose_module, "batch_moves", listing)
    assert decompose_module._designs(lowering.model, h, "allreduce", ONE_CHUNK,
                                     lambda kind, data: None)
    assert h not in listed and h.reversed() not in listed


@pytest.mark.parametrize("spec", ["dgx2x2", THREE_TIERS])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce"])
def test_a_design_is_built_from_box_0s_receives_alone(spec, name, monkeypatch):
    # the boxes move onto each other (dgx2x2: the box index shifts; THREE_TIERS: the pods
    # and the boxes within them), the inside level runs alike in every box and the
    # across level moves with the boxes: so the moves into box 0, listed alone (a K-th:
    # at 1024 GPUs a design's million moves a piece took minutes to list and fold), are
    # the folded program, step by step, with the rounds of the whole batch
    _, lowering = lowered(spec)
    model = lowering.model
    h, _ = hierarchy_of(spec)
    orbits = decompose_module.box_orbits(model, h)
    designs = decompose_module._designs(model, h, name, ONE_CHUNK, lambda kind, data: None)
    for design in designs[:3] + designs[-1:]:
        coll = make_collective(name, model.ranks, design.chunks)
        moves = [step for step in batch_moves(name, h, design.levels,
                                              design.batches * design.pieces, 0,
                                              design.pieces) if step]
        whole = decompose_module._Priced(moves)
        folded = decompose_module._folded(moves, whole, model, coll, orbits)
        steps, priced = decompose_module._box_zero(model, h, name, design, coll,
                                                   Deadline(), orbits)
        assert [(x.rounds, set(x.sends)) for x in steps] == \
            [(x.rounds, set(x.sends)) for x in folded]
        assert priced.rounds_per_step(model, design.batches, 1) == \
            whole.rounds_per_step(model, design.batches, 1)
    listed = []

    def listing(*args, into=None, **kwargs):
        listed.append(into)
        return batch_moves(*args, into=into, **kwargs)
    monkeypatch.setattr(decompose_module, "batch_moves", listing)
    built = decompose_module._build(model, h, name, designs[-1], Deadline(), orbits)
    assert built.symmetry == orbits and listed == [0]


def test_a_batch_too_large_to_list_whole_is_built_when_box_0s_moves_fit(monkeypatch):
    # 4096 GPUs in 512 boxes: a one-step exchange across the boxes makes 33.5 million
    # moves a batch, over the cap, but box 0's 65,520 are all a folded build lists. Here
    # the cap sits between a design's folded moves and its whole batch: it is built, from
    # box 0's moves, and verified; a design that does not fold is refused at its size
    _, lowering = lowered("dgxh100x2")
    model = lowering.model
    h, _ = hierarchy_of("dgxh100x2")
    orbits = decompose_module.box_orbits(model, h)
    design = min(decompose_module._designs(model, h, "allgather", ONE_CHUNK,
                                           lambda kind, data: None),
                 key=lambda d: d.steps)
    whole = design.sends * design.pieces // decompose_module._base(design.levels)
    # every GPU receives the 15 other shares' pieces at least once
    assert whole >= 16 * 15 * design.pieces
    monkeypatch.setattr(decompose_module, "MAX_BATCH_MOVES", whole // 2)
    def the_design(search):
        return [p.schedule for p in search.points
                if (p.steps, p.schedule.collective.chunks) == (design.steps, design.chunks)]
    built = the_design(decompose(model, h, "allgather", ONE_CHUNK, depths=(1,)))
    assert len(built) == 1 and built[0].symmetry == orbits
    verify_schedule(schedule_to_dict(built[0]))
    # where box 0's moves do not make the program after all, the whole batch is not
    # listed either
    monkeypatch.setattr(decompose_module, "_box_zero", lambda *args: None)
    monkeypatch.setattr(decompose_module, "batch_moves",
                        lambda *a, **k: pytest.fail("listed the whole batch"))
    assert the_design(decompose(model, h, "allgather", ONE_CHUNK, depths=(1,))) == []
    monkeypatch.undo()
    monkeypatch.setattr(decompose_module, "MAX_BATCH_MOVES", whole // 2)
    monkeypatch.setattr(decompose_module, "box_orbits", lambda model, hierarchy: None)
    assert the_design(decompose(model, h, "allgather", ONE_CHUNK, depths=(1,))) == []


def test_levels_that_get_no_time_say_out_of_time_not_that_nothing_fits(monkeypatch):
    # the levels' searches have a share of their own; when it is spent before any level
    # schedule exists, no design was tried, and "no pipeline fits" would send the user
    # to --max-steps for nothing
    _, lowering = lowered("dgxh100x2")
    h, _ = hierarchy_of("dgxh100x2")
    monkeypatch.setattr(decompose_module, "LEVEL_SECONDS", 0.0)
    found = decompose(lowering.model, h, "allgather", ONE_CHUNK,
                      deadline=Deadline.after(60))
    assert not found.points and found.stopped == "out of time"


def test_a_job_with_no_point_yet_builds_the_first_design_past_its_share(monkeypatch):
    # dgx2x32's first design took 6 s, past the decomposition's share of a 30 s limit,
    # and the job ended with no point at all: with nothing in hand the first may take
    # the job's time (first_by), the rest keep to the share
    _, lowering = lowered("dgxh100x2")
    h, _ = hierarchy_of("dgxh100x2")
    for name, value in (("prior", 1.0), ("per_unit", 1.0), ("measured", False)):
        monkeypatch.setattr(decompose_module.BUILD, name, value)  # a second a move
    alone = decompose(lowering.model, h, "allgather", ONE_CHUNK, deadline=Deadline.after(30))
    assert not alone.points and alone.stopped == "out of time"
    first = decompose(lowering.model, h, "allgather", ONE_CHUNK, deadline=Deadline.after(30),
                      first_by=Deadline())
    assert first.points
    for point in first.points:
        verify_schedule(schedule_to_dict(point.schedule))


def test_the_allgather_floor_is_the_tightest_ranks_in_capacity():
    # three ranks, rank 0 fed by 1 and 2 at one chunk a round each: it receives 2 chunks
    # of every C, so R / C >= 2 / 2 = 1; a group of capacity 1 holding both of its links
    # makes it 2 / 1 = 2; a group holding only one of them leaves 1
    links = tuple(RankLink(a, b, Fraction(1)) for a, b in [(1, 0), (2, 0), (0, 1), (0, 2),
                                                          (1, 2), (2, 1)])
    plain = LinkModel("three", 1.0, 3, links)
    assert _allgather_floor(plain) == 1
    both = Group("into 0", ((1, 0), (2, 0)), Fraction(1))
    assert _allgather_floor(LinkModel("three", 1.0, 3, links, (both,))) == 2
    one = Group("from 1", ((1, 0), (1, 2)), Fraction(1))
    assert _allgather_floor(LinkModel("three", 1.0, 3, links, (one,))) == 1


def test_the_deepest_pipeline_fills_the_step_limit():
    # dgxh100x2: a batch is 2 steps (across the rail in one, inside the box in one), so
    # within 12 steps the deepest pipeline is 11 batches; DEPTHS alone stop at 8 (9
    # steps), as 12 batches take 13. Hinted depths are kept as given.
    _, lowering = lowered("dgxh100x2")
    h, _ = hierarchy_of("dgxh100x2")
    found = decompose(lowering.model, h, "allgather", ONE_CHUNK)
    deepest = max(found.points, key=lambda p: p.steps)
    assert (deepest.steps, deepest.schedule.batches) == (12, 11)
    hinted = decompose(lowering.model, h, "allgather", ONE_CHUNK, depths=(1, 2, 4, 8))
    assert max(p.schedule.batches for p in hinted.points) == 8


def test_a_build_is_paced_by_box_0s_moves_and_the_machine(monkeypatch):
    # a design built from box 0's moves alone lists a K-th of its batch (THREE_TIERS: 4
    # boxes), and its verifier reads the whole machine (links and group members), which
    # at 1024 GPUs behind a spine is most of the work: paced by the batch's moves alone,
    # the first build's minute there made every deeper design look too long to start
    from synth.deadline import Pace
    _, lowering = lowered(THREE_TIERS)
    model = lowering.model
    h, _ = hierarchy_of(THREE_TIERS)
    paced, built, kept = [], [], []

    class Recorded(Pace):
        def timing(self, units):
            paced.append(units)
            return super().timing(units)
    real = decompose_module._build

    def build(model, hierarchy, name, design, *args):
        built.append((hierarchy, design))  # the pods' own level is built on its way
        # the machine's text, which every file holds, is made (and timed as writing)
        # before the first build: guessed at its prior, at 1024 GPUs no design fit
        kept.append(topology_kept(model, args[-1]))
        return real(model, hierarchy, name, design, *args)
    monkeypatch.setattr(decompose_module, "BUILD", Recorded(3e-6, least=1000))
    monkeypatch.setattr(decompose_module, "_build", build)
    found = decompose(model, h, "allgather", ONE_CHUNK)
    machine = len(model.links) + sum(len(g.links) for g in model.groups)
    assert len(paced) == len(built)
    mine = [(units, design) for units, (where, design) in zip(paced, built) if where == h]
    assert found.points and len(mine) == len(found.points)
    for units, design in mine:
        moves = design.sends * design.pieces // decompose_module._base(design.levels)
        assert units == machine + moves // 4
    assert all(kept)


def test_levels_are_synthesized_on_their_own_link_models():
    _, lowering = lowered("dgx2x2")
    h, _ = hierarchy_of("dgx2x2")
    box = level_allgathers(restrict(lowering.model, h.boxes[0]), LIMITS, Deadline.after(30))
    # one NVSwitch: every GPU sends straight to the other 15 in one step, 6 lanes a port
    assert box[0].num_steps == 1 and box[0].collective.ranks == 16
    assert Fraction(box[0].rounds, box[0].collective.chunks) == Fraction(15, 6)
    across = level_allgathers(restrict(lowering.model, h.peers[0]), LIMITS,
                              Deadline.after(30))
    # a share crosses one NIC of capacity 1/2: two rounds a chunk
    assert [(s.num_steps, Fraction(s.rounds, s.collective.chunks)) for s in across] == [(1, 2)]


def _broken(schedule, edit):
    steps = [list(step.sends) for step in schedule.steps]
    rounds = [step.rounds for step in schedule.steps]
    edit(steps, rounds)
    return Schedule(schedule.collective, schedule.model,
                    tuple(Step(r, tuple(s)) for r, s in zip(rounds, steps)))


def test_the_verifier_rejects_broken_composed_schedules():
    search, _ = composed("dgxh100x2", "allreduce")
    good = search.points[-1].schedule
    verify_schedule(schedule_to_dict(good))

    def drop_last_send(steps, rounds):
        steps[-1].pop()

    def send_too_early(steps, rounds):  # an allgather copy before its reduction is done
        steps[0].append(Send(steps[-1][0].chunk, steps[-1][0].src, steps[-1][0].dst, "copy"))

    def fewer_rounds(steps, rounds):
        busiest = max(range(len(rounds)), key=lambda i: rounds[i])
        rounds[busiest] -= 1

    def reduce_twice(steps, rounds):
        x = next(s for s in steps[0] if s.op == "reduce")
        steps[1].append(x)

    for edit in (drop_last_send, send_too_early, fewer_rounds, reduce_twice):
        with pytest.raises(ScheduleInvalid):
            verify_schedule(schedule_to_dict(_broken(good, edit)))


def test_the_time_limit_holds_even_when_nothing_fits_in_it():
    # the limit covers every phase: with too little time there is no schedule, and the
    # search says why instead of overrunning to build one
    _, lowering = lowered("dgx2x2")
    h, _ = hierarchy_of("dgx2x2")
    search = decompose(lowering.model, h, "allreduce", Limits(),
                       deadline=Deadline(time.monotonic()))  # already past
    assert not search.points and search.stopped == "out of time"
    # (at most 12 steps, as LIMITS: the default's deeper pipelines add nothing to this)
    enough = decompose(lowering.model, h, "allreduce", Limits(max_steps=12, time_limit=60))
    assert enough.points
    for p in enough.points:
        verify_schedule(schedule_to_dict(p.schedule))


# --- the command line -------------------------------------------------------------------

def test_cli_decomposes_a_multi_node_allreduce_and_writes_verified_files(tmp_path):
    result = synth_main("allreduce", "--topo", "dgx2x2", "--method", "decomposed",
                        "--max-steps", "10", "--json", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["solver_reason"].startswith("auto")
    assert "2 identical boxes of 16 GPUs" in summary["stopped"]["decomposed"]
    frontier = summary["frontier"]
    assert len(frontier) >= 3
    assert all(p["method"].startswith("decomposed") and p["steps"] <= 10 for p in frontier)
    assert all(p["ratio_to_bound"] >= 1 for p in frontier)
    check = synth_main("verify", *(p["file"] for p in frontier))
    assert check.returncode == 0, check.stderr


def test_cli_hints_set_the_boxes_and_the_depths(tmp_path):
    # one switch joins the boxes, so any pairing works: pair GPU i with GPU 16 + (i ^ 1)
    hints = tmp_path / "hints.yaml"
    hints.write_text(f"boxes: [{list(range(16))}, {[16 + (i ^ 1) for i in range(16)]}]\n"
                     "batches: [1, 3]\n")
    result = synth_main("allgather", "--topo", "dgx2x2", "--method", "decomposed",
                        "--hints", str(hints), "--json", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    frontier = json.loads(result.stdout)["frontier"]
    assert [p["method"] for p in frontier] == ["decomposed, 1 batch", "decomposed, 3 batches"]
    first = json.loads(open(frontier[0]["file"]).read())["steps"][0]["sends"]
    across = {(x["src"], x["dst"]) for x in first}
    assert (0, 17) in across and (0, 16) not in across


@pytest.mark.parametrize("text, message", [
    ("boxes: [[0, 1], [2, 3]]\n", "every rank 0..15 must appear exactly once"),
    ("boxes: [[0, 1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]]\n", "same size"),
    ("batches: [0]\n", "batches: expected a list of integers"),
    ("depth: 3\n", "unknown key 'depth'"),
    ("[1, 2\n", "not valid YAML"),
    (f"boxes: {[[r] for r in range(16)]}\n", "at least two GPUs"),
    # pairs of ranks from different boxes and rails: not linked inside, not one box
    (f"boxes: {[[i, 8 + (i + 1) % 8] for i in range(8)]}\n", "not one box"),
    # box 1 in another order: the rails no longer line up
    (f"boxes: [{list(range(8))}, {list(range(9, 16)) + [8]}]\n", "not all linked"),
])
def test_cli_bad_hints_get_one_line_and_exit_2(tmp_path, text, message):
    hints = tmp_path / "hints.yaml"
    hints.write_text(text)
    result = synth_main("allgather", "--topo", "dgxh100x2", "--hints", str(hints),
                        "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cli_decomposed_needs_a_multi_node_topology(tmp_path):
    result = synth_main("allgather", "--topo", "dgx1", "--method", "decomposed",
                        "--out", str(tmp_path))
    assert result.returncode == 1
    assert "cannot decompose allgather on dgx1" in result.stderr
    assert result.stderr.count("\n") == 1


def test_composed_schedules_export_to_msccl_and_to_multi_node_mscclpp():
    from synth.export import render

    search, _ = composed("dgx2x2", "allreduce")
    schedule = search.points[0].schedule
    text, _ = render(schedule, "msccl-xml")  # checked by the MSCCL simulator first
    assert "<algo " in text and 'ngpus="32"' in text
    plan = json.loads(render(schedule, "mscclpp")[0])  # checked by the plan simulator
    assert len(plan["gpus"]) == 32
    assert {c["channel_type"] for g in plan["gpus"] for c in g["channels"]} == \
        {"memory", "port"}


def test_topo_show_reports_the_hierarchy():
    result = synth_main("topo", "show", "dgxh100x4", "--json")
    assert result.returncode == 0, result.stderr
    h = json.loads(result.stdout)["hierarchy"]
    assert h["boxes"] == [list(range(8 * b, 8 * b + 8)) for b in range(4)]
    assert h["rails"] == {f"rail{j}": [j] for j in range(8)}
    text = synth_main("topo", "show", "dgx2x2").stdout
    assert "decomposition: 2 identical boxes of 16 GPUs" in text and "2 GPUs per NIC" in text


def _two_by_two():
    """Two boxes of two GPUs (NVLink inside), each GPU with its own NIC on one switch.
    Every link has an alpha: with none, steps would cost nothing and the frontier would
    be its one bandwidth-best point."""
    nvlink, ib = {"gbps": 50, "alpha_us": 0.7}, {"gbps": 25, "alpha_us": 0.5}
    links = [{"between": ["gpu0", "gpu1"], **nvlink}, {"between": ["gpu2", "gpu3"], **nvlink}]
    links += [{"between": [f"gpu{g}", f"nic{g}"], **ib} for g in range(4)]
    links += [{"between": [f"nic{g}", "ib"], **ib} for g in range(4)]
    return topology_from_dict({
        "name": "two-by-two", "unit_gbps": 25, "gpus": 4,
        "switches": [{"name": "ib", "kind": "net_switch"}],
        "nics": [f"nic{g}" for g in range(4)], "links": links})


def test_auto_merges_decomposed_trees_and_exact_points_on_one_frontier():
    from synth.frontier import synthesize

    # max_chunks=1 limits what the searches ask, not a constructed schedule's chunks: the
    # exact search finds the 1-step point but cannot pipeline one chunk (R / C >= S); the
    # decomposition's one batch has 2 steps at R / C 3/2 (P pieces cross a NIC of one
    # unit in P rounds while a GPU's own go to its mate on NVLink of two; then the other
    # box's, P / 2) and two batches 3 steps at 5/4 (P, then P beside P / 2, then P / 2),
    # as many as the packed trees' (2 per GPU, depth 2); of equal points the one built
    # first, the decomposition's, is kept. Every solver call here is decided in well
    # under a second.
    result = synthesize(_two_by_two(), "allgather", None,
                        Limits(max_steps=3, max_chunks=1, time_limit=60))
    assert set(result.searches) == {"decomposed", "trees", "allgather", "baselines"}  # no greedy
    found_by = {id(q.schedule): name for name, s in result.searches.items() for q in s.points}
    assert [(p.steps, p.ratio, found_by[id(p.schedule)]) for p in result.points] == [
        (1, 2, "allgather"), (2, Fraction(3, 2), "decomposed"),
        (3, Fraction(5, 4), "decomposed")]
    # nothing on the frontier is beaten by a point of any search
    others = {(p.steps, p.ratio) for s in result.searches.values() for p in s.points}
    for p in result.points:
        assert not any(s <= p.steps and r < p.ratio for s, r in others)


def test_ctrl_c_in_a_level_search_stops_the_whole_job(monkeypatch):
    import synth.search.pareto
    from synth.frontier import synthesize

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth.search.pareto, "solve_instance", interrupted)
    result = synthesize(_two_by_two(), "allreduce", None, Limits(max_steps=4, time_limit=60))
    assert result.searches["decomposed"].stopped == "interrupted"
    # nothing after it started: the baselines (4 GPUs: cheap, so built first) did
    assert set(result.searches) == {"baselines", "decomposed"}


def test_exact_search_asks_only_for_what_beats_known_points():
    from synth.search.pareto import frontier

    topo = _two_by_two()
    lowering = lower_with_routes(topo)
    b = bounds(lowering, make_collective("allgather", 4))
    # up to two steps, every call is decided in well under a second (from three on,
    # single calls run into their time limit); the 1-step point is the worst
    limits = Limits(max_steps=2, time_limit=60)
    plain = frontier(lowering.model, "allgather", None, b.steps, b.rounds_per_chunk, limits)
    at_bound = frontier(lowering.model, "allgather", None, b.steps, b.rounds_per_chunk,
                        limits, known=((b.steps, b.rounds_per_chunk),))
    assert plain.attempts and not at_bound.attempts  # nothing can beat the bound
    assert at_bound.stopped == "reached the bandwidth bound"
    worst = max(p.ratio for p in plain.points)
    capped = frontier(lowering.model, "allgather", None, b.steps, b.rounds_per_chunk,
                      limits, known=((b.steps, worst),))
    assert capped.attempts and all(Fraction(a.rounds, a.chunks) < worst
                                   for a in capped.attempts)  # every call asked for less
    assert all(p.ratio < worst for p in capped.points)
    assert min(p.ratio for p in capped.points) == min(p.ratio for p in plain.points)


def test_a_window_of_no_batch_steps_takes_one_round():
    # the loads are summed as arrays: an empty window must still be a step's least
    _, lowering = lowered("dgxh100x2")
    assert decompose_module._Priced(loads=[], sends=0).window(lowering.model, 0, -1, 3) == 1
