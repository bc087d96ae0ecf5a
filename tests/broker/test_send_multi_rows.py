"""SEND_MULTI puts over known queues go through the store's queue table; the end of the pass
publishes their max offsets from the table's rows (one scatter) and wakes their waiters by name.
A real store, a real state segment, the core driven directly."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.broker.publish import StatePublisher
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.ring.state import StateWriter
from shmq.store.message_store import MessageStore
from shmq.store.write import multi_put
from tests.broker.conftest import SMALL, answers, serve


@pytest.fixture
def published(tmp_path) -> Iterator[tuple[BrokerCore, StateWriter]]:
    store = MessageStore(str(tmp_path / "store"), SMALL).start()
    state = StateWriter.create(f"rows{os.getpid()}x{time.monotonic_ns() % 10**6}", store.store_dir, 1, 1)
    try:
        core = BrokerCore(store, BrokerConfig.load(SMALL), StatePublisher(state))
        core.publish_topics()
        yield core, state
    finally:
        store.shutdown()
        state.close()
        state.unlink()


def _multi(req_id: int, topics: list[str], qids: list[int]) -> tuple[int, bytes]:
    batch = fmt.concat_batches([fmt.encode_batch(t, [f"{t}-{req_id}".encode()]) for t in topics])
    frame = P.encode_send_multi(req_id, time.monotonic_ns(), 0, topics, np.arange(len(topics)), np.array(qids), batch)
    return P.SEND_MULTI, frame


def _published_max(core: BrokerCore, state: StateWriter, topic: str, qid: int) -> int:
    assert core.publisher is not None
    row = core.publisher.queue_row(topic, qid)
    assert row is not None
    return int(state.view.queues[row]["max_offset"])


def test_max_offsets_published_from_the_table_rows(published, monkeypatch) -> None:
    core, state = published
    taken = []
    real = multi_put.take
    monkeypatch.setattr(multi_put, "take", lambda *a: taken.append(real(*a)) or taken[-1])
    topics = [f"R{i}" for i in range(12)]
    peer = Peer(1)
    for k in range(5):
        ((kind, r),) = serve(core, peer, _multi(k, topics, [k % 3] * len(topics)))
        assert kind == P.SEND_MULTI_RESULT and (r.statuses == P.SEND_OK).all()
    assert any(t is not None for t in taken) or not multi_put.ENABLED
    for t in topics:
        for q in range(3):
            assert _published_max(core, state, t, q) == core.store.get_max_offset_in_queue(t, q) == (2 if q < 2 else 1)


def test_a_waiter_is_woken_by_a_put_through_the_table(published) -> None:
    core, _ = published
    producer, waiter = Peer(1), Peer(2)
    topics = ["W0", "W1", "W2"]
    serve(core, producer, _multi(1, topics, [0, 0, 0]))  # makes the queues (the reference put)
    assert serve(core, waiter, (P.PULL_WAIT, P.encode_pull_wait(9, "W1", 0, 1, 5000))) == []
    serve(core, producer, _multi(2, topics, [0, 0, 0]))
    assert answers(waiter) == [(P.WAKE, P.Wake(9, 2, False))]
