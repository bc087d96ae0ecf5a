"""Reading a topic back in tests: every message a broker holds, pulled queue by queue; what a
lite pull consumer polls."""

from __future__ import annotations

import time
from typing import Any

from shmq import PullConsumer, PullStatus


def read_topic(broker: str, topic: str, group: str = "test-reader") -> list:
    """Every message of ``topic`` on ``broker``, queue by queue, in queue order."""
    out: list = []
    with PullConsumer(group, broker=broker) as c:
        for mq in c.fetch_queues(topic):
            offset = 0
            while True:
                r = c.pull(mq, "*", offset=offset, max_nums=256, timeout=0.1)
                if r.status is not PullStatus.FOUND:
                    break
                out.extend(r.messages)
                offset = r.next_begin_offset
    return out


def poll_until(c: Any, want: int, timeout: float = 10.0) -> list:
    """What a LitePullConsumer (one broker's or a cluster's) polls until ``want`` messages or ``timeout`` s."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(c.poll(0.2))
    return got
