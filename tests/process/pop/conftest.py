"""POP tests run real broker and worker processes; the leftover checks of tests/broker apply here too."""

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import broker_name, config, store_dir  # noqa: F401
