"""LitePullConsumer: subscribe, then ``poll()`` (RocketMQ's DefaultLitePullConsumer, Kafka's poll loop).

The consumer's "listener" is the caller: a background thread does what PushConsumer's puller
does (join the group, rebalance within it, read the assigned queues into per-queue buffers,
long-poll idle queues, commit) and ``poll`` hands out what the buffers hold, in queue order.
The committable offset of a queue is the first message ``poll`` has not returned yet, so auto
commit (and ``commit()``) never commits past what the caller received. Unlike PushConsumer there
is no retry topic: a message the caller fails on is the caller's to handle (RocketMQ's lite pull
has none either).

One lock serialises the puller's pass, ``poll``'s take, ``seek`` and ``commit``: the store
reader is not thread-safe, and a client id may run one control request at a time.

The controls are DefaultLitePullConsumer's: ``assign`` (queues chosen by the caller, no
rebalance; it and ``subscribe`` exclude each other), ``seek*``, ``pause``/``resume``,
``commit_sync``, ``committed``, ``offset_for_timestamp``. One difference: RocketMQ's poll may
still hand out what a paused queue had read ahead; here a paused queue's buffered messages stay
buffered, neither dropped nor returned, until ``resume`` (Kafka's pause), so ``pause`` takes
effect at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from shmq.client.consumer.member import REBALANCE_POLL_S, MQConsumerInner
from shmq.client.consumer.offset_store import LocalFileOffsetStore
from shmq.client.consumer.offset_store import instance_name as local_instance_name
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.queue_check import (
    check_broker,
    check_queue,
    check_seek,
    queue_list,
    queue_name,
    read_queues,
)
from shmq.client.consumer.queue_offsets import QueueOffsets
from shmq.client.consumer.rebalance import STRATEGIES, AllocateStrategy
from shmq.client.consumer.rebalance_impl import RebalanceImpl
from shmq.errors import BadArgumentError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, as_expression
from shmq.model.consumer_types import ConsumeFrom, MessageModel, PullStatus
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import receive_observer as otel_receive_observer

if TYPE_CHECKING:
    from shmq.otel.hooks import ReceiveObserver

log = logging.getLogger(__name__)

SUBSCRIBE, ASSIGN = "subscribe", "assign"  # RocketMQ's SubscriptionType
EXCLUSIVE = "Subscribe and assign are mutually exclusive."


class LitePullConsumer(MQConsumerInner):
    def __new__(cls, group: str, broker: str | None = None, *, namesrv: str | None = None, **kwargs: Any) -> Any:
        """With ``namesrv`` (or ``$SHMQ_NAMESRV`` and no ``broker``): a consumer over every broker
        of that name server's cluster (``ClusterLitePullConsumer``, the same methods)."""
        ns = namesrv_or_env(namesrv, broker)
        if ns is None:
            return super().__new__(cls)
        from shmq.client.consumer.cluster_lite import ClusterLitePullConsumer

        return ClusterLitePullConsumer(group, ns, **kwargs)

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_strategy: str | AllocateStrategy[MessageQueue, int] = "AVG",
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        auto_commit: bool = True,
        auto_commit_interval: float = 0.1,
        start_timeout: float = 3.0,
        model: MessageModel = MessageModel.CLUSTERING,
        instance_name: str | None = None,
        offset_store_dir: str | None = None,
    ) -> None:
        """``pull_batch_size``: the most messages one ``poll`` returns (RocketMQ's 10 is per queue;
        here it bounds the whole poll, as Kafka's max.poll.records). ``pull_threshold_for_queue``:
        messages read ahead and held per queue for the next polls. ``auto_commit``: every
        ``auto_commit_interval`` seconds (0.1 s, not RocketMQ's 5 s: a commit of the queues that
        moved is one ring frame each, and a member that dies leaves at most that much of its
        consumption to be delivered again) and at ``shutdown``, commit the offsets after what
        ``poll`` returned; with False only ``commit()`` does, and a queue rebalanced
        away is not committed (its new owner resumes from the last ``commit()``, as in Kafka).
        ``consume_from`` / ``consume_timestamp``: where a queue the group never committed starts,
        as PushConsumer's. ``namesrv``: consume from every broker of that name server's cluster
        (see ``__new__``). ``model`` BROADCASTING: every member reads every queue, its offsets in
        a local file (``instance_name``, ``offset_store_dir``: as PushConsumer's)."""
        if isinstance(allocate_strategy, str):
            if allocate_strategy not in STRATEGIES:
                raise BadArgumentError(f"allocate_strategy must be one of {sorted(STRATEGIES)} or a callable")
            allocate_strategy = STRATEGIES[allocate_strategy]
        for name, value in (
            ("pull_batch_size", pull_batch_size),
            ("pull_threshold_for_queue", pull_threshold_for_queue),
        ):
            if value < 1:
                raise BadArgumentError(f"{name} must be at least 1, got {value}")
        if auto_commit_interval <= 0:
            raise BadArgumentError(f"auto_commit_interval must be positive, got {auto_commit_interval}")
        super().__init__(group, broker, start_timeout, log)
        self.model = MessageModel(model)
        self.instance_name, self._anonymous = local_instance_name(instance_name)
        broadcasting = self.model is MessageModel.BROADCASTING
        local = (
            LocalFileOffsetStore(group, self.instance_name, self.broker_name, offset_store_dir)
            if broadcasting
            else None
        )
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self._offsets = QueueOffsets(
            self._conn, self._wrapper, group, ConsumeFrom(consume_from), consume_timestamp, start_timeout, local
        )
        self.allocate = allocate_strategy
        self._lock = threading.Lock()
        self._pass_lock = self._lock
        self._ready = threading.Condition(self._lock)  # poll waits here for messages
        self._rotation = itertools.count()  # which queue a poll serves first: fair across queues
        self._arrived: threading.Event | None = None  # also set when messages are ready (a cluster's poll)
        self._subscription_type: str | None = None  # SUBSCRIBE or ASSIGN, once either is used
        self._paused: set[MessageQueue] = set()
        # OpenTelemetry (shmq.otel): receive spans and metrics per poll, when instrumented (a
        # cluster's consumer sets its parts' to None: its own poll is the one observed)
        self.otel: ReceiveObserver | None = otel_receive_observer(group, self.model)

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """Consume ``topic``'s messages that pass ``expression`` (tags, ``shmq.sql(...)``, a
        predicate), before or after ``start()``; the group rebalances on its next check."""
        parsed = as_expression(expression)
        with self._lock:
            self._set_type(SUBSCRIBE)
            self._subscriptions[topic] = parsed
            self._session = None  # join again with the new subscriptions
            for pq in self._pqs.values():
                if pq.mq.topic == topic and pq.next_offset >= 0:
                    self._rewind(pq, pq.commit_offset())  # what was read ahead passed the old expression
        self._wakeup.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (assigned: its queues leave the assignment)."""
        with self._lock:
            self._subscriptions.pop(topic, None)
            self._session = None
        self._wakeup.set()

    def _set_type(self, kind: str) -> None:
        if self._subscription_type not in (None, kind):
            other = "assign()" if kind == SUBSCRIBE else "subscribe()"
            raise BadArgumentError(f"{EXCLUSIVE} This consumer used {other}: use another consumer for {kind}()")
        self._subscription_type = kind

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Consume exactly ``mqs`` (RocketMQ's assign; ``fetch_message_queues`` lists a topic's):
        no rebalance, every message of each. Replaces the previous assignment: a queue left out
        is committed (with ``auto_commit``) and forgotten; [] consumes nothing. A queue starts at
        the group's committed offset, else where ``consume_from`` says. The consumer is still a
        member of its group (offset resets reach it): give subscribing members another group."""
        wanted = set(queue_list(mqs))
        with self._lock:
            if self._running:
                self._check_queues(wanted)
            else:  # the rest is checked at start()
                for mq in wanted:
                    check_broker(self.broker_name, mq)
            self._set_type(ASSIGN)
            for mq in [mq for mq in self._pqs if mq not in wanted]:
                self._drop(self._pqs.pop(mq))
            for mq in sorted(wanted - set(self._pqs)):
                self._pqs[mq] = ProcessQueue(mq, -1)
            topics = sorted({mq.topic for mq in wanted})
            if topics != sorted(self._subscriptions):
                self._subscriptions = {t: as_expression("*") for t in topics}
                self._session = None  # join again with these topics
        self._wakeup.set()

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every read queue of ``topic`` on the broker, sorted (after ``start()``)."""
        with self._lock:
            return read_queues(self._wrapper.views()[0], self.broker_name, topic)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LitePullConsumer:
        """Attach and start the puller; ``BrokerNotFoundError`` within ``start_timeout``."""
        if self._running:
            return self
        if self._offsets.local is not None:
            self._offsets.local.load()
        self._rebalance = RebalanceImpl(self.group, self.broker_name, self.model, self.allocate, log, self._scope)
        self._start_session()
        try:
            with self._lock:
                self._check_queues(set(self._pqs))  # assigned before start
        except BaseException:
            self._conn.shutdown()
            raise
        self._start_puller(f"shmq-litepull-{self.group}")
        return self

    def notify_arrivals(self, event: threading.Event) -> None:
        """Set ``event`` too whenever messages are ready to poll (one poll over several consumers)."""
        self._arrived = event

    def _stopping(self) -> None:
        with self._ready:
            self._ready.notify_all()

    def _commit_at_shutdown(self) -> None:
        """With ``auto_commit``: what ``poll`` returned."""
        local = self._offsets.local
        if self.auto_commit and (local is not None or self._conn.reachable()):
            self._offsets.commit(list(self._pqs.values()), sync=True)
        if local is not None and self._anonymous:
            local.delete()  # its name dies with this consumer: nobody could read it again

    def __enter__(self) -> LitePullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("LitePullConsumer", self.group, self.broker_name, self._running, self._subscriptions)

    # ------------------------------------------------------------------ the caller's side

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Up to ``pull_batch_size`` messages as soon as any are there, [] after ``timeout`` seconds.

        Each queue's messages come in queue order; across polls every message comes once (until
        a ``seek``, or a rebalance hands a queue whose offsets were not committed to another member)."""
        if self.otel is not None:
            return self.otel.receive(self._poll, timeout)
        return self._poll(timeout)

    def _poll(self, timeout: float) -> list[MessageExt]:
        if not self._running:
            raise ShmqError("start() the consumer before poll()")
        deadline = time.monotonic() + timeout
        with self._ready:
            while True:
                msgs = self._take()
                if msgs or not self._running:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ready.wait(remaining)
        if msgs:
            self._wakeup.set()  # room in the buffers: read ahead again
        return msgs

    def commit_sync(self) -> None:
        """Commit the offsets after what ``poll`` returned on every assigned queue, now: when it
        returns the broker (broadcasting: the local file) has them (RocketMQ's commitSync)."""
        with self._lock:
            self._offsets.commit(list(self._pqs.values()), sync=True, force=True)

    def commit(self) -> None:
        """``commit_sync`` (the earlier name)."""
        self.commit_sync()

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` on the broker (broadcasting: this member's
        local one), -1 if none; any queue of the broker, assigned here or not."""
        with self._lock:
            check_queue(self._wrapper.views()[0], self.broker_name, mq)
            return self._offsets.read(mq)

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` whose message was stored at or after ``timestamp_ms`` (ms
        since the epoch); the queue's max offset if every message is older (RocketMQ's offsetForTimestamp)."""
        with self._lock:
            check_queue(self._wrapper.views()[0], self.broker_name, mq)
            return self._wrapper.offset_for_timestamp(mq, int(timestamp_ms))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """The next polls of ``mq`` (an assigned queue) start at ``offset``, which the queue holds
        or its end; what was read ahead of it is forgotten; committed with the next commit."""
        with self._lock:
            pq = self._owned(mq)
            lo, hi = self._wrapper.views()[0].queue_offsets(mq.topic, mq.queue_id)
            check_seek(mq, offset, lo, hi)
            self._rewind(pq, offset)
            pq.ready_at = 0.0
        self._wakeup.set()

    def seek_to_begin(self, mq: MessageQueue) -> None:
        """``seek`` to the first offset ``mq`` still holds."""
        self.seek(mq, self._bounds(mq)[0])

    def seek_to_end(self, mq: MessageQueue) -> None:
        """``seek`` past the last message of ``mq``: only messages sent from now on."""
        self.seek(mq, self._bounds(mq)[1])

    def _bounds(self, mq: MessageQueue) -> tuple[int, int]:
        with self._lock:
            check_queue(self._wrapper.views()[0], self.broker_name, mq)
            return self._wrapper.views()[0].queue_offsets(mq.topic, mq.queue_id)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop reading ``mqs`` (assigned queues): ``poll`` returns none of their messages, what
        was read ahead stays buffered (not dropped, not committed past) until ``resume``."""
        wanted = queue_list(mqs)
        with self._lock:
            for mq in wanted:
                self._owned(mq)
            self._paused.update(wanted)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        """Read ``mqs`` again after ``pause``: their buffered messages come first, each once."""
        wanted = queue_list(mqs)
        with self._ready:
            for mq in wanted:
                self._owned(mq)
            self._paused.difference_update(wanted)
            self._ready.notify_all()
        if self._arrived is not None:
            self._arrived.set()
        self._wakeup.set()

    def paused(self) -> set[MessageQueue]:
        """The assigned queues paused now."""
        with self._lock:
            return set(self._paused)

    def _owned(self, mq: MessageQueue) -> ProcessQueue:
        """The process queue of an assigned ``mq``, else ``BadArgumentError`` (under ``_lock``)."""
        pq = self._pqs.get(mq)
        if pq is not None:
            return pq
        if self._running:
            check_queue(self._wrapper.views()[0], self.broker_name, mq)
        hint = "assign() it first" if self._subscription_type == ASSIGN else "it may be rebalancing: see assignment()"
        raise BadArgumentError(f"{queue_name(mq)} is not assigned to this consumer ({hint})")

    def _check_queues(self, mqs: set[MessageQueue]) -> None:
        state = self._wrapper.views()[0]
        for mq in sorted(mqs):
            check_queue(state, self.broker_name, mq)

    def _rewind(self, pq: ProcessQueue, offset: int) -> None:
        """Forget what was read ahead of ``pq`` and read from ``offset`` next."""
        pq.reset(offset)
        if pq.wait_req is not None:
            self._wrapper.cancel(pq.wait_req)
            pq.wait_req = None

    def _restart(self, pq: ProcessQueue, offset: int) -> None:
        """An operator reset ``pq``'s queue: what was read ahead is forgotten, polls resume at
        ``offset``, which the broker has committed already."""
        self._rewind(pq, offset)
        pq.committed = offset
        pq.ready_at = 0.0

    def assignment(self) -> set[MessageQueue]:
        """The queues this member consumes now (after the last rebalance)."""
        with self._lock:
            return set(self._pqs)

    def _take(self) -> list[MessageExt]:
        """Up to ``pull_batch_size`` buffered messages, queue heads first, starting at a rotating queue."""
        pqs = [pq for mq, pq in self._pqs.items() if pq.msgs and mq not in self._paused]
        if not pqs:
            return []
        start = next(self._rotation) % len(pqs)
        out: list[MessageExt] = []
        for pq in pqs[start:] + pqs[:start]:
            out.extend(pq.take(self.pull_batch_size - len(out)))
            if len(out) >= self.pull_batch_size:
                break
        return out

    # ------------------------------------------------------------------ joining again

    def _resets_on_start(self) -> bool:
        return True

    def _recommit(self) -> bool:
        return self.auto_commit and self.model is MessageModel.CLUSTERING

    # ------------------------------------------------------------------ the puller thread

    def _run(self) -> None:
        next_rebalance = next_commit = time.monotonic()
        while self._running:
            session = self._wait_for_session()
            if session is None:
                continue
            try:
                self._wakeup.clear()
                now = time.monotonic()
                with self._lock:
                    self._resets.apply(self._pqs, self._restart)
                    if now >= next_rebalance and self._subscription_type != ASSIGN:
                        next_rebalance = now + REBALANCE_POLL_S
                        self._rebalance_if_changed(session.client_id)
                    progressed, idle = self._pull_pass(now)
                    if self.auto_commit and now >= next_commit:
                        next_commit = now + self.auto_commit_interval
                        self._offsets.commit(list(self._pqs.values()), sync=False)
                    if progressed:
                        self._ready.notify_all()
                        if self._arrived is not None:
                            self._arrived.set()
                    else:  # a queue that grew meanwhile is pulled again at once
                        progressed = self._wrapper.long_poll(idle, self._wakeup)
                if not progressed and self._running:
                    self._wakeup.wait(REBALANCE_POLL_S)
            except Exception as e:  # noqa: BLE001 - the puller thread logs it and goes on
                self._pass_failed(e, session)

    def _pull_pass(self, now: float) -> tuple[bool, list[ProcessQueue]]:
        """Read ahead each queue with room in its buffer once; (whether anything moved, idle queues)."""
        progressed = False
        idle = []
        for pq in list(self._pqs.values()):
            expression = self._subscriptions.get(pq.mq.topic)
            if (
                expression is None
                or now < pq.ready_at
                or pq.count >= self.pull_threshold_for_queue
                or pq.mq in self._paused
            ):
                continue
            if pq.next_offset < 0:
                self._offsets.init(pq)
            room = self.pull_threshold_for_queue - pq.count
            result = self._wrapper.pull(pq.mq, expression, pq.next_offset, min(room, max(self.pull_batch_size, 256)))
            if result.status is PullStatus.FOUND:
                pq.put(result.messages, result.next_begin_offset)
                progressed = True
            elif result.status is PullStatus.NO_NEW_MSG:
                idle.append(pq)
            else:
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning(
                        "offset %d of %s/%d is illegal (queue holds %d..%d); moving to %d",
                        pq.next_offset,
                        pq.mq.topic,
                        pq.mq.queue_id,
                        result.min_offset,
                        result.max_offset,
                        result.next_begin_offset,
                    )
                pq.put([], result.next_begin_offset)
                progressed = True
        return progressed, idle

    # ------------------------------------------------------------------ rebalance

    def _drop(self, pq: ProcessQueue) -> None:
        """Give a queue away: its unpolled messages are forgotten; with auto commit, commit what poll returned."""
        pq.drop()
        self._paused.discard(pq.mq)
        if pq.wait_req is not None:
            self._wrapper.cancel(pq.wait_req)
        if pq.next_offset >= 0 and self.auto_commit:
            self._offsets.commit([pq], sync=True)
