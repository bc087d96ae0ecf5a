"""Message ids: the client's UNIQ_KEY (pid, random word, clock, counter) and the store's offset
id (store host + commitlog offset). Apart from the record layouts because making a UNIQ_KEY
reads the pid and the clock: the record codec stays pure."""

from __future__ import annotations

import os
import threading
import time

import numpy as np


def offset_msg_id(store_host: int, physical_offset: int) -> str:
    """Store host (8 bytes) + commitlog offset (8 bytes) as 32 upper-case hex chars."""
    return f"{store_host & 0xFFFFFFFFFFFFFFFF:016X}{physical_offset:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[int, int]:
    """Inverse of offset_msg_id: (store host, commitlog offset)."""
    if len(msg_id) != 32:
        raise ValueError(f"offset message id must be 32 hex chars, got {msg_id!r}")
    return int(msg_id[:16], 16), int(msg_id[16:], 16)


class UniqKeyGenerator:
    """Client message ids (UNIQ_KEY): pid (4) + random (4) + unix seconds (4) + counter (4).

    Unique across processes on a host (pid + a random word survive pid reuse) and sortable by
    creation within one producer; 16 bytes shown as 32 upper-case hex chars.
    """

    def __init__(self) -> None:
        self._prefix = f"{os.getpid() & 0xFFFFFFFF:08X}{int.from_bytes(os.urandom(4), 'big'):08X}"
        self._counter = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFFFFFF
            n = self._counter
        return f"{self._prefix}{int(time.time()) & 0xFFFFFFFF:08X}{n:08X}"

    def next_block(self, count: int) -> np.ndarray:
        """`count` ids at once (a batch) as an S32 array: one lock, one clock read, hex digits from numpy."""
        return uniq_block(*self.reserve(count), count)

    def reserve(self, count: int) -> tuple[bytes, int]:
        """Take `count` ids: what they share (pid, random word, second: 24 hex digits) and the
        first counter (the i-th id's counter is ``(first + i) & 0xFFFFFFFF``; see uniq_block)."""
        with self._lock:
            first = self._counter + 1
            self._counter = (self._counter + count) & 0xFFFFFFFF
        return f"{self._prefix}{int(time.time()) & 0xFFFFFFFF:08X}".encode(), first


def uniq_block(prefix: bytes, first: int, count: int) -> np.ndarray:
    """The UNIQ_KEYs ``UniqKeyGenerator.reserve`` gave: `prefix` + 8 hex digits of each counter, as S32."""
    out = np.empty((count, 32), np.uint8)
    out[:, :24] = np.frombuffer(prefix, np.uint8)
    out[:, 24:] = hex_digits((first + np.arange(count, dtype=np.uint64)) & 0xFFFFFFFF, 8)
    return out.view("S32").ravel()


_HEX_PAIRS = np.array([list(f"{i:02X}".encode()) for i in range(256)], np.uint8)


def hex_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """Upper-case hex of non-negative ints, zero-padded to an even `digits` <= 16, as an (n, digits) uint8 array."""
    raw = np.asarray(values).astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - digits // 2 :]
    return _HEX_PAIRS[raw].reshape(len(raw), digits)


def offset_msg_id_digits(store_hosts: int | np.ndarray, physical_offsets: np.ndarray) -> np.ndarray:
    """offset_msg_id for many records at once (one store host for all, or one per record), as
    an (n, 32) uint8 array of ASCII hex digits (what a columnar reader copies from)."""
    n = len(physical_offsets)
    out = np.empty((n, 32), np.uint8)
    out[:, :16] = hex_digits(np.broadcast_to(np.asarray(store_hosts, np.int64).astype(np.uint64), (n,)), 16)
    out[:, 16:] = hex_digits(np.asarray(physical_offsets, np.uint64), 16)
    return out


def offset_msg_ids(store_hosts: int | np.ndarray, physical_offsets: np.ndarray) -> list[str]:
    """offset_msg_id for many records at once (one store host for all, or one per record)."""
    return offset_msg_id_digits(store_hosts, physical_offsets).view("S32").ravel().astype(str).tolist()
