"""ClusterBrokers: a cluster producer's masters, one broker producer each, and its routes to them.

It reads the name server's routes (``RouteReader``: a clock read while nothing changed; the
per-topic lists are rebuilt only when the routes change, ``shmq.client.producer.publish_routes``),
opens a producer for each master as it appears and shuts it when it leaves, and picks the
broker of each send: round robin over the live masters' write queues, skipping brokers the
latency fault tolerance holds back (``shmq.client.producer.latency_fault``), or the queue a
selector chose among every queue of the route. ``ClusterProducer`` sends through it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shmq.client.admin import Admin
from shmq.client.hooks import SendMessageHook
from shmq.client.producer.latency_fault import LatencyFaultTolerance
from shmq.client.producer.producer import Producer, Selector
from shmq.client.producer.publish_routes import PublishRoutes, TopicPublishInfo
from shmq.errors import (
    BadArgumentError,
    BrokerBusyError,
    BrokerGoneError,
    BrokerNotFoundError,
    ControlTimeoutError,
    SendTimeoutError,
    SharedMemoryFullError,
    ShmqError,
)
from shmq.model.message import Message, MessageBatch, MessageQueue
from shmq.namesrv.routes import BrokerData, RouteTable
from shmq.namesrv.segment import RouteReader

log = logging.getLogger(__name__)

# what a send to another broker may cure: the broker died, was busy, or could not be reached
RETRIABLE = (BrokerGoneError, BrokerNotFoundError, BrokerBusyError, ControlTimeoutError, SharedMemoryFullError)
# what makes a broker skipped for a while: the above, and no answer in time (not retried: the
# broker has the request and may store it; a resend would store another copy)
FAULTS = (*RETRIABLE, SendTimeoutError)
NO_BROKER_POLL_S = 0.01  # how often a send with no live master looks at the routes again
REOPEN_S = 1.0  # how often a routed master whose producer did not start is tried again


class QueueId:
    """A selector for a broker's producer: the queue the cluster's selector chose there."""

    def __init__(self, queue_id: int) -> None:
        self.queue_id = queue_id

    def __call__(self, queues: list[MessageQueue], msg: object, arg: object) -> int:
        return self.queue_id


class ClusterBrokers:
    """The masters of name server ``namesrv``'s cluster, as producers made by ``make_producer``."""

    def __init__(self, namesrv: str, group: str, make_producer: Callable[[str], Producer], fault_enable: bool) -> None:
        self.namesrv = namesrv
        self.group = group
        self.make_producer = make_producer
        self.fault_enable = fault_enable  # sendLatencyFaultEnable
        self.faults = LatencyFaultTolerance()
        self.producers: dict[str, Producer] = {}  # broker name -> its master's producer
        self.started = False
        self._reader = RouteReader(namesrv)
        self._routes = PublishRoutes()
        self._table: RouteTable | None = None  # the routes last taken
        self._lock = threading.RLock()  # the reader, the routes and the producers
        self._index = itertools.count()
        self._created: set[str] = set()  # topics created on every master
        self._not_opened: dict[str, float] = {}  # master -> when its producer last failed to start
        self._hooks: list[SendMessageHook] = []
        self._helper: ThreadPoolExecutor | None = None  # retries, topic creation, shutting left brokers

    def start(self) -> None:
        """Read the routes and open every master; NameServerNotFoundError (with how to start
        one) if the name server never served."""
        with self._lock:
            self._refresh()
            self.started = True

    def shutdown(self, timeout: float) -> None:
        """Shut every master's producer (each flushes up to ``timeout``) and the helper thread."""
        with self._lock:
            self.started = False
            producers, self.producers = list(self.producers.values()), {}
        for p in producers:
            p.shutdown(timeout)
        if self._helper is not None:
            self._helper.shutdown(wait=False)
        self._reader.close()

    def add_hook(self, hook: SendMessageHook) -> None:
        """Register ``hook`` on every master's producer, now and later."""
        with self._lock:
            self._hooks.append(hook)
            for p in self.producers.values():
                p.register_send_hook(hook)

    def background(self, fn: Callable[..., object], *args: Any) -> bool:
        """Run ``fn(*args)`` on the helper thread; False if it is shut down."""
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="shmq-cluster-producer")
        try:
            self._helper.submit(fn, *args)
        except RuntimeError:
            return False
        return True

    # ------------------------------------------------------------------ routes

    def publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's queues under the current routes (a cheap check when nothing changed)."""
        with self._lock:
            if not self.started:
                raise ShmqError("the producer is not started (call start())")
            self._refresh()
            return self._routes.topic(topic)

    def _refresh(self) -> None:
        """Take the routes as the name server has them now (the caller holds the lock)."""
        table = self._reader.read()
        if table is self._table:  # the usual case: the reader hands out one object until a change
            return
        self._table = table
        change = self._routes.update(table)
        if change is None:
            return
        for name in change.renewed:
            self.faults.forget(name)  # a restarted broker starts with a clean record
        for b in change.came:
            self.faults.forget(b.broker_name)
            self._open(b)
        left = [self.producers.pop(name) for name in change.left if name in self.producers]
        if left:
            self.background(_shut, left)

    def _open(self, b: BrokerData) -> None:
        p = self.make_producer(b.attach_name)
        for hook in self._hooks:
            p.register_send_hook(hook)
        try:
            p.start()
        except ShmqError as e:  # died since the routes were read (the next routes leave it out), or refused
            log.warning("cluster producer %r: broker %r not attached: %s", self.group, b.broker_name, e)
            self._not_opened[b.broker_name] = time.monotonic()
            return
        self._not_opened.pop(b.broker_name, None)
        self.producers[b.broker_name] = p

    # ------------------------------------------------------------------ choosing a broker

    def pick(self, topic: str, avoid: str | None, deadline: float) -> tuple[Producer, TopicPublishInfo]:
        """The next broker for ``topic`` (round robin, skipping faulty brokers and ``avoid``, the
        one that just failed); waits for a master to appear until ``deadline``."""
        while True:
            info = self.publish_info(topic)
            names = info.rotation
            if names:
                break
            if time.monotonic() >= deadline:
                raise BrokerNotFoundError(
                    f"name server {self.namesrv!r} routes no live master broker; start brokers "
                    f"with namesrvAddr={self.namesrv} (`shmq cluster --namesrv {self.namesrv} ...`)"
                )
            time.sleep(NO_BROKER_POLL_S)
        n = len(names)
        i = next(self._index)
        faults = self.faults if self.fault_enable else None
        for k in range(n):
            name = names[(i + k) % n]
            if name != avoid and (faults is None or faults.is_available(name)):
                break
        else:
            others = [x for x in names if x != avoid] or list(names)
            name = self.faults.pick_one_at_least(others) or others[0]
        return self._producer(name), info

    def _producer(self, name: str) -> Producer:
        """Master ``name``'s producer; one whose attach failed when it appeared is tried again."""
        p = self.producers.get(name)
        if p is None:
            with self._lock:
                b = self._routes.masters.get(name)
                again = time.monotonic() - self._not_opened.get(name, 0.0) >= REOPEN_S
                if b is not None and name not in self.producers and again:
                    self._open(b)
                p = self.producers.get(name)
            if p is None:
                raise BrokerGoneError(f"broker {name!r} is routed but could not be attached")
        return p

    def ordered(self, msg: Message | MessageBatch, selector: Selector, arg: Any) -> tuple[Producer, QueueId]:
        """The broker and queue the selector picks among every queue of the route; a queue of a
        broker that is down is an error naming it (an ordered send never changes its queue)."""
        queues = list(self.publish_info(msg.topic).queues)
        if not queues:
            raise BrokerNotFoundError(f"name server {self.namesrv!r} routes no master broker for topic {msg.topic!r}")
        mq = selector(queues, msg, arg)
        if not isinstance(mq, MessageQueue):
            if not 0 <= int(mq) < len(queues):
                raise BadArgumentError(f"selector chose queue {mq}; topic {msg.topic!r} has {len(queues)}")
            mq = queues[int(mq)]
        p = self.producers.get(mq.broker_name)
        if p is None:
            raise BrokerGoneError(
                f"broker {mq.broker_name!r} is down: an ordered send keeps its queue {mq.queue_id} there "
                "and fails until the broker is back"
            )
        return p, QueueId(mq.queue_id)

    # ------------------------------------------------------------------ outcomes

    def sent(self, p: Producer, info: TopicPublishInfo, start: float) -> None:
        """A send to ``p`` begun at ``start`` (perf_counter) was answered: record its latency; a
        topic new to the routes is created on every master (in the background)."""
        if self.fault_enable:
            self.faults.update(str(p.broker_name), (time.perf_counter() - start) * 1000.0)
        if not info.routed and info.topic not in self._created:
            self._created.add(info.topic)
            self.background(self._create_everywhere, info.topic, str(p.broker_name))

    def failed(self, p: Producer, start: float, error: BaseException) -> bool:
        """A send to ``p`` begun at ``start`` failed with ``error``: whether another broker may
        take it (its broker died, was busy or unreachable, or left the routes, its producer shut
        meanwhile); then, or when it had no answer in time, the broker is held back a while."""
        gone = isinstance(error, ShmqError) and self.producers.get(str(p.broker_name)) is not p
        retriable = gone or isinstance(error, RETRIABLE)
        if self.fault_enable and (retriable or isinstance(error, FAULTS)):
            self.faults.update(str(p.broker_name), (time.perf_counter() - start) * 1000.0, isolation=True)
        return retriable

    def _create_everywhere(self, topic: str, done: str) -> None:
        for name, p in list(self.producers.items()):
            if name != done:
                try:
                    Admin(str(p.broker_name)).update_topic(topic)
                except ShmqError as e:
                    log.warning("topic %r not created on broker %r: %s", topic, name, e)


def _shut(left: list[Producer]) -> None:
    """Shut the producers of masters that left the routes (their brokers are gone)."""
    for p in left:
        p.shutdown(0.0)
