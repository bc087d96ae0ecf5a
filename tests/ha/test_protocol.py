"""The HA protocol as a pure state machine: handshake, token proof both ways, frames, limits, epochs."""

from __future__ import annotations

import pytest

from shmq.errors import HADivergedError, HAProtocolError
from shmq.ha import protocol as H

TOKEN = b"s3cret"


def _handshake(token_m: bytes = TOKEN, token_r: bytes = TOKEN, epochs: list[H.Epoch] | None = None):
    m = H.MasterSession(token_m)
    r = H.ReplicaSession(token_r, "r1", 1 << 20)
    assert r.receive(m.hello()) == []
    auth = r.take_output()
    ev = m.receive(auth)
    assert ev == [H.Authenticated("r1")]
    epochs = epochs if epochs is not None else [H.Epoch(1, 0, b"a" * 16)]
    ev = r.receive(m.welcome(4096, 0, 500, epochs))
    return m, r, ev


def test_handshake_gives_the_replica_the_masters_log_position_and_epochs():
    _, _, ev = _handshake()
    assert ev == [H.Welcome(4096, 0, 500, [H.Epoch(1, 0, b"a" * 16)])]


def test_a_wrong_token_is_refused_on_both_sides():
    m = H.MasterSession(TOKEN)
    r = H.ReplicaSession(b"wrong", "r1", 1 << 20)
    r.receive(m.hello())
    with pytest.raises(HAProtocolError, match="did not prove"):
        m.receive(r.take_output())
    # a fake master (no token) cannot feed a replica either
    m2 = H.MasterSession(b"other")
    r2 = H.ReplicaSession(TOKEN, "r1", 1 << 20)
    r2.receive(m2.hello())
    m2._nonce_r = r2.nonce  # the fake master skips checking the replica
    with pytest.raises(HAProtocolError, match="did not prove"):
        r2.receive(m2.welcome(4096, 0, 0, []))


def test_the_token_itself_is_never_on_the_wire():
    m = H.MasterSession(TOKEN)
    r = H.ReplicaSession(TOKEN, "r1", 1 << 20)
    hello = m.hello()
    r.receive(hello)
    auth = r.take_output()
    welcome = m.welcome(4096, 0, 0, [])
    assert TOKEN not in hello + auth + welcome


def test_wrong_version_and_garbage_are_protocol_errors():
    m = H.MasterSession(TOKEN)
    bad = bytearray(H.ReplicaSession(TOKEN, "r", 64).nonce)  # 32 random bytes: not an AUTH
    with pytest.raises(HAProtocolError, match="expected"):
        m.receive(bytes(bad))
    r = H.ReplicaSession(TOKEN, "r", 64)
    hello = bytearray(H.MasterSession(TOKEN).hello())
    hello[5] = 9  # version 9
    with pytest.raises(HAProtocolError, match="version 9"):
        r.receive(bytes(hello))


def test_frames_byte_by_byte_and_limits():
    _m, r, _ = _handshake()
    stream = H.frame_header(0, 5) + b"hello" + H.frame_header(5, 0) + H.encode_metadata(H.META_TOPICS, b"{}")
    events = []
    for i in range(len(stream)):
        events += r.receive(stream[i : i + 1])
    assert events == [H.Data(0, b"hello"), H.Data(5, b""), H.Metadata(H.META_TOPICS, b"{}")]
    with pytest.raises(HAProtocolError, match="4294967295 bytes"):
        r.receive(H.frame_header(5, 0xFFFFFFFF))


def test_reports_must_not_go_backwards():
    m, _r, _ = _handshake()
    assert m.receive(H.encode_report(10) + H.encode_report(20)[:3]) == [H.Report(10)]
    assert m.receive(H.encode_report(20)[3:]) == [H.Report(20)]
    with pytest.raises(HAProtocolError, match="reported offset 5"):
        m.receive(H.encode_report(5))


def test_refusal_reaches_the_replica():
    r = H.ReplicaSession(TOKEN, "r", 64)
    r.receive(H.MasterSession(TOKEN).hello())
    assert r.receive(H.encode_refuse(H.REFUSE_AUTH, "bad token")) == [H.Refused(H.REFUSE_AUTH, "bad token")]


E1, E2, E2B, E3 = (
    H.Epoch(1, 0, b"1" * 16),
    H.Epoch(2, 100, b"2" * 16),
    H.Epoch(2, 100, b"x" * 16),
    H.Epoch(3, 250, b"3" * 16),
)


@pytest.mark.parametrize(
    "replica, rmax, master, mmax, want",
    [
        ([], 0, [E1], 500, 0),  # a fresh replica
        ([E1], 80, [E1, E2], 300, 80),  # behind: keeps all
        ([E1, E2], 300, [E1, E2, E3], 400, 250),  # the old master wrote 250..300 alone after epoch 3 began
        ([E1], 150, [E1, E2], 300, 100),  # wrote past where the new master's epoch starts
        ([E1, E2B], 180, [E1, E2], 300, 100),  # two masters opened epoch 2 at the same offset
        ([E1, E2], 400, [E1, E2], 300, 300),  # ahead of the master in the same epoch
        ([E1, E2B], 100, [E1, E2], 300, 100),  # an empty epoch 2 replaced at the same offset
        ([H.Epoch(1, 0, b"x" * 16)], 0, [E1], 300, 0),  # adopted a master's empty first epoch, then the
        # master died before its first write and came back with another first epoch: nothing to cut
    ],
)
def test_consistent_offset(replica, rmax, master, mmax, want):
    assert H.consistent_offset(replica, rmax, master, mmax) == want


def test_no_shared_history_is_refused():
    with pytest.raises(HADivergedError):
        H.consistent_offset([E2], 300, [E1], 100)
    with pytest.raises(HADivergedError, match="no epoch history"):
        H.consistent_offset([], 10, [E1], 100)
    with pytest.raises(HADivergedError, match="no epoch history"):  # bytes older than its only epoch
        H.consistent_offset([E2], 100, [E1, E2], 300)


def test_epoch_json_round_trip_and_validation():
    assert H.Epoch.from_json(E2.to_json()) == E2
    for bad in (
        {},
        {"epoch": 0, "startOffset": 0, "id": "00" * 16},
        {"epoch": 1, "startOffset": -1, "id": "00" * 16},
        {"epoch": "1", "startOffset": 0, "id": "00" * 16},
        [1, 2],
    ):
        with pytest.raises(ValueError):
            H.Epoch.from_json(bad)


def test_frames_are_views_of_the_received_buffer_and_any_split_gives_the_same_events():
    """A catch-up moves the whole log through ReplicaSession: a frame lying whole inside what one
    receive got is a view of it (no copy); one split over several receives is completed in the
    session's buffer. Every way of cutting the stream gives the same events."""
    import random

    rng = random.Random(7)
    frames = [(0, rng.randbytes(300)), (300, b""), (300, rng.randbytes(5000)), (5300, rng.randbytes(1))]
    stream = b"".join(H.frame_header(o, len(d)) + d for o, d in frames) + H.encode_metadata(H.META_OFFSETS, b"[1]")
    want = [H.Data(o, d) for o, d in frames] + [H.Metadata(H.META_OFFSETS, b"[1]")]
    _, r, _ = _handshake()
    buf = bytearray(stream)
    got = r.receive(memoryview(buf))
    assert got == want
    assert all(isinstance(e.data, memoryview) and e.data.obj is buf for e in got if isinstance(e, H.Data))
    for _ in range(200):
        _, r, _ = _handshake()
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 6)))
        events = []
        for a, b in zip([0, *cuts], [*cuts, len(stream)]):
            events += r.receive(stream[a:b])
        assert events == want, cuts
