"""ClusterProducer: one producer over every master broker a name server routes to.

``Producer(group, namesrv="ns1")`` (or ``$SHMQ_NAMESRV`` with no ``broker=``) is one of these
(``Producer.__new__`` picks it). It holds one single-broker ``Producer`` per master, opened
as masters appear in the routes and shut when they leave (``ClusterBrokers``, which also
reads the routes and picks each send's broker), and sends with RocketMQ's retries.

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
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from shmq.client import exit_close
from shmq.client.hooks import SendMessageHook, check_hook
from shmq.client.producer.accumulator import ProduceAccumulator, accumulate_oneway, queued_or_failed
from shmq.client.producer.cluster_batches import ClusterBatches
from shmq.client.producer.cluster_brokers import ClusterBrokers
from shmq.client.producer.inflight import InFlight
from shmq.client.producer.producer import Producer, Selector, inner_producer
from shmq.client.producer.selectors import SelectMessageQueueByHash, with_sharding_key
from shmq.errors import (
    BadArgumentError,
    ShmqError,
)
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import send_hook as otel_send_hook
from shmq.trace.dispatcher import AsyncTraceDispatcher, trace_topic
from shmq.trace.hooks import SendTraceHook

log = logging.getLogger(__name__)

R = TypeVar("R")
Call = Callable[[Producer, float], R]  # a send on one broker's producer, given the seconds left
_DEFAULTS: dict[str, Any] = dict(Producer.__init__.__kwdefaults__ or {})
_BY_HASH = SelectMessageQueueByHash()


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
        # a dead broker's producer fails at once: the send goes to another broker
        self._broker_options = {**options, "reattach_timeout": 0.0}
        self.send_msg_timeout: float = options.get("send_msg_timeout", _DEFAULTS["send_msg_timeout"])
        self.retry_times_when_send_failed: int = options.get(
            "retry_times_when_send_failed", _DEFAULTS["retry_times_when_send_failed"]
        )
        self.start_timeout: float = options.get("start_timeout", _DEFAULTS["start_timeout"])
        self._cluster = ClusterBrokers(name, group, self._make_broker_producer, send_latency_fault_enable)
        self.faults = self._cluster.faults  # RocketMQ's LatencyFaultTolerance of this producer
        self._retries = InFlight()  # failed async sends until their retry is written (flush)
        self._max_message_size: int = options.get("max_message_size", _DEFAULTS["max_message_size"])
        self._grouped: ClusterBatches | None = None
        if options.get("auto_batch", _DEFAULTS["auto_batch"]):
            delay = options.get("batch_max_delay", _DEFAULTS["batch_max_delay"])
            if options.get("batch_max_delay_ms") is not None:
                delay = options["batch_max_delay_ms"] / 1000
            max_bytes = options.get("batch_max_bytes", _DEFAULTS["batch_max_bytes"])
            self._grouped = ClusterBatches(self._cluster, self, self._retries, delay, max_bytes)
        # the accumulator plain async and oneway sends go into: None once a send hook is registered
        # (hooked sends go one by one), so the per-message path reads one attribute
        self._batching: ProduceAccumulator | None = self._grouped.accumulator if self._grouped else None
        self._executor: ThreadPoolExecutor | None = None  # callbacks (Producer._with_callback)
        self.tracer: AsyncTraceDispatcher | None = None
        topic = trace_topic(trace)
        if topic is not None:
            self.tracer = AsyncTraceDispatcher(inner_producer(group, None, namesrv=name), topic)
            self.register_send_hook(SendTraceHook(self.tracer))
        # OpenTelemetry (shmq.otel): each broker's producer traces its own attempts; sends leave
        # the cluster-wide batches, as with any hook, so that each send span is started in its
        # sender's thread (its parent is the sender's span); the broker's producer still batches
        self.otel = otel_send_hook(group)
        if self.otel is not None:
            self._batching = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ClusterProducer:
        """Read the routes and attach to every master; NameServerNotFoundError (with how to
        start one) if the name server never served."""
        self._cluster.start()
        if self.tracer is not None:
            try:
                self.tracer.start()
            except BaseException:
                self._cluster.shutdown(0.0)
                raise
        exit_close.track(self)
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        """``flush`` (up to ``timeout``, default ``send_msg_timeout``), then shut every broker's producer."""
        exit_close.untrack(self)
        wait = self.send_msg_timeout if timeout is None else timeout
        if self._grouped is not None:
            self._grouped.accumulator.close()  # sends what waits
        if self._cluster.started:
            self.flush(wait)
        self._cluster.shutdown(wait)
        if self.tracer is not None:
            self.tracer.shutdown()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _make_broker_producer(self, broker: str) -> Producer:
        """The producer of one master (a subclass makes its own kind)."""
        return Producer(self.group, broker, **self._broker_options)

    def flush(self, timeout: float | None = None) -> bool:
        """``Producer.flush`` on every broker's producer, until no failed async send waits for
        its retry (a retry is a send on another broker's producer, flushed in the next round)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        while True:
            self._flush_accumulated()
            ok = True
            for p in list(self._cluster.producers.values()):  # every one, also after one timed out
                ok = p.flush(left()) and ok
            if not ok or not len(self._retries):
                return ok
            if self._retries.wait(left()):
                return False

    def _flush_accumulated(self) -> None:
        """Send what waits in the auto batches, this producer's and every broker producer's
        (``shmq.aio`` calls it)."""
        if self._grouped is not None:
            self._grouped.accumulator.flush_all()
        for p in list(self._cluster.producers.values()):
            p._flush_accumulated()

    @property
    def pending_count(self) -> int:
        """Requests written to any broker and not yet answered."""
        return sum(p.pending_count for p in list(self._cluster.producers.values()))

    def __enter__(self) -> ClusterProducer:
        return self.start()

    def __repr__(self) -> str:
        return client_repr(type(self).__name__, self.group, f"namesrv {self.namesrv}", self._cluster.started)

    def register_send_hook(self, hook: SendMessageHook) -> None:
        """As ``Producer.register_send_hook``; the hooks run around each attempt on a broker."""
        check_hook(hook, "send_message_before", "send_message_after")
        self._cluster.add_hook(hook)
        self._batching = None

    # ------------------------------------------------------------------ sends with retries

    def _retrying(self, topic: str, timeout: float | None, call: Call[R]) -> R:
        """``call`` on one broker after another until it is answered, the retries are used up,
        or the timeout passes (RocketMQ's sendDefaultImpl)."""
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        avoid: str | None = None
        for attempt in range(self.retry_times_when_send_failed + 1):
            p, info = self._cluster.pick(topic, avoid, deadline)
            start = time.perf_counter()
            try:
                result = call(p, max(0.0, deadline - time.monotonic()))
            except ShmqError as e:
                retriable = self._cluster.failed(p, start, e)
                last = attempt == self.retry_times_when_send_failed or time.monotonic() >= deadline
                if last or not retriable:
                    raise
                log.debug("send to broker %r failed (%s): trying another", p.broker_name, e)
                avoid = str(p.broker_name)
                continue
            self._cluster.sent(p, info, start)
            return result
        raise AssertionError("unreachable")  # the loop returns or raises

    def _retrying_async(self, topic: str, timeout: float | None, call: Call[Future[R]]) -> Future[R]:
        """``_retrying`` for a send that answers with a Future: a retry runs on the helper thread."""
        outer: Future[R] = Future()
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        self._attempt(outer, topic, deadline, call, self.retry_times_when_send_failed, None)
        return outer

    def _attempt(
        self, outer: Future[R], topic: str, deadline: float, call: Call[Future[R]], retries: int, avoid: str | None
    ) -> None:
        try:
            p, info = self._cluster.pick(topic, avoid, deadline)
        except Exception as e:  # noqa: BLE001 - the future gets it
            outer.set_exception(e)
            return
        start = time.perf_counter()
        try:
            inner = call(p, max(0.0, deadline - time.monotonic()))
        except ShmqError as e:
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
                self._cluster.sent(p, info, start)
                outer.set_result(f.result())
            else:
                self._again(outer, topic, deadline, call, retries, p, start, error)

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
        retriable = self._cluster.failed(p, start, error)
        if retriable and retries > 0 and time.monotonic() < deadline and self._cluster.started:
            self._retries.add(outer)
            avoid = str(p.broker_name)
            if self._cluster.background(self._retry_elsewhere, outer, topic, deadline, call, retries - 1, avoid):
                return
            self._retries.discard(outer)
        outer.set_exception(error)

    def _retry_elsewhere(
        self, outer: Future[R], topic: str, deadline: float, call: Call[Future[R]], retries: int, avoid: str
    ) -> None:
        try:
            self._attempt(outer, topic, deadline, call, retries, avoid)
        finally:
            self._retries.discard(outer)  # written to another broker (flush waits there), or settled

    # ------------------------------------------------------------------ public API

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """Every master's write queues of ``topic``, sorted by (broker name, queue id): what
        selectors index (the auto-create default on every master before the topic exists)."""
        return list(self._cluster.publish_info(topic).queues)

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
        if self._grouped is not None:
            self._grouped.accumulator.flush_all()  # nothing sent before waits behind it
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if selector is not None:
            p, queue = self._cluster.ordered(msg, selector, arg)
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
        """As ``Producer.send_async``, on the cluster (retried on another broker as ``send``);
        auto-batched messages go in batches, each to one broker (``ClusterBatches``)."""
        acc = self._batching
        if acc is not None and callback is None and selector is None and sharding_key is None:
            queued = queued_or_failed(acc, msg, self._max_message_size)
            if queued is not None:
                return queued
        if sharding_key is not None or selector is not None:
            try:
                if sharding_key is not None:
                    msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
                assert selector is not None
                p, queue = self._cluster.ordered(msg, selector, arg)
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
        """As ``Producer.send_oneway``, to the next broker (no answer, so no retry); auto-batched
        messages go in batches, each to one broker."""
        acc = self._batching
        if (
            acc is not None
            and selector is None
            and sharding_key is None
            and accumulate_oneway(acc, msg, self._max_message_size)
        ):
            return
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if selector is not None:
            p, queue = self._cluster.ordered(msg, selector, arg)
            p.send_oneway(msg, queue)
            return
        p, _info = self._cluster.pick(msg.topic, None, time.monotonic() + self.send_msg_timeout)
        p.send_oneway(msg)

    def send_batch(
        self,
        msgs: Sequence[Message] | MessageBatch,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """As ``Producer.send_batch``: the batch goes to one broker (another one on a retry)."""
        if self._grouped is not None:
            self._grouped.accumulator.flush_all()
        first = _first(msgs)
        if selector is not None:
            p, queue = self._cluster.ordered(first, selector, arg)
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
                p, queue = self._cluster.ordered(first, selector, arg)
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
