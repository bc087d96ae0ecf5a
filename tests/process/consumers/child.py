"""A consumer or producer process for the cross-process tests.

    python -m tests.process.consumers.child consume BROKER GROUP OUT '{"model": ..., "orderly": ..., ...}'
    python -m tests.process.consumers.child lite BROKER GROUP OUT '{"topic": "T"}'
    python -m tests.process.consumers.child produce BROKER TOPIC COUNT '{"order_ids": 8, "start": 0, "rate": 0}'

A consumer appends ``<body> <queue id> <reconsume times>`` per message to OUT (flushed per
listener call, so a SIGKILL loses nothing it reported), prints ``ready`` once started, and
shuts down cleanly on SIGTERM.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import threading
import time

from shmq import ConsumeFrom, ConsumeResult, LitePullConsumer, Message, MessageModel, Producer, PushConsumer
from shmq.client.producer.producer import SelectMessageQueueByHash


def consume(broker: str, group: str, out_path: str, opts: dict) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - open until the process ends
    lock = threading.Lock()
    delay = float(opts.get("delay", 0))

    def listener(msgs, ctx):
        if delay:
            time.sleep(delay)
        with lock:
            out.write("".join(f"{m.body.decode()} {m.queue_id} {m.reconsume_times}\n" for m in msgs))
            out.flush()
        return ConsumeResult.SUCCESS

    c = PushConsumer(
        group,
        broker=broker,
        model=MessageModel(opts.get("model", "CLUSTERING")),
        consume_from=ConsumeFrom(opts.get("consume_from", "FIRST_OFFSET")),
        instance_name=opts.get("instance", "DEFAULT"),
        offset_store_dir=opts.get("offset_dir"),
        start_timeout=float(opts.get("start_timeout", 10)),
    )
    c.subscribe(opts.get("topic", "T"), opts.get("expression", "*"))
    c.register_listener(listener, orderly=bool(opts.get("orderly")))
    c.start()
    print("ready", flush=True)
    while not stop.wait(0.05):
        pass
    c.shutdown()
    out.close()


def lite(broker: str, group: str, out_path: str, opts: dict) -> None:
    """A LitePullConsumer member polling in a loop; prints ``ready`` once it owns a queue."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(out_path, "a", buffering=1) as out, LitePullConsumer(group, broker=broker, start_timeout=10) as c:
        c.subscribe(opts.get("topic", "T"), opts.get("expression", "*"))
        while not c.assignment():
            time.sleep(0.01)
        print("ready", flush=True)
        while not stop.is_set():
            out.write("".join(f"{m.body.decode()} {m.queue_id} 0\n" for m in c.poll(0.05)))


def produce(broker: str, topic: str, count: int, opts: dict) -> None:
    order_ids = int(opts.get("order_ids", 0))
    start = int(opts.get("start", 0))
    pause = float(opts.get("pause", 0))
    with Producer("child-producer", broker=broker, send_msg_timeout=10) as p:
        selector = SelectMessageQueueByHash()
        for i in range(start, start + count):
            if order_ids:
                oid = i % order_ids
                p.send(Message(topic, f"{oid}:{i}".encode()), selector=selector, arg=oid)
            else:
                p.send(Message(topic, b"%d" % i))
            if pause:
                time.sleep(pause)
    print("sent", flush=True)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # procs.stop asks for the stacks of a hang
    cmd, broker, name, arg = sys.argv[1:5]
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    if cmd == "consume":
        consume(broker, name, arg, options)
    elif cmd == "lite":
        lite(broker, name, arg, options)
    else:
        produce(broker, name, int(arg), options)
