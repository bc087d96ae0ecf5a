"""QueueSlots: the consume queues' hot numbers in one compact table, one 64-byte row per queue.

With 10,000 queues a put of 256 records touches 256 queues, each once every ~40 ms: every
Python object of a queue (the ConsumeQueue, its MappedFileQueue, its last MappedFile, their
dicts, the int objects of their positions) is out of the CPU caches by then, and the put path
read or wrote a dozen of them per record. Here a queue's max offset, the end of its last
dispatched record and what the put needs of its last file (where it starts, how far it may be
written, where it is mapped) are one row of an int64 array, so the compiled put
(``shmq.store.write.multi_put``) touches one cache line per queue and its file's entry.

A ConsumeQueue always keeps its ``max_offset`` and ``max_phys_end`` in a row (its own
one-row table until a store's put adopts it into the store's table), so every reader sees the
same numbers. The file part of a row is a cache: ``attach`` fills it from the queue's last
file and pins that mapping with a view of its own (a file closed meanwhile stays mapped until
``detach``: never a write into unmapped memory); the put writes through it only where the
entry is the queue's next and falls within the pinned file's reserved bytes, so a stale row
only sends a put to ``attach`` again. The ConsumeQueue detaches before it changes its files.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shmq.store.consume_queue import ConsumeQueue
    from shmq.store.mapped_file import MappedFile

WIDTH = 8  # int64 words per row: 64 bytes, one cache line
MAX_OFFSET = 0  # next queue offset to write
MAX_PHYS_END = 1  # end of the last dispatched record in the commitlog (-1: none)
FILE_FROM = 2  # queue byte offset where the attached file starts
FILE_LIMIT = 3  # bytes of the attached file that may be written (its reserved bytes); -1: none attached
FILE_ADDR = 4  # address of the attached file's mapping (0: none attached)
PENDING = 5  # the put's scratch: entries it assigns to the queue
_SLOT = struct.Struct("<i")
NO_SLOT = -1


class QueueSlots:
    """Rows of queue numbers; ``queues[slot]`` is the ConsumeQueue of a row (None: a free one)."""

    def __init__(self, capacity: int = 64) -> None:
        self.table = np.zeros((max(1, capacity), WIDTH), np.int64)
        self.table[:, FILE_LIMIT] = -1
        self.words = _words(self.table)  # a row's words as Python ints
        self.queues: list[ConsumeQueue | None] = []
        self.files: list[MappedFile | None] = []  # the attached file of each row
        self._pins: list[memoryview | None] = []  # keeps the attached mapping mapped
        # topic -> the slot of each queue id, packed int32 (-1: no row), for the compiled put
        self.by_topic: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self.queues)

    def add(self, cq: ConsumeQueue | None) -> int:
        """A new row (zeros, nothing attached) for ``cq``; the table doubles when full."""
        slot = len(self.queues)
        if slot == len(self.table):
            bigger = np.zeros((2 * len(self.table), WIDTH), np.int64)
            bigger[:, FILE_LIMIT] = -1
            bigger[:slot] = self.table
            self.table = bigger
            self.words = _words(bigger)
        self.queues.append(cq)
        self.files.append(None)
        self._pins.append(None)
        return slot

    def adopt(self, cq: ConsumeQueue) -> int:
        """Move ``cq``'s numbers into a row of this table (its put by ``shmq.store.write.multi_put``)."""
        slot = self.add(cq)
        w, i = self.words, slot * WIDTH
        w[i + MAX_OFFSET] = cq.max_offset
        w[i + MAX_PHYS_END] = cq.max_phys_end
        cq.move_to(self, slot)
        packed = bytearray(self.by_topic.get(cq.topic, b""))
        need = (cq.queue_id + 1) * 4
        if len(packed) < need:
            packed += _SLOT.pack(NO_SLOT) * ((need - len(packed)) // 4)
        _SLOT.pack_into(packed, cq.queue_id * 4, slot)
        self.by_topic[cq.topic] = bytes(packed)
        return slot

    def attach(self, slot: int, mf: MappedFile) -> None:
        """Cache ``mf`` (the queue's last file) in the row: where it starts, its reserved bytes,
        its address, pinned by a view of this table's own."""
        self.detach(slot)
        pin = memoryview(mf.mm)
        address = np.frombuffer(pin, np.uint8).ctypes.data
        i = slot * WIDTH
        w = self.words
        w[i + FILE_FROM] = mf.file_from_offset
        w[i + FILE_ADDR] = address
        w[i + FILE_LIMIT] = min(mf.size, mf.reserved_position, len(pin))
        self._pins[slot] = pin
        self.files[slot] = mf

    def detach(self, slot: int) -> None:
        """Forget the row's file: the put attaches again before it writes there."""
        i = slot * WIDTH
        w = self.words
        w[i + FILE_LIMIT] = -1
        w[i + FILE_ADDR] = 0
        pin = self._pins[slot]
        if pin is not None:
            self._pins[slot] = None
            self.files[slot] = None
            pin.release()

    def release(self, slot: int) -> None:
        """The queue of ``slot`` is gone (closed or destroyed): its row no longer names it."""
        self.detach(slot)
        cq = self.queues[slot]
        self.queues[slot] = None
        if cq is not None:
            packed = self.by_topic.get(cq.topic)
            if packed is not None and len(packed) >= (cq.queue_id + 1) * 4:
                b = bytearray(packed)
                _SLOT.pack_into(b, cq.queue_id * 4, NO_SLOT)
                self.by_topic[cq.topic] = bytes(b)


def _words(table: np.ndarray) -> memoryview:
    """The table's int64 words as a flat "q" view (indexing it gives Python ints, ~3x faster than numpy's scalars)."""
    return memoryview(table.data).cast("B").cast("q")
