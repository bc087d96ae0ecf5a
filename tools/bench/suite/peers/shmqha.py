"""shmq's replicated rows: a master broker (SYNC_MASTER or ASYNC_MASTER, ``haListenPort`` set)
and a replica daemon (``python -m shmq replica``) on loopback, 8 senders with ``Producer.send``.

A SYNC_MASTER send is acked once the replica has reported an offset past it; ASYNC_MASTER's
once the master has it, the replica streaming meanwhile: the two rows give the ratio the issue
asks for (goal >= 0.5). Until ``shmq replica`` exists the rows say "needs HA", no number.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from ..core import ReplicatedSpec, System, body, durable_result, free_port, timed_loop

SETTLE = 60.0  # seconds a fresh pair may take until the replica streams
# Both stores of a pair: segments warmed whole before the writer reaches them, as in the other
# rows, but 256 MiB (the rows write tens of MB) so four more stores do not cost 4 GiB of disk.
HA_LAYOUT = {"mapped_file_size_commit_log": 256 << 20, "warm_ahead_size": 256 << 20}


class ReplicatedPair:
    """A master broker of ``role`` with its HA sender on a free loopback port, and a replica of it."""

    def __init__(self, workdir: str, name: str, role: str, layout: dict = HA_LAYOUT) -> None:
        import shmq
        from shmq.config import camel

        self.name = name
        self.replica_name = name + "r"
        port = free_port()
        self.master_store = tempfile.mkdtemp(prefix=f"shmq-{role.lower()}.", dir=workdir)
        self.replica_store = tempfile.mkdtemp(prefix="shmq-replica.", dir=workdir)
        self.master = shmq.Broker(
            self.master_store,
            name=name,
            config=dict(layout, default_topic_queue_nums=8, brokerRole=role, haListenPort=port),
        )
        self.replica_log = os.path.join(workdir, f"{self.replica_name}.log")
        # the replica's store has the master's layout (the handshake refuses another segment size)
        conf = os.path.join(workdir, f"{self.replica_name}.conf")
        with open(conf, "w") as f:  # and the token the master generated in its store (docs/HA.md)
            f.write("".join(f"{camel(k)}={v}\n" for k, v in layout.items()))
            f.write(f"haAuthTokenFile={os.path.join(self.master_store, 'config', 'ha.token')}\n")
        try:
            with open(self.replica_log, "ab") as log:
                self.replica = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "shmq",
                        "replica",
                        "--store",
                        self.replica_store,
                        "--name",
                        self.replica_name,
                        "--master",
                        f"127.0.0.1:{port}",
                        "--config",
                        conf,
                    ],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )
        except BaseException:
            self.master.stop()
            raise

    def wait_streaming(self, timeout: float = SETTLE) -> None:
        try:
            wait_streaming(self.name, timeout, self._check_replica)
        except RuntimeError as e:
            raise RuntimeError(f"{e}; replica log: {self.log_tail()}") from None

    def _check_replica(self) -> None:
        if self.replica.poll() is not None:
            raise RuntimeError(f"replica {self.replica_name} exited {self.replica.returncode}")

    def log_tail(self) -> str:
        try:
            with open(self.replica_log, errors="replace") as f:
                return " / ".join(f.read().strip().splitlines()[-6:])
        except FileNotFoundError:
            return ""

    def stop_replica(self) -> str:
        """SIGTERM the replica (SIGKILL after 30 s); a line saying how it ended. A replica that did
        not exit cleanly could not remove its IPC objects: they are reclaimed here."""
        if self.replica.poll() is None:
            self.replica.send_signal(signal.SIGTERM)
            try:
                self.replica.wait(30)
            except subprocess.TimeoutExpired:
                self.replica.kill()
                self.replica.wait()
        if self.replica.returncode:
            from shmq.ring.reclaim import reclaim_dead_broker

            reclaim_dead_broker(self.replica_name, self.replica_store)
        return f"replica {self.replica_name} stopped, exit status {self.replica.returncode}"


def wait_streaming(broker: str, timeout: float = SETTLE, check: Callable[[], None] = lambda: None) -> None:
    """Until ``broker``'s HA segment shows a replica streaming at the master's end (``check`` raises
    to give up early, e.g. when the replica died)."""
    from shmq.errors import BrokerNotFoundError
    from shmq.ha.shared import STREAMING, HASegment

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        try:
            seg = HASegment.open(broker, read_only=True)
        except BrokerNotFoundError:
            seg = None
        if seg is not None:
            try:
                end = seg.master_offset
                if any(r.state == STREAMING and r.acked_offset >= end for r in seg.replicas()):
                    return
            finally:
                seg.close()
        time.sleep(0.05)
    raise RuntimeError(f"no replica of {broker} streaming within {timeout} s")


class FixedPair(System):
    """A pair started elsewhere (tools/bench/ha_bench.py, on two hosts): only the replicated workload."""

    replicated = True

    def __init__(self, ctx: dict) -> None:
        self.ctx = ctx

    def replicated_context(self, spec: ReplicatedSpec) -> dict:
        return self.ctx


def replicated_sender(ctx, spec, idx, sync):
    """``Producer.send`` one at a time; only SEND_OK counts (a SLAVE_NOT_AVAILABLE ack fails the run)."""
    import shmq

    p = shmq.Producer(f"bench-p{os.getpid()}", broker=ctx["broker"])
    p.start()
    msg = shmq.Message(ctx["topic"], body(spec.size))
    ok = shmq.SendStatus.SEND_OK

    def send():
        status = p.send(msg).status
        if status is not ok:
            raise RuntimeError(f"send answered {status.name}")

    send()
    sync.ready()
    lat = timed_loop(sync, send, spec.count, check_every=16)
    p.shutdown()
    return durable_result(sync, lat)
