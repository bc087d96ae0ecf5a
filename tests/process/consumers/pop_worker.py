"""A SimpleConsumer worker process for the POP tests (started with multiprocessing's spawn).

It appends ``<body> <delivery attempt>`` to its file for each message it acked (after the ack
was answered, flushed per line, so a SIGKILL loses nothing it reported), ``<body> 0`` for an
ack the broker died before answering, until the stop file exists (riding out a broker
restart); it creates ``<file>.ready`` once started. With ``hold`` it writes the messages it
received and never acks them.
"""

from __future__ import annotations

import os
import time

from shmq import ReceiptError, ShmqError, SimpleConsumer


def work(broker: str, group: str, out_path: str, invisible: float, hold: bool) -> None:
    sc = SimpleConsumer(group, broker=broker, subscriptions={"Jobs": "*"}, await_duration=0.2).start()
    open(out_path + ".ready", "w").close()
    try:
        with open(out_path, "a", buffering=1) as out:
            while not os.path.exists(out_path + ".stop"):
                try:
                    msgs = sc.receive(32 if not hold else 8, invisible)
                except ShmqError:
                    continue  # the broker is away: the next receive attaches again when it is back
                for m in msgs:
                    if hold:
                        out.write(f"{m.body.decode()} {m.delivery_attempt}\n")
                        continue
                    try:
                        sc.ack(m)
                    except ReceiptError:
                        continue  # its invisible time ran out under load: another worker has it
                    except ShmqError:  # the broker died before answering: the ack may or may not have been taken
                        out.write(f"{m.body.decode()} 0\n")
                        continue
                    out.write(f"{m.body.decode()} {m.delivery_attempt}\n")
                if hold and msgs:
                    time.sleep(3600)  # holds them until it is killed
    finally:
        sc.shutdown()
