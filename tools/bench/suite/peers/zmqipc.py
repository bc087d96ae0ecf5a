"""pyzmq over ipc://: PUSH/PULL for throughput, REQ/REP for round trips (raw IPC, no broker)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import ClassVar

import numpy as np

from ..core import PUSH_RATE, PUSH_SETTLE_S, System, body, paced_stamped, percentiles, run_push, stamp_age, timed_loop


class ZmqIpc(System):
    name = "zmq ipc"
    title = "pyzmq PUSH/PULL, REQ/REP over ipc://"
    how = "PUSH.send / PULL.recv, each consumer binds, producers connect to all; REQ/REP for round trips"
    persistence = "none"
    broker = False
    note = "no persistence, no broker (raw IPC socket)"
    apis = ("msg",)
    api_notes: ClassVar[dict[str, str]] = {"batch": "batches internally; send() is its fastest API"}
    latency_server = True

    def install(self):
        try:
            import zmq  # noqa: F401
        except ImportError as e:
            return f"pyzmq not importable: {e}"
        return None

    def versions(self):
        import zmq

        return {"pyzmq": zmq.__version__, "libzmq": zmq.zmq_version()}

    def start(self, workdir):
        self.dir = tempfile.mkdtemp(prefix="zmq.", dir=workdir)

    def stop(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def tput_context(self, spec):
        return [f"ipc://{self.dir}/{spec.run_id}.{i}" for i in range(spec.consumers)]

    def latency_context(self, spec):
        return f"ipc://{self.dir}/{spec.run_id}.rr"

    def extra_workloads(self, settings):
        """Send -> listener latency: PUSH.send at 1,000 msgs/s to a process blocked in PULL.recv."""
        ctx = {"endpoint": f"ipc://{self.dir}/push", "count": settings.push_count, "size": 100}
        try:
            return {"push": {"PUSH.send": run_push(self, ctx, settings.push_count, settings.reps)}}
        except Exception as e:
            return {"push": {"error": f"{type(e).__name__}: {e}"}}


def tput_producer(endpoints, spec, idx, n, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    for ep in endpoints:  # connect only once each consumer has bound, so PUSH spreads over all
        end = time.monotonic() + 60
        while not os.path.exists(ep[len("ipc://") :]) and time.monotonic() < end:
            time.sleep(0.005)
        s.connect(ep)
    time.sleep(0.02)
    data = body(spec.size)
    send = s.send
    sync.ready()
    sent = 0
    while sent < n:
        send(data)
        sent += 1
        if sent & 255 == 0 and sync.expired():
            break
    sync.sent(sent)
    sync.wait_consumed()  # the pipeline pattern: the sender stays until the sink has all
    s.close(linger=-1)
    ctx.term()
    return sent


def tput_consumer(endpoints, spec, idx, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.bind(endpoints[idx])
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    recv = s.recv
    sync.ready()
    timeout = 50
    while True:
        if not poller.poll(timeout):
            if sync.idle():
                break
            continue
        k = 0
        while True:
            try:
                recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            k += 1
        if sync.got(k):
            break
    s.close(linger=0)
    ctx.term()


def latency_server(endpoint, spec, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.REP)
    s.bind(endpoint)
    sync.ready()
    while True:
        m = s.recv()
        s.send(m)
        if m == b"":
            break
    s.close(linger=0)
    ctx.term()


def latency_client(endpoint, spec, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(endpoint)
    data = body(spec.size)
    sync.ready()
    for _ in range(50):
        s.send(data)
        s.recv()

    def once():
        s.send(data)
        s.recv()

    lat = timed_loop(sync, once, spec.rounds)
    s.send(b"")
    s.recv()
    s.close(linger=0)
    ctx.term()
    return lat


def push_sender(c, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    end = time.monotonic() + 60
    while not os.path.exists(c["endpoint"][len("ipc://") :]) and time.monotonic() < end:
        time.sleep(0.005)
    s.connect(c["endpoint"])
    n = paced_stamped(sync, c["count"], c["size"], s.send)
    s.close(linger=-1)
    ctx.term()
    return n


def push_listener(c, sync):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.bind(c["endpoint"])
    s.rcvtimeo = 1000
    lat = []
    sync.ready()
    deadline = time.monotonic() + c["count"] / PUSH_RATE + PUSH_SETTLE_S + 30
    while len(lat) < c["count"] and time.monotonic() < deadline:
        try:
            lat.append(stamp_age(s.recv()))
        except zmq.Again:
            pass
    s.close(linger=0)
    ctx.term()
    return percentiles(np.array(lat, dtype=np.int64))
