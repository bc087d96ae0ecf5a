"""A SimpleConsumer worker process for the POP tests (started with multiprocessing's spawn).

It appends ``<body> <delivery attempt>`` to its file for each message it acked (after the ack
was answered, flushed per line, so a SIGKILL loses nothing it reported) until the stop file
exists; with ``hold`` it writes the messages it received and never acks them.
"""

from __future__ import annotations

import os
import time

from shmq import ReceiptError, SimpleConsumer


def work(broker: str, group: str, out_path: str, invisible: float, hold: bool) -> None:
    sc = SimpleConsumer(group, broker=broker, subscriptions={"Jobs": "*"}, await_duration=0.2).start()
    try:
        with open(out_path, "a", buffering=1) as out:
            while not os.path.exists(out_path + ".stop"):
                msgs = sc.receive(32 if not hold else 8, invisible)
                for m in msgs:
                    if hold:
                        out.write(f"{m.body.decode()} {m.delivery_attempt}\n")
                        continue
                    try:
                        sc.ack(m)
                    except ReceiptError:
                        continue  # its invisible time ran out under load: another worker has it
                    out.write(f"{m.body.decode()} {m.delivery_attempt}\n")
                if hold and msgs:
                    time.sleep(3600)  # holds them until it is killed
    finally:
        sc.shutdown()
