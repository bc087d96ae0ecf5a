"""Broker tests run real broker processes; each test gets unique names and must leave no IPC object."""

from __future__ import annotations

import pytest

from shmq.store.message_store import MessageStore
from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)

SMALL = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
}


@pytest.fixture
def broker_name(ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.name("b")


@pytest.fixture
def store_dir(tmp_path, ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.store(str(tmp_path / "store"))


@pytest.fixture
def config() -> dict:
    return dict(SMALL)


def open_store(store_dir: str, config: dict) -> MessageStore:
    """The store a stopped broker left, opened directly to check what it holds."""
    return MessageStore(store_dir, config).start()
