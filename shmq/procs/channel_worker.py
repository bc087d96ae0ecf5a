"""Channels are made and unmapped off the broker loop, by one worker thread in the broker process.

Backing a channel's segment (``posix_fallocate``, so a full /dev/shm is a clear error and never
a SIGBUS) costs ~0.3 ms per MiB, and freeing it again ~0.15 ms per MiB: done on the loop thread,
one client attaching 64 MiB rings stalled every other client ~40 ms per attach, and ~20 ms per
detach. The worker does both; ``posix_fallocate``, ``mmap`` and ``munmap`` release the GIL, so
the loop keeps serving meanwhile. The loop collects finished channels (``done``) and registers
their clients itself: the worker never touches the broker core. A channel that goes has its
names removed by the loop at once (cheap while the broker still maps it), so nothing of it is
visible once its client left the state table; the unmapping that frees its pages is queued here.

A finished attach rings the broker's doorbell, so a parked loop collects it at once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

import posix_ipc

from shmq.errors import BrokerGoneError, ShmqError
from shmq.ring import shm
from shmq.ring.channel import Channel, channel_name, client_bell_name
from shmq.ring.control import Attach
from shmq.ring.doorbell import Doorbell
from shmq.ring.liveness import Watch

log = logging.getLogger("shmq.broker")


@dataclass(eq=False)
class Making:
    """An attach whose channel is being made: what the loop needs to register its client once
    it is (``channel``), or to refuse it (``error``)."""

    req: Attach
    watch: Watch
    secret: int
    broker: str
    bell: Doorbell
    channel: Channel | None = None
    error: Exception | None = None


@dataclass(eq=False)
class _Unmap:
    channel: Channel


class ChannelWorker:
    """One thread making and unmapping channels in order; started with the first job."""

    def __init__(self) -> None:
        self._jobs: deque[Making | _Unmap] = deque()
        self._done: deque[Making] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def make(self, m: Making) -> None:
        """Make ``m``'s channel (old leftovers of its name removed first); it shows up in ``done``."""
        self._submit(m)

    def unmap(self, channel: Channel) -> None:
        """Close ``channel``, whose names are removed already (this side's last use of it);
        at once once stopped."""
        with self._cv:
            stopped = self._stopping
        if stopped:
            _close(channel)
        else:
            self._submit(_Unmap(channel))

    def done(self) -> list[Making]:
        """The attaches finished since the last call (made, or failed with ``error``)."""
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def stop(self) -> list[Making]:
        """Run what is queued, except that no further channel is made (those attaches fail with
        ``BrokerGoneError``), join the thread; the attaches finished but not collected."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join()
        return self.done()

    def _submit(self, job: Making | _Unmap) -> None:
        with self._cv:
            if self._stopping:
                raise BrokerGoneError("the broker is stopping")
            self._jobs.append(job)
            self._cv.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="shmq-channels", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stopping:
                    self._cv.wait()
                if not self._jobs:
                    return
                job, stopping = self._jobs.popleft(), self._stopping
            if isinstance(job, _Unmap):
                _close(job.channel)
                continue
            if stopping:
                job.error = BrokerGoneError("the broker stopped before the channel was made")
            else:
                job.channel, job.error = _create(job)
            self._done.append(job)
            try:
                job.bell.ring()
            except posix_ipc.Error:
                log.exception("could not ring the broker's doorbell after making a channel")


def _create(m: Making) -> tuple[Channel | None, Exception | None]:
    """The channel of ``m``, or the error that kept it from being made."""
    cid = m.req.client_id
    try:
        shm.unlink_segment(channel_name(m.broker, cid))  # a dead client's, with a recycled id
        try:
            posix_ipc.unlink_semaphore(client_bell_name(m.broker, cid))
        except posix_ipc.ExistentialError:
            pass
        return Channel.create(m.broker, cid, m.req.ring_bytes, m.bell, m.secret), None
    except Exception as e:  # any failure is that client's refusal, never the worker's end
        if not isinstance(e, (ShmqError, OSError, posix_ipc.Error)):
            log.exception("making the channel of client %d failed", cid)
        return None, e


def _close(channel: Channel) -> None:
    try:
        channel.close()
    except Exception:
        log.exception("unmapping the channel of client %d failed", channel.client_id)
