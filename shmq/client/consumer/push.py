"""PushConsumer: the broker's messages delivered to a listener (RocketMQ's DefaultMQPushConsumer).

One puller thread serves every assigned queue: round robin over the queues with data (up to
``pull_batch_size`` each per pass, read straight from the store files), a PULL_WAIT per queue
when all are idle, woken by any WAKE. The same thread rebalances: every 20 ms it reads the
group's membership version and the topics' queue counts from the state segment, and when
they change every member computes its own share from the sorted queue and member lists.

Doing better than RocketMQ where its users complain:
- duplicates after rebalances (complaint 2): a member giving a queue away stops starting
  listener calls on it, waits for the running ones and commits synchronously before the new
  owner, which waits a short handoff grace while the previous owner is alive, reads the
  offset. After a broker restart members commit their in-memory offsets again, so the
  offsets the broker lost with its last 5 s are not replayed.
- ConsumeFrom surprises (complaint 4): LAST_OFFSET is the queue's end when the group first
  sees the queue, even for a group never seen before (RocketMQ replays history when the
  queue's first file still exists); the chosen start is committed at once, so later members
  of the group continue from it.
- rebalance pauses (complaint 5): members see a join, leave or death within ~50 ms (not 20 s),
  and orderly queues need no broker lock.
- memory with big backlogs across many queues (complaint 11): besides the per-queue
  thresholds, a whole-consumer cap (``pull_threshold_for_consumer`` messages and
  ``pull_threshold_size_for_consumer`` MiB) bounds what is cached however many queues it owns.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shmq.client.connection import Session
from shmq.client.consumer.consume_service import (
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    DelayScheduler,
)
from shmq.client.consumer.member import REBALANCE_POLL_S, MQConsumerInner
from shmq.client.consumer.offset_store import LocalFileOffsetStore
from shmq.client.consumer.offset_store import instance_name as local_instance_name
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.pull_turns import PullTurns
from shmq.client.consumer.queue_offsets import QueueOffsets
from shmq.client.consumer.rebalance import STRATEGIES, AllocateStrategy
from shmq.client.consumer.rebalance_impl import RebalanceImpl
from shmq.client.consumer.send_back import SendBackClient
from shmq.client.hooks import ConsumeMessageHook, HookedListener, check_hook
from shmq.client.producer.producer import inner_producer
from shmq.errors import ArgumentTypeError, BadArgumentError, ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression, as_expression
from shmq.model.consumer_types import ConsumeFrom, MessageListener, MessageModel, PullStatus
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import client_repr
from shmq.namesrv.routes import namesrv_or_env
from shmq.otel.gate import process_hook as otel_process_hook
from shmq.trace.dispatcher import AsyncTraceDispatcher, trace_topic
from shmq.trace.hooks import ConsumeTraceHook

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DROP_WAIT_S = 1.0  # how long a member giving a queue away waits for its running listener calls


class PushConsumer(MQConsumerInner):
    def __new__(cls, group: str, broker: str | None = None, *, namesrv: str | None = None, **kwargs: Any) -> Any:
        """With ``namesrv`` (or ``$SHMQ_NAMESRV`` and no ``broker``): a consumer over every broker
        of that name server's cluster (``ClusterPushConsumer``, the same methods)."""
        ns = namesrv_or_env(namesrv, broker)
        if ns is None:
            return super().__new__(cls)
        from shmq.client.consumer.cluster_push import ClusterPushConsumer

        return ClusterPushConsumer(group, ns, **kwargs)

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        namesrv: str | None = None,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_strategy: str | AllocateStrategy[MessageQueue, int] = "AVG",
        consume_thread_max: int = 4,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 256,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_consumer: int = 10_000,
        pull_threshold_size_for_consumer: int = 256,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = 16,
        suspend_current_queue_time: float = 1.0,
        persist_consumer_offset_interval: float = 0.1,
        instance_name: str | None = None,
        offset_store_dir: str | None = None,
        start_timeout: float = 3.0,
        replica: str | None = None,
        trace: bool | str = False,
        suspend_current_queue_time_millis: int | None = None,
    ) -> None:
        """Sizes ``pull_threshold_size_*`` are in MiB, as RocketMQ's. ``pull_batch_size`` is 256, not
        RocketMQ's 32: a pull here is a local file read whose fixed cost (~0.3 ms of numpy calls)
        is worth spreading (measured: 2.2x the push throughput of 32). ``consume_thread_max`` is 4, not
        RocketMQ's 20: Python threads share the GIL, and 20 of them thrash on CPU-bound listeners
        (measured: half the throughput of 4); raise it for listeners that wait on I/O.
        ``consume_timestamp`` (ms) is for ConsumeFrom.TIMESTAMP (default: 30 minutes ago). BROADCASTING offsets live in
        ``offset_store_dir/instance_name/<group>.json`` (default dir ``~/.shmq/offsets/<broker>``).
        Without ``instance_name`` (or with RocketMQ's "DEFAULT") the name is made unique per
        consumer, ``<pid>-<n>`` (RocketMQ uses the pid), so members on one host never share a
        file; such a file dies with the consumer (deleted at ``shutdown``): a broadcasting member
        that must resume where it stopped after a restart needs a stable ``instance_name``.
        ``replica``: the name of a replica of ``broker`` on this host to consume from while
        ``broker`` is down (RocketMQ's slave read), resuming from the offsets committed there (the
        master's, mirrored) and going back to ``broker`` within a second of its return.
        ``trace``: True writes SubBefore/SubAfter trace records of every listener call to
        RMQ_SYS_TRACE_TOPIC, a topic name to that topic (asynchronously, see shmq.trace.dispatcher).
        Durations are seconds: ``suspend_current_queue_time`` is how long an orderly queue waits
        after SUSPEND_CURRENT_QUEUE_A_MOMENT (``suspend_current_queue_time_millis``: deprecated).
        ``persist_consumer_offset_interval``: how often the queues whose consumed offset moved are
        committed (0.1 s, not RocketMQ's 5 s: a commit is one ring frame, ~10 us of CPU on each
        side, and what a member consumed after its last commit is delivered again if it dies).
        ``namesrv``: consume from every broker of that name server's cluster instead of ``broker``
        (see ``__new__``)."""
        if suspend_current_queue_time_millis is not None:
            warnings.warn(
                "suspend_current_queue_time_millis is deprecated: use suspend_current_queue_time (seconds)",
                DeprecationWarning,
                stacklevel=2,
            )
            suspend_current_queue_time = suspend_current_queue_time_millis / 1000
        if isinstance(allocate_strategy, str):
            if allocate_strategy not in STRATEGIES:
                raise BadArgumentError(f"allocate_strategy must be one of {sorted(STRATEGIES)} or a callable")
            allocate_strategy = STRATEGIES[allocate_strategy]
        for name, value in (
            ("consume_thread_max", consume_thread_max),
            ("pull_batch_size", pull_batch_size),
            ("consume_message_batch_max_size", consume_message_batch_max_size),
        ):
            if value < 1:
                raise BadArgumentError(f"{name} must be at least 1, got {value}")
        self.model = MessageModel(model)
        self.consume_from = ConsumeFrom(consume_from)
        self.consume_timestamp = consume_timestamp
        self.allocate = allocate_strategy
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue * MIB
        self.pull_threshold_for_consumer = pull_threshold_for_consumer
        self.pull_threshold_size_for_consumer = pull_threshold_size_for_consumer * MIB
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time = suspend_current_queue_time
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.instance_name, self._anonymous = local_instance_name(instance_name)
        self.offset_store_dir = offset_store_dir
        super().__init__(group, broker, start_timeout, log, replica)
        self._listener: MessageListener | None = None
        self._orderly = False
        self._throttled = False
        self._suspended = False  # suspend(): the puller pulls nothing until resume()
        # the puller threads' turns, and what a turn hands over: timers, whether the last park timed out
        self._turns: PullTurns[tuple[ProcessQueue, list[MessageExt]]] = PullTurns()
        self._concurrent: ConsumeMessageConcurrentlyService | None = None
        self._timed_out = True  # the last park ended by its timeout (not a wake-up): see _pull_pass
        self._next_rebalance = self._next_commit = 0.0
        self._consume_hooks: list[ConsumeMessageHook] = []
        self.tracer: AsyncTraceDispatcher | None = None
        topic = trace_topic(trace)
        if topic is not None:
            self.tracer = AsyncTraceDispatcher(inner_producer(group, broker), topic)
            self.register_consume_hook(ConsumeTraceHook(self.tracer))
        # OpenTelemetry (shmq.otel): a process span around each listener call, when instrumented
        otel = otel_process_hook(group, self.model)
        if otel is not None:
            self.register_consume_hook(otel)
        # clustering: messages not consumed go back to the broker (retry topic, DLQ)
        self._send_back = (
            SendBackClient(self._conn, group, max_reconsume_times) if self.model is MessageModel.CLUSTERING else None
        )

    # ------------------------------------------------------------------ configuration

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """Consume ``topic``'s messages that pass ``expression`` (tags "A || B", "*", an SQL92 filter
        ``shmq.sql("a > 3")``, another Expression, or a predicate ``fn(msg) -> bool`` evaluated
        here: see shmq.filter.function).

        A malformed expression raises ``BadExpressionError`` here (an SQL92 string without
        ``shmq.sql`` too; a broker with enablePropertyFilter=false refuses SQL92 at start). A topic whose perm
        lacks the read bit (4) is skipped, with a warning in the log, until its perm allows reading."""
        self._subscriptions[topic] = as_expression(expression)
        if self._running:
            self._session = None  # join again with the new subscriptions, then rebalance

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self._running:
            self._session = None

    def register_listener(self, listener: MessageListener, orderly: bool = False) -> None:
        """``listener(msgs, ctx) -> ConsumeResult``; ``orderly``: one queue at a time, in queue order."""
        if not callable(listener):
            raise ArgumentTypeError("the listener must be callable: fn(msgs, ctx) -> ConsumeResult")
        self._listener = listener
        self._orderly = orderly

    def register_consume_hook(self, hook: ConsumeMessageHook) -> None:
        """Call ``hook.consume_message_before(ctx)`` / ``consume_message_after(ctx)`` around every
        listener call (see shmq.client.hooks); register before ``start()``. A hook that raises is
        logged and never changes the consume."""
        if self._running:
            raise ShmqError("register consume hooks before start()")
        check_hook(hook, "consume_message_before", "consume_message_after")
        self._consume_hooks.append(hook)

    # ------------------------------------------------------------------ lifecycle

    def suspend(self) -> None:
        """Stop fetching (RocketMQ's ``suspend``): the messages already pulled still reach the
        listener and are committed, then nothing new does. The member keeps its queues and stays
        in its group (no rebalance); ``resume`` goes on from where the pulls stopped."""
        self._suspended = True

    def resume(self) -> None:
        """Fetch again after ``suspend``, from the next offset of each queue: nothing lost, nothing twice."""
        self._suspended = False
        self._wakeup.set()

    @property
    def suspended(self) -> bool:
        return self._suspended

    def start(self) -> PushConsumer:
        """Attach, join the group and start pulling; ``BrokerNotFoundError`` within ``start_timeout``."""
        if self._listener is None:
            raise ShmqError("register a listener before start()")
        if not self._subscriptions:
            raise ShmqError("subscribe to a topic before start()")
        if self._running:
            return self
        if self._send_back is not None:  # every clustering member consumes its group's redeliveries
            self._subscriptions.setdefault(self._send_back.retry_topic, as_expression("*"))
        local = None
        if self.model is MessageModel.BROADCASTING:
            local = LocalFileOffsetStore(self.group, self.instance_name, self.broker_name, self.offset_store_dir)
            local.load()
        self._offsets = QueueOffsets(
            self._conn, self._wrapper, self.group, self.consume_from, self.consume_timestamp, self.start_timeout, local
        )
        self._rebalance = RebalanceImpl(self.group, self.broker_name, self.model, self.allocate, log, self._scope)
        self._start_session()
        if self.tracer is not None:
            try:
                self.tracer.start()
            except BaseException:
                self._conn.shutdown()
                raise
        self._executor = ThreadPoolExecutor(self.consume_thread_max, thread_name_prefix=f"shmq-consume-{self.group}")
        self._scheduler = DelayScheduler(f"shmq-redeliver-{self.group}")
        service = ConsumeMessageOrderlyService if self._orderly else ConsumeMessageConcurrentlyService
        listener = (
            HookedListener(self._listener, self.group, self._consume_hooks) if self._consume_hooks else self._listener
        )
        self._service = service(
            listener,
            self._executor,
            self._scheduler,
            self.consume_message_batch_max_size,
            self.max_reconsume_times,
            self.suspend_current_queue_time,
            self._on_consumed,
            self._send_back,
        )
        self._concurrent = self._service if isinstance(self._service, ConsumeMessageConcurrentlyService) else None
        if self._concurrent is not None:
            self._concurrent.slots = threading.Semaphore(self.consume_thread_max)
        self._start_puller(f"shmq-pull-{self.group}", threads=1 if self._concurrent is None else 2)
        return self

    def _settle(self) -> None:
        pqs = list(self._pqs.values())
        for pq in pqs:
            pq.drop()
        self._await_listeners(pqs, DROP_WAIT_S)

    def _commit_at_shutdown(self) -> None:
        if self._offsets.local is not None or self._conn.reachable():  # broadcasting: a local file
            self._offsets.commit(list(self._pqs.values()), sync=True, force=True)
        if self._offsets.local is not None and self._anonymous:
            self._offsets.local.delete()  # its name dies with this consumer: nobody could read it again

    def _release(self) -> None:
        self._scheduler.shutdown()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _closed(self) -> None:
        if self._send_back is not None:
            self._send_back.fail_all()  # a send-back still waiting will get no answer now
        if self.tracer is not None:
            self.tracer.shutdown()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return client_repr("PushConsumer", self.group, self.broker_name, self._running, self._subscriptions)

    # ------------------------------------------------------------------ connection events

    def _on_response(self, kind: int, view: memoryview) -> None:
        if self._resets.on_response(kind, view):
            return
        if self._send_back is None or not self._send_back.on_response(kind, view):
            self._wrapper.on_response(kind, view)

    def _on_lost(self, session: Session, why: str) -> None:
        if self._send_back is not None:
            self._send_back.fail_all()
        super()._on_lost(session, why)

    def _on_consumed(self, _pq: ProcessQueue) -> None:
        if self._throttled:
            self._wakeup.set()

    def _new_wakeup(self) -> threading.Event:
        return _Wakeup(self._conn.nudge)

    # ------------------------------------------------------------------ the puller thread

    def _run(self) -> None:
        """A puller thread; concurrently two take turns (``PullTurns``), orderly one pulls alone."""
        concurrent = self._concurrent
        if concurrent is None:
            self._turns.run(lambda: self._running, self._pull_turn, lambda _: None)
        else:
            self._turns.run(lambda: self._running, self._pull_turn, lambda mine: concurrent.consume_here(*mine))

    def _pullers_to_join(self) -> list[threading.Thread]:
        return self._turns.joinable(self._threads)

    def _pull_turn(self) -> tuple[ProcessQueue, list[MessageExt]] | None:
        """Passes and parks until ``shutdown`` (None), or a pulled list this thread is to hand
        to the listener itself (``_run``)."""
        while self._running:
            session = self._wait_for_session()
            if session is None:
                continue
            mine: tuple[ProcessQueue, list[MessageExt]] | None = None
            try:
                if self._turns.park_first:  # the turn handed over by a thread that went to the listener
                    self._turns.park_first = False
                    self._timed_out = not self._conn.park_reading(session, self._wakeup.is_set, REBALANCE_POLL_S)
                self._wakeup.clear()
                now = time.monotonic()
                self._resets.apply(self._pqs, self._restart)
                full = self._timed_out
                if now >= self._next_rebalance:
                    self._next_rebalance = now + REBALANCE_POLL_S
                    self._rebalance_if_changed(session.client_id)
                    full = True
                found: list[tuple[ProcessQueue, list[MessageExt]]] = []
                idle: list[ProcessQueue] = []
                try:
                    progressed = self._pull_pass(now, found, idle, skip_waiting=not full)
                    self._timed_out = False
                    if now >= self._next_commit:
                        self._next_commit = now + self.persist_consumer_offset_interval
                        self._offsets.commit(list(self._pqs.values()), sync=False)
                    park = not progressed and self._running and not self._wrapper.long_poll(idle, self._wakeup)
                    if park and self._concurrent is not None:
                        mine = self._turns.keep(found, self._concurrent.reserve_here)
                finally:
                    for pq, msgs in found:  # last: the listener's worker needs the GIL this thread holds
                        self._service.submit(pq, msgs)
                if mine is not None:
                    return mine
                if park:  # reading the ring itself: a WAKE wakes this thread, not the reader thread
                    self._timed_out = not self._conn.park_reading(session, self._wakeup.is_set, REBALANCE_POLL_S)
                else:
                    self._conn.stand_down()  # pulling on at once: the reader thread reads meanwhile
            except Exception as e:  # noqa: BLE001 - the puller thread logs it and goes on
                if mine is not None and self._concurrent is not None:  # not consumed here after all: the pool takes it
                    self._turns.give_back()
                    self._concurrent.unreserve()
                    self._service.submit(*mine)
                self._conn.stand_down()
                self._pass_failed(e, session)
        self._conn.stand_down()
        return None

    def _pull_pass(
        self,
        now: float,
        found: list[tuple[ProcessQueue, list[MessageExt]]],
        idle: list[ProcessQueue],
        skip_waiting: bool = False,
    ) -> bool:
        """Pull each ready queue once; whether a queue has more to pull at once. Appends the
        messages pulled (for the consume service) to ``found`` and the queues found drained to
        ``idle``: a pull that reached the max offset it read needs no second pass to learn so.

        ``skip_waiting``: leave out the queues whose PULL_WAIT is still unanswered. The broker
        answers a wait as soon as its queue grows, so such a queue has nothing new (or its WAKE
        is on the way and brings another pass): after a WAKE only the woken queues are pulled,
        not every assigned one (~3-10 us of GIL each, which the listener's worker waits for).
        Every pass after a park that timed out, and one at least every ``REBALANCE_POLL_S``,
        pulls them all, as a wait refused by the broker (SYSTEM_BUSY) is never answered."""
        if self._suspended:
            return False
        progressed = False
        total = sum(pq.count for pq in self._pqs.values())
        total_size = sum(pq.msg_size for pq in self._pqs.values())
        self._throttled = False
        for pq in list(self._pqs.values()):
            expression = self._subscriptions.get(pq.mq.topic)
            if expression is None or pq.dropped or now < pq.ready_at or (skip_waiting and pq.wait_req is not None):
                continue
            if pq.next_offset < 0:
                self._offsets.init(pq)
            if self._flow_controlled(pq, total, total_size):
                self._throttled = True
                continue
            result = self._wrapper.pull(pq.mq, expression, pq.next_offset, self.pull_batch_size, columns=False)
            status = result.status
            if status is PullStatus.FOUND:
                msgs = result.messages
                if self._send_back is not None and pq.mq.topic == self._send_back.retry_topic:
                    self._send_back.show_original_topic(msgs)
                pq.put(msgs, result.next_begin_offset)
                found.append((pq, msgs))
                total += len(msgs)
                if result.next_begin_offset < result.max_offset:
                    progressed = True
                else:
                    idle.append(pq)
            elif status is PullStatus.NO_MATCHED_MSG:
                pq.put([], result.next_begin_offset)
                if result.next_begin_offset < result.max_offset:
                    progressed = True
                else:
                    idle.append(pq)
            elif status is PullStatus.NO_NEW_MSG:
                idle.append(pq)
            else:
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
        return progressed

    def _flow_controlled(self, pq: ProcessQueue, total: int, total_size: int) -> bool:
        if pq.count >= self.pull_threshold_for_queue or pq.msg_size >= self.pull_threshold_size_for_queue:
            return True
        if total >= self.pull_threshold_for_consumer or total_size >= self.pull_threshold_size_for_consumer:
            return True
        return not self._orderly and pq.span() > self.consume_concurrently_max_span

    # ------------------------------------------------------------------ rebalance

    def _drop(self, pq: ProcessQueue) -> None:
        """Give a queue away: no new listener call, wait for running ones, commit where it stands."""
        pq.drop()
        if pq.wait_req is not None:
            self._wrapper.cancel(pq.wait_req)
        if pq.next_offset < 0:
            return
        self._conn.stand_down()  # a listener may wait for a send-back answer: the reader thread reads it
        self._await_listeners([pq], DROP_WAIT_S)
        self._offsets.commit([pq], sync=True)

    def _restart(self, pq: ProcessQueue, offset: int) -> None:
        """An operator reset ``pq``'s queue: the listener calls running now may finish (at least
        once), but nothing else it cached is delivered; a fresh process queue pulls from ``offset``
        (the broker committed it already)."""
        pq.drop()
        if pq.wait_req is not None:
            self._wrapper.cancel(pq.wait_req)
        fresh = self._pqs[pq.mq] = ProcessQueue(pq.mq, offset)
        fresh.committed = offset

    @staticmethod
    def _await_listeners(pqs: list[ProcessQueue], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(pq.inflight for pq in pqs) and time.monotonic() < deadline:
            time.sleep(0.001)

    # ------------------------------------------------------------------ introspection

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member consumes now (after the last rebalance)."""
        return sorted(self._pqs)


class _Wakeup(threading.Event):
    """The puller's wake-up. The puller sleeps on the client bell (``park_reading``) rather than
    on this event, so ``set`` also rings the bell when it sleeps there (``nudge``)."""

    def __init__(self, nudge: Callable[[], None]) -> None:
        super().__init__()
        self._nudge = nudge

    def set(self) -> None:
        super().set()
        self._nudge()
