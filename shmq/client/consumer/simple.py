"""SimpleConsumer: the broker hands messages out and the consumer acks each (RocketMQ 5's
SimpleConsumer over POP).

Any number of SimpleConsumers of a group share its topics with no rebalance: ``receive`` asks
the broker for up to ``max_message_num`` messages of the subscribed topics (and of the group's
retry topic), which it keeps invisible to the rest of the group for ``invisible_duration``;
``ack`` settles one, ``change_invisible_duration`` gives it more time. A message not acked in
time is delivered again, to any member, with ``delivery_attempt`` one higher, and after
``max_delivery_attempts`` goes to ``%DLQ%<group>``. The broker's answer names each message by
where it is stored; the consumer reads it from its read-only mapping of the commitlog, as every
shmq consumer does. After a broker restart the next call attaches and joins the group again;
receipts stay valid (the broker's pop state survives it).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from shmq.client import exit_close
from shmq.client.connection import BrokerConnection, Session, next_request_id
from shmq.client.consumer.pop_read import popped_messages
from shmq.client.consumer.pull import CONSUMER_RING_BYTES
from shmq.client.consumer.receipts import ReceiptSender
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.codec import record as fmt
from shmq.errors import (
    BadArgumentError,
    BrokerBusyError,
    BrokerGoneError,
    ShmqError,
    broker_error,
)
from shmq.filter.function import FunctionFilter, Predicate
from shmq.filter.tags import Expression, Subscription, as_expression, subscription_arg
from shmq.model.message_ext import MessageExt, PoppedMessageExt, ReceiptHandle
from shmq.model.reprs import client_repr
from shmq.model.system_topics import RETRY_GROUP_TOPIC_PREFIX
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import receive_observer as otel_receive_observer
from shmq.store.read.reader import StoreReader

if TYPE_CHECKING:
    from shmq.otel.hooks import ReceiveObserver

log = logging.getLogger(__name__)

ANSWER_GRACE_S = 5.0  # how long past its long poll a receive waits for the broker's answer
ACK_TIMEOUT_S = 10.0  # how long ``ack`` and ``change_invisible_duration`` wait for the answer
CLOSE_TIMEOUT_S = 3.0  # how long ``shutdown`` waits for the answers to the last acks
POP = "POP"  # the group model a SimpleConsumer joins with (shmq.broker.groups)


def check_receive(max_message_num: int, invisible_duration: float) -> int:
    """The invisible time in ms of a valid ``receive``; BadArgumentError before anything is sent."""
    if isinstance(max_message_num, bool) or not isinstance(max_message_num, int):
        raise BadArgumentError(f"max_message_num must be an int, got {type(max_message_num).__name__}")
    if not 1 <= max_message_num <= F.MAX_POP_NUMS:
        raise BadArgumentError(f"max_message_num must be 1..{F.MAX_POP_NUMS}, got {max_message_num}")
    return check_invisible(invisible_duration)


def _number(x: object) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_invisible(seconds: float) -> int:
    """``seconds`` of invisible time in ms: more than 0, at most 12 hours (RocketMQ 5's cap)."""
    cap = F.MAX_INVISIBLE_MS // 1000
    if not _number(seconds):
        raise BadArgumentError(f"invisible_duration must be a number of seconds, got {seconds!r:.40}")
    ms = round(seconds * 1000)
    if seconds <= 0 or not 0 < ms <= F.MAX_INVISIBLE_MS:
        raise BadArgumentError(f"invisible_duration must be more than 0 s and at most {cap} s (12 h), got {seconds}")
    return ms


def pop_subscription(expression: str | Expression | Predicate | None) -> Subscription:
    """A subscription the broker can filter by: a tag expression or ``shmq.sql(...)``."""
    sub = as_expression(expression)
    if isinstance(sub, FunctionFilter):
        raise BadArgumentError(
            "a SimpleConsumer cannot filter with a Python predicate (the broker picks the messages); "
            "subscribe with tags or shmq.sql(...)"
        )
    return sub


def receipt_of(msg: MessageExt) -> ReceiptHandle:
    """``msg``'s receipt; BadArgumentError for a message no SimpleConsumer received."""
    handle = msg.receipt_handle if isinstance(msg, MessageExt) else None
    if handle is None:
        raise BadArgumentError("only a message a SimpleConsumer received can be acked (it has no receipt_handle)")
    return handle


class SimpleConsumer:
    def __new__(cls, group: str, broker: str | None = None, *, namesrv: str | None = None, **kwargs: Any) -> Any:
        """With ``namesrv`` (or ``$SHMQ_NAMESRV`` and no ``broker``): a consumer over every master
        of that name server's cluster (``ClusterSimpleConsumer``, the same methods)."""
        ns = namesrv_or_env(namesrv, broker)
        if ns is None:
            return super().__new__(cls)
        from shmq.client.consumer.cluster_simple import ClusterSimpleConsumer

        return ClusterSimpleConsumer(group, ns, **kwargs)

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        subscriptions: Mapping[str, str | Expression] | None = None,
        await_duration: float = 5.0,
        max_delivery_attempts: int = 16,
        fifo: bool = False,
        start_timeout: float = 3.0,
        ring_bytes: int = CONSUMER_RING_BYTES,
    ) -> None:
        """``await_duration``: how long a ``receive`` that finds nothing waits for a message
        (0..60 s); ``max_delivery_attempts``: deliveries before a message goes to
        ``%DLQ%<group>``; ``fifo``: a message group's next message only after the previous one
        is acked. ``namesrv``: every master of that cluster (see ``__new__``)."""
        g = group.encode("ascii", "replace") if isinstance(group, str) else b""
        if not 0 < len(g) <= F.MAX_GROUP_BYTES:
            raise BadArgumentError(
                f"a SimpleConsumer's group must be 1..{F.MAX_GROUP_BYTES} characters, got {group!r:.80}"
            )
        if not _number(await_duration) or not 0 <= await_duration <= F.MAX_AWAIT_MS / 1000:
            raise BadArgumentError(f"await_duration must be 0..{F.MAX_AWAIT_MS // 1000} s, got {await_duration!r:.40}")
        attempts_ok = isinstance(max_delivery_attempts, int) and not isinstance(max_delivery_attempts, bool)
        if not attempts_ok or not 1 <= max_delivery_attempts <= F.MAX_ATTEMPTS:
            raise BadArgumentError(
                f"max_delivery_attempts must be 1..{F.MAX_ATTEMPTS}, got {max_delivery_attempts!r:.40}"
            )
        self.group = group
        self.await_duration = float(await_duration)
        self.max_delivery_attempts = int(max_delivery_attempts)
        self.fifo = bool(fifo)
        self.start_timeout = start_timeout
        self.retry_topic = RETRY_GROUP_TOPIC_PREFIX + group
        self._subscriptions: dict[str, Subscription] = {}
        for topic, expression in (subscriptions or {}).items():
            self._subscriptions[topic] = self._checked(topic, expression)
        self._conn = BrokerConnection(broker, "consumer", group, ring_bytes, self._on_response, on_lost=self._on_lost)
        self.broker_name = self._conn.broker_name
        self._lock = threading.Lock()  # binding and the store reader
        self._session: Session | None = None
        self._store: StoreReader | None = None
        self._receipts: ReceiptSender | None = None
        self._pops: dict[int, Future[F.PopResult]] = {}
        self._kept: list[F.PopResult] = []  # answers that came after their receive gave up
        self._spill: list[MessageExt] = []  # messages of a kept answer a smaller receive left
        self._running = False
        self._closed = False  # shut down: not started again (its receipts went with it)
        # OpenTelemetry (shmq.otel): receive spans and metrics per receive, when instrumented
        self.otel: ReceiveObserver | None = otel_receive_observer(group, None)

    def join_cluster(self, client_id: int, scope: object = None) -> None:
        """Make this the part on one broker of a cluster's consumer (before ``start``): attach as
        ``client_id``, the member's one id on every broker (``scope`` is for owners of queues:
        a POP member owns none)."""
        self._conn.client_id = client_id

    @staticmethod
    def _checked(topic: str, expression: str | Expression | Predicate | None) -> Subscription:
        fmt.check_topic(topic)
        return pop_subscription(expression)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SimpleConsumer:
        """Attach and join the group; ``BrokerNotFoundError`` within ``start_timeout``."""
        if self._running:
            return self
        if self._closed:
            raise ShmqError("the SimpleConsumer was shut down; make a new one")
        self._conn.start(self.start_timeout)
        try:
            with self._lock:
                self._bind(time.monotonic() + self.start_timeout)
        except BaseException:
            self._conn.shutdown()
            raise
        self._receipts = ReceiptSender(self._conn, self.group)
        self._running = True
        exit_close.track(self)
        return self

    def shutdown(self) -> None:
        """Write the acks still queued (waiting a moment for their answers), leave the group and
        detach. Messages received and not acked come back after their invisible time."""
        if not self._running:
            return
        exit_close.untrack(self)
        self._running = False
        self._closed = True
        if self._receipts is not None:
            self._receipts.close(CLOSE_TIMEOUT_S if self._conn.reachable() else 0.0)
        self._conn.shutdown()
        self._fail_pops(ShmqError("the SimpleConsumer was shut down"))
        with self._lock:
            if self._store is not None:
                self._store.close()
            self._store = self._session = None

    def __enter__(self) -> SimpleConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("SimpleConsumer", self.group, self.broker_name, self._running, self._subscriptions)

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, topic: str, expression: str | Expression = "*") -> None:
        """Receive ``topic``'s messages that match ``expression`` (tags, or ``shmq.sql(...)``;
        the broker filters, so a Python predicate is refused)."""
        self._subscriptions[topic] = self._checked(topic, expression)
        self._rejoin()

    def unsubscribe(self, topic: str) -> None:
        if self._subscriptions.pop(topic, None) is not None:
            self._rejoin()

    def _rejoin(self) -> None:
        if self._running:
            with self._lock:
                if self._session is not None and self._session.alive:
                    self._join(self._session)

    def _join(self, s: Session) -> None:
        subs = {t: subscription_arg(e) for t, e in self._subscriptions.items()}
        s.admin("join_group", {"group": self.group, "model": POP, "subscriptions": subs}, self.start_timeout)

    def _bind(self, deadline: float) -> Session:
        """The live session (caller holds ``_lock``); on a new one (start, broker restart) join the
        group and map the store again."""
        s = self._conn.live_session(deadline)
        if s is not self._session:
            self._join(s)
            if self._store is not None:
                self._store.close()
            self._store = StoreReader(s.store_dir)
            self._session = s
        return s

    # ------------------------------------------------------------------ receive

    def receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        """Up to ``max_message_num`` messages, each invisible to the group for
        ``invisible_duration`` s; waits up to ``await_duration`` for one; [] if none came."""
        if self.otel is not None:
            return self.otel.receive(self._receive, max_message_num, invisible_duration)
        return self._receive(max_message_num, invisible_duration)

    def _receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        invisible_ms = check_receive(max_message_num, invisible_duration)
        kept = self.take_kept(max_message_num)
        if kept:
            return kept
        deadline = time.monotonic() + self.await_duration + ANSWER_GRACE_S
        while True:
            fut = self.pop(max_message_num, invisible_ms, self.await_duration, deadline)
            try:
                return self.messages(fut.result(max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                self.keep_late(fut)
                return []
            except BrokerGoneError:
                if time.monotonic() >= deadline:
                    raise  # else the next pop attaches again (and waits for the broker until the deadline)

    def pop(self, max_nums: int, invisible_ms: int, await_s: float, deadline: float) -> Future[F.PopResult]:
        """Write one POP (the acks queued before it go first); its future gets the answer."""
        if not self._running or self._receipts is None:
            raise ShmqError(self._not_running("receive()"))
        self._receipts.flush()
        with self._lock:
            self._bind(deadline)
        req_id = next_request_id()
        fut: Future[F.PopResult] = Future()
        self._pops[req_id] = fut
        flags = F.FLAG_FIFO if self.fifo else 0
        payload = F.encode_pop(
            req_id,
            time.time_ns(),
            self.group,
            invisible_ms,
            round(await_s * 1000),
            max_nums,
            flags,
            self.max_delivery_attempts,
        )
        try:
            self._conn.write_frame(F.POP, payload, deadline)
        except BaseException:
            self._pops.pop(req_id, None)
            raise
        return fut

    def keep_late(self, fut: Future[F.PopResult]) -> None:
        """An answer its receive stopped waiting for: its messages go to the next receive."""

        def keep(f: Future[F.PopResult]) -> None:
            if not f.cancelled() and f.exception() is None and len(f.result().tokens):
                with self._lock:
                    self._kept.append(f.result())

        fut.add_done_callback(keep)

    def take_kept(self, max_nums: int) -> list[MessageExt]:
        """Messages of answers that came late, up to ``max_nums`` (the rest stay kept)."""
        if not self._kept and not self._spill:
            return []
        with self._lock:
            out, self._spill = self._spill[:max_nums], self._spill[max_nums:]
        while len(out) < max_nums:
            with self._lock:
                if not self._kept:
                    break
                result = self._kept.pop(0)
            msgs = self.messages(result)
            room = max_nums - len(out)
            out += msgs[:room]
            with self._lock:
                self._spill += msgs[room:]
        return out

    def messages(self, result: F.PopResult) -> list[MessageExt]:
        """The messages a POP handed out, read from the commitlog (see ``pop_read``)."""
        if not len(result.tokens):
            return []
        with self._lock:
            if self._store is None:
                raise ShmqError("the SimpleConsumer was shut down")
            return list(popped_messages(self._store, result, self.broker_name, self.retry_topic, self.group))

    # ------------------------------------------------------------------ ack, change_invisible_duration

    def ack(self, msg: MessageExt) -> None:
        """Settle ``msg``: it is not delivered again. ``ReceiptError`` if its receipt is stale
        (the message was delivered again since) or unknown (acked already)."""
        _wait(self.ack_async(msg), self.broker_name)

    def ack_async(self, msg: MessageExt) -> Future[None]:
        """``ack`` without waiting: acks queued together go to the broker in one frame."""
        receipt = receipt_of(msg)
        return self._sender().submit(receipt)

    def change_invisible_duration(self, msg: MessageExt, invisible_duration: float) -> None:
        """Keep ``msg`` invisible for ``invisible_duration`` s from now; ``msg`` gets the new
        receipt (the old one is stale from then on)."""
        _wait(self.change_invisible_duration_async(msg, invisible_duration), self.broker_name)

    def change_invisible_duration_async(self, msg: MessageExt, invisible_duration: float) -> Future[None]:
        """``change_invisible_duration`` without waiting (queued with the acks)."""
        ms = check_invisible(invisible_duration)
        handle = receipt_of(msg)

        def renew(token: int) -> None:
            if isinstance(msg, PoppedMessageExt):
                msg.with_receipt(handle._replace(token=token))

        return self._sender().submit(handle, ms, renew)

    def _sender(self) -> ReceiptSender:
        if not self._running or self._receipts is None:
            raise ShmqError(self._not_running("acking"))
        return self._receipts

    def _not_running(self, what: str) -> str:
        if self._closed:
            return "the SimpleConsumer was shut down"
        return f"start() the SimpleConsumer before {what}"

    # ------------------------------------------------------------------ the reader thread

    def _on_response(self, kind: int, view: memoryview) -> None:
        if kind == F.POP_RESULT:
            result = F.decode_pop_result(view)
            fut = self._pops.pop(result.req_id, None)
            if fut is not None:
                fut.set_result(result)
            return
        if self._receipts is not None and self._receipts.on_response(kind, view):
            return
        if kind == P.ERROR:
            err = P.decode_error(view)
            fut = self._pops.pop(err.req_id, None)
            if fut is not None:
                busy = err.code == P.SYSTEM_BUSY
                fut.set_exception(
                    BrokerBusyError(err.code, err.message) if busy else broker_error(err.code, err.message)
                )
                return
            log.warning(
                "broker %r answered request %d with error %d: %s", self.broker_name, err.req_id, err.code, err.message
            )

    def _on_lost(self, _session: Session, why: str) -> None:
        """The broker died: pops and receipts it did not answer fail (a receive attaches again)."""
        self._fail_pops(BrokerGoneError(f"broker {self.broker_name!r} died ({why})"))
        if self._receipts is not None:
            self._receipts.fail_all(f"broker {self.broker_name!r} died")

    def _fail_pops(self, e: BaseException) -> None:
        pops, self._pops = self._pops, {}
        for fut in pops.values():
            if not fut.done():
                fut.set_exception(e)


def _wait(fut: Future[None], broker: str) -> None:
    try:
        fut.result(ACK_TIMEOUT_S)
    except TimeoutError:
        raise ShmqError(f"broker {broker!r} did not answer within {ACK_TIMEOUT_S:g} s") from None
