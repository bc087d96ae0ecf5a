"""`shmq demo` starts a real broker; the leftover checks of tests/broker apply here too."""

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
