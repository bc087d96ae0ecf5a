"""The monitor's attachment follows a broker killed and restarted on the same store between two samples."""

from __future__ import annotations

import shmq
from shmq.monitor.attach import Attachment


def test_restart_between_two_samples_reattaches_to_the_new_broker(store_dir, broker_name, config) -> None:
    first = shmq.Broker(store_dir, name=broker_name, config=config)
    with Attachment(broker_name) as a:
        try:
            assert a.sample() and a.history.latest is not None and a.history.latest.broker.pid == first.pid
            first.kill()  # SIGKILL: the old segment stays mapped here
            with shmq.Broker(store_dir, name=broker_name, config=config) as second:
                # same store and semaphore key, but a new semaphore: the old mapping must not pass for the new broker
                assert not a.sample() and a.down is not None
                assert a.sample() and a.history.latest.broker.pid == second.pid
                assert len(a.history.snapshots) == 1  # a new life: rates start again
        finally:
            first.stop()
    assert a.reader is None
