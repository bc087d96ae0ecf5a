"""PullAPIWrapper: the pull path both consumers share (RocketMQ's PullAPIWrapper, without a broker hop).

Messages are read straight from the store files through read-only mmaps, never past the max
offset the broker published in its state segment. Only long polling talks to the broker: a
PULL_WAIT frame, answered by a WAKE when the queue grows (or the wait times out). The store
reader and state view belong to one broker incarnation and are reopened after a restart
(recovery may have rewritten the files). Not thread-safe: callers serialise ``bind`` and ``pull``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from shmq.client.broker_state import BrokerState
from shmq.client.connection import BrokerConnection, Session, next_request_id
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.codec import frames as P
from shmq.errors import CorruptFrameError, ShmqError, TopicNotReadableError
from shmq.filter.function import FunctionFilter
from shmq.filter.tags import Subscription
from shmq.model.consumer_types import PullResult, PullStatus
from shmq.model.message import MessageQueue
from shmq.model.perm import PERM_READ
from shmq.store.read.columns import pull_messages, read_batch
from shmq.store.read.filter_bitmap import FilterBitmapReader
from shmq.store.read.reader import StoreReader

log = logging.getLogger(__name__)

WakeHandler = Callable[[P.Wake | None], None]  # None: the broker died, look again


LONG_POLL_S = 15.0  # brokerSuspendMaxTimeMillis: how long a PULL_WAIT may be held


class PullAPIWrapper:
    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.session: Session | None = None
        self.state: BrokerState | None = None
        self.store: StoreReader | None = None
        self.bitmap: FilterBitmapReader | None = None  # SQL92 filter bitmaps of this group (skipped unread)
        self._waits: dict[int, WakeHandler] = {}
        self._waits_lock = threading.Lock()

    def bind(self, deadline: float) -> Session:
        """The live session (attaching again until ``deadline`` if the broker restarted), with its views."""
        s = self.conn.live_session(deadline)
        if s is not self.session:
            self.close()
            self.state = BrokerState(s.state)
            self.store = StoreReader(s.store_dir)
            self.bitmap = FilterBitmapReader(self.store.store_dir)
            self.session = s
        return s

    def views(self) -> tuple[BrokerState, StoreReader]:
        """The bound incarnation's state and store (after ``bind``)."""
        if self.state is None or self.store is None:
            raise ShmqError(f"not attached to broker {self.conn.broker_name!r} (call start())")
        return self.state, self.store

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``; its max offset if every
        message is older (the store's binary search over store timestamps; after ``bind``)."""
        state, store = self.views()
        hi = state.queue_offsets(mq.topic, mq.queue_id)[1]
        if hi == 0:
            return 0
        return store.consume_queue(mq.topic, mq.queue_id).offset_for_timestamp(timestamp_ms, hi)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.bitmap is not None:
            self.bitmap.close()
        self.session = self.state = self.store = self.bitmap = None

    def pull(
        self, mq: MessageQueue, expression: Subscription, offset: int, max_nums: int, columns: bool = True
    ) -> PullResult:
        """One pull without waiting: FOUND, NO_MATCHED_MSG, NO_NEW_MSG or OFFSET_ILLEGAL (below the
        queue's min offset, cleaned up: ``next_begin_offset`` is the min; past the max: the max).
        ``TopicNotReadableError`` if the topic's perm lacks the read bit (RocketMQ's broker
        answers such a pull NO_PERMISSION, "the topic[...] pulling message is forbidden").

        ``columns=False``: the caller wants only ``messages`` (the push consumer), so the result
        has no ``batch`` and the messages are read straight into objects (``pull_messages``)."""
        state, store = self.views()
        perm, lo, hi = state.pull_bounds(mq.topic, mq.queue_id)
        if not perm & PERM_READ:
            raise TopicNotReadableError(
                f"topic {mq.topic!r} is not readable (perm {perm}: the read bit 4 is "
                f"off); pulling from it is forbidden until its perm includes 4"
            )
        if offset < lo:
            return PullResult(PullStatus.OFFSET_ILLEGAL, lo, lo, hi)
        if offset > hi:
            return PullResult(PullStatus.OFFSET_ILLEGAL, hi, lo, hi)
        if offset == hi:
            return PullResult(PullStatus.NO_NEW_MSG, offset, lo, hi)
        if isinstance(expression, FunctionFilter):  # the predicate needs whole messages: decode, then test
            batch, msgs = expression.select(read_batch(store, mq.topic, mq.queue_id, offset, max_nums, hi))
            status = PullStatus.FOUND if msgs else PullStatus.NO_MATCHED_MSG
            return PullResult(status, batch.next_offset, lo, hi, batch, msgs)
        if not columns:
            nxt, msgs = pull_messages(
                store, mq.topic, mq.queue_id, offset, max_nums, hi, expression, self.bitmap, self.conn.group
            )
            return PullResult(PullStatus.FOUND if msgs else PullStatus.NO_MATCHED_MSG, nxt, lo, hi, None, msgs)
        batch = read_batch(store, mq.topic, mq.queue_id, offset, max_nums, hi, expression, self.bitmap, self.conn.group)
        status = PullStatus.FOUND if len(batch) else PullStatus.NO_MATCHED_MSG
        return PullResult(status, batch.next_offset, lo, hi, batch)

    # ------------------------------------------------------------------ long polling

    def long_poll(self, idle: list[ProcessQueue], wakeup: threading.Event) -> bool:
        """One PULL_WAIT per idle queue not waiting yet (a consumer's puller when nothing moved):
        its WAKE, or the broker's loss, clears the queue's wait and sets ``wakeup``. True if a
        queue has grown already (no wait is sent for it: pull again instead of sleeping)."""
        grown = False
        for pq in idle:
            if pq.wait_req is None:
                if self._grown(pq.mq, pq.next_offset, unsure=False):
                    grown = True
                    continue
                pq.wait_req = req_id = next_request_id()  # set before the WAKE can come
                try:
                    self.pull_wait(
                        pq.mq, pq.next_offset, LONG_POLL_S, functools.partial(_woken, pq, wakeup), req_id, lazy=True
                    )
                except BaseException:
                    pq.wait_req = None
                    raise
        return grown

    def pull_wait(
        self,
        mq: MessageQueue,
        offset: int,
        timeout: float,
        handler: WakeHandler,
        req_id: int | None = None,
        lazy: bool = False,
    ) -> int:
        """Ask the broker to answer when ``mq`` grows past ``offset``; ``handler`` gets the WAKE.

        Returns the request id (for ``cancel``; pass one in to know it before the handler can
        run). The broker answers at once if the queue already grew.

        ``lazy``: a sleeping broker is woken only if the queue grew past ``offset`` already (the
        published max offset, read after the frame is published). Otherwise the queue can only
        grow by a put, and the pass that puts reads this frame (or, finding it later, answers at
        once): no broker wake-up, pass and spin per long poll (per pushed message at low rates).
        """
        req_id = next_request_id() if req_id is None else req_id
        with self._waits_lock:
            self._waits[req_id] = handler
        try:
            self.conn.write_frame(
                P.PULL_WAIT,
                P.encode_pull_wait(req_id, mq.topic, mq.queue_id, offset, max(1, int(timeout * 1000))),
                time.monotonic() + max(timeout, 1.0),
                functools.partial(self._grown, mq, offset) if lazy else None,
            )
        except BaseException:
            self.cancel(req_id)
            raise
        return req_id

    def _grown(self, mq: MessageQueue, offset: int, unsure: bool = True) -> bool:
        """Whether the broker published ``mq``'s max offset past ``offset`` (``unsure`` when the
        state cannot be read: the session is closing)."""
        state = self.state
        if state is None:
            return unsure
        try:
            return state.pull_bounds(mq.topic, mq.queue_id)[2] > offset
        except (ShmqError, ValueError, OSError):
            return unsure

    def cancel(self, req_id: int) -> None:
        """Forget a wait (its WAKE, if it still comes, is dropped)."""
        with self._waits_lock:
            self._waits.pop(req_id, None)

    def on_response(self, kind: int, view: memoryview) -> None:
        """Response frames of a consumer's channel (called by the connection's reader thread)."""
        if kind == P.WAKE:
            wake = P.decode_wake(view)
            with self._waits_lock:
                handler = self._waits.pop(wake.req_id, None)
            if handler is not None:
                handler(wake)
        elif kind == P.ERROR:
            err = P.decode_error(view)
            log.warning(
                "broker %r answered request %d with error %d: %s",
                self.conn.broker_name,
                err.req_id,
                err.code,
                err.message,
            )
        else:
            raise CorruptFrameError(f"frame kind {kind} is not a response a consumer expects")

    def wake_all(self) -> None:
        """The broker died: every waiter looks again (and finds the session gone)."""
        with self._waits_lock:
            handlers, self._waits = list(self._waits.values()), {}
        for h in handlers:
            h(None)


def _woken(pq: ProcessQueue, wakeup: threading.Event, wake: P.Wake | None) -> None:
    if wake is None or pq.wait_req == wake.req_id:
        pq.wait_req = None
    wakeup.set()
