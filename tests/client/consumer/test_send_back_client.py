"""SendBackClient without a broker: the frame it writes, how answers settle it, and that a lost
broker or an ERROR leaves the messages to local redelivery."""

from __future__ import annotations

import threading

import numpy as np

from shmq.client.consumer.send_back import SendBackClient
from shmq.codec import frames as P
from shmq.codec.send_back import decode_send_back
from shmq.errors import BrokerGoneError
from shmq.model.message_ext import MessageExt


class FakeConn:
    def __init__(self, answer) -> None:
        self.answer = answer  # (SendBack) -> (kind, payload) or None (no answer)
        self.client: SendBackClient | None = None
        self.frames = []

    def write_frame(self, kind, payload, deadline):
        if self.answer is None:
            raise BrokerGoneError("gone")
        sb = decode_send_back(payload)
        self.frames.append((kind, sb))
        reply = self.answer(sb)
        if reply is not None:
            threading.Thread(target=self.client.on_response, args=(reply[0], memoryview(reply[1]))).start()


def _client(answer) -> tuple[SendBackClient, FakeConn]:
    conn = FakeConn(answer)
    c = SendBackClient(conn, "g", 5)  # type: ignore[arg-type]
    conn.client = c
    return c, conn


def _msgs(n):
    return [MessageExt("T", b"x", commit_log_offset=100 * i, store_size=99 + i) for i in range(n)]


def test_the_frame_and_per_message_results():
    def answer(sb):
        statuses = np.array([0, -P.MESSAGE_ILLEGAL, 0], np.int64)
        z = np.zeros(3, np.int64)
        return P.SEND_MULTI_RESULT, P.encode_send_multi_result(
            P.SendMultiResultFrame(sb.req_id, 1, 0, statuses, z, z, z, "no record")
        )

    c, conn = _client(answer)
    assert c.send_back(_msgs(3), delay_level=-1) == [True, False, True]
    kind, sb = conn.frames[0]
    assert kind == P.SEND_BACK and sb.group == "g" and sb.max_reconsume_times == 5
    assert sb.offsets.tolist() == [0, 100, 200] and sb.sizes.tolist() == [99, 100, 101]
    assert sb.delay_levels.tolist() == [-1, -1, -1]
    assert not c.on_response(P.SEND_MULTI_RESULT, memoryview(answer(sb)[1]))  # settled: not ours any more


def test_an_error_or_a_lost_broker_leaves_them_to_local_redelivery():
    c, _ = _client(lambda sb: (P.ERROR, P.encode_error(sb.req_id, P.SERVICE_NOT_AVAILABLE, "replica")))
    assert c.send_back(_msgs(2)) == [False, False]
    c, _ = _client(None)
    assert c.send_back(_msgs(1)) == [False]
    c, _conn = _client(lambda sb: None)  # written, never answered: the broker died
    threading.Timer(0.1, c.fail_all).start()
    assert c.send_back(_msgs(1)) == [False]


def test_retry_topic_messages_show_their_first_topic():
    c, _ = _client(None)
    m = MessageExt("%RETRY%g", b"x", properties={"RETRY_TOPIC": "Orders"})
    other = MessageExt("T", b"y", properties={"RETRY_TOPIC": "Orders"})
    c.show_original_topic([m, other])
    assert (m.topic, other.topic) == ("Orders", "T")
