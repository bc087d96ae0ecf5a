"""The columns of a shmq scan: one row per stored message.

The Spark DDL string and the Arrow schema describe the same columns; `read()` builds record
batches with exactly this Arrow schema, so Spark takes them without a per-row conversion.
Timestamps are the store's milliseconds as Spark TIMESTAMP (microseconds, UTC).

A read of a store root (several brokers' stores) has one more, last column: `broker`, the
name of the broker whose store holds the row.
"""

from __future__ import annotations

import pyarrow as pa

COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "size",
    "tags",
    "keys",
    "msg_id",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "sys_flag",
    "properties",
    "body",
)

SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, commitlog_offset long, size int, tags string, "
    "keys string, msg_id string, born_timestamp timestamp, store_timestamp timestamp, "
    "reconsume_times int, sys_flag int, properties map<string,string>, body binary"
)

TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("size", pa.int32()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.string()),
        pa.field("msg_id", pa.string()),
        pa.field("born_timestamp", TIMESTAMP),
        pa.field("store_timestamp", TIMESTAMP),
        pa.field("reconsume_times", pa.int32()),
        pa.field("sys_flag", pa.int32()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
    ]
)
assert tuple(ARROW_SCHEMA.names) == COLUMNS

ROOT_SCHEMA_DDL = f"{SCHEMA_DDL}, broker string"
ROOT_ARROW_SCHEMA = ARROW_SCHEMA.append(pa.field("broker", pa.string()))


def schema_ddl(is_root: bool) -> str:
    """The columns of a read of a store root (`is_root`) or of one store."""
    return ROOT_SCHEMA_DDL if is_root else SCHEMA_DDL


def with_broker(batch: pa.RecordBatch, broker: str) -> pa.RecordBatch:
    """A batch of one store's rows with the `broker` column added (every row: `broker`)."""
    col = pa.repeat(pa.scalar(broker, pa.string()), batch.num_rows)
    return pa.RecordBatch.from_arrays([*batch.columns, col], schema=ROOT_ARROW_SCHEMA)
