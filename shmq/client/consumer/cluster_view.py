"""ClusterView: a consumer group seen across every broker of a name server's cluster.

A clustering group balances all queues of all brokers (RocketMQ's rebalance over the topic
route's queues and the group's consumer ids). Each member attaches to every broker under one
client id, so the id names the member everywhere and the group's members are the union of the
brokers' member lists. The view reads the routes (a sequence check, no round trip), and for
each broker name the state segment of the process its queues are read from (the master, else
its registered replica), so every member computes the same sorted queue and member lists. A
broker the routes leave out (dead) takes its queues out of the lists at once. A name server
that restarts starts from an empty table and gets the live brokers' registrations back within
a second: for ``RE_REGISTER_S`` after a new incarnation appears, the live brokers of the last
table stay in the view until they are registered again, so no queue moves for the restart.

One view serves the puller threads of a member's per-broker parts: its methods take a lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from shmq.client.broker_state import BrokerState
from shmq.client.consumer.rebalance_impl import GroupShape, local_shape
from shmq.errors import ShmqError
from shmq.namesrv.routes import BrokerData, RouteTable, TopicRoute
from shmq.namesrv.segment import RouteReader, broker_alive
from shmq.ring.state import StateReader

RE_REGISTER_S = 2.0  # how long the brokers of a restarted name server's predecessor are kept


class ClusterView:
    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self._reader = RouteReader(namesrv)
        self._lock = threading.Lock()
        self._states: dict[str, tuple[int, BrokerState]] = {}  # attach name -> (pid, its state)
        self._served: RouteTable | None = None  # the last table ``_table`` returned
        # (incarnation of a restarted name server, until when, the brokers its predecessor listed)
        self._carried: tuple[int, float, tuple[BrokerData, ...]] | None = None

    def routes(self) -> RouteTable:
        """The current routes (the last good ones while the name server is down)."""
        with self._lock:
            return self._table()

    @staticmethod
    def read_from(table: RouteTable) -> list[BrokerData]:
        """Per broker name, the process its queues are read from now (RocketMQ reads a dead
        master's queues from its replica), sorted by broker name."""
        route = TopicRoute("", table.brokers)
        return [b for name in sorted({b.broker_name for b in table.brokers}) if (b := route.read_from(name))]

    def seen(self, topics: list[str]) -> tuple[object, ...]:
        """The routes' identity and each serving broker's ``meta_gen``: unchanged, so is the shape."""
        with self._lock:
            table = self._table()
            gens = tuple((b.attach_name, b.pid, state.meta_gen()) for b, state in self._serving(table))
        return (table.incarnation, table.version, gens, tuple(topics))

    def shape(self, group: str, topics: list[str]) -> GroupShape:
        """Every serving broker's queues of ``topics`` (sorted by broker name, queue id) and the
        union of the members its state lists."""
        with self._lock:
            table = self._table()
            parts = [
                (b.broker_name, local_shape(state, b.broker_name, group, topics, True))
                for b, state in self._serving(table)
            ]
        queues = {t: [mq for _, shape in parts for mq in shape.queues[t]] for t in topics}
        members = sorted({m for _, shape in parts for m in shape.members})
        blocked = sorted({t for _, shape in parts for t in shape.blocked})
        key = (tuple((name, shape.key) for name, shape in parts), tuple(members))
        return GroupShape(key, queues, members, blocked)

    def _table(self) -> RouteTable:
        """The routes, with the live brokers of a restarted name server's predecessor that have
        not registered again yet (for ``RE_REGISTER_S``). Caller holds the lock."""
        table = self._reader.read()
        served = self._served
        if served is not None and table.incarnation != served.incarnation:
            self._carried = (table.incarnation, time.monotonic() + RE_REGISTER_S, served.brokers)
        carried = self._carried
        if carried is not None and (carried[0] != table.incarnation or time.monotonic() >= carried[1]):
            carried = self._carried = None
        if carried is not None:
            extra = [b for b in carried[2] if table.broker(b.broker_name, b.broker_id) is None and broker_alive(b)]
            if extra:
                brokers = sorted([*table.brokers, *extra], key=lambda b: (b.broker_name, b.broker_id))
                table = replace(table, brokers=tuple(brokers))
        self._served = table
        return table

    def _serving(self, table: RouteTable) -> list[tuple[BrokerData, BrokerState]]:
        """The process each broker name is read from, with its state segment; a process whose
        segment is not its own any more (it died and another started: new routes are coming)
        is left out. Caller holds the lock."""
        out = []
        for b in self.read_from(table):
            held = self._states.get(b.attach_name)
            if held is None or held[0] != b.pid:
                if held is not None:
                    held[1].reader.close()
                    del self._states[b.attach_name]
                held = self._open(b)
                if held is None:
                    continue
                self._states[b.attach_name] = held
            out.append((b, held[1]))
        return out

    @staticmethod
    def _open(b: BrokerData) -> tuple[int, BrokerState] | None:
        try:
            reader = StateReader.open(b.attach_name)
        except (ShmqError, OSError):
            return None
        if int(reader.view.header[0]["broker_pid"]) != b.pid:
            reader.close()
            return None
        return b.pid, BrokerState(reader)

    def close(self) -> None:
        with self._lock:
            for _, state in self._states.values():
                state.reader.close()
            self._states.clear()
            self._reader.close()
