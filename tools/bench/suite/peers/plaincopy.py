"""The physical reference: the same bytes through shmq's SPSC shared-memory ring
(``shmq.ring.framing.Ring`` over a POSIX segment) and one numpy copy into a mmap'd file,
with no broker logic, no index, no acks. What shmq could reach if its broker cost nothing.

Per-message API: one ring frame per message, one copy into the mmap per message. Batch API:
one frame per batch, one copy per batch. 4 -> 2: each producer has its own ring, producer i
feeds consumer i % 2. Latency: a ping-pong over two rings with both sides busy-polling."""

from __future__ import annotations

import mmap
import os
import time

import numpy as np

from ..core import System, body, timed_loop

RING_BYTES = 4 * 1024 * 1024
KIND = 16


def _seg_name(run_id: str, i: int) -> str:
    return f"/shmqbench.{os.getpid()}.{run_id}.{i}"


class PlainCopy(System):
    name = "plain copy"
    title = "plain copy: shm ring + numpy copy into a mmap"
    how = (
        "Ring.try_write per message / one ring frame per 100-message batch; "
        "the consumer copies each frame into a mmap'd file with numpy"
    )
    persistence = "page cache only (never fsynced)"
    broker = False
    note = "physical reference: no broker, no index, no acks, never fsynced"
    latency_server = True

    def start(self, workdir):
        self.dir = workdir

    def versions(self):
        return {"numpy": np.__version__}

    def _make(self, run_id, count):
        from shmq.ring.framing import Ring, RingLayout
        from shmq.ring.shm import Segment

        layout = RingLayout(RING_BYTES)
        names = []
        for i in range(count):
            name = _seg_name(run_id, i)
            seg = Segment.create(name, layout.size)
            Ring.create(seg.buf, layout).close()
            seg.close()
            names.append(name)
        return names

    def _unlink(self, names):
        from shmq.ring.shm import unlink_segment

        for n in names:
            unlink_segment(n)

    def tput_context(self, spec):
        return {"rings": self._make(spec.run_id, spec.producers), "dir": self.dir}

    def tput_cleanup(self, spec, ctx):
        self._unlink(ctx["rings"])

    def latency_context(self, spec):
        return {"rings": self._make(spec.run_id, 2)}

    def latency_cleanup(self, spec, ctx):
        self._unlink(ctx["rings"])


def _open(name):
    from shmq.ring.framing import Ring
    from shmq.ring.shm import Segment

    seg = Segment.open(name)
    return seg, Ring(seg.buf)


def tput_producer(ctx, spec, idx, n, sync):
    seg, ring = _open(ctx["rings"][idx])
    data = body(spec.size)
    sync.ready()
    sent = 0
    yield_ = os.sched_yield
    if spec.api == "batch":
        block = data * spec.batch
        while sent < n:
            k = min(spec.batch, n - sent)
            view = ring.reserve(KIND, k * spec.size)
            if view is None:
                yield_()
                continue
            view[:] = block[: k * spec.size]
            view.release()
            ring.commit()
            sent += k
            if sync.expired():
                break
    else:
        write = ring.try_write
        while sent < n:
            if write(KIND, data):
                sent += 1
                if sent & 255 == 0 and sync.expired():
                    break
            else:
                yield_()
    ring.close()
    seg.close()
    return sent


def tput_consumer(ctx, spec, idx, sync):
    mine = [name for i, name in enumerate(ctx["rings"]) if i % spec.consumers == idx]
    opened = [_open(name) for name in mine]
    rings = [r for _, r in opened]
    share = spec.count * len(mine) // spec.producers + spec.batch
    size = min(max(share * spec.size, 1 << 20), 1 << 30)
    path = os.path.join(ctx["dir"], f"plaincopy.{os.getpid()}.{spec.run_id}.{idx}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, size)
    mm = mmap.mmap(fd, size)
    dst = np.frombuffer(mm, dtype=np.uint8)
    pos = 0
    msg = spec.size
    sync.ready()
    idle_since = None
    done = False
    while not done:
        k = 0
        for ring in rings:
            while True:
                frame = ring.read()
                if frame is None:
                    break
                view = frame[1]
                n = len(view)
                if pos + n > size:
                    pos = 0
                dst[pos : pos + n] = np.frombuffer(view, dtype=np.uint8)
                pos += n
                k += n // msg
                if k >= 4096:
                    break
            ring.release()
        if k:
            idle_since = None
            done = sync.got(k)
        else:
            now = time.perf_counter()
            if idle_since is None:
                idle_since = now
            elif now - idle_since > 0.01:
                done = sync.idle()
                idle_since = now
            os.sched_yield()
    del dst
    for seg, ring in opened:
        ring.close()
        seg.close()
    mm.close()
    os.close(fd)
    os.unlink(path)


def _spin_read(ring):
    while True:
        frame = ring.read()
        if frame is not None:
            return frame


def latency_server(ctx, spec, sync):
    _s1, req = _open(ctx["rings"][0])
    _s2, rep = _open(ctx["rings"][1])
    sync.ready()
    while True:
        _kind, view = _spin_read(req)
        n = len(view)
        while not rep.try_write(KIND, view):
            pass
        view.release()
        req.release()
        if n == 0:
            break


def latency_client(ctx, spec, sync):
    _s1, req = _open(ctx["rings"][0])
    _s2, rep = _open(ctx["rings"][1])
    data = body(spec.size)
    sync.ready()

    def once():
        req.try_write(KIND, data)
        _spin_read(rep)[1].release()
        rep.release()

    for _ in range(50):
        once()
    lat = timed_loop(sync, once, spec.rounds)
    req.try_write(KIND, b"")
    return lat
