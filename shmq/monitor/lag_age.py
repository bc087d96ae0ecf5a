"""LagAges: how long ago the oldest message a group has not committed was stored, per (group,
topic): RocketMQ 5's ``rocketmq_consumer_lag_latency``.

The state segment has offsets, not times: the time is the store timestamp of the record at the
group's committed offset, read from the store's files (mapped read-only, as a consumer reads
them), so the broker is still not asked. Only queues where the group lags are looked at, one
consume-queue entry and one commitlog field each, so a scrape of groups that keep up reads
nothing. A message whose file is gone (cleanup) or not mapped yet is passed over, never guessed.
"""

from __future__ import annotations

from shmq.codec import record as fmt
from shmq.monitor.snapshot import Snapshot
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.read.reader import StoreReader


class LagAges:
    """A read-only view of one broker's store for the ages of its groups' oldest unconsumed messages."""

    def __init__(self, store_dir: str) -> None:
        self.store_dir = store_dir
        self._reader = StoreReader(store_dir)

    def ages_ms(self, snap: Snapshot, now_ms: int) -> dict[tuple[str, str], int]:
        """(group, topic) -> ms since the oldest message the group has not committed was stored,
        over the topic's queues; pairs without lag (or whose message could not be read) are absent."""
        out: dict[tuple[str, str], int] = {}
        for g in snap.groups.values():
            for (topic, qid), lag in g.lag_by_queue.items():
                if lag <= 0:
                    continue
                offset = g.committed[(topic, qid)]
                stored = self._stored_ms(topic, qid, offset, offset + lag)
                if stored >= 0:
                    key = (g.name, topic)
                    out[key] = max(out.get(key, 0), max(0, now_ms - stored))
        return out

    def _stored_ms(self, topic: str, qid: int, offset: int, max_offset: int) -> int:
        """Store timestamp of the message at queue offset ``offset``; -1 if it cannot be read.
        Files made since the last look are mapped on a miss (one refresh, then it gives up)."""
        try:
            cq = self._reader.consume_queue(topic, qid)
            for attempt in range(2):
                entries = cq.entries(offset, 1, max_offset).entries
                if len(entries) and int(entries[0]["size"]) != BLANK_SIZE:
                    stored = self._reader.commitlog.store_timestamp_at(int(entries[0]["offset"]))
                    if stored >= 0:
                        return stored
                if attempt == 0:
                    cq.refresh()
                    self._reader.commitlog.refresh()
        except (OSError, ValueError, fmt.CorruptRecordError):  # a file removed under us, a topic name the store refuses
            pass
        return -1

    def close(self) -> None:
        self._reader.close()
