"""OpenTelemetry tests: a broker (or a cluster) in the test process, the clients in child
processes that set their own providers (a global provider set in the pytest process would
instrument every later test's clients). Each module is skipped where the SDK is not installed."""

import pytest

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import SMALL, broker_name, store_dir  # noqa: F401


@pytest.fixture
def config() -> dict:
    """Short delay levels: a message the listener gave back comes again within a second."""
    return dict(SMALL, messageDelayLevel=" ".join(f"{50 * i}ms" for i in range(1, 19)))
