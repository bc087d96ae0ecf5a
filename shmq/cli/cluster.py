"""`shmq cluster`: a name server and N brokers in the foreground, stopped on Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading

from shmq.errors import ShmqError


def run_cluster(root: str, brokers: int, namesrv: str, config: str | None) -> int:
    """Start the cluster, say where its parts are, wait for a signal, stop it; the exit status.
    A part that exits meanwhile is reported once; the others keep serving."""
    from shmq.cluster import Cluster

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster = Cluster(root, brokers=brokers, namesrv=namesrv, config=config)
    except (ShmqError, OSError) as e:
        print(f"shmq cluster: error: {e}", file=sys.stderr)
        return 2
    print(f"name server {namesrv!r} (pid {cluster.namesrv.pid}), log {cluster.namesrv.log_path}")
    for b in cluster.brokers:
        print(f"broker {b.name!r} (pid {b.pid}), store {b.store_dir}")
    print(f"clients: namesrv={namesrv!r} (or SHMQ_NAMESRV={namesrv}); Ctrl-C stops the cluster", flush=True)
    reported: set[str] = set()
    try:
        while not stop.wait(0.5):
            parts = [(b.name, b.process) for b in cluster.brokers] + [
                (f"name server {namesrv}", cluster.namesrv.process)
            ]
            for name, process in parts:
                if process.poll() is not None and name not in reported:
                    reported.add(name)
                    print(f"shmq cluster: {name} exited with status {process.returncode}", file=sys.stderr)
    finally:
        cluster.stop()
    return 0
