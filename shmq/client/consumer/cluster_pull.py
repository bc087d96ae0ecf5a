"""ClusterPullConsumer: what ``PullConsumer(group, namesrv=NS)`` is, the caller's pulls over every broker of a cluster.

``fetch_queues(topic)`` lists the queues of every broker holding the topic (a dead master's
from its registered replica), sorted by (broker name, queue id); every other call goes to the
broker its ``MessageQueue.broker_name`` names, through a ``PullConsumer`` attached to that
broker (made on first use, reading from the broker's replica while it is down). Offsets the
caller commits are the group's on that broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from shmq.client.consumer.cluster_view import ClusterView
from shmq.client.consumer.pull import PullConsumer
from shmq.errors import BrokerNotFoundError, NameServerNotFoundError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression
from shmq.model.consumer_types import PullResult
from shmq.model.message import MessageQueue
from shmq.model.reprs import client_repr


class ClusterPullConsumer:
    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        """``kwargs``: PullConsumer's (but ``replica``: each broker's registered replica is used)."""
        kwargs.pop("replica", None)
        PullConsumer(group, "default", **kwargs)  # bad arguments fail here, as on one broker
        self.group = group
        self.namesrv = namesrv
        self.start_timeout = float(kwargs.get("start_timeout", 3.0))
        self._kwargs = kwargs
        self._view = ClusterView(namesrv)
        self._parts: dict[str, PullConsumer] = {}
        self._lock = threading.Lock()
        self._running = False

    def start(self) -> ClusterPullConsumer:
        """Read the routes; ``NameServerNotFoundError`` within ``start_timeout`` if none serves."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                self._view.routes()
                break
            except NameServerNotFoundError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        self._running = True
        return self

    def shutdown(self) -> None:
        """Detach from every broker; waiting pulls return."""
        self._running = False
        with self._lock:
            parts, self._parts = list(self._parts.values()), {}
        for part in parts:
            part.shutdown()
        self._view.close()

    def __enter__(self) -> ClusterPullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("PullConsumer", self.group, f"namesrv:{self.namesrv}", self._running)

    def _part(self, broker_name: str) -> PullConsumer:
        """The consumer attached to ``broker_name`` (or its replica), started on first use."""
        with self._lock:
            part = self._parts.get(broker_name)
            if part is not None:
                return part
            table = self._view.routes()
            if not any(b.broker_name == broker_name for b in table.brokers):
                raise BrokerNotFoundError(
                    f"broker {broker_name!r} is not in the routes of name server {self.namesrv!r}; "
                    f"see `shmq admin cluster list --namesrv {self.namesrv}`"
                )
            replicas = table.replicas(broker_name)
            part = PullConsumer(
                self.group, broker_name, replica=replicas[0].attach_name if replicas else None, **self._kwargs
            )
            part.start()
            self._parts[broker_name] = part
            return part

    # ------------------------------------------------------------------ queues and offsets

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's read queues on every broker that serves now, sorted (broker name, queue id)."""
        out: list[MessageQueue] = []
        for b in ClusterView.read_from(self._view.routes()):
            out.extend(self._part(b.broker_name).fetch_queues(topic))
        return out

    def min_offset(self, mq: MessageQueue) -> int:
        return self._part(mq.broker_name).min_offset(mq)

    def max_offset(self, mq: MessageQueue) -> int:
        return self._part(mq.broker_name).max_offset(mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._part(mq.broker_name).search_offset(mq, timestamp_ms)

    def commit(self, mq: MessageQueue, offset: int) -> None:
        """Commit the group's offset of ``mq`` to the broker that holds it."""
        self._part(mq.broker_name).commit(mq, offset)

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        return self._part(mq.broker_name).fetch_consume_offset(mq, from_store)

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
        """As ``PullConsumer.pull``, from the broker of ``mq``."""
        return self._part(mq.broker_name).pull(mq, expression, offset=offset, max_nums=max_nums, timeout=timeout)

    def pull_batch(
        self,
        mq: MessageQueue,
        expression: str | Expression | Predicate = "*",
        *,
        offset: int,
        max_nums: int = 32,
        timeout: float = 1.0,
    ) -> PullResult:
        """As ``PullConsumer.pull_batch``, from the broker of ``mq``."""
        return self._part(mq.broker_name).pull_batch(mq, expression, offset=offset, max_nums=max_nums, timeout=timeout)
