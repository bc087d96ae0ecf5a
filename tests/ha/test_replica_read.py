"""Slave read: consumers given ``replica=`` read from it while their broker is down, resuming from
the offsets committed there (the master's, mirrored), and go back once the broker is up."""

from __future__ import annotations

import threading
import time

import shmq
from shmq import ConsumeFrom, ConsumeResult, PullConsumer, PullStatus, PushConsumer
from tests.ha.conftest import BASE, Pair
from tests.ha.fake_master import wait_reports
from tests.ha.test_replica import _fill
from tests.waiting import wait_for


def _mirrored(pair: Pair, group: str, committed: int) -> dict[int, list[bytes]]:
    sent = _fill(pair, 60)
    with PullConsumer(group, broker=pair.master_name) as c:
        c.commit(shmq.MessageQueue("Orders", pair.master_name, 0), committed)
    time.sleep(0.3)  # persisted by the master every 100 ms, then sent with the metadata
    fake = pair.fake()
    pair.replica(fake.address)
    assert wait_reports(fake, pair.master_end())
    return sent


def test_pull_consumer_reads_the_replica_while_the_master_is_down(pair: Pair) -> None:
    sent = _mirrored(pair, "cg", 5)
    mq = shmq.MessageQueue("Orders", pair.master_name, 1)
    with PullConsumer("cg", broker=pair.master_name, replica=pair.replica_name) as c:
        assert c._conn.session.name == pair.master_name
        pair.master.stop()
        assert wait_for(lambda: c._conn.session is None or not c._conn.session.alive, 30)  # seen dead
        r = c.pull(mq, offset=0, max_nums=64, timeout=0)
        assert c._conn.session.name == pair.replica_name
        assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == sent[1]
        assert c.fetch_consume_offset(shmq.MessageQueue("Orders", pair.master_name, 0), from_store=True) == 5
        pair.master = shmq.Broker(pair.master_store, pair.master_name, BASE)
        assert wait_for(
            lambda: c.max_offset(mq) >= 0 and c._conn.session is not None and c._conn.session.name == pair.master_name,
            30,
        )
        r = c.pull(mq, offset=0, max_nums=64, timeout=0)
        assert [m.body for m in r.messages] == sent[1]


def test_push_consumer_fails_over_to_the_replica_from_committed_offsets(pair: Pair) -> None:
    sent = _mirrored(pair, "pcg", 10)
    pair.master.stop()
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            for m in msgs:
                got[m.queue_id].append(m.body)
        return ConsumeResult.SUCCESS

    pc = PushConsumer("pcg", broker=pair.master_name, replica=pair.replica_name, consume_from=ConsumeFrom.FIRST_OFFSET)
    pc.subscribe("Orders", "*")
    pc.register_listener(listener, orderly=True)
    pc.start()
    try:
        want = {0: sent[0][10:], 1: sent[1], 2: sent[2]}
        assert wait_for(lambda: sum(map(len, got.values())) >= sum(map(len, want.values())), 20)
        time.sleep(0.2)
        assert got == want
    finally:
        pc.shutdown()
