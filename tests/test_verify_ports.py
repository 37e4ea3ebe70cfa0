"""The verifier's rules for a switch's ports (version 3), on hand-built files.

A switch operation pays its port once: a multicast its src's up port, a reduction its
dst's down port. The credit is for the operation's links that the port holds, and only
those: a port that holds part of the operation's links saves only on that part. A port
must be the rank's own (every link of an up port leaves a rank whose up port it is),
and the name a port gives must name one group."""

import copy

import pytest

from synth.schedule.verify import MalformedSchedule, ScheduleInvalid, verify_schedule

N = 4


def broadcast_doc(first_rounds):
    """Broadcast of 2 chunks from rank 0 through a multicasting switch. Links 0->1 (2
    lanes), 0->2 and 0->3 (1 lane each); rank 0's up port holds 0->1 and 0->2 only
    (capacity 1): 0->3 reaches the switch another way.

    Step 1: multicast chunk 0 to 1, 2, 3, and copy chunk 1 to rank 1. The port holds
    two of the multicast's links, paid once (1 chunk), and the copy's (1 more): 2
    chunks on capacity 1, so 2 rounds. Crediting every link of the multicast (3) would
    make it 1 chunk, 1 round: wrong. Step 2: multicast chunk 1 to 2 and 3: 1 round."""
    return {
        "format": "synth.schedule", "version": 3, "collective": "broadcast", "root": 0,
        "ranks": N, "chunks": 2, "num_chunks": 2,
        "topology": {
            "name": "hand", "unit_gbps": 25.0,
            "links": [[0, 1, 2], [0, 2, 1], [0, 3, 1]],
            "groups": [{"name": "up0", "links": [[0, 1], [0, 2]], "capacity": 1}],
            "switches": [{"name": "sw", "can": ["multicast"],
                          "links": [[0, 1], [0, 2], [0, 3]], "up": [[0, "up0"]]}]},
        "pre": [[0, 0], [0, 1]],
        "post": [[r, c] for r in range(N) for c in range(2)],
        "steps": [
            {"rounds": first_rounds, "sends": [
                {"chunk": 0, "src": 0, "dsts": [1, 2, 3], "via": "sw", "op": "multicast"},
                {"chunk": 1, "src": 0, "dst": 1, "op": "copy"}]},
            {"rounds": 1, "sends": [
                {"chunk": 1, "src": 0, "dsts": [2, 3], "via": "sw", "op": "multicast"}]}]}


def test_a_port_holding_part_of_a_multicast_saves_only_on_that_part():
    verify_schedule(broadcast_doc(2))
    with pytest.raises(ScheduleInvalid, match="up0"):
        verify_schedule(broadcast_doc(1))


def test_a_group_further_along_declared_as_a_senders_port_is_malformed():
    doc = broadcast_doc(2)
    # a link between two switches carries 0->2 and 1->2 (rank 1 sends through it too):
    # as rank 0's up port it would let 0's multicast pay once for what 1 also sends
    doc["topology"]["links"].append([1, 2, 1])
    doc["topology"]["groups"][0]["links"] = [[0, 2], [1, 2]]
    with pytest.raises(MalformedSchedule, match="holds 1->2, a link out of rank 1"):
        verify_schedule(doc)


def test_a_port_shared_by_two_ranks_is_theirs():
    # a NIC two GPUs share (dgx2): one group, the up port of both
    doc = broadcast_doc(2)
    doc["topology"]["links"].append([1, 3, 1])
    doc["topology"]["groups"][0]["links"].append([1, 3])
    doc["topology"]["switches"][0]["links"].append([1, 3])
    doc["topology"]["switches"][0]["up"].append([1, "up0"])
    verify_schedule(doc)


def test_a_port_naming_a_group_given_twice_is_malformed():
    doc = broadcast_doc(2)
    twin = copy.deepcopy(doc["topology"]["groups"][0])
    twin["links"], twin["capacity"] = [[0, 3]], 5
    doc["topology"]["groups"].append(twin)
    with pytest.raises(MalformedSchedule, match="named twice"):
        verify_schedule(doc)
