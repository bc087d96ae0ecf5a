"""ResetInbox: offset resets the broker pushed to a consumer, applied by the consumer's puller.

The reader thread receives RESET_OFFSET (see shmq.broker.offset_reset) and only queues it: the
process queues belong to the puller, which applies every queued reset at the top of its next
pass (before rebalancing, pulling or committing), through the consumer's own way of dropping a
queue's cached state. Then it answers RESET_OFFSET_ACK on the request ring, behind every
COMMIT_OFFSET it wrote before: the broker drops this member's commits of the reset queues until
that ack, so no commit of an old position can undo the reset. Resets for another group (a
client is in one) and queues this member does not own are acknowledged without anything to do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from shmq.client.connection import BrokerConnection
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.codec import frames as P
from shmq.codec.reset_frames import OffsetReset, decode_reset_offset, encode_reset_offset_ack
from shmq.model.message import MessageQueue

log = logging.getLogger(__name__)

ACK_WRITE_S = 1.0


class ResetInbox:
    def __init__(self, conn: BrokerConnection, group: str, wakeup: threading.Event) -> None:
        self._conn = conn
        self.group = group
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._pending: list[OffsetReset] = []
        self._unacked: list[int] = []  # ids of resets applied whose ack is not written yet (puller only)
        self.applied = 0  # resets applied since start (tests and logs watch it)

    def on_response(self, kind: int, view: memoryview) -> bool:
        """Queue a RESET_OFFSET (reader thread); False for any other frame kind."""
        if kind != P.RESET_OFFSET:
            return False
        reset = decode_reset_offset(view)
        with self._lock:
            self._pending.append(reset)
        self._wakeup.set()
        return True

    def apply(self, pqs: dict[MessageQueue, ProcessQueue], restart: Callable[[ProcessQueue, int], None]) -> None:
        """Apply the queued resets to the owned ``pqs`` (puller thread): ``restart(pq, offset)``
        drops what ``pq`` cached and resumes it from ``offset``; then acknowledge each reset.
        An ack that cannot be written (ring full) is tried again on the next pass."""
        with self._lock:
            pending, self._pending = self._pending, []
        for reset in pending:
            if reset.group == self.group:
                for pq in [pq for mq, pq in pqs.items() if mq.topic == reset.topic and mq.queue_id in reset.offsets]:
                    restart(pq, reset.offsets[pq.mq.queue_id])
                log.info("consumer %r: offsets of %s reset to %s", self.group, reset.topic, reset.offsets)
            self.applied += 1
            self._unacked.append(reset.req_id)
        while self._unacked:
            self._conn.write_frame(
                P.RESET_OFFSET_ACK, encode_reset_offset_ack(self._unacked[0]), time.monotonic() + ACK_WRITE_S
            )
            self._unacked.pop(0)
