"""`shmq top` tests run real broker processes (leak checks of tests/broker)."""
from tests.process.broker.conftest import config, broker_name, store_dir  # noqa: F401
from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
