"""config/queueMaxOffsets.json: every consume queue's max offset, so recovery notices a lost one.

A consume queue truncated to nothing or a queue folder removed looks, to the queue itself,
like an empty queue: its messages become invisible and new ones restart it at offset 0 while
committed offsets point past it. The commitlog knows better (every record carries its queue
offset), but reading all of it at every start costs too much. This table is the cheap witness:
written exactly at a clean shutdown and, while running, at a thorough consume-queue flush
whenever a queue was created since the last write (values then are lower bounds, which is all
the check needs). Recovery compares each queue with it and rebuilds from the commitlog only
the queues that fall short.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from shmq.codec import record as fmt
from shmq.store.config_files import load_json, write_json
from shmq.store.consume_queue import MAX_QUEUE_ID, ConsumeQueue, queue_id_of

log = logging.getLogger(__name__)
QueueKey = tuple[str, int]
MAX_OFFSET = 2**63 - 1


def table_path(store_dir: str) -> str:
    return os.path.join(store_dir, "config", "queueMaxOffsets.json")


def parse(data: Any) -> dict[QueueKey, int]:
    """The table with every value checked (ValueError or TypeError for a wrong one)."""
    table = data.get("queueMaxOffsets") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError('not a {"queueMaxOffsets": {...}} object')
    out: dict[QueueKey, int] = {}
    for topic, queues in table.items():
        fmt.check_topic(topic)
        if not isinstance(queues, dict):
            raise ValueError(f"topic {topic!r}: not an object of queue id -> max offset")
        for qid, n in queues.items():
            q = queue_id_of(qid)
            if q is None:
                raise ValueError(f"topic {topic!r}: queue id {qid!r:.20} is not in 0..{MAX_QUEUE_ID}")
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_OFFSET:
                raise ValueError(f"topic {topic!r} queue {qid}: max offset {n!r:.30} is not an int >= 0")
            out[(topic, q)] = n
    return out


def read(store_dir: str) -> tuple[dict[QueueKey, int] | None, list[str]]:
    """(the table, or None when no copy is readable; why copies could not be used)."""
    loaded = load_json(table_path(store_dir), parse)
    return (parse(loaded.data) if loaded.source is not None else None), loaded.problems


class QueueTableWriter:
    """Writes the table when queues were created since its last write, or always (``force``: at
    start and at a clean shutdown, when it is exact); a failure is logged, not raised (a full
    disk must not stop a flush)."""

    def __init__(self, store_dir: str) -> None:
        self.path = table_path(store_dir)
        self.written = -1  # queues in the table last written

    def write(self, queues: Sequence[ConsumeQueue], force: bool = False) -> None:
        if not force and len(queues) == self.written:
            return
        table: dict[str, dict[str, int]] = {}
        for cq in queues:
            table.setdefault(cq.topic, {})[str(cq.queue_id)] = cq.max_offset
        try:
            write_json(self.path, {"queueMaxOffsets": table})
            self.written = len(queues)
        except OSError as e:
            log.warning("writing %s failed (%s); recovery checks fewer queues until it is written", self.path, e)
