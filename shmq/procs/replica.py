"""The replica process: a broker in role SLAVE that serves consumers plus the HA client thread.

Consumers attach, pull through the files, long-poll and commit offsets exactly as on a master
(the same ``BrokerController`` and loop); producers are refused at attach (the control plane).
The HA client thread writes the store; what the loop must do about it (publish the max offsets
of the queues that grew and wake their long polls, take the master's topics, merge its
consumer offsets) waits in a ``ReplicaInbox`` that the loop drains once per pass (the hook in
``BrokerController._pass``), and the client rings the broker's doorbell so a parked loop wakes
at once.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from shmq.broker.core import BrokerCore
from shmq.broker.groups import parse_offsets
from shmq.broker.health import ReplicaHealth
from shmq.broker.topics import TopicConfig, topic_from_json
from shmq.ha import protocol
from shmq.ha.client import HAClient
from shmq.ha.served_as import record_served_name
from shmq.ha.token import replica_token
from shmq.procs.broker import BrokerController, run_broker
from shmq.procs.control_plane import SERVICE_NOT_AVAILABLE, replica_refusal
from shmq.ring.doorbell import Doorbell
from shmq.store.config_files import parse_json, write_json
from shmq.store.write.hooks import PutRequest
from shmq.store.write.replicated import ReplicaAppender

log = logging.getLogger("shmq.broker")


class ReplicaInbox:
    """The HA client thread's hand-over to the broker loop (``Sink``); ``pending`` is a plain flag
    the loop checks in its idle polls without taking the lock."""

    def __init__(self, bell: Doorbell) -> None:
        self._bell = bell
        self._lock = threading.Lock()
        self._touched: dict[tuple[str, int], None] = {}
        self._all = False
        self._meta: dict[int, bytes] = {}  # kind -> newest text
        self._rang = False
        self.pending = False

    # ------------------------------------------------------------------ client thread

    def touched(self, queues: list[tuple[str, int]]) -> None:
        with self._lock:
            self._touched.update(dict.fromkeys(queues))
            self.pending = True

    def truncated(self) -> None:
        with self._lock:
            self._all = True
            self.pending = True

    def metadata(self, kind: int, text: bytes) -> None:
        with self._lock:
            self._meta[kind] = text
            self.pending = True

    def wake(self) -> None:
        """Ring the broker once per hand-over the loop has not taken yet."""
        with self._lock:
            if not self.pending or self._rang:
                return
            self._rang = True
        try:
            self._bell.ring()
        except Exception as e:  # noqa: BLE001 - the bell rotated under us: the loop's 20 ms park still finds the work
            log.debug("ringing the broker doorbell failed: %s", e)

    # ------------------------------------------------------------------ loop thread

    def apply(self, core: BrokerCore) -> int:
        """Act on everything handed over since the last pass; the number of items."""
        with self._lock:
            touched, self._touched = self._touched, {}
            every, self._all = self._all, False
            meta, self._meta = self._meta, {}
            self.pending = self._rang = False
        if protocol.META_TOPICS in meta:
            _mirror_topics(core, meta[protocol.META_TOPICS])
        if every:
            touched.update(dict.fromkeys((cq.topic, cq.queue_id) for cq in core.store.consume_queues()))
        if touched:
            _note_queues(core, touched)
        if protocol.META_OFFSETS in meta:
            _merge_offsets(core, meta[protocol.META_OFFSETS])
        for kind, name in protocol.PROGRESS_FILES.items():
            if kind in meta:
                _keep_progress(core, name, meta[kind])
        return len(touched) + len(meta) + every


def _note_queues(core: BrokerCore, touched: dict[tuple[str, int], None]) -> None:
    """Queues that grew: known to the topic table (a topic the master created since its last
    topics.json gets an entry as a rebuilt one would), then published and their polls woken by
    the core's end of pass."""
    n = core.config.default_topic_queue_nums
    for topic, qid in touched:
        tc = core.topics.get(topic)
        if tc is None or qid >= max(tc.read_queue_nums, tc.write_queue_nums):
            size = max(n, qid + 1, tc.read_queue_nums if tc else 0)
            try:
                core.update_topic(topic, size, size, persist=False)
            except ValueError as e:
                log.error("topic %r of the master's log cannot be served: %s", topic, e)
        core.count(topic, qid, 0, 0)


def _mirror_topics(core: BrokerCore, text: bytes) -> None:
    """The master's topics.json becomes the replica's topic table (written and published)."""
    try:
        table = parse_json(text)["topicConfigTable"]
        wanted: dict[str, TopicConfig] = {name: topic_from_json(name, e) for name, e in table.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # AttributeError: a table that is no object
        log.error("the master's topics.json was not used: %s", e)
        return
    topics = core.topics
    changed = False
    for name in [n for n in topics.topics if n not in wanted]:
        changed |= topics.delete(name)
    for name, tc in wanted.items():
        old = topics.get(name)
        if old is None or (old.read_queue_nums, old.write_queue_nums, old.perm, old.order) != (
            tc.read_queue_nums,
            tc.write_queue_nums,
            tc.perm,
            tc.order,
        ):
            topics.create_or_update(
                name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, persist=False, order=tc.order
            )
            changed = True
    if changed:
        try:
            core.publish_topics()
        except ValueError as e:
            log.error("the master's topics do not fit this replica's state segment: %s", e)
        core.persist_topics()
        log.info("topic table mirrored from the master: %d topics", len(wanted))


def _merge_offsets(core: BrokerCore, text: bytes) -> None:
    """The master's consumer offsets, merged by max per (group, topic, queue): a group that fails
    over here resumes where it was, and this replica's own consumers' commits are kept."""
    try:
        offsets = parse_offsets(parse_json(text))
    except (ValueError, TypeError) as e:
        log.error("the master's consumerOffset.json was not used: %s", e)
        return
    mine = core.offsets.offsets
    n = 0
    for (group, topic, qid), offset in offsets.items():
        if offset > mine.get((group, topic, qid), -1):
            try:
                core.commit_offset(group, topic, qid, offset)
            except ValueError as e:
                log.warning("master's offset of %s %s[%d] not taken: %s", group, topic, qid, e)
                continue
            n += 1
    if n:
        core.persist_offsets()


def _keep_progress(core: BrokerCore, name: str, text: bytes) -> None:
    """A progress file of the master's timed services (delays delivered, timers, transaction
    checks, dead letters resent) kept as this replica's own: a replica runs none of them, but
    once promoted (started as a master on this store) they resume from it instead of delivering
    every parked message again. Written without fsync (it arrives every second it changes); its
    loaders cut progress that runs past this store's queues."""
    try:
        data = parse_json(text)
    except ValueError as e:
        log.error("the master's %s was not kept: %s", name, e)
        return
    try:
        write_json(os.path.join(core.store.store_dir, "config", name), data, durable=False)
    except OSError as e:
        log.error("keeping the master's %s failed: %s", name, e)


class ReadOnly:
    """A put hook refusing every put: the replica's log is the master's, byte for byte, so nothing
    may be written into it locally (a consumer's send-back of a failed message included)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def plain_lane(self, req: PutRequest) -> bool:
        return False

    def before_put(self, req: PutRequest) -> None:
        req.refuse(None, SERVICE_NOT_AVAILABLE, self.reason)


class ReplicaController(BrokerController):
    """A BrokerController in role SLAVE with the HA client following its master."""

    def start(self) -> ReplicaController:
        """The master's token is found first (no token: the start is refused in one line, before
        the store opens); the name served is recorded in the store for ``shmq admin promote``."""
        token = replica_token(self.store_dir, self.config)
        super().start()
        assert self.store is not None
        log.info("the master must prove the HA token (%s)", token.source)
        record_served_name(self.store_dir, self.name, self.config.ha_master_address)
        self.store.put_hooks.append(ReadOnly(replica_refusal(self.name, self.config)))
        self.follower = ReplicaInbox(self.bell)
        self.ha_client = HAClient(
            ReplicaAppender(self.store.writer, self.store.checkpoint),
            self.config,
            self.name,
            token.secret,
            self.follower,
        )
        self.ha_client.start()
        return self

    def replication_health(self) -> ReplicaHealth:
        """This replica's log end against the master's as last heard."""
        client = getattr(self, "ha_client", None)
        master = int(client.stats["master_max"]) if client is not None else -1
        assert self.store is not None
        own = self.store.commitlog.max_offset
        return ReplicaHealth(0, 0, own, max(master, own) if master >= 0 else -1)

    def shutdown(self) -> None:
        """The HA client stops writing before the store closes."""
        client = getattr(self, "ha_client", None)
        if client is not None:
            client.stop()
        super().shutdown()


def run_replica(store_dir: str, name: str = "default", config: Any = None) -> int:
    """Entry point of `shmq replica` (and of `shmq broker` with brokerRole=SLAVE)."""
    return run_broker(store_dir, name, config, ReplicaController)
