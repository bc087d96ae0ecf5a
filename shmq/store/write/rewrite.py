"""Rewriting records before they are stored: where the broker's delivery rules send a message
somewhere else (a delay to the schedule topic, a half message to the transaction topic, a
redelivery to a retry topic) or bring it back (a due delay to its real topic). Pure: bytes in,
bytes out.

Only records a rule applies to come here (one decode and one encode each, ~10 us); the usual
put never does. ``replace_records`` swaps rewritten records into a put and recomputes what
dispatch needs for them (the tag hash or, for the schedule and timer topics, the due time in
the consume-queue tag field; the index keys under the new topic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shmq.codec import record as fmt
from shmq.store.write.hooks import PutRequest

_UNSET = -1


def rewrite_record(
    raw: bytes | memoryview,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    set_props: Mapping[str, str] | None = None,
    drop_props: Sequence[str] = (),
    sysflag: int | None = None,
    reconsume_times: int | None = None,
    prepared_offset: int | None = None,
    born_timestamp: int | None = None,
) -> bytes:
    """The record ``raw`` with what is given changed; broker-owned fields (queue and physical
    offsets, store time and host) are left for the store to fill. CorruptRecordError if ``raw``
    is not a record; ValueError (BadTopicError) for a bad topic or properties."""
    rec = fmt.decode_record(raw)
    props = dict(rec.properties)
    for key in drop_props:
        props.pop(key, None)
    if set_props:
        props.update(set_props)
    return fmt.encode_message(
        rec.topic if topic is None else topic,
        bytes(rec.body),
        queue_id=rec.queue_id if queue_id is None else queue_id,
        flag=rec.flag,
        properties=props,
        sysflag=rec.sysflag if sysflag is None else sysflag,
        born_timestamp=rec.born_timestamp if born_timestamp is None else born_timestamp,
        born_host=rec.born_host,
        reconsume_times=rec.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_tx_offset=rec.prepared_tx_offset if prepared_offset is None else prepared_offset,
        crc=rec.body_crc,
    )


def dispatch_fields(record: bytes, topic: str, tags_code: int | None = None) -> tuple[int, list[int]]:
    """(consume-queue tag field, index key hashes) of a rewritten record stored under ``topic``:
    the tag hash unless ``tags_code`` is given (the schedule and timer topics store the due time)."""
    rec = fmt.decode_record(record)
    code = fmt.tags_code(rec.tags) if tags_code is None else tags_code
    return code, fmt.record_key_hashes(topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))


def replace_records(
    req: PutRequest,
    rows: Sequence[int],
    records: Sequence[bytes],
    topics: Sequence[str],
    queue_ids: Sequence[int],
    tags_codes: Sequence[int | None],
) -> None:
    """Put ``records[k]`` in place of record ``rows[k]`` of ``req``, stored under ``topics[k]`` /
    ``queue_ids[k]`` (``tags_codes[k]`` None: the record's tag hash). The batch is packed anew
    (this is the rare path) and what hooks measured is dropped, so later hooks measure again."""
    b = req.batch
    n = len(req)
    buf = memoryview(b.buf)
    ends = np.append(b.starts[1:], len(buf)).tolist()
    pieces: list[bytes | memoryview] = [buf[s:e] for s, e in zip(b.starts.tolist(), ends)]
    tags = b.tags_codes.copy()
    table = {t: k for k, t in enumerate(req.topics)}
    tid = req.topic_ids().copy()
    qids = req.queue_id_array().copy()
    replaced = np.zeros(n, bool)
    new_keys: dict[int, list[int]] = {}
    for row, record, topic, qid, code in zip(rows, records, topics, queue_ids, tags_codes):
        pieces[row] = record
        tags[row], new_keys[row] = dispatch_fields(record, topic, code)
        tid[row] = table.setdefault(topic, len(table))
        qids[row] = qid
        replaced[row] = True
    keep = ~replaced[b.key_records]
    key_hashes = [b.key_hashes[keep]]
    key_records = [b.key_records[keep]]
    for row, hashes in new_keys.items():
        key_hashes.append(np.array(hashes, np.int64))
        key_records.append(np.full(len(hashes), row, np.int64))
    kh, kr = np.concatenate(key_hashes), np.concatenate(key_records)
    order = np.argsort(kr, kind="stable")
    sizes = np.fromiter(map(len, pieces), np.int64, n)
    starts = np.zeros(n, np.int64)
    starts[1:] = np.cumsum(sizes)[:-1]
    req.batch = fmt.EncodedBatch(b"".join(pieces), starts, tags, kh[order], kr[order])
    names = list(table)
    used, tid = np.unique(tid, return_inverse=True)  # only the topics records still go to
    req.topics = [names[k] for k in used.tolist()]
    req.topic_idx = None if len(used) == 1 else tid.reshape(-1).astype(np.int64)
    req.queue_ids = int(qids[0]) if n == 1 or bool((qids == qids[0]).all()) else qids
    req.sizes = req.header = None
