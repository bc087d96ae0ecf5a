"""A real broker publishes its health once a second and the monitor's snapshot reads it."""

from __future__ import annotations

import shmq
from shmq import Message, Producer
from shmq.monitor.snapshot import ProcessWatch, Snapshot, take
from shmq.ring.state import StateReader
from tests.waiting import wait_for


def test_broker_publishes_health_read_by_a_snapshot(store_dir, broker_name, config) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config) as broker:
        with Producer("health", broker=broker_name) as p:
            p.send(Message("Health", b"now"))
            p.send(Message("Health", b"in two hours", delay_level=18))
        reader = StateReader.open(broker_name)
        try:
            watch = ProcessWatch()
            seen: list[Snapshot] = []

            def published() -> bool:
                seen.append(take(reader, broker_name, watch))
                return seen[-1].broker.delay_backlog >= 1 and seen[-1].broker.disk_used_ratio > 0

            assert wait_for(published, timeout=5.0, step=0.1)
        finally:
            reader.close()
    snap = seen[-1]
    b = snap.broker
    assert (b.role, b.version, b.pid) == ("ASYNC_MASTER", shmq.__version__, broker.pid)
    assert 0 < b.disk_used_ratio < 1 and 0 < b.disk_warning_ratio <= 1
    assert snap.topics["Health"].msgs_in == 1  # the delayed one waits under SCHEDULE_TOPIC_XXXX
    assert snap.process.rss and snap.process.rss > 0
