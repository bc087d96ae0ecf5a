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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from shmq.client.consumer.cluster_member import ClusterMember, part_kwargs
from shmq.client.consumer.lite_pull import EXCLUSIVE, LitePullConsumer
from shmq.client.consumer.queue_check import check_broker, check_queue_id, queue_list, queue_name
from shmq.errors import BadArgumentError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, as_expression
from shmq.model.consumer_types import MessageModel
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import client_repr
from shmq.otel.gate import receive_observer as otel_receive_observer

if TYPE_CHECKING:
    from shmq.otel.hooks import ReceiveObserver

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
        clustering = MessageModel(kwargs.get("model", MessageModel.CLUSTERING)) is MessageModel.CLUSTERING
        self._member: ClusterMember[LitePullConsumer] = ClusterMember(
            namesrv, group, self._part, clustering, float(kwargs.get("start_timeout", 3.0)), log
        )
        self._assigned: set[MessageQueue] | None = None  # assign(): the queues of every broker
        self._running = False
        # OpenTelemetry (shmq.otel): this poll is observed, not each part's
        model = MessageModel(kwargs.get("model", MessageModel.CLUSTERING))
        self.otel: ReceiveObserver | None = otel_receive_observer(group, model)

    def _part(self, broker_name: str, _replica: str | None) -> LitePullConsumer:
        part = LitePullConsumer(self.group, broker_name, **part_kwargs(self._kwargs, broker_name))
        for topic, expression in self._subscriptions.items():
            part.subscribe(topic, expression)
        if self._assigned is not None:  # a broker that registers later gets its share of the assignment
            part.assign([mq for mq in self._assigned if mq.broker_name == broker_name])
        part.notify_arrivals(self._arrived)
        part.otel = None
        return part

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """As ``LitePullConsumer.subscribe``, on every broker."""
        if self._assigned is not None:
            raise BadArgumentError(f"{EXCLUSIVE} This consumer used assign(): use another consumer for subscribe()")
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
        if self.otel is not None:
            return self.otel.receive(self._poll, timeout)
        return self._poll(timeout)

    def _poll(self, timeout: float) -> list[MessageExt]:
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

    def commit_sync(self) -> None:
        """Commit, on every broker, the offsets after what ``poll`` returned; each has them on return."""
        for part in self._member.parts():
            part.commit_sync()

    def commit(self) -> None:
        """``commit_sync`` (the earlier name)."""
        self.commit_sync()

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every read queue of ``topic`` on every broker of the cluster that has it, sorted."""
        out: list[MessageQueue] = []
        for part in self._member.serving_parts():
            try:
                out.extend(part.fetch_message_queues(topic))
            except BadArgumentError:  # not on this broker
                continue
        if not out:
            raise BadArgumentError(
                f"topic {topic!r} does not exist on any broker of name server {self.namesrv!r}: "
                f"create it (shmq admin topic create) or send to it first"
            )
        return sorted(out)

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """As ``LitePullConsumer.assign`` (after ``start()``): each broker's part reads its share of
        ``mqs``; a broker that registers later gets its share when its part starts."""
        wanted = set(queue_list(mqs))
        if self._subscriptions:
            raise BadArgumentError(f"{EXCLUSIVE} This consumer used subscribe(): use another consumer for assign()")
        if not self._running:
            raise ShmqError("start() the consumer before assign(): a cluster's brokers are known only then")
        for mq in sorted(wanted):  # all checked before any part changes
            check_queue_id(mq, len(self._part_of(mq).fetch_message_queues(mq.topic)))
        self._assigned = wanted
        for part in self._member.parts():
            part.assign([mq for mq in wanted if mq.broker_name == part.broker_name])

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """As ``LitePullConsumer.seek``, on the broker of ``mq``."""
        self._part_of(mq).seek(mq, offset)

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self._part_of(mq).seek_to_begin(mq)

    def seek_to_end(self, mq: MessageQueue) -> None:
        self._part_of(mq).seek_to_end(mq)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """As ``LitePullConsumer.pause``, each queue on its broker (all checked first)."""
        for part, share in self._by_part(mqs):
            part.pause(share)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        for part, share in self._by_part(mqs):
            part.resume(share)

    def paused(self) -> set[MessageQueue]:
        return {mq for part in self._member.parts() for mq in part.paused()}

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` on its broker, -1 if none."""
        return self._part_of(mq).committed(mq)

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._part_of(mq).offset_for_timestamp(mq, timestamp_ms)

    def _part_of(self, mq: MessageQueue) -> LitePullConsumer:
        """The part on ``mq``'s broker; ``BadArgumentError`` if the cluster has no such broker."""
        check_broker(mq.broker_name, mq)
        part = self._member.part(mq.broker_name)
        if part is None:
            known = ", ".join(sorted(p.broker_name for p in self._member.parts())) or "none yet"
            raise BadArgumentError(
                f"{queue_name(mq)}: no broker {mq.broker_name!r} in the cluster of name server "
                f"{self.namesrv!r} (its brokers: {known})"
            )
        return part

    def _by_part(self, mqs: Iterable[MessageQueue]) -> list[tuple[LitePullConsumer, list[MessageQueue]]]:
        """``mqs`` grouped by the part of their broker; every broker checked before any is used."""
        shares: dict[str, tuple[LitePullConsumer, list[MessageQueue]]] = {}
        for mq in queue_list(mqs):
            part = self._part_of(mq)
            shares.setdefault(part.broker_name, (part, []))[1].append(mq)
        return list(shares.values())

    def assignment(self) -> set[MessageQueue]:
        """The queues this member consumes now, of every broker."""
        return {mq for part in self._member.serving_parts() for mq in part.assignment()}
