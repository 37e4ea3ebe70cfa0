"""The lowering's shared-capacity groups, against expectations derived by hand.

synth/topology/linkmodel.py step 3 (README "How a topology is lowered for the solvers"):
every physical link that carries more than one rank link's route becomes a group;
physical links carrying exactly the same rank links merge into one group with the
smallest capacity (named after the tightest of them); a group whose capacity is at least
the sum of its members' capacities can never bind and is dropped.

The verifier checks sends against the groups written in the schedule file, which come
from this same lowering, so a lowering bug would pass both. Every expectation below is
therefore worked out from the topology's numbers in the comments, never by lowering
twice. Capacities are in units of unit_gbps (chunks per round): capacity = gbps x count
/ unit_gbps.

tests/test_topology.py already checks a few dgx2x4 group sizes and the dgxh100x2 rail
link; here every group of each topology is listed exactly.
"""

from fractions import Fraction as F

import pytest

from synth.schedule.file import model_from_dict, model_to_dict
from synth.schedule.verify import ScheduleInvalid, verify_schedule
from synth.topology.catalog import resolve
from synth.topology.linkmodel import lower, lower_with_routes
from synth.topology.physical import topology_from_dict


def groups_of(model):
    """{name: (set of member rank links, capacity)}; names must be unique."""
    out = {g.name: (set(g.links), g.capacity) for g in model.groups}
    assert len(out) == len(model.groups), "two groups share a name"
    return out


def assert_groups(model, expected):
    """Group by group, so a failure names the group instead of dumping hundreds."""
    got = groups_of(model)
    assert sorted(got) == sorted(expected), (
        f"missing {sorted(set(expected) - set(got))[:5]}, "
        f"unexpected {sorted(set(got) - set(expected))[:5]}")
    for name, (links, cap) in expected.items():
        assert got[name][1] == cap, f"{name}: capacity {got[name][1]}, expected {cap}"
        assert got[name][0] == links, f"{name}: members differ"


# --- 1. DGX-2: NVSwitch ports, the trunk, and NICs shared by two GPUs ---------------
#
# topologies/dgx2.yaml, unit_gbps 25:
#   gpu i <-> nvswitch-b(i // 8): 25 GB/s x 6 lanes = 150 GB/s -> capacity 150/25 = 6
#   nvswitch-b0 <-> nvswitch-b1: 25 x 48 = 1200 GB/s            -> capacity 48
#   gpu 2k, 2k+1 <-> pcie k <-> nic k: 16 GB/s                  -> capacity 16/25
#   (dgx2xK) nic k <-> net: network.gbps 12.5                   -> capacity 12.5/25 = 1/2
#
# Routes inside a box: GPU i to GPU j on the same board is 2 hops through the NVSwitch
# (width 150) or, for a NIC pair, 2 hops through pcie k (width 16): the widest wins, so
# every in-box route uses the NVSwitches (boards: gpu -> b0 -> b1 -> gpu, 3 hops) and
# no in-box route touches PCIe. A NIC's only links go to its PCIe switch (and, in
# dgx2xK, to net), so in one box no GPU-to-GPU route passes a NIC: no PCIe or NIC group.
#
# Per box, NVSwitch groups:
#   gpu i -> nvswitch-b(i//8): the 15 routes i -> j (j in the box), each of capacity 6;
#       sum 15 x 6 = 90 > 6: a group of capacity 6. Likewise nvswitch-b(i//8) -> gpu i
#       carries the 15 routes j -> i: a group of capacity 6.
#   nvswitch-b0 -> nvswitch-b1: the 8 x 8 = 64 routes from board 0 to board 1, each of
#       capacity min(6, 48, 6) = 6; sum 384 > 48: a group of capacity 48 (and reverse).
#   Every port carries a different set of rank links, so nothing merges:
#   16 + 16 + 2 = 34 groups per box.
#
# Between boxes (dgx2xK): the only way out of a box is gpu -> pcie k -> nic k -> net ->
# nic k' -> pcie k' -> gpu (6 hops), a unique route whose bottleneck is the NIC:
# min(16, 16, 12.5, 12.5, 16, 16) / 25 = 1/2. With S = the 16 x (K-1) GPUs of other boxes:
#   gpu i -> pcie (i//2): routes i -> s for s in S: 16(K-1) members of capacity 1/2;
#       sum 8(K-1) > 16/25: a group of capacity 16/25 (likewise pcie -> gpu i, s -> i).
#   pcie k -> nic k and nic k -> net: both carry exactly the routes {2k, 2k+1} -> S,
#       32(K-1) members, sum 16(K-1) > capacity: they merge into ONE group of capacity
#       min(16/25, 1/2) = 1/2, named after the tighter link, "nic k -> net".
#   net -> nic k and nic k -> pcie k: both carry S -> {2k, 2k+1}: one group "net -> nic k"
#       of capacity 1/2.
#   That is 16 + 16 + 8 + 8 = 48 more groups per box; dgx2x2: 2 x (34 + 48) = 164.


def expected_dgx2(boxes):
    single = boxes == 1
    expected, sources = {}, {}
    for b in range(boxes):
        p = "" if single else f"n{b}."  # join_boxes prefixes every vertex with nB.
        base = 16 * b
        box = range(base, base + 16)
        others = [s for s in range(16 * boxes) if s not in box]
        for i in range(16):
            r, sw = base + i, f"{p}nvswitch-b{i // 8}"
            expected[f"{p}gpu{i}->{sw}"] = ({(r, j) for j in box if j != r}, 6)
            expected[f"{sw}->{p}gpu{i}"] = ({(j, r) for j in box if j != r}, 6)
        board0, board1 = range(base, base + 8), range(base + 8, base + 16)
        expected[f"{p}nvswitch-b0->{p}nvswitch-b1"] = ({(a, c) for a in board0 for c in board1}, 48)
        expected[f"{p}nvswitch-b1->{p}nvswitch-b0"] = ({(c, a) for a in board0 for c in board1}, 48)
        if single:
            continue
        for i in range(16):
            r, pcie = base + i, f"{p}pcie{i // 2}"
            expected[f"{p}gpu{i}->{pcie}"] = ({(r, s) for s in others}, F(16, 25))
            expected[f"{pcie}->{p}gpu{i}"] = ({(s, r) for s in others}, F(16, 25))
        for k in range(8):
            pair = (base + 2 * k, base + 2 * k + 1)
            nic, pcie = f"{p}nic{k}", f"{p}pcie{k}"
            expected[f"{nic}->net"] = ({(g, s) for g in pair for s in others}, F(1, 2))
            expected[f"net->{nic}"] = ({(s, g) for g in pair for s in others}, F(1, 2))
            sources[f"{nic}->net"] = {f"{pcie}->{nic}", f"{nic}->net"}
            sources[f"net->{nic}"] = {f"net->{nic}", f"{nic}->{pcie}"}
    return expected, sources


def test_dgx2_one_box_has_only_nvswitch_groups():
    model = lower(resolve("dgx2"))
    expected, _ = expected_dgx2(1)
    assert len(expected) == 34
    assert_groups(model, expected)
    # every in-box rank link is the NVSwitch's 6, never PCIe's 16/25 (incl. NIC pairs)
    assert len(model.links) == 16 * 15
    assert {l.capacity for l in model.links} == {6}
    assert model.link[(0, 1)].capacity == 6  # gpu0, gpu1 share pcie0 yet use NVSwitch


def test_dgx2x2_nic_groups_hold_two_gpus_sends_at_half_a_chunk():
    lowering = lower_with_routes(resolve("dgx2x2"))
    model = lowering.model
    expected, sources = expected_dgx2(2)
    assert len(expected) == 164
    assert_groups(model, expected)

    # The NIC of GPUs 0 and 1 (box 0): their 2 x 16 sends into box 1, capacity 1/2.
    members, cap = groups_of(model)["n0.nic0->net"]
    assert cap == F(1, 2) and len(members) == 32
    assert {src for src, _ in members} == {0, 1}
    assert {dst for _, dst in members} == set(range(16, 32))
    # GPUs 14, 15 of box 1 (ranks 30, 31) share nic7; their receive side is "net->n1.nic7".
    members, cap = groups_of(model)["net->n1.nic7"]
    assert cap == F(1, 2) and {dst for _, dst in members} == {30, 31}
    assert {src for src, _ in members} == set(range(16))
    # which GPUs share a NIC: the sources of each NIC egress group's members
    for b in range(2):
        for k in range(8):
            members, _ = groups_of(model)[f"n{b}.nic{k}->net"]
            assert {src for src, _ in members} == {16 * b + 2 * k, 16 * b + 2 * k + 1}

    # the merges: PCIe uplink + NIC port into one group each way
    for name, physical in sources.items():
        assert set(lowering.group_sources[name]) == physical, name
    for name in expected:
        if name not in sources:
            assert lowering.group_sources[name] == (name,), name

    # rank link capacities: in-box 6 through the NVSwitches; across boxes the NIC's 1/2
    for (a, b), link in model.link.items():
        assert link.capacity == (6 if a // 16 == b // 16 else F(1, 2)), (a, b)
    assert len(model.links) == 32 * 31  # every pair has a route
    assert model.link[(0, 16)].alpha_us == 2.6  # InfiniBand's alpha beats PCIe's 0


def test_dgx2x3_nic_group_grows_with_the_other_boxes():
    # 3 boxes: S has 32 GPUs, so the NIC group holds 2 x 32 = 64 routes, still 1/2.
    expected, _ = expected_dgx2(3)
    assert len(expected) == 3 * 82
    assert_groups(lower(resolve("dgx2x3")), expected)


# --- 2. DGX-H100: 18-lane NVSwitch ports, and rails ---------------------------------
#
# topologies/dgxh100.yaml, unit_gbps 25:
#   gpu i <-> nvswitch: 25 x 18 = 450 GB/s -> capacity 18
#   gpu i <-> nic i: 64 GB/s               -> capacity 64/25 = 2.56
#   (dgxh100xK, rails) nic i <-> rail i: network.gbps 50 -> capacity 2
#
# In a box every pair routes gpu -> nvswitch -> gpu (capacity 18); nic i is a dead end
# (its only link is to gpu i), so no route crosses a NIC.
#   gpu i -> nvswitch: the 7 routes i -> j, sum 7 x 18 = 126 > 18: group, capacity 18.
#   nvswitch -> gpu i: the 7 routes j -> i: group, capacity 18.  16 groups per box.
# Across boxes: gpu i of box b reaches only gpu i of box c (gpu -> nic i -> rail i ->
# nic i -> gpu: 4 hops; reaching gpu j != i would need a GPU to relay), capacity
# min(2.56, 2, 2, 2.56) = 2.
#   dgxh100x2: gpu i -> nic i, nic i -> rail i, rail i -> nic i', nic i' -> gpu i' each
#       carry exactly one route (8b+i -> 8c+i): one member, no group. Only the 2 x 16
#       NVSwitch port groups remain: 32.
#   dgxh100x3: each of those links carries 2 routes (to/from the 2 other boxes), each of
#       capacity 2, sum 4:
#       gpu i -> nic i (2.56 < 4) and nic i -> rail i (2 < 4) carry the same 2 routes:
#           merged, capacity min(2.56, 2) = 2, named "nB.nic i -> rail i".
#       rail i -> nic i and nic i -> gpu i: merged, "rail i -> nB.nic i", capacity 2.
#       Per box 16 + 8 + 8 = 32; three boxes: 96.


def expected_dgxh100(boxes):
    single = boxes == 1
    expected, sources = {}, {}
    for b in range(boxes):
        p = "" if single else f"n{b}."
        box = range(8 * b, 8 * b + 8)
        for i in range(8):
            r = 8 * b + i
            expected[f"{p}gpu{i}->{p}nvswitch"] = ({(r, j) for j in box if j != r}, 18)
            expected[f"{p}nvswitch->{p}gpu{i}"] = ({(j, r) for j in box if j != r}, 18)
            peers = [8 * c + i for c in range(boxes) if c != b]  # the same rail
            if len(peers) < 2:
                continue  # one route per rail link: no group
            expected[f"{p}nic{i}->rail{i}"] = ({(r, s) for s in peers}, 2)
            expected[f"rail{i}->{p}nic{i}"] = ({(s, r) for s in peers}, 2)
            sources[f"{p}nic{i}->rail{i}"] = {f"{p}gpu{i}->{p}nic{i}", f"{p}nic{i}->rail{i}"}
            sources[f"rail{i}->{p}nic{i}"] = {f"rail{i}->{p}nic{i}", f"{p}nic{i}->{p}gpu{i}"}
    return expected, sources


@pytest.mark.parametrize("spec, boxes, count", [
    ("dgxh100", 1, 16), ("dgxh100x2", 2, 32), ("dgxh100x3", 3, 96)])
def test_dgxh100_port_and_rail_groups(spec, boxes, count):
    lowering = lower_with_routes(resolve(spec))
    model = lowering.model
    expected, sources = expected_dgxh100(boxes)
    assert len(expected) == count
    assert_groups(model, expected)
    for name, physical in sources.items():
        assert set(lowering.group_sources[name]) == physical, name
    # rank links: 8 x 7 per box at 18, plus 8 rails x K(K-1) ordered box pairs at 2
    assert len(model.links) == boxes * 56 + 8 * boxes * (boxes - 1)
    for (a, b), link in model.link.items():
        if a // 8 == b // 8:
            assert link.capacity == 18
        else:
            assert a % 8 == b % 8 and link.capacity == 2, (a, b)


def test_dgxh100x2_has_no_nic_or_rail_group():
    names = [g.name for g in lower(resolve("dgxh100x2")).groups]
    assert not [n for n in names if "nic" in n or "rail" in n]


# --- 3. A small PCIe tree, written inline --------------------------------------------
#
#            root (pcie_switch)
#     8 GB/s up /  ^ 48 down     12 GB/s down \  ^ 40 up
#             sw0                             sw1
#       16 /     \ 16                   16 /     \ 4
#        g0       g1                     g2       g3
#
# unit_gbps 8, so: 16 GB/s -> 2, 4 -> 1/2, sw0->root 8 -> 1, root->sw1 12 -> 3/2,
# sw1->root 40 -> 5, root->sw0 48 -> 6.
#
# Routes (a tree: each unique). Rank link capacities (bottlenecks):
#   (0,1), (1,0): g -> sw0 -> g, min(16, 16)       = 16 -> 2
#   (2,3), (3,2): via sw1, min(16, 4)              =  4 -> 1/2
#   (0,2), (1,2): g -> sw0 -> root -> sw1 -> g2, min(16, 8, 12, 16) = 8 -> 1
#   (0,3), (1,3): ... -> g3,                     min(16, 8, 12, 4)  = 4 -> 1/2
#   (2,0), (2,1): g2 -> sw1 -> root -> sw0 -> g, min(16, 40, 48, 16) = 16 -> 2
#   (3,0), (3,1): g3 -> ...,                     min(4, 40, 48, 16)  =  4 -> 1/2
#
# Physical links, their users, capacity vs the sum of the users' capacities:
#   g0->sw0  (0,1) (0,2) (0,3)   2 vs 2+1+1/2 = 7/2      group "g0->sw0", 2
#   g1->sw0  (1,0) (1,2) (1,3)   2 vs 7/2                group "g1->sw0", 2
#   g2->sw1  (2,3) (2,0) (2,1)   2 vs 1/2+2+2 = 9/2      group "g2->sw1", 2
#   g3->sw1  (3,2) (3,0) (3,1)   1/2 vs 3/2              group "g3->sw1", 1/2
#   sw0->g0  (1,0) (2,0) (3,0)   2 vs 2+2+1/2 = 9/2      group "sw0->g0", 2
#   sw0->g1  (0,1) (2,1) (3,1)   2 vs 9/2                group "sw0->g1", 2
#   sw1->g2  (0,2) (1,2) (3,2)   2 vs 1+1+1/2 = 5/2      group "sw1->g2", 2
#   sw1->g3  (0,3) (1,3) (2,3)   1/2 vs 3/2              group "sw1->g3", 1/2
#   (a)+(b) sw0->root (0,2) (0,3) (1,2) (1,3)  1 vs 1+1/2+1+1/2 = 3: binds
#           root->sw1 the very same four       3/2 vs 3:            binds
#           -> ONE group, capacity min(1, 3/2) = 1, named "sw0->root" (the tighter).
#   (c) sw1->root (2,0) (2,1) (3,0) (3,1)  5 vs 2+2+1/2+1/2 = 5: 5 >= 5, dropped
#       root->sw0 the same four             6 vs 5:              dropped
# 9 groups; nothing touches root->sw0 or sw1->root.

TREE = {
    "name": "pcie-tree", "unit_gbps": 8,
    "gpus": ["g0", "g1", "g2", "g3"],
    "switches": [{"name": "root", "kind": "pcie_switch"},
                 {"name": "sw0", "kind": "pcie_switch"},
                 {"name": "sw1", "kind": "pcie_switch"}],
    "links": [
        {"between": ["g0", "sw0"], "gbps": 16},
        {"between": ["g1", "sw0"], "gbps": 16},
        {"between": ["g2", "sw1"], "gbps": 16},
        {"between": ["g3", "sw1"], "gbps": 4},
        {"from": "sw0", "to": "root", "gbps": 8},
        {"from": "root", "to": "sw1", "gbps": 12},
        {"from": "sw1", "to": "root", "gbps": 40},
        {"from": "root", "to": "sw0", "gbps": 48},
    ],
}

TREE_LINKS = {
    (0, 1): 2, (1, 0): 2, (2, 3): F(1, 2), (3, 2): F(1, 2),
    (0, 2): 1, (1, 2): 1, (0, 3): F(1, 2), (1, 3): F(1, 2),
    (2, 0): 2, (2, 1): 2, (3, 0): F(1, 2), (3, 1): F(1, 2),
}

TREE_GROUPS = {
    "g0->sw0": ({(0, 1), (0, 2), (0, 3)}, 2),
    "g1->sw0": ({(1, 0), (1, 2), (1, 3)}, 2),
    "g2->sw1": ({(2, 3), (2, 0), (2, 1)}, 2),
    "g3->sw1": ({(3, 2), (3, 0), (3, 1)}, F(1, 2)),
    "sw0->g0": ({(1, 0), (2, 0), (3, 0)}, 2),
    "sw0->g1": ({(0, 1), (2, 1), (3, 1)}, 2),
    "sw1->g2": ({(0, 2), (1, 2), (3, 2)}, 2),
    "sw1->g3": ({(0, 3), (1, 3), (2, 3)}, F(1, 2)),
    "sw0->root": ({(0, 2), (0, 3), (1, 2), (1, 3)}, 1),
}


def test_pcie_tree_rank_links():
    model = lower(topology_from_dict(TREE))
    assert {pair: l.capacity for pair, l in model.link.items()} == TREE_LINKS


def test_pcie_tree_groups_shared_uplink_merged_and_dropped():
    lowering = lower_with_routes(topology_from_dict(TREE))
    assert_groups(lowering.model, TREE_GROUPS)
    # (a)+(b): the uplink sw0->root and the downlink root->sw1 carry the same 4 routes
    # and became one group with the smaller capacity, 1 (not 3/2)
    assert set(lowering.group_sources["sw0->root"]) == {"sw0->root", "root->sw1"}
    assert "root->sw1" not in groups_of(lowering.model)
    # (c): sw1->root (5 = 5) and root->sw0 (6 > 5) never bind: no group, no source
    merged = {s for srcs in lowering.group_sources.values() for s in srcs}
    assert not {"sw1->root", "root->sw0"} & merged
    for name in TREE_GROUPS:
        if name != "sw0->root":
            assert lowering.group_sources[name] == (name,)


def test_pcie_tree_boundary_of_the_never_binds_rule():
    # sw1->root at 39 GB/s: 39/8 = 4.875 < 5, so it binds now; root->sw0 (6) still does
    # not. Its users are (2,0) (2,1) (3,0) (3,1): a tenth group of capacity 39/8.
    doc = dict(TREE, links=[dict(l, gbps=39) if l.get("from") == "sw1" else l
                            for l in TREE["links"]])
    lowering = lower_with_routes(topology_from_dict(doc))
    expected = dict(TREE_GROUPS)
    expected["sw1->root"] = ({(2, 0), (2, 1), (3, 0), (3, 1)}, F(39, 8))
    assert_groups(lowering.model, expected)
    assert lowering.group_sources["sw1->root"] == ("sw1->root",)  # root->sw0 dropped


# --- 4. The schedule file carries these groups, and the verifier enforces them -------

def send(chunk, src, dst):
    return {"chunk": chunk, "src": src, "dst": dst, "op": "copy"}


def gather_doc(ranks, root, topology, steps):
    """A gather schedule (chunk k starts at rank k, all end at root), written by hand."""
    return {
        "format": "synth.schedule", "version": 1, "collective": "gather", "root": root,
        "ranks": ranks, "chunks": 1, "num_chunks": ranks, "topology": topology,
        "pre": [[k, k] for k in range(ranks)], "post": [[root, k] for k in range(ranks)],
        "steps": steps,
    }


def without_group(topology, name):
    assert any(g["name"] == name for g in topology["groups"])
    return dict(topology, groups=[g for g in topology["groups"] if g["name"] != name])


# The tree's topology section as a schedule file writes it, by hand: capacities as
# numbers (whole ones as ints), groups sorted by name.
TREE_FILE_TOPOLOGY = {
    "name": "pcie-tree", "unit_gbps": 8,
    "links": [[a, b, float(c) if F(c).denominator > 1 else int(c), 0.0]
              for (a, b), c in sorted(TREE_LINKS.items())],
    "groups": [{"name": name, "links": [list(p) for p in sorted(links)],
                "capacity": float(cap) if F(cap).denominator > 1 else int(cap)}
               for name, (links, cap) in sorted(TREE_GROUPS.items())],
}


def test_schedule_file_writes_the_lowerings_groups():
    model = lower(topology_from_dict(TREE))
    written = model_to_dict(model)
    assert written == TREE_FILE_TOPOLOGY
    # and reads back as the same groups
    assert groups_of(model_from_dict(written, 4)) == {
        name: (links, F(cap)) for name, (links, cap) in TREE_GROUPS.items()}


def tree_gather(rounds, topology=TREE_FILE_TOPOLOGY):
    # Gather to rank 2 (g2).
    # Step 0: g0 and g1 each send one chunk to g2: links (0,2), (1,2) carry 1 each, at
    #   capacity 1 x rounds; groups g0->sw0, g1->sw0: 1 <= 2; sw1->g2: 2 <= 2; but the
    #   merged uplink "sw0->root" (capacity 1) carries 2: over it unless rounds >= 2.
    # Step 1 (2 rounds): g3 sends its chunk: link (3,2) and group g3->sw1 carry 1 <= 1/2 x 2.
    return gather_doc(4, 2, topology, [
        {"rounds": rounds, "sends": [send(0, 0, 2), send(1, 1, 2)]},
        {"rounds": 2, "sends": [send(3, 3, 2)]},
    ])


def test_verifier_rejects_overloading_the_merged_uplink_group():
    with pytest.raises(ScheduleInvalid, match=r"group 'sw0->root' carries 2 chunks, over its "
                                              r"capacity 1 x 1 rounds") as e:
        verify_schedule(tree_gather(1))
    assert e.value.step == 0 and set(e.value.ranks) == {0, 1, 2}
    # the same schedule with 2 rounds in step 0 is valid ...
    verify_schedule(tree_gather(2))
    # ... and so is the 1-round one if that group alone is removed: every link and every
    # other group allows it, so the rejection is that group's doing
    verify_schedule(tree_gather(1, without_group(TREE_FILE_TOPOLOGY, "sw0->root")))


def dgx2x2_gather(rounds, topology):
    # Gather to rank 16 (box 1, gpu0) on dgx2x2.
    # Step 0: rank 0 -> 16 and rank 1 -> 18, one chunk each. Links (0,16), (1,18): 1 each
    #   at capacity 1/2 x rounds (fine from 2 rounds); n0.gpu0->n0.pcie0 and
    #   n0.gpu1->n0.pcie0: 1 <= 16/25 x 2; receiving NICs n1.nic0 and n1.nic1: 1 each;
    #   but both leave through nic0 of box 0, group "n0.nic0->net" of capacity 1/2:
    #   2 chunks need 4 rounds.
    # Step 1 (64 rounds, plenty): everyone else sends its chunk to 16, and 18 forwards
    #   chunk 1. Busiest: "net->n1.nic0" takes ranks 2..15's 14 chunks <= 1/2 x 64;
    #   "n1.nvswitch-b0->n1.gpu0" takes 16 chunks <= 6 x 64.
    step1 = [send(k, k, 16) for k in range(2, 32) if k != 16] + [send(1, 18, 16)]
    return gather_doc(32, 16, topology, [
        {"rounds": rounds, "sends": [send(0, 0, 16), send(1, 1, 18)]},
        {"rounds": 64, "sends": step1},
    ])


def test_verifier_rejects_two_gpus_overloading_their_shared_nic():
    written = model_to_dict(lower(resolve("dgx2x2")))
    expected, _ = expected_dgx2(2)
    assert {g["name"]: ({tuple(p) for p in g["links"]}, F(g["capacity"]).limit_denominator(100))
            for g in written["groups"]} == expected
    with pytest.raises(ScheduleInvalid, match=r"group 'n0.nic0->net' carries 2 chunks, over "
                                              r"its capacity 0.5 x 2 rounds") as e:
        verify_schedule(dgx2x2_gather(2, written))
    assert e.value.step == 0
    verify_schedule(dgx2x2_gather(4, written))
    verify_schedule(dgx2x2_gather(2, without_group(written, "n0.nic0->net")))
