"""Read one partition (a queue-offset range of one queue) as Arrow record batches.

Every record a consume-queue entry points at is checked before it becomes a row: magic, size,
physical offset (decode_batch) and body CRC. The range was planned from a consistent end
(layout.queue_extent), so a record that fails here is damage, not a write in flight, and the
scan stops with an error naming the queue offset and commitlog offset.
"""
from __future__ import annotations

import zlib
from typing import Iterator

import numpy as np
import pyarrow as pa

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.codec.columns import PulledBatch, decode_batch
from shmq.errors import CorruptRecordError
from shmq.spark.layout import QueueSlice
from shmq.spark.schema import ARROW_SCHEMA
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.reader import StoreReader

DEFAULT_BATCH_ROWS = 65536


def _check_crcs(b: PulledBatch, sl: QueueSlice) -> None:
    for i in range(len(b)):
        buf = b.buffers[int(b.segment[i])]
        start = int(b.body_pos[i]) - fmt.OFF_BODY
        want = int(buf[start + fmt.OFF_BODYCRC:start + fmt.OFF_BODYCRC + 4].view(">i4")[0])
        got = fmt.body_crc(buf.data[int(b.body_pos[i]):int(b.body_pos[i]) + int(b.body_len[i])])
        if got != want:
            raise CorruptRecordError(
                f"{sl.topic}/{sl.queue_id} queue offset {int(b.queue_offset[i])}: the record at commitlog offset "
                f"{int(b.commit_log_offset[i])} fails its body CRC (damaged on disk)")


_OWNER_DTYPE = np.dtype([("queue_id", ">i4"), ("flag", ">i4"), ("queue_offset", ">i8")])  # header bytes 12..28


def _check_owners(b: PulledBatch, sl: QueueSlice) -> None:
    """Each record must be the one its entry names (QUEUEID, QUEUEOFFSET): an entry pointing at
    another whole record of the same size would otherwise give that record twice."""
    span = np.arange(fmt.OFF_QUEUEID, fmt.OFF_PHYSICALOFFSET)
    for s in np.unique(b.segment).tolist():
        rows = np.flatnonzero(b.segment == s)
        starts = b.body_pos[rows].astype(np.int64) - fmt.OFF_BODY
        owner = b.buffers[s][starts[:, None] + span].view(_OWNER_DTYPE).reshape(-1)
        bad = np.flatnonzero((owner["queue_id"] != sl.queue_id) | (owner["queue_offset"] != b.queue_offset[rows]))
        if len(bad):
            i = int(rows[bad[0]])
            raise CorruptRecordError(
                f"{sl.topic}/{sl.queue_id} queue offset {int(b.queue_offset[i])}: the entry points at commitlog "
                f"offset {int(b.commit_log_offset[i])}, a record of queue {int(owner['queue_id'][bad[0]])} offset "
                f"{int(owner['queue_offset'][bad[0]])}")


def to_record_batch(b: PulledBatch) -> pa.RecordBatch:
    """A decoded range as one Arrow batch with the scan schema."""
    n = len(b)
    views = [buf.data for buf in b.buffers]
    props = [fmt.decode_properties(views[s][p:p + k]) for s, p, k in
             zip(b.segment.tolist(), b.props_pos.tolist(), b.props_len.tolist())]
    offset_ids = ids.offset_msg_ids(b.store_host, b.commit_log_offset)
    bodies = [bytes(x) if isinstance(x, memoryview) else x for x in b.bodies()]
    cols = [
        pa.array([b.topic] * n, pa.string()),
        pa.array(np.full(n, b.queue_id, np.int32)),
        pa.array(b.queue_offset.astype(np.int64)),
        pa.array(b.commit_log_offset.astype(np.int64)),
        pa.array(b.size.astype(np.int32)),
        pa.array([p.get(fmt.PROPERTY_TAGS) for p in props], pa.string()),
        pa.array([p.get(fmt.PROPERTY_KEYS) for p in props], pa.string()),
        pa.array([p.get(fmt.PROPERTY_UNIQ_KEY) or o for p, o in zip(props, offset_ids)], pa.string()),
        pa.array(b.born_timestamp.astype(np.int64) * 1000, ARROW_SCHEMA.field("born_timestamp").type),
        pa.array(b.store_timestamp.astype(np.int64) * 1000, ARROW_SCHEMA.field("store_timestamp").type),
        pa.array(b.reconsume_times.astype(np.int32)),
        pa.array(b.sysflag.astype(np.int32)),
        pa.array([list(p.items()) for p in props], ARROW_SCHEMA.field("properties").type),
        pa.array(bodies, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)


def read_slice(store_dir: str, sl: QueueSlice, time_lo_ms: int = 0, time_hi_ms: int = 1 << 62,
               batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows of `sl` whose store time lies in [time_lo_ms, time_hi_ms), in queue order."""
    with StoreReader(store_dir) as reader:
        reader.commitlog.refresh()
        cq = reader.consume_queue(sl.topic, sl.queue_id)
        cq.refresh()
        pos = sl.start
        while pos < sl.end:
            rng = cq.entries(pos, min(batch_rows, sl.end - pos), sl.end)
            if not len(rng.entries):
                break
            b = decode_batch(reader.commitlog, sl.topic, sl.queue_id, rng)
            pos = rng.next_offset
            # entries whose records are gone are skipped only when cleanup deleted them
            alive = (rng.entries["size"] != BLANK_SIZE) & (rng.entries["offset"] >= reader.commitlog.min_offset)
            if len(b) < int(alive.sum()):
                raise CorruptRecordError(f"{sl.topic}/{sl.queue_id} queue offsets [{rng.start}, {rng.next_offset}): "
                                         f"{int(alive.sum()) - len(b)} entries point past the commitlog files")
            if not len(b):
                continue
            _check_owners(b, sl)
            _check_crcs(b, sl)
            if time_lo_ms > 0 or time_hi_ms < 1 << 62:
                keep = (b.store_timestamp >= time_lo_ms) & (b.store_timestamp < time_hi_ms)
                if not keep.all():
                    b = _take(b, keep)
                    if not len(b):
                        continue
            yield to_record_batch(b)


def _take(b: PulledBatch, keep: np.ndarray) -> PulledBatch:
    cols = {name: getattr(b, name)[keep] for name in (
        "queue_offset", "commit_log_offset", "size", "store_timestamp", "born_timestamp", "sysflag",
        "reconsume_times", "store_host", "body_pos", "body_len", "props_pos", "props_len", "segment")}
    return PulledBatch(b.topic, b.queue_id, b.next_offset, b.missing, buffers=b.buffers, **cols)
