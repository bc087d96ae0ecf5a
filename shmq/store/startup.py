"""The recovery sequence ``MessageStore.start`` runs on a store directory (RocketMQ's
DefaultMessageStore.load and recover); the re-dispatch itself is the writer's third door
(``LogWriter.redispatch``), which a recovery that a full disk cut short finishes later.

Kept apart from the store's write path because its order is the point: consume queues are opened
before the commitlog's end is known, cut back to that end, checked against the queue table for
entries they lost, and only then filled again from the log, damaged queues rebuilt from its
start. The steps themselves are in ``shmq.store.recovery``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from shmq.codec import record as fmt
from shmq.errors import DiskFullError
from shmq.store import recovery
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.consume_queue import queue_id_of
from shmq.store.index_file import IndexService
from shmq.store.write.log_writer import LogWriter, QueueKey

if TYPE_CHECKING:
    from shmq.store.message_store import MessageStore

log = logging.getLogger(__name__)


def load_and_recover(store: MessageStore) -> None:
    """Open the store's files and bring them in line with the commitlog (before any put)."""
    cfg = store.config
    abnormal = os.path.exists(store.abort_path)
    cq_dir = os.path.join(store.store_dir, "consumequeue")
    index_dir = os.path.join(store.store_dir, "index")
    cq_lost = not os.path.isdir(cq_dir)
    index_lost = not os.path.isdir(index_dir)
    store.checkpoint = StoreCheckpoint(os.path.join(store.store_dir, "checkpoint"))
    writer = store.writer
    store.commitlog.queue.load()
    queues = writer.queues
    damaged = _load_consume_queues(writer, cq_dir)
    if cfg.message_index_enable:
        index = IndexService(index_dir, cfg.max_hash_slot_num, cfg.max_index_num)
        index.before_new_file = store.space.check_new_file
        writer.attach_index(index)
    end, last_ts = recovery.recover_commitlog(
        store.commitlog, abnormal, store.checkpoint.min_timestamp(store.index is not None)
    )
    writer.publish(end, last_ts)
    for cq in queues.values():
        cq.recover()
        cq.truncate_dirty(end)
    if store.commitlog.damaged:
        recovery.blank_damaged_entries(queues.values(), store.commitlog.damaged)
    if store.index is not None:
        store.index.truncate(end)
    expected = recovery.expected_queue_ends(store.store_dir, store.commitlog)
    short = recovery.short_queues({k: cq.max_offset for k, cq in queues.items()}, expected)
    if not cq_lost:
        damaged.update(short)
    elif short:  # the re-dispatch below starts at the log's min offset: it rebuilds them, once
        recovery.log_damaged(set(short))
    start = recovery.redispatch_start(
        store.commitlog,
        queues.values(),
        store.index,
        store.checkpoint,
        abnormal,
        cq_lost or (store.index is not None and index_lost),
    )
    try:
        damaged.update(writer.redispatch(start))
        if cq_lost and short:
            recovery.continue_rebuilt([queues[k] for k in short if k in queues], expected)
        if damaged:
            recovery.log_damaged(damaged)
            for key in damaged:
                writer.queue(*key).reset()
            start = store.commitlog.min_offset  # a rebuild cut short by the disk goes on from here
            writer.redispatch(start, damaged)
            recovery.continue_rebuilt([queues[k] for k in sorted(damaged)], expected)
    except DiskFullError as e:  # start anyway: reads serve what is dispatched, writes wait for space
        store.space.refused(e)
        writer.redispatch_from = start
        log.error(
            "disk full during recovery (%s): consume queues and index are not complete past commitlog "
            "offset %d; the store starts refusing writes and finishes recovery once space is freed",
            e,
            start,
        )
    for cq in queues.values():
        cq.delete_expired(store.commitlog.min_offset)
    store.queue_table.write(store.consume_queues(), force=True)


def _load_consume_queues(writer: LogWriter, cq_dir: str) -> set[QueueKey]:
    """Open every consume queue; the ones whose files were unusable (removed, to rebuild)."""
    damaged: set[QueueKey] = set()
    if not os.path.isdir(cq_dir):
        return damaged
    for topic in sorted(os.listdir(cq_dir)):
        tdir = os.path.join(cq_dir, topic)
        if not os.path.isdir(tdir) or not fmt.TOPIC_PATTERN.match(topic):
            continue
        for name in sorted(os.listdir(tdir)):
            qid = queue_id_of(name)
            if qid is not None:
                cq = writer.open_queue(topic, qid)
                if not cq.load():
                    damaged.add((topic, qid))
                writer.queues[(topic, qid)] = cq
    return damaged
