"""HEARTBEAT: a client shows it is there. Liveness itself is the client's held semaphore (the
broker checks it on its timer); the frame only has to be well formed, so a client that writes
garbage is dropped like for any other frame."""

from __future__ import annotations

from shmq.broker.answers import Peer
from shmq.codec import frames as P


class HeartbeatProcessor:
    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        P.decode_heartbeat(view)
