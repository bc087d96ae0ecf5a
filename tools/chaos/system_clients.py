"""The client processes of the whole-system chaos run (tools/chaos/system.py); any may be SIGKILLed.

    python tools/chaos/system_clients.py produce BROKER TAG LOG KEYS
    python tools/chaos/system_clients.py consume BROKER TAG LOG KEYS

Everything a client learns goes to LOG as one line per fact, each written with a single
``os.write`` on an O_APPEND file, so a line survives a SIGKILL of the writer and a line cut by
the kill (no newline) is ignored by the reader:

    A <tag> <seq> <queue id> <queue offset>       a producer's sync send answered SEND_OK
    S <tag> <seq> <status>                        a send answered otherwise (or raised: the error)
    C <tag> <seq> <queue id> <queue offset> <ok>  a consumer took a message; ok = 1 when the body
                                                  is exactly ``body_for(tag, seq)``

A consumer writes its C line before its listener returns SUCCESS, so an offset it commits
never covers a message it has not logged. Both roles stop cleanly on SIGTERM.

KEYS gets the key of every liveness semaphore the client takes, written before the semaphore
exists, so the harness can count the ones left behind by a client killed at any moment.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import threading
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import sysv_ipc

import shmq
from shmq.ring.liveness import Liveness

TOPIC = "ChaosSystem"
GROUP = "chaos-system"
QUEUES = 4
MAX_PAD = 300


def body_for(tag: str, seq: int) -> bytes:
    """The body of message ``seq`` of producer incarnation ``tag``: its name, then 0-300 derived bytes."""
    head = f"{tag}:{seq}:".encode()
    digest = hashlib.blake2b(head, digest_size=8).digest()
    return head + random.Random(digest).randbytes(int.from_bytes(digest[:2], "big") % (MAX_PAD + 1))


def parse_body(body: bytes) -> tuple[str, int] | None:
    """(tag, seq) of a body ``body_for`` made, None for anything else."""
    parts = bytes(body).split(b":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    tag, seq = parts[0].decode(errors="replace"), int(parts[1])
    return (tag, seq) if bytes(body) == body_for(tag, seq) else None


def read_lines(path: str) -> list[list[str]]:
    """The complete lines of a client log, split in words (a last line cut by a kill is dropped)."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return [line.split() for line in data.split("\n")[:-1] if line]


def _record_liveness_keys(path: str) -> None:
    """Write each liveness key to ``path`` before the semaphore is made (a kill in between leaves
    a key that names nothing, which counts as nothing left)."""
    hold = Liveness.hold.__func__  # type: ignore[attr-defined]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def recording(cls: type[Liveness], key: int | None = None, **kwargs: Any) -> Liveness:
        if key is not None:
            return hold(cls, key, **kwargs)
        while True:
            key = random.randrange(1, 1 << 31)
            os.write(fd, f"{key}\n".encode())
            try:
                return hold(cls, key, **kwargs)
            except sysv_ipc.ExistentialError:  # the key is taken: draw another
                continue

    Liveness.hold = classmethod(recording)  # type: ignore[method-assign, assignment]


def _stopper() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def produce(broker: str, tag: str, log_fd: int) -> None:
    """Sync sends of ``body_for(tag, 0, 1, ...)`` round robin over the queues until SIGTERM."""
    stop = _stopper()
    p = shmq.Producer(f"chaos-{tag}", broker=broker, send_msg_timeout=5.0).start()
    seq = 0
    while not stop.is_set():
        try:
            r = p.send(shmq.Message(TOPIC, body_for(tag, seq)), selector=lambda qs, m, a: qs[a % len(qs)], arg=seq)
            if r.status is shmq.SendStatus.SEND_OK:
                line = f"A {tag} {seq} {r.queue.queue_id} {r.queue_offset}\n"
            else:
                line = f"S {tag} {seq} {r.status.name}\n"
        except shmq.ShmqError as e:
            line = f"S {tag} {seq} {type(e).__name__}\n"
            stop.wait(0.05)  # the broker is away: do not spin
        os.write(log_fd, line.encode())
        seq += 1
    p.shutdown()


def consume(broker: str, tag: str, log_fd: int) -> None:
    """A clustering PushConsumer of the group from the first offset until SIGTERM."""
    stop = _stopper()

    def listener(msgs: list[Any], _ctx: object) -> shmq.ConsumeResult:
        lines = []
        for m in msgs:
            got = parse_body(m.body)
            who = f"{got[0]} {got[1]}" if got else "? -1"
            lines.append(f"C {who} {m.queue_id} {m.queue_offset} {int(got is not None)}\n")
        os.write(log_fd, "".join(lines).encode())
        return shmq.ConsumeResult.SUCCESS

    c = shmq.PushConsumer(GROUP, broker=broker, consume_from=shmq.ConsumeFrom.FIRST_OFFSET, instance_name=tag)
    c.subscribe(TOPIC, "*")
    c.register_listener(listener)
    c.start()
    stop.wait()
    c.shutdown()


if __name__ == "__main__":
    role, broker_name, client_tag, log_path, keys_path = sys.argv[1:6]
    _record_liveness_keys(keys_path)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    (produce if role == "produce" else consume)(broker_name, client_tag, fd)
