"""The recovery sequence ``MessageStore.start`` runs on a store directory (RocketMQ's
DefaultMessageStore.load and recover), and the re-dispatch it shares with a recovery that a full
disk cut short.

Kept apart from the store's write path because its order is the point: consume queues are opened
before the commitlog's end is known, cut back to that end, checked against the queue table for
entries they lost, and only then filled again from the log, damaged queues rebuilt from its
start. The steps themselves are in ``shmq.store.recovery``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from shmq.codec import record as fmt
from shmq.errors import DiskFullError
from shmq.store import recovery
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.dispatch import DispatchRequest, IndexDispatcher, queue_id_of, requests_from_log
from shmq.store.index_file import IndexService

if TYPE_CHECKING:
    from shmq.store.message_store import MessageStore

log = logging.getLogger(__name__)
QueueKey = tuple[str, int]


def load_and_recover(store: MessageStore) -> None:
    """Open the store's files and bring them in line with the commitlog (before any put)."""
    cfg = store.config
    abnormal = os.path.exists(store.abort_path)
    cq_dir = os.path.join(store.store_dir, "consumequeue")
    index_dir = os.path.join(store.store_dir, "index")
    cq_lost = not os.path.isdir(cq_dir)
    index_lost = not os.path.isdir(index_dir)
    store.checkpoint = StoreCheckpoint(os.path.join(store.store_dir, "checkpoint"))
    store.commitlog.queue.load()
    queues = store._queues
    damaged = _load_consume_queues(store, cq_dir)
    if cfg.message_index_enable:
        store.index = IndexService(index_dir, cfg.max_hash_slot_num, cfg.max_index_num)
        store.index.before_new_file = store.space.check_new_file
        store.dispatchers.append(IndexDispatcher(store.index))
    end = recovery.recover_commitlog(store.commitlog, abnormal, store.checkpoint.min_timestamp(store.index is not None))
    for cq in queues.values():
        cq.recover()
        cq.truncate_dirty(end)
    if store.commitlog.damaged:
        recovery.blank_damaged_entries(queues.values(), store.commitlog.damaged)
    if store.index is not None:
        store.index.truncate(end)
    expected = recovery.expected_queue_ends(store.store_dir, store.commitlog)
    damaged.update(recovery.short_queues({k: cq.max_offset for k, cq in queues.items()}, expected))
    start = recovery.redispatch_start(
        store.commitlog,
        queues.values(),
        store.index,
        store.checkpoint,
        abnormal,
        cq_lost or (store.index is not None and index_lost),
    )
    try:
        damaged.update(redispatch(store.commitlog, start, store._queue, store._dispatch))
        if damaged:
            recovery.log_damaged(damaged)
            for key in damaged:
                store._queue(*key).reset()
            start = store.commitlog.min_offset  # a rebuild cut short by the disk goes on from here
            redispatch(store.commitlog, start, store._queue, store._dispatch, damaged)
            recovery.continue_rebuilt([queues[k] for k in sorted(damaged)], expected)
    except DiskFullError as e:  # start anyway: reads serve what is dispatched, writes wait for space
        store.space.refused(e)
        store._redispatch_from = start
        log.error(
            "disk full during recovery (%s): consume queues and index are not complete past commitlog "
            "offset %d; the store starts refusing writes and finishes recovery once space is freed",
            e,
            start,
        )
    for cq in queues.values():
        cq.delete_expired(store.commitlog.min_offset)
    store.queue_table.write(store.consume_queues(), force=True)


def _load_consume_queues(store: MessageStore, cq_dir: str) -> set[QueueKey]:
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
                cq = ConsumeQueue(store.store_dir, topic, qid, store.config.mapped_file_size_consume_queue)
                cq.queue.before_new_file = store.space.check_new_file
                if not cq.load():
                    damaged.add((topic, qid))
                store._queues[(topic, qid)] = cq
    return damaged


def redispatch(
    commitlog: CommitLog,
    start: int,
    queue: Callable[[str, int], ConsumeQueue],
    dispatch: Callable[[DispatchRequest], None],
    only: set[QueueKey] | None = None,
) -> set[QueueKey]:
    """Dispatch the records from ``start`` (only those of the queues ``only``); returns the
    queues that had a gap: a record past the queue's end although the log before ``start``
    is dispatched, so the queue lost entries (from the log's min offset a gap is normal:
    cleanup removed the records before it)."""
    count = 0
    gaps: set[QueueKey] = set()
    check = start > commitlog.min_offset
    for req in requests_from_log(recovery.decoded_records(commitlog, start, only), queue):
        if check and req.queues:
            cq = req.queues[0]
            assert isinstance(cq, ConsumeQueue)
            if req.first_queue_offsets[0] > cq.max_offset:
                gaps.add((cq.topic, cq.queue_id))
        dispatch(req)
        count += len(req.phys_offsets)
    if count:
        log.info("re-dispatched %d records from commitlog offset %d", count, start)
    return gaps
