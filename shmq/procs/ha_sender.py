"""The HA sender process (`shmq ha --store DIR [--name N] [--config FILE]`).

The master broker spawns it (and restarts it if it dies); it can also be run by hand. It
attaches to a running master's state and HA segments, refuses to run twice for one broker, and
exits by itself soon after the broker is gone, so it never outlives the log it streams.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys

import posix_ipc

from shmq.config import BrokerConfig
from shmq.errors import ShmqError
from shmq.ha.sender import HASender
from shmq.ha.shared import HASegment
from shmq.ha.token import master_token
from shmq.ring.channel import follow_broker_bell
from shmq.ring.doorbell import FollowingBell
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader

log = logging.getLogger("shmq.ha")


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
                self._bell = follow_broker_bell(
                    self._name, lambda: int(state.view.header["bell_gen"][0]), state.trust.check_semaphore
                )
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


def _refusal(store_dir: str, name: str, state: StateReader, ha: HASegment) -> str | None:
    """Why this sender must not run (one line for the operator), or None."""
    h = state.view.header[0]
    if not Watch(int(h["alive_key"])).is_alive():
        return f"broker {name!r} is not running (its liveness semaphore is gone)"
    served = bytes(h["store_dir"]).decode(errors="replace")
    if os.path.realpath(served) != os.path.realpath(store_dir):
        return f"broker {name!r} serves store {served}, not {store_dir}"
    other = int(ha.header["sender_pid"][0])
    if other and other != os.getpid() and _pid_alive(other):
        return f"another HA sender (pid {other}) serves broker {name!r}"
    return None


def run_ha_sender(store_dir: str, name: str, config: BrokerConfig) -> int:
    """Entry point: serve until the broker dies or SIGTERM/SIGINT; 0, or 2 when it cannot start."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s ha[{name}] %(levelname)s %(message)s"
    )
    store_dir = os.path.abspath(store_dir)
    try:
        state = StateReader.open(name)
    except (ShmqError, OSError) as e:
        print(f"shmq ha: error: {e}", file=sys.stderr)
        return 2
    try:
        ha = HASegment.open(name)  # BrokerNotFoundError: not a master
    except (ShmqError, OSError) as e:
        state.close()
        print(f"shmq ha: error: {e}", file=sys.stderr)
        return 2
    try:
        refusal = _refusal(store_dir, name, state, ha)
        if refusal is None:
            try:  # the broker hands its sender the token it resolved; a sender run by hand resolves it here
                token = master_token(store_dir, config)
            except (ShmqError, OSError) as e:
                refusal = str(e)
            else:
                log.info("replicas must prove the HA token (%s)", token.source)
                config = dataclasses.replace(config, ha_auth_token=token.secret, ha_auth_token_file=None)
                return _serve(store_dir, name, config, state, ha)
    finally:
        ha.close()
        state.close()
    print(f"shmq ha: error: {refusal}", file=sys.stderr)
    return 2


def _serve(store_dir: str, name: str, config: BrokerConfig, state: StateReader, ha: HASegment) -> int:
    bell = BrokerBell(name, state)
    try:
        sender = HASender(
            store_dir, name, config, ha, Watch(int(state.view.header[0]["alive_key"])).is_alive, bell.ring
        )
    except OSError as e:  # the wake-up name is taken: a sender raced us
        bell.close()
        print(f"shmq ha: error: another HA sender serves broker {name!r} ({e.strerror or e})", file=sys.stderr)
        return 2
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
