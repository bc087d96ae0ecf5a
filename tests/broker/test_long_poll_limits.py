"""What one client may hold in long polls (PULL_WAIT): capped per queue and in all, with answers
that say so, and nothing of it left once the client goes."""

from __future__ import annotations

import time

import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.config import BrokerConfig
from shmq.store.message_store import MessageStore

from .conftest import SMALL, answers, serve
from .test_core import send


@pytest.fixture
def config() -> dict:
    return dict(SMALL, maxPullWaitersPerClient=40, maxPullWaitersPerClientQueue=4)


def poll(req_id: int, topic: str = "W", qid: int = 0, offset: int = 0, timeout_ms: int = 60_000) -> tuple[int, bytes]:
    return P.PULL_WAIT, P.encode_pull_wait(req_id, topic, qid, offset, timeout_ms)


def test_past_the_per_queue_cap_the_clients_oldest_wait_there_is_answered(core):
    hog, other = Peer(1), Peer(2)
    assert serve(core, hog, *[poll(i) for i in range(1, 5)]) == []
    assert serve(core, hog, poll(5), poll(6)) == [(P.WAKE, P.Wake(1, 0, True)), (P.WAKE, P.Wake(2, 0, True))]
    assert serve(core, other, *[poll(i) for i in range(1, 5)]) == [], "another client's waits are its own"
    assert core.pull.held == {hog: 4, other: 4}
    serve(core, Peer(3), send(1, "W", b"m", 0))
    assert [w.req_id for _, w in answers(hog)] == [3, 4, 5, 6]
    assert [w.req_id for _, w in answers(other)] == [1, 2, 3, 4]
    assert core.pull.held == {} and core.pull.waiters == {}


def test_past_the_per_client_cap_a_new_wait_is_refused_busy(core):
    hog = Peer(1)
    assert serve(core, hog, *[poll(i, qid=i) for i in range(40)]) == []
    ((kind, err),) = serve(core, hog, poll(99, qid=99))
    assert (
        kind == P.ERROR and err.req_id == 99 and err.code == P.SYSTEM_BUSY and "maxPullWaitersPerClient" in err.message
    )
    other = Peer(2)
    assert serve(core, other, poll(1, qid=3)) == [], "the cap is per client"
    serve(core, Peer(3), send(1, "W", b"m", 3))
    assert answers(hog) == [(P.WAKE, P.Wake(3, 1, False))] and answers(other) == [(P.WAKE, P.Wake(1, 1, False))]
    assert serve(core, hog, poll(100, qid=3, offset=1)) == [], "an answered wait frees its place"


def test_a_client_that_goes_leaves_no_waits(core):
    hog = Peer(1)
    core.add_client(hog)
    serve(core, hog, *[poll(i, qid=i % 8) for i in range(30)])
    core.remove_client(hog)
    assert core.pull.held == {} and all(not w for w in core.pull.waiters.values())


def test_expiry_answers_each_wait_at_its_deadline(core):
    c = Peer(1)
    now = time.monotonic_ns()
    serve(core, c, poll(1, timeout_ms=10), poll(2, qid=1, timeout_ms=60_000))
    core.tick(now + 5_000_000)
    assert answers(c) == []
    core.tick(now + 50_000_000)
    assert answers(c) == [(P.WAKE, P.Wake(1, 0, True))]
    core.tick(now + 61_000_000_000)
    assert answers(c) == [(P.WAKE, P.Wake(2, 0, True))] and core.pull.held == {}


def test_waits_answered_early_leave_no_garbage_behind(core):
    """Each wait woken by a put leaves a dead deadline entry; they are swept, not kept until
    their (long) deadlines."""
    c, producer = Peer(1), Peer(2)
    for i in range(3000):
        serve(core, c, poll(i, offset=i, timeout_ms=3_600_000))
        serve(core, producer, send(i, "W", b"m", 0))
        assert answers(c) == [(P.WAKE, P.Wake(i, i + 1, False))]
        core.tick(time.monotonic_ns())
    assert core.pull.held == {} and len(core.pull._deadlines) <= 1025  # the slack of a heap with no live waiter


def test_limits_are_config_keys(tmp_path):
    with pytest.raises(Exception, match="maxPullWaitersPerClient"):
        BrokerConfig.load({"maxPullWaitersPerClient": 0})
    store = MessageStore(str(tmp_path / "s"), SMALL).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(dict(SMALL, max_pull_waiters_per_client_queue=2)))
        assert core.pull.per_client_queue == 2 and core.pull.per_client == 16384
    finally:
        store.shutdown()
