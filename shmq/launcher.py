"""shmq.Broker: run a broker as a child process (for programs, demos and tests)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from shmq.config import BrokerConfig
from shmq.errors import BrokerNotFoundError, BrokerStartError, ShmqError
from shmq.namesrv.segment import RouteReader
from shmq.ring.liveness import Watch
from shmq.ring.reclaim import reclaim_dead_broker
from shmq.ring.shm import check_broker_name
from shmq.ring.state import StateReader
from shmq.store import files

log = logging.getLogger(__name__)


class Broker:
    """``python -m shmq broker`` as a child; returns once it serves. Its log is ``STORE/broker.log``.

    Its name: ``name``, else the config's ``brokerName``, else ``SHMQ_BROKER``, else
    ``default``, the order of ``shmq broker``; the clients of a program that sets neither find
    it under the same name, since they fall back to ``SHMQ_BROKER`` and ``default`` too.
    """

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
        self._config_file = None
        cmd = [sys.executable, "-m", "shmq", "broker", "--store", self.store_dir, "--name", self.name]
        if isinstance(config, Mapping):
            props = checked.to_properties()
            fd, self._config_file = tempfile.mkstemp(prefix=f"shmq-{self.name}-", suffix=".conf")
            with os.fdopen(fd, "w") as f:
                f.write(props)
            cmd += ["--config", self._config_file]
        elif config is not None:
            cmd += ["--config", os.fspath(config)]
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        log_fd = files.open_file(self.log_path, os.O_WRONLY | os.O_APPEND)[0]  # 0600 like the store's files
        with os.fdopen(log_fd, "ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            self._reclaim()  # nobody gets this object to stop it later
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_ready(self, timeout: float) -> None:
        routes = RouteReader(self.namesrv) if self.namesrv else None
        try:
            self._wait_serving(timeout, routes)
        finally:
            if routes is not None:
                routes.close()

    def _wait_serving(self, timeout: float, routes: RouteReader | None) -> None:
        """Until the broker serves and, if its name server runs, is registered (a refused
        registration ends the start: the process exits and says why)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"broker {self.name!r} exited with status {self.process.returncode}:\n{self.log()}"
                )
            try:
                reader = StateReader.open(self.name)
            except (BrokerNotFoundError, ShmqError):
                reader = None
            if reader is not None:
                h = reader.view.header[0]
                ready = int(h["broker_pid"]) == self.process.pid and Watch(int(h["alive_key"])).is_alive()
                reader.close()
                if ready and (routes is None or self._registered(routes)):
                    return
            time.sleep(0.01)
        raise BrokerStartError(f"broker {self.name!r} did not come up within {timeout} s:\n{self.log()}")

    def _registered(self, routes: RouteReader) -> bool:
        """Whether the broker is in its name server's routes, or no name server runs to be in."""
        if not routes.server_alive():
            return True
        try:
            return any(b.pid == self.process.pid for b in routes.read().brokers)
        except ShmqError:
            return False

    def log(self) -> str:
        """What this broker wrote to its log since it was started."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful: answer in flight, flush, persist, clean up) and wait; the exit status.

        A broker that did not exit cleanly (it crashed, or was SIGKILLed after ``timeout``
        seconds) could not remove its IPC objects, and no later broker may ever take its name
        to do it, so stop removes them.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.returncode != 0:
            self._reclaim()
        self._cleanup()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL, like a crash (for tests): leftovers stay until the next broker of this name starts."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._cleanup()

    def _reclaim(self) -> None:
        removed = reclaim_dead_broker(self.name, self.store_dir)
        if removed:
            log.warning(
                "broker %r exited with status %s; removed what it left: %s",
                self.name,
                self.process.returncode,
                ", ".join(removed),
            )

    def _cleanup(self) -> None:
        if self._config_file:
            try:
                os.unlink(self._config_file)
            except FileNotFoundError:
                pass
            self._config_file = None

    def __repr__(self) -> str:
        code = self.process.poll()
        state = "running" if code is None else f"exited {code}"
        return f"Broker(name={self.name!r}, store_dir={self.store_dir!r}, pid={self.pid}, state={state})"

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
