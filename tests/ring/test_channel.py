"""Channels across processes: ordered delivery with parking on both sides, ping-pong, cleanup."""

from __future__ import annotations

import functools
import multiprocessing as mp

import pytest

from shmq.errors import BrokerGoneError, CorruptFrameError
from shmq.ring import shm
from shmq.ring.channel import Channel, broker_bell_name
from shmq.ring.doorbell import Doorbell, park, wake
from shmq.ring.framing import CONSUMER, PRODUCER

ctx = mp.get_context("fork")


def _payload(i: int) -> bytes:
    return i.to_bytes(8, "little") * (1 + i % 20)


def _produce(broker: str, client_id: int, n: int, spin: float) -> None:
    ch = Channel.open(broker, client_id)
    ring = ch.requests
    for i in range(n):
        data = _payload(i)
        while not ring.try_write(16 + i % 7, data):
            assert park(functools.partial(ring.writable, len(data)), [(ring, PRODUCER)], ch.client_bell, 10.0, spin)
        wake(ring, CONSUMER, ch.broker_bell)
    ch.close()


@pytest.fixture
def broker_side(broker_name):
    bell = Doorbell.create(broker_bell_name(broker_name))
    channels = []

    def make(client_id: int, ring_bytes: int) -> Channel:
        ch = Channel.create(broker_name, client_id, ring_bytes, bell, secret=client_id + 7)
        channels.append(ch)
        return ch

    yield make, bell
    for ch in channels:
        ch.close()
        ch.unlink()
    bell.close()
    bell.unlink()


@pytest.mark.parametrize("spin", [50e-6, 0.0])
def test_producer_process_to_consumer_in_order(broker_name, broker_side, spin):
    make, bell = broker_side
    ch = make(7, 2048)
    n = 20000
    proc = ctx.Process(target=_produce, args=(broker_name, 7, n, spin))
    proc.start()
    ring = ch.requests
    got = 0
    while got < n:
        frames = ring.read_batch(64)
        if not frames:
            assert park(ring.has_data, [(ring, CONSUMER)], bell, 10.0, spin), "producer stalled"
            continue
        for kind, view in frames:
            assert kind == 16 + got % 7
            assert bytes(view) == _payload(got)
            got += 1
        ring.release()
        wake(ring, PRODUCER, ch.client_bell)
    proc.join(10)
    assert proc.exitcode == 0
    assert ring.read() is None


def _echo(broker: str, client_id: int, rounds: int) -> None:
    """Broker-side echo on an existing channel: wait on the broker bell, answer on responses."""
    bell = Doorbell.open(broker_bell_name(broker))
    ch = Channel.open(broker, client_id)
    for _ in range(rounds):
        assert park(ch.requests.has_data, [(ch.requests, CONSUMER)], bell, 10.0, 0.0)
        kind, view = ch.requests.read()
        assert ch.responses.try_write(kind + 1, bytes(view))
        ch.requests.release()
        wake(ch.responses, CONSUMER, ch.client_bell)
    ch.close()
    bell.close()


def test_ping_pong_through_doorbells(broker_name, broker_side):
    make, _ = broker_side
    ch = make(9, 1024)
    rounds = 2000
    proc = ctx.Process(target=_echo, args=(broker_name, 9, rounds))
    proc.start()
    for i in range(rounds):  # a lost post would leave a park to its 10 s timeout (False)
        assert ch.requests.try_write(20, i.to_bytes(4, "little"))
        wake(ch.requests, CONSUMER, ch.broker_bell)
        assert park(ch.responses.has_data, [(ch.responses, CONSUMER)], ch.client_bell, 10.0, 0.0)
        kind, view = ch.responses.read()
        assert (kind, int.from_bytes(view, "little")) == (21, i)
        ch.responses.release()
    proc.join(60)
    assert proc.exitcode == 0


def _scribble(broker: str, client_id: int) -> None:
    ch = Channel.open(broker, client_id)
    assert ch.requests.try_write(16, b"good")
    start = 64 + 320 + 16
    ch.segment.buf[start : start + 8] = (10_000).to_bytes(4, "little") + (16).to_bytes(4, "little")
    ch.segment.buf[64 + 64 : 64 + 72] = (32).to_bytes(8, "little")
    ch.close()


def test_garbage_from_another_process_is_corrupt(broker_name, broker_side):
    make, _ = broker_side
    ch = make(11, 1024)
    proc = ctx.Process(target=_scribble, args=(broker_name, 11))
    proc.start()
    proc.join(10)
    assert proc.exitcode == 0
    _kind, view = ch.requests.read()
    assert bytes(view) == b"good"
    with pytest.raises(CorruptFrameError, match="overruns"):
        ch.requests.read()


def test_open_missing_channel_says_broker_gone(broker_name):
    with pytest.raises(BrokerGoneError):
        Channel.open(broker_name, 12345)


def test_unlink_leaves_nothing(broker_name, broker_side):
    make, _ = broker_side
    make(13, 1024)
    assert len(shm.leftovers(broker_name)) == 3
