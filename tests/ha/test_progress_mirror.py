"""A replica keeps the master's timed-service progress (delayOffset.json and the like), so a
promoted replica does not deliver again every delayed message the master already delivered."""

from __future__ import annotations

import json
import os

import shmq
from shmq import Message, Producer
from shmq.ha.shared import HASegment
from shmq.model.system_topics import SCHEDULE_TOPIC
from shmq.store.message_store import MessageStore
from tests.ha.conftest import BASE, Pair
from tests.ha.fake_master import wait_reports
from tests.waiting import wait_for

LEVELS = {"messageDelayLevel": "50ms 100ms"}


def _delay_offsets(store: str) -> dict | None:
    try:
        with open(os.path.join(store, "config", "delayOffset.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _bodies(store: str, topic: str) -> list[bytes]:
    with MessageStore(store, BASE) as s:
        return [bytes(m.body) for m in s.get_message(topic, 0, 0, 100).messages]


def test_a_promoted_replica_resumes_delays_where_the_master_was(pair: Pair) -> None:
    pair.master.stop()  # the master again, with short delay levels (its HA segment is a new one)
    pair.master = shmq.Broker(pair.master_store, pair.master_name, {**BASE, **LEVELS})
    pair._ha.close()
    pair._ha = HASegment.open(pair.master_name, read_only=True)
    with Producer("pg", broker=pair.master_name) as p:
        for i in range(5):
            p.send(Message("Later", b"d%d" % i, delay_level=1), selector=lambda qs, m, a: qs[0])
    want = {"offsetTable": {"1": 5}}
    assert wait_for(lambda: _delay_offsets(pair.master_store) == want, 30)
    fake = pair.fake()
    pair.replica(fake.address)
    assert wait_reports(fake, pair.master_end())
    assert wait_for(lambda: _delay_offsets(pair.replica_store) == want, 30)
    for r in pair.replicas:
        r.stop()
    pair.replicas.clear()
    fake.close()
    pair.fakes.clear()
    # promotion: the replica's store started as a master, with the master's delay levels
    with shmq.Broker(pair.replica_store, pair.replica_name, {**BASE, **LEVELS}):
        assert os.path.exists(os.path.join(pair.replica_store, "config", "delayOffset.json"))
    assert len(_bodies(pair.replica_store, SCHEDULE_TOPIC)) == 5  # parked under level 1 (queue 0), kept
    assert sorted(_bodies(pair.replica_store, "Later")) == [b"d%d" % i for i in range(5)]  # delivered once, not twice
