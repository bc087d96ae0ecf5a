"""SYNC_MASTER answers without a process: ``ReplicaWaits`` alone, and the broker core with a real
store whose acked offsets come from a table the test sets (the HA segment's part in the process)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.broker.replication import ReplicaWaits
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.store.message_store import MessageStore

from .conftest import answers
from .test_core import send

MS = 1_000_000


class Acks:
    """The acked offset a replica reported (-1: none in sync), and what the broker told it."""

    def __init__(self, acked: int = -1) -> None:
        self.acked = acked
        self.waiting: list[bool] = []
        self.calls = 0

    def best_acked(self) -> int:
        self.calls += 1
        return self.acked

    def set_waiting(self, waiting: bool) -> None:
        self.waiting.append(waiting)


def result(req_id: int) -> P.SendResultFrame:
    return P.SendResultFrame(req_id, P.SEND_OK, 0, req_id, req_id * 100, 0, 0)


def statuses(peer: Peer) -> list[tuple[int, int]]:
    return [(r.req_id, r.status) for _, r in answers(peer)]


def test_groups_are_released_in_log_order_as_the_ack_moves():
    acks = Acks(0)
    w = ReplicaWaits(
        300,
        dict.fromkeys(
            (
                "replica_waits",
                "replica_acked",
                "replica_timeouts",
                "slave_not_available",
                "replica_dropped",
                "replica_wait_ns",
            ),
            0,
        ),
        acks,
    )
    a, b = Peer(1), Peer(2)
    w.hold([(a, [result(1)]), (b, [result(2)])], end=100, now=0)
    w.hold([(a, [result(3)])], end=200, now=1 * MS)
    w.hold([(b, [result(4)])], end=300, now=2 * MS)
    assert acks.waiting == [True] and not a.out and not b.out
    assert not w.ready(3 * MS) and w.release(3 * MS) == 0
    acks.acked = 199  # covers the first group only: the second needs all of 200
    assert w.ready(3 * MS) and w.release(3 * MS) == 2
    assert statuses(a) == [(1, P.SEND_OK)] and statuses(b) == [(2, P.SEND_OK)]
    acks.acked = 300
    assert w.release(4 * MS) == 2 and statuses(a) == [(3, P.SEND_OK)] and statuses(b) == [(4, P.SEND_OK)]
    assert acks.waiting == [True, False] and not w.groups
    assert w.stats["replica_waits"] == 4 and w.stats["replica_acked"] == 4
    assert w.stats["replica_wait_ns"] == 3 * MS * 2 + 3 * MS + 2 * MS


def test_no_replica_in_sync_answers_slave_not_available_at_once():
    stats: dict[str, int] = dict.fromkeys(("slave_not_available", "replica_waits"), 0)
    for source in (Acks(-1), None):  # none in sync; no HA segment at all
        peer = Peer(1)
        w = ReplicaWaits(300, stats, source)
        assert w.hold([(peer, [result(1), result(2)])], end=100, now=0) == 2
        assert statuses(peer) == [(1, P.SLAVE_NOT_AVAILABLE), (2, P.SLAVE_NOT_AVAILABLE)] and not w.groups
    assert stats["slave_not_available"] == 4 and stats["replica_waits"] == 0


def test_deadline_answers_flush_slave_timeout_and_bounds_the_park():
    acks = Acks(50)
    stats: dict[str, int] = dict.fromkeys(("replica_waits", "replica_acked", "replica_timeouts", "replica_wait_ns"), 0)
    w = ReplicaWaits(300, stats, acks)
    peer = Peer(1)
    w.hold([(peer, [result(1)])], end=100, now=0)
    w.hold([(peer, [result(2)])], end=200, now=100 * MS)
    assert w.park_timeout(0.02, 0) == 0.02
    assert w.park_timeout(0.02, 290 * MS) == pytest.approx(0.01)
    assert w.park_timeout(0.02, 400 * MS) == 0.0
    assert not w.ready(299 * MS) and w.release(299 * MS) == 0
    assert w.ready(300 * MS) and w.release(300 * MS) == 1  # the first timed out, the second still waits
    assert statuses(peer) == [(1, P.FLUSH_SLAVE_TIMEOUT)] and len(w.groups) == 1
    acks.acked = 200
    assert w.release(350 * MS) == 1 and statuses(peer) == [(2, P.SEND_OK)]
    assert stats["replica_timeouts"] == 1 and stats["replica_acked"] == 1


def test_a_dead_clients_answers_are_dropped():
    acks = Acks(0)
    stats: dict[str, int] = dict.fromkeys(("replica_waits", "replica_acked", "replica_dropped", "replica_wait_ns"), 0)
    w = ReplicaWaits(300, stats, acks)
    dead, live = Peer(1), Peer(2)
    w.hold([(dead, [result(1)]), (live, [result(2)])], end=100, now=0)
    dead.alive = False
    acks.acked = 100
    assert w.release(1 * MS) == 1
    assert not dead.out and statuses(live) == [(2, P.SEND_OK)] and stats["replica_dropped"] == 1


def test_finish_answers_every_waiting_group():
    acks = Acks(0)
    stats: dict[str, int] = dict.fromkeys(("replica_waits", "replica_acked", "replica_timeouts", "replica_wait_ns"), 0)
    w = ReplicaWaits(3000, stats, acks)
    peer = Peer(1)
    for i, end in enumerate((100, 200, 300)):
        w.hold([(peer, [result(i)])], end=end, now=0)
    acks.acked = 200
    assert w.finish(1 * MS) == 3
    assert statuses(peer) == [(0, P.SEND_OK), (1, P.SEND_OK), (2, P.FLUSH_SLAVE_TIMEOUT)]
    assert not w.groups and acks.waiting == [True, False]


def test_packed_and_multi_results_get_the_status_but_refused_records_keep_theirs():
    acks = Acks(-1)
    w = ReplicaWaits(300, dict.fromkeys(("slave_not_available",), 0), acks)
    peer = Peer(1)
    packed = P.pack_send_results([1, 2], [0, 0], 0, 0, [10, 20], 0, 0)
    multi = P.SendMultiResultFrame(
        3,
        0,
        0,
        np.array([P.SEND_OK, -P.SYSTEM_ERROR]),
        np.zeros(2, np.int64),
        np.zeros(2, np.int64),
        np.zeros(2, np.int64),
        "why",
    )
    w.hold([(peer, packed), (peer, [multi])], end=100, now=0)
    got = answers(peer)
    assert [(r.req_id, r.status) for _, r in got[:2]] == [(1, P.SLAVE_NOT_AVAILABLE), (2, P.SLAVE_NOT_AVAILABLE)]
    assert got[2][1].statuses.tolist() == [P.SLAVE_NOT_AVAILABLE, -P.SYSTEM_ERROR]


# ---------------------------------------------------------------------------- the core, a real store


@pytest.fixture
def sync_master(tmp_path, config) -> Iterator[tuple[BrokerCore, Acks]]:
    config.update(brokerRole="SYNC_MASTER", syncFlushTimeout=300)
    store = MessageStore(str(tmp_path / "store"), config).start()
    core = BrokerCore(store, BrokerConfig.load(config))
    assert core.replica is not None
    acks = Acks(-1)
    core.replica.source = acks
    yield core, acks
    store.shutdown()


def test_core_holds_sync_batch_and_multi_sends_until_their_end_is_acked(sync_master):
    core, acks = sync_master
    peer = Peer(1)
    acks.acked = 0
    now = time.monotonic_ns()
    core.handle(peer, [(k, memoryview(p)) for k, p in [send(1, "T", b"one", 0)]], now)
    core.end_pass()
    first_end = core.store.commitlog.max_offset
    batch = fmt.encode_batch("T", [b"a", b"b"])
    multi = fmt.concat_batches([fmt.encode_batch("A", [b"x"]), fmt.encode_batch("T", [b"y"])])
    frames = [
        send(2, "T", b"two", 1),
        (P.SEND_BATCH, P.encode_send_batch(3, now, 2, 0, "T", batch)),
        (P.SEND_MULTI, P.encode_send_multi(4, now, 0, ["A", "T"], np.array([0, 1]), np.array([0, 3]), multi)),
    ]
    core.handle(peer, [(k, memoryview(p)) for k, p in frames], now)
    core.end_pass()
    assert not peer.out and len(core.replica.groups) == 2 and core.stats["replica_waits"] == 4
    acks.acked = first_end - 1
    assert core.end_pass() == 0 and not peer.out  # one byte short of the first send's end
    acks.acked = first_end
    assert core.end_pass() == 1 and statuses(peer) == [(1, P.SEND_OK)]
    acks.acked = core.store.commitlog.max_offset
    assert core.end_pass() == 3
    got = answers(peer)
    assert [(k, r.req_id) for k, r in got] == [(P.SEND_RESULT, 2), (P.SEND_RESULT, 3), (P.SEND_MULTI_RESULT, 4)]
    assert got[0][1].status == got[1][1].status == P.SEND_OK and got[2][1].statuses.tolist() == [P.SEND_OK] * 2
    assert not core.replica.groups


def test_core_without_replica_stores_and_answers_slave_not_available(sync_master):
    core, _ = sync_master
    peer = Peer(1)
    core.handle(
        peer, [(k, memoryview(p)) for k, p in [send(i, "T", b"m%d" % i, 0) for i in range(10)]], time.monotonic_ns()
    )
    assert core.end_pass() == 10
    assert statuses(peer) == [(i, P.SLAVE_NOT_AVAILABLE) for i in range(10)]
    assert [bytes(m.body) for m in core.store.get_message("T", 0, 0, 100).messages] == [b"m%d" % i for i in range(10)]


def test_sync_flush_and_sync_master_flush_first_then_wait(tmp_path, config):
    config.update(brokerRole="SYNC_MASTER", flushDiskType="SYNC_FLUSH", syncFlushTimeout=300)
    store = MessageStore(str(tmp_path / "s"), config).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(config))
        flushed_at_ack: list[int] = []

        class FlushWatchingAcks(Acks):
            def best_acked(self) -> int:  # what was on disk when the broker first asked a replica
                flushed_at_ack.append(store.commitlog.queue.flushed_offset)
                return super().best_acked()

        acks = FlushWatchingAcks(0)
        core.replica.source = acks
        peer = Peer(1)
        core.handle(
            peer, [(k, memoryview(p)) for k, p in [send(i, "S", b"d%d" % i, 0) for i in range(3)]], time.monotonic_ns()
        )
        assert core.end_pass() == 0 and not peer.out
        end = store.commitlog.max_offset
        assert flushed_at_ack[0] >= end and core.stats["group_commits"] == 1
        acks.acked = end
        assert core.end_pass() == 3 and statuses(peer) == [(i, P.SEND_OK) for i in range(3)]
    finally:
        store.shutdown()


def test_core_past_the_timeout_answers_flush_slave_timeout(sync_master):
    core, acks = sync_master
    acks.acked = 0
    peer = Peer(1)
    core.handle(peer, [(P.SEND, memoryview(send(1, "T", b"late", 0)[1]))], time.monotonic_ns())
    core.end_pass()
    assert not peer.out
    time.sleep(0.31)
    assert core.end_pass() == 1 and statuses(peer) == [(1, P.FLUSH_SLAVE_TIMEOUT)]
    assert core.stats["replica_timeouts"] == 1
