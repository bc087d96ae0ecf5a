"""ClusterLitePullConsumer: what ``LitePullConsumer(group, namesrv=NS)`` is, ``poll()`` over every broker of a cluster.

One ``LitePullConsumer`` part per broker (see ``ClusterMember``): the group's queues of all
brokers are balanced over its members, each part reads ahead its broker's share and commits
it there. ``poll`` takes from the parts in turn (a rotating first one, so no broker starves)
and sleeps on one event every part sets when it has messages ready.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

from shmq.client.consumer.cluster_member import ClusterMember
from shmq.client.consumer.lite_pull import LitePullConsumer
from shmq.errors import BadArgumentError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, as_expression
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import client_repr

log = logging.getLogger("shmq.client.consumer.lite_pull")  # the records read as the lite consumer's


class ClusterLitePullConsumer:
    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        """``kwargs``: LitePullConsumer's; checked here by building a part that is never started."""
        LitePullConsumer(group, "default", **kwargs)
        self.group = group
        self.namesrv = namesrv
        self.pull_batch_size = int(kwargs.get("pull_batch_size", 32))
        self._kwargs = kwargs
        self._subscriptions: dict[str, str | Expression | Predicate] = {}
        self._arrived = threading.Event()
        self._rotation = itertools.count()
        self._member: ClusterMember[LitePullConsumer] = ClusterMember(
            namesrv, group, self._part, True, float(kwargs.get("start_timeout", 3.0)), log
        )
        self._running = False

    def _part(self, broker_name: str, _replica: str | None) -> LitePullConsumer:
        part = LitePullConsumer(self.group, broker_name, **self._kwargs)
        for topic, expression in self._subscriptions.items():
            part.subscribe(topic, expression)
        part.notify_arrivals(self._arrived)
        return part

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """As ``LitePullConsumer.subscribe``, on every broker."""
        as_expression(expression)  # a bad one fails here, as on one broker
        self._subscriptions[topic] = expression
        for part in self._member.parts():
            part.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        for part in self._member.parts():
            part.unsubscribe(topic)

    def start(self) -> ClusterLitePullConsumer:
        """Attach to every broker of the routes; ``NameServerNotFoundError`` within ``start_timeout``."""
        if not self._running:
            self._member.start()
            self._running = True
        return self

    def shutdown(self) -> None:
        """Stop every broker's part (each commits what ``poll`` returned, with ``auto_commit``)."""
        self._running = False
        self._arrived.set()
        self._member.shutdown()

    def __enter__(self) -> ClusterLitePullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr(
            "LitePullConsumer", self.group, f"namesrv:{self.namesrv}", self._running, self._subscriptions
        )

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Up to ``pull_batch_size`` messages of any broker as soon as some are there, [] after ``timeout``."""
        if not self._running:
            raise ShmqError("start() the consumer before poll()")
        deadline = time.monotonic() + timeout
        while True:
            self._arrived.clear()
            parts = self._member.parts()
            if parts:
                start = next(self._rotation) % len(parts)
                out: list[MessageExt] = []
                for part in parts[start:] + parts[:start]:
                    out.extend(part.poll(0.0))
                    if len(out) >= self.pull_batch_size:
                        break
                if out:
                    return out
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._running:
                return []
            self._arrived.wait(min(remaining, 0.05))  # 50 ms: a part started meanwhile is polled too

    def commit(self) -> None:
        """Commit, on every broker, the offsets after what ``poll`` returned."""
        for part in self._member.parts():
            part.commit()

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """As ``LitePullConsumer.seek``, on the broker of ``mq``."""
        part = self._member.part(mq.broker_name)
        if part is None:
            raise BadArgumentError(f"{mq} is not assigned to this consumer (see assignment())")
        part.seek(mq, offset)

    def assignment(self) -> set[MessageQueue]:
        """The queues this member consumes now, of every broker."""
        return {mq for part in self._member.serving_parts() for mq in part.assignment()}
