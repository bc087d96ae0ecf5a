"""ConsumeQueueExt: per consume queue, the SQL92 filter bitmap of each entry (RocketMQ's
``ConsumeQueueExt`` with ``enableCalcFilterBitMap``), in a parallel file of fixed-size entries.

``DIR/consumequeue_ext/<topic>/<queueId>/<20-digit byte offset>``: entry i of the queue is at
byte i * 32, files hold as many entries as a consume-queue file (RocketMQ keeps variable
units and puts their address in the tags field; a parallel array keeps the tag hash and lets
numpy read a range as one slice). Entry, big-endian like the other store files:

    offset      i8   commitlog offset of the record it was computed for (must equal the
                     consume-queue entry's; anything else is "not computed")
    generation  u4   which set of group filters was evaluated (config/consumerFilter.json);
                     0: not computed
    bits        20B  bloom bits (``shmq.filter.bloom``) of the groups whose filter matched

Files are sparse and made only for queues of topics some group filters with SQL92; a missing
file, a hole or a zero entry all read as "not computed", and the consumer then evaluates the
message exactly. The bitmap is an acceleration only: nothing here is ever needed to deliver
a message correctly.
"""

from __future__ import annotations

import contextlib
import logging
import os

import numpy as np

from shmq.codec import record as fmt
from shmq.filter.bloom import BITMAP_BYTES
from shmq.store import files
from shmq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

EXT_DIR = "consumequeue_ext"
EXT_DTYPE = np.dtype([("offset", ">i8"), ("generation", ">u4"), ("bits", "u1", (BITMAP_BYTES,))])
EXT_ENTRY_SIZE = EXT_DTYPE.itemsize
assert EXT_ENTRY_SIZE == 32  # 128 entries per page: an entry never straddles two pages


def ext_dir(store_dir: str, topic: str, queue_id: int) -> str:
    return os.path.join(store_dir, EXT_DIR, topic, str(queue_id))


class ConsumeQueueExt:
    """The writer side of one queue's extension (the broker's dispatcher owns it)."""

    def __init__(self, store_dir: str, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.directory = ext_dir(store_dir, topic, queue_id)
        self.entries_per_file = entries_per_file
        self.file_size = entries_per_file * EXT_ENTRY_SIZE
        self._files: dict[int, tuple[MappedFile, np.ndarray]] = {}

    def _path(self, index: int) -> str:
        return os.path.join(self.directory, fmt.offset_file_name(index * self.file_size))

    def _file(self, index: int, create: bool) -> tuple[MappedFile, np.ndarray] | None:
        got = self._files.get(index)
        if got is None:
            path = self._path(index)
            if not create and not os.path.exists(path):
                return None
            files.make_dirs(self.directory)
            try:
                mf = MappedFile(path, self.file_size, create=True)
            except ValueError:  # made with another consume-queue file size: an acceleration only, so renew it
                os.unlink(path)
                mf = MappedFile(path, self.file_size, create=True)
            got = self._files[index] = (mf, np.frombuffer(mf.mm, dtype=EXT_DTYPE))
        return got

    def put(self, first: int, phys: np.ndarray, generation: int, bits: np.ndarray) -> None:
        """Entries for queue offsets ``first``, ``first + 1``, ... (disk blocks reserved first:
        DiskFullError leaves them unwritten, which reads as "not computed")."""
        n, done = len(phys), 0
        while done < n:
            q = first + done
            index, i = divmod(q, self.entries_per_file)
            got = self._file(index, True)
            assert got is not None
            mf, entries = got
            k = min(n - done, self.entries_per_file - i)
            end = (i + k) * EXT_ENTRY_SIZE
            if end > mf.reserved_position:
                mf.reserve(end)
            part = entries[i : i + k]
            part["offset"] = phys[done : done + k]
            part["bits"] = bits[done : done + k]
            part["generation"] = generation  # last: an entry with a generation is whole
            done += k

    def truncate(self, max_offset: int) -> None:
        """Zero (durably) every entry at or past ``max_offset``: after recovery cut the consume
        queue, a new record may take a queue offset an old, lost one had."""
        for index in self._indexes():
            first = index * self.entries_per_file
            if first >= max_offset:
                self._drop(index)
                os.unlink(self._path(index))
                continue
            cut = max_offset - first
            if cut < self.entries_per_file:
                got = self._file(index, False)
                if got is not None:
                    mf, entries = got
                    end = min(self.entries_per_file, mf.data_end() // EXT_ENTRY_SIZE)
                    if end > cut:
                        entries[cut:end] = np.zeros(1, EXT_DTYPE)
                        mf.mm.flush()

    def delete_below(self, min_offset: int) -> None:
        """Remove files whose entries are all below ``min_offset`` (the queue's cleaned head),
        also those an earlier broker run wrote and this one never opened."""
        for index in self._indexes():
            if (index + 1) * self.entries_per_file <= min_offset:
                self._drop(index)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(index))

    def _indexes(self) -> list[int]:
        """File numbers of the extension files on disk, in order."""
        names = sorted(os.listdir(self.directory)) if os.path.isdir(self.directory) else []
        starts = [fmt.parse_offset_file_name(n) for n in names]
        return [s // self.file_size for s in starts if s is not None and s % self.file_size == 0]

    def _drop(self, index: int) -> None:
        got = self._files.pop(index, None)
        if got is not None:
            got[0].close()

    def close(self) -> None:
        for index in list(self._files):
            self._drop(index)


def data_entries(path: str, size: int) -> int:
    """Entries before the file's first hole: the writer reserves blocks from the start up, and
    reading a hole of a full tmpfs through a mapping is a SIGBUS, so a reader stops there."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        return min(size, os.lseek(fd, 0, os.SEEK_HOLE)) // EXT_ENTRY_SIZE
    except OSError:
        return size // EXT_ENTRY_SIZE
    finally:
        os.close(fd)
