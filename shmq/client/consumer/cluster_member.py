"""ClusterMember: one member of a consumer group in a name server's cluster, as one part per broker.

RocketMQ's consumer keeps one client instance that talks to every broker of the route; here a
member has one part per broker name (a PushConsumer or LitePullConsumer attached to that
broker, or to its replica while the master is down), all attached under one client id. The
parts share a ``ClusterView``: a clustering group's allocation is computed over the queues of
every broker and the union of the members, and each part consumes its broker's share,
committing offsets to its broker. A broker that registers later gets its part when the routes
show it (a sequence check every ``REBALANCE_POLL_S``); a broker that dies keeps its part, which
waits for it and joins the group again when it is back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from shmq.client.consumer.cluster_view import ClusterView
from shmq.client.consumer.member import REBALANCE_POLL_S
from shmq.client.consumer.rebalance_impl import GroupScope
from shmq.errors import NameServerNotFoundError, ShmqError
from shmq.namesrv.routes import RouteTable
from shmq.ring.control import new_client_id


class ConsumerPart(Protocol):
    """What a member's part on one broker is (MQConsumerInner's consumers, SimpleConsumer)."""

    broker_name: str

    def join_cluster(self, client_id: int, scope: GroupScope | None) -> None: ...

    def start(self) -> object: ...

    def shutdown(self) -> None: ...


Part = TypeVar("Part", bound=ConsumerPart)

PartFactory = Callable[[str, "str | None"], Part]  # (broker name, a replica to read from while it is down)


def part_kwargs(kwargs: dict[str, Any], broker_name: str) -> dict[str, Any]:
    """A part's keyword arguments: broadcasting offsets given a directory get one file per broker
    (``<offset_store_dir>/<broker>``), as a queue's offset is that broker's."""
    out = dict(kwargs)
    if out.get("offset_store_dir") is not None:
        out["offset_store_dir"] = os.path.join(str(out["offset_store_dir"]), broker_name)
    return out


class ClusterMember(Generic[Part]):
    def __init__(
        self,
        namesrv: str,
        group: str,
        make_part: PartFactory[Part],
        scoped: bool,
        start_timeout: float,
        log: logging.Logger,
    ) -> None:
        """``make_part(broker_name, replica)``: a configured, unstarted part; ``scoped``: the
        parts balance one allocation over the cluster (clustering), else each reads all of its
        broker's queues (broadcasting)."""
        self.namesrv = namesrv
        self.group = group
        self.view = ClusterView(namesrv)
        self.client_id = new_client_id()
        self._make_part = make_part
        self._scoped = scoped
        self.start_timeout = start_timeout
        self._log = log
        self._lock = threading.Lock()  # parts are added by the watcher and read by callers
        self._parts: dict[str, Part] = {}
        self._seen: tuple[int, int] | None = None
        self._failed: dict[str, str] = {}  # broker name -> why its part did not start (said once)
        self._running = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def parts(self) -> list[Part]:
        with self._lock:
            return list(self._parts.values())

    def serving_parts(self) -> list[Part]:
        """The parts whose broker is in the routes now (a dead broker's part keeps its queues,
        to give the broker its offsets back when it returns, but owns nothing meanwhile)."""
        serving = {b.broker_name for b in ClusterView.read_from(self.view.routes())}
        return [p for p in self.parts() if p.broker_name in serving]

    def part(self, broker_name: str) -> Part | None:
        with self._lock:
            return self._parts.get(broker_name)

    def start(self) -> None:
        """A part on every broker the routes name; NameServerNotFoundError within ``start_timeout``."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                table = self.view.routes()
                break
            except NameServerNotFoundError:
                if time.monotonic() >= deadline:
                    self.view.close()
                    raise
                time.sleep(0.02)
        self._running = True
        self._stop.clear()
        self._add_parts(table)
        self._thread = threading.Thread(target=self._watch, name=f"shmq-cluster-{self.group}", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop watching the routes, then every part (each commits and leaves its broker's group)."""
        if not self._running:
            return
        self._running = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        for part in self.parts():
            part.shutdown()
        with self._lock:
            self._parts.clear()
        self.view.close()

    def _watch(self) -> None:
        while not self._stop.wait(REBALANCE_POLL_S):
            try:
                self._add_parts(self.view.routes())
            except Exception:  # noqa: BLE001 - the watcher logs it and goes on
                self._log.exception(
                    "consumer %r: reading the routes of name server %r failed", self.group, self.namesrv
                )

    def _add_parts(self, table: RouteTable) -> None:
        """Start a part for each broker name the routes show for the first time (or whose part
        could not start yet)."""
        seen = (table.incarnation, table.version)
        if seen == self._seen and not self._failed:
            return
        self._seen = seen
        for b in ClusterView.read_from(table):
            name = b.broker_name
            if name in self._parts or not self._running:
                continue
            replicas = table.replicas(name)
            part = self._make_part(name, replicas[0].attach_name if replicas else None)
            part.join_cluster(self.client_id, self.view if self._scoped else None)
            try:
                part.start()
            except (ShmqError, OSError) as e:
                if self._failed.get(name) != str(e):
                    self._log.warning("consumer %r cannot attach to broker %r yet: %s", self.group, name, e)
                self._failed[name] = str(e)
                continue
            self._failed.pop(name, None)
            with self._lock:
                self._parts[name] = part
