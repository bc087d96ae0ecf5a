"""The docs' snippets run real brokers; the leftover checks of the broker tests apply here too."""

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
