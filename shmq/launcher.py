"""shmq.Broker: run a broker as a child process (for programs, demos and tests)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from shmq.child import ChildProcess
from shmq.config import BrokerConfig
from shmq.errors import BrokerNotFoundError, ShmqError
from shmq.namesrv.segment import RouteReader
from shmq.ring.liveness import Watch
from shmq.ring.reclaim import reclaim_dead_broker
from shmq.ring.shm import check_broker_name
from shmq.ring.state import StateReader
from shmq.store import files


class Broker(ChildProcess):
    """``python -m shmq broker`` as a child; returns once it serves (and, when its name server
    runs, is registered with it). Its log is ``STORE/broker.log``.

    Its name: ``name``, else the config's ``brokerName``, else ``SHMQ_BROKER``, else
    ``default``, the order of ``shmq broker``; the clients of a program that sets neither find
    it under the same name, since they fall back to ``SHMQ_BROKER`` and ``default`` too.
    """

    what = "broker"

    def __init__(
        self,
        store_dir: str,
        name: str | None = None,
        config: Mapping[str, Any] | str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.store_dir = os.path.abspath(store_dir)
        checked = BrokerConfig.load(config)  # a bad key, name or role fails here, in the caller
        checked.check_role()
        self.name = check_broker_name(checked.resolve_name(name))
        self.namesrv = checked.namesrv_addr or None
        files.prepare_root(self.store_dir, checked.group_id())  # 0700 (0750 with shmGroup) before the log is made
        self.log_path = os.path.join(self.store_dir, "broker.log")
        self._config_file: str | None = None
        cmd = [sys.executable, "-m", "shmq", "broker", "--store", self.store_dir, "--name", self.name]
        if isinstance(config, Mapping):
            props = checked.to_properties()
            fd, self._config_file = tempfile.mkstemp(prefix=f"shmq-{self.name}-", suffix=".conf")
            with os.fdopen(fd, "w") as f:
                f.write(props)
            cmd += ["--config", self._config_file]
        elif config is not None:
            cmd += ["--config", os.fspath(config)]
        routes = RouteReader(self.namesrv) if self.namesrv else None
        try:
            self._spawn(cmd, timeout, lambda: self._serves() and (routes is None or self._registered(routes)))
        finally:
            if routes is not None:
                routes.close()

    def _serves(self) -> bool:
        """Whether this child's state segment is up and its liveness held."""
        try:
            reader = StateReader.open(self.name)
        except (BrokerNotFoundError, ShmqError):
            return False
        h = reader.view.header[0]
        ready = int(h["broker_pid"]) == self.process.pid and Watch(int(h["alive_key"])).is_alive()
        reader.close()
        return ready

    def _registered(self, routes: RouteReader) -> bool:
        """Whether the broker is in its name server's routes, or no name server runs to be in
        (a refused registration ends the start: the process exits and says why)."""
        if not routes.server_alive():
            return True
        try:
            return any(b.pid == self.process.pid for b in routes.read().brokers)
        except ShmqError:
            return False

    def kill(self) -> None:
        super().kill()
        self._cleanup()

    def _remove_leftovers(self) -> list[str]:
        return reclaim_dead_broker(self.name, self.store_dir)

    def _cleanup(self) -> None:
        if self._config_file:
            try:
                os.unlink(self._config_file)
            except FileNotFoundError:
                pass
            self._config_file = None

    def __repr__(self) -> str:
        return f"Broker(name={self.name!r}, store_dir={self.store_dir!r}, pid={self.pid}, state={self._state()})"
