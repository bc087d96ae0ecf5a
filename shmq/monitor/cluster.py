"""Following a name server's brokers: one monitor object per live broker, made as brokers
register and dropped as they leave the routes (`shmq top --namesrv`, `shmq exporter --namesrv`).

The routes come from the name server's segment (``RouteReader``: no round trip, dead brokers
already left out, the last good table kept while the name server is down), so following a
cluster costs the brokers nothing more than watching each of them does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from shmq.errors import NameServerNotFoundError
from shmq.monitor.attach import Attachment
from shmq.namesrv.routes import BrokerData
from shmq.namesrv.segment import RouteReader

T = TypeVar("T")


class RoutedSet(Generic[T]):
    """A ``T`` per broker process of name server ``namesrv``'s routes (``make`` builds one,
    ``drop`` releases it), by the name clients attach with."""

    def __init__(self, namesrv: str, make: Callable[[BrokerData], T], drop: Callable[[T], None]) -> None:
        self.namesrv = namesrv
        self.reader = RouteReader(namesrv)
        self._make, self._drop = make, drop
        self._members: dict[str, tuple[BrokerData, T]] = {}
        self.problem: str | None = None  # why there are no routes now (no name server ever read)

    def sync(self) -> list[tuple[BrokerData, T]]:
        """The members for the routes now, sorted by (broker name, broker id); none, with
        ``problem`` set, while no routes were ever read."""
        try:
            table = self.reader.read()
        except NameServerNotFoundError as e:
            self.problem = str(e)
            return []
        self.problem = None
        live = {b.attach_name: b for b in table.brokers}
        for name in [n for n in self._members if n not in live]:
            self._drop(self._members.pop(name)[1])
        for name, b in live.items():
            held = self._members.get(name)
            self._members[name] = (b, held[1] if held is not None else self._make(b))
        return sorted(self._members.values(), key=lambda m: (m[0].broker_name, m[0].broker_id))

    def server_alive(self) -> bool:
        """Whether the name server process serves now (its routes may be the last good ones otherwise)."""
        return self.reader.server_alive()

    def close(self) -> None:
        for _b, member in self._members.values():
            self._drop(member)
        self._members.clear()
        self.reader.close()


class ClusterAttachment:
    """``shmq top --namesrv``: an ``Attachment`` (snapshots and their history) per broker."""

    def __init__(self, namesrv: str) -> None:
        self.name = namesrv
        self.brokers: RoutedSet[Attachment] = RoutedSet(namesrv, lambda b: Attachment(b.attach_name), Attachment.close)
        self.members: list[tuple[BrokerData, Attachment]] = []
        self.down_since = time.monotonic()  # since when no routes could be read (while ``problem``)

    def sample(self) -> bool:
        """A snapshot of every broker of the routes now; False when there is none to show."""
        had_problem = self.brokers.problem is not None
        self.members = self.brokers.sync()
        if self.brokers.problem is not None and not had_problem:
            self.down_since = time.monotonic()
        up = [a.sample() for _b, a in self.members]
        return any(up)

    @property
    def problem(self) -> str | None:
        return self.brokers.problem

    def server_alive(self) -> bool:
        return self.brokers.server_alive()

    def close(self) -> None:
        self.brokers.close()

    def __enter__(self) -> ClusterAttachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
