"""Answers to sends: queued per client; under SYNC_FLUSH held until one group flush covers them,
under SYNC_MASTER then handed to ``shmq.broker.replication.ReplicaWaits`` until a replica has them.

A client's ``out`` holds (frame kind, payload) items, or (PACKED, bytes of whole SEND_RESULT
ring frames) for a run of sends answered with one numpy fill (``P.pack_send_results``): the
process loop copies those into the response ring in one go.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from shmq.codec import frames as P

if TYPE_CHECKING:
    from shmq.broker.replication import ReplicaWaits

log = logging.getLogger("shmq.broker")

PACKED = 0  # out item kind: (PACKED, bytes of whole SEND_RESULT frames)
_STATUS_AT = 8  # a SEND_RESULT payload's status: u16 after the request id


class EncodedResult:
    """One SEND_RESULT payload encoded already (the compiled SEND_BATCH lane's answer, its phys
    offsets written by the put itself); its status can still change until it is answered."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytearray) -> None:
        self.payload = payload

    def __len__(self) -> int:
        return 1  # one answer

    def set_status(self, status: int) -> None:
        self.payload[_STATUS_AT : _STATUS_AT + 2] = status.to_bytes(2, "little")


Results = list[P.SendResultFrame] | list[P.SendMultiResultFrame] | np.ndarray | EncodedResult


@dataclass(eq=False)
class Peer:
    """A client as the core sees it (no IPC objects): who it is, its answers waiting for ring room,
    whether it lives."""

    client_id: int
    pid: int = 0
    role: str = "producer"
    group: str | None = None
    alive_key: int = 0  # its liveness semaphore (published for the monitor)
    attached_ms: int = 0
    out: deque[tuple[int, bytes]] = field(default_factory=deque)
    alive: bool = True


def encoded(r: P.SendResultFrame | P.SendMultiResultFrame) -> tuple[int, bytes]:
    """An answer as a response frame (kind, payload)."""
    if isinstance(r, P.SendMultiResultFrame):
        return P.SEND_MULTI_RESULT, P.encode_send_multi_result(r)
    return P.SEND_RESULT, P.encode_send_result(r)


def set_status(results: Results, status: int) -> None:
    """Give every stored record of ``results`` ``status`` (records refused with an error keep theirs)."""
    if isinstance(results, np.ndarray):
        results["status"] = status
        return
    if isinstance(results, EncodedResult):
        results.set_status(status)
        return
    for r in results:
        if isinstance(r, P.SendMultiResultFrame):
            r.statuses[r.statuses == P.SEND_OK] = status
        else:
            r.status = status


def answer(peer: Peer, results: Results) -> None:
    """Queue ``results`` on ``peer``'s out (packed rows as one block)."""
    if isinstance(results, np.ndarray):
        peer.out.append((PACKED, results.tobytes()))
    elif isinstance(results, EncodedResult):
        peer.out.append((P.SEND_RESULT, bytes(results.payload)))
    else:
        peer.out.extend(encoded(r) for r in results)


class Answers:
    """Send answers of a pass; under SYNC_FLUSH or SYNC_MASTER they wait for ``group_commit``."""

    def __init__(
        self, sync_flush: bool, flush: Callable[[int], bool], stats: dict[str, int], replica: ReplicaWaits | None = None
    ) -> None:
        self.sync_flush = sync_flush
        self._flush = flush  # flush the commitlog up to an offset; False if it failed
        self.stats = stats
        self.replica = replica  # SYNC_MASTER: where the group goes after the flush
        self._hold = sync_flush or replica is not None
        self.pending: list[tuple[Peer, Results]] = []
        self._end = 0

    def add(self, peer: Peer, end: int, results: Results) -> None:
        """Queue a put's answers (SendResultFrames, or ``P.RESULT_FRAME`` rows, packed); under
        SYNC_FLUSH or SYNC_MASTER they wait for the group commit of the pass that covers ``end``."""
        if not len(results):
            return
        if self._hold:
            self.pending.append((peer, results))
            self._end = max(self._end, end)
        else:
            answer(peer, results)

    def group_commit(self) -> int:
        """The pass's held answers as one group: under SYNC_FLUSH flushed once (then answered, or
        handed to the replica wait under SYNC_MASTER); under SYNC_MASTER alone handed over at once.

        Flushed here, not by the store's GroupCommitService thread: handing the group to a thread
        and back cost two wake-ups per group, several times the fdatasync (measured: 1.8x the
        throughput of 8 sync senders). A flush that fails answers FLUSH_DISK_TIMEOUT at once
        (no replica wait). Returns the answers queued now.
        """
        pending, self.pending = self.pending, []
        start = time.monotonic_ns()
        ok = True
        if self.sync_flush:
            try:
                ok = self._flush(self._end)
            except OSError as e:
                log.error("group commit flush failed: %s", e)
                ok = False
            stats = self.stats
            stats["group_commits"] += 1
            stats["group_commit_ns"] += time.monotonic_ns() - start
        if ok and self.replica is not None:
            if self.sync_flush:
                self.stats["flushed_answers"] += sum(len(r) for _, r in pending)
            return self.replica.hold(pending, self._end, start)
        n = 0
        for peer, results in pending:
            if not peer.alive:
                continue
            if not ok:
                set_status(results, P.FLUSH_DISK_TIMEOUT)
            answer(peer, results)
            n += len(results)
        if self.sync_flush:
            self.stats["flushed_answers"] += n
        return n
