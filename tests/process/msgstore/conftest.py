"""`shmq admin msg` and `store` against real brokers (leak checks of tests/process/broker)."""

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import broker_name, config, store_dir  # noqa: F401
