"""Attacks of a hostile or careless client on a live broker, one per run of this module.

    python tools/chaos/hostile.py ATTACK BROKER STORE_DIR SECONDS

Each attack is what a process of the same user can do with the broker's shared objects: write
its own ring counters, send control requests with any field, flood, squat, die at bad times.
It runs in a process of its own (the harness, tools/chaos/attacks.py, must survive it) and
prints one JSON line: what it did and what the broker answered. The kernel releases what a
killed attacker held (SEM_UNDO liveness), exactly as for a real crashed client.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import posix_ipc

import shmq
from shmq.client.connection import BrokerConnection, Session, next_request_id
from shmq.codec import frames as P
from shmq.ring.channel import broker_bell_name
from shmq.ring.control import Admin, ControlQueue, Detach
from shmq.ring.doorbell import wake
from shmq.ring.framing import CONSUMER, PRODUCER
from shmq.ring.state import StateReader

HEAD, TAIL = 8, 16  # word indexes of a ring's counters (shmq/ring/framing.py)
BIG = 1 << 63
MAX = (1 << 64) - 1


def _attach(broker: str, ring_bytes: int = 65536, role: str = "consumer") -> tuple[BrokerConnection, Session]:
    conn = BrokerConnection(broker, role, "", ring_bytes, lambda kind, view: None)
    return conn, conn.start(5.0)


def _client_ids(broker: str) -> list[int]:
    """Ids of the clients the broker lists as attached (its state segment)."""
    state = StateReader.open(broker)
    try:
        return state.read(lambda v: [int(c) for c in v.clients["client_id"][v.clients["used"] != 0]])
    finally:
        state.close()


def _attached(broker: str, client_id: int) -> bool:
    return client_id in _client_ids(broker)


def ring_counters(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Write hostile values into each counter of a client's own rings (A1)."""
    cases: list[tuple[str, str, int, int]] = [
        ("response tail 2^63", "responses", TAIL, BIG),
        ("response tail 2^64-1", "responses", TAIL, MAX),
        ("request head 2^63", "requests", HEAD, BIG),
        ("request head behind tail", "requests", HEAD, MAX - 7),
        ("request head unaligned", "requests", HEAD, 3),
        ("response parked 2^63", "responses", PRODUCER, BIG),
        ("request parked 2^63", "requests", CONSUMER, BIG),
    ]
    out = {}
    for label, ring_name, word, value in cases:
        _conn, s = _attach(broker)
        ring = getattr(s.channel, ring_name)
        ring._c[word] = value
        s.channel.broker_bell.ring()
        time.sleep(max(0.2, seconds / len(cases)))
        out[label] = "still attached" if _attached(broker, s.client_id) else "dropped"
        s.liveness.release()  # leave like a dead client: no detach
    return out


def admin_values(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Admin requests with out-of-range or ill-typed fields (A2)."""
    conn, s = _attach(broker)
    bad: list[tuple[str, dict[str, Any]]] = [
        ("commit_offset", {"group": "g", "topic": "ChaosSteady", "queue_id": 0, "offset": 1 << 70}),
        ("commit_offset", {"group": "g", "topic": "ChaosSteady", "queue_id": -5, "offset": 1}),
        ("commit_offset", {"group": ["x"], "topic": 7, "queue_id": "q", "offset": "o"}),
        ("update_topic", {"topic": "Chaos/../x", "write_queue_nums": 0}),
        ("update_topic", {"topic": "ChaosBig", "write_queue_nums": 1 << 40}),
        ("join_group", {"group": "g" * 10_000, "model": "NOPE"}),
        ("no_such_command", {}),
    ]
    out = {}
    for command, args in bad:
        try:
            reply = s.control.call(Admin(s.client_id, next_request_id(), command, args, s.channel.secret), 3.0)
            out[command + " " + json.dumps(args)[:60]] = (
                "ok (accepted!)" if reply.ok else "refused: " + str(reply.body.get("error"))[:80]
            )
        except (shmq.ShmqError, ValueError) as e:  # ValueError: the client's encoder refused it
            out[command + " " + json.dumps(args)[:60]] = f"{type(e).__name__}: {e}"[:100]
    conn.shutdown()
    return out


def _ask_and_die(broker: str, n: int) -> None:
    """Child: attach, send ``n`` admin requests without reading the replies, then die."""
    _conn, s = _attach(broker)
    for _ in range(n):
        s.control.send_request(Admin(s.client_id, next_request_id(), "list_topics", {}, s.channel.secret), 1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def stale_replies(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Clients that send control requests and die without reading the replies (A3)."""
    kids = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and kids < 60:
        subprocess.run(
            [sys.executable, __file__, "_ask_and_die", broker, store, "20"],
            timeout=30,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        kids += 1
    t = time.monotonic()
    conn, _s = _attach(broker)
    attach_ms = (time.monotonic() - t) * 1000
    conn.shutdown()
    return {"dying askers": kids, "a new client attached in ms": round(attach_ms, 1)}


def spoof_detach(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Detach other clients by id, read from the state segment (A4)."""
    ids = _client_ids(broker)
    state = StateReader.open(broker)
    key = int(state.view.header[0]["control_key"])
    state.close()
    control = ControlQueue.open(key)
    answers: dict[str, int] = {}
    for cid in ids:
        try:
            reply = control.call(Detach(cid, next_request_id()), 2.0)
            k = "accepted" if reply.ok else "refused"
        except shmq.ShmqError as e:
            k = type(e).__name__
        answers[k] = answers.get(k, 0) + 1
    time.sleep(seconds)
    return {"victims": len(ids), **answers}


def waiters(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Long-poll waiters as fast as the ring takes them (A5)."""
    conn, s = _attach(broker, ring_bytes=1 << 20)
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        frame = P.encode_pull_wait(next_request_id(), "ChaosEmpty", sent % 4, 0, 30_000)
        if s.channel.requests.try_write(P.PULL_WAIT, frame):
            sent += 1
            if sent % 64 == 0:
                wake(s.channel.requests, CONSUMER, s.channel.broker_bell)
        else:
            wake(s.channel.requests, CONSUMER, s.channel.broker_bell)
            time.sleep(0.0005)
    conn.shutdown()
    return {"long polls sent": sent}


def attach_flood(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Attach as many 64 MiB channels as the broker takes, then leave (A5)."""
    conns, refused, why = [], 0, ""
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(conns) + refused < 1100:
        try:
            conns.append(_attach(broker, ring_bytes=64 << 20)[0])
        except shmq.ShmqError as e:
            refused += 1
            why = str(e)[:120]
            if refused > 20:
                break
    for c in conns:
        c.shutdown()
    return {"attached": len(conns), "refused": refused, "last refusal": why}


def doorbell_spam(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """sem_post on the broker's doorbell in a tight loop, then stop (A5)."""
    bell = posix_ipc.Semaphore(broker_bell_name(broker))
    end = time.monotonic() + seconds / 2
    posts = 0
    while time.monotonic() < end:
        for _ in range(1000):
            bell.release()
        posts += 1000
    bell.close()
    time.sleep(seconds / 2)  # the harness measures the broker's CPU after the spam too
    return {"posts": posts}


def big_reply(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """An admin reply larger than one control message: list 200 topics (A6)."""
    admin = shmq.Admin(broker=broker)
    for i in range(200):
        admin.create_topic(f"ChaosMany{i:03d}", queues=1)
    t = time.monotonic()
    try:
        n = len(admin.topics())
        return {"topics listed": n, "ms": round((time.monotonic() - t) * 1000, 1)}
    except shmq.ShmqError as e:
        return {"error": f"{type(e).__name__}: {e}"[:120]}


def garbage(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Random frames of every request kind into a client's own ring."""
    rng = random.Random(7)
    dropped = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _conn, s = _attach(broker)
        for _ in range(rng.randrange(1, 8)):
            kind = rng.choice([*sorted(P.REQUEST_KINDS), rng.randrange(16, 0xFFFF)])
            s.channel.requests.try_write(kind, rng.randbytes(rng.randrange(0, 300)))
        wake(s.channel.requests, CONSUMER, s.channel.broker_bell)
        time.sleep(0.05)
        dropped += not _attached(broker, s.client_id)
        s.liveness.release()
    return {"garbage clients dropped": dropped}


def mutate_copy(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Change a SEND's record bytes while the broker may be copying it (D13)."""
    _conn, s = _attach(broker, role="producer")
    frame = bytearray(P.encode_send(next_request_id(), time.monotonic_ns(), -1, 0, 0, "ChaosMutate", (), b"x" * 300))
    stop = threading.Event()
    ring = s.channel.requests
    data = ring._data

    def scribble() -> None:
        rng = random.Random(3)
        try:
            while not stop.is_set():
                i = rng.randrange(len(data))
                data[i] = rng.randrange(256)
        except ValueError:  # the broker dropped the channel (a scribbled frame) and it was unmapped
            stop.set()

    t = threading.Thread(target=scribble, daemon=True)
    t.start()
    sent = drops = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if ring.try_write(P.SEND, bytes(frame)):
                sent += 1
            wake(ring, CONSUMER, s.channel.broker_bell)
        except ValueError:  # dropped: attach again and go on scribbling
            stop.set()
            t.join()
            drops += 1
            s.liveness.release()
            _conn, s = _attach(broker, role="producer")
            ring = s.channel.requests
            data = ring._data
            stop.clear()
            t = threading.Thread(target=scribble, daemon=True)
            t.start()
    stop.set()
    t.join()
    s.liveness.release()
    return {"sends while scribbling": sent, "channels dropped": drops}


def disk_fill(broker: str, store: str, seconds: float) -> dict[str, Any]:
    """Fill the store's file system with an unrelated file, hold it, then free it (C9, C10).

    Only meaningful when the store has a small file system of its own (attacks.py --disk-mib)."""
    path = os.path.join(store, "filler.bin")
    written = 0
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb") as f:
            while True:
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError as e:
        full = e.strerror
    time.sleep(seconds)
    os.unlink(path)
    time.sleep(seconds)  # writes must resume by themselves within this window
    return {"filled MiB": written >> 20, "stopped by": full}


ATTACKS: dict[str, Callable[[str, str, float], dict[str, Any]]] = {
    "ring-counters": ring_counters,
    "admin-values": admin_values,
    "stale-replies": stale_replies,
    "spoof-detach": spoof_detach,
    "waiters": waiters,
    "attach-flood": attach_flood,
    "doorbell-spam": doorbell_spam,
    "big-reply": big_reply,
    "garbage": garbage,
    "mutate-copy": mutate_copy,
}
OPTIONAL = {"disk-fill": disk_fill}  # needs a store on a file system of its own


if __name__ == "__main__":
    what, name, store_dir, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if what == "_ask_and_die":
        _ask_and_die(name, int(secs))
    try:
        result = {**ATTACKS, **OPTIONAL}[what](name, store_dir, secs)
    except Exception as e:  # noqa: BLE001 - the attack itself failed: say so, the harness reports it
        result = {"attack failed": f"{type(e).__name__}: {e}"[:200]}
    print(json.dumps(result), flush=True)
    os._exit(0)  # like a client that vanishes: no detach, no cleanup beyond the kernel's
