"""A broker's link to its name server (``namesrvAddr``): register, stay registered, deregister.

``NameServerLink.start`` registers once, in the broker's start: a refusal (another live broker
holds this broker name and id) stops the start with the name server's one-line reason; a name
server that is not running does not. A daemon thread then looks at the route table every
``LOOK_S`` (a seqlock read of shared memory, off the broker loop) and registers again whenever
a live name server's table lacks this broker (``shmq.namesrv.registration``): a name server
started later, or restarted. ``stop`` ends the thread and deregisters (a clean broker stop).
"""

from __future__ import annotations

import logging
import threading
import time

from shmq.config import BrokerConfig
from shmq.errors import NameServerNotFoundError, RegistrationError, ShmqError
from shmq.namesrv.registration import LOOK_S, Schedule, registration_for
from shmq.namesrv.routes import RouteTable
from shmq.namesrv.segment import RouteReader
from shmq.namesrv.server import Registration
from shmq.ring.control import Admin, ControlQueue, Reply, new_client_id

log = logging.getLogger("shmq.broker")

CALL_TIMEOUT_S = 2.0


class NameServerLink:
    """Registration of one broker process with name server ``config.namesrv_addr``."""

    def __init__(self, namesrv: str, reg: Registration) -> None:
        self.namesrv = namesrv
        self.reg = reg
        self._reader = RouteReader(namesrv)
        self._client_id = new_client_id()
        self._req_ids = 0
        self._schedule = Schedule()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"namesrv-link-{namesrv}", daemon=True)
        self._refused: str | None = None

    @classmethod
    def start(cls, config: BrokerConfig, name: str, pid: int, alive_key: int, store_dir: str) -> NameServerLink | None:
        """Register (RegistrationError if refused) and start watching; None for a standalone broker."""
        if not config.namesrv_addr:
            return None
        link = cls(config.namesrv_addr, registration_for(config, name, pid, alive_key, store_dir))
        if link._reader.server_alive():
            outcome = link._register()
            if outcome == "refused":
                link._reader.close()
                raise RegistrationError(f"name server {link.namesrv!r} refused this broker: {link._refused}")
        else:
            log.warning("name server %r is not running; broker %r registers once it serves", link.namesrv, name)
        link._thread.start()
        return link

    def stop(self) -> None:
        """End the watch and deregister (best effort: a name server that is gone has nothing to forget)."""
        self._stop.set()
        self._thread.join()
        try:
            if self._reader.server_alive():
                args = {"broker_name": self.reg.broker_name, "broker_id": self.reg.broker_id, "pid": self.reg.pid}
                self._call("unregister_broker", args)
        except ShmqError as e:
            log.warning("could not deregister from name server %r: %s", self.namesrv, e)
        self._reader.close()

    # ------------------------------------------------------------------ internals

    def _run(self) -> None:
        while not self._stop.wait(LOOK_S):
            try:
                self._look()
            except Exception:
                log.exception("looking at name server %r failed", self.namesrv)

    def _look(self) -> None:
        table: RouteTable | None
        try:
            table = self._reader.read()
        except NameServerNotFoundError:
            table = None
        if self._schedule.due(table, self._reader.server_alive(), self.reg, time.monotonic_ns()):
            self._register()

    def _register(self) -> str:
        """Send the registration; "ok", "refused" (the reason kept and logged) or "failed"."""
        try:
            reply = self._call("register_broker", self.reg.to_args())
        except ShmqError as e:
            log.warning("registering with name server %r failed: %s", self.namesrv, e)
            outcome = "failed"
        else:
            if reply.ok:
                log.info(
                    "registered with name server %r as broker %r id %d",
                    self.namesrv,
                    self.reg.broker_name,
                    self.reg.broker_id,
                )
                self._refused, outcome = None, "ok"
            else:
                reason = str(reply.body.get("error", "no reason given"))
                if reason != self._refused:
                    log.warning("name server %r refused the registration: %s", self.namesrv, reason)
                self._refused, outcome = reason, "refused"
        self._schedule.sent(outcome, time.monotonic_ns())
        return outcome

    def _call(self, command: str, args: dict[str, object]) -> Reply:
        key = self._reader.control_key()
        if key is None:
            raise NameServerNotFoundError(f"name server {self.namesrv!r} is not running")
        queue = ControlQueue.open(key)
        self._req_ids += 1
        return queue.call(Admin(self._client_id, self._req_ids, command, dict(args)), CALL_TIMEOUT_S)
