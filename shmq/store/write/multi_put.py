"""The put over many queues through the queue table: a SEND_MULTI of 256 topics in three calls.

``LogWriter._write`` groups a put of many queues by queue (``group_by_queue``), finds each
queue's ConsumeQueue, reserves, reads each max offset, appends, and dispatches queue by queue:
with 10,000 queues each record is its own group and every step touches the queue's cold
Python objects. ``take`` does the same put with the queues' rows of ``writer.queue_slots``
(``shmq.store.queue_slots``): ``plan`` gives each record its row and queue offset, the
commitlog append is the usual one, ``write_entries`` writes the entries through the rows, and
the index dispatcher runs as usual. A queue without a row is adopted into the table first; a
row whose cached file lacks the room is reserved (as ``LogWriter.reserve`` would) and attached again.
Whenever the reference could do anything else (a queue not made yet, an entry that rolls into
the next file, another dispatcher), nothing is written and the put takes the reference path.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.store.queue_slots import FILE_ADDR, FILE_FROM, FILE_LIMIT, MAX_OFFSET, MAX_PHYS_END, PENDING, QueueSlots
from shmq.store.write.dispatch import DispatchRequest
from shmq.store.write.hooks import PutRequest

if TYPE_CHECKING:
    from shmq.store.commitlog import AppendResult
    from shmq.store.write.log_writer import LogWriter

_SLOT = struct.Struct("<i")
_BE_I64 = struct.Struct(">q")
_BE_I32 = struct.Struct(">i")
MAX_QOFF = 1 << 58


def plan(
    tslots: list[bytes | None],
    topic_idx: np.ndarray,
    queue_ids: np.ndarray,
    enters: np.ndarray | None,
    table: np.ndarray,
    slots_out: np.ndarray,
    qoffs_out: np.ndarray,
    spare_out: np.ndarray,
) -> tuple[int, int]:
    """Each record's queue row (``slots_out``; -1 for a record that enters no queue) and queue
    offset (``qoffs_out``: the row's max offset plus the record's rank in its queue; 0 for a
    record that enters none). ``tslots[k]``: the rows of topic k's queue ids, packed int32.
    Returns (0, 0) when every row has the room; (1, m) when rows ``spare_out[:m]`` need a
    reservation or their file attached; (2, m) when records ``spare_out[:m]`` have no row."""
    n = len(topic_idx)
    rows = len(table)
    missing: list[int] = []
    for i in range(n):
        if enters is not None and not enters[i]:
            slots_out[i], qoffs_out[i] = -1, 0
            continue
        k, q = int(topic_idx[i]), int(queue_ids[i])
        s = -1
        packed = tslots[k] if 0 <= k < len(tslots) else None
        if type(packed) is bytes and q >= 0 and (q + 1) * 4 <= len(packed):
            s = _SLOT.unpack_from(packed, q * 4)[0]
        if s < 0 or s >= rows:
            missing.append(i)
            slots_out[i] = -1
            continue
        table[s, PENDING] += 1
        slots_out[i] = s
        qoffs_out[i] = table[s, MAX_OFFSET] + table[s, PENDING] - 1
    if missing:
        for i in range(n):
            if slots_out[i] >= 0:
                table[slots_out[i], PENDING] = 0
        spare_out[: len(missing)] = missing
        return 2, len(missing)
    short: list[int] = []
    for i in range(n):
        s = int(slots_out[i])
        if s < 0 or table[s, PENDING] == 0:
            continue
        start = int(table[s, MAX_OFFSET]) * fmt.CQ_ENTRY_SIZE - int(table[s, FILE_FROM])
        end = start + int(table[s, PENDING]) * fmt.CQ_ENTRY_SIZE
        if (
            table[s, FILE_ADDR] == 0
            or start < 0
            or end > table[s, FILE_LIMIT]
            or table[s, MAX_OFFSET] < 0
            or table[s, MAX_OFFSET] + table[s, PENDING] >= MAX_QOFF
        ):
            short.append(s)
        table[s, PENDING] = 0
    spare_out[: len(short)] = short
    return (1 if short else 0), len(short)


def write_entries(
    slots: np.ndarray,
    qoffs: np.ndarray,
    phys: np.ndarray,
    sizes: np.ndarray,
    tags: np.ndarray,
    table: np.ndarray,
    files: list[Any],
) -> None:
    """The consume-queue entries of the records ``plan`` gave rows, written into each row's
    attached file (``files[slot]``) in ``ConsumeQueue.put``'s order; every entry is checked
    first (ValueError, nothing written, for one outside its file or not its queue's next)."""
    n = len(slots)
    if not len(qoffs) == len(phys) == len(sizes) == len(tags) == n:
        raise ValueError("columns of another length than the records")
    pending: dict[int, int] = {}
    for i in range(n):
        s = int(slots[i])
        if s < 0:
            continue
        if s >= len(table) or s >= len(files):
            raise ValueError(f"record {i}: no queue row {s}")
        pos = int(qoffs[i]) * fmt.CQ_ENTRY_SIZE - int(table[s, FILE_FROM])
        size = int(sizes[i])
        if (
            table[s, FILE_ADDR] == 0
            or pos < 0
            or pos + fmt.CQ_ENTRY_SIZE > table[s, FILE_LIMIT]
            or not 0 <= size <= 0x7FFFFFFF
        ):
            raise ValueError(f"record {i}: its entry is outside its queue's attached file")
        pending[s] = pending.get(s, 0) + 1
        if qoffs[i] != table[s, MAX_OFFSET] + pending[s] - 1:
            raise ValueError(f"record {i}: queue offset {int(qoffs[i])} is not its queue's next")
    for i in range(n):
        s = int(slots[i])
        if s < 0:
            continue
        mf = files[s]
        pos = int(qoffs[i]) * fmt.CQ_ENTRY_SIZE - int(table[s, FILE_FROM])
        view = mf.view
        _BE_I64.pack_into(view, pos, int(phys[i]))
        _BE_I64.pack_into(view, pos + 12, int(tags[i]))
        _BE_I32.pack_into(view, pos + 8, int(sizes[i]))  # last: recovery takes a non-zero size as a whole entry
        mf.wrote_position = pos + fmt.CQ_ENTRY_SIZE
        table[s, MAX_OFFSET] = int(qoffs[i]) + 1
        table[s, MAX_PHYS_END] = int(phys[i]) + int(sizes[i])


plan = _speedups.pick("_slots", "plan", plan)
write_entries = _speedups.pick("_slots", "write_entries", write_entries)
ENABLED = write_entries is not _speedups.reference("_slots", "write_entries")


def take(
    writer: LogWriter, req: PutRequest, sizes: np.ndarray, missing_crc: np.ndarray | None, enters: np.ndarray
) -> tuple[AppendResult, np.ndarray, np.ndarray, int] | None:
    """Store ``req`` (records that passed the hooks, of many queues) through the queue table:
    (the commitlog append, queue offsets, each record's row (-1: it enters no queue), store
    timestamp), or None with nothing written. The caller holds the put lock and publishes."""
    if not writer.dispatchers_plain():
        return None
    b = req.batch
    n = len(b.starts)
    slots: QueueSlots = writer.queue_slots
    tid, qids = req.topic_ids(), req.queue_id_array()
    ent = None if enters.all() else enters.view(np.uint8)
    rows, qoffs, spare = np.empty(n, np.int64), np.zeros(n, np.int64), np.empty(n, np.int64)
    span = int(b.starts[-1]) - int(b.starts[0]) + int(sizes[-1])
    by_topic = slots.by_topic
    tslots = [by_topic.get(t) for t in req.topics]
    for _ in range(3):
        kind, m = plan(tslots, tid, qids, ent, slots.table, rows, qoffs, spare)
        if kind == 0:
            break
        if kind == 2:  # queues without a row: adopted if the store has them, else made by the reference
            for i in spare[:m].tolist():
                cq = writer.queues.get((req.topics[int(tid[i])], int(qids[i])))
                if cq is None:
                    return None
                slots.adopt(cq)
            tslots = [by_topic.get(t) for t in req.topics]
            continue
        short = spare[:m].tolist()
        counts = np.bincount(rows[rows >= 0], minlength=len(slots))
        need = [(slots.queues[s], int(counts[s])) for s in short]
        live = [(cq, k) for cq, k in need if cq is not None]
        if len(live) < len(need):
            return None
        writer.reserve(live, span, sizes, len(b.key_hashes))
        for s, (cq, count) in zip(short, live):
            files = cq.queue.files
            mf = files[-1] if files else None
            if mf is None or (cq.max_offset + count) * fmt.CQ_ENTRY_SIZE > mf.file_to_offset:
                return None  # the entries roll into the next file: the reference's put
            slots.attach(s, mf)
    else:
        return None
    writer.reserve((), span, sizes, len(b.key_hashes))
    ts = writer.commitlog.next_store_timestamp()
    res = writer.commitlog.append_batch(b.buf, b.starts, sizes, qoffs, qids, ts, missing_crc)
    phys = res.phys_offsets
    assert phys is not None
    write_entries(rows, qoffs, phys, sizes, b.tags_codes, slots.table, slots.files)
    d = writer.dispatchers
    if len(d) == 2:  # the index (dispatchers_plain)
        d[1].dispatch(DispatchRequest([], None, [], phys, sizes, b.tags_codes, ts, b.key_hashes, b.key_records))
    return res, qoffs, rows, ts
