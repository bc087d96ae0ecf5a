"""A client writes hostile values into every counter of its channel that the broker reads: the
broker lives, a client whose counters lie is dropped with a logged reason, others keep working."""

from __future__ import annotations

import os
import time

import pytest

import shmq
from shmq import Message, Producer, SendStatus
from shmq.codec import frames as P
from shmq.ring.doorbell import wake
from shmq.ring.framing import CONSUMER, PRODUCER, Ring
from shmq.ring.shm import Segment
from shmq.ring.state import state_name
from tests.waiting import wait_for

from .rawclient import RawClient

HEAD, TAIL = 8, 16  # word indexes of the ring counters (shmq.ring.framing's layout)
HOSTILE = {"2^63": 1 << 63, "-1": (1 << 64) - 1, "unaligned": 4, "huge": 1 << 40}


def _counters(ring: Ring) -> memoryview:
    return ring._c  # the shared header words, as a client can write them


def _gone(broker_name: str, client: RawClient) -> bool:
    return f"shmq.{broker_name}.ch.{client.client_id}" not in os.listdir("/dev/shm")


def _poll_now(client: RawClient, req_id: int) -> bytes:
    return P.encode_pull_wait(req_id, "T", 0, 0, 0)  # timeout 0: answered at once with a WAKE


def _still_serves(broker: shmq.Broker, good: Producer) -> None:
    time.sleep(0.3)  # past the broker's 200 ms fill publication, where a bad counter used to kill it
    assert broker.process.poll() is None, broker.log()
    assert good.send(Message("T", b"fine")).status is SendStatus.SEND_OK


@pytest.mark.parametrize("value", [*HOSTILE.values(), "past head"], ids=[*HOSTILE, "past head"])
def test_hostile_response_tail_drops_only_that_client(store_dir, broker_name, config, value):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        bad = RawClient(broker_name)
        try:
            requests, responses = bad.channel.requests, bad.channel.responses
            _counters(responses)[TAIL] = 1 << 17 if value == "past head" else value  # 2 rings past
            # answers the client never reads: the broker has to look at the tail for room
            deadline = time.monotonic() + 5
            sent = 0
            while not _gone(broker_name, bad) and time.monotonic() < deadline:
                if requests.try_write(P.PULL_WAIT, _poll_now(bad, sent + 1)):
                    sent += 1
                wake(requests, CONSUMER, bad.channel.broker_bell)
            assert _gone(broker_name, bad), f"still attached after {sent} requests"
            _still_serves(broker, good)
            assert "malformed response ring" in broker.log()
        finally:
            bad.close(detach=False)


@pytest.mark.parametrize("value", [*HOSTILE.values(), "backwards"], ids=[*HOSTILE, "backwards"])
def test_hostile_request_head_drops_only_that_client(store_dir, broker_name, config, value):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        bad = RawClient(broker_name)
        try:
            requests = bad.channel.requests
            if value == "backwards":
                bad.write(P.PULL_WAIT, _poll_now(bad, 1))
                assert bad.read()[0] == P.WAKE
                value = 0
            _counters(requests)[HEAD] = value
            wake(requests, CONSUMER, bad.channel.broker_bell)
            bad.channel.broker_bell.ring()
            assert wait_for(lambda: _gone(broker_name, bad), 30)
            _still_serves(broker, good)
            assert "malformed frame" in broker.log()
        finally:
            bad.close(detach=False)


@pytest.mark.parametrize("where", ["request tail", "response head", "parked flags", "channel header"])
@pytest.mark.parametrize("value", [1 << 63, (1 << 64) - 1], ids=["2^63", "-1"])
def test_broker_owned_words_in_client_memory_are_never_trusted(store_dir, broker_name, config, where, value):
    """The broker keeps its own positions privately: garbage in the words it writes (and in the
    parked flags and channel header) harms nobody, not even the client that wrote it."""
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        bad = RawClient(broker_name)
        try:
            requests, responses = bad.channel.requests, bad.channel.responses
            if where == "request tail":
                _counters(requests)[TAIL] = value
            elif where == "response head":
                _counters(responses)[HEAD] = value
            elif where == "parked flags":
                for ring in (requests, responses):
                    _counters(ring)[CONSUMER] = _counters(ring)[PRODUCER] = value
            else:
                bad.channel.segment.buf[:24] = value.to_bytes(8, "little") * 3
            _still_serves(broker, good)
            if where == "response head":
                _counters(responses)[HEAD] = 0  # the client's own reader would refuse its own garbage
            bad.write(P.PULL_WAIT, _poll_now(bad, 9))
            kind, wake_ = bad.read()
            assert kind == P.WAKE and wake_.req_id == 9
            assert not _gone(broker_name, bad)
        finally:
            bad.close(detach=False)


def test_commit_offset_of_a_queue_id_out_of_range_drops_only_that_client(store_dir, broker_name, config):
    """A COMMIT_OFFSET frame for queue id -5 of a group with members used to reach the state
    table as a negative row (OverflowError in the loop: the broker died)."""
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        assert good.send(Message("T", b"first")).status is SendStatus.SEND_OK
        bad = RawClient(broker_name)
        try:
            assert bad.admin("join_group", group="g", subscriptions={"T": "*"}).ok
            bad.write(P.COMMIT_OFFSET, P.encode_commit_offset(1, "g", "T", -5, 3))
            assert wait_for(lambda: _gone(broker_name, bad), 30)
            _still_serves(broker, good)
            assert "COMMIT_OFFSET queue id -5" in broker.log()
        finally:
            bad.close(detach=False)


def test_a_scribbled_state_sequence_does_not_kill_the_broker(store_dir, broker_name, config):
    """A process of the broker's user can map the state segment writable; the seqlock word it
    scribbles on used to be read back and incremented past 2^64 (ValueError in the loop)."""
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        segment = Segment.open(state_name(broker_name))
        try:
            words = segment.buf[:1024].cast("Q")
            words[8] = (1 << 64) - 1  # the seqlock word (shmq.ring.state._SEQ)
            words.release()
        finally:
            segment.close()
        _still_serves(broker, good)
        assert good.send(Message("T", b"again")).status is SendStatus.SEND_OK
