"""Redis Streams: Debian's redis-server on loopback with an append-only file (fsync every
second; ``always`` for the durability workload); redis-py XADD (pipelined for the batch
API) and XREADGROUP + XACK in a consumer group."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from ..core import System, body, durable_result, free_port, timed_loop
from ..install import ensure_apt

GROUP = "g"


class RedisStreams(System):
    name = "Redis Streams"
    title = "Redis Streams (redis-server, AOF)"
    how = "XADD one per call / pipelined 100 per round trip (transaction=False); XREADGROUP COUNT 200 + one XACK per read; round trip = one XADD"
    persistence = "AOF, fsync every second"
    broker = True
    note = "AOF with appendfsync everysec (a crash can lose the last second)"
    durable = True
    durable_note = "appendfsync always"

    def install(self):
        try:
            import redis  # noqa: F401
        except ImportError as e:
            return f"redis-py not importable: {e}"
        return ensure_apt("redis-server", "redis-server")

    def versions(self):
        import redis
        out = subprocess.run([self.binary(), "--version"], capture_output=True, text=True).stdout.split()
        server = next((w.split("=")[1] for w in out if w.startswith("v=")), "?")
        return {"redis-server": server, "redis-py": redis.__version__}

    @staticmethod
    def binary() -> str:
        return shutil.which("redis-server") or "/usr/bin/redis-server"

    def start(self, workdir):
        import redis
        self.dir = tempfile.mkdtemp(prefix="redis.", dir=workdir)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [self.binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             "--protected-mode", "yes", "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start (see {self.dir}/redis.log)")

    def stop(self):
        try:
            self.client.close()
        except Exception:
            pass
        if getattr(self, "proc", None) is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(getattr(self, "dir", ""), ignore_errors=True)

    def _stream(self, run_id):
        key = f"bench:{run_id}"
        self.client.delete(key)
        self.client.xgroup_create(key, GROUP, id="0", mkstream=True)
        return {"port": self.port, "key": key}

    def _drop(self, ctx):
        self.client.delete(ctx["key"])
        try:
            self.client.bgrewriteaof()  # keep the AOF from growing over the whole suite
        except Exception:
            pass

    def tput_context(self, spec):
        return self._stream(spec.run_id)

    def tput_cleanup(self, spec, ctx):
        self._drop(ctx)

    def latency_context(self, spec):
        return self._stream(spec.run_id)

    def latency_cleanup(self, spec, ctx):
        self._drop(ctx)

    def durable_context(self, spec):
        self.client.config_set("appendfsync", "always")
        return self._stream(spec.run_id)

    def durable_cleanup(self, spec, ctx):
        self.client.config_set("appendfsync", "everysec")
        self._drop(ctx)


def _client(ctx):
    import redis
    return redis.Redis(host="127.0.0.1", port=ctx["port"])


def tput_producer(ctx, spec, idx, n, sync):
    r = _client(ctx)
    r.ping()
    key = ctx["key"]
    fields = {"b": body(spec.size)}
    sync.ready()
    sent = 0
    if spec.api == "batch":
        pipe = r.pipeline(transaction=False)
        while sent < n:
            k = min(spec.batch, n - sent)
            for _ in range(k):
                pipe.xadd(key, fields)
            pipe.execute()
            sent += k
            if sync.expired():
                break
    else:
        while sent < n:
            r.xadd(key, fields)
            sent += 1
            if sent & 63 == 0 and sync.expired():
                break
    return sent


def tput_consumer(ctx, spec, idx, sync):
    r = _client(ctx)
    r.ping()
    key = ctx["key"]
    name = f"c{idx}"
    sync.ready()
    while True:
        resp = r.xreadgroup(GROUP, name, {key: ">"}, count=spec.batch * 2, block=50)
        if not resp:
            if sync.idle():
                return
            continue
        ids = [mid for mid, _ in resp[0][1]]
        r.xack(key, GROUP, *ids)
        if sync.got(len(ids)):
            return


def latency_client(ctx, spec, sync):
    r = _client(ctx)
    key = ctx["key"]
    fields = {"b": body(spec.size)}
    sync.ready()
    for _ in range(50):
        r.xadd(key, fields)
    return timed_loop(sync, lambda: r.xadd(key, fields), spec.rounds)


def durable_sender(ctx, spec, idx, sync):
    r = _client(ctx)
    key = ctx["key"]
    fields = {"b": body(spec.size)}
    r.ping()
    sync.ready()
    lat = timed_loop(sync, lambda: r.xadd(key, fields), spec.count, check_every=16)
    return durable_result(sync, lat)
