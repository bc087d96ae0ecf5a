"""The SendResults of a SEND_MULTI answer: one per record (or the broker's error), their queues
kept across answers without changing what the results say."""

from __future__ import annotations

import numpy as np

from shmq.client.producer import batch_sender as B
from shmq.codec import frames as P
from shmq.errors import ShmqError
from shmq.model.message import MessageQueue, SendStatus


def _answer(statuses: list[int], qids: list[int]) -> P.SendMultiResultFrame:
    n = len(statuses)
    return P.SendMultiResultFrame(
        7,
        1234,
        99,
        np.array(statuses, np.int64),
        np.array(qids, np.int64),
        np.arange(n, dtype=np.int64) * 10,
        np.arange(n, dtype=np.int64) * 100,
        "no",
    )


def test_each_record_gets_its_result_or_the_brokers_error() -> None:
    queues: dict = {}
    r = _answer([P.SEND_OK, -P.TOPIC_NOT_EXIST, P.FLUSH_DISK_TIMEOUT], [3, -1, 0])
    out = B.multi_results(r, np.array([0, 1, 0]), ["U0", "U1", "U2"], ["A", "B"], "brk", queues)
    assert out[0].status is SendStatus.SEND_OK and out[0].msg_id == "U0"
    assert out[0].queue == MessageQueue("A", "brk", 3)
    assert (out[0].queue_offset, out[0].phys_offsets, out[0].store_timestamp, out[0].store_host) == (0, [0], 1234, 99)
    assert isinstance(out[1], ShmqError) and "no" in str(out[1])
    assert out[2].status is SendStatus.FLUSH_DISK_TIMEOUT and out[2].queue == MessageQueue("A", "brk", 0)
    assert (out[2].queue_offset, out[2].phys_offsets) == (20, [200])


def test_queues_are_reused_across_answers_and_bounded(monkeypatch) -> None:
    queues: dict = {}
    a = B.multi_results(_answer([0], [1]), np.array([0]), ["U"], ["A"], "brk", queues)
    b = B.multi_results(_answer([0], [1]), np.array([0]), ["V"], ["A"], "brk", queues)
    assert a[0].queue is b[0].queue
    c = B.multi_results(_answer([0], [1]), np.array([0]), ["W"], ["A"], "other", queues)
    assert c[0].queue == MessageQueue("A", "other", 1)
    monkeypatch.setattr(B, "MAX_CACHED_QUEUES", 1)
    B.multi_results(_answer([0], [2]), np.array([0]), ["X"], ["A"], "brk", queues)
    assert len(queues) == 1
