"""What a put answers: where each record went (RocketMQ's PutMessageResult)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(slots=True)
class PutMessageResult:
    """Where the records of a put went: per record its physical and queue offset (-1 for a
    refused one), and for the first stored one as plain ints."""

    status: PutStatus
    wrote_offset: int  # physical offset of the first stored record
    wrote_bytes: int  # from the first stored record to the end of the last
    queue_offset: int  # queue offset of the first stored record
    msg_num: int  # records stored
    store_timestamp: int
    _phys: np.ndarray | None = None  # records may straddle a segment end: not wrote_offset + sizes
    _qoffs: np.ndarray | None = None  # None for a single stored record: made when asked for
    refused: np.ndarray | None = None  # per record: 0 stored, k > 0 refused for refusals[k - 1]; None: all stored
    refusals: Sequence[tuple[int, str]] = ()  # (response code, reason)
    # per record its queue's row in the writer's QueueSlots table (-1: none), when the put went
    # through the table: the broker publishes those queues' max offsets from the table's rows
    queue_rows: np.ndarray | None = None

    @classmethod
    def nothing_stored(cls, n: int) -> PutMessageResult:
        """The result of a put of ``n`` records none of which was stored (all refused)."""
        return cls(PutStatus.PUT_OK, -1, 0, -1, 0, 0, np.full(n, -1, np.int64), np.full(n, -1, np.int64))

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def phys_offsets(self) -> np.ndarray:
        if self._phys is None:
            self._phys = np.array([self.wrote_offset], np.int64)
        return self._phys

    @property
    def queue_offsets(self) -> np.ndarray:
        if self._qoffs is None:
            self._qoffs = np.array([self.queue_offset], np.int64)
        return self._qoffs

    def spread(self, n: int, rows: np.ndarray) -> PutMessageResult:
        """This result of the records ``rows`` of a put of ``n`` as the result of the whole put."""
        phys, qoffs = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        phys[rows] = self.phys_offsets
        qoffs[rows] = self.queue_offsets
        self._phys, self._qoffs = phys, qoffs
        if self.queue_rows is not None:
            spread = np.full(n, -1, np.int64)
            spread[rows] = self.queue_rows
            self.queue_rows = spread
        return self

    def reason(self, i: int) -> tuple[int, str]:
        """(response code, reason) of refused record ``i``."""
        assert self.refused is not None and self.refused[i]
        return self.refusals[int(self.refused[i]) - 1]
