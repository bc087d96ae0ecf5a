"""The broker core: frames in, store calls and answers out, no process around it (the h11 way).

``BrokerCore.handle`` takes the frames a client's request ring held and hands each to the
processor of its kind (send, pull wait, commit offset, heartbeat); answers go to the client's
``Peer.out``. ``end_pass`` runs once per pass before any answer is written to a ring: it makes
topics created in the pass durable, flushes once for the SYNC_FLUSH sends of the pass (group
commit), publishes the queues' new max offsets and wakes long-polling consumers. The process
loop (``shmq.procs.broker``) only moves bytes between the rings and the core; tests drive the
core directly with a real store and no process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from shmq.broker.answers import Answers, Peer
from shmq.broker.delay import DelayLevelService
from shmq.broker.dlq import DlqResendService
from shmq.broker.groups import ConsumerManager, ConsumerOffsetManager
from shmq.broker.offset_reset import OffsetResetService
from shmq.broker.pop_revive import PopReviveService
from shmq.broker.pop_store import PopStore
from shmq.broker.processors.end_transaction import EndTransactionProcessor
from shmq.broker.processors.heartbeat import HeartbeatProcessor
from shmq.broker.processors.offset import CommitOffsetProcessor
from shmq.broker.processors.pop import PopProcessor
from shmq.broker.processors.pull import PullWaitProcessor
from shmq.broker.processors.send import SendProcessor, SendRun
from shmq.broker.processors.send_back import SendBackProcessor
from shmq.broker.publish import StatePublisher
from shmq.broker.replication import REPLICATION_STATS, ReplicaWaits
from shmq.broker.routes import topic_resolver
from shmq.broker.schedule import DeliveryRulesHook, now_ms
from shmq.broker.timer import TimerService
from shmq.broker.topics import TopicConfig, TopicConfigManager
from shmq.broker.touched_rows import TouchedRows
from shmq.broker.transaction import TransactionalMessageService, live_producers
from shmq.codec import frames as P
from shmq.codec import pop_frames as PF
from shmq.codec import record as fmt
from shmq.config import SYNC_FLUSH, SYNC_MASTER, BrokerConfig, delay_levels
from shmq.errors import CorruptFrameError
from shmq.model import system_topics as st
from shmq.store.message_store import MessageStore
from shmq.store.write.filter_bitmap import CalcBitMapDispatcher
from shmq.store.write.hooks import PutRequest
from shmq.store.write.result import PutMessageResult
from shmq.store.write.rewrite import dispatch_fields
from shmq.store.write_retry import WriteRetry

log = logging.getLogger("shmq.broker")
SERVICE_ERROR_LOG_MS = 60_000

LOOP_STATS = (
    "frames",
    "busy_passes",
    "parks",
    "park_timeouts",
    "spin_hits",
    "posts",
    "group_commits",
    "group_commit_ns",
    "flushed_answers",
    "resends_answered",  # resent SENDs whose message was stored already: answered, not stored again
    *REPLICATION_STATS,
)


class TimedService(Protocol):
    """A broker service driven by the loop's tick (delays, timers, transaction checks): it does
    its due work in ``tick`` and keeps its progress in a config file."""

    def tick(self, now_ms: int) -> int: ...

    def persist(self, durable: bool = True) -> None: ...

    def next_due_ms(self) -> int | None: ...  # the earliest due time it waits for (None: nothing)


class BrokerCore:
    """The broker's tables and processors over one open store; ``publisher`` None: nothing is
    published (a core driven by tests has no state segment)."""

    def __init__(self, store: MessageStore, config: BrokerConfig, publisher: StatePublisher | None = None) -> None:
        self.store = store
        self.config = config
        self.store_host = config.store_host
        self.publisher = publisher
        # offsets first: they are what may refuse the start (MetadataError), before topics.json is rewritten
        self.offsets = ConsumerOffsetManager(store.store_dir)
        self.topics = TopicConfigManager(store.store_dir, config.default_topic_queue_nums)
        self.topics.repair(store.topics())
        self.consumers = ConsumerManager()
        # enableCalcFilterBitMap: first in the dispatcher list, fed the groups' SQL92 filters
        self.bitmap: CalcBitMapDispatcher | None = None
        if config.enable_calc_filter_bit_map:
            self.bitmap = CalcBitMapDispatcher(
                store.store_dir,
                store.commitlog,
                store.find_consume_queue,
                config.mapped_file_size_consume_queue // fmt.CQ_ENTRY_SIZE,
            )
            store.dispatchers.insert(0, self.bitmap)
        self.clients: dict[int, Peer] = {}
        # structural counters of the serving loop, logged at shutdown (frames per pass, parks, posts)
        self.stats: dict[str, int] = dict.fromkeys(LOOP_STATS, 0)
        # SYNC_MASTER: answers wait for a replica; the process sets ``replica.source`` (its HA segment)
        self.replica = (
            ReplicaWaits(config.sync_flush_timeout, self.stats) if config.broker_role == SYNC_MASTER else None
        )
        self.answers = Answers(config.flush_disk_type == SYNC_FLUSH, self._flush, self.stats, self.replica)
        self.resolve_topic = topic_resolver(self.topics.get, self._auto_create, config.auto_create_topic_enable)
        self.send = SendProcessor(self)
        self.pull = PullWaitProcessor(
            store.get_max_offset_in_queue, config.max_pull_waiters_per_client, config.max_pull_waiters_per_client_queue
        )
        self.resets = OffsetResetService(
            store, self.topics, self.consumers, self.offsets, self.clients, self._publish_offset
        )
        self.commit = CommitOffsetProcessor(self.offsets, self._publish_offset, self.resets.allows)
        self.send_back = SendBackProcessor(self, len(delay_levels(config.message_delay_level)))
        self._processors: dict[int, Callable[[Peer, memoryview, int], None]] = {
            P.SEND_BATCH: self.send.send_batch,
            P.SEND_MULTI: self.send.send_multi,
            P.COMMIT_OFFSET: self.commit.handle,
            P.PULL_WAIT: self.pull.handle,
            P.HEARTBEAT: HeartbeatProcessor().handle,
            P.SEND_BACK: self.send_back.handle,
            P.RESET_OFFSET_ACK: self.resets.handle_ack,
        }
        self._touched: dict[tuple[str, int], None] = {}
        self.touched_rows = TouchedRows(store.writer.queue_slots)  # queues puts wrote through the table
        self._counts: dict[str, list[int]] = {}
        self.busy = 0  # sends refused for waiting too long, since the last counters
        # a master parks delayed messages and transaction halves and brings them back when due;
        # a replica only mirrors what its master wrote
        self.services: list[TimedService] = []
        self._service_errors: dict[str, tuple[int, int]] = {}  # service -> (ms last logged, failures since)
        # a read-only or full disk: tried again with backoff and logged once, not on every pass
        self._topics_write = WriteRetry(log, "writing topics.json")
        self._offsets_write = WriteRetry(log, "writing consumerOffset.json")
        self.delay: DelayLevelService | None = None
        self.timer: TimerService | None = None
        self.transactions: TransactionalMessageService | None = None
        self.dlq: DlqResendService | None = None  # a replica resends nothing: it only mirrors
        self.pop_store: PopStore | None = None  # the pop state is the master's
        if config.is_master:
            levels = delay_levels(config.message_delay_level)
            self._system_topics(len(levels))
            store.put_hooks.append(DeliveryRulesHook(levels, config.timer_max_delay_sec))
            self.delay = DelayLevelService(store, levels, self.put_internal)
            self.timer = TimerService(store, self.put_internal)
            self.services += [self.delay, self.timer]
            self.transactions = TransactionalMessageService(
                store, config, self.put_internal, live_producers(self.clients), self.commit_progress
            )
            self.services.append(self.transactions)
            self._processors[P.END_TRANSACTION] = EndTransactionProcessor(self, self.transactions).handle
            self.dlq = DlqResendService(self)
            self.pop_store = PopStore(
                store.store_dir,
                config.flush_disk_type == SYNC_FLUSH,
                config.flush_interval_commit_log,
                config.pop_log_compact_bytes,
            )
        self.pop = PopProcessor(self, self.pop_store)
        self.resets.pop_reset = self.pop.reset
        self._processors[PF.POP] = self.pop.handle_pop
        self._processors[PF.ACK] = self.pop.handle_ack
        self._processors[PF.CHANGE_INVISIBLE] = self.pop.handle_change
        if self.pop_store is not None:
            self.services.append(PopReviveService(self, self.pop_store, self.pop))

    # ------------------------------------------------------------------ frames

    def handle(self, peer: Peer, frames: list[tuple[int, memoryview]], now: int) -> None:
        """Serve the frames of one client's pass; CorruptFrameError for a malformed one."""
        send = self.send
        wait_ns, send_fields = send.wait_ns, P.send_fields
        if len(frames) == 1 and frames[0][0] == P.SEND:  # a sync send: no run to gather
            req_id, enq, qid, flags, tags, traw, keys, record = send_fields(frames[0][1])
            if now - enq > wait_ns:
                send.reject_busy(peer, req_id, flags, now - enq)
            else:
                send.put_single(peer, req_id, qid, flags, tags, traw, keys, record)
            return
        run: SendRun | None = None
        processors = self._processors
        flagged = 0  # the OR of the run's SEND flags: does any ask the put hooks to read it?
        for kind, view in frames:
            if kind == P.SEND:  # gathered inline: the per-message path of the broker
                req_id, enq, qid, flags, tags, traw, keys, record = send_fields(view)
                if now - enq > wait_ns:
                    send.reject_busy(peer, req_id, flags, now - enq)
                    continue
                if flags & P.FLAG_RESEND:  # looked up first, alone: after the SENDs before it
                    if run is not None:
                        send.put_run(peer, run, bool(flagged & P.FLAG_INSPECT))
                        run, flagged = None, 0
                    send.put_single(peer, req_id, qid, flags, tags, traw, keys, record)
                    continue
                if run is None:
                    run = SendRun()
                run.raws.append(traw)
                run.qids.append(qid)
                run.req_ids.append(req_id)
                run.flags.append(flags)
                run.records.append(record)
                run.tags.append(tags)
                run.keys.append(keys)
                flagged |= flags
                continue
            if run is not None:  # a SEND_BATCH must not overtake SENDs of its queue
                send.put_run(peer, run, bool(flagged & P.FLAG_INSPECT))
                run, flagged = None, 0
            processor = processors.get(kind)
            if processor is None:
                raise CorruptFrameError(f"frame kind {kind} is not a request")
            processor(peer, view, now)
        if run is not None:
            send.put_run(peer, run, bool(flagged & P.FLAG_INSPECT))

    def end_pass(self) -> int:
        """After every client's frames of a pass, before any answer is written: topics created in
        the pass become durable (one write for all of them), SYNC_FLUSH sends get their group
        flush, SYNC_MASTER answers a replica acknowledged (or that timed out) are released, new
        max offsets are published and waiting consumers woken. Returns the answers released."""
        if self.topics.dirty:
            self.persist_topics()
        if self.bitmap is not None:
            self.bitmap.close()
        replica = self.replica
        n = replica.release(time.monotonic_ns()) if replica is not None and replica.groups else 0
        if self.answers.pending:
            n += self.answers.group_commit()
        if self._touched or self.touched_rows.pending:
            self._after_puts()
        self.pop.end_pass()
        return n

    def tick(self, now: int) -> None:
        """Every timer tick: expire long polls, run the timed services (due delays, timers,
        transaction checks), publish counters and the min offsets cleanup moved."""
        self.pull.expire(now)
        self.pop.expire(now)
        if self.services:
            ms = now_ms()
            for service in self.services:
                try:
                    service.tick(ms)
                except Exception:  # noqa: BLE001 - a store error (disk full): the next tick tries again
                    self._service_failed(service, ms)
        self.publish_counters()
        cleaner = self.store.clean_service
        if cleaner is not None:
            for key in cleaner.take_moved():
                self._touched[key] = None
            if self._touched:
                self._after_puts()

    def idle_timeout(self, timeout: float, until_tick_ns: int) -> float:
        """How long the idle loop may sleep: ``timeout``, or only until the next tick when a timed
        service has a message due before ``timeout`` is over (else an idle broker, parked 20 ms
        at a time, would deliver delayed messages up to two ticks late)."""
        dues = [d for d in (s.next_due_ms() for s in self.services) if d is not None]
        if not dues or min(dues) - now_ms() > timeout * 1000:
            return timeout
        return min(timeout, max(0.0, until_tick_ns / 1e9))

    def count(self, topic: str, qid: int, msgs: int, nbytes: int) -> None:
        """Note a put: the queue's new max offset gets published, the topic's counters grow."""
        self._touched[(topic, qid)] = None
        cnt = self._counts.get(topic)
        if cnt is None:
            cnt = self._counts[topic] = [0, 0]
        cnt[0] += msgs
        cnt[1] += nbytes

    def count_records(
        self, topics: list[str], topic_idx: list[int], queue_ids: list[int], sizes: list[int], touch: bool = True
    ) -> None:
        """``count(topics[k], q, 1, size)`` for each record of a SEND_MULTI (one loop, no call per
        record); ``touch`` False: the queues are in ``touched_rows`` already."""
        touched, counts = self._touched, self._counts
        for k, q, size in zip(topic_idx, queue_ids, sizes):
            topic = topics[k]
            if touch:
                touched[(topic, q)] = None
            cnt = counts.get(topic)
            if cnt is None:
                cnt = counts[topic] = [0, 0]
            cnt[0] += 1
            cnt[1] += size

    def _service_failed(self, service: TimedService, ms: int) -> None:
        """Log a timed service's failure with its traceback at most once a minute per service (it
        is tried again every tick: a full disk must not write 100 tracebacks a second)."""
        name = type(service).__name__
        last, count = self._service_errors.get(name, (-SERVICE_ERROR_LOG_MS, 0))
        if ms - last >= SERVICE_ERROR_LOG_MS:
            # called from the tick's except block: the traceback is that failure's
            log.exception(  # noqa: LOG004
                "%s failed (%d more failures since the last report; tried again every tick)", name, count
            )
            self._service_errors[name] = (ms, 0)
        else:
            self._service_errors[name] = (last, count + 1)

    def put_internal(self, items: list[tuple[str, int, bytes]], inspect: bool = False) -> PutMessageResult:
        """The broker's own put (due delays, retries, dead letters, transaction commits and ops):
        records (topic, queue id, record bytes) stored through the store's hooks (``inspect``: the
        delivery rules read them too, e.g. a retry that must wait), counted, published and their
        waiting consumers woken like client sends. Topics it writes that have no config yet get
        one (a group's %RETRY% / %DLQ% topic has one queue, as in RocketMQ)."""
        records, topics, qids, tags, keys, key_rows = [], [], [], [], [], []
        for i, (topic, qid, record) in enumerate(items):
            self._ensure_topic(topic, qid)
            code, hashes = dispatch_fields(record, topic)
            records.append(record)
            topics.append(topic)
            qids.append(qid)
            tags.append(code)
            keys += hashes
            key_rows += [i] * len(hashes)
        sizes = np.fromiter(map(len, records), np.int64, len(records))
        starts = np.zeros(len(records), np.int64)
        starts[1:] = np.cumsum(sizes)[:-1]
        batch = fmt.EncodedBatch(
            b"".join(records), starts, np.array(tags, np.int64), np.array(keys, np.int64), np.array(key_rows, np.int64)
        )
        req = PutRequest.of_routes(topics, qids, batch)
        if inspect:
            req.inspect = np.arange(len(records), dtype=np.int64)
        r = self.store.put(req, wait_flush=False)
        stored_topics, stored_qids = req.topic_ids(), req.queue_id_array()
        for i in range(len(records)):
            if r.refused is None or not r.refused[i]:
                self.count(req.topics[int(stored_topics[i])], int(stored_qids[i]), 1, int(sizes[i]))
        return r

    def _ensure_topic(self, topic: str, qid: int) -> None:
        tc = self.topics.get(topic)
        if tc is None:
            one = st.is_retry_topic(topic) or st.is_dlq_topic(topic)
            n = 1 if one else max(self.config.default_topic_queue_nums, qid + 1)
            self.update_topic(topic, n, n, persist=False)

    def _system_topics(self, levels: int) -> None:
        """The topics the broker writes, created (or resized to the delay levels) at start."""
        wanted = {st.SCHEDULE_TOPIC: levels, **st.BROKER_TOPICS}
        for name, n in wanted.items():
            tc = self.topics.get(name)
            if tc is None or tc.read_queue_nums != n or tc.write_queue_nums != n:
                self.topics.create_or_update(name, n, n, None, True)

    def _flush(self, end: int) -> bool:
        gc = self.store.group_commit
        return gc.flush_now(end) if gc is not None else True

    def _after_puts(self) -> None:
        """Publish new min/max offsets and wake consumers waiting on those queues.

        Counters (per topic and broker-wide) are only accumulated here; ``publish_counters``
        writes them on the timer tick, so a pass pays one seqlock section, not three.
        """
        find = self.store.find_consume_queue
        wake = self.pull.wake if self.pull.waiters else None
        rows = self.touched_rows.take() if self.touched_rows.pending else None
        if rows is not None and (wake is not None or self.pop.waiters.by_group):  # waiters go by name
            self._touched.update(dict.fromkeys(self.touched_rows.keys(rows)))
            rows = None
        if self.pop.waiters.by_group:
            self.pop.wake_topics({topic for topic, _ in self._touched})
        items = []
        for topic, qid in self._touched:
            cq = find(topic, qid)
            if cq is None:
                continue
            hi = cq.max_offset
            items.append((topic, qid, cq.min_offset, hi))
            if wake is not None:
                wake(topic, qid, hi)
        self._touched.clear()
        if self.publisher is not None:
            state, highs = (None, None) if rows is None else self.touched_rows.published(self.publisher, rows)
            self.publisher.queue_offsets(items, self.store.commitlog.max_offset, state, highs)

    # ------------------------------------------------------------------ topics, groups, offsets

    def _auto_create(self, topic: str) -> TopicConfig:
        return self.update_topic(topic, persist=False)

    def update_topic(
        self,
        name: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        persist: bool = True,
        order: bool | None = None,
    ) -> TopicConfig:
        """Create or change a topic and publish it; if the state segment is full the change is undone
        (ValueError), so one client's topic never takes the broker down. ``persist=False``
        (auto-created topics): ``end_pass`` writes topics.json before the pass's answers go out."""
        old = self.topics.get(name)
        tc = self.topics.create_or_update(name, read_queue_nums, write_queue_nums, perm, persist, order)
        try:
            self.publish_topics()
        except ValueError:
            if old is None:
                self.topics.delete(name)
            else:
                self.topics.create_or_update(name, old.read_queue_nums, old.write_queue_nums, old.perm, order=old.order)
            raise
        return tc

    def delete_topic(self, name: str) -> bool:
        deleted = self.topics.delete(name)
        if deleted:
            self.publish_topics()
        return deleted

    def persist_topics(self, force: bool = False) -> None:
        """Write topics.json; while writing it fails, only once its retry delay is over (``force``:
        now, at shutdown). A failure leaves the table dirty: a later pass or tick tries again."""
        now = time.monotonic()
        if not (force or self._topics_write.due(now)):
            return
        try:
            self.topics.persist()
        except OSError as e:
            self._topics_write.failed(e, now)
            return
        self._topics_write.succeeded()

    def persist_offsets(self) -> None:
        """Every flushConsumerOffsetInterval: committed offsets and the timed services' progress (a
        full disk must not stop the broker, nor log a line every interval)."""
        if self.offsets.dirty:
            try:
                self.offsets.persist()
            except OSError as e:  # stays dirty: the next interval tries again
                self._offsets_write.failed(e, time.monotonic())
            else:
                self._offsets_write.succeeded()
        for service in self.services:
            service.persist(durable=True)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit.commit(group, topic, queue_id, offset)

    def commit_progress(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A broker service's progress as a committed offset of a system group (RocketMQ's
        CID_RMQ_SYS_TRANS), so an operator sees what is still open where RocketMQ shows it."""
        self.offsets.commit(group, topic, queue_id, offset)
        self._publish_offset(group, topic, queue_id, offset)

    def _publish_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.publisher is not None:
            self.publisher.offset(group, topic, queue_id, offset)

    def queue_offsets(self, topic: str, qid: int) -> tuple[int, int]:
        return self.store.get_min_offset_in_queue(topic, qid), self.store.get_max_offset_in_queue(topic, qid)

    # ------------------------------------------------------------------ clients

    def add_client(self, peer: Peer) -> None:
        self.clients[peer.client_id] = peer
        self.publish_clients()

    def remove_client(self, peer: Peer) -> None:
        """A client detached or died: its answers and waiters go, its groups rebalance."""
        peer.alive = False
        peer.out.clear()
        self.pull.forget(peer)
        self.pop.forget(peer)
        self.resets.forget(peer.client_id)
        self.clients.pop(peer.client_id, None)
        if self.consumers.remove_client(peer.client_id):
            self.publish_groups()
        self.publish_clients()

    # ------------------------------------------------------------------ publishing

    def publish_topics(self) -> None:
        if self.publisher is not None:
            self.publisher.topics(self.topics.topics, self.queue_offsets, self.offsets.offsets)

    def publish_groups(self) -> None:
        """After every change of the groups (join, leave, a member gone): publish them, and give
        the filter bitmap the SQL92 filters they now hold."""
        if self.bitmap is not None:
            self.bitmap.set_filters(self.consumers.sql_subscriptions())
        if self.publisher is not None:
            self.publisher.groups(self.consumers.groups, self.offsets.offsets)
        self.publish_clients()

    def publish_clients(self) -> None:
        if self.publisher is not None:
            self.publisher.clients(
                (c.client_id, c.role, c.pid, c.alive_key, c.group, c.attached_ms) for c in self.clients.values()
            )

    def publish_counters(self) -> None:
        """Counters for the monitor: messages and bytes in per topic and in total, busy rejections."""
        if not self._counts and not self.busy:
            return
        store = self.store
        if self.publisher is not None:
            msgs = sum(m for m, _ in self._counts.values())
            nbytes = sum(b for _, b in self._counts.values())
            flushed = store.group_commit.flushed_offset if store.group_commit else -1
            self.publisher.counters(
                {t: (m, b) for t, (m, b) in self._counts.items()},
                msgs,
                nbytes,
                self.busy,
                store.commitlog.max_offset,
                flushed,
            )
        self._counts.clear()
        self.busy = 0

    def persist(self) -> None:
        """At shutdown: committed offsets and topics to disk (each failure logged, not raised)."""
        try:
            self.offsets.persist()
        except Exception:  # a full disk or no descriptors left must not keep the IPC objects alive
            log.exception("persisting consumer offsets at shutdown failed")
        if self.topics.dirty:
            self.persist_topics(force=True)
        for service in self.services:
            try:
                service.persist(durable=True)
            except Exception:
                log.exception("persisting %s at shutdown failed", type(service).__name__)
        if self.pop_store is not None:
            try:
                self.pop_store.close()
            except OSError:
                log.exception("closing the pop log at shutdown failed")
