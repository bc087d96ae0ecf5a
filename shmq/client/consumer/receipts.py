"""ReceiptSender: a SimpleConsumer's acks and invisible-time changes on one broker, batched.

An ack costs the broker one pop-log write per frame, not per receipt, so receipts are gathered
and written together: ``submit`` queues a receipt and returns its future; what waits goes out
in one ACK (or CHANGE_INVISIBLE) frame at the next ``flush``. A flush runs before the consumer
writes its next POP (the worker's loop ``receive``, ``ack_async`` each, ``receive`` writes one
ACK frame then the POP), when someone waits on a queued receipt's future, when ``MAX_RECEIPTS``
wait, and at the latest ``FLUSH_DELAY_S`` after the first queued one (a flusher thread, for
futures awaited through callbacks, as asyncio does). The broker answers each frame with
RECEIPT_RESULT, a status per receipt; a refused receipt's future fails with ``ReceiptError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import NamedTuple

from shmq.client.connection import BrokerConnection, next_request_id
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.errors import BrokerGoneError, ReceiptError, ShmqError, broker_error
from shmq.model.message_ext import ReceiptHandle
from shmq.ring.framing import RingLayout

# the longest a queued receipt waits for company before the flusher writes it (a worker's loop
# writes them sooner: its next receive flushes first)
FLUSH_DELAY_S = 0.002

log = logging.getLogger(__name__)
WRITE_TIMEOUT_S = 3.0  # how long a flush waits for room in the request ring

_REFUSALS = {
    F.RECEIPT_STALE: "the receipt is stale: the message was handed out again since (its invisible time "
    "ran out, or it was changed and a new receipt issued); settle its latest delivery",
    F.RECEIPT_UNKNOWN: "no such message is in flight for the group (acked already, or delivered again "
    "after its invisible time ran out)",
    F.RECEIPT_ILLEGAL: "the broker found the receipt malformed",
}


class ReceiptFuture(Future[None]):
    """A queued receipt's outcome; waiting on it writes the receipts still queued first, so
    nobody waits out the flush delay."""

    def __init__(self, sender: ReceiptSender) -> None:
        super().__init__()
        self._sender = sender

    def result(self, timeout: float | None = None) -> None:
        self._sender.flush()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._sender.flush()
        return super().exception(timeout)


class _Queued(NamedTuple):
    receipt: ReceiptHandle
    invisible_ms: int  # 0: an ack
    future: ReceiptFuture
    renew: Callable[[int], None] | None  # a change's: takes the new token before the future is done


class ReceiptSender:
    def __init__(self, conn: BrokerConnection, group: str) -> None:
        self._conn = conn
        self._group = group
        self._lock = threading.Lock()  # the queue, and the order frames reach the ring in
        self._write_lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._sent: dict[int, list[_Queued]] = {}  # request id -> its receipts, until answered
        self._due = threading.Event()
        self._running = True
        self._thread = threading.Thread(target=self._flusher, name=f"shmq-receipts-{group}", daemon=True)
        self._thread.start()

    def submit(
        self, receipt: ReceiptHandle, invisible_ms: int = 0, renew: Callable[[int], None] | None = None
    ) -> ReceiptFuture:
        """Queue an ack (``invisible_ms`` 0) or a change of the invisible time (``renew`` gets
        the new token when the broker accepted it)."""
        if not self._running:
            raise ShmqError("the SimpleConsumer is shut down")
        fut = ReceiptFuture(self)
        with self._lock:
            self._queue.append(_Queued(receipt, invisible_ms, fut, renew))
            n = len(self._queue)
        if n >= F.MAX_RECEIPTS:
            self.flush()
        elif n == 1:
            self._due.set()  # the flusher wakes once per batch, not per receipt
        return fut

    def flush(self) -> None:
        """Write every queued receipt now (acks in ACK frames, changes in CHANGE_INVISIBLE ones)."""
        if not self._queue:
            return
        with self._write_lock:
            with self._lock:
                queued, self._queue = self._queue, []
            acks = [q for q in queued if not q.invisible_ms]
            changes = [q for q in queued if q.invisible_ms]
            for part in (acks, changes):
                for i in range(0, len(part), F.MAX_RECEIPTS):
                    self._write(part[i : i + F.MAX_RECEIPTS])

    def _write(self, batch: list[_Queued]) -> None:
        """One frame of ``batch``, or two of its halves when it would not fit the request ring
        (4,096 receipts of a CHANGE_INVISIBLE are 160 KiB; a consumer's ring takes 128 KiB a frame)."""
        payload, req_id = self._encode(batch)
        if len(payload) > RingLayout(self._conn.ring_bytes).max_payload and len(batch) > 1:
            half = len(batch) // 2
            self._write(batch[:half])
            self._write(batch[half:])
            return
        with self._lock:
            self._sent[req_id] = batch
        change = bool(batch[0].invisible_ms)
        try:
            self._conn.write_frame(F.CHANGE_INVISIBLE if change else F.ACK, payload, time.monotonic() + WRITE_TIMEOUT_S)
        except (ShmqError, OSError) as e:
            self._fail(req_id, e)

    def _encode(self, batch: list[_Queued]) -> tuple[bytes, int]:
        """The ACK or CHANGE_INVISIBLE payload of ``batch``, and its request id."""
        topics: dict[str, int] = {}
        idx = [topics.setdefault(q.receipt.topic, len(topics)) for q in batch]
        change = bool(batch[0].invisible_ms)
        req_id = next_request_id()
        payload = F.encode_receipts(
            req_id,
            time.time_ns(),
            self._group,
            list(topics),
            idx,
            [q.receipt.queue_id for q in batch],
            [q.receipt.queue_offset for q in batch],
            [q.receipt.token for q in batch],
            [q.invisible_ms for q in batch] if change else None,
        )
        return payload, req_id

    def _flusher(self) -> None:
        while self._running:
            self._due.wait()
            self._due.clear()
            if not self._running:
                return
            time.sleep(FLUSH_DELAY_S)
            try:
                self.flush()
            except Exception:
                log.exception("writing the queued receipts of group %r failed", self._group)

    # ------------------------------------------------------------------ answers

    def on_response(self, kind: int, view: memoryview) -> bool:
        """Settle the receipts of a RECEIPT_RESULT, or of an ERROR answering one of our frames;
        False if the frame is not ours."""
        if kind == F.RECEIPT_RESULT:
            result = F.decode_receipt_result(view)
            batch = self._take(result.req_id)
            if batch is None:
                return True
            statuses, tokens = result.statuses.tolist(), result.tokens.tolist()  # ints, not numpy scalars
            for i, q in enumerate(batch):
                status = statuses[i] if i < len(statuses) else F.RECEIPT_ILLEGAL
                if status == F.RECEIPT_OK:
                    if q.renew is not None:
                        q.renew(tokens[i])
                    q.future.set_result(None)
                else:
                    q.future.set_exception(_refused(q, status, result.message))
            return True
        if kind == P.ERROR:
            err = P.decode_error(view)
            batch = self._take(err.req_id)
            if batch is None:
                return False
            for q in batch:
                q.future.set_exception(broker_error(err.code, err.message))
            return True
        return False

    def _take(self, req_id: int) -> list[_Queued] | None:
        with self._lock:
            return self._sent.pop(req_id, None)

    def _fail(self, req_id: int, e: BaseException) -> None:
        for q in self._take(req_id) or []:
            if not q.future.done():
                q.future.set_exception(e)

    def fail_all(self, why: str) -> None:
        """The broker died: receipts it did not answer fail (it may or may not have settled them)."""
        with self._lock:
            sent = list(self._sent)
        for req_id in sent:
            self._fail(req_id, BrokerGoneError(f"{why} before answering; the message may be delivered again"))

    def close(self, timeout: float) -> None:
        """Write what is queued, wait up to ``timeout`` for the answers, stop the flusher."""
        self.flush()
        deadline = time.monotonic() + timeout
        while self._sent and time.monotonic() < deadline:
            time.sleep(0.001)
        self._running = False
        self._due.set()
        self._thread.join(1.0)


def _refused(q: _Queued, status: int, reason: str) -> ReceiptError:
    r = q.receipt
    what = "change the invisible time of" if q.invisible_ms else "ack"
    why = _REFUSALS.get(status, f"refused with status {status}")
    if status == F.RECEIPT_ILLEGAL and reason:
        why = f"{why} ({reason})"
    return ReceiptError(status, f"cannot {what} message {r.topic}:{r.queue_id}:{r.queue_offset}: {why}")
