"""A POP worker process for the fault tests.

    python -m tests.process.pop.worker BROKER GROUP TOPIC OUT '{"invisible": 5, "busy": 0.02}'

Prints ``ready`` once started. Then receives up to 32 messages at a time and appends to OUT,
flushed line by line so a SIGKILL loses nothing it wrote:

- ``got <body> <attempt>`` for each message received (then it works ``busy`` seconds on them);
- ``ack <body>`` once its ack was answered (the broker keeps it: it must never come again).

Errors of a broker that is gone or restarting are retried:
the worker carries on with the next broker. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any, TextIO

import shmq
from shmq.errors import ShmqError


def work(sc: Any, out: TextIO, stop: threading.Event, invisible: float, busy: float) -> None:
    """receive, note, work ``busy`` s on the batch, ack each (the acks of a batch in one frame),
    note the answered ones."""
    while not stop.is_set():
        try:
            msgs = sc.receive(32, invisible)
        except ShmqError:
            stop.wait(0.1)  # the broker is gone or restarting: the next one serves
            continue
        out.write("".join(f"got {m.body.decode()} {m.delivery_attempt}\n" for m in msgs))
        if msgs and busy:
            time.sleep(busy)
        futures = [(m, sc.ack_async(m)) for m in msgs]
        for m, f in futures:
            try:
                f.result(30)
            except ShmqError:  # it comes again after its invisible time, unless the broker took the
                out.write(f"unanswered {m.body.decode()}\n")  # ack and died before answering
                continue
            out.write(f"ack {m.body.decode()}\n")


def main(broker: str, group: str, topic: str, out_path: str, opts: dict) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    invisible = float(opts.get("invisible", 5))
    with open(out_path, "a", buffering=1) as out:
        sc = shmq.SimpleConsumer(group, broker=broker, subscriptions={topic: "*"}, await_duration=0.5).start()
        print("ready", flush=True)
        try:
            work(sc, out, stop, invisible, float(opts.get("busy", 0)))
        finally:
            sc.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:5], json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
