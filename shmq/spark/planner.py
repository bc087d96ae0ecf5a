"""Plan a scan: the queues a query needs, each one's consistent range cut by the pushed-down
bounds, split into partitions of bounded size. Reads consume-queue files (and a few record
headers for the live-safe end and time bounds), never the bodies."""

from __future__ import annotations

from shmq.spark.layout import (
    DEFAULT_MAX_PARTITION_BYTES,
    QueueExtent,
    QueueSlice,
    check_store,
    queue_extent,
    select_topics,
    split_extent,
    topic_queues,
)
from shmq.spark.pushdown import ScanBounds
from shmq.store.read.reader import CommitLogReader, ConsumeQueueReader


def queue_extents(store_dir: str, topics: list[str] | None, bounds: ScanBounds) -> list[QueueExtent]:
    """The consistent range of every queue the scan covers, narrowed by `bounds`."""
    store_dir = check_store(store_dir)
    if bounds.empty:
        return []
    # a topic filter only narrows what the `topic` option chose: naming a system topic in a
    # filter does not add it, so a query answers the same with pushdown on or off
    chosen = select_topics(store_dir, topics)
    commitlog = CommitLogReader(store_dir)
    try:
        commitlog.refresh()
        out = []
        for topic in chosen:
            if not bounds.wants(topic):
                continue
            for qid in topic_queues(store_dir, topic):
                if bounds.wants(topic, qid):
                    ext = queue_extent(store_dir, topic, qid, commitlog)
                    out.append(_narrow(store_dir, ext, bounds, commitlog))
        return out
    finally:
        commitlog.close()


def _narrow(store_dir: str, ext: QueueExtent, bounds: ScanBounds, commitlog: CommitLogReader) -> QueueExtent:
    lo, hi = max(ext.start, bounds.offset_lo), min(ext.end, bounds.offset_hi)
    if bounds.has_time and lo < hi:
        cq = ConsumeQueueReader(store_dir, ext.topic, ext.queue_id, commitlog)
        try:
            cq.refresh()
            lo = max(lo, cq.offset_for_timestamp(bounds.time_lo_ms, hi))
            hi = min(hi, cq.offset_for_timestamp(bounds.time_hi_ms, hi))
        finally:
            cq.close()
    return QueueExtent(ext.topic, ext.queue_id, lo, max(lo, hi))


def plan_scan(
    store_dir: str, topics: list[str] | None, bounds: ScanBounds, max_bytes: int = DEFAULT_MAX_PARTITION_BYTES
) -> list[QueueSlice]:
    """The partitions of a batch scan: per-queue offset ranges of at most `max_bytes` each."""
    return [s for ext in queue_extents(store_dir, topics, bounds) for s in split_extent(store_dir, ext, max_bytes)]
