"""The master broker's HA sender child: started, watched on the tick, restarted, stopped.

The sender (``python -m shmq ha``) is a process of its own so that a slow replica, a hostile
TCP peer or a bug in the network code can never stall the broker loop. The broker only checks
it with ``Popen.poll`` (no blocking call) every ``CHECK_NS``; a sender that exits is restarted
after a backoff that doubles from ``BACKOFF_MIN_S`` to ``BACKOFF_MAX_S`` and starts over once a
sender stayed up ``STABLE_S``. A sender that cannot run at all (its port is taken by another
broker's sender) thus costs one start every 5 s and a line in ``STORE/ha.log``, nothing more.
The broker's effective config (it holds haAuthToken) goes to the sender in an anonymous memory
file the child inherits (``--config /dev/fd/N``): no file on disk that a killed broker could
leave behind with the token in it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable

from shmq.config import BrokerConfig
from shmq.store import files

log = logging.getLogger("shmq.broker")

CHECK_NS = 200_000_000
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0
STABLE_S = 30.0
STOP_WAIT_S = 2.0


def describe_exit(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


class SenderSupervisor:
    """Owns the sender child of one broker; every method returns at once except ``stop``."""

    def __init__(self, store_dir: str, name: str, config: BrokerConfig) -> None:
        self.store_dir = store_dir
        self.name = name
        self.log_path = os.path.join(store_dir, "ha.log")
        self._config_fd = os.memfd_create(f"shmq-{name}-ha.conf", os.MFD_CLOEXEC)
        os.write(self._config_fd, config.to_properties().encode())
        self.config_path = f"/dev/fd/{self._config_fd}"  # each open of it reads from the start
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._started_ns = 0
        self._next_check = 0
        self._restart_at: int | None = None
        self._backoff = BACKOFF_MIN_S

    def start(self, now: int) -> None:
        """Spawn the sender (its output appended to STORE/ha.log); a spawn that fails is retried."""
        cmd = [
            sys.executable,
            "-m",
            "shmq",
            "ha",
            "--store",
            self.store_dir,
            "--name",
            self.name,
            "--config",
            self.config_path,
        ]
        try:
            fd = files.open_file(self.log_path, os.O_WRONLY | os.O_APPEND)[0]
            try:
                self.process = subprocess.Popen(
                    cmd, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL, pass_fds=(self._config_fd,)
                )
            finally:
                os.close(fd)
        except OSError as e:
            log.error("HA sender could not be started: %s; retrying in %.1f s", e, self._backoff)
            self._schedule_restart(now)
            return
        self._started_ns = now
        self._restart_at = None
        log.info("HA sender started (pid %d), log in %s", self.process.pid, self.log_path)

    def check(self, now: int) -> None:
        """On the broker's tick: every CHECK_NS, reap a sender that exited and restart it when due."""
        if now < self._next_check:
            return
        self._next_check = now + CHECK_NS
        p = self.process
        if p is not None:
            status = p.poll()
            if status is None:
                return
            self.process = None
            if (now - self._started_ns) / 1e9 >= STABLE_S:
                self._backoff = BACKOFF_MIN_S
            log.warning(
                "HA sender (pid %d) ended: %s; restarting in %.1f s (see %s)",
                p.pid,
                describe_exit(status),
                self._backoff,
                self.log_path,
            )
            self._schedule_restart(now)
            return
        if self._restart_at is not None and now >= self._restart_at:
            self.restarts += 1
            self.start(now)

    def _schedule_restart(self, now: int) -> None:
        self._restart_at = now + int(self._backoff * 1e9)
        self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)

    def stop(self, nudge: Callable[[], None]) -> None:
        """At broker shutdown: SIGTERM, ``nudge`` (the wake-up datagram: its signal handler only
        sets a flag, the datagram ends its sleep), up to STOP_WAIT_S for it to go, then SIGKILL;
        the config goes."""
        p, self.process = self.process, None
        try:
            if p is not None and p.poll() is None:
                p.terminate()
                nudge()
                try:
                    p.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    log.warning("HA sender (pid %d) did not stop within %.0f s: killed", p.pid, STOP_WAIT_S)
                    p.kill()
                    p.wait()
        finally:
            os.close(self._config_fd)
