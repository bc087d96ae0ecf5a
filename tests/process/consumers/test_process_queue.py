"""ProcessQueue and the consume services without a broker: what may be committed, redelivery, order."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from shmq import ConsumeResult, MessageExt, MessageQueue
from shmq.client.consumer.consume_service import (
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    DelayScheduler,
    retry_delay,
)
from shmq.client.consumer.process_queue import ProcessQueue

MQ = MessageQueue("T", "b", 0)


def _msgs(offsets) -> list[MessageExt]:
    return [MessageExt("T", b"%d" % o, queue_offset=o) for o in offsets]


def test_commit_offset_is_the_smallest_in_process():
    pq = ProcessQueue(MQ, 10)
    assert pq.commit_offset() == 10
    a, b, c = _msgs([10, 11, 12])
    pq.put([a, b, c], 15)  # 13 and 14 were filtered out
    assert pq.commit_offset() == 10 and pq.span() == 2 and pq.count == 3
    pq.remove([b, c])
    assert pq.commit_offset() == 10  # 10 is still being consumed: never committed past
    pq.remove([a])
    assert pq.commit_offset() == 15 and pq.msg_size == 0
    pq.drop()
    assert not pq.begin()


class _BrokerGone:
    """A send-back that never reaches a broker: the services deliver again locally."""

    def __init__(self) -> None:
        self.calls = 0

    def send_back(self, msgs, delay_level=0):
        self.calls += 1
        return [False] * len(msgs)


def _run_service(cls, listener, msgs, until, timeout=5.0):
    pq = ProcessQueue(MQ, 0)
    pq.put(msgs, msgs[-1].queue_offset + 1)
    with ThreadPoolExecutor(4) as pool:
        scheduler = DelayScheduler("test")
        service = cls(listener, pool, scheduler, 2, 16, 0.02, lambda _pq: None, _BrokerGone())  # suspend: 20 ms
        service.submit(pq, msgs)
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            time.sleep(0.005)
        scheduler.shutdown()
    return pq


def test_concurrently_redelivers_with_growing_reconsume_times():
    calls = []
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            calls.append([(m.queue_offset, m.reconsume_times) for m in msgs])
        return (
            ConsumeResult.RECONSUME_LATER
            if msgs[0].reconsume_times < 2 and msgs[0].queue_offset == 0
            else ConsumeResult.SUCCESS
        )

    pq = _run_service(ConsumeMessageConcurrentlyService, listener, _msgs(range(4)), lambda: len(calls) >= 4)
    assert calls[0] == [(0, 0), (1, 0)] and [(0, 1), (1, 1)] in calls and [(0, 2), (1, 2)] in calls
    assert pq.commit_offset() == 4
    assert retry_delay(0) < retry_delay(3) <= retry_delay(100) == 5.0


def test_orderly_keeps_order_and_retries_the_same_messages():
    seen = []

    def listener(msgs, ctx):
        seen.extend((m.queue_offset, m.reconsume_times) for m in msgs)
        if msgs[0].queue_offset == 2 and msgs[0].reconsume_times == 0:
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeResult.SUCCESS

    pq = _run_service(ConsumeMessageOrderlyService, listener, _msgs(range(6)), lambda: len(seen) >= 8)
    assert seen == [(0, 0), (1, 0), (2, 0), (3, 0), (2, 1), (3, 1), (4, 0), (5, 0)]
    assert pq.commit_offset() == 6 and not pq.pending


def test_take_returns_the_smallest_offsets_and_reset_forgets_them():
    pq = ProcessQueue(MQ, 0)
    pq.put(_msgs(range(5)), 5)
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit_offset() == 3 and pq.count == 2
    pq.reset(1)
    assert pq.count == 0 and pq.msg_size == 0 and pq.commit_offset() == 1 and pq.take(3) == []
