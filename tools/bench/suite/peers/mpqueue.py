"""multiprocessing.Queue (stdlib): put/get of bytes; one queue shared by every process."""

from __future__ import annotations

import queue
import sys
import time
from typing import ClassVar

from ..core import POLL, SPAWN, System, body, timed_loop


class MpQueue(System):
    name = "mp.Queue"
    title = "multiprocessing.Queue"
    how = "Queue(maxsize=10000).put / get(timeout); round trip = put on one queue, echo on another"
    persistence = "none"
    broker = False
    note = "no persistence, no broker (in-memory pipe + feeder thread)"
    apis = ("msg",)
    api_notes: ClassVar[dict[str, str]] = {"batch": "no batch API"}
    latency_server = True

    def versions(self) -> dict[str, str]:
        return {"multiprocessing": f"stdlib (Python {sys.version.split()[0]})"}

    def tput_context(self, spec):
        return SPAWN.Queue(maxsize=10_000)

    def latency_context(self, spec):
        return (SPAWN.Queue(), SPAWN.Queue())


def tput_producer(q, spec, idx, n, sync):
    data = body(spec.size)
    put = q.put
    sync.ready()
    sent = 0
    while sent < n:
        put(data)
        sent += 1
        if sent & 255 == 0 and sync.expired():
            break
    return sent


def tput_consumer(q, spec, idx, sync):
    get = q.get
    sync.ready()
    while True:
        try:
            get(timeout=POLL)
        except queue.Empty:
            if sync.idle():
                return
            continue
        if sync.got(1):
            return


def latency_server(ctx, spec, sync):
    req, rep = ctx
    sync.ready()
    while True:
        m = req.get()
        if m is None:
            return None
        rep.put(m)


def latency_client(ctx, spec, sync):
    req, rep = ctx
    data = body(spec.size)
    sync.ready()
    for _ in range(50):
        req.put(data)
        rep.get()
    sync.t0 = time.perf_counter()

    def once():
        req.put(data)
        rep.get()

    lat = timed_loop(sync, once, spec.rounds)
    req.put(None)
    return lat
