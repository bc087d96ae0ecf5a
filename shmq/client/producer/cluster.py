"""ClusterProducer: one producer over every master broker a name server routes to.

``Producer(group, namesrv="ns1")`` (or ``$SHMQ_NAMESRV`` with no ``broker=``) is one of these
(``Producer.__new__`` picks it). It holds one single-broker ``Producer`` per master, opened
as masters appear in the routes and shut when they leave, and reads the routes from the
name server's segment through ``RouteReader``, whose ``read`` costs a clock read while
nothing changed; the per-topic lists are rebuilt only when the routes change
(``shmq.client.producer.publish_routes``).

A send goes round robin over the live masters' write queues, skipping brokers that failed or
answered slowly (``send_latency_fault_enable``, ``shmq.client.producer.latency_fault``), and
a send that fails because its broker is gone, busy or unreachable is retried on another one
(``retry_times_when_send_failed`` more times, within the send's timeout; async sends too).
Ordered sends (a selector or ``sharding_key``) pick among every queue of the route and keep
their queue: while its broker is down they fail with an error naming it. The first send of a
topic the routes do not know creates it on every master (in the background).
"""

from __future__ import annotations

import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from shmq.client import exit_close
from shmq.client.admin import Admin
from shmq.client.hooks import SendMessageHook, check_hook
from shmq.client.producer.inflight import InFlight
from shmq.client.producer.latency_fault import LatencyFaultTolerance
from shmq.client.producer.producer import Producer, Selector, inner_producer
from shmq.client.producer.publish_routes import PublishRoutes, TopicPublishInfo
from shmq.client.producer.selectors import SelectMessageQueueByHash, with_sharding_key
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
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import BrokerData, namesrv_or_env
from shmq.namesrv.segment import RouteReader
from shmq.trace.dispatcher import AsyncTraceDispatcher, trace_topic
from shmq.trace.hooks import SendTraceHook

log = logging.getLogger(__name__)

# what a send to another broker may cure: the broker died, was busy, or could not be reached
RETRIABLE = (BrokerGoneError, BrokerNotFoundError, BrokerBusyError, ControlTimeoutError, SharedMemoryFullError)
# what makes a broker skipped for a while: the above, and no answer in time (not retried: the
# broker has the request and may store it; a resend would store another copy)
FAULTS = (*RETRIABLE, SendTimeoutError)
NO_BROKER_POLL_S = 0.01  # how often a send with no live master looks at the routes again
R = TypeVar("R")
Call = Callable[[Producer, float], R]  # a send on one broker's producer, given the seconds left
_DEFAULTS: dict[str, Any] = dict(Producer.__init__.__kwdefaults__ or {})
_BY_HASH = SelectMessageQueueByHash()


class _QueueId:
    """A selector for a broker's producer: the queue the cluster's selector chose there."""

    def __init__(self, queue_id: int) -> None:
        self.queue_id = queue_id

    def __call__(self, queues: list[MessageQueue], msg: object, arg: object) -> int:
        return self.queue_id


class ClusterProducer(Producer):
    """A producer over a name server's cluster; the API of ``Producer``."""

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        send_latency_fault_enable: bool = True,
        **options: Any,
    ) -> None:
        """``options`` are ``Producer``'s, given to each broker's producer; ``trace`` traces
        through the cluster (its trace topic is routed like any other)."""
        inspect.signature(Producer.__init__).bind(self, group, **options)  # a misspelt option fails here
        name = namesrv_or_env(namesrv, broker)
        if name is None:
            raise BadArgumentError("a cluster producer needs namesrv= (or SHMQ_NAMESRV)")
        self.namesrv = name
        self.group = group
        self.broker_name = None  # type: ignore[assignment]  # every master's, see SendResult.message_queue
        trace = options.pop("trace", False)
        self._options = options
        self.send_msg_timeout: float = options.get("send_msg_timeout", _DEFAULTS["send_msg_timeout"])
        self.retry_times_when_send_failed: int = options.get(
            "retry_times_when_send_failed", _DEFAULTS["retry_times_when_send_failed"]
        )
        self.start_timeout: float = options.get("start_timeout", _DEFAULTS["start_timeout"])
        self.send_latency_fault_enable = send_latency_fault_enable
        self.faults = LatencyFaultTolerance()
        self._reader = RouteReader(name)
        self._routes = PublishRoutes()
        self._lock = threading.RLock()  # the reader, the routes and the broker producers
        self._brokers: dict[str, Producer] = {}  # attach name -> its producer (a master's is its broker name)
        self._index = itertools.count()
        self._created: set[str] = set()  # topics this producer created on every master
        self._in_flight = InFlight()  # async sends until settled, retries included
        self._executor: ThreadPoolExecutor | None = None  # callbacks (Producer._with_callback)
        self._helper: ThreadPoolExecutor | None = None  # retries, topic creation, shutting left brokers
        self._send_hooks: list[SendMessageHook] = []
        self._started = False
        self.tracer: AsyncTraceDispatcher | None = None
        topic = trace_topic(trace)
        if topic is not None:
            self.tracer = AsyncTraceDispatcher(inner_producer(group, None, namesrv=name), topic)
            self.register_send_hook(SendTraceHook(self.tracer))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ClusterProducer:
        """Read the routes and attach to every master; NameServerNotFoundError (with how to
        start one) if the name server never served."""
        with self._lock:
            self._refresh()
            self._started = True
        if self.tracer is not None:
            try:
                self.tracer.start()
            except BaseException:
                self._shut_brokers(0.0)
                raise
        exit_close.track(self)
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        """``flush`` (up to ``timeout``, default ``send_msg_timeout``), then shut every broker's producer."""
        exit_close.untrack(self)
        wait = self.send_msg_timeout if timeout is None else timeout
        if self._started:
            self.flush(wait)
        self._started = False
        self._shut_brokers(wait)
        if self.tracer is not None:
            self.tracer.shutdown()
        for ex in (self._helper, self._executor):
            if ex is not None:
                ex.shutdown(wait=False)
        self._reader.close()

    def _shut_brokers(self, timeout: float) -> None:
        with self._lock:
            brokers, self._brokers = list(self._brokers.values()), {}
        for p in brokers:
            p.shutdown(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """``Producer.flush`` on every broker's producer, and wait for async sends being retried."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = True
        for p in list(self._brokers.values()):
            ok = p.flush(None if deadline is None else max(0.0, deadline - time.monotonic())) and ok
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._in_flight.wait(left) == 0 and ok

    def _flush_accumulated(self) -> None:
        """Send what waits in every broker producer's auto batches (``shmq.aio`` calls it)."""
        for p in list(self._brokers.values()):
            p._flush_accumulated()

    @property
    def pending_count(self) -> int:
        """Requests written to any broker and not yet answered."""
        return sum(p.pending_count for p in list(self._brokers.values()))

    def __enter__(self) -> ClusterProducer:
        return self.start()

    def __repr__(self) -> str:
        return client_repr(type(self).__name__, self.group, f"namesrv {self.namesrv}", self._started)

    def register_send_hook(self, hook: SendMessageHook) -> None:
        """As ``Producer.register_send_hook``; the hooks run around each attempt on a broker."""
        check_hook(hook, "send_message_before", "send_message_after")
        with self._lock:
            self._send_hooks = [*self._send_hooks, hook]
            for p in self._brokers.values():
                p.register_send_hook(hook)

    # ------------------------------------------------------------------ routes and brokers

    def _publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's queues under the current routes (a cheap check when nothing changed)."""
        with self._lock:
            if not self._started:
                raise ShmqError("the producer is not started (call start())")
            self._refresh()
            return self._routes.topic(topic)

    def _refresh(self) -> None:
        """Take the routes as the name server has them now (the caller holds the lock)."""
        change = self._routes.update(self._reader.read())
        if change is None:
            return
        for name in change.renewed:
            self.faults.forget(name)  # a restarted broker starts with a clean record
        for b in change.came:
            self.faults.forget(b.broker_name)
            self._open(b)
        left = [self._brokers.pop(name) for name in change.left if name in self._brokers]
        if left:
            self._background(self._shut_left, left)

    def _open(self, b: BrokerData) -> None:
        p = self._make_broker_producer(b.attach_name)
        for hook in self._send_hooks:
            p.register_send_hook(hook)
        try:
            p.start()
        except ShmqError as e:  # died since the routes were read: the next routes leave it out
            log.warning("cluster producer %r: broker %r not attached: %s", self.group, b.broker_name, e)
            return
        self._brokers[b.broker_name] = p

    def _make_broker_producer(self, broker: str) -> Producer:
        """The producer of one master (a subclass makes its own kind)."""
        return Producer(self.group, broker, **self._options)

    @staticmethod
    def _shut_left(left: list[Producer]) -> None:
        for p in left:
            p.shutdown(0.0)

    def _background(self, fn: Callable[..., object], *args: Any) -> None:
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="shmq-cluster-producer")
        try:
            self._helper.submit(fn, *args)
        except RuntimeError:  # shut down
            pass

    def _pick(self, topic: str, avoid: str | None, deadline: float) -> tuple[Producer, TopicPublishInfo]:
        """The next broker for ``topic`` (round robin, skipping faulty brokers and ``avoid``, the
        one that just failed); waits for a master to appear until ``deadline``."""
        while True:
            info = self._publish_info(topic)
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
        faults = self.faults if self.send_latency_fault_enable else None
        for k in range(n):
            name = names[(i + k) % n]
            if name != avoid and (faults is None or faults.is_available(name)):
                break
        else:
            others = [x for x in names if x != avoid] or list(names)
            name = self.faults.pick_one_at_least(others) or others[0]
        p = self._brokers.get(name)
        if p is None:  # its attach failed: it is out of the next routes
            raise BrokerGoneError(f"broker {name!r} is routed but could not be attached")
        return p, info

    def _ordered(self, msg: Message | MessageBatch, selector: Selector, arg: Any) -> tuple[Producer, _QueueId]:
        """The broker and queue the selector picks among every queue of the route; a queue of a
        broker that is down is an error naming it (an ordered send never changes its queue)."""
        queues = list(self._publish_info(msg.topic).queues)
        if not queues:
            raise BrokerNotFoundError(f"name server {self.namesrv!r} routes no master broker for topic {msg.topic!r}")
        mq = selector(queues, msg, arg)
        if not isinstance(mq, MessageQueue):
            if not 0 <= int(mq) < len(queues):
                raise BadArgumentError(f"selector chose queue {mq}; topic {msg.topic!r} has {len(queues)}")
            mq = queues[int(mq)]
        p = self._brokers.get(mq.broker_name)
        if p is None:
            raise BrokerGoneError(
                f"broker {mq.broker_name!r} is down: an ordered send keeps its queue {mq.queue_id} there "
                "and fails until the broker is back"
            )
        return p, _QueueId(mq.queue_id)

    def _sent(self, p: Producer, info: TopicPublishInfo, start: float) -> None:
        """A send to ``p`` was answered: record its latency; a topic new to the routes is created
        on every master (RocketMQ creates an auto-created topic on every broker it sends to)."""
        if self.send_latency_fault_enable:
            self.faults.update(str(p.broker_name), (time.perf_counter() - start) * 1000.0)
        if not info.routed and info.topic not in self._created:
            self._created.add(info.topic)
            self._background(self._create_everywhere, info.topic, str(p.broker_name))

    def _create_everywhere(self, topic: str, done: str) -> None:
        for name, p in list(self._brokers.items()):
            if name != done:
                try:
                    Admin(str(p.broker_name)).update_topic(topic)
                except ShmqError as e:
                    log.warning("topic %r not created on broker %r: %s", topic, name, e)

    def _failed(self, p: Producer, start: float) -> None:
        if self.send_latency_fault_enable:
            self.faults.update(str(p.broker_name), (time.perf_counter() - start) * 1000.0, isolation=True)

    # ------------------------------------------------------------------ sends with retries

    def _retrying(self, topic: str, timeout: float | None, call: Call[R]) -> R:
        """``call`` on one broker after another until it is answered, the retries are used up,
        or the timeout passes (RocketMQ's sendDefaultImpl)."""
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        avoid: str | None = None
        for attempt in range(self.retry_times_when_send_failed + 1):
            p, info = self._pick(topic, avoid, deadline)
            start = time.perf_counter()
            try:
                result = call(p, max(0.0, deadline - time.monotonic()))
            except FAULTS as e:
                self._failed(p, start)
                last = attempt == self.retry_times_when_send_failed or time.monotonic() >= deadline
                if last or not isinstance(e, RETRIABLE):
                    raise
                log.debug("send to broker %r failed (%s): trying another", p.broker_name, e)
                avoid = str(p.broker_name)
                continue
            self._sent(p, info, start)
            return result
        raise AssertionError("unreachable")  # the loop returns or raises

    def _retrying_async(self, topic: str, timeout: float | None, call: Call[Future[R]]) -> Future[R]:
        """``_retrying`` for a send that answers with a Future: a retry runs on the helper thread."""
        outer: Future[R] = Future()
        self._in_flight.add(outer)
        outer.add_done_callback(self._in_flight.discard)
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        self._attempt(outer, topic, deadline, call, self.retry_times_when_send_failed, None)
        return outer

    def _attempt(
        self, outer: Future[R], topic: str, deadline: float, call: Call[Future[R]], retries: int, avoid: str | None
    ) -> None:
        try:
            p, info = self._pick(topic, avoid, deadline)
        except Exception as e:  # noqa: BLE001 - the future gets it
            outer.set_exception(e)
            return
        start = time.perf_counter()
        try:
            inner = call(p, max(0.0, deadline - time.monotonic()))
        except RETRIABLE as e:
            self._again(outer, topic, deadline, call, retries, p, start, e)
            return
        except Exception as e:  # noqa: BLE001 - the future gets it
            outer.set_exception(e)
            return

        def done(f: Future[R]) -> None:
            if f.cancelled():
                outer.cancel()
                return
            error = f.exception()
            if error is None:
                self._sent(p, info, start)
                outer.set_result(f.result())
            elif isinstance(error, RETRIABLE):
                self._again(outer, topic, deadline, call, retries, p, start, error)
            else:
                if isinstance(error, FAULTS):
                    self._failed(p, start)
                outer.set_exception(error)

        inner.add_done_callback(done)

    def _again(
        self,
        outer: Future[R],
        topic: str,
        deadline: float,
        call: Call[Future[R]],
        retries: int,
        p: Producer,
        start: float,
        error: BaseException,
    ) -> None:
        """An async attempt on ``p`` failed with ``error``: retry elsewhere, or settle ``outer``."""
        self._failed(p, start)
        if retries > 0 and time.monotonic() < deadline and self._started:
            self._background(self._attempt, outer, topic, deadline, call, retries - 1, str(p.broker_name))
        else:
            outer.set_exception(error)

    # ------------------------------------------------------------------ public API

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """Every master's write queues of ``topic``, sorted by (broker name, queue id): what
        selectors index (the auto-create default on every master before the topic exists)."""
        return list(self._publish_info(topic).queues)

    def send(
        self,
        msg: Message,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
        *,
        sharding_key: str | None = None,
    ) -> SendResult:
        """As ``Producer.send``, on the cluster: ``result.message_queue.broker_name`` says where."""
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if selector is not None:
            p, queue = self._ordered(msg, selector, arg)
            return p.send(msg, queue, None, timeout)
        return self._retrying(msg.topic, timeout, lambda p, left: p.send(msg, timeout=left))

    def send_async(
        self,
        msg: Message,
        callback: Callable[[Any], None] | None = None,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
        *,
        sharding_key: str | None = None,
    ) -> Future[SendResult]:
        """As ``Producer.send_async``, on the cluster (retried on another broker as ``send``)."""
        if sharding_key is not None or selector is not None:
            try:
                if sharding_key is not None:
                    msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
                assert selector is not None
                p, queue = self._ordered(msg, selector, arg)
            except ShmqError as e:
                failed: Future[SendResult] = Future()
                failed.set_exception(e)
                return self._with_callback(failed, callback)
            return p.send_async(msg, callback, queue, None, timeout)
        fut = self._retrying_async(msg.topic, timeout, lambda p, left: p.send_async(msg, timeout=left))
        return self._with_callback(fut, callback)

    def send_oneway(
        self, msg: Message, selector: Selector | None = None, arg: Any = None, *, sharding_key: str | None = None
    ) -> None:
        """As ``Producer.send_oneway``, to the next broker (no answer, so no retry)."""
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if selector is not None:
            p, queue = self._ordered(msg, selector, arg)
            p.send_oneway(msg, queue)
            return
        p, _info = self._pick(msg.topic, None, time.monotonic() + self.send_msg_timeout)
        p.send_oneway(msg)

    def send_batch(
        self,
        msgs: Sequence[Message] | MessageBatch,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """As ``Producer.send_batch``: the batch goes to one broker (another one on a retry)."""
        first = _first(msgs)
        if selector is not None:
            p, queue = self._ordered(first, selector, arg)
            return p.send_batch(msgs, queue, None, timeout)
        return self._retrying(first.topic, timeout, lambda p, left: p.send_batch(msgs, timeout=left))

    def send_batch_async(
        self,
        msgs: Sequence[Message] | MessageBatch,
        callback: Callable[[Any], None] | None = None,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
        *,
        per_message: bool = False,
    ) -> Future[Any]:
        """As ``Producer.send_batch_async``, on the cluster (retried on another broker). Checks
        of the messages raise at once."""
        first = _first(msgs)
        if selector is not None:
            try:
                p, queue = self._ordered(first, selector, arg)
            except ShmqError as e:
                failed: Future[Any] = Future()
                failed.set_exception(e)
                return self._with_callback(failed, callback)
            return p.send_batch_async(msgs, callback, queue, None, timeout, per_message=per_message)
        fut = self._retrying_async(
            first.topic, timeout, lambda p, left: p.send_batch_async(msgs, timeout=left, per_message=per_message)
        )
        return self._with_callback(fut, callback)


def _first(msgs: Sequence[Message] | MessageBatch) -> Message | MessageBatch:
    """What a batch's topic and selector are read from: the batch itself or its first message."""
    if isinstance(msgs, MessageBatch):
        return msgs
    if not len(msgs):
        raise BadArgumentError("send_batch needs at least one message")
    return msgs[0]
