"""A producer in its own process for the live and crash tests: ``python live_producer.py BROKER
ACKED STOP``. Sends message i (body ``live-<i>-`` repeated, property i) synchronously to queue
i % 4 of topic Live until the file STOP exists or the broker is gone; after each SEND_OK it
appends ``msg_id queue_id queue_offset`` to ACKED (line-buffered: what was acknowledged is on
disk before the next send)."""
from __future__ import annotations

import os
import sys

import shmq


def body(i: int) -> bytes:
    return (b"live-%d-" % i) * (1 + i % 7)


def main(broker: str, acked_path: str, stop_path: str) -> None:
    p = shmq.Producer("live-pg", broker=broker, send_msg_timeout=1.0).start()
    i = 0
    with open(acked_path, "a", buffering=1) as acked:
        while not os.path.exists(stop_path):
            try:
                r = p.send(shmq.Message("Live", body(i), keys=f"L{i}", properties={"i": str(i)}),
                           selector=lambda qs, m, a: qs[a % len(qs)], arg=i)
            except shmq.ShmqError:
                break  # the broker died (the crash test)
            if r.status is shmq.SendStatus.SEND_OK:
                acked.write(f"{r.msg_id} {r.queue.queue_id} {r.queue_offset}\n")
            i += 1
    try:
        p.shutdown()
    except shmq.ShmqError:
        pass


if __name__ == "__main__":
    main(*sys.argv[1:4])
