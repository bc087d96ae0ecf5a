"""The SQL92 filter bitmap, consumer side: which entries of a pulled range the bitmap the broker
computed at dispatch (``shmq.store.write.filter_bitmap``) proves do not match a group's filter, so the
consumer skips them unread. An entry counts only when its generation evaluated this group's
exact (topic, expression): anything else is evaluated exactly."""

from __future__ import annotations

import os
import time

import numpy as np

from shmq.codec import record as fmt
from shmq.filter import bloom
from shmq.filter.sql import SqlFilter
from shmq.store.config_files import load_json
from shmq.store.consume_queue_ext import EXT_DTYPE, EXT_ENTRY_SIZE, data_entries, ext_dir
from shmq.store.filter_table import Subscription, parse_table, table_path
from shmq.store.read.reader import ReadOnlySegment

REFRESH_S = 0.2  # a reader lists the folder at most this often (a file it misses reads as "not computed")


class ConsumeQueueExtReader:
    """One queue's extension mapped read-only (consumers); missing parts read as zero entries."""

    def __init__(self, store_dir: str, topic: str, queue_id: int) -> None:
        self.directory = ext_dir(store_dir, topic, queue_id)
        # (first entry, entries readable, mapping), by first entry
        self._segments: list[tuple[int, int, ReadOnlySegment]] = []
        self._listed = -1.0

    def refresh(self) -> None:
        self._listed = time.monotonic()
        try:
            names = set(os.listdir(self.directory))
        except FileNotFoundError:
            names = set()
        kept = []
        for _, _, seg in self._segments:
            name = os.path.basename(seg.path)
            if name in names:
                names.discard(name)
                kept.append((seg.start // EXT_ENTRY_SIZE, data_entries(seg.path, seg.size), seg))
            else:
                seg.close()
        for name in names:
            start = fmt.parse_offset_file_name(name)
            if start is None or start % EXT_ENTRY_SIZE:
                continue
            opened = ReadOnlySegment.open(os.path.join(self.directory, name))
            if opened is not None and opened.size % EXT_ENTRY_SIZE == 0:
                kept.append((start // EXT_ENTRY_SIZE, data_entries(opened.path, opened.size), opened))
            elif opened is not None:
                opened.close()
        self._segments = sorted(kept, key=lambda s: s[0])

    def entries(self, start: int, n: int) -> np.ndarray:
        """Entries for queue offsets ``start`` .. ``start + n - 1`` (a copy; zeros where none)."""
        out = np.zeros(n, EXT_DTYPE)
        if not self._covers(start, n) and time.monotonic() - self._listed >= REFRESH_S:
            self.refresh()
        for first, count, seg in self._segments:
            lo, hi = max(start, first), min(start + n, first + count)
            if lo < hi:
                out[lo - start : hi - start] = seg.array.view(EXT_DTYPE)[lo - first : hi - first]
        return out

    def _covers(self, start: int, n: int) -> bool:
        return any(first <= start and start + n <= first + count for first, count, _ in self._segments)

    def close(self) -> None:
        for _, _, seg in self._segments:
            seg.close()
        self._segments = []


class FilterBitmapReader:
    """Consumer side: which entries of a pulled range the bitmap proves do not match."""

    def __init__(self, store_dir: str) -> None:
        self.store_dir = store_dir
        self._exts: dict[tuple[str, int], ConsumeQueueExtReader] = {}
        self._stat: tuple[int, int] | None = None
        self._table: dict[int, frozenset[Subscription]] = {}
        self._gens: dict[Subscription, np.ndarray] = {}

    def _generations(self, sub: Subscription) -> np.ndarray:
        """The generations that evaluated ``sub`` (the table is re-read when it changed)."""
        path = table_path(self.store_dir)
        try:
            st = os.stat(path)
            stat: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stat = None
        if stat != self._stat:
            self._stat, self._gens = stat, {}
            try:
                self._table = parse_table(load_json(path, parse_table).data)[1] if stat is not None else {}
            except (ValueError, TypeError):
                self._table = {}
        gens = self._gens.get(sub)
        if gens is None:
            gens = self._gens[sub] = np.array(sorted(g for g, s in self._table.items() if sub in s), np.int64)
        return gens

    def skippable(
        self, topic: str, queue_id: int, group: str, f: SqlFilter, start: int, entries: np.ndarray
    ) -> np.ndarray | None:
        """Bool per consume-queue entry from queue offset ``start``: its bitmap, computed with this
        group's filter, says the filter did not match. None when no entry can say so."""
        gens = self._generations((topic, group, f.expression))
        if not len(gens) or not len(entries):
            return None
        ext = self._exts.get((topic, queue_id))
        if ext is None:
            ext = self._exts[(topic, queue_id)] = ConsumeQueueExtReader(self.store_dir, topic, queue_id)
        e = ext.entries(start, len(entries))
        computed = np.isin(e["generation"].astype(np.int64), gens) & (e["offset"] == entries["offset"])
        if not computed.any():
            return None
        answer: np.ndarray | None = computed & ~bloom.may_match(e["bits"], bloom.mask(group, topic))
        return answer

    def close(self) -> None:
        for ext in self._exts.values():
            ext.close()
        self._exts.clear()
