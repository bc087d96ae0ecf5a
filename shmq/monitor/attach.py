"""Attachment: a monitor's hold on one broker by name, surviving the broker's restarts.

A broker killed with SIGKILL leaves its state segment behind (the next broker of the name
removes it), so a segment that opens is not proof of a broker: its liveness semaphore is
(``alive_key`` in the header, held by the broker while it lives). When the broker is gone the
mapping is dropped and the name opened again on each ``sample``, which finds the new
broker's segment once it serves. Nothing here writes to the segment.
"""

from __future__ import annotations

import time

from shmq.errors import BrokerGoneError, BrokerNotFoundError
from shmq.monitor.rates import History
from shmq.monitor.snapshot import ProcessWatch, take
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader


class Attachment:
    """Snapshots of broker ``name`` into ``history``; ``down`` says why there are none now."""

    def __init__(self, name: str, history: History | None = None) -> None:
        self.name = name
        self.history = history if history is not None else History()
        self.watch = ProcessWatch()
        self.reader: StateReader | None = None
        self.alive: Watch | None = None
        self.down: str | None = None
        self.down_since = time.monotonic()

    def sample(self) -> bool:
        """Take one snapshot (attaching first if needed); False, with ``down`` set, when the broker is not there."""
        try:
            if self.reader is None:
                self._attach()
            assert self.reader is not None and self.alive is not None
            if not self.alive.is_alive():
                raise BrokerGoneError(
                    f"broker {self.name!r} (pid {self.reader.view.header[0]['broker_pid']}) "
                    "is gone: its liveness semaphore is released"
                )
            snap = take(self.reader, self.name, self.watch)
        except (BrokerNotFoundError, BrokerGoneError) as e:
            self._detach(str(e))
            return False
        self.history.add(snap)
        self.down = None
        return True

    def _attach(self) -> None:
        reader = StateReader.open(self.name)
        self.reader, self.alive = reader, Watch(int(reader.view.header[0]["alive_key"]))

    def _detach(self, reason: str) -> None:
        if self.down is None:
            self.down_since = time.monotonic()
        self.down = reason
        if self.reader is not None:
            self.reader.close()
        self.reader = self.alive = None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.reader = self.alive = None

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
