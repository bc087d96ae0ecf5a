"""Every ring test gets unique broker names and must leave no IPC object behind."""

from __future__ import annotations

import pytest

from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)


@pytest.fixture
def broker_name(ipc_tracker: IpcTracker) -> str:  # noqa: F811
    """A broker name no other test (or test run) uses."""
    return ipc_tracker.name("t")


@pytest.fixture
def store_dir(tmp_path, ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.store(str(tmp_path))
