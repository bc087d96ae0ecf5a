"""PullConsumer: the caller picks queues and offsets (RocketMQ's DefaultMQPullConsumer).

Pulls read the store files directly up to the published max offset; with nothing new a pull
long-polls through the broker (PULL_WAIT, then WAKE) and returns as soon as a message
arrives, or NO_NEW_MSG at its timeout. Offsets it commits are the group's on the broker.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from shmq.client import exit_close
from shmq.client.connection import BrokerConnection, Session, next_request_id
from shmq.client.consumer.offset_store import OffsetTable
from shmq.client.consumer.pull_wrapper import PullAPIWrapper
from shmq.codec import frames as P
from shmq.errors import BadArgumentError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, Subscription, as_expression
from shmq.model.consumer_types import PullResult, PullStatus
from shmq.model.message import MessageQueue
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import receive_observer as otel_receive_observer

if TYPE_CHECKING:
    from shmq.otel.hooks import ReceiveObserver

CONSUMER_RING_BYTES = 256 * 1024  # requests and answers are small: PULL_WAIT, COMMIT_OFFSET, WAKE


class PullConsumer:
    def __new__(cls, group: str, broker: str | None = None, *, namesrv: str | None = None, **kwargs: Any) -> Any:
        """With ``namesrv`` (or ``$SHMQ_NAMESRV`` and no ``broker``): a consumer over every broker
        of that name server's cluster (``ClusterPullConsumer``, the same methods)."""
        ns = namesrv_or_env(namesrv, broker)
        if ns is None:
            return super().__new__(cls)
        from shmq.client.consumer.cluster_pull import ClusterPullConsumer

        return ClusterPullConsumer(group, ns, **kwargs)

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        start_timeout: float = 3.0,
        ring_bytes: int = CONSUMER_RING_BYTES,
        replica: str | None = None,
    ) -> None:
        """``replica``: the name of a replica of ``broker`` (on this host) to read from while
        ``broker`` is down (RocketMQ's slave read); back to ``broker`` within a second of its return.
        ``namesrv``: pull from every broker of that name server's cluster (see ``__new__``)."""
        self.group = group
        self.start_timeout = start_timeout
        self._conn = BrokerConnection(
            broker, "consumer", group, ring_bytes, self._on_response, on_lost=self._on_lost, replica=replica
        )
        self.broker_name = self._conn.broker_name
        self._wrapper = PullAPIWrapper(self._conn)
        self._lock = threading.Lock()  # the store reader is not thread-safe
        self._offsets = OffsetTable()
        self._expressions: dict[str, Subscription] = {}
        # OpenTelemetry (shmq.otel): receive spans and metrics per ``pull``, when instrumented
        self.otel: ReceiveObserver | None = otel_receive_observer(group, None)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PullConsumer:
        """Attach; ``BrokerNotFoundError`` within ``start_timeout`` if no broker of this name serves."""
        self._conn.start(self.start_timeout)
        with self._lock:
            self._wrapper.bind(time.monotonic() + self.start_timeout)
        exit_close.track(self)
        return self

    def shutdown(self) -> None:
        """Detach; waiting pulls return."""
        exit_close.untrack(self)
        self._conn.shutdown()
        self._wrapper.wake_all()
        with self._lock:
            self._wrapper.close()

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("PullConsumer", self.group, self.broker_name, self._conn.started)

    def _on_response(self, kind: int, view: memoryview) -> None:
        self._wrapper.on_response(kind, view)

    def _on_lost(self, _session: Session, _why: str) -> None:
        self._wrapper.wake_all()

    # ------------------------------------------------------------------ queues and offsets

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's read queues (empty until the topic exists: a first send or create_topic makes it)."""
        with self._lock:
            self._wrapper.bind(time.monotonic() + self.start_timeout)
            n = self._wrapper.views()[0].read_queue_count(topic)
        return [MessageQueue(topic, self.broker_name, q) for q in range(n)]

    def min_offset(self, mq: MessageQueue) -> int:
        return self._queue_offsets(mq)[0]

    def max_offset(self, mq: MessageQueue) -> int:
        """One past the last message of the queue (the offset the next message will get)."""
        return self._queue_offsets(mq)[1]

    def _queue_offsets(self, mq: MessageQueue) -> tuple[int, int]:
        with self._lock:
            self._wrapper.bind(time.monotonic() + self.start_timeout)
            return self._wrapper.views()[0].queue_offsets(mq.topic, mq.queue_id)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms``; the max offset if every message is older."""
        with self._lock:
            self._wrapper.bind(time.monotonic() + self.start_timeout)
            return self._wrapper.offset_for_timestamp(mq, timestamp_ms)

    def commit(self, mq: MessageQueue, offset: int) -> None:
        """Commit the group's offset of ``mq`` (the next offset to consume) to the broker."""
        if offset < 0:
            raise BadArgumentError(f"offset must be >= 0, got {offset}")
        self._offsets.update(mq.topic, mq.queue_id, offset)
        self._conn.write_frame(
            P.COMMIT_OFFSET,
            P.encode_commit_offset(next_request_id(), self.group, mq.topic, mq.queue_id, offset),
            time.monotonic() + self.start_timeout,
        )

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The group's committed offset of ``mq``, -1 if none: this consumer's last commit, else the broker's."""
        if not from_store:
            local = self._offsets.read(mq.topic, mq.queue_id)
            if local >= 0:
                return local
        body = self._conn.admin(
            "query_offset", {"group": self.group, "topic": mq.topic, "queue_id": mq.queue_id}, self.start_timeout
        )
        return int(body["offset"])

    # ------------------------------------------------------------------ pulling

    def pull(
        self,
        mq: MessageQueue,
        expression: str | Expression | Predicate = "*",
        *,
        offset: int,
        max_nums: int = 32,
        timeout: float = 1.0,
    ) -> PullResult:
        """Up to ``max_nums`` messages from ``offset``; long-polls up to ``timeout`` s when there is none.

        FOUND, NO_MATCHED_MSG (``next_begin_offset`` skips the mismatches), NO_NEW_MSG, or
        OFFSET_ILLEGAL: below the queue's min offset (its files were cleaned up) the
        ``next_begin_offset`` is that min, past the max it is the max, as RocketMQ answers.
        Raises ``TopicNotReadableError`` if the topic's perm lacks the read bit (4), as
        RocketMQ's pull fails with NO_PERMISSION; ``BadExpressionError`` for a bad expression.
        ``expression`` may be a predicate ``fn(msg) -> bool`` (see shmq.filter.function): the
        messages it rejects are skipped as tag mismatches are."""
        if self.otel is not None:
            return self.otel.receive(self._pull, mq, expression, offset, max_nums, timeout)
        return self._pull(mq, expression, offset, max_nums, timeout)

    def _pull(
        self, mq: MessageQueue, expression: str | Expression | Predicate, offset: int, max_nums: int, timeout: float
    ) -> PullResult:
        result = self.pull_batch(mq, expression, offset=offset, max_nums=max_nums, timeout=timeout)
        result.messages  # noqa: B018 - decode now, so the caller's time is spent here and the views can go
        return result

    def pull_batch(
        self,
        mq: MessageQueue,
        expression: str | Expression | Predicate = "*",
        *,
        offset: int,
        max_nums: int = 32,
        timeout: float = 1.0,
    ) -> PullResult:
        """As ``pull``, with the messages left in the columnar ``result.batch`` (decoded only if asked)."""
        if max_nums <= 0:
            raise BadArgumentError(f"max_nums must be positive, got {max_nums}")
        expr = self._expression(expression)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                self._wrapper.bind(deadline)
                result = self._wrapper.pull(mq, expr, offset, max_nums)
            remaining = deadline - time.monotonic()
            if result.status is not PullStatus.NO_NEW_MSG or remaining <= 0:
                return result
            woke = threading.Event()

            def on_wake(_wake: object, woke: threading.Event = woke) -> None:  # this round's event, bound now
                woke.set()

            req_id = self._wrapper.pull_wait(mq, offset, remaining, on_wake)
            if not woke.wait(remaining):
                self._wrapper.cancel(req_id)
            if not self._conn.started:
                raise ShmqError("the pull consumer was shut down")

    def _expression(self, expression: str | Expression | Predicate) -> Subscription:
        if not isinstance(expression, str):
            return as_expression(expression)
        expr = self._expressions.get(expression)
        if expr is None:
            expr = self._expressions[expression] = as_expression(expression)
        return expr
