"""Hook, trace, function-filter and system-topic tests run real broker processes (leak checks of tests/broker)."""

import pytest

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import SMALL, broker_name, store_dir  # noqa: F401


@pytest.fixture
def config() -> dict:
    """Short delay levels: a redelivery through the retry topic (level 3 + n) comes within a second."""
    return dict(SMALL, messageDelayLevel=" ".join(f"{50 * i}ms" for i in range(1, 19)))
