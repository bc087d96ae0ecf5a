"""The SQL92 filter bitmap: computed at dispatch, read by consumers to skip messages unread
(RocketMQ's ``CommitLogDispatcherCalcBitMap`` and ``ExpressionMessageFilter`` with
``enableCalcFilterBitMap``).

Broker side, ``CalcBitMapDispatcher`` sits first in the store's dispatcher list. The broker
core gives it the groups' SQL92 subscriptions whenever groups change; for every record of a
topic one of them filters, it evaluates each such filter (``shmq.filter.sql_batch``) and
writes the matching groups' bloom bits into the consume-queue extension
(``shmq.store.consume_queue_ext``) before the consume-queue entry. Any failure there (a bad
record, a full disk) leaves the entry "not computed" and is logged; it never fails a put.

Generations make the bits exact to interpret. Each change of the set of filters gets a new
generation number, written to ``DIR/config/consumerFilter.json`` (atomically, fsynced)
before any entry carries it; an entry records its generation. A consumer uses an entry's bits
only if its own (topic, group, expression) was in that generation: otherwise (the group
joined later, changed its expression, a member disagrees, the entry predates the broker's
restart and the group has not joined again) the entry reads as "not computed" and the
message is evaluated exactly. Numbers are never reused: a table that cannot be read at start
takes every extension file with it.

Recovery: the dispatcher is made by the broker after the store recovered, so records
re-dispatched at start get no bitmap (skipped: they are evaluated exactly); entries at or
past each queue's recovered end are zeroed durably first, because new records will take those
queue offsets.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from shmq.codec import record as fmt
from shmq.errors import BadExpressionError
from shmq.filter import bloom
from shmq.filter.sql import SqlFilter
from shmq.filter.sql_batch import Batch
from shmq.store.commitlog import CommitLog
from shmq.store.config_files import load_json, write_json
from shmq.store.consume_queue import ConsumeQueue, queue_id_of
from shmq.store.consume_queue_ext import EXT_DIR, ConsumeQueueExt
from shmq.store.filter_table import FILTER_TABLE, KEEP_GENERATIONS, Subscription, parse_table, table_path
from shmq.store.write.dispatch import DispatchRequest, QueueSink

log = logging.getLogger(__name__)
LOG_EVERY_S = 60.0
_I32 = struct.Struct(">i")


class _Active(NamedTuple):
    generation: int
    by_topic: dict[str, list[tuple[SqlFilter, np.ndarray]]]  # topic -> (filter, group bloom mask)


class CalcBitMapDispatcher:
    """Writes the filter bitmap of records of topics that groups filter with SQL92."""

    def __init__(
        self,
        store_dir: str,
        commitlog: CommitLog,
        find_queue: Callable[[str, int], ConsumeQueue | None],
        entries_per_file: int,
    ) -> None:
        self.store_dir = store_dir
        self.commitlog = commitlog
        self.entries_per_file = entries_per_file
        self._exts: dict[tuple[str, int], ConsumeQueueExt] = {}
        self._failures = 0
        self._logged_at = -LOG_EVERY_S
        self.generation, self.table = self._load_table()
        self._active = _Active(0, {})
        self._truncate_all(find_queue)

    # ------------------------------------------------------------------ start

    def _load_table(self) -> tuple[int, dict[int, frozenset[Subscription]]]:
        path = table_path(self.store_dir)
        loaded = load_json(path, parse_table)
        ext_root = os.path.join(self.store_dir, EXT_DIR)
        if loaded.data is not None and loaded.source == path:
            return parse_table(loaded.data)
        # the newest generation number is unknown (or only the backup's is): an old entry could be
        # read with a newer table, so every bitmap goes (consumers evaluate exactly until new ones)
        if os.path.isdir(ext_root):
            log.warning(
                "%s %s; removing the filter bitmaps in %s (they are rebuilt for new messages)",
                path,
                "cannot be read (" + " | ".join(loaded.problems) + ")" if loaded.problems else "is missing",
                ext_root,
            )
            shutil.rmtree(ext_root, ignore_errors=True)
        if loaded.data is not None:
            gen, _ = parse_table(loaded.data)
            return gen + KEEP_GENERATIONS, {}  # past anything the lost newer copy could have used
        return 0, {}

    def _truncate_all(self, find_queue: Callable[[str, int], ConsumeQueue | None]) -> None:
        root = os.path.join(self.store_dir, EXT_DIR)
        for topic in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir) or not fmt.TOPIC_PATTERN.match(topic):
                continue
            for name in sorted(os.listdir(tdir)):
                qid = queue_id_of(name)
                if qid is not None:
                    cq = find_queue(topic, qid)
                    self._ext(topic, qid).truncate(cq.max_offset if cq is not None else 0)

    # ------------------------------------------------------------------ filters

    def set_filters(self, subscriptions: Iterable[Subscription]) -> None:
        """The groups' SQL92 subscriptions now: a new generation if they changed (persisted first)."""
        subs = frozenset(subscriptions)
        current = self.table.get(self._active.generation, frozenset()) if self._active.generation else frozenset()
        if subs == current:
            return
        by_topic: dict[str, list[tuple[SqlFilter, np.ndarray]]] = {}
        for topic, group, expression in sorted(subs):
            try:
                f = SqlFilter(expression)
            except BadExpressionError:  # the broker checked it at join: not expected
                log.exception("filter of group %r on %r does not parse; no bitmap for it", group, topic)
                continue
            by_topic.setdefault(topic, []).append((f, bloom.mask(group, topic)))
        if not subs:
            self._active = _Active(0, {})
            return
        generation = self.generation + 1
        table = {g: s for g, s in self.table.items() if g > generation - KEEP_GENERATIONS}
        table[generation] = subs
        try:
            write_json(
                table_path(self.store_dir),
                {
                    "generation": generation,
                    "generations": {str(g): sorted(list(s) for s in table[g]) for g in sorted(table)},
                },
            )
        except OSError as e:  # keep the old generation: its entries stay truthful
            log.error("writing %s failed (%s); the filter bitmap keeps its previous filters", FILTER_TABLE, e)
            return
        self.generation, self.table = generation, table
        self._active = _Active(generation, by_topic)

    # ------------------------------------------------------------------ dispatch

    def dispatch_one(
        self,
        queue: QueueSink | None,
        queue_offset: int,
        phys: int,
        size: int,
        tags_code: int,
        key_hashes: np.ndarray,
        store_timestamp: int,
    ) -> None:
        active = self._active
        if not active.by_topic or not isinstance(queue, ConsumeQueue) or queue.topic not in active.by_topic:
            return
        self._compute(active, queue, queue_offset, np.array([phys], np.int64), np.array([size], np.int64))

    def dispatch(self, req: DispatchRequest) -> None:
        active = self._active
        if not active.by_topic:
            return
        phys, sizes = np.asarray(req.phys_offsets, np.int64), np.asarray(req.sizes, np.int64)
        parts: list[tuple[QueueSink, int, np.ndarray | None]]
        if req.rows is None:
            parts = [(req.queues[0], req.first_queue_offsets[0], None)] if req.queues else []
        else:
            parts = [(q, first, r) for q, first, r in zip(req.queues, req.first_queue_offsets, req.rows)]
        for q, first, rows in parts:
            if isinstance(q, ConsumeQueue) and q.topic in active.by_topic:
                self._compute(
                    active, q, first, phys if rows is None else phys[rows], sizes if rows is None else sizes[rows]
                )

    def _compute(self, active: _Active, cq: ConsumeQueue, first: int, phys: np.ndarray, sizes: np.ndarray) -> None:
        try:
            batch = Batch(self._properties(phys, sizes))
            bits = np.zeros((len(phys), bloom.BITMAP_BYTES), np.uint8)
            for f, group_mask in active.by_topic[cq.topic]:
                bits[batch.match(f)] |= group_mask
            ext = self._ext(cq.topic, cq.queue_id)
            if first % self.entries_per_file + len(phys) > self.entries_per_file or first % self.entries_per_file == 0:
                ext.delete_below(cq.min_offset)  # a new file: let go of those cleanup left behind
            ext.put(first, phys, active.generation, bits)
        except Exception as e:  # noqa: BLE001 - an acceleration only: the consumer evaluates these messages exactly
            self._failures += 1
            now = time.monotonic()
            if now - self._logged_at >= LOG_EVERY_S:
                self._logged_at = now
                log.error(
                    "filter bitmap of %s/%d not computed (%d failures so far): %r",
                    cq.topic,
                    cq.queue_id,
                    self._failures,
                    e,
                )

    def _properties(self, phys: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        """The encoded properties of the records just written at ``phys``."""
        out = []
        find = self.commitlog.queue.find
        for p, size in zip(phys.tolist(), sizes.tolist()):
            mf = find(p)
            if mf is None:
                raise ValueError(f"commitlog offset {p} is not mapped")
            view, pos = mf.view, p - mf.file_from_offset
            body_len = _I32.unpack_from(view, pos + fmt.OFF_BODYLEN)[0]
            topic_at = pos + fmt.OFF_BODY + body_len
            topic_len = view[topic_at]
            start = topic_at + 3 + topic_len
            out.append(bytes(view[start : start + size - fmt.FIXED_OVERHEAD - body_len - topic_len]))
        return out

    def _ext(self, topic: str, queue_id: int) -> ConsumeQueueExt:
        ext = self._exts.get((topic, queue_id))
        if ext is None:
            ext = self._exts[(topic, queue_id)] = ConsumeQueueExt(
                self.store_dir, topic, queue_id, self.entries_per_file
            )
        return ext

    def close(self) -> None:
        for ext in self._exts.values():
            ext.close()
        self._exts.clear()
