"""Polling for a condition in tests that watch another process (a broker, a client)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], object], timeout: float = 10.0, step: float = 0.01) -> bool:
    """Poll ``cond()`` every ``step`` seconds for up to ``timeout`` seconds; True once it holds,
    else its value at the deadline (one more look, so a slow machine is not failed early)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())
