"""Name server tests run real name servers and brokers; each test gets unique names (tracked
by ``ipc_tracker``, name servers included) and must leave no IPC object behind."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import shmq
from shmq.namesrv.routes import RouteTable
from shmq.namesrv.segment import RouteReader
from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)
from tests.waiting import wait_for

BASE = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
    "haListenPort": 0,
}
WAIT_S = 30.0


@pytest.fixture
def ns_name(ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.namesrv("ns")


@pytest.fixture
def reader(ns_name: str) -> Iterator[RouteReader]:
    r = RouteReader(ns_name)
    yield r
    r.close()


def broker_config(ns: str, **extra: object) -> dict[str, object]:
    return {**BASE, "namesrvAddr": ns, **extra}


def start_broker(tracker: IpcTracker, tmp: str, ns: str, prefix: str = "b", **extra: object) -> shmq.Broker:
    """A broker registered with ``ns`` (started, not waited for: see ``wait_registered``)."""
    name = tracker.name(prefix)
    return shmq.Broker(tracker.store(os.path.join(tmp, name)), name, broker_config(ns, **extra))


def table_when(reader: RouteReader, cond: object) -> RouteTable:
    """The first table read that satisfies ``cond(table)`` within WAIT_S; fails the test otherwise."""
    seen: list[RouteTable] = []

    def check() -> bool:
        try:
            seen.append(reader.read())
        except shmq.ShmqError:
            return False
        return bool(cond(seen[-1]))  # type: ignore[operator]

    assert wait_for(check, WAIT_S), f"no table satisfied the condition; last: {seen[-1:]}"
    return seen[-1]


def pids(table: RouteTable) -> set[int]:
    return {b.pid for b in table.brokers}
