"""The Spark Python data source `shmq`: `spark.read.format("shmq").load(STORE_DIR)`.

Reads the store files directly and read-only (no broker, no lock), so it works on a live
master, a replica and a stopped or crashed store alike. Partitions are queue-offset ranges of
at most `maxPartitionBytes` of records each (planning reads consume queues only); each task
maps the commitlog and builds Arrow batches column-wise. Given a cluster's store root (a
directory of stores, shmq.spark.stores), the scan is every store's partitions, and each row
says its store's broker in a last column `broker`.

Filter pushdown: Spark (4.1+) refuses every query of a reader that overrides `pushFilters`
while `spark.sql.python.filterPushdown.enabled` is false, and it asks for pushdown only in
its pushdown planning worker. So `reader()` hands out the pushdown-capable reader only to
that worker; everywhere else it gives the plain reader, and Spark evaluates the filters.
Spark (4.3) keeps the plan of the last pushdown on the DataFrame's relation and reuses it for
a later query of that DataFrame that pushes nothing, so with pushdown on each query should
start from its own `spark.read...load()` (docs/SPARK.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.types import StructType

from shmq.errors import ConfigError, CorruptRecordError, NotAStoreError
from shmq.spark.batches import read_slice
from shmq.spark.layout import DEFAULT_MAX_PARTITION_BYTES, QueueSlice, describe_damage, parse_topic_option
from shmq.spark.planner import plan_scan
from shmq.spark.pushdown import ScanBounds, push_filters
from shmq.spark.schema import schema_ddl, with_broker
from shmq.spark.stores import StoreRef, open_stores, parse_broker_option
from shmq.spark.workers import use_shmq_python

_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
# the same worker run as a script (spark.python.use.daemon=false) is named __main__
_PUSHDOWN_WORKER_FILE = os.path.join("pyspark", "sql", "worker", "data_source_pushdown_filters.py")


class ScanOptions:
    """The options of a `shmq` read, checked once on the driver side."""

    def __init__(self, options: Mapping[str, str]) -> None:
        """`options`: the data source's own (Spark's case-insensitive map) or any mapping;
        option names ignore case either way."""
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise ConfigError('the shmq source needs the store directory: spark.read.format("shmq").load(STORE_DIR)')
        self.store_set = open_stores(path)
        self.store_dir = self.store_set.path  # the store, or the root of stores
        self.topics = parse_topic_option(opts.get("topic"))
        self.brokers = parse_broker_option(opts.get("broker"))
        if self.brokers is not None and not self.store_set.is_root:
            raise ConfigError(f"option broker chooses stores under a store root; {path!r} is a single store")
        self.max_partition_bytes = positive_int_option(opts, "maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES)


def positive_int_option(options: Mapping[str, str], key: str, default: int) -> int:
    """Option `key`, its name in any case (Spark's own map or a plain one), as an int > 0."""
    raw = next((v for k, v in options.items() if k.lower() == key.lower()), None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {key} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {key} must be a positive integer, got {raw!r}")
    return value


class SlicePartition(InputPartition):
    """One task's share: a queue-offset range of one queue of one store."""

    def __init__(self, sl: QueueSlice, store: StoreRef) -> None:
        super().__init__((store, sl))
        self.slice = sl
        self.store = store


def read_partition(
    partition: SlicePartition, time_lo_ms: int = 0, time_hi_ms: int = 1 << 62
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, with the `broker` column when its store is one of a root's;
    damage is reported with the first damaged entry of the slice and the store's path."""
    sl, store = partition.slice, partition.store
    try:
        for batch in read_slice(store.path, sl, time_lo_ms, time_hi_ms):
            yield batch if store.broker is None else with_broker(batch, store.broker)
    except CorruptRecordError as e:
        raise CorruptRecordError(describe_damage(store.path, sl, e)) from e


class ShmqScanReader(DataSourceReader):
    """Batch reader without pushdown: Spark filters the rows itself."""

    def __init__(self, opts: ScanOptions) -> None:
        self.opts = opts
        self.bounds = ScanBounds()

    def partitions(self) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        for store in self.opts.store_set.stores(self.opts.brokers):
            if self.bounds.wants_broker(store.broker):
                planned = plan_scan(store.path, self.opts.topics, self.bounds, self.opts.max_partition_bytes)
                out.extend(SlicePartition(s, store) for s in planned)
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SlicePartition):
            return  # a scan that planned no slice: Spark still runs one task, with InputPartition(None)
        yield from read_partition(partition, self.bounds.time_lo_ms, self.bounds.time_hi_ms)


class ShmqPushdownReader(ShmqScanReader):
    """Batch reader that takes filters on broker, topic, queue_id, queue_offset and store_timestamp."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # noqa: N802 (Spark's name)
        self.bounds, rest = push_filters(self.bounds, filters)
        return rest


class ShmqDataSource(DataSource):
    """Format `shmq`: one row per stored message (columns: shmq.spark.schema)."""

    @classmethod
    def name(cls) -> str:
        """`register()` calls this on the driver just before it pickles the source with the
        interpreter its workers will run: the moment to make that one able to import shmq."""
        use_shmq_python()
        return "shmq"

    def schema(self) -> str:
        """A store root's columns end with `broker`; a path that is no store at all gets the
        single store's columns here and its one-line error from `reader()`."""
        path = self.options.get("path")
        try:
            return schema_ddl(path is not None and open_stores(path).is_root)
        except NotAStoreError:
            return schema_ddl(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ScanOptions(self.options)
        caller = sys._getframe(1)
        pushdown = caller.f_globals.get("__name__") == _PUSHDOWN_WORKER or caller.f_code.co_filename.endswith(
            _PUSHDOWN_WORKER_FILE
        )
        return ShmqPushdownReader(opts) if pushdown else ShmqScanReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        from shmq.spark.stream import ShmqStreamReader, StreamOptions  # imports this module

        return ShmqStreamReader(StreamOptions(self.options))
