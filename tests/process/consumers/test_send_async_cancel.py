"""Future.cancel() of send_async against a real broker: a cancelled message is really not stored."""

from __future__ import annotations

import concurrent.futures as cf

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus


def _stored_bodies(c: PullConsumer, topic: str) -> list[bytes]:
    out = []
    for mq in c.fetch_queues(topic):
        r = c.pull(mq, offset=0, max_nums=100, timeout=0)
        if r.status is PullStatus.FOUND:
            out += [m.body for m in r.messages]
    return sorted(out)


def test_a_cancelled_send_async_is_not_stored(store_dir, broker_name, config):
    """Regression (issue 9 A3): cancel() returned True and the message was stored anyway."""
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name, batch_max_delay=60.0) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        withdrawn = p.send_async(Message("Cancel", b"withdrawn"))
        kept = p.send_async(Message("Cancel", b"kept"))
        assert withdrawn.cancel() and withdrawn.cancelled()
        result = kept.result(5)  # hands the batch over: the cancelled message is left out
        assert result.status is shmq.SendStatus.SEND_OK and not kept.cancel()
        assert withdrawn in cf.wait([withdrawn], timeout=0).done
        p.send(Message("Cancel", b"sync"))
        assert _stored_bodies(c, "Cancel") == [b"kept", b"sync"]
