"""A user's script that ends without shutting its clients down: ``python left_open.py BROKER
open`` uses a running broker (and forks a child that exits normally: its exit must leave the
clients alone, they are the parent's, which then sends and consumes one more message);
``python left_open.py BROKER broker-first STORE`` starts its own broker and stops it while the
clients are open. Prints ``consumed N`` (messages the push consumer got), then exits; offsets
are only committed by a shutdown (the periodic commits are an hour apart)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings

import shmq
from shmq import (
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)

SENT = 10
HOUR = 3600.0


class LossSeen(logging.Handler):
    """Sets ``seen`` when a client reports the broker lost."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("lost broker"):
            self.seen.set()


def _wait_for(got: list[bytes], count: int) -> None:
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    name, mode = sys.argv[1], sys.argv[2]
    broker = shmq.Broker(sys.argv[3], name=name) if mode == "broker-first" else None
    logging.basicConfig(format="%(message)s")  # as logging's default output: the message alone, on stderr
    loss = LossSeen()
    logging.getLogger().addHandler(loss)
    got: list[bytes] = []
    push = PushConsumer(
        "cg-push", broker=name, consume_from=ConsumeFrom.FIRST_OFFSET, persist_consumer_offset_interval=HOUR
    )
    push.subscribe("Left", "*")
    push.register_listener(lambda msgs, ctx: got.extend(m.body for m in msgs) or ConsumeResult.SUCCESS)
    push.start()
    pull = PullConsumer("cg-pull", broker=name).start()
    lite = LitePullConsumer("cg-lite", broker=name, auto_commit_interval=HOUR)
    lite.subscribe("Left", "*")
    lite.start()
    producer = Producer("pg", broker=name).start()
    for i in range(SENT):
        producer.send(Message("Left", b"m%d" % i))
    _wait_for(got, SENT)
    if broker is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a process with threads
            child = os.fork()
        if child == 0:
            sys.exit(0)
        os.waitpid(child, 0)
        producer.send(Message("Left", b"after the fork"))
        _wait_for(got, SENT + 1)
    pull.pull(pull.fetch_queues("Left")[0], offset=0)
    print(f"consumed {len(got)}", flush=True)
    if broker is not None:
        broker.stop()
        loss.seen.wait(30)


if __name__ == "__main__":
    main()
