"""The consumer's side of retries: SEND_BACK frames for messages its listener did not consume
(RocketMQ's ``DefaultMQPushConsumerImpl.sendMessageBack``), and the retry topic's messages shown
as the user sent them.

``send_back`` blocks the consume thread until the broker stored the copies (or refused), as
RocketMQ's synchronous send-back does: a message counts as consumed (its offset may be
committed past) only once its copy is stored. A message the broker did not take (broker gone,
a replica, a timeout) is left to the caller, which delivers it again locally.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future

from shmq.client.connection import BrokerConnection, next_request_id
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.send_back import MAX_SEND_BACK, encode_send_back
from shmq.errors import ShmqError, broker_error
from shmq.model.message_ext import MessageExt
from shmq.model.system_topics import retry_topic

log = logging.getLogger(__name__)

SEND_BACK_TIMEOUT_S = 3.0  # RocketMQ's sendMsgTimeout


class SendBackClient:
    """Sends messages of ``group`` back through ``conn``; its owner routes SEND_MULTI_RESULT and
    ERROR frames here first (``on_response``) and calls ``fail_all`` when the broker is lost."""

    def __init__(self, conn: BrokerConnection, group: str, max_reconsume_times: int) -> None:
        self.conn = conn
        self.group = group
        self.retry_topic = retry_topic(group)
        self.max_reconsume_times = max_reconsume_times
        self._waits: dict[int, Future[list[bool]]] = {}
        self._lock = threading.Lock()

    def send_back(self, msgs: Sequence[MessageExt], delay_level: int = 0) -> list[bool]:
        """Per message whether the broker stored its copy (retry topic, or DLQ for ``delay_level``
        -1 or a message past ``max_reconsume_times``)."""
        out: list[bool] = []
        for i in range(0, len(msgs), MAX_SEND_BACK):
            out += self._send(msgs[i : i + MAX_SEND_BACK], delay_level)
        return out

    def _send(self, msgs: Sequence[MessageExt], delay_level: int) -> list[bool]:
        req_id = next_request_id()
        fut: Future[list[bool]] = Future()
        with self._lock:
            self._waits[req_id] = fut
        deadline = time.monotonic() + SEND_BACK_TIMEOUT_S
        try:
            payload = encode_send_back(
                req_id,
                time.monotonic_ns(),
                self.group,
                self.max_reconsume_times,
                [m.commit_log_offset for m in msgs],
                [m.store_size for m in msgs],
                [delay_level] * len(msgs),
            )
            self.conn.write_frame(P.SEND_BACK, payload, deadline)
            return fut.result(max(0.0, deadline - time.monotonic()))
        except (ShmqError, OSError, TimeoutError) as e:
            log.warning(
                "group %r: sending %d message(s) back failed (%s); delivering them again here", self.group, len(msgs), e
            )
            return [False] * len(msgs)
        finally:
            with self._lock:
                self._waits.pop(req_id, None)

    def on_response(self, kind: int, view: memoryview) -> bool:
        """Take the answer to a send-back (True), or leave the frame to the owner (False)."""
        if kind == P.SEND_MULTI_RESULT:
            r = P.decode_send_multi_result(view)
            fut = self._take(r.req_id)
            if fut is None:
                return False
            if r.message:
                log.warning(
                    "group %r: broker refused %d message(s) sent back: %s",
                    self.group,
                    int((r.statuses < 0).sum()),
                    r.message,
                )
            fut.set_result((r.statuses >= 0).tolist())
            return True
        if kind == P.ERROR:
            err = P.decode_error(view)
            fut = self._take(err.req_id)
            if fut is None:
                return False
            fut.set_exception(broker_error(err.code, err.message))
            return True
        return False

    def fail_all(self) -> None:
        """The broker died: every waiting send-back fails (its messages are delivered again locally)."""
        with self._lock:
            waits, self._waits = list(self._waits.values()), {}
        for fut in waits:
            if not fut.done():
                fut.set_exception(ShmqError("the broker died before answering the send-back"))

    def _take(self, req_id: int) -> Future[list[bool]] | None:
        with self._lock:
            return self._waits.pop(req_id, None)

    def show_original_topic(self, msgs: list[MessageExt]) -> None:
        """Messages pulled from the group's retry topic carry their first topic again (RocketMQ's
        ``resetRetryAndNamespace``), so listeners see the topic the producer sent to."""
        for m in msgs:
            if m.topic == self.retry_topic:
                real = m.properties.get(fmt.PROPERTY_RETRY_TOPIC)
                if real:
                    m.topic = real
