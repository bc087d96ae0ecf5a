"""Offset reset in the broker core (a real store, no process): the new offsets per mode, what
members are told, and the fence that drops their commits of old positions until they ack."""

from __future__ import annotations

import time

import pytest

from shmq.broker.admin import handle
from shmq.broker.answers import Peer
from shmq.broker.offset_reset import new_offsets
from shmq.codec import frames as P
from shmq.codec.reset_frames import decode_reset_offset, encode_reset_offset_ack

from .conftest import serve
from .test_core import send


def test_new_offsets_per_mode():
    bounds = {0: (0, 10), 1: (5, 8), 2: (0, 0)}
    assert new_offsets(bounds, to="first") == {0: 0, 1: 5, 2: 0}
    assert new_offsets(bounds, to="last") == {0: 10, 1: 8, 2: 0}
    assert new_offsets(bounds, offset=7) == {0: 7, 1: 7, 2: 0}  # clamped into min..max
    assert new_offsets(bounds, offset=1) == {0: 1, 1: 5, 2: 0}
    assert new_offsets(bounds, by_time=lambda q: {0: 3, 1: 99, 2: 0}[q]) == {0: 3, 1: 8, 2: 0}
    with pytest.raises(ValueError):
        new_offsets(bounds)


def _setup(core, n=6):
    """Topic T with 2 queues holding n messages each (timestamps recorded), and group cg with
    two live members that committed n."""
    core.update_topic("T", 2, 2)
    stamps = []
    producer = Peer(9)
    for i in range(n):
        stamps.append(int(time.time() * 1000))
        serve(core, producer, send(i, "T", b"%d" % i, 0), send(100 + i, "T", b"%d" % i, 1))
        time.sleep(0.003)
    members = [Peer(1, role="consumer"), Peer(2, role="consumer")]
    for m in members:
        core.add_client(m)
        handle(core, m.client_id, "join_group", {"group": "cg", "subscriptions": {"T": "*"}})
    for q in (0, 1):
        core.commit_offset("cg", "T", q, n)
    return members, stamps


def _reset_frames(peer):
    return [decode_reset_offset(payload) for kind, payload in peer.out if kind == P.RESET_OFFSET]


def test_reset_commits_tells_every_member_and_persists(core):
    members, _ = _setup(core)
    r = handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "to": "first"})
    assert r == {"offsets": {"0": 0, "1": 0}, "members": [1, 2]}
    assert core.offsets.query("cg", "T", 0) == 0 and core.offsets.query("cg", "T", 1) == 0
    assert not core.offsets.dirty  # written at once
    for m in members:
        (frame,) = _reset_frames(m)
        assert (frame.group, frame.topic, frame.offsets) == ("cg", "T", {0: 0, 1: 0})


def test_by_timestamp_and_explicit_offset(core):
    _, stamps = _setup(core)
    r = handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "timestamp": stamps[3]})
    assert 2 <= r["offsets"]["0"] <= 3  # the first message stored at or after it (ms resolution)
    assert handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "offset": 4})["offsets"] == {"0": 4, "1": 4}
    assert handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "offset": 999})["offsets"] == {"0": 6, "1": 6}


def test_member_commits_are_dropped_until_it_acks(core):
    members, _ = _setup(core)
    m = members[0]
    handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "to": "first"})
    (frame,) = _reset_frames(m)
    m.out.clear()
    # a commit of the old position written before the member applied the reset: dropped
    serve(core, m, (P.COMMIT_OFFSET, P.encode_commit_offset(1, "cg", "T", 0, 6)))
    assert handle(core, m.client_id, "commit_offset", {"group": "cg", "topic": "T", "queue_id": 1, "offset": 6}) == {
        "dropped": "a reset of this queue is not applied by this member yet"
    }
    assert core.offsets.query("cg", "T", 0) == 0 and core.offsets.query("cg", "T", 1) == 0
    # a commit from outside the group (an operator's tool) is not fenced
    handle(core, 99, "commit_offset", {"group": "cg", "topic": "T", "queue_id": 1, "offset": 1})
    assert core.offsets.query("cg", "T", 1) == 1
    # after the ack (on the same ring, behind the old commits) its commits count again
    serve(
        core,
        m,
        (P.RESET_OFFSET_ACK, encode_reset_offset_ack(frame.req_id)),
        (P.COMMIT_OFFSET, P.encode_commit_offset(2, "cg", "T", 0, 2)),
    )
    assert core.offsets.query("cg", "T", 0) == 2


def test_an_older_ack_does_not_lift_a_newer_fence(core):
    members, _ = _setup(core)
    m = members[0]
    handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "to": "first"})
    handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "to": "last"})
    first, second = _reset_frames(m)
    assert second.req_id > first.req_id
    serve(
        core,
        m,
        (P.RESET_OFFSET_ACK, encode_reset_offset_ack(first.req_id)),
        (P.COMMIT_OFFSET, P.encode_commit_offset(2, "cg", "T", 0, 1)),
    )
    assert core.offsets.query("cg", "T", 0) == 6
    serve(
        core,
        m,
        (P.RESET_OFFSET_ACK, encode_reset_offset_ack(second.req_id)),
        (P.COMMIT_OFFSET, P.encode_commit_offset(3, "cg", "T", 0, 5)),
    )
    assert core.offsets.query("cg", "T", 0) == 5


def test_a_member_gone_takes_its_fences(core):
    members, _ = _setup(core)
    handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "to": "first"})
    core.remove_client(members[0])
    assert core.resets.allows(members[0].client_id, "cg", "T", 0)
    assert not core.resets.allows(members[1].client_id, "cg", "T", 0)


def test_group_without_members_just_commits(core):
    members, _ = _setup(core)
    for m in members:
        core.remove_client(m)
    r = handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", "offset": 2})
    assert r == {"offsets": {"0": 2, "1": 2}, "members": []}
    assert core.offsets.query("cg", "T", 0) == 2


@pytest.mark.parametrize(
    "args, error",
    [
        ({"to": "first", "offset": 1}, "exactly one"),
        ({}, "exactly one"),
        ({"to": "middle"}, "first"),
        ({"offset": -1}, "offset must be"),
        ({"timestamp": "yesterday"}, "timestamp must be"),
        ({"topic": "Nope", "to": "first"}, "does not exist"),
        ({"group": "nobody", "to": "first"}, "unknown"),
    ],
)
def test_bad_arguments_are_refused(core, args, error):
    _setup(core)
    with pytest.raises(ValueError, match=error):
        handle(core, 99, "reset_offset", {"group": "cg", "topic": "T", **args})


def test_broadcasting_group_is_refused(core):
    _setup(core)
    b = Peer(5, role="consumer")
    core.add_client(b)
    handle(core, 5, "join_group", {"group": "bg", "model": "BROADCASTING", "subscriptions": {"T": "*"}})
    with pytest.raises(ValueError, match="BROADCASTING"):
        handle(core, 99, "reset_offset", {"group": "bg", "topic": "T", "to": "first"})
