"""Redis Streams: Debian's redis-server on loopback with an append-only file (fsync every
second; ``always`` for the durability workload); redis-py XADD (pipelined for the batch
API) and XREADGROUP + XACK in a consumer group. The replicated rows use a second pair of
servers, a master and its replica (``replicaof``), with ``WAIT 1 0`` after each XADD for sync."""

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
    how = (
        "XADD one per call / pipelined 100 per round trip (transaction=False); "
        "XREADGROUP COUNT 200 + one XACK per read; round trip = one XADD"
    )
    persistence = "AOF, fsync every second"
    broker = True
    note = "AOF with appendfsync everysec (a crash can lose the last second)"
    durable = True
    durable_note = "appendfsync always"
    replicated = True
    replicated_note = (
        "a second redis-server with replicaof, AOF fsync everysec on both; sync: XADD + WAIT 1 0 "
        "pipelined in one round trip; async: XADD alone"
    )

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
        self.servers = []
        _, self.client, _, self.port = self._server(workdir, "redis.")
        # the replicated rows: a master and a replica of it (replicaof), both with the AOF
        self.ha_master = self._server(workdir, "redis-master.")
        self.ha_replica = self._server(workdir, "redis-replica.", "--replicaof", "127.0.0.1", str(self.ha_master[3]))
        wait_replica_online(self.ha_master[1])

    def _server(self, workdir, prefix, *extra):
        """A redis-server kept for stop(); when it serves."""
        proc, client, d, port = serve(workdir, prefix, *extra)
        self.servers.append((proc, client, d))
        return proc, client, d, port

    def stop(self):
        for proc, client, d in getattr(self, "servers", []):
            shut(proc, client, d)

    def _stream(self, run_id, client=None, port=None):
        client = client or self.client
        key = f"bench:{run_id}"
        client.delete(key)
        client.xgroup_create(key, GROUP, id="0", mkstream=True)
        return {"port": port or self.port, "key": key}

    def _drop(self, ctx, client=None):
        client = client or self.client
        client.delete(ctx["key"])
        try:
            client.bgrewriteaof()  # keep the AOF from growing over the whole suite
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

    def replicated_context(self, spec):
        ctx = self._stream(spec.run_id, self.ha_master[1], self.ha_master[3])
        ctx["wait"] = spec.sync
        return ctx

    def replicated_cleanup(self, spec, ctx):
        self._drop(ctx, self.ha_master[1])


def serve(workdir, prefix, *extra):
    """A redis-server on a loopback port with its own directory under ``workdir`` and an
    append-only file (fsync every second); (process, client, directory, port) once it serves."""
    import redis

    d = tempfile.mkdtemp(prefix=prefix, dir=workdir)
    port = free_port()
    proc = subprocess.Popen(
        [
            RedisStreams.binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            d,
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            os.path.join(d, "redis.log"),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, client, d, port
        except redis.ConnectionError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    shut(proc, client, d)
    raise RuntimeError(f"redis-server did not start (see {d}/redis.log)")


def shut(proc, client, d):
    """Stop a server ``serve`` started and remove its directory."""
    try:
        client.close()
    except Exception:
        pass
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(d, ignore_errors=True)


def wait_replica_online(master, timeout: float = 30.0) -> None:
    """Until the master lists one replica in state online (its initial sync done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = master.info("replication")
        if info.get("connected_slaves", 0) >= 1 and info.get("slave0", {}).get("state") == "online":
            return
        time.sleep(0.05)
    raise RuntimeError(f"the Redis replica did not come online within {timeout} s: {master.info('replication')}")


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


def replicated_sender(ctx, spec, idx, sync):
    """XADD to the master; with ``wait``, WAIT 1 0 in the same round trip (acked once the replica has it)."""
    r = _client(ctx)
    key = ctx["key"]
    fields = {"b": body(spec.size)}
    r.ping()
    if ctx["wait"]:
        pipe = r.pipeline(transaction=False)

        def send():
            pipe.xadd(key, fields)
            pipe.execute_command("WAIT", 1, 0)
            if pipe.execute()[1] < 1:
                raise RuntimeError("WAIT 1 0 returned without a replica")
    else:

        def send():
            r.xadd(key, fields)

    sync.ready()
    lat = timed_loop(sync, send, spec.count, check_every=16)
    return durable_result(sync, lat)
