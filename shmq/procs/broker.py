"""The broker process: one loop that moves frames between client channels and the message store.

Each pass drains every request ring in batches, stores the SENDs of a channel's pass (up to
the next SEND_BATCH) with one store call, ``put_messages`` for one queue or
``put_messages_multi`` across topics and queues (gathered straight from the frames, no
per-message objects), as it stores each SEND_BATCH and SEND_MULTI, answers on the response
rings (a long run of SENDs with one packed block of SEND_RESULT frames; after one group
commit for the whole pass under SYNC_FLUSH), publishes the new max offsets into the state
segment (plain 8-byte stores, one seqlock bump) and wakes long-polling consumers. Counters for the monitor are published on the 10 ms tick, the control
queue (attach, detach, admin) is polled every millisecond and before parking, never per pass.
With nothing to do it polls its rings for an adaptive window (yielding the CPU), then parks
on its doorbell; while busy it makes no system call per message. Loop counters (passes,
parks, doorbell posts, group-commit waits) are logged at shutdown.
"""
from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate, chain
from typing import Any, Callable

import numpy as np
import posix_ipc
import sysv_ipc

from shmq.codec import frames as P
from shmq.config import SYNC_FLUSH, BrokerConfig
from shmq.errors import (BrokerNotFoundError, ControlProtocolError, CorruptFrameError, DiskFullError,
                         ShmqError, StoreClosedError)
from shmq.broker import admin
from shmq.broker.groups import ConsumerManager, ConsumerOffsetManager
from shmq.broker.publish import StatePublisher, now_ms
from shmq.broker.topics import TopicConfig, TopicConfigManager
from shmq.ring import shm
from shmq.ring.channel import Channel, broker_bell_name, channel_name, client_bell_name
from shmq.ring.control import Attach, ControlQueue, Detach, Reply, sysv_key
from shmq.ring.doorbell import Doorbell, park, wake
from shmq.ring.framing import CONSUMER, PRODUCER
from shmq.ring.liveness import Liveness, Watch, remove_if_dead
from shmq.ring.reclaim import reclaim_dead_broker
from shmq.ring.state import StateReader, StateWriter
from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore

log = logging.getLogger("shmq.broker")

MAX_FRAMES_PER_PASS = 256
MIN_RING_BYTES = 4096
MAX_RING_BYTES = 64 * 1024 * 1024
CONTROL_INTERVAL_NS = 1_000_000
TICK_NS = 10_000_000
LIVENESS_NS = 40_000_000
FILL_NS = 200_000_000
IDLE_PARK_S = 0.02
PACKED = 0  # Client.out item kind: (PACKED, bytes of whole SEND_RESULT frames, see P.pack_send_results)
PACK_RESULTS_MIN = 8  # runs of SENDs at least this long are answered with packed frames
_RESULT_FRAME_BYTES = P.RESULT_FRAME.itemsize
# Idle: poll the rings before parking, yielding the CPU between polls. A peer that sends within
# the window finds the broker awake, so it makes no sem_post and the broker pays no wake-up.
# The window adapts to the idle gaps seen: twice the last gap when that was under SPIN_MAX_NS
# (a request/response rhythm: sync sends), SPIN_MIN_NS otherwise (a producer that encodes for
# milliseconds between batches, or nobody). Yielding keeps the spin from starving the peer on a
# small oversubscribed machine (2 shared cores: a busy 50-200 us spin cut sync throughput by
# 20-30 %, a yielding one did not).
SPIN_MIN_NS = 20_000
SPIN_MAX_NS = 400_000
SPIN_YIELD = True


class BrokerRunningError(ShmqError, RuntimeError):
    """A live broker already uses this name."""


@dataclass(eq=False)
class Client:
    """An attached client: its channel, its liveness, the responses waiting for ring room."""

    client_id: int
    pid: int
    role: str
    group: str | None
    channel: Channel
    watch: Watch
    attached_ms: int
    out: deque = field(default_factory=deque)
    alive: bool = True


@dataclass(eq=False)
class PullWaiter:
    client: Client
    req_id: int
    offset: int
    deadline_ns: int


def _put_error_code(e: Exception) -> int:
    if isinstance(e, (DiskFullError, StoreClosedError)):
        return P.SERVICE_NOT_AVAILABLE
    if isinstance(e, ValueError):
        return P.MESSAGE_ILLEGAL
    return P.SYSTEM_ERROR


class BrokerController:
    """Owns the store, the IPC objects of one broker name, and the serving loop."""

    def __init__(self, store_dir: str, name: str | None = None, config: Any = None) -> None:
        self.config = BrokerConfig.load(config)
        self.config.check_role()
        self.name = shm.check_broker_name(self.config.resolve_name(name))
        self.store_dir = os.path.realpath(store_dir)
        self.store: MessageStore | None = None
        self.clients: dict[int, Client] = {}
        self.waiters: dict[tuple[str, int], list[PullWaiter]] = {}
        self._stopping = False
        self._park_flags: list = []
        self._flush_pending: list[tuple[Client, list[P.SendResultFrame]]] = []
        self._flush_end = 0
        # structural counters of the serving loop, logged at shutdown (frames per pass, parks, posts)
        self.loop_stats = dict.fromkeys(("frames", "busy_passes", "parks", "park_timeouts", "spin_hits", "posts",
                                         "group_commits", "group_commit_ns", "flushed_answers"), 0)
        self._touched: dict[tuple[str, int], None] = {}
        self._counts: dict[str, list[int]] = {}
        self._busy = 0
        self._wait_ns = self.config.wait_time_mills_in_send_queue * 1_000_000
        self._sync_flush = self.config.flush_disk_type == SYNC_FLUSH
        self._store_host = self.config.store_host

    # ------------------------------------------------------------------ start / stop

    def start(self) -> "BrokerController":
        """Take the name and the store, remove a crashed predecessor's leftovers, create the IPC objects."""
        self._claim_name()
        os.makedirs(self.store_dir, exist_ok=True)
        self.store = MessageStore(self.store_dir, self.config).start()
        # before the state segment announces us: a stop right after start must be graceful
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        try:
            self._create_ipc()
        except BaseException:
            self.store.shutdown()
            raise
        return self

    def _claim_name(self) -> None:
        try:
            old = StateReader.open(self.name)
        except BrokerNotFoundError:
            old = None
        except Exception as e:  # a torn or foreign state segment: a crashed predecessor's
            log.warning("removing unreadable state segment of %r: %s", self.name, e)
            old = None
        if old is not None:
            h = old.view.header[0]
            alive_key = int(h["alive_key"])
            store = bytes(h["store_dir"]).rstrip(b"\0").decode(errors="replace")
            old.close()
            if Watch(alive_key).is_alive():
                raise BrokerRunningError(f"a broker named {self.name!r} is already running (store {store}); "
                                         "stop it or pick another --name")
        removed = reclaim_dead_broker(self.name, self.store_dir)
        if removed:
            log.info("removed leftovers of a crashed broker %r: %s", self.name, ", ".join(removed))

    def _create_ipc(self) -> None:
        control_key = sysv_key(self.store_dir, "control")
        alive_key = sysv_key(self.store_dir, "alive")
        _remove_queue(control_key)  # we hold the store lock: whoever made these is dead
        remove_if_dead(alive_key)
        self.liveness = Liveness.hold(alive_key)
        self.control = ControlQueue.create(control_key)
        self.bell = Doorbell.create(broker_bell_name(self.name))
        self.topics = TopicConfigManager(self.store_dir, self.config.default_topic_queue_nums)
        self.consumers = ConsumerManager()
        self.offsets = ConsumerOffsetManager(self.store_dir)
        self.state = StateWriter.create(self.name, self.store_dir, control_key, alive_key)
        self.publisher = StatePublisher(self.state)
        self.publish_topics()

    def request_stop(self, *_: object) -> None:
        """Signal handler: finish the current pass, then shut down gracefully."""
        self._stopping = True

    def serve_forever(self) -> None:
        try:
            self._loop()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Answer what is in flight, flush, persist offsets and topics, remove every IPC object."""
        if self.store is None:
            return
        try:
            self._pass(time.monotonic_ns())
            for c in list(self.clients.values()):
                self._flush_out(c)
            self._publish_counters()
        except Exception:
            log.exception("error while answering in-flight requests at shutdown")
        try:
            self.offsets.persist()
        except Exception:  # a full disk or no descriptors left must not keep the IPC objects alive
            log.exception("persisting consumer offsets at shutdown failed")
        if self.topics.dirty:
            self._persist_topics()
        try:
            self.state.close()
            self.state.unlink()
            self.control.remove()
            for c in list(self.clients.values()):
                self._release_client(c, remove_liveness=not c.watch.is_alive())
            self.bell.close()
            self.bell.unlink()
        finally:
            try:
                self.store.shutdown()
            except Exception:
                log.exception("store shutdown failed; recovery checks it at the next start")
            self.store = None
            self.liveness.release()
        st = self.loop_stats
        log.info("broker %r stopped; loop: %d frames in %d busy passes, %d parks (%d timed out), "
                 "%d spins that found work, %d client doorbell posts", self.name, st["frames"], st["busy_passes"],
                 st["parks"], st["park_timeouts"], st["spin_hits"], st["posts"])
        if st["group_commits"]:
            log.info("group commit: %d answers in %d flushes, %.1f us per flush on average",
                     st["flushed_answers"], st["group_commits"], st["group_commit_ns"] / st["group_commits"] / 1000)

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        next_control = next_tick = next_live = next_fill = time.monotonic_ns()
        next_persist = next_tick + self.config.flush_consumer_offset_interval * 1_000_000
        idle_since = None
        spin_ns = SPIN_MIN_NS
        stats = self.loop_stats
        while not self._stopping:
            now = time.monotonic_ns()
            work = self._pass(now)
            if now >= next_control:
                work += self._serve_control()
                next_control = now + CONTROL_INTERVAL_NS
            if now >= next_tick:
                next_tick = now + TICK_NS
                self._expire_waiters(now)
                self._publish_counters()
                if now >= next_live:
                    next_live = now + LIVENESS_NS
                    self._check_liveness()
                if now >= next_fill:
                    next_fill = now + FILL_NS
                    self._publish_fill()
                    if self.topics.dirty:
                        self._persist_topics()
                if now >= next_persist:
                    next_persist = now + self.config.flush_consumer_offset_interval * 1_000_000
                    if self.offsets.dirty:
                        self.offsets.persist()
            if work or self._stopping:
                idle_since = None
                stats["busy_passes"] += 1
                stats["frames"] += work
                continue
            # Idle. Passes are cheap while spinning: no system call, nothing published. The
            # control queue (one msgrcv) is polled every CONTROL_INTERVAL_NS and once before
            # sleeping, never once per empty pass.
            if idle_since is None:
                idle_since = now
            if now - idle_since < spin_ns:
                if self._spin_until(idle_since + spin_ns):
                    stats["spin_hits"] += 1
                    spin_ns = _next_spin(time.monotonic_ns() - idle_since)
                    idle_since = None
                    continue
            if self._serve_control():
                next_control = time.monotonic_ns() + CONTROL_INTERVAL_NS
                continue
            try:
                stats["parks"] += 1
                if park(self._has_work, self._park_flags, self.bell, IDLE_PARK_S, spin=0.0):
                    spin_ns = _next_spin(time.monotonic_ns() - idle_since)
                else:
                    stats["park_timeouts"] += 1
                    spin_ns = SPIN_MIN_NS
            except posix_ipc.SignalError:
                pass
            idle_since = None

    def _spin_until(self, end_ns: int) -> bool:
        """Poll the rings (no system call) until work shows up (True) or ``end_ns`` passes."""
        has_work, clock = self._has_work, time.monotonic_ns
        yield_ = os.sched_yield if SPIN_YIELD else None
        while clock() < end_ns:
            if has_work():
                return True
            if yield_ is not None:
                yield_()
        return False

    def _has_work(self) -> bool:
        if self._stopping:
            return True
        for c in self.clients.values():
            if c.out:
                kind, payload = c.out[0]
                if c.channel.responses.writable(_RESULT_FRAME_BYTES - 8 if kind == PACKED else len(payload)):
                    return True
            elif c.channel.requests.has_data():
                return True
        return False

    def _rebuild_park_flags(self) -> None:
        flags = []
        for c in self.clients.values():
            flags.append((c.channel.requests, CONSUMER))
            flags.append((c.channel.responses, PRODUCER))
        self._park_flags = flags

    def _pass(self, now: int) -> int:
        work = 0
        for c in list(self.clients.values()):
            if c.out:
                self._flush_out(c)
                if c.out:
                    continue  # back pressure: the client is not reading its responses
            work += self._serve_channel(c, now)
        if self._flush_pending:
            work += self._group_commit()
        if self._touched:
            self._after_puts()
        for c in self.clients.values():
            if c.out:
                self._flush_out(c)
        return work

    def _group_commit(self) -> int:
        """Flush once for every SYNC_FLUSH send of this pass (they are the group), then answer them.

        Flushed here, not by the store's GroupCommitService thread: handing the group to a thread
        and back cost two wake-ups per group, several times the fdatasync (measured: 1.8x the
        throughput of 8 sync senders). A flush that fails answers FLUSH_DISK_TIMEOUT.
        """
        pending, self._flush_pending = self._flush_pending, []
        start = time.monotonic_ns()
        try:
            ok = self.store.group_commit.flush_now(self._flush_end)
        except OSError as e:
            log.error("group commit flush failed: %s", e)
            ok = False
        stats = self.loop_stats
        stats["group_commits"] += 1
        stats["group_commit_ns"] += time.monotonic_ns() - start
        n = 0
        for c, results in pending:
            if not c.alive:
                continue
            if isinstance(results, np.ndarray):
                if not ok:
                    results["status"] = P.FLUSH_DISK_TIMEOUT
                c.out.append((PACKED, results.tobytes()))
            else:
                for r in results:
                    if not ok and isinstance(r, P.SendMultiResultFrame):
                        r.statuses[r.statuses == P.SEND_OK] = P.FLUSH_DISK_TIMEOUT
                    elif not ok:
                        r.status = P.FLUSH_DISK_TIMEOUT
                    c.out.append(_encoded(r))
            n += len(results)
        stats["flushed_answers"] += n
        return n

    def _flush_out(self, c: Client) -> None:
        """Write queued answers into the response ring (as many as fit) and ring the client once."""
        out = c.out
        if not c.alive:
            out.clear()
            return
        ring = c.channel.responses
        wrote = False
        while out:
            kind, payload = out[0]
            if kind == PACKED:
                k = ring.write_packed(payload, _RESULT_FRAME_BYTES)
                wrote = wrote or k > 0
                if k * _RESULT_FRAME_BYTES < len(payload):
                    out[0] = (PACKED, payload[k * _RESULT_FRAME_BYTES:])  # the ring is full
                    break
                out.popleft()
            elif ring.try_write(kind, payload):
                out.popleft()
                wrote = True
            else:
                break
        if wrote:
            if wake(ring, CONSUMER, c.channel.client_bell):
                self.loop_stats["posts"] += 1

    # ------------------------------------------------------------------ requests

    def _serve_channel(self, c: Client, now: int) -> int:
        ring = c.channel.requests
        try:
            frames = ring.read_batch(MAX_FRAMES_PER_PASS)
            if not frames:
                return 0
            self._handle_frames(c, frames, now)
        except CorruptFrameError as e:
            self._drop(c, f"malformed frame: {e}")
            return 1
        ring.release()
        if wake(ring, PRODUCER, c.channel.client_bell):
            self.loop_stats["posts"] += 1
        return len(frames)

    def _handle_frames(self, c: Client, frames: list, now: int) -> None:
        run: _Run | None = None
        wait_ns = self._wait_ns
        send_fields = P.send_fields
        for kind, view in frames:
            if kind == P.SEND:
                req_id, enq, qid, flags, tags, traw, keys, record = send_fields(view)
                if now - enq > wait_ns:
                    self._reject_busy(c, req_id, flags, now - enq)
                    continue
                if run is None:
                    run = _Run()
                run.raws.append(traw)
                run.qids.append(qid)
                run.req_ids.append(req_id)
                run.flags.append(flags)
                run.records.append(record)
                run.tags.append(tags)
                run.keys.append(keys)
                continue
            if run is not None:  # a SEND_BATCH must not overtake SENDs of its queue
                self._put_run(c, run)
                run = None
            if kind == P.SEND_BATCH or kind == P.SEND_MULTI:
                b = P.decode_send_batch(view) if kind == P.SEND_BATCH else P.decode_send_multi(view)
                if now - b.enqueue_ns > wait_ns:
                    self._reject_busy(c, b.req_id, b.flags, now - b.enqueue_ns)
                elif kind == P.SEND_BATCH:
                    self._put_batch(c, b)
                else:
                    self._put_multi(c, b)
            elif kind == P.COMMIT_OFFSET:
                co = P.decode_commit_offset(view)
                self.offsets.commit(co.group, co.topic, co.queue_id, co.offset)
                self.publisher.offset(co.group, co.topic, co.queue_id, co.offset)
            elif kind == P.PULL_WAIT:
                self._register_waiter(c, P.decode_pull_wait(view), now)
            elif kind == P.HEARTBEAT:
                P.decode_heartbeat(view)
            else:
                raise CorruptFrameError(f"frame kind {kind} is not a request")
        if run is not None:
            self._put_run(c, run)

    def _reject_busy(self, c: Client, req_id: int, flags: int, waited_ns: int) -> None:
        self._busy += 1
        if not flags & P.FLAG_ONEWAY:
            c.out.append((P.ERROR, P.encode_error(
                req_id, P.SYSTEM_BUSY, f"[TIMEOUT_CLEAN_QUEUE] broker busy: request waited {waited_ns // 1_000_000} ms "
                f"in the send queue, over waitTimeMillsInSendQueue {self.config.wait_time_mills_in_send_queue} ms")))

    def _error(self, c: Client, req_id: int, flags: int, code: int, message: str) -> None:
        if not flags & P.FLAG_ONEWAY:
            c.out.append((P.ERROR, P.encode_error(req_id, code, message)))

    def _topic_for_send(self, topic: str) -> tuple[TopicConfig | None, int, str]:
        tc = self.topics.get(topic)
        if tc is None:
            try:
                fmt.check_topic(topic)
            except ValueError as e:
                return None, P.MESSAGE_ILLEGAL, str(e)
            if not self.config.auto_create_topic_enable:
                return None, P.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist and autoCreateTopicEnable is false"
            try:
                tc = self.update_topic(topic, persist=False)
            except (ValueError, OSError) as e:  # OSError: no file descriptors or disk space left
                return None, P.SYSTEM_ERROR, f"cannot create topic {topic!r}: {e}"
            log.info("auto-created topic %r with %d queues", topic, tc.write_queue_nums)
        if not tc.writable:
            return None, P.NO_PERMISSION, f"topic {topic!r} is not writable (perm {tc.perm})"
        return tc, 0, ""

    def _put_run(self, c: Client, run: _Run) -> None:
        """Store the SENDs of one pass, of any topics and queues, with one store call.

        A topic that cannot take them (bad name, not writable, auto-create off) answers its own
        SENDs with an error; the others still go in. SENDs that leave the queue to the broker
        take one queue per topic per pass, round robin over the passes."""
        routes = _Routes(self._topic_for_send)
        names: dict[bytes, str] = {}
        keep = []
        queues = []
        for i, (raw, qid) in enumerate(zip(run.raws, run.qids)):
            name = names.get(raw)
            if name is None:
                name = names[raw] = P.decode_topic(raw)
            q, code, message = routes.route(name, qid)
            if code:
                self._error(c, run.req_ids[i], run.flags[i], code, message)
                continue
            keep.append(i)
            queues.append((name, q))
        if keep:
            self._store_sends(c, run if len(keep) == len(run.req_ids) else run.subset(keep), queues)

    def _store_sends(self, c: Client, run: _Run, queues: list[tuple[str, int]]) -> None:
        n = len(run.records)
        one_queue = all(q == queues[0] for q in queues)
        try:
            if n == 1:
                topic, qid = queues[0]
                r = self.store.put_message(topic, qid, bytes(run.records[0]), run.tags[0], list(run.keys[0]),
                                           wait_flush=False)
                phys = [r.wrote_offset]
            elif one_queue:
                r = self.store.put_messages(*queues[0], run.batch(), wait_flush=False)
                phys = r.phys_offsets if n >= PACK_RESULTS_MIN else r.phys_offsets.tolist()
            else:
                topics, qids = zip(*queues)
                r = self.store.put_messages_multi(topics, qids, run.batch(), wait_flush=False)
                phys = r.phys_offsets
        except Exception as e:
            if n > 1:  # find the bad one(s); the others still go in
                for i in range(n):
                    self._store_sends(c, run.subset([i]), [queues[i]])
                return
            if not isinstance(e, (ValueError, ShmqError)):
                log.exception("put of a message to %s/%d failed", *queues[0])
            self._error(c, run.req_ids[0], run.flags[0], _put_error_code(e), f"{type(e).__name__}: {e}")
            return
        ts, host = r.store_timestamp, self._store_host
        if one_queue:
            self._count(*queues[0], n, r.wrote_bytes)
            qid, qoff = queues[0][1], r.queue_offset
        else:
            for (topic, q), record in zip(queues, run.records):
                self._count(topic, q, 1, len(record))
            qid, qoff = np.fromiter((q for _, q in queues), np.int64, n), r.queue_offsets
        if n >= PACK_RESULTS_MIN or not one_queue:  # one numpy fill and one ring copy for the whole run
            packed = P.pack_send_results(run.req_ids, run.flags, qid, qoff, phys, ts, host)
            self._answer(c, r.end_offset, packed if packed is not None else [])
            return
        ok, oneway = P.SEND_OK, P.FLAG_ONEWAY
        results = [P.SendResultFrame(req_id, ok, qid, qoff + i, phys[i], ts, host)
                   for i, (req_id, flags) in enumerate(zip(run.req_ids, run.flags)) if not flags & oneway]
        self._answer(c, r.end_offset, results)

    def _put_batch(self, c: Client, b: P.SendBatch) -> None:
        qid, code, message = _Routes(self._topic_for_send).route(b.topic, b.queue_id)
        if code:
            return self._error(c, b.req_id, b.flags, code, message)
        try:
            r = self.store.put_messages(b.topic, qid, b.batch, wait_flush=False)
        except Exception as e:
            if not isinstance(e, (ValueError, ShmqError)):
                log.exception("batch put to %s/%d failed", b.topic, qid)
            return self._error(c, b.req_id, b.flags, _put_error_code(e), f"{type(e).__name__}: {e}")
        results = []
        if not b.flags & P.FLAG_ONEWAY:
            results.append(P.SendResultFrame(b.req_id, P.SEND_OK, qid, r.queue_offset, r.wrote_offset,
                                             r.store_timestamp, self._store_host, r.msg_num, r.phys_offsets.tolist()))
        self._count(b.topic, qid, r.msg_num, r.wrote_bytes)
        self._answer(c, r.end_offset, results)

    def _put_multi(self, c: Client, m: P.SendMulti) -> None:
        """Store a SEND_MULTI (records of many topics, each sent rarely) with one store call.

        Records of a topic that cannot take them (not writable, auto-create off) or with an
        illegal queue id get that error as their status; the others still go in. Records left
        to the broker take one queue per topic per frame."""
        n = len(m.batch)
        routes = _Routes(self._topic_for_send)
        statuses = [0] * n
        names, qids, message = [], [], ""
        for i, (k, requested) in enumerate(zip(m.topic_idx.tolist(), m.queue_ids.tolist())):
            name = m.topics[k]
            q, code, why = routes.route(name, requested)
            if code:
                statuses[i], message = -code, message or why
            names.append(name)
            qids.append(q)
        status = np.array(statuses, np.int64)
        rows = np.flatnonzero(status == 0)
        queue_ids, queue_offsets, phys = np.array(qids, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        ts, end = 0, 0
        if len(rows):
            batch = m.batch if len(rows) == n else fmt.select_records(m.batch, rows)
            keep = rows.tolist()
            try:
                r = self.store.put_messages_multi([names[i] for i in keep], queue_ids[rows], batch, wait_flush=False)
            except Exception as e:
                if not isinstance(e, (ValueError, ShmqError)):
                    log.exception("put of %d records of %d topics failed", len(rows), len(m.topics))
                status[rows] = -_put_error_code(e)
                message = f"{type(e).__name__}: {e}"
            else:
                queue_offsets[rows], phys[rows], ts, end = r.queue_offsets, r.phys_offsets, r.store_timestamp, \
                    r.end_offset
                sizes = np.diff(np.append(m.batch.starts, len(m.batch.buf))).tolist()
                for i in keep:
                    self._count(names[i], qids[i], 1, sizes[i])
        if m.flags & P.FLAG_ONEWAY:
            return
        result = P.SendMultiResultFrame(m.req_id, ts, self._store_host, status, queue_ids, queue_offsets, phys, message)
        if end:
            self._answer(c, end, [result])
        else:  # nothing stored: nothing to flush first
            c.out.append((P.SEND_MULTI_RESULT, P.encode_send_multi_result(result)))

    def _count(self, topic: str, qid: int, msgs: int, nbytes: int) -> None:
        """Note a put: the queue's new max offset gets published, the topic's counters grow."""
        self._touched[(topic, qid)] = None
        cnt = self._counts.get(topic)
        if cnt is None:
            cnt = self._counts[topic] = [0, 0]
        cnt[0] += msgs
        cnt[1] += nbytes

    def _answer(self, c: Client, end: int, results: list[P.SendResultFrame] | np.ndarray) -> None:
        """Queue a put's answers (SendResultFrames, or ``P.RESULT_FRAME`` rows, packed); under
        SYNC_FLUSH they wait for the group flush that covers ``end``."""
        if not len(results):
            return
        if self._sync_flush:
            self._flush_pending.append((c, results))
            self._flush_end = max(self._flush_end, end)
        elif isinstance(results, np.ndarray):
            c.out.append((PACKED, results.tobytes()))
        else:
            c.out.extend(_encoded(r) for r in results)

    def _after_puts(self) -> None:
        """Publish new max offsets and wake consumers waiting on those queues (every pass with puts).

        Counters (per topic and broker-wide) are only accumulated here; ``_publish_counters``
        writes them on the timer tick, so a pass pays one seqlock section, not three.
        """
        find = self.store.find_consume_queue
        waiters = self.waiters
        items = []
        for topic, qid in self._touched:
            cq = find(topic, qid)
            if cq is None:
                continue
            hi = cq.max_offset
            items.append((topic, qid, cq.min_offset, hi))
            if waiters:
                waiting = waiters.get((topic, qid))
                if waiting:
                    keep = []
                    for w in waiting:
                        if w.offset < hi:
                            self._answer_waiter(w, hi, False)
                        else:
                            keep.append(w)
                    waiters[(topic, qid)] = keep
        self._touched.clear()
        self.publisher.queue_offsets(items)

    def _publish_counters(self) -> None:
        """Counters for the monitor: messages and bytes in per topic and in total, busy rejections."""
        if not self._counts and not self._busy:
            return
        store = self.store
        msgs = sum(m for m, _ in self._counts.values())
        nbytes = sum(b for _, b in self._counts.values())
        flushed = store.group_commit.flushed_offset if store.group_commit else -1
        self.publisher.counters({t: (m, b) for t, (m, b) in self._counts.items()}, msgs, nbytes, self._busy,
                                store.commitlog.max_offset, flushed)
        self._counts.clear()
        self._busy = 0

    # ------------------------------------------------------------------ long polling

    def _register_waiter(self, c: Client, pw: P.PullWait, now: int) -> None:
        hi = self.store.get_max_offset_in_queue(pw.topic, pw.queue_id)
        if hi > pw.offset or pw.timeout_ms == 0:
            c.out.append((P.WAKE, P.encode_wake(pw.req_id, hi, hi <= pw.offset)))
            return
        w = PullWaiter(c, pw.req_id, pw.offset, now + pw.timeout_ms * 1_000_000)
        self.waiters.setdefault((pw.topic, pw.queue_id), []).append(w)

    def _answer_waiter(self, w: PullWaiter, max_offset: int, timed_out: bool) -> None:
        if w.client.alive:
            w.client.out.append((P.WAKE, P.encode_wake(w.req_id, max_offset, timed_out)))

    def _expire_waiters(self, now: int) -> None:
        for (topic, qid), waiting in list(self.waiters.items()):
            keep = []
            for w in waiting:
                if not w.client.alive:
                    continue
                if now >= w.deadline_ns:
                    self._answer_waiter(w, self.store.get_max_offset_in_queue(topic, qid), True)
                else:
                    keep.append(w)
            if keep:
                self.waiters[(topic, qid)] = keep
            else:
                del self.waiters[(topic, qid)]

    # ------------------------------------------------------------------ control plane

    def _serve_control(self) -> int:
        n = 0
        while n < 32:
            try:
                req = self.control.recv_request(0)
            except ControlProtocolError as e:
                log.warning("dropped a malformed control message: %s", e)
                n += 1
                continue
            if req is None:
                break
            n += 1
            try:
                if isinstance(req, Attach):
                    body = self._attach(req)
                elif isinstance(req, Detach):
                    c = self.clients.get(req.client_id)
                    if c is not None:
                        self._drop(c, None)
                    body = {}
                else:
                    body = admin.handle(self, req.client_id, req.command, req.args)
                reply = Reply(req.client_id, req.req_id, True, body)
            except (ValueError, ShmqError, OSError, sysv_ipc.Error, posix_ipc.Error) as e:
                reply = Reply(req.client_id, req.req_id, False, {"error": f"{type(e).__name__}: {e}"})
            try:
                self.control.send_reply(reply, timeout=0.5)
            except Exception as e:
                log.warning("could not answer client %d: %s", req.client_id, e)
        return n

    def _attach(self, req: Attach) -> dict:
        if req.client_id in self.clients:
            raise ValueError(f"client id {req.client_id} is already attached")
        rb = req.ring_bytes
        if not MIN_RING_BYTES <= rb <= MAX_RING_BYTES or rb & (rb - 1):
            raise ValueError(f"ring_bytes must be a power of two in {MIN_RING_BYTES}..{MAX_RING_BYTES}, got {rb}")
        watch = Watch(req.alive_key)
        if not watch.is_alive():
            raise ValueError(f"client {req.client_id}: liveness semaphore {req.alive_key:#x} is not held")
        shm.unlink_segment(channel_name(self.name, req.client_id))  # a dead client's, with a recycled id
        try:
            posix_ipc.unlink_semaphore(client_bell_name(self.name, req.client_id))
        except posix_ipc.ExistentialError:
            pass
        channel = Channel.create(self.name, req.client_id, rb, self.bell)
        info = req.info or {}
        c = Client(req.client_id, req.pid, str(info.get("role", "producer")), info.get("group"), channel, watch, now_ms())
        self.clients[req.client_id] = c
        self._rebuild_park_flags()
        self.publish_clients()
        log.info("client %d (pid %d, %s %s) attached", c.client_id, c.pid, c.role, c.group or "")
        return {"channel": channel.segment.name, "store_dir": self.store_dir, "store_host": self._store_host}

    def _check_liveness(self) -> None:
        for c in list(self.clients.values()):
            if not c.watch.is_alive():
                self._serve_channel(c, time.monotonic_ns())  # what it published before dying is sent
                if c.alive:
                    self._drop(c, "client died", remove_liveness=True)

    def _drop(self, c: Client, reason: str | None, remove_liveness: bool = False) -> None:
        """Reclaim a client's channel: detach (reason None), death, or a malformed frame."""
        if reason is None:
            log.info("client %d (pid %d) detached", c.client_id, c.pid)
        else:
            log.warning("dropping client %d (pid %d): %s", c.client_id, c.pid, reason)
        self._release_client(c, remove_liveness)
        changed = self.consumers.remove_client(c.client_id)
        if changed:
            self.publish_groups()
        self.publish_clients()

    def _release_client(self, c: Client, remove_liveness: bool) -> None:
        c.alive = False
        c.out.clear()
        self.clients.pop(c.client_id, None)
        self._rebuild_park_flags()
        c.channel.close()
        c.channel.unlink()
        if remove_liveness:
            c.watch.remove()

    # ------------------------------------------------------------------ publishing

    def queue_offsets(self, topic: str, qid: int) -> tuple[int, int]:
        return self.store.get_min_offset_in_queue(topic, qid), self.store.get_max_offset_in_queue(topic, qid)

    def _persist_topics(self) -> None:
        try:
            self.topics.persist()
        except OSError as e:  # stays dirty: the next tick tries again
            log.error("writing topics.json failed: %s", e)

    def update_topic(self, name: str, read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None, persist: bool = True) -> TopicConfig:
        """Create or change a topic and publish it; if the state segment is full the change is undone
        (ValueError), so one client's topic never takes the broker down. ``persist=False``: the
        loop writes topics.json within FILL_NS (auto-created topics)."""
        old = self.topics.get(name)
        tc = self.topics.create_or_update(name, read_queue_nums, write_queue_nums, perm, persist)
        try:
            self.publish_topics()
        except ValueError:
            if old is None:
                self.topics.delete(name)
            else:
                self.topics.create_or_update(name, old.read_queue_nums, old.write_queue_nums, old.perm)
            raise
        return tc

    def publish_topics(self) -> None:
        self.publisher.topics(self.topics.topics, self.queue_offsets, self.offsets.offsets)

    def publish_groups(self) -> None:
        self.publisher.groups(self.consumers.groups, self.offsets.offsets)
        self.publish_clients()

    def publish_clients(self) -> None:
        self.publisher.clients((c.client_id, c.role, c.pid, c.watch.key, c.group, c.attached_ms)
                               for c in self.clients.values())

    def _publish_fill(self) -> None:
        if self.clients:
            self.publisher.client_fill({c.client_id: (c.channel.requests.used(), c.channel.responses.used())
                                        for c in self.clients.values()})


def _next_spin(gap_ns: int) -> int:
    """Spin window after an idle gap of ``gap_ns``: cover the next one if gaps are short."""
    return min(SPIN_MAX_NS, max(SPIN_MIN_NS, 2 * gap_ns)) if gap_ns < SPIN_MAX_NS else SPIN_MIN_NS


class _Routes:
    """Where the sends of one frame or pass go: each topic resolved once (auto-created when
    allowed), and one queue per topic for the sends that leave the choice to the broker
    (round robin over frames and passes)."""

    def __init__(self, resolve: Callable[[str], tuple[TopicConfig | None, int, str]]) -> None:
        self._resolve = resolve
        self._topics: dict[str, list] = {}  # name -> [TopicConfig or None, code, reason, queue for -1]

    def route(self, topic: str, queue_id: int) -> tuple[int, int, str]:
        """(queue id, 0, "") for a send to ``queue_id`` (-1: the broker picks), else (-1, code, reason)."""
        t = self._topics.get(topic)
        if t is None:
            t = self._topics[topic] = [*self._resolve(topic), None]
        tc, code, reason, auto = t
        if tc is None:
            return -1, code, reason
        if queue_id < 0:
            if auto is None:
                auto = t[3] = tc.next_queue()
            queue_id = auto
        if queue_id >= tc.write_queue_nums:
            return -1, P.SYSTEM_ERROR, (f"queue id {queue_id} is illegal: topic {topic!r} has "
                                        f"{tc.write_queue_nums} write queues")
        return queue_id, 0, ""


def _encoded(r: P.SendResultFrame | P.SendMultiResultFrame) -> tuple[int, bytes]:
    """An answer as a response frame (kind, payload)."""
    if isinstance(r, P.SendMultiResultFrame):
        return P.SEND_MULTI_RESULT, P.encode_send_multi_result(r)
    return P.SEND_RESULT, P.encode_send_result(r)


class _Run:
    """The SENDs of one pass (any topics and queues), gathered straight from the ring frames."""

    __slots__ = ("raws", "qids", "req_ids", "flags", "records", "tags", "keys")

    def __init__(self) -> None:
        self.raws: list[bytes] = []  # topic bytes as framed
        self.qids: list[int] = []  # as requested (-1: the broker picks)
        self.req_ids: list[int] = []
        self.flags: list[int] = []
        self.records: list[memoryview] = []
        self.tags: list[int] = []
        self.keys: list[tuple[int, ...]] = []

    def subset(self, rows: list[int]) -> _Run:
        part = _Run()
        for name in self.__slots__:
            src = getattr(self, name)
            setattr(part, name, [src[i] for i in rows])
        return part

    def batch(self) -> fmt.EncodedBatch:
        """The run as one batch: one copy of the records, dispatch data as arrays."""
        records, keys = self.records, self.keys
        n = len(records)
        starts = np.fromiter(accumulate(map(len, records), initial=0), np.int64, n + 1)[:-1]
        counts = list(map(len, keys))
        key_hashes = np.fromiter(chain.from_iterable(keys), np.int64, sum(counts))
        key_records = np.repeat(np.arange(n, dtype=np.int64), counts)
        return fmt.EncodedBatch(b"".join(records), starts, np.array(self.tags, np.int64), key_hashes, key_records)


def _remove_queue(key: int) -> None:
    try:
        sysv_ipc.MessageQueue(key).remove()
    except sysv_ipc.ExistentialError:
        pass


def _raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every consume-queue segment holds a descriptor
    (RocketMQ's deployment guide asks for ulimit -n 655350 for the same reason)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_broker(store_dir: str, name: str = "default", config: Any = None) -> int:
    """Entry point of `shmq broker`: serve until SIGTERM/SIGINT; exit status 0, or 2 on a start error."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s broker[{name}] %(levelname)s %(message)s")
    _raise_open_file_limit()
    try:
        controller = BrokerController(store_dir, name, config).start()
    except (ShmqError, ValueError, OSError) as e:
        print(f"shmq broker: error: {e}", file=sys.stderr)
        return 2
    log.info("serving store %s as broker %r (pid %d, %s)", controller.store_dir, name, os.getpid(),
             controller.config.flush_disk_type)
    controller.serve_forever()
    return 0
