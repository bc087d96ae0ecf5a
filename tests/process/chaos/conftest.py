"""The chaos runs start their own brokers under names of their own and count (then remove) what
they leave; the tracker still checks this process's own liveness semaphores."""

from __future__ import annotations

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
