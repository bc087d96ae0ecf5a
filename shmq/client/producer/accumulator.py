"""ProduceAccumulator: send_async and send_oneway messages gathered into batches (RocketMQ 5's autoBatch).

Encoding and writing one message at a time costs a Python producer ~20 us; as a batch the
same message costs ~1-2 us. Messages are grouped by (topic, queue), in call order. A group
that reaches ``batch_max_bytes`` is sent at once; everything else waiting is handed to
``flush`` together, at the latest ``batch_max_delay`` seconds after the oldest waiting message (a
flusher thread sees to the delay), or as soon as someone waits on the Future of a message
still waiting (``PendingSend.result``): a caller that keeps a window of sends in flight never
waits out the delay. Handing everything over together lets the producer write the small
groups of many topics (each sent rarely) back to back for the broker to store in one put.
Flushes run under the accumulator's lock, so the batches of one queue reach the ring in the
order they were filled.

Futures follow the stdlib protocol: a message still waiting can be cancelled (``cancel()``
returns True and it is never sent); at the hand-over its future goes RUNNING through
``set_running_or_notify_cancel`` (cancelled ones are dropped from the batch there, and
``concurrent.futures.wait`` learns of them), after which ``cancel()`` returns False.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import PENDING as _PENDING
from concurrent.futures._base import RUNNING as _RUNNING
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from shmq import _speedups
from shmq.codec.record import check_topic
from shmq.errors import ShmqError
from shmq.model.message import Message, SendResult

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 4096
MIN_BATCH = 8  # a batch's fixed cost is about that of 8 single sends: fewer go as single SENDs
RECORD_OVERHEAD = 160  # header, topic and properties of a typical record: how a batch's size is estimated

# (topic, queue id or -1, messages, their futures (None: oneway)) for each group handed over
Group = tuple[str, int, list[Message], list["PendingSend | None"]]
Flush = Callable[[list[Group]], None]


@dataclass(eq=False)
class Batch:
    """The messages of one (topic, queue) waiting to go, and their futures (compiled twin:
    ``_accumulator.Batch``, whose fields the compiled ``accumulate`` reads without lookups)."""

    key: tuple[str, int]
    accumulator: ProduceAccumulator
    condition: threading.Condition  # shared by the batches that are flushed together
    msgs: list[Message] = field(default_factory=list)
    futures: list[PendingSend | None] = field(default_factory=list)
    size: int = 0
    sent: bool = False


_make_batch = _speedups.pick("_accumulator", "Batch", Batch)


class _OwnList:
    """A future's ``_waiters`` or ``_done_callbacks``, made on first use (most accumulated
    futures never get a waiter or a callback). A non-data descriptor: the list it makes goes
    into the instance's ``__dict__``, which every later access finds first, so the stdlib's
    ``f._waiters.append(...)`` works unchanged. ``settle`` reads ``__dict__`` to skip futures
    that have none without making them."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        made: list[Any] = []
        obj.__dict__[self.name] = made
        return made


class PendingSend(Future[SendResult]):
    """The Future of an accumulated message: waiting on it sends its batch now.

    Made once per ``send_async``, so it costs as little as a Future can: ``Future.__init__``
    (a Condition, two lists, four fields) is not run. The futures of the batches handed over
    together share one Condition (``add`` gives each its batch's): making a Condition per
    message cost more than the rest of an async send's bookkeeping. ``_state``, ``_result``
    and ``_exception`` start as class attributes (PENDING, None, None) that the first write
    shadows, and the two lists are made on first use (``_OwnList``): a new future sets two
    fields. The stdlib's methods all take ``_condition`` (an RLock, so ``wait`` and
    ``as_completed``, which take every future's, may take the shared one repeatedly) and stay
    correct; only ``result`` and ``exception`` are redone, because a waiter can wake for a
    sibling's result and must wait again rather than time out.
    """

    _state = _PENDING
    _result: Any = None
    _exception: BaseException | None = None
    _waiters = _OwnList()
    _done_callbacks = _OwnList()

    def __init__(self, batch: Batch) -> None:  # pylint: disable=super-init-not-called
        self._condition = batch.condition
        self._batch: Batch | None = batch

    def result(self, timeout: float | None = None) -> Any:
        if self._state == _FINISHED and self._exception is None:  # the usual case: answered already
            return self._result
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return super().exception(0)

    def _wait(self, timeout: float | None) -> None:
        if self.done():  # answered, or cancelled: nothing to send
            return
        b = self._batch
        if b is not None and not b.sent:
            b.accumulator.send_now(b)
        self._batch = None
        if self.done():
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while not self.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._condition.wait(remaining)


def settle(futures: Sequence[PendingSend | None], results: Sequence[Any], error: BaseException | None) -> None:
    """Finish the futures of sent messages (None: a oneway message): ``results[i]`` each (an
    exception instance fails that one), or ``error`` for all (``results`` unused then). Does
    what ``Future.set_result`` and ``set_exception`` do (state, waiters, notify, callbacks), but futures handed over
    together share a Condition: it is taken once and notified once for them (futures of
    several hand-overs are grouped by Condition); calling ``set_result`` per future cost a
    tenth of an async send. Futures are RUNNING here (``hand_over``); one already failed
    (by ``_fail``) is left as it is. Waiters and callbacks are looked up in each future's
    ``__dict__`` (see ``_OwnList``): a future nobody waits on costs three stores."""
    finished = settle_shared(futures, results, error)
    if finished is not None:
        _run_callbacks(finished)
        return
    by_condition: dict[int, list[tuple[int, PendingSend]]] = {}  # several hand-overs: one lock each
    for i, f in enumerate(futures):
        if f is not None:
            by_condition.setdefault(id(f._condition), []).append((i, f))
    for group in by_condition.values():
        _run_callbacks(_settle_locked(group[0][1]._condition, group, results, error))


def _settle_shared(
    futures: Sequence[PendingSend | None], results: Sequence[Any], error: BaseException | None
) -> list[PendingSend] | None:
    """``settle`` when every future shares one Condition (the usual case): the futures whose
    callbacks are still to run; None, having done nothing, when they do not. Compiled in
    ``_accumulator.settle_shared`` (the reader thread's loop over an answered batch)."""
    cond = None
    live: list[tuple[int, PendingSend]] = []
    for i, f in enumerate(futures):
        if f is not None:
            if cond is None:
                cond = f._condition
            elif f._condition is not cond:
                return None
            live.append((i, f))
    return [] if cond is None else _settle_locked(cond, live, results, error)


def _settle_locked(
    cond: threading.Condition, live: list[tuple[int, PendingSend]], results: Sequence[Any], error: BaseException | None
) -> list[PendingSend]:
    """Finish ``live`` (index, future) under ``cond``; returns those with callbacks to run."""
    finished = []
    with cond:
        for i, f in live:
            if f._state != _RUNNING:
                continue
            failed = error if error is not None else results[i] if isinstance(results[i], BaseException) else None
            if failed is not None:
                f._exception = failed
            else:
                f._result = results[i]
            f._state = _FINISHED
            own = f.__dict__
            waiters = own.get("_waiters")
            if waiters:  # concurrent.futures.wait / as_completed
                for w in waiters:
                    if failed is not None:
                        w.add_exception(f)
                    else:
                        w.add_result(f)
            if own.get("_done_callbacks"):
                finished.append(f)
        cond.notify_all()
    return finished


settle_shared = _speedups.pick("_accumulator", "settle_shared", _settle_shared)


def _run_callbacks(finished: list[PendingSend]) -> None:
    for f in finished:
        for callback in f._done_callbacks:  # as Future._invoke_callbacks: a failing callback is logged
            try:
                callback(f)
            except Exception:
                log.exception("exception calling callback for %r", f)


def hand_over(batches: list[Batch]) -> list[Batch]:
    """The stdlib protocol at the hand-over: each future goes RUNNING (``cancel()`` returns False
    from now on); a cancelled one is marked notified and its message leaves its batch unsent.
    Returns the batches left with messages. The batches of one hand-over share a Condition:
    taken once here. A PENDING future goes RUNNING by a store, as
    ``set_running_or_notify_cancel`` does it (no waiter hears of RUNNING); only a cancelled one
    goes through that method (its waiters learn of the cancel)."""
    cancelled = False
    with batches[0].condition:
        for b in batches:
            b.sent = True
            for f in b.futures:
                if f is not None:
                    if f._state == _PENDING:
                        f._state = _RUNNING
                    elif not f.set_running_or_notify_cancel():
                        cancelled = True
    if not cancelled:
        return batches
    for b in batches:
        kept = [(m, f) for m, f in zip(b.msgs, b.futures) if f is None or not f.cancelled()]
        b.msgs = [m for m, _ in kept]
        b.futures = [f for _, f in kept]
    return [b for b in batches if b.msgs]


class ProduceAccumulator:
    """Per-(topic, queue) batches; ``flush(groups)`` sends them (queue -1: the broker picks)."""

    def __init__(self, flush: Flush, batch_max_delay: float, batch_max_bytes: int) -> None:
        self._flush = flush
        self.delay = batch_max_delay
        self.max_bytes = batch_max_bytes
        self._lock = threading.RLock()  # taken bare by ``add`` (a Condition's __enter__ is Python code)
        self._cond = threading.Condition(self._lock)  # the flusher's wake-up
        self._batches: dict[tuple[str, int], Batch] = {}
        # The futures of the batches handed over together share one Condition: one to make and
        # one to notify per hand-over, not per (topic, queue) (many topics: ~2 messages each).
        self._condition = threading.Condition()
        self._due = 0.0  # when what waits must go: the oldest waiting message's deadline
        self._closed = False
        self._thread: threading.Thread | None = None

    @overload
    def add(self, msg: Message, queue_id: int, oneway: Literal[False] = False) -> PendingSend: ...

    @overload
    def add(self, msg: Message, queue_id: int, oneway: Literal[True]) -> None: ...

    def add(self, msg: Message, queue_id: int, oneway: bool = False) -> PendingSend | None:
        """Queue a checked message (sending its group at once when full); its future (None: oneway)."""
        key = (msg.topic, queue_id)
        with self._lock:
            if self._closed:
                raise ShmqError("the producer was shut down")
            b = self._batches.get(key)
            if b is None:
                b = self._new_batch(key)
            future = None if oneway else PendingSend(b)
            b.msgs.append(msg)
            b.futures.append(future)
            b.size += len(msg.body) + RECORD_OVERHEAD
            if b.size >= self.max_bytes or len(b.msgs) >= MAX_BATCH_MESSAGES:
                self._send_full(b)
        return future

    def _new_batch(self, key: tuple[str, int]) -> Batch:
        """The batch of ``key``, new (under the lock): the first one waiting starts the delay."""
        if not self._batches:
            self._due = time.monotonic() + self.delay
            self._start_flusher()
            self._cond.notify()
        b = self._batches[key] = _make_batch(key, self, self._condition)
        return b

    def _send_full(self, b: Batch) -> None:
        """``b`` reached its size (under the lock): it goes now, alone."""
        del self._batches[b.key]
        self._send([b])

    def send_now(self, b: Batch) -> None:
        """Someone waits on a message of batch ``b``: send it, and everything else waiting with it."""
        with self._lock:
            if not b.sent:
                self._send_all()

    def flush_all(self) -> None:
        """Send every waiting batch now (before a sync send or a batch, so none overtakes them).

        Takes the lock even when nothing waits: the flusher thread may be writing a batch it took."""
        with self._cond:
            self._send_all()

    def close(self) -> None:
        """Send what waits and stop the flusher thread."""
        self.flush_all()
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _send_all(self) -> None:
        batches, self._batches = self._batches, {}
        if batches:
            self._condition = threading.Condition()  # for the batches of the next hand-over
            self._send(list(batches.values()))

    def _send(self, batches: list[Batch]) -> None:
        batches = hand_over(batches)
        if not batches:
            return
        try:
            self._flush([(b.key[0], b.key[1], b.msgs, b.futures) for b in batches])
        except Exception as e:  # the flush reports to futures itself; this is the last resort
            log.exception("sending %d message(s) failed", sum(len(b.msgs) for b in batches))
            for b in batches:
                for f in b.futures:
                    if f is not None and not f.done():
                        f.set_exception(e)
        for b in batches:  # the futures keep the batch: let the messages go
            b.msgs = []
            b.futures = []

    def _start_flusher(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shmq-produce-accumulator", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._batches:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                if self._due <= now:
                    self._send_all()
                else:
                    self._cond.wait(self._due - now)


def _plain(msg: object, limit: int) -> bool:
    """Whether ``msg`` is a Message that ``MessageEncoder.check`` would pass with nothing to
    check but its topic and body, and that goes in a batch: no tags, keys, properties or
    delivery rules, a bytes body of at most ``limit`` bytes, a valid topic."""
    if type(msg) is not Message:
        return False
    m = msg
    if m.tags or m.keys or m.properties or m.delay_level or m.deliver_at is not None or m.delay is not None:
        return False
    if type(m.body) is not bytes or len(m.body) > limit or type(m.topic) is not str:
        return False
    try:
        check_topic(m.topic)
    except ShmqError:
        return False
    return True


def accumulate(acc: ProduceAccumulator, msg: Message, limit: int) -> PendingSend | None:
    """``send_async``'s common case in one call: a plain message (``_plain``) queued for the
    broker to pick its queue, and its future; None for any other message, which then takes
    the general path (its checks raise what they raise). The general path costs a dozen
    Python calls per message; this is one (compiled: shmq/_speedups/_accumulator.pyx)."""
    if not _plain(msg, limit):
        return None
    return acc.add(msg, -1)


def accumulate_oneway(acc: ProduceAccumulator, msg: Message, limit: int) -> bool:
    """``send_oneway``'s common case, as ``accumulate``: True if ``msg`` was queued."""
    if not _plain(msg, limit):
        return False
    acc.add(msg, -1, oneway=True)
    return True


def queued_or_failed(acc: ProduceAccumulator, msg: Message, limit: int) -> Future[SendResult] | None:
    """``accumulate`` as ``send_async`` needs it: a shut-down producer's error comes in a failed
    future, not raised."""
    try:
        return accumulate(acc, msg, limit)
    except ShmqError as e:
        failed: Future[SendResult] = Future()
        failed.set_exception(e)
        return failed


accumulate = _speedups.pick("_accumulator", "accumulate", accumulate)
accumulate_oneway = _speedups.pick("_accumulator", "accumulate_oneway", accumulate_oneway)
