"""The HA sender's view of the master's commitlog: read-only mappings, never through the broker.

The broker publishes how far the log is valid (the HA segment's ``master_offset``); every read
here takes that end from the caller and never goes past it, because bytes beyond may still be
being written. A chunk never crosses a segment boundary, so one replication frame is one slice
of one mapping: no copy, handed straight to ``sendmsg``.
"""

from __future__ import annotations

import os

from shmq.store.read.reader import SegmentQueue


class HALogReader:
    """The segment files of ``STORE/commitlog``, mapped with ACCESS_READ (``SegmentQueue``)."""

    def __init__(self, store_dir: str, segment_size: int) -> None:
        self.segment_size = segment_size
        self._files = SegmentQueue(os.path.join(store_dir, "commitlog"))
        self._files.refresh()

    def refresh(self) -> None:
        """Map new segments, let go of the ones cleanup deleted (called about once a second)."""
        self._files.refresh()

    @property
    def min_offset(self) -> int:
        """The first segment file's offset (0 for an empty log)."""
        return self._files.min_offset

    def chunk(self, offset: int, end: int, batch: int) -> memoryview:
        """Bytes ``[offset, min(offset + batch, segment end, end))`` as a view of the mapping.

        ``end`` is the published master offset. LookupError below the first file (cleanup deleted it:
        it cannot be served); OSError if a segment that must exist (below ``end``) cannot be found or is short."""
        seg = self._files.find(offset)
        if seg is None:
            if offset < self._files.min_offset:
                raise LookupError(f"offset {offset} was cleaned (the log starts at {self.min_offset})")
            raise FileNotFoundError(f"no commitlog segment holds offset {offset} (published end {end})")
        if seg.size != self.segment_size:
            raise OSError(f"{seg.path} is {seg.size} bytes, mappedFileSizeCommitLog is {self.segment_size}")
        stop = min(offset + batch, seg.end, end)
        return memoryview(seg.mm)[offset - seg.start : stop - seg.start]

    def close(self) -> None:
        self._files.close()
