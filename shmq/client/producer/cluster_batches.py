"""ClusterBatches: a cluster producer's auto batching, one broker per batch.

``send_async`` and ``send_oneway`` of plain messages go into the cluster producer's own
``ProduceAccumulator`` (the single-broker producer's, with its compiled fast path), not into
a broker's: the broker is picked when a batch is handed over, so the round robin, the fault
tolerance and the retries cost once per batch instead of once per message. A batch whose
broker died, was busy or could not be reached is sent whole to another broker
(``retry_times_when_send_failed`` times within ``send_msg_timeout``); each message's future
gets its own SendResult.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from shmq.client.producer.accumulator import Group, PendingSend, ProduceAccumulator, settle
from shmq.client.producer.cluster_brokers import ClusterBrokers
from shmq.client.producer.inflight import InFlight
from shmq.client.producer.producer import Producer
from shmq.model.message import Message

log = logging.getLogger(__name__)

Futures = Sequence[PendingSend | None]  # None: a oneway message


class ClusterBatches:
    """The accumulator of a cluster producer and the sending of its batches (``settings``: the
    producer, read at each batch for ``send_msg_timeout`` and ``retry_times_when_send_failed``)."""

    def __init__(
        self, cluster: ClusterBrokers, settings: Producer, retries: InFlight, delay: float, max_bytes: int
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.retries = retries
        self.accumulator = ProduceAccumulator(self._send_groups, delay, max_bytes)

    def _send_groups(self, groups: list[Group]) -> None:
        """The accumulator's flush: each (topic) group to the next broker, as one batch."""
        deadline = time.monotonic() + self.settings.send_msg_timeout
        for topic, _queue, msgs, futures in groups:
            self._send(topic, msgs, futures, deadline, self.settings.retry_times_when_send_failed, None)

    def _send(
        self, topic: str, msgs: list[Message], futures: Futures, deadline: float, retries: int, avoid: str | None
    ) -> None:
        try:
            p, info = self.cluster.pick(topic, avoid, deadline)
        except Exception as e:  # noqa: BLE001 - the messages' futures get it
            _fail(futures, e, topic)
            return
        start = time.perf_counter()
        try:
            sent = p.send_batch_async(msgs, timeout=max(0.0, deadline - time.monotonic()), per_message=True)
        except Exception as e:  # noqa: BLE001 - the messages' futures get it, or the batch goes elsewhere
            self._failed(topic, msgs, futures, deadline, retries, p, start, e)
            return

        def done(f: Future[Any]) -> None:
            error = f.exception()
            if error is None:
                self.cluster.sent(p, info, start)
                settle(futures, f.result(), None)
            else:
                self._failed(topic, msgs, futures, deadline, retries, p, start, error)

        sent.add_done_callback(done)

    def _failed(
        self,
        topic: str,
        msgs: list[Message],
        futures: Futures,
        deadline: float,
        retries: int,
        p: Producer,
        start: float,
        error: BaseException,
    ) -> None:
        """The batch on ``p`` failed: to another broker if ``error`` may be cured there, else settled."""
        retriable = self.cluster.failed(p, start, error)
        if retriable and retries > 0 and time.monotonic() < deadline and self.cluster.started:
            token = object()
            self.retries.add(token)
            again = functools.partial(
                self._retry, token, topic, msgs, futures, deadline, retries - 1, str(p.broker_name)
            )
            if self.cluster.background(again):
                return
            self.retries.discard(token)
        _fail(futures, error, topic)

    def _retry(
        self,
        token: object,
        topic: str,
        msgs: list[Message],
        futures: Futures,
        deadline: float,
        retries: int,
        avoid: str,
    ) -> None:
        try:
            self._send(topic, msgs, futures, deadline, retries, avoid)
        finally:
            self.retries.discard(token)  # written to another broker (flush waits there), or settled


def _fail(futures: Futures, error: BaseException, topic: str) -> None:
    """Every message of a batch failed with ``error``; oneway ones are logged."""
    if any(f is None for f in futures):
        log.warning("oneway messages to %s were not sent: %s", topic, error)
    settle(futures, (), error)
