"""faster-fifo: a C++ circular buffer in shared memory; put/get and put_many/get_many."""

from __future__ import annotations

import queue
import time

import numpy as np

from ..core import (
    POLL,
    PUSH_RATE,
    PUSH_SETTLE_S,
    System,
    body,
    paced_stamped,
    percentiles,
    run_push,
    stamp_age,
    timed_loop,
)


class FasterFifo(System):
    name = "faster-fifo"
    title = "faster-fifo"
    how = "put / get, put_many / get_many (batches of 100); round trip through an echo process"
    persistence = "none"
    broker = False
    note = "no persistence, no broker (in-memory circular buffer)"
    latency_server = True

    def install(self):
        try:
            import faster_fifo  # noqa: F401
        except ImportError as e:
            return f"faster_fifo not importable: {e}"
        return None

    def versions(self):
        from importlib.metadata import version

        return {"faster-fifo": version("faster-fifo")}

    def tput_context(self, spec):
        from faster_fifo import Queue

        return Queue(max_size_bytes=32 * 1024 * 1024)

    def latency_context(self, spec):
        from faster_fifo import Queue

        return (Queue(max_size_bytes=1024 * 1024), Queue(max_size_bytes=1024 * 1024))

    def extra_workloads(self, settings):
        """Send -> listener latency: ``put`` at 1,000 msgs/s to a process blocked in ``get``."""
        from faster_fifo import Queue

        ctx = {"q": Queue(max_size_bytes=1024 * 1024), "count": settings.push_count, "size": 100}
        try:
            return {"push": {"put": run_push(self, ctx, settings.push_count, settings.reps)}}
        except Exception as e:
            return {"push": {"error": f"{type(e).__name__}: {e}"}}


def tput_producer(q, spec, idx, n, sync):
    data = body(spec.size)
    sync.ready()
    sent = 0
    if spec.api == "batch":
        chunk = [data] * spec.batch
        while sent < n:
            k = min(spec.batch, n - sent)
            q.put_many(chunk if k == spec.batch else chunk[:k], timeout=60)
            sent += k
            if sync.expired():
                break
    else:
        put = q.put
        while sent < n:
            put(data, timeout=60)
            sent += 1
            if sent & 255 == 0 and sync.expired():
                break
    return sent


def tput_consumer(q, spec, idx, sync):
    sync.ready()
    if spec.api == "batch":
        while True:
            try:
                got = q.get_many(timeout=POLL, max_messages_to_get=spec.batch * 10)
            except queue.Empty:
                if sync.idle():
                    return
                continue
            if sync.got(len(got)):
                return
    else:
        get = q.get
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
        m = req.get(timeout=120)
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
        rep.get(timeout=10)

    lat = timed_loop(sync, once, spec.rounds)
    req.put(None)
    return lat


def push_sender(ctx, sync):
    return paced_stamped(sync, ctx["count"], ctx["size"], ctx["q"].put)


def push_listener(ctx, sync):
    get, lat = ctx["q"].get, []
    sync.ready()
    deadline = time.monotonic() + ctx["count"] / PUSH_RATE + PUSH_SETTLE_S + 30
    while len(lat) < ctx["count"] and time.monotonic() < deadline:
        try:
            lat.append(stamp_age(get(timeout=1.0)))
        except queue.Empty:
            pass
    return percentiles(np.array(lat, dtype=np.int64))
