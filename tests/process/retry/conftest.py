"""Retry and dead-letter tests run real broker processes with short delay levels (level 3 + n
is tens of milliseconds), so a message goes through all its retries in about a second."""

import pytest

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import SMALL, broker_name, store_dir  # noqa: F401

SHORT_LEVELS = " ".join(f"{20 * (k + 1)}ms" for k in range(18))  # level n waits 20n ms


@pytest.fixture
def config() -> dict:
    return {**SMALL, "messageDelayLevel": SHORT_LEVELS}
