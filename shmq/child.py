"""What every shmq process run as a child of a program has in common (``shmq.Broker``,
``shmq.NameServer``): started with its output in a log file, waited for until it serves,
stopped with SIGTERM (SIGKILL after a timeout), and what it left removed if it did not exit
cleanly, since no later process may ever start under its name to do that."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Self

from shmq.errors import BrokerStartError
from shmq.store import files

log = logging.getLogger(__name__)


class ChildProcess:
    """A child process named ``name``, a ``what`` ("broker", "name server") in messages."""

    what = "process"
    name: str
    log_path: str
    process: subprocess.Popen[bytes]

    def _spawn(self, cmd: list[str], timeout: float, ready: Callable[[], bool]) -> None:
        """Start ``cmd`` appending to ``log_path`` (made 0600) and return once ``ready()``; a
        start that fails is killed, its leftovers removed, and raised as BrokerStartError."""
        log_fd = files.open_file(self.log_path, os.O_WRONLY | os.O_APPEND)[0]
        self._log_offset = os.fstat(log_fd).st_size
        with os.fdopen(log_fd, "ab") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        try:
            self._wait(timeout, ready)
        except BaseException:
            self.kill()
            self._reclaim()  # nobody gets this object to stop it later
            self._cleanup()
            raise

    def _wait(self, timeout: float, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"{self.what} {self.name!r} exited with status {self.process.returncode}:\n{self.log()}"
                )
            if ready():
                return
            time.sleep(0.01)
        raise BrokerStartError(f"{self.what} {self.name!r} did not come up within {timeout} s:\n{self.log()}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """What the process wrote to its log since it was started."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful: the process removes its own IPC objects) and wait; the exit status.

        A process that did not exit cleanly (it crashed, or was SIGKILLed after ``timeout``
        seconds) could not remove its IPC objects, so stop removes them."""
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
        """SIGKILL, like a crash (for tests): leftovers stay until the next process of this name
        starts, or ``stop`` is called."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def _reclaim(self) -> None:
        removed = self._remove_leftovers()
        if removed:
            log.warning(
                "%s %r exited with status %s; removed what it left: %s",
                self.what,
                self.name,
                self.process.returncode,
                ", ".join(removed),
            )

    def _remove_leftovers(self) -> list[str]:
        """Remove the IPC objects a dead process of this name left; what was removed. Each kind
        of child names its own objects (``Broker``, ``NameServer``): there is no default."""
        raise NotImplementedError(f"{type(self).__name__} does not say which IPC objects it leaves")

    def _cleanup(self) -> None:
        """Remove the launcher's own files (a temporary config or log)."""

    def _state(self) -> str:
        code = self.process.poll()
        return "running" if code is None else f"exited {code}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
