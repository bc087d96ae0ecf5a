"""A producer in its own process for the live and crash tests: ``python live_producer.py BROKER
ACKED STOP``. Sends message i (body ``live-<i>-`` repeated, property i) to queue i % 4 of topic
Live, synchronously, one by one and every tenth time as a batch of 8 (all to one queue), until
the file STOP exists or the broker is gone; after each SEND_OK it appends ``msg_id queue_id
queue_offset`` per message to ACKED (line-buffered: what was acknowledged is on disk before the
next send)."""

from __future__ import annotations

import os
import sys

import shmq

BATCH = 8


def body(i: int) -> bytes:
    return (b"live-%d-" % i) * (1 + i % 40)


def message(i: int) -> shmq.Message:
    return shmq.Message("Live", body(i), keys=f"L{i}", properties={"i": str(i)})


def queue_of(i: int) -> int:
    """The queue message i goes to: i % 4, or that of its batch's first message."""
    return (i - i % BATCH) % 4 if i // BATCH % 10 == 9 else i % 4


def main(broker: str, acked_path: str, stop_path: str) -> None:
    p = shmq.Producer("live-pg", broker=broker, send_msg_timeout=1.0).start()
    i = 0
    with open(acked_path, "a", buffering=1) as acked:
        while not os.path.exists(stop_path):
            n = BATCH if i // BATCH % 10 == 9 and i % BATCH == 0 else 1
            try:
                if n == 1:
                    r = p.send(message(i), selector=lambda qs, m, a: qs[queue_of(a)], arg=i)
                else:
                    r = p.send_batch(
                        [message(i + k) for k in range(n)], selector=lambda qs, m, a: qs[queue_of(a)], arg=i
                    )
            except shmq.ShmqError:
                break  # the broker died (the crash test)
            if r.status is shmq.SendStatus.SEND_OK:
                acked.write(
                    "".join(f"{m} {r.queue.queue_id} {r.queue_offset + k}\n" for k, m in enumerate(r.msg_id.split(",")))
                )
            i += n
    try:
        p.shutdown()
    except shmq.ShmqError:
        pass


if __name__ == "__main__":
    main(*sys.argv[1:4])
