"""The HA segment: created by the broker, slots written by the sender, read by the broker."""

from __future__ import annotations

import uuid

import pytest

from shmq.errors import BrokerNotFoundError
from shmq.ha.shared import HANDSHAKE, STREAMING, HASegment


@pytest.fixture
def seg():
    name = f"hatest-{uuid.uuid4().hex[:8]}"
    s = HASegment.create(name)
    try:
        yield name, s
    finally:
        s.close()
        s.unlink()


def test_best_acked_needs_a_streaming_replica_within_the_gap(seg):
    name, broker = seg
    sender = HASegment.open(name)
    try:
        assert broker.best_acked(1000, 256) == -1
        i = sender.claim_slot("10.0.0.2:5555", 1)
        assert sender.slot_table["state"][i] == HANDSHAKE
        sender.slot_table["acked_offset"][i] = 900
        assert broker.best_acked(1000, 256) == -1  # still handshaking
        sender.slot_table["state"][i] = STREAMING
        assert broker.best_acked(1000, 256) == 900
        assert broker.best_acked(2000, 256) == -1  # too far behind: not in sync
        j = sender.claim_slot("10.0.0.3:5555", 1)
        sender.slot_table["acked_offset"][j] = 1990
        sender.slot_table["state"][j] = STREAMING
        assert broker.best_acked(2000, 256) == 1990
        assert [r.addr for r in broker.replicas()] == ["10.0.0.2:5555", "10.0.0.3:5555"]
        sender.release_slot(i)
        assert [r.slot for r in broker.replicas()] == [j]
    finally:
        sender.close()


def test_open_without_a_segment_says_so():
    with pytest.raises(BrokerNotFoundError, match="no HA segment"):
        HASegment.open(f"nobody-{uuid.uuid4().hex[:8]}")
