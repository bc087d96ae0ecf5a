"""ClusterPushConsumer: what ``PushConsumer(group, namesrv=NS)`` is, a push consumer over every broker of a cluster.

One ``PushConsumer`` part per broker (see ``ClusterMember``), all calling the same listener and
hooks. Clustering: the group's queues of all brokers are balanced with the allocate strategy
over the sorted (broker name, queue id) list and the sorted members; each queue's offset is
committed to its broker, and a message the listener sends back goes to the broker that
delivered it (the part's own retry topic and DLQ). Broadcasting: every part reads all of its
broker's queues, with its local offsets in a file of its own broker.
"""

from __future__ import annotations

import logging
from typing import Any

from shmq.client.consumer.cluster_member import ClusterMember, part_kwargs
from shmq.client.consumer.push import PushConsumer
from shmq.client.hooks import ConsumeMessageHook, check_hook
from shmq.errors import ArgumentTypeError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, as_expression
from shmq.model.consumer_types import MessageListener, MessageModel
from shmq.model.message import MessageQueue
from shmq.model.reprs import client_repr

log = logging.getLogger("shmq.client.consumer.push")  # the records read as the push consumer's


class ClusterPushConsumer:
    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        """``kwargs``: PushConsumer's; checked here by building a part that is never started."""
        kwargs.pop("replica", None)  # each broker's part reads from that broker's registered replica
        PushConsumer(group, "default", **{k: v for k, v in kwargs.items() if k != "trace"})
        self.group = group
        self.namesrv = namesrv
        self.model = MessageModel(kwargs.get("model", MessageModel.CLUSTERING))
        self.start_timeout = float(kwargs.get("start_timeout", 3.0))
        self._kwargs = kwargs
        self._subscriptions: dict[str, Expression | Predicate | str] = {}
        self._listener: MessageListener | None = None
        self._orderly = False
        self._hooks: list[ConsumeMessageHook] = []
        self._member: ClusterMember[PushConsumer] = ClusterMember(
            namesrv, group, self._part, self.model is MessageModel.CLUSTERING, self.start_timeout, log
        )
        self._running = False
        self._suspended = False

    def _part(self, broker_name: str, replica: str | None) -> PushConsumer:
        part = PushConsumer(self.group, broker_name, replica=replica, **part_kwargs(self._kwargs, broker_name))
        for topic, expression in self._subscriptions.items():
            part.subscribe(topic, expression)
        if self._listener is not None:
            part.register_listener(self._listener, self._orderly)
        for hook in self._hooks:
            part.register_consume_hook(hook)
        if self._suspended:  # a broker that registers while suspended starts suspended
            part.suspend()
        return part

    # ------------------------------------------------------------------ configuration

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """As ``PushConsumer.subscribe``, on every broker."""
        as_expression(expression)  # a bad one fails here, as on one broker
        self._subscriptions[topic] = expression
        for part in self._member.parts():
            part.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        for part in self._member.parts():
            part.unsubscribe(topic)

    def register_listener(self, listener: MessageListener, orderly: bool = False) -> None:
        """As ``PushConsumer.register_listener``: called from every broker's consume threads."""
        if not callable(listener):
            raise ArgumentTypeError("the listener must be callable: fn(msgs, ctx) -> ConsumeResult")
        self._listener = listener
        self._orderly = orderly

    def register_consume_hook(self, hook: ConsumeMessageHook) -> None:
        if self._running:
            raise ShmqError("register consume hooks before start()")
        check_hook(hook, "consume_message_before", "consume_message_after")
        self._hooks.append(hook)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ClusterPushConsumer:
        """Attach to every broker of the routes and start consuming; ``NameServerNotFoundError``
        within ``start_timeout`` if no name server of this name serves."""
        if self._listener is None:
            raise ShmqError("register a listener before start()")
        if not self._subscriptions:
            raise ShmqError("subscribe to a topic before start()")
        if not self._running:
            self._member.start()
            self._running = True
        return self

    def suspend(self) -> None:
        """As ``PushConsumer.suspend``, on every broker (and on a broker that registers meanwhile)."""
        self._suspended = True
        for part in self._member.parts():
            part.suspend()

    def resume(self) -> None:
        """As ``PushConsumer.resume``, on every broker."""
        self._suspended = False
        for part in self._member.parts():
            part.resume()

    @property
    def suspended(self) -> bool:
        return self._suspended

    def shutdown(self) -> None:
        """Stop every broker's part (each lets its listener calls finish, commits, leaves)."""
        self._running = False
        self._member.shutdown()

    def __enter__(self) -> ClusterPushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("PushConsumer", self.group, f"namesrv:{self.namesrv}", self._running, self._subscriptions)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member consumes now, of every broker, sorted."""
        return sorted(mq for part in self._member.serving_parts() for mq in part.assigned_queues())
