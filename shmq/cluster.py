"""shmq.NameServer and shmq.Cluster: a name server, and a name server with N brokers, as child
processes (for programs, demos and tests; `shmq namesrv` and `shmq cluster` run the same)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from shmq.child import ChildProcess
from shmq.config import BrokerConfig, parse_properties
from shmq.errors import BrokerStartError, ConfigError, ShmqError
from shmq.launcher import Broker
from shmq.namesrv.leftovers import reclaim_dead_namesrv
from shmq.namesrv.routes import check_namesrv_name
from shmq.namesrv.segment import RouteReader, namesrv_key
from shmq.ring.control import ControlQueue
from shmq.ring.liveness import Watch


class NameServer(ChildProcess):
    """``python -m shmq namesrv`` as a child; returns once it serves.

    Its log goes to ``log_path`` (appended), else to a temporary file removed by ``stop``.
    """

    what = "name server"

    def __init__(self, name: str = "default", log_path: str | None = None, timeout: float = 30.0) -> None:
        self.name = check_namesrv_name(name)
        self._temp_log = log_path is None
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"shmq-namesrv-{name}-", suffix=".log")
            os.close(fd)
        self.log_path = os.path.abspath(log_path)
        reader = RouteReader(self.name)
        try:
            self._spawn(
                [sys.executable, "-m", "shmq", "namesrv", "--name", self.name], timeout, lambda: self._serves(reader)
            )
        finally:
            reader.close()

    def _serves(self, reader: RouteReader) -> bool:
        """Whether this child holds the name and its control queue exists."""
        reader.close()  # a predecessor's segment may be mapped: look at the current one
        key = reader.control_key()
        if key is None or Watch(namesrv_key(self.name, "alive")).holder_pid() != self.process.pid:
            return False
        try:
            ControlQueue.open(key)
        except ShmqError:
            return False
        return True

    def _remove_leftovers(self) -> list[str]:
        return reclaim_dead_namesrv(self.name)

    def _cleanup(self) -> None:
        if self._temp_log:
            try:
                os.unlink(self.log_path)
            except FileNotFoundError:
                pass
            self._temp_log = False

    def __repr__(self) -> str:
        return f"NameServer(name={self.name!r}, pid={self.pid}, state={self._state()})"


class Cluster:
    """A name server and ``brokers`` brokers named ``<namesrv>-b<i>`` (i from 0), each on the
    store ``root/<broker name>`` and registered with it before this returns. ``config`` (a
    mapping or a file, as for ``shmq.Broker``) applies to every broker, with ``namesrvAddr`` set
    and broker i's HA sender on ``haListenPort + i``. The name server logs to ``root/namesrv.log``."""

    def __init__(
        self,
        root: str,
        brokers: int = 2,
        namesrv: str = "default",
        config: Mapping[str, Any] | str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if type(brokers) is not int or not 1 <= brokers <= 64:
            raise ConfigError(f"a cluster has 1..64 brokers, got {brokers!r}")
        self.root = os.path.abspath(root)
        base = BrokerConfig.load(config)
        if base.namesrv_addr and base.namesrv_addr != namesrv:
            raise ConfigError(f"the config's namesrvAddr={base.namesrv_addr!r} is not this cluster's {namesrv!r}")
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        self.broker_names = [f"{check_namesrv_name(namesrv)}-b{i}" for i in range(brokers)]
        self.brokers: list[Broker] = []
        self.namesrv = NameServer(namesrv, os.path.join(self.root, "namesrv.log"), timeout)
        try:
            for i, name in enumerate(self.broker_names):
                props = _broker_props(base, namesrv, i)
                self.brokers.append(Broker(os.path.join(self.root, name), name, props, timeout))
            self.wait_registered(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Return once every running broker of the cluster is in the name server's routes."""
        reader = RouteReader(self.namesrv.name)
        deadline = time.monotonic() + timeout
        try:
            while True:
                want = {b.pid for b in self.brokers if b.process.poll() is None}
                try:
                    have = {b.pid for b in reader.read().brokers}
                except ShmqError:
                    have = set()
                if want <= have:
                    return
                if time.monotonic() > deadline:
                    raise BrokerStartError(
                        f"brokers of name server {self.namesrv.name!r} not registered within {timeout} s"
                    )
                time.sleep(0.01)
        finally:
            reader.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the brokers (last started first), then the name server."""
        for b in reversed(self.brokers):
            b.stop(timeout)
        self.namesrv.stop(timeout)

    def __repr__(self) -> str:
        return f"Cluster(root={self.root!r}, namesrv={self.namesrv.name!r}, brokers={self.broker_names!r})"

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _broker_props(config: BrokerConfig, namesrv: str, i: int) -> dict[str, str]:
    """Broker ``i``'s config: ``config`` with namesrvAddr, without brokerName (the cluster names
    each broker), and HA port ``haListenPort + i`` (0 stays 0: no HA sender), since the brokers
    of one host cannot share a port."""
    props = parse_properties(config.to_properties())
    props["namesrvAddr"] = namesrv
    props.pop("brokerName", None)
    if config.ha_listen_port:
        props["haListenPort"] = str(config.ha_listen_port + i)
    return props
