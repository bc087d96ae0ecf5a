"""ClusterSimpleConsumer: what ``SimpleConsumer(group, namesrv=NS)`` is, POP over every master of a cluster.

One ``SimpleConsumer`` part per broker name (see ``ClusterMember``; POP needs the master, so a
part never reads from a replica). ``receive`` asks the brokers in turn without waiting (a
rotating first one, so no broker starves) and returns the first messages it gets; when every
broker was empty it long-polls all of them at once and returns the first answer with messages.
Answers that come after that are kept, and the next ``receive`` returns them first. Acks go to
the broker that handed the message out (its receipt names it). A broker that dies drops out of
``receive`` until the routes show it again.
"""

from __future__ import annotations

import itertools
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any

from shmq.client.consumer.cluster_member import ClusterMember
from shmq.client.consumer.simple import ANSWER_GRACE_S, SimpleConsumer, check_receive, pop_subscription, receipt_of
from shmq.codec import pop_frames as F
from shmq.errors import BadArgumentError, ShmqError
from shmq.filter.tags import Expression
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import client_repr
from shmq.otel.gate import receive_observer as otel_receive_observer

if TYPE_CHECKING:
    from shmq.otel.hooks import ReceiveObserver

log = logging.getLogger("shmq.client.consumer.simple")  # the records read as the simple consumer's

ASK_S = 1.0  # how long the first, non-waiting round waits for one broker's answer


class ClusterSimpleConsumer:
    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        """``kwargs``: SimpleConsumer's; checked here by building a part that is never started."""
        first = SimpleConsumer(group, "default", **kwargs)
        self.group = group
        self.namesrv = namesrv
        self.await_duration = first.await_duration
        self._kwargs = kwargs
        self._subscriptions: dict[str, str | Expression] = dict(kwargs.pop("subscriptions", None) or {})
        self._rotation = itertools.count()
        self._member: ClusterMember[SimpleConsumer] = ClusterMember(
            namesrv, group, self._part, False, float(kwargs.get("start_timeout", 3.0)), log
        )
        self._running = False
        # OpenTelemetry (shmq.otel): this receive is observed (the parts' are never called)
        self.otel: ReceiveObserver | None = otel_receive_observer(group, None)

    def _part(self, broker_name: str, _replica: str | None) -> SimpleConsumer:
        part = SimpleConsumer(self.group, broker_name, subscriptions=self._subscriptions, **self._kwargs)
        assert isinstance(part, SimpleConsumer)
        return part

    def subscribe(self, topic: str, expression: str | Expression = "*") -> None:
        """As ``SimpleConsumer.subscribe``, on every broker."""
        pop_subscription(expression)  # a bad one fails here, as on one broker
        self._subscriptions[topic] = expression
        for part in self._member.parts():
            part.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        for part in self._member.parts():
            part.unsubscribe(topic)

    def start(self) -> ClusterSimpleConsumer:
        """Attach to every master of the routes; ``NameServerNotFoundError`` within ``start_timeout``."""
        if not self._running:
            self._member.start()
            self._running = True
        return self

    def shutdown(self) -> None:
        """Shut every broker's part down (each writes its queued acks first)."""
        self._running = False
        self._member.shutdown()

    def __enter__(self) -> ClusterSimpleConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("SimpleConsumer", self.group, f"namesrv:{self.namesrv}", self._running, self._subscriptions)

    # ------------------------------------------------------------------ receive

    def receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        """As ``SimpleConsumer.receive``, from any broker of the cluster."""
        if self.otel is not None:
            return self.otel.receive(self._receive, max_message_num, invisible_duration)
        return self._receive(max_message_num, invisible_duration)

    def _receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        invisible_ms = check_receive(max_message_num, invisible_duration)
        if not self._running:
            raise ShmqError("start() the SimpleConsumer before receive()")
        parts = self._member.serving_parts()
        if parts:
            first = next(self._rotation) % len(parts)
            parts = parts[first:] + parts[:first]
        for part in parts:
            kept = part.take_kept(max_message_num)
            if kept:
                return kept
        for part in parts:
            msgs = self._ask(part, max_message_num, invisible_ms)
            if msgs:
                return msgs
        return self._long_poll(parts, max_message_num, invisible_ms)

    def _ask(self, part: SimpleConsumer, n: int, invisible_ms: int) -> list[MessageExt]:
        """What ``part``'s broker hands out now ([] if it has nothing or cannot answer)."""
        deadline = time.monotonic() + ASK_S
        try:
            fut = part.pop(n, invisible_ms, 0.0, deadline)
        except (ShmqError, OSError):
            return []
        try:
            return part.messages(fut.result(ASK_S))
        except TimeoutError:
            part.keep_late(fut)
        except (ShmqError, OSError) as e:
            log.debug("consumer %r: broker %r did not answer a POP: %s", self.group, part.broker_name, e)
        return []

    def _long_poll(self, parts: list[SimpleConsumer], n: int, invisible_ms: int) -> list[MessageExt]:
        """Long-poll every broker at once: the first answer with messages; later ones are kept."""
        deadline = time.monotonic() + self.await_duration + ANSWER_GRACE_S
        waiting: dict[Future[F.PopResult], SimpleConsumer] = {}
        for part in parts:
            try:
                waiting[part.pop(n, invisible_ms, self.await_duration, deadline)] = part
            except (ShmqError, OSError):
                continue
        if not waiting:  # no broker to ask (none routed yet, or every one down): wait as a long poll would
            time.sleep(self.await_duration)
            return []
        out: list[MessageExt] = []
        while waiting and not out:
            done, _ = wait(list(waiting), max(0.0, deadline - time.monotonic()), FIRST_COMPLETED)
            if not done:
                break
            for fut in done:
                part = waiting.pop(fut)
                if fut.exception() is not None:
                    continue
                if out:
                    part.keep_late(fut)  # a second answer of this round: the next receive's
                else:
                    out = part.messages(fut.result())
        for fut, part in waiting.items():
            part.keep_late(fut)
        return out

    # ------------------------------------------------------------------ ack, change_invisible_duration

    def ack(self, msg: MessageExt) -> None:
        """As ``SimpleConsumer.ack``, on the broker that handed ``msg`` out."""
        self._owner(msg).ack(msg)

    def ack_async(self, msg: MessageExt) -> Future[None]:
        return self._owner(msg).ack_async(msg)

    def change_invisible_duration(self, msg: MessageExt, invisible_duration: float) -> None:
        self._owner(msg).change_invisible_duration(msg, invisible_duration)

    def change_invisible_duration_async(self, msg: MessageExt, invisible_duration: float) -> Future[None]:
        return self._owner(msg).change_invisible_duration_async(msg, invisible_duration)

    def _owner(self, msg: MessageExt) -> SimpleConsumer:
        broker = receipt_of(msg).broker_name
        part = self._member.part(broker)
        if part is None:
            raise BadArgumentError(f"message of broker {broker!r}, which this consumer is not attached to")
        return part
