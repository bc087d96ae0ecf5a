"""The streaming side of the `shmq` source: `spark.readStream.format("shmq").load(STORE_DIR)`.

Offsets are consume-queue offsets, one per queue (shmq.spark.stream_offsets; keyed by broker
too over a store root). Each trigger looks at the store files again: the stores under a root
(a broker started later joins like a new queue), the queues of the chosen topics (new
topics, queues and brokers join at their min offset), each queue's live-safe end
(layout.queue_extent: never a torn record, so a micro-batch never claims rows a task cannot
read). A micro-batch is planned and read like a
batch scan (split_extent slices, read_slice), so its rows are a pure function of (start, end):
Spark replays a batch from its offset log after a failure and gets the same rows, which with
a checkpoint and an idempotent sink (the file sink) is exactly-once.

The source only reads (no broker, no lock, no consumer group): `commit` has nothing to do, and
the store keeps no record of the query. Cleanup may delete files the query has not read yet;
`failOnDataLoss` decides whether that stops the query or is logged and skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from shmq.errors import ConfigError, ShmqError
from shmq.spark.layout import QueueExtent, split_extent
from shmq.spark.planner import queue_extents
from shmq.spark.pushdown import ScanBounds
from shmq.spark.source import ScanOptions, SlicePartition, positive_int_option, read_partition
from shmq.spark.stores import StoreRef
from shmq.spark.stream_offsets import QueueRange, StreamOffset, next_end, plan_ranges, queue_key, sorted_offset

log = logging.getLogger(__name__)

STARTING_OFFSETS = ("earliest", "latest")


class StreamDataLossError(ShmqError, RuntimeError):
    """Cleanup deleted messages the query had not read yet (failOnDataLoss=true)."""


class StreamOptions(ScanOptions):
    """The options of a `shmq` stream: those of a scan, plus startingOffsets,
    maxRecordsPerTrigger and failOnDataLoss."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        starting = options.get("startingOffsets", "earliest").strip().lower()
        if starting not in STARTING_OFFSETS:
            raise ConfigError(f"option startingOffsets must be earliest or latest, got {starting!r}")
        self.starting = starting
        self.max_records: int | None = positive_int_option(options, "maxRecordsPerTrigger", 0) or None
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, got {raw!r}")
    return value == "true"


class ShmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the consume queues of the chosen topics.

    The planning methods run in one long-lived Python process on the driver; `read` runs in
    the executors on a pickled copy, so it uses only the options and the partition.
    """

    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self._target: StreamOffset | None = None  # Trigger.AvailableNow: the ends when it started

    def _extents(self) -> dict[str, QueueExtent]:
        return {
            queue_key(e.topic, e.queue_id, store.broker): e
            for store in self.opts.store_set.stores(self.opts.brokers)
            for e in queue_extents(store.path, self.opts.topics, ScanBounds())
        }

    def initialOffset(self) -> StreamOffset:  # noqa: N802 (Spark's names)
        ext = self._extents()
        return sorted_offset({k: e.start if self.opts.starting == "earliest" else e.end for k, e in ext.items()})

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadAllAvailable() if self.opts.max_records is None else ReadMaxRows(self.opts.max_records)

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:  # noqa: N802
        ext = self._extents()
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return next_end(
            start, {k: e.start for k, e in ext.items()}, {k: e.end for k, e in ext.items()}, max_rows, self._target
        )

    def reportLatestOffset(self) -> StreamOffset:  # noqa: N802
        return sorted_offset({k: e.end for k, e in self._extents().items()})

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self.reportLatestOffset()

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        if start == end:
            return []
        heads = {k: e.start for k, e in self._extents().items()}
        out: list[InputPartition] = []
        for r in plan_ranges(start, end, heads):
            if r.lost:
                self._data_lost(r)
            ext = QueueExtent(r.topic, r.queue_id, r.start, r.end)
            store = self._store(r.broker)
            out.extend(SlicePartition(s, store) for s in split_extent(store.path, ext, self.opts.max_partition_bytes))
        return out

    def _store(self, broker: str | None) -> StoreRef:
        """The store of `broker` (None: the single store the query reads)."""
        root = self.opts.store_set.path
        return StoreRef(broker, root if broker is None else os.path.join(root, broker))

    def _data_lost(self, r: QueueRange) -> None:
        where = f"{r.topic}/{r.queue_id}" if r.broker is None else f"broker {r.broker}: {r.topic}/{r.queue_id}"
        what = (
            f"{where}: queue offsets {r.lost_from}..{r.lost_from + r.lost - 1} ({r.lost} "
            "messages) were deleted by cleanup before this query read them"
        )
        if self.opts.fail_on_data_loss:
            raise StreamDataLossError(
                f"{what}. Restart with a new checkpoint, or set option failOnDataLoss=false "
                "to skip lost messages and go on from the queue's min offset "
                "(keep files longer: fileReservedTime)"
            )
        log.warning("%s; going on from queue offset %d (failOnDataLoss=false)", what, r.start)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from read_partition(partition)

    def commit(self, end: StreamOffset) -> None:
        """Nothing to release: the source reads files and keeps no position in the store."""
