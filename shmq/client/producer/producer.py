"""Producer: encodes messages straight into its channel's request ring and matches answers to futures.

The connection's reader thread completes futures by request id, fails them all with
BrokerGoneError when the broker dies, and expires requests past their deadline. After a
broker restart the next send attaches again (``shmq.client.connection.BrokerConnection``).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from shmq.client import exit_close
from shmq.client.connection import BrokerConnection, Session, next_request_id
from shmq.client.hooks import (
    ASYNC,
    ONEWAY,
    SYNC,
    SendMessageContext,
    SendMessageHook,
    check_hook,
    hooked_call,
    hooked_future,
)
from shmq.client.producer.accumulator import ProduceAccumulator, accumulate_oneway, queued_or_failed
from shmq.client.producer.batch_sender import MAX_BATCH_BYTES, SEND_STATUS, BatchSender, Requests
from shmq.client.producer.encoder import MessageEncoder
from shmq.client.producer.inflight import InFlight
from shmq.client.producer.selectors import SelectMessageQueueByHash, SelectMessageQueueByRandom, with_sharding_key
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.errors import (
    BadArgumentError,
    BrokerBusyError,
    BrokerGoneError,
    ConfigError,
    CorruptFrameError,
    MessageTooLargeError,
    SendTimeoutError,
    ShmqError,
    broker_error,
)
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult, SendStatus
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import send_hook as otel_send_hook
from shmq.ring.state import StateView
from shmq.trace.dispatcher import INNER_PRODUCER_PREFIX, TRACE_RING_BYTES, AsyncTraceDispatcher, trace_topic
from shmq.trace.hooks import SendTraceHook

DEFAULT_RING_BYTES = 16 * 1024 * 1024  # a 4 MiB message or batch must fit in half a ring
SYNC_POLL_S = 300e-6  # a sync send reads its own answer at most this long, then waits for the reader thread


def sync_poll_window(recent: float) -> float:
    """How long a sync send reads its own answer, given ``recent`` (the usual time answers take):
    four times that (most answers, a slow one too), at most SYNC_POLL_S. Not polling at all when
    answers are slow (SYNC_FLUSH) was measured both ways: it freed the cores for the broker on a
    loaded machine (0.85x -> 1.25x Redis) but cost 8-12 % of SYNC_FLUSH throughput on a quiet one
    (`make bench`, docs/BENCHMARKS.md), so slow answers keep the full window."""
    return min(SYNC_POLL_S, 4 * recent)


def recent_answer_time(recent: float, took: float) -> float:
    """The moving average of answer times (1/8 per send; one sample counts at most 2 x SYNC_POLL_S,
    so one stall does not stop the polling of the next sends)."""
    return recent + (min(took, 2 * SYNC_POLL_S) - recent) * 0.125


DEFAULT_QUEUE_NUMS = 4  # what the broker auto-creates (defaultTopicQueueNums)

Selector = Callable[[list[MessageQueue], Any, Any], "MessageQueue | int"]  # (queues, message or batch, arg)


__all__ = ["Producer", "SelectMessageQueueByHash", "SelectMessageQueueByRandom", "Selector", "split_batch"]
_BY_HASH = SelectMessageQueueByHash()
R = TypeVar("R")
Fill = Callable[[memoryview, int], None]  # writes a request into the ring at its request id


class _Settable(Protocol):
    """What a request completes: a Future, or a sync send's ``_Outcome``."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException | None) -> None: ...


class _Outcome:
    """A sync send's result: what ``Producer._finish`` sets and the sending thread reads, without
    a Future's Condition (made, taken three times and notified per send, a dozen Python-level
    calls that a sync send pays cold after its wake-up). Nobody else sees it. The sending thread
    reads it once ``done()``; if it has to wait for the reader thread instead (another thread
    is the ring's deputy), ``result`` makes an Event then and waits on it: it stores the Event
    before it looks at ``_done`` again, and ``_settle`` stores ``_done`` before it looks for the
    Event, so one of them sees the other's store."""

    __slots__ = ("_done", "_value", "_error", "_event")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Any) -> None:
        self._value = result
        self._settle()

    def set_exception(self, exception: BaseException | None) -> None:
        self._error = exception
        self._settle()

    def _settle(self) -> None:
        self._done = True
        event = self._event
        if event is not None:
            event.set()

    def result(self) -> Any:
        """The result, or the error raised; waits until there is one."""
        if not self._done:
            event = self._event = threading.Event()
            if not self._done:
                event.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(eq=False)
class _Pending:
    future: _Settable  # gets what ``build`` makes of the answer: a SendResult, or a list of them
    resend: Callable[[], None]
    build: Callable[[Any], Any]  # answer frame -> what the future gets
    deadline: float  # of the whole send (sendMsgTimeout)
    retries_left: int  # resends left after SYSTEM_BUSY (the broker stored nothing), a timeout or a lost broker
    resendable: bool = False  # an idempotent SEND: resent with FLAG_RESEND, the broker stores it once
    attempt_deadline: float = 0.0  # an idempotent SEND's attempt with no answer by then is resent
    req_ids: list[int] = field(default_factory=list)  # of every attempt: the first answer wins


def _written() -> None:
    """The resend of a finished request: nothing (see ``Producer._finish``)."""


def split_batch(msgs: Sequence[Message], limit: int = MAX_BATCH_BYTES) -> list[list[Message]]:
    """Cut a list into batches whose encoded size stays under ``limit`` (RocketMQ's ListSplitter)."""
    out: list[list[Message]] = []
    cur: list[Message] = []
    size = 0
    for m in msgs:
        props = sum(len(k) + len(v) + 2 for k, v in (m.properties or {}).items())
        n = fmt.FIXED_OVERHEAD + len(m.body) + len(m.topic) + props + len(m.tags or "") + len(m.keys or "") + 64
        if n > limit:
            raise MessageTooLargeError(f"one message of about {n} bytes is over the batch limit {limit}")
        if cur and size + n > limit:
            out.append(cur)
            cur, size = [], 0
        cur.append(m)
        size += n
    if cur:
        out.append(cur)
    return out


class Producer:
    """RocketMQ's DefaultMQProducer over a shared-memory channel."""

    ROLE = "producer"  # the attach role; a TransactionProducer attaches as one the broker sends checks to

    def __new__(cls, group: str, broker: str | None = None, *args: Any, namesrv: str | None = None, **kw: Any) -> Any:
        """A ``ClusterProducer`` (of this class's cluster kind) when a name server applies:
        ``namesrv=``, or ``$SHMQ_NAMESRV`` with no ``broker=``; else this class, as always."""
        if namesrv_or_env(namesrv, broker) is None:
            return super().__new__(cls)
        cluster = cls.cluster_class()
        if not issubclass(cluster, cls):
            raise ConfigError(f"{cls.__name__} does not take namesrv= (only shmq's own producers do)")
        return super().__new__(cluster)

    @classmethod
    def cluster_class(cls) -> type[Producer]:
        """The class of this kind of producer over a name server's cluster (imported when first
        used: the cluster producer is built on this module)."""
        from shmq.client.producer.cluster import ClusterProducer

        return ClusterProducer

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_howmuch: int | None = 4096,
        max_message_size: int = fmt.MAX_MESSAGE_SIZE,
        ring_bytes: int = DEFAULT_RING_BYTES,
        start_timeout: float = 3.0,
        auto_batch: bool = True,
        batch_max_delay: float = 0.001,
        batch_max_bytes: int = 256 * 1024,
        trace: bool | str = False,
        batch_max_delay_ms: float | None = None,
        reattach_timeout: float | None = None,
        idempotent: bool = True,
    ) -> None:
        """Durations are seconds (floats), as every ``timeout=`` of the API. ``namesrv``: send
        over every master broker of that name server's cluster instead of to one broker
        (``Producer.__new__`` makes it a ``ClusterProducer``). ``auto_batch``
        (RocketMQ 5's autoBatch) gathers ``send_async`` and ``send_oneway`` messages of one topic
        and queue into batches of up to ``batch_max_bytes``, sent at the latest ``batch_max_delay``
        seconds after their first message (``batch_max_delay_ms``: the same in ms, deprecated);
        ``send`` and ``send_batch`` first send what waits, so nothing is overtaken. Off, every
        message is written on its own. Bodies over ``compress_msg_body_over_howmuch`` bytes are
        zlib-compressed when that shrinks them (None or 0: never; see
        shmq.client.producer.compression). ``trace``: True writes a Pub trace record of every
        answered send to RMQ_SYS_TRACE_TOPIC, a topic name to that topic (asynchronously, see
        shmq.trace.dispatcher). ``reattach_timeout``: how long a send waits for its broker to
        come back after the broker died (None: up to the send's timeout). ``idempotent`` (Kafka's
        enable.idempotence): a single-message send (``send``, ``send_async`` outside auto batches)
        that got no answer within its share of the timeout (``send_msg_timeout`` /
        (``retry_times_when_send_failed`` + 1)), or whose broker died before answering, is resent,
        and the broker stores it once (it looks the message's UNIQ_KEY up in its index, see
        shmq.broker.processors.resend); False: such a send fails instead, as RocketMQ's."""
        if batch_max_delay_ms is not None:
            warnings.warn(
                "batch_max_delay_ms is deprecated: use batch_max_delay (seconds)", DeprecationWarning, stacklevel=2
            )
            batch_max_delay = batch_max_delay_ms / 1000
        self.group = group
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.idempotent = idempotent
        self.ring_bytes = ring_bytes
        self.start_timeout = start_timeout
        self._encoder = MessageEncoder(max_message_size, compress_msg_body_over_howmuch)
        self._pending: dict[int, _Pending] = {}  # by request id, while its answer is awaited
        self._answer_time = SYNC_POLL_S / 2  # recent sync answers' time: how long ``send`` polls
        self._in_flight = InFlight()  # every request until finished, retries included (flush)
        self._executor: ThreadPoolExecutor | None = None
        self._conn = BrokerConnection(
            broker, self.ROLE, group, ring_bytes, self._on_response, self._expire, self._broker_died
        )
        self._conn.reattach_timeout = reattach_timeout
        self._batches = BatchSender(self, self._encoder, Requests(self._submit, self._write, self._born_host))
        self._accumulator = (
            ProduceAccumulator(self._batches.send_accumulated, batch_max_delay, batch_max_bytes) if auto_batch else None
        )
        self.broker_name = self._conn.broker_name
        self._send_hooks: list[SendMessageHook] = []  # replaced, never changed in place: senders read it unlocked
        self.tracer: AsyncTraceDispatcher | None = None
        topic = trace_topic(trace)
        if topic is not None:
            self.tracer = AsyncTraceDispatcher(inner_producer(group, broker), topic)
            self.register_send_hook(SendTraceHook(self.tracer))
        # OpenTelemetry spans and metrics (shmq.otel): a send hook when the extra is installed and
        # a provider was set, else None and nothing of OpenTelemetry imported
        self.otel = otel_send_hook(group)
        if self.otel is not None:
            self.register_send_hook(self.otel)

    def register_send_hook(self, hook: SendMessageHook) -> None:
        """Call ``hook.send_message_before(ctx)`` / ``send_message_after(ctx)`` around every send
        (see shmq.client.hooks); a hook that raises is logged and never fails the send."""
        check_hook(hook, "send_message_before", "send_message_after")
        self._send_hooks = [*self._send_hooks, hook]

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Producer:
        """Attach to the broker; ``BrokerNotFoundError`` within ``start_timeout`` if none runs."""
        self._conn.start(self.start_timeout)
        if self.tracer is not None:
            try:
                self.tracer.start()
            except BaseException:
                self._conn.shutdown()
                raise
        exit_close.track(self)
        return self

    def flush(self, timeout: float | None = None) -> bool:
        """Send what waits in auto batches now, then wait until every send handed over before this
        call (``send_async``, ``send_batch_async``, and other threads' ``send``) is answered or
        failed: their futures are done when this returns True. False: ``timeout`` seconds passed
        first (``pending_count`` says how many requests are still open); ``flush(0)`` hands the
        auto batches over and returns at once. Oneway messages have no answer; they are in the
        request ring when this returns."""
        self._flush_accumulated()
        return self._in_flight.wait(timeout) == 0

    @property
    def pending_count(self) -> int:
        """Requests written and not yet answered (a batch is one request)."""
        return len(self._in_flight)

    def shutdown(self, timeout: float | None = None) -> None:
        """``flush`` (up to ``timeout``, default ``send_msg_timeout``), then detach and release
        everything; requests still unanswered then fail."""
        exit_close.untrack(self)
        if self._accumulator is not None:
            self._accumulator.close()
        if self._conn.started:
            self.flush(self.send_msg_timeout if timeout is None else timeout)
        self._conn.shutdown()
        self._fail_all(ShmqError("the producer was shut down"))
        if self.tracer is not None:
            self.tracer.shutdown()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr(type(self).__name__, self.group, self._conn.broker_name, self._conn.started)

    # ------------------------------------------------------------------ public API

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues (the auto-create default before the topic exists)."""
        s = self._conn.live_session(time.monotonic() + self.send_msg_timeout)

        def count(v: StateView) -> int:
            slot = v.topic_slot(topic)
            return int(v.topics[slot]["write_queues"]) if slot is not None else DEFAULT_QUEUE_NUMS

        n = s.state.read(count)
        return [MessageQueue(topic, self.broker_name, q) for q in range(n)]

    def send(
        self,
        msg: Message,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
        *,
        sharding_key: str | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer (resent after SYSTEM_BUSY within the timeout).
        ``sharding_key`` (RocketMQ 5's message group): messages with one key go to one queue, in
        order (see shmq.client.producer.selectors); not with ``selector``."""
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if self._send_hooks:
            return hooked_call(
                self._send_hooks,
                SendMessageContext(self.group, msg, SYNC),
                lambda: self._send(msg, selector, arg, timeout),
            )
        return self._send(msg, selector, arg, timeout)

    def _send(self, msg: Message, selector: Selector | None, arg: Any, timeout: float | None) -> SendResult:
        self._flush_accumulated()
        qid = self._choose_queue(msg, selector, arg)
        s = self._conn.hold_responses()
        start = time.perf_counter()
        try:
            outcome = _Outcome()
            self._send_request(msg, qid, timeout, 0, outcome)
            window = sync_poll_window(self._answer_time)
            if window:
                self._conn.poll(s, outcome.done, window)
            if not outcome.done():
                self._conn.wait_answer(s, outcome.done, self._awaits_nothing)
        finally:
            self._conn.release_responses(s)
        try:
            result: SendResult = outcome.result()
            return result
        finally:
            self._answer_time = recent_answer_time(self._answer_time, time.perf_counter() - start)

    def _awaits_nothing(self) -> bool:
        """No request of this producer awaits an answer and the broker sends it nothing unasked
        (a TransactionProducer gets checks at any time): the sync sender may keep reading the ring."""
        return not self._pending and self.ROLE == Producer.ROLE

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
        """Send without waiting; the Future gives the SendResult; ``callback(result_or_exception)`` if
        given. ``sharding_key`` as for ``send``."""
        acc = self._accumulator
        if acc is not None and callback is None and selector is None and sharding_key is None and not self._send_hooks:
            queued = queued_or_failed(acc, msg, self._encoder.max_message_size)
            if queued is not None:
                return queued
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if self._send_hooks:
            fut = hooked_future(
                self._send_hooks,
                SendMessageContext(self.group, msg, ASYNC),
                lambda: self._send_async(msg, selector, arg, timeout),
            )
        else:
            fut = self._send_async(msg, selector, arg, timeout)
        return self._with_callback(fut, callback)

    def _send_async(
        self, msg: Message, selector: Selector | None, arg: Any, timeout: float | None
    ) -> Future[SendResult]:
        try:
            qid = self._choose_queue(msg, selector, arg)
            acc = self._accumulator_for(msg)
            if acc is not None:
                self._encoder.check(msg)
                fut: Future[SendResult] = acc.add(msg, qid)
            else:
                fut = self._submit_one(msg, qid, timeout, oneway=False)
        except (ShmqError, TimeoutError) as e:
            fut = Future()
            fut.set_exception(e)
        return fut

    def _accumulator_for(self, msg: Message) -> ProduceAccumulator | None:
        """The accumulator, if ``msg`` goes through it (delayed messages never go in batches)."""
        return None if msg.delivery_rules else self._accumulator

    def _flush_accumulated(self) -> None:
        if self._accumulator is not None:
            self._accumulator.flush_all()

    def _with_callback(self, fut: Future[R], callback: Callable[[Any], None] | None) -> Future[R]:
        """Run ``callback(result_or_exception)`` on the callback thread when ``fut`` completes."""
        if callback is not None:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="shmq-send-callback")
            executor = self._executor

            def done(f: Future[R]) -> None:
                outcome = CancelledError() if f.cancelled() else f.exception() or f.result()
                executor.submit(callback, outcome)

            fut.add_done_callback(done)
        return fut

    def send_oneway(
        self, msg: Message, selector: Selector | None = None, arg: Any = None, *, sharding_key: str | None = None
    ) -> None:
        """Fire and forget: no answer, no retry. Bad messages still raise here; with auto_batch,
        a batch that cannot be written later (broker gone, ring full) is logged and dropped.
        ``sharding_key`` as for ``send``."""
        acc = self._accumulator
        if (
            acc is not None
            and selector is None
            and sharding_key is None
            and not self._send_hooks
            and accumulate_oneway(acc, msg, self._encoder.max_message_size)
        ):
            return
        if sharding_key is not None:
            msg, selector, arg = with_sharding_key(msg, sharding_key, selector), _BY_HASH, sharding_key
        if self._send_hooks:
            hooked_call(
                self._send_hooks,
                SendMessageContext(self.group, msg, ONEWAY),
                lambda: self._send_oneway(msg, selector, arg),
            )
        else:
            self._send_oneway(msg, selector, arg)

    def _send_oneway(self, msg: Message, selector: Selector | None, arg: Any) -> None:
        qid = self._choose_queue(msg, selector, arg)
        acc = self._accumulator_for(msg)
        if acc is not None:
            self._encoder.check(msg)
            acc.add(msg, qid, oneway=True)
        else:
            self._submit_one(msg, qid, None, oneway=True)

    def send_batch(
        self,
        msgs: Sequence[Message] | MessageBatch,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one batch (<= 4 MiB, see ``split_batch``); one SendResult.

        A ``MessageBatch`` (bodies as a column, metadata shared) is the fastest form."""
        if self._send_hooks:
            hooked: SendResult = hooked_call(
                self._send_hooks,
                SendMessageContext(self.group, msgs, SYNC),
                lambda: self._send_batch(msgs, selector, arg, timeout).result(),
            )
            return hooked
        result: SendResult = self._send_batch(msgs, selector, arg, timeout).result()  # one, not split
        return result

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
        """``send_batch`` without waiting (RocketMQ's async batch send): keeps the producer encoding
        the next batch while the broker stores this one. Checks of the messages raise at once.
        ``per_message``: the Future gives a list, one SendResult per message (shmq.aio's batches)."""
        if self._send_hooks:
            fut = hooked_future(
                self._send_hooks,
                SendMessageContext(self.group, msgs, ASYNC),
                lambda: self._send_batch(msgs, selector, arg, timeout, per_message),
            )
        else:
            fut = self._send_batch(msgs, selector, arg, timeout, per_message)
        return self._with_callback(fut, callback)

    def _send_batch(
        self,
        msgs: Sequence[Message] | MessageBatch,
        selector: Selector | None,
        arg: Any,
        timeout: float | None,
        per_message: bool = False,
    ) -> Future[Any]:
        self._flush_accumulated()
        first = msgs if isinstance(msgs, MessageBatch) else (msgs[0] if len(msgs) else None)
        qid = self._choose_queue(first, selector, arg) if first is not None else -1
        return self._batches.submit(msgs, qid, timeout, split=per_message)

    # ------------------------------------------------------------------ encoding

    def _born_host(self) -> int:
        s = self._conn.session
        return s.client_id if s is not None else os.getpid()

    def _choose_queue(self, msg: Message | MessageBatch, selector: Selector | None, arg: Any) -> int:
        if selector is None:
            return -1
        queues = self.fetch_publish_queues(msg.topic)
        mq = selector(queues, msg, arg)
        qid = mq.queue_id if isinstance(mq, MessageQueue) else int(mq)
        if not 0 <= qid < len(queues):
            raise BadArgumentError(f"selector chose queue {qid}; topic {msg.topic!r} has {len(queues)}")
        return qid

    def _submit_one(
        self, msg: Message, qid: int, timeout: float | None, oneway: bool, sysflag: int = 0
    ) -> Future[SendResult]:
        """Encode and write one SEND; ``sysflag`` bits are added to the record's (a transaction half)."""
        fut: Future[SendResult] | None = None if oneway else Future()
        self._send_request(msg, qid, timeout, sysflag, fut)
        return fut  # type: ignore[return-value]

    def _send_request(
        self, msg: Message, qid: int, timeout: float | None, sysflag: int, future: _Settable | None
    ) -> None:
        """``_submit_one``'s work: the answer goes to ``future`` (None: a oneway send)."""
        oneway = future is None
        e = self._encoder.encode(msg)
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        size = P.send_size(len(e.topic_b), len(e.key_hashes), e.record_len)
        flags = (P.FLAG_ONEWAY if oneway else 0) | (P.FLAG_INSPECT if msg.delivery_rules or sysflag else 0)
        sysflag |= e.sysflag

        def fill_with(fl: int) -> Fill:  # the frame's flags: a resend's add FLAG_RESEND
            def fill(view: memoryview, req_id: int) -> None:
                P.pack_send(
                    view,
                    req_id,
                    time.monotonic_ns(),
                    qid,
                    fl,
                    e.tags_code,
                    e.topic_b,
                    e.key_hashes,
                    e.body,
                    e.props_b,
                    e.crc,
                    e.flag,
                    sysflag,
                    int(time.time() * 1000),
                    self._born_host(),
                )

            return fill

        fill = fill_with(flags)
        if future is None:
            self._write(P.SEND, size, fill, next_request_id(), deadline)
            return

        def build(r: P.SendResultFrame) -> SendResult:
            return SendResult(
                SEND_STATUS.get(r.status, SendStatus.SEND_OK),
                e.uniq,
                None,
                MessageQueue(e.topic, self.broker_name, r.queue_id),
                r.queue_offset,
                r.store_timestamp,
                1,
                [r.phys_offset],
                r.store_host,
            )

        # a parked message (delay, timer, transaction half) is stored under another topic than
        # its UNIQ_KEY is looked up in: never resent
        resend = fill_with(flags | P.FLAG_RESEND) if self.idempotent and not flags & P.FLAG_INSPECT else None
        self._request(P.SEND, size, fill, build, deadline, future, resend)

    # ------------------------------------------------------------------ requests and retries

    def _submit(
        self,
        kind: int,
        size: int,
        fill: Fill,
        build: Callable[[Any], R],
        deadline: float,
        resend: Fill | None = None,
    ) -> Future[R]:
        """Write a request and await its answer in ``_pending``; ``resend``: how an idempotent
        SEND is written again (flagged), after a timeout of its attempt or a lost broker."""
        future: Future[R] = Future()
        self._request(kind, size, fill, build, deadline, future, resend)
        return future

    def _request(
        self,
        kind: int,
        size: int,
        fill: Fill,
        build: Callable[[Any], Any],
        deadline: float,
        future: _Settable,
        resend: Fill | None = None,
    ) -> None:
        """``_submit``'s work: the request that completes ``future``, registered and written."""
        p = _Pending(future, lambda: None, build, deadline, self.retry_times_when_send_failed, resend is not None)

        def attempt() -> None:
            req_id = next_request_id()
            self._pending[req_id] = p
            again = bool(p.req_ids)
            p.req_ids.append(req_id)
            if p.resendable:
                p.attempt_deadline = time.monotonic() + self._attempt_timeout()
            try:
                self._write(kind, size, resend if again and resend is not None else fill, req_id, deadline)
            except BaseException:
                self._pending.pop(req_id, None)
                raise

        p.resend = attempt
        self._in_flight.add(p)
        try:
            attempt()
        except BaseException:
            self._in_flight.discard(p)
            raise

    def _attempt_timeout(self) -> float:
        """How long one attempt of an idempotent send waits for its answer before it is resent."""
        return self.send_msg_timeout / (self.retry_times_when_send_failed + 1)

    def _write(self, kind: int, size: int, fill: Fill, req_id: int, deadline: float) -> None:
        self._conn.write(
            kind,
            size,
            fill,
            req_id,
            deadline,
            lambda: SendTimeoutError(f"the request ring stayed full for {self.send_msg_timeout} s: broker overloaded?"),
        )

    def _retry(self, p: _Pending, error: Exception) -> None:
        """Retry ``p`` if it has attempts and time left, else fail it with ``error``."""
        if p.retries_left > 0 and time.monotonic() < p.deadline and self._conn.started:
            p.retries_left -= 1
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="shmq-send-retry")
            self._executor.submit(self._resend, p, error)
        else:
            self._finish(p, error)

    def _resend(self, p: _Pending, error: Exception) -> None:
        try:
            p.resend()
        except Exception as e:  # noqa: BLE001 - the future gets the error
            self._finish(p, e if not isinstance(e, BrokerGoneError) else error)

    def _finish(self, p: _Pending, error: BaseException | None, result: Any = None) -> None:
        """Complete ``p``'s future (once: the first outcome wins) and close it for ``flush``; the
        future's callbacks (which settle auto-batched messages) run before it is closed.
        A finished request is never written again, and dropping its resend closure (which
        holds ``p``) breaks the one reference cycle of a request: without that the request,
        its future and the futures and SendResults of every auto-batched message it carried
        live until the garbage collector finds them."""
        try:
            if not p.future.done():
                if error is not None:
                    p.future.set_exception(error)
                else:
                    p.future.set_result(result)
        finally:
            p.resend = _written
            for req_id in p.req_ids:  # the other attempts' answers are not awaited any more
                self._pending.pop(req_id, None)
            self._in_flight.discard(p)

    # ------------------------------------------------------------------ responses

    def _on_response(self, kind: int, view: memoryview) -> None:
        if kind == P.SEND_RESULT or kind == P.SEND_MULTI_RESULT:
            r = P.decode_send_result(view) if kind == P.SEND_RESULT else P.decode_send_multi_result(view)
            p = self._pending.pop(r.req_id, None)
            if p is not None:
                self._finish(p, None, p.build(r) if not p.future.done() else None)
        elif kind == P.ERROR:
            err = P.decode_error(view)
            p = self._pending.pop(err.req_id, None)
            if p is None:
                return
            if err.code == P.SYSTEM_BUSY:
                self._retry(p, BrokerBusyError(err.code, err.message))
            else:
                self._finish(p, broker_error(err.code, err.message))
        elif kind == P.WAKE:
            P.decode_wake(view)
        else:
            raise CorruptFrameError(f"frame kind {kind} is not a response")

    def _expire(self, now: float) -> None:
        """Fail sends with no answer by their deadline. Before that, an idempotent send whose
        attempt got no answer in its share of the time is resent (flagged: the broker may have
        stored it, and then answers the first copy's result); any other is never sent again, as a
        resend would store another copy. An earlier attempt's late answer still counts."""
        # dict.copy, not list(items()): sending threads add to _pending meanwhile, and a list built
        # item by item can let a garbage collection (and so a thread switch) in mid-iteration
        for req_id, p in self._pending.copy().items():
            if now >= p.deadline:
                if self._pending.pop(req_id, None) is p:
                    timeout = self.send_msg_timeout
                    self._finish(p, SendTimeoutError(f"no answer from broker {self.broker_name!r} within {timeout} s"))
            elif p.resendable and p.retries_left > 0 and now >= p.attempt_deadline and req_id == p.req_ids[-1]:
                p.attempt_deadline = p.deadline  # one resend per attempt: the next one sets its own
                self._retry(p, SendTimeoutError(f"no answer from broker {self.broker_name!r}"))

    def _broker_died(self, s: Session, why: str) -> None:
        """Fail what awaits an answer; an idempotent send is resent instead once the broker is
        back (within its timeout), unless this producer does not wait for that
        (``reattach_timeout=0``: a cluster producer sends it to another broker)."""
        error = BrokerGoneError(
            f"broker {self.broker_name!r} went away ({why}); the next send attaches again once it restarts"
        )
        if self._conn.reattach_timeout == 0:
            return self._fail_all(error)
        pending, self._pending = self._pending, {}
        for p in {id(p): p for p in pending.values()}.values():
            if p.resendable:
                self._retry(p, error)
            else:
                self._finish(p, error)

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for p in pending.values():
            self._finish(p, error)


def inner_producer(group: str, broker: str | None, namesrv: str | None = None) -> Producer:
    """The producer that sends a client's trace records: RocketMQ's ``_INNER_TRACE_PRODUCER-<group>``,
    with a small ring, no compression (trace bodies stay plain JSON in the store) and no
    accumulator (the dispatcher sends its own batches)."""
    return Producer(
        INNER_PRODUCER_PREFIX + group,
        broker,
        namesrv=namesrv,
        ring_bytes=TRACE_RING_BYTES,
        compress_msg_body_over_howmuch=None,
        auto_batch=False,
    )
