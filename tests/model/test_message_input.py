"""Message checks its input at construction (issue 9 A6): keys as a collection, delay_level in range."""

from __future__ import annotations

import pytest

import shmq
from shmq import Message
from shmq.client.producer.encoder import MessageEncoder
from shmq.codec import record as fmt


@pytest.mark.parametrize("keys", [["k1", "k2"], ("k1", "k2"), {"k2", "k1"}, "k1 k2"])
def test_keys_as_a_collection_store_the_same_keys_property(keys):
    """Regression: Message(keys=[...]) failed at send (RocketMQ 5 clients take a collection)."""
    m = Message("T", b"x", keys=keys)
    assert m.keys == "k1 k2"
    enc = MessageEncoder(fmt.MAX_MESSAGE_SIZE, 4096).encode(m)
    assert fmt.decode_properties(enc.props_b)[fmt.PROPERTY_KEYS] == "k1 k2"


def test_no_keys_stay_none():
    assert Message("T", b"x").keys is None and Message("T", b"x", keys=[]).keys is None


@pytest.mark.parametrize("keys", [["a b"], [""], [1], b"k1"])
def test_bad_keys_raise_at_construction(keys):
    with pytest.raises(shmq.BadMessageError):
        Message("T", b"x", keys=keys)


@pytest.mark.parametrize("level", [-1, 65, 100, 1.5])
def test_delay_level_out_of_range_raises_at_construction(level):
    """Regression: delay_level=19 was accepted and failed (or was ignored) later. A broker may
    name up to 64 levels (messageDelayLevel); one past its last is its last, as in RocketMQ."""
    with pytest.raises(shmq.BadMessageError, match=r"0\.\.64"):
        Message("T", b"x", delay_level=level)


def test_delay_levels_in_range_are_kept():
    assert [Message("T", b"x", delay_level=n).delay_level for n in (0, 1, 18, 19, 64)] == [0, 1, 18, 19, 64]
