"""A bare channel client for tests that speak frames directly (garbage, long polling)."""

from __future__ import annotations

import os
import time

from shmq.codec import frames as P
from shmq.ring.channel import Channel
from shmq.ring.control import Admin, Attach, ControlQueue, Detach, new_client_id
from shmq.ring.doorbell import wake
from shmq.ring.framing import CONSUMER
from shmq.ring.liveness import Liveness
from shmq.ring.state import StateReader


class RawClient:
    def __init__(self, broker: str, role: str = "consumer") -> None:
        self.state = StateReader.open(broker)
        self.control = ControlQueue.open(int(self.state.view.header[0]["control_key"]))
        self.liveness = Liveness.hold()
        self.client_id = new_client_id()
        self._req = 0
        reply = self.control.call(
            Attach(self.client_id, self._next(), os.getpid(), self.liveness.key, 65536, {"role": role}), 5
        )
        assert reply.ok, reply.body
        self.channel = Channel.open(broker, self.client_id)

    def _next(self) -> int:
        self._req += 1
        return self._req

    def admin(self, command: str, **args):
        return self.control.call(Admin(self.client_id, self._next(), command, args, self.channel.secret), 5)

    def write(self, kind: int, payload: bytes) -> None:
        assert self.channel.requests.try_write(kind, payload)
        wake(self.channel.requests, CONSUMER, self.channel.broker_bell)

    def read(self, timeout: float = 5.0):
        deadline = time.monotonic() + timeout
        ring = self.channel.responses
        while time.monotonic() < deadline:
            frame = ring.read()
            if frame is not None:
                kind, view = frame
                out = P.decode(kind, bytes(view))
                ring.release()
                return kind, out
            time.sleep(0.001)
        raise TimeoutError("no response")

    def close(self, detach: bool = True) -> None:
        if detach:
            self.control.call(Detach(self.client_id, self._next(), self.channel.secret), 5)
        self.channel.close()
        self.state.close()
        self.liveness.release()
