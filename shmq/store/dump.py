"""`shmq admin store dump`: a store's records as JSON lines, read-only.

One object per record with the columns of the Spark source (docs/SPARK.md, "Columns"), so a dump
and a Spark scan describe a record the same way; timestamps stay epoch milliseconds and the
body (decompressed, as consumers see it) is base64. ``record_row`` is pure.
"""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Iterator
from typing import Any

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.errors import NotAStoreError
from shmq.store.verify import iter_records


def record_row(rec: fmt.StoredRecord) -> dict[str, Any]:
    """The Spark columns of one record."""
    body = bytes(rec.body)
    if rec.sysflag & fmt.FLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error:
            pass  # damaged: shown as stored
    props = rec.properties
    return {
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "commitlog_offset": rec.physical_offset,
        "size": rec.total_size,
        "tags": props.get(fmt.PROPERTY_TAGS),
        "keys": props.get(fmt.PROPERTY_KEYS),
        "msg_id": props.get(fmt.PROPERTY_UNIQ_KEY) or ids.offset_msg_id(rec.store_host, rec.physical_offset),
        "born_timestamp": rec.born_timestamp,
        "store_timestamp": rec.store_timestamp,
        "reconsume_times": rec.reconsume_times,
        "sys_flag": rec.sysflag,
        "properties": dict(props),
        "body": base64.b64encode(body).decode("ascii"),
    }


def dump_rows(
    store_dir: str, topic: str | None = None, from_offset: int = 0, max_num: int | None = None
) -> Iterator[dict[str, Any]]:
    """Rows of the records at commitlog offset >= ``from_offset`` (of ``topic`` if given), in
    log order, at most ``max_num``."""
    if not os.path.isdir(os.path.join(store_dir, "commitlog")):
        raise NotAStoreError(f"{store_dir} holds no shmq store (no commitlog/)")
    if max_num is not None and max_num <= 0:
        return
    n = 0
    for rec in iter_records(store_dir, start=from_offset):
        if rec.physical_offset < from_offset or (topic is not None and rec.topic != topic):
            continue
        yield record_row(rec)
        n += 1
        if max_num is not None and n >= max_num:
            return
