"""QueueOffsets: where a consumer's assigned queues start, and committing how far they are consumed.

Kept apart from the puller so that the rules every consumer of a group must agree on live in
one place: a queue the group has no offset for starts where ``consume_from`` says (RocketMQ's
computePullFromWhere), and that start is committed at once, so later members continue from it
instead of choosing again (RocketMQ's LAST_OFFSET surprise: history replayed to a new group).
Commits go to the broker (RocketMQ's RemoteBrokerOffsetStore) or, broadcasting, to the member's
own file (LocalFileOffsetStore).
"""

from __future__ import annotations

import time

from shmq.client.connection import BrokerConnection, next_request_id
from shmq.client.consumer.offset_store import LocalFileOffsetStore
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.pull_wrapper import PullAPIWrapper
from shmq.codec import frames as P
from shmq.model.consumer_types import ConsumeFrom
from shmq.model.message import MessageQueue
from shmq.model.system_topics import is_retry_topic

DEFAULT_TIMESTAMP_AGO_MS = 30 * 60 * 1000  # ConsumeFrom.TIMESTAMP without a timestamp: 30 minutes ago


class QueueOffsets:
    """The offsets of one consumer's queues: the group's on the broker, or ``local`` (broadcasting)."""

    def __init__(
        self,
        conn: BrokerConnection,
        wrapper: PullAPIWrapper,
        group: str,
        consume_from: ConsumeFrom,
        consume_timestamp: int | None,
        timeout: float,
        local: LocalFileOffsetStore | None,
    ) -> None:
        self._conn = conn
        self._wrapper = wrapper
        self.group = group
        self.consume_from = consume_from
        self.consume_timestamp = consume_timestamp
        self.timeout = timeout
        self.local = local

    def init(self, pq: ProcessQueue) -> None:
        """Where a newly assigned queue starts: the group's offset, else ``consume_from`` (committed at once)."""
        mq = pq.mq
        offset = self.read(mq)
        if offset < 0:
            state = self._wrapper.views()[0]
            lo, hi = state.queue_offsets(mq.topic, mq.queue_id)
            if self.consume_from is ConsumeFrom.FIRST_OFFSET or is_retry_topic(mq.topic):
                offset = lo  # a retry queue holds only the group's redeliveries: all are for it
            elif self.consume_from is ConsumeFrom.LAST_OFFSET:
                offset = hi
            else:
                ts = (
                    self.consume_timestamp
                    if self.consume_timestamp is not None
                    else int(time.time() * 1000) - DEFAULT_TIMESTAMP_AGO_MS
                )
                offset = self._wrapper.offset_for_timestamp(mq, ts)
            pq.next_offset = offset
            self.commit([pq], sync=True)
        pq.next_offset = offset

    def read(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` (the broker's, or the local file's), -1 if none."""
        if self.local is not None:
            return self.local.read(mq.topic, mq.queue_id)
        return int(
            self._conn.admin(
                "query_offset", {"group": self.group, "topic": mq.topic, "queue_id": mq.queue_id}, self.timeout
            )["offset"]
        )

    def commit(self, pqs: list[ProcessQueue], sync: bool, force: bool = False) -> None:
        """Commit each queue's smallest offset in process (if it moved): a COMMIT_OFFSET frame, or
        synchronously through the control queue (rebalance, shutdown), or the local file when broadcasting."""
        for pq in pqs:
            if pq.next_offset < 0:
                continue
            offset = pq.commit_offset()
            if offset == pq.committed and not force:
                continue
            mq = pq.mq
            if self.local is not None:
                self.local.update(mq.topic, mq.queue_id, offset)
            elif sync:
                self._conn.admin(
                    "commit_offset",
                    {"group": self.group, "topic": mq.topic, "queue_id": mq.queue_id, "offset": offset},
                    self.timeout,
                )
            else:
                self._conn.write_frame(
                    P.COMMIT_OFFSET,
                    P.encode_commit_offset(next_request_id(), self.group, mq.topic, mq.queue_id, offset),
                    time.monotonic() + 1.0,
                )
            pq.committed = offset
        if self.local is not None:
            self.local.persist()
