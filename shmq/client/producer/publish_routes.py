"""Where a cluster producer sends each topic: RocketMQ's TopicPublishInfo, from the name server's routes.

For each topic two lists, built once per route change and cached:

- ``queues``: what selectors and sharding keys index, every master's write queues sorted by
  (broker name, queue id). A master that left the routes keeps its queues here for
  ``KEEP_GONE_S`` (RocketMQ keeps a silent broker in its routes for 120 s): an ordered send
  keeps its queue, and fails naming the broker, instead of moving to another queue (which
  would break the order of its key) the moment a broker dies.
- ``rotation``: the live masters' names, one per write queue, interleaved by queue id
  (b0, b1, b0, b1, ...): round robin over it spreads sends over every write queue of the
  cluster in proportion to each broker's share; the broker picks the queue within itself.

A topic the routes do not know yet (a send auto-creates it) goes to every master, with the
queue count a broker auto-creates. ``update`` also says which brokers came, left or
registered again (a new pid), so the producer can open, shut or forgive them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from shmq.model.message import MessageQueue
from shmq.namesrv.routes import BrokerData, RouteTable

KEEP_GONE_S = 120.0
DEFAULT_QUEUE_NUMS = 4  # what a broker auto-creates (defaultTopicQueueNums)


@dataclass(frozen=True)
class TopicPublishInfo:
    topic: str
    queues: tuple[MessageQueue, ...]  # for selectors: sorted by (broker name, queue id), recently gone included
    rotation: tuple[str, ...]  # live master names, one per write queue, interleaved
    routed: bool  # the routes name the topic (else it is sent to every master, which creates it)


@dataclass(frozen=True)
class RouteChange:
    came: tuple[BrokerData, ...]  # masters new to this producer
    left: tuple[str, ...]  # masters no longer routed
    renewed: tuple[str, ...]  # masters routed before and now with another pid (restarted)


def _rotation_order(mq: MessageQueue) -> tuple[int, str]:
    return mq.queue_id, mq.broker_name


class PublishRoutes:
    """The producer's reading of the routes (not thread-safe: the producer holds its lock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.masters: dict[str, BrokerData] = {}
        self._signature: tuple[object, ...] = ()
        self._gone: dict[str, float] = {}  # master name -> when it left the routes
        self._known: dict[str, tuple[MessageQueue, ...]] = {}  # topic -> its last selector queues
        self._topics: dict[str, TopicPublishInfo] = {}
        self._table: RouteTable | None = None

    def update(self, table: RouteTable) -> RouteChange | None:
        """Take ``table``; what changed for the masters, None if nothing did."""
        signature = (
            table.incarnation,
            table.version,
            tuple((b.broker_name, b.broker_id, b.pid) for b in table.brokers),
        )
        if signature == self._signature:
            return None
        self._signature = signature
        now = self.clock()
        masters = {b.broker_name: b for b in table.masters()}
        old = self.masters
        left = tuple(name for name in old if name not in masters)
        for name in left:
            self._gone.setdefault(name, now)
        for name in masters:
            self._gone.pop(name, None)
        self.masters = masters
        self._table = table
        self._topics = {}
        return RouteChange(
            came=tuple(b for name, b in masters.items() if name not in old),
            left=left,
            renewed=tuple(name for name, b in masters.items() if name in old and old[name].pid != b.pid),
        )

    def is_live(self, broker_name: str) -> bool:
        return broker_name in self.masters

    def topic(self, topic: str) -> TopicPublishInfo:
        """The topic's publish info under the current routes."""
        if self._gone and self.clock() - min(self._gone.values()) >= KEEP_GONE_S:
            self._forget_gone()
        info = self._topics.get(topic)
        if info is None:
            info = self._topics[topic] = self._build(topic)
        return info

    def _forget_gone(self) -> None:
        """Drop the masters gone for KEEP_GONE_S from the selectors' queues."""
        now = self.clock()
        self._gone = {name: t for name, t in self._gone.items() if now - t < KEEP_GONE_S}
        self._topics = {}

    def _build(self, topic: str) -> TopicPublishInfo:
        route = self._table.topic_route(topic) if self._table is not None else None
        if route is not None and route.exists:
            live = route.write_queues()
        else:
            live = [MessageQueue(topic, name, q) for name in self.masters for q in range(DEFAULT_QUEUE_NUMS)]
        now = self.clock()
        kept = [
            mq
            for mq in self._known.get(topic, ())
            if mq.broker_name in self._gone and now - self._gone[mq.broker_name] < KEEP_GONE_S
        ]
        queues = tuple(sorted([*live, *kept], key=lambda mq: (mq.broker_name, mq.queue_id)))
        self._known[topic] = queues
        rotation = tuple(mq.broker_name for mq in sorted(live, key=_rotation_order))
        return TopicPublishInfo(topic, queues, rotation, route is not None and route.exists)
