"""What a name server that did not stop cleanly (SIGKILL, a crash) left: found by name, removed.

The next name server started under the same name replaces these by itself; a launcher that
will not start one again (``shmq.NameServer.stop`` after a crash) removes them here.
"""

from __future__ import annotations

from shmq.namesrv.segment import namesrv_key, routes_name
from shmq.ring.liveness import Watch
from shmq.ring.reclaim import remove_queue
from shmq.ring.shm import unlink_segment


def reclaim_dead_namesrv(namesrv: str) -> list[str]:
    """Remove the route segment, control queue and liveness semaphore of name server ``namesrv``
    unless a live one holds the name; what was removed."""
    watch = Watch(namesrv_key(namesrv, "alive"))
    if watch.is_alive():
        return []
    removed = []
    if unlink_segment(routes_name(namesrv)):
        removed.append(routes_name(namesrv))
    if remove_queue(namesrv_key(namesrv, "control")):
        removed.append("control queue")
    if watch.remove():
        removed.append("liveness semaphore")
    return removed
