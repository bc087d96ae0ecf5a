"""The consumer's read path: consume-queue entries to numpy columns plus zero-copy body views (a ``PulledBatch``).

The pull path for throughput. Entries are filtered by tag hash over the whole range, the
88-byte headers of the surviving records are gathered from the commitlog mapping in one
row gather per segment, and the exact tag check compares the bytes `TAGS\\x01<tag>\\x02` at the
start of each record's properties (shmq writes TAGS first) for all records at once; only a
record that does not start that way is decoded one by one. No per-message Python object is
made unless asked for (`to_message_ext`, `messages`).
"""

from __future__ import annotations

import itertools

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.filter.sql import SqlFilter
from shmq.filter.sql_batch import Batch
from shmq.filter.tags import Expression, TagFilter
from shmq.model.message_ext import MessageExt
from shmq.model.pulled import PulledBatch
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.read.filter_bitmap import FilterBitmapReader
from shmq.store.read.reader import CommitLogReader, EntryRange, StoreReader

_TAGS_PREFIX = f"{fmt.PROPERTY_TAGS}{fmt.NAME_VALUE_SEPARATOR}".encode()
_I64 = np.int64


def _windows(arr: np.ndarray, width: int) -> np.ndarray:
    """Every `width`-byte window of `arr` as rows (a strided view, no copy): rows[pos] gathers."""
    return np.lib.stride_tricks.as_strided(arr, shape=(len(arr) - width + 1, width), strides=(1, 1), writeable=False)


def _tag_check(
    arr: np.ndarray, props_pos: np.ndarray, props_len: np.ndarray, codes: np.ndarray, tags: TagFilter
) -> np.ndarray:
    """Exact tag match of records whose tag hash matched: byte compare, decode only the odd ones."""
    ok = np.zeros(len(props_pos), dtype=bool)
    for tag in tags.tags:
        expect = np.frombuffer(_TAGS_PREFIX + tag.encode("utf-8") + b"\x02", np.uint8)
        rows = np.flatnonzero((codes == fmt.tags_code(tag)) & (props_len >= len(expect)))
        if len(rows):
            ok[rows] = (_windows(arr, len(expect))[props_pos[rows]] == expect).all(axis=1)
    rest = np.flatnonzero(~ok)
    if len(rest):
        prefix = np.frombuffer(_TAGS_PREFIX, np.uint8)
        long_enough = rest[props_len[rest] >= len(prefix)]
        shaped = np.zeros(len(props_pos), dtype=bool)
        shaped[long_enough] = (_windows(arr, len(prefix))[props_pos[long_enough]] == prefix).all(axis=1)
        for i in rest[~shaped[rest]].tolist():
            p = int(props_pos[i])
            ok[i] = tags.match(fmt.decode_properties(arr[p : p + int(props_len[i])].tobytes()))
    return ok


def _decode_segment(
    arr: np.ndarray, start: int, phys: np.ndarray, size: np.ndarray, codes: np.ndarray, expression: Expression | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Positions, headers, body/properties places and the exact-filter mask of records in one segment."""
    pos = phys - start
    hdr = _windows(arr, fmt.OFF_BODY)[pos].view(fmt.HEADER_DTYPE).reshape(-1)
    bad = (hdr["physical_offset"] != phys) | (hdr["total_size"] != size) | (hdr["magic"] != fmt.MESSAGE_MAGIC)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fmt.CorruptRecordError(
            f"consume-queue entry points at commitlog offset {int(phys[i])} "
            f"(size {int(size[i])}) where no such record is"
        )
    body_len = hdr["body_len"].astype(_I64)
    _check_lengths(phys, size, (body_len < 0) | (body_len > size - fmt.FIXED_OVERHEAD), "BODYLEN")
    topic_pos = pos + fmt.OFF_BODY + body_len
    topic_len = arr[topic_pos].astype(_I64)
    props_pos = topic_pos + topic_len + 3
    props_len = size - fmt.FIXED_OVERHEAD - body_len - topic_len
    # the properties length the record stores must be the rest of TOTALSIZE (gathered only where it can be)
    fits = props_len >= 0
    stored = np.full(len(pos), -1, _I64)
    stored[fits] = arr[props_pos[fits] - 2].astype(_I64) << 8 | arr[props_pos[fits] - 1]
    _check_lengths(phys, size, stored != props_len, "topic or properties length")
    if isinstance(expression, TagFilter):
        ok = None if expression.is_all else _tag_check(arr, props_pos, props_len, codes, expression)
    elif isinstance(expression, SqlFilter):  # over columns: ~2x the record-by-record rate (docs/BENCHMARKS.md)
        ok = Batch([arr[p : p + n].tobytes() for p, n in zip(props_pos.tolist(), props_len.tolist())]).match(expression)
    elif expression is not None:
        ok = np.fromiter(
            (
                expression.match(fmt.decode_properties(arr[p : p + n].tobytes()))
                for p, n in zip(props_pos.tolist(), props_len.tolist())
            ),
            dtype=bool,
            count=len(pos),
        )
    else:
        ok = None
    return pos, hdr, body_len, props_pos, props_len, ok


def _check_lengths(phys: np.ndarray, size: np.ndarray, bad: np.ndarray, what: str) -> None:
    """CorruptRecordError naming the first record whose ``what`` does not fit its TOTALSIZE:
    damaged bytes that the entry's checks (magic, offset, size) let through."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fmt.CorruptRecordError(
            f"commitlog record at offset {int(phys[i])} (size {int(size[i])}): its {what} "
            "does not fit its TOTALSIZE (damaged; `shmq admin store verify` lists it)"
        )


def decode_batch(
    commitlog: CommitLogReader,
    topic: str,
    queue_id: int,
    rng: EntryRange,
    expression: Expression | None = None,
    skip: np.ndarray | None = None,
) -> PulledBatch:
    """Decode the records of a consume-queue range that pass `expression` (None: all); entries
    ``skip`` marks (the filter bitmap proved them mismatches) are not read at all."""
    entries = rng.entries
    keep = entries["size"] != BLANK_SIZE
    if skip is not None:
        keep &= ~skip
    if isinstance(expression, TagFilter) and not expression.is_all:
        keep &= expression.matches_codes(entries)
    idx = np.flatnonzero(keep)
    chosen = entries[idx]
    phys = chosen["offset"].astype(_I64)
    size = chosen["size"].astype(_I64)
    codes = chosen["tags_code"].astype(_I64)
    files = commitlog.files
    if len(phys) and (not files.segments or int((phys + size).max()) > files.segments[-1].end):
        files.refresh()
    starts = files.starts()
    seg = np.searchsorted(starts, phys, side="right") - 1
    present = seg >= 0
    if len(starts):
        ends = starts + np.array([s.size for s in files.segments], dtype=_I64)
        present &= phys + size <= ends[np.maximum(seg, 0)]
    missing = len(phys) - int(present.sum())
    if missing:
        idx, phys, size, codes, seg = idx[present], phys[present], size[present], codes[present], seg[present]
    if not len(phys):
        return PulledBatch.empty(topic, queue_id, rng.next_offset, missing)
    # one run of records per segment (queue order is commitlog order); views index runs
    bounds = [0, *(np.flatnonzero(np.diff(seg)) + 1).tolist(), len(seg)]
    runs = [(a, b, files.segments[int(seg[a])]) for a, b in itertools.pairwise(bounds)]
    parts = [_decode_segment(sg.array, sg.start, phys[a:b], size[a:b], codes[a:b], expression) for a, b, sg in runs]
    if len(parts) == 1:
        pos, hdr, body_len, props_pos, props_len, ok = parts[0]
    else:
        pos, hdr, body_len, props_pos, props_len = (np.concatenate([p[k] for p in parts]) for k in range(5))
        ok = None if parts[0][5] is None else np.concatenate([p[5] for p in parts])
    segment = np.repeat(np.arange(len(runs), dtype=_I64), np.diff(bounds))
    buffers = [sg.array for _, _, sg in runs]
    if ok is not None:
        idx, phys, size, pos, hdr, body_len, props_pos, props_len, segment = (
            a[ok] for a in (idx, phys, size, pos, hdr, body_len, props_pos, props_len, segment)
        )
    return PulledBatch(
        topic,
        queue_id,
        rng.next_offset,
        missing,
        queue_offset=idx + rng.start,
        commit_log_offset=phys,
        size=size,
        store_timestamp=hdr["store_timestamp"].astype(_I64),
        born_timestamp=hdr["born_timestamp"].astype(_I64),
        sysflag=hdr["sysflag"].astype(_I64),
        reconsume_times=hdr["reconsume_times"].astype(_I64),
        store_host=hdr["store_host"].astype(_I64),
        body_pos=pos + fmt.OFF_BODY,
        body_len=body_len,
        props_pos=props_pos,
        props_len=props_len,
        segment=segment,
        buffers=buffers,
    )


decode_batch = _speedups.pick("_consumer", "decode_batch", decode_batch)


def read_batch(
    reader: StoreReader,
    topic: str,
    queue_id: int,
    offset: int,
    max_num: int,
    max_offset: int,
    expression: Expression | None = None,
    bitmap: FilterBitmapReader | None = None,
    group: str | None = None,
) -> PulledBatch:
    """The batch pull: up to `max_num` consume-queue entries from `offset` (below the published
    `max_offset`), filtered and decoded; an SQL92 filter of ``group`` first drops the entries
    whose filter bitmap (``bitmap``) says they do not match."""
    rng = reader.consume_queue(topic, queue_id).entries(offset, max_num, max_offset)
    skip = None
    if bitmap is not None and group is not None and isinstance(expression, SqlFilter):
        skip = bitmap.skippable(topic, queue_id, group, expression, rng.start, rng.entries)
    return decode_batch(reader.commitlog, topic, queue_id, rng, expression, skip)


def pull_messages(
    reader: StoreReader,
    topic: str,
    queue_id: int,
    offset: int,
    max_num: int,
    max_offset: int,
    expression: Expression | None = None,
    bitmap: FilterBitmapReader | None = None,
    group: str | None = None,
) -> tuple[int, list[MessageExt]]:
    """``read_batch`` straight to MessageExt objects: (next offset, messages). What the push
    consumer's pull needs (it never reads the columns): the compiled twin reads a consume-queue
    range within one file and its records and builds the objects in one call, without numpy
    arrays per pull (the push at a steady rate finds one message a pull)."""
    batch = read_batch(reader, topic, queue_id, offset, max_num, max_offset, expression, bitmap, group)
    return batch.next_offset, batch.messages()


pull_messages = _speedups.pick("_consumer", "pull_messages", pull_messages)
