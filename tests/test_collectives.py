"""Collectives follow the chunk numbering of docs/schedule-file.md exactly."""

import pytest

from synth.errors import BadInput
from synth.schedule.collectives import COLLECTIVES, make_collective


def test_allgather_numbering():
    c = make_collective("allgather", 3, 2)
    assert c.num_chunks == 6
    assert c.pre == {(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)}
    assert c.post == {(r, k) for r in range(3) for k in range(6)}
    assert not c.combining and c.buffer_chunks == 6


def test_reducescatter_is_allgather_reversed():
    ag, rs = make_collective("allgather", 4, 2), make_collective("reducescatter", 4, 2)
    assert rs.pre == ag.post and rs.post == ag.pre and rs.combining


def test_allreduce_cuts_the_buffer_into_c_chunks():
    c = make_collective("allreduce", 4, 1)
    assert c.num_chunks == 1 and c.buffer_chunks == 1
    assert c.pre == c.post == {(r, 0) for r in range(4)}


@pytest.mark.parametrize("name", ["broadcast", "reduce", "gather", "scatter"])
def test_rooted_collectives_default_to_root_0_and_use_the_root(name):
    c = make_collective(name, 4, 1, root=2)
    at_root = {(r, k) for r, k in (c.post if name in ("reduce", "gather") else c.pre)}
    assert {r for r, _ in at_root} == {2}
    assert make_collective(name, 4).root == 0


def test_alltoall_numbering():
    n, c = 3, 2
    coll = make_collective("alltoall", n, c)
    assert coll.num_chunks == n * n * c
    for s in range(n):
        for d in range(n):
            for k in range(c):
                chunk = (s * n + d) * c + k
                assert coll.holders(chunk) == [s] and coll.wanters(chunk) == [d]


@pytest.mark.parametrize("name, ranks, chunks, root, message", [
    ("allshuffle", 4, 1, None, "unknown collective"),
    ("broadcast", 4, 1, 4, "root 4 is not a rank"),
    ("broadcast", 4, 1, -1, "root -1 is not a rank"),
    ("allgather", 4, 1, 0, "takes no root"),
    ("allgather", 4, 0, None, "chunks must be at least 1"),
])
def test_bad_collectives(name, ranks, chunks, root, message):
    with pytest.raises(BadInput, match=message):
        make_collective(name, ranks, chunks, root)


def test_every_collective_is_known():
    assert len(COLLECTIVES) == 8
    for name in COLLECTIVES:
        c = make_collective(name, 4, 2)
        assert c.pre and c.post
