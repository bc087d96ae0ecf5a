"""The producer load several benchmarks share: ``send_async`` with a bounded window in flight.

A window (256 by default) is how a real asynchronous sender behaves: it keeps the broker busy
without queueing without bound; the clock is read once per burst so the loop measures the
client, not ``perf_counter``.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future
from typing import Any


def send_async_for(producer: Any, msg: Any, seconds: float, window: int = 256, burst: int = 64) -> int:
    """Send ``msg`` with ``producer.send_async`` for ``seconds``, at most ``window`` unanswered;
    the number sent (all answered when it returns)."""
    in_flight: deque[Future] = deque()
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(burst):
            in_flight.append(producer.send_async(msg))
            if len(in_flight) >= window:
                in_flight.popleft().result()
        n += burst
    for f in in_flight:
        f.result()
    return n
