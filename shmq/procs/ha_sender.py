"""The HA sender process (`shmq ha --store DIR [--name N] [--config FILE]`).

The master broker spawns it (and restarts it if it dies); it can also be run by hand. It
attaches to a running master's state and HA segments, refuses to run twice for one broker, and
exits by itself soon after the broker is gone, so it never outlives the log it streams.
"""
from __future__ import annotations

import logging
import os
import signal
import sys

import posix_ipc

from shmq.config import BrokerConfig
from shmq.errors import ShmqError
from shmq.ha.sender import HASender
from shmq.ha.shared import HASegment
from shmq.ring.channel import follow_broker_bell
from shmq.ring.doorbell import FollowingBell
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader

log = logging.getLogger("shmq.ha")


class StartRefused(Exception):
    """The sender must not run: one line for the operator, exit status 2."""


class BrokerBell:
    """The broker's doorbell, opened on first use and following its generation (state header
    ``bell_gen``): a report that lets SYNC_MASTER answers go wakes the broker at once."""

    def __init__(self, name: str, state: StateReader) -> None:
        self._name = name
        self._state = state
        self._bell: FollowingBell | None = None

    def ring(self) -> None:
        try:
            if self._bell is None:
                state = self._state
                self._bell = follow_broker_bell(self._name, lambda: int(state.view.header["bell_gen"][0]),
                                                state.trust.check_semaphore)
            self._bell.ring()
        except (posix_ipc.Error, ShmqError, OSError) as e:  # the broker's park timeout covers a lost post
            log.debug("cannot ring the broker's bell: %s", e)

    def close(self) -> None:
        if self._bell is not None:
            self._bell.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_broker(store_dir: str, name: str, state: StateReader) -> Watch:
    """The broker's liveness; StartRefused if it is dead or serves another store."""
    h = state.view.header[0]
    watch = Watch(int(h["alive_key"]))
    if not watch.is_alive():
        raise StartRefused(f"broker {name!r} is not running (its liveness semaphore is gone)")
    served = bytes(h["store_dir"]).decode(errors="replace")
    if os.path.realpath(served) != os.path.realpath(store_dir):
        raise StartRefused(f"broker {name!r} serves store {served}, not {store_dir}")
    return watch


def run_ha_sender(store_dir: str, name: str, config: BrokerConfig) -> int:
    """Entry point: serve until the broker dies or SIGTERM/SIGINT; 0, or 2 when it cannot start."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s ha[{name}] %(levelname)s %(message)s")
    store_dir = os.path.abspath(store_dir)
    try:
        state = StateReader.open(name)
    except (ShmqError, OSError) as e:
        print(f"shmq ha: error: {e}", file=sys.stderr)
        return 2
    try:
        return _run(store_dir, name, config, state)
    except (StartRefused, ShmqError, OSError, posix_ipc.Error) as e:
        print(f"shmq ha: error: {e}", file=sys.stderr)
        return 2
    finally:
        state.close()


def _run(store_dir: str, name: str, config: BrokerConfig, state: StateReader) -> int:
    watch = _check_broker(store_dir, name, state)
    ha = HASegment.open(name)  # BrokerNotFoundError: not a master
    try:
        other = int(ha.header["sender_pid"][0])
        if other and other != os.getpid() and _pid_alive(other):
            raise StartRefused(f"another HA sender (pid {other}) serves broker {name!r}")
        bell = BrokerBell(name, state)
        try:
            sender = HASender(store_dir, name, config, ha, watch.is_alive, bell.ring)
        except OSError as e:  # the wake-up name is taken: a sender raced us
            raise StartRefused(f"another HA sender serves broker {name!r} ({e.strerror or e})") from None
        try:
            ha.header["sender_pid"] = os.getpid()
            ha.reset_slots()
            signal.signal(signal.SIGTERM, sender.stop)
            signal.signal(signal.SIGINT, sender.stop)
            log.info("HA sender of broker %r on store %s (pid %d)", name, store_dir, os.getpid())
            sender.serve()
        finally:
            sender.close()
            if int(ha.header["sender_pid"][0]) == os.getpid():
                ha.header["sender_pid"] = 0
            bell.close()
        log.info("stopped")
        return 0
    finally:
        ha.close()
