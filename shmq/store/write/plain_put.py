"""The plain put: one compiled pass for the usual put (a MessageBatch or a run of sends to one
queue that no hook changes), with today's path as its reference.

``MessageStore.put`` runs hooks, then ``LogWriter.put`` (measure, commitlog append,
consume-queue and index dispatch): some 50 Python steps per put. For a put of one queue whose
hooks each say they would pass it unchanged (``PutHook.plain_lane``) and whose files have the
room reserved, ``take`` hands the records to ``put_plain`` (compiled in
``shmq._speedups._store``), which checks what RecordCheck checks, copies, patches, writes the
consume-queue and index entries in the reference's write order; ``take`` moves the files' ends
and the writer publishes them as its ``put`` does. Whenever the reference could do anything else
(a refusal, a hook that acts, a roll, a reservation, a new queue, a missing CRC), nothing is
written and the put takes the reference path: same bytes, same result, same errors.

``take_frame`` is the same lane for a SEND_BATCH frame still in the client's request ring
(``put_frame``): the broker skips the decode and the private copy of the frame, the records
are copied once, into the commitlog, and checked there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.store.consume_queue import MAX_QUEUE_ID
from shmq.store.write.hooks import PutHook, PutRequest

if TYPE_CHECKING:
    from shmq.store.write.log_writer import LogWriter


def put_plain(
    buf: Any,
    starts: np.ndarray,
    tags: np.ndarray,
    key_hashes: np.ndarray,
    key_records: np.ndarray,
    topic: bytes,
    max_body: int,
    max_record: int,
    user_batch: bool,
    cl_mm: Any,
    cl_pos: int,
    cl_from: int,
    cl_limit: int,
    qid: int,
    qoff: int,
    ts: int,
    host: int,
    cq_mm: Any,
    cq_pos: int,
    cq_limit: int,
    idx_mm: Any,
    slot_num: int,
    entry_base: int,
    idx_count: int,
    begin_ts: int,
    slots_used: int,
    idx_limit: int,
    end_phys: int,
    phys_out: np.ndarray,
) -> int:
    """Write a plain put in one pass and return the index slots it newly used, or -1 (nothing
    written) when the reference path must take it. The reference is today's path itself, so
    this Python twin always answers -1."""
    return -1


put_plain = _speedups.pick("_store", "put_plain", put_plain)
ENABLED = put_plain is not _speedups.reference("_store", "put_plain")


def put_frame(payload: Any, arrays: np.ndarray, topic: bytes, max_body: int, max_record: int, *room: Any) -> int:
    """``put_plain`` for the records of a SEND_BATCH frame still in the client's request ring
    (``payload``; its arrays as ``send_batch_arrays`` copied them; ``room``: ``put_plain``'s
    arguments from ``cl_mm`` on): the index slots newly used, or -1 / -2 with nothing written.
    The reference is the frame's decode and today's put path, so this twin always answers -1."""
    return -1


put_frame = _speedups.pick("_store", "put_frame", put_frame)
FRAME_ENABLED = put_frame is not _speedups.reference("_store", "put_frame")


def lane_open(req: PutRequest, hooks: list[PutHook]) -> bool:
    """Whether ``req`` may try the plain lane: one topic, one queue id in range, nothing for the
    hooks to read, and every hook saying it would pass the put untouched."""
    q = req.queue_ids
    return (
        req.inspect is None
        and req.topic_idx is None
        and type(q) is int
        and len(req.topics) == 1
        and req.refused is None
        and 0 <= q <= MAX_QUEUE_ID
        and all(hook.plain_lane(req) for hook in hooks)
    )


def take(writer: LogWriter, req: PutRequest) -> tuple[np.ndarray, int, int] | None:
    """Store ``req`` (``lane_open``) through ``put_plain``; (phys offsets, first queue offset, store
    timestamp), or None with nothing written. The caller holds the put lock and publishes."""
    b = req.batch
    q = req.queue_ids
    assert type(q) is int
    topic_b = req.topics[0].encode("ascii", "replace")
    user, max_record = req.user_batch, -1 if req.user_batch else writer.max_record

    def write(keys: bool, room: tuple[Any, ...]) -> int:
        kh, kr = (b.key_hashes, b.key_records) if keys else (_EMPTY, _EMPTY)
        return put_plain(b.buf, b.starts, b.tags_codes, kh, kr, topic_b, writer.max_body, max_record, user, *room)

    phys = np.empty(len(b.starts), np.int64)
    return _lane(writer, req.topics[0], q, len(b.buf), len(b.key_hashes), phys, write)


def take_frame(
    writer: LogWriter, topic: str, q: int, payload: memoryview, arrays: np.ndarray, size: int, phys: np.ndarray
) -> tuple[np.ndarray, int, int] | None:
    """Store the records of a SEND_BATCH frame (``arrays``: its columns, checked; ``size`` bytes
    of records, one phys offset per record in ``phys``) through ``put_frame``, a user's batch to
    queue ``q`` (in range) of ``topic``; as ``take``."""
    topic_b = topic.encode("ascii", "replace")

    def write(keys: bool, room: tuple[Any, ...]) -> int:
        return put_frame(payload, arrays, topic_b, writer.max_body, -1, *room)

    return _lane(writer, topic, q, size, (len(arrays) - 2 * len(phys)) // 2, phys, write)


def _lane(
    writer: LogWriter,
    topic: str,
    q: int,
    size: int,
    nkeys: int,
    phys: np.ndarray,
    write: Callable[[bool, tuple[Any, ...]], int],
) -> tuple[np.ndarray, int, int] | None:
    """The files' state handed to ``write`` (with whether keys go to the index), then their ends
    moved as the reference moves them; None with nothing written."""
    if not writer.dispatchers_plain():
        return None
    d = writer.dispatchers
    index = writer.index
    cl = writer.commitlog
    cq = writer.queues.get((topic, q))
    if cl.write_through or cq is None or not cl.queue.files or not cq.queue.files:
        return None
    keys = bool(nkeys) and len(d) == 2 and index is not None  # no index: no keys dispatched
    n = len(phys)
    mf, cmf = cl.queue.files[-1], cq.queue.files[-1]
    if mf.is_full:
        return None
    ts = cl.next_store_timestamp()
    emptied = _attempt(cl, mf, cmf, cq.max_offset, ts, index if keys else None, nkeys if keys else 0, q, phys, write)
    # -2: valid so far, but a file lacks reserved room (or there is no writable index file). The
    # reference path reserves (a chunk at a time, so rarely) and, unlike a reservation made here,
    # only after its own checks: a put it refuses leaves no new chunk or index file behind.
    if emptied < 0:
        return None
    qoff = cq.max_offset
    # the files' ends, as the reference moves them (the index's: in _attempt); the writer publishes
    mf.wrote_position += size
    allocator = writer.allocator
    if mf.wrote_position >= mf.warm_mark:
        allocator.keep_ahead(mf)
    end = int(phys[0]) + size
    cmf.wrote_position = qoff * fmt.CQ_ENTRY_SIZE - cmf.file_from_offset + n * fmt.CQ_ENTRY_SIZE
    cq.max_offset = qoff + n
    cq.max_phys_end = end
    # the next puts' room, reserved off this thread before they need it
    allocator.keep_reserved(mf, cmf, index.newest_writable() if keys and index is not None else None)
    return phys, qoff, ts


def _attempt(
    cl: Any,
    mf: Any,
    cmf: Any,
    qoff: int,
    ts: int,
    index: Any,
    nkeys: int,
    q: int,
    phys: np.ndarray,
    write: Callable[[bool, tuple[Any, ...]], int],
) -> int:
    """One call of ``write`` with the files' current state, the index's lock held around it."""
    idx_mm, slot_num, entry_base, count, begin_ts, used, limit, end_phys = None, 0, 0, 0, 0, 0, 0, -1
    f = None
    if index is not None:
        index.lock.acquire()  # what IndexService.put_batch holds: queries never see a put half done
    try:
        if index is not None:
            f = index.newest_writable()
            if f is None:  # none yet, or full: the reservation makes the next
                return -2
            idx_mm, slot_num, entry_base, count, begin_ts, used, limit = f.plain_state()
            end_phys = f.end_phys_offset if count else index.end_phys_offset
        emptied = write(
            index is not None,
            (
                mf.mm,
                mf.wrote_position,
                mf.file_from_offset,
                min(mf.size - fmt.MIN_BLANK, mf.reserved_position),
                q,
                qoff,
                ts,
                cl.store_host,
                cmf.mm,
                qoff * fmt.CQ_ENTRY_SIZE - cmf.file_from_offset,
                min(cmf.size, cmf.reserved_position),
                idx_mm,
                slot_num,
                entry_base,
                count,
                begin_ts,
                used,
                limit,
                end_phys,
                phys,
            ),
        )
        if emptied >= 0 and f is not None:
            f.note_plain(nkeys, emptied)
        return emptied
    finally:
        if index is not None:
            index.lock.release()


_EMPTY = np.empty(0, np.int64)
