"""Run by test_sync_wait.py in its own process, so that a crash is a failed test, not a dead
pytest: a producer shuts down while its reader thread is held in ``on_response`` (where a
future's done-callbacks, user code, run) longer than shutdown waits for the thread. Exits 0 only
if the broker learnt that the client left while the thread was held, the channel stayed mapped
while the thread was in it, and the thread closed it as it left.
"""

from __future__ import annotations

import os
import sys
import threading

from shmq import Message, Producer
from shmq.ring.channel import channel_name
from tests.waiting import wait_for


def main(broker: str) -> None:
    p = Producer("pg", broker=broker).start()
    conn = p._conn
    s, reader = conn.session, conn._reader
    assert s is not None and reader is not None
    held, release = threading.Event(), threading.Event()
    answer = conn.on_response

    def slow_callback(kind: int, view: memoryview) -> None:
        answer(kind, view)
        held.set()
        release.wait(120)

    conn.on_response = slow_callback
    p.send_async(Message("Wait", b"m"))
    assert held.wait(60), "no answer reached the reader thread"
    p.shutdown(timeout=0)
    assert reader.is_alive()
    s.channel.responses.has_data()  # ValueError if the ring was closed under the reader thread
    segment = "/dev/shm" + channel_name(broker, s.client_id)
    assert wait_for(lambda: not os.path.exists(segment), 30), "the broker did not learn the client left"
    release.set()
    reader.join(60)
    assert not reader.is_alive()
    try:
        s.channel.responses.has_data()
    except ValueError:
        print("closed by the reader thread")
    else:
        raise AssertionError("the reader thread left the channel open")


if __name__ == "__main__":
    main(sys.argv[1])
