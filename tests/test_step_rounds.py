"""A step's rounds from its load (synth.construct.moves): read once for any lane count,
by dictionary or by arrays, as linkmodel.min_rounds prices the same sends."""

import random
from collections import Counter
from fractions import Fraction

import pytest

from synth.construct.moves import (array_demand, best_lanes, demand, load_array,
                                   rounds_at, scaled_rounds)
from synth.topology.catalog import resolve
from synth.schedule.ir import Send
from synth.topology.linkmodel import (Group, LinkModel, RankLink, groups_of_links, lower,
                                      min_rounds, step_loads)

# two links into rank 2, of 3/2 and 1 chunks a round, sharing a group of 2
TWO_INTO_ONE = LinkModel("two into one", 1.0, 3,
                         (RankLink(0, 2, Fraction(3, 2)), RankLink(1, 2, Fraction(1))),
                         (Group("into 2", ((0, 2), (1, 2)), Fraction(2)),))


def test_rounds_at_any_lane_count_are_the_hand_counted_ones():
    # 4 chunks on the 3/2 link: 8/3 rounds, 3; 1 chunk on the other: 1; the group
    # carries 5 of 2 a round: 3. Two lanes: 16/3 -> 6, 2, 10/2 = 5: 6
    load = Counter({(0, 2): 4, (1, 2): 1})
    for need in (demand(TWO_INTO_ONE, load), array_demand(TWO_INTO_ONE,
                                                          load_array(TWO_INTO_ONE, load))):
        assert [rounds_at(need, w) for w in (1, 2, 3)] == [3, 6, 8]
    # 1 chunk each: 1 round (the group carries 2 of 2); w lanes: w chunks on the link of
    # 1 take w rounds (2 w on the group of 2, w on the 3/2 link: no more)
    even = Counter({(0, 2): 1, (1, 2): 1})
    assert [scaled_rounds(TWO_INTO_ONE, even, w) for w in (1, 2, 3)] == [1, 2, 3]
    # where the group binds: 3 chunks on the 3/2 link and 2 on the other take 2 rounds
    # each, but the group's 5 of 2 a round take 3
    assert scaled_rounds(TWO_INTO_ONE, Counter({(0, 2): 3, (1, 2): 2})) == 3
    assert rounds_at(set()) == 1  # an empty step still takes a round


@pytest.mark.parametrize("spec", ["dgx1", "dgx2x2", "dgxh100x4:clos,pod=2,over=3",
                                  "mesh:3x3"])
def test_the_dictionary_and_array_demands_price_as_min_rounds_does(spec):
    model = lower(resolve(spec))
    pairs = [(l.src, l.dst) for l in model.links]
    rng = random.Random(spec)
    for k in (1, 5, len(pairs) // 2, len(pairs)):
        load = Counter({p: rng.randint(1, 9) for p in rng.sample(pairs, k)})
        sends = [p for p, n in load.items() for _ in range(n)]
        by_dict = demand(model, load)
        by_array = array_demand(model, load_array(model, load))
        for w in (1, 2, 5):
            assert rounds_at(by_dict, w) == rounds_at(by_array, w) == \
                min_rounds(model, sends * w)


def test_best_lanes_takes_the_fewest_rounds_per_lane():
    # one move a step on the 3/2 link: 1 lane 1 round (1 a lane), 2 lanes 2 rounds (1),
    # 3 lanes 2 rounds (2/3): 3 is best up to 4 lanes (4 lanes: 3 rounds, 3/4)
    moves = [[(0, 0, 2, "copy")]]
    assert best_lanes(TWO_INTO_ONE, moves, 4) == (3, Fraction(2, 3))


def test_a_models_groups_per_link_are_made_once_and_price_every_step_alike():
    # step_loads made the table again for each step: timing a 1023-step schedule on
    # switch:1024 (2 million group members) ran minutes past its time limit
    model = lower(resolve("dgx2x2"))
    table = groups_of_links(model)
    assert groups_of_links(model) is table
    assert all(set(table[pair]) == {g.name for g in model.groups if pair in g.links}
               for pair in table)
    other = lower(resolve("dgx1"))
    assert groups_of_links(other) is not table
    # a send loads its link and each of the link's groups by its count
    link = next(pair for pair in table if len(table[pair]) > 1)
    links, groups = step_loads(model, (), (Send(0, *link, "copy", 3),))
    assert links == {link: 3} and groups == {name: 3 for name in table[link]}
