"""Clients a program leaves open are shut down when the interpreter exits.

A script that ends without ``shutdown()`` (or whose broker stopped first) used to leave its
clients' threads to die mid-call as the interpreter finalized: offsets not committed, the
broker never told, and a warning per thread about the broker's control queue. Each client
registers here when it starts and leaves when it shuts down; an ``atexit`` handler shuts down
the ones still open, newest first (as nested ``with`` blocks close), while their reader
threads (daemons) still run. Whatever goes wrong then is not the user's to act on: it is logged
at debug level only. A forked child forgets its parent's clients: their threads are not in it,
and detaching them from there would cut the parent off.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Protocol

log = logging.getLogger(__name__)


class Closable(Protocol):
    def shutdown(self) -> None: ...


_open: dict[int, Closable] = {}  # by id(): a client need not be hashable
_lock = threading.Lock()
_hooked = False


def track(client: Closable) -> None:
    """``client`` started: shut it down at exit unless ``untrack`` comes first."""
    global _hooked
    with _lock:
        _open[id(client)] = client
        if not _hooked:
            atexit.register(close_all)
            _hooked = True


def untrack(client: Closable) -> None:
    """``client`` is shut down (or shutting down): nothing left to do at exit."""
    with _lock:
        _open.pop(id(client), None)


def _forget_all() -> None:
    """In a forked child: the clients are the parent's."""
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    _open.clear()


os.register_at_fork(after_in_child=_forget_all)


def close_all() -> None:
    """Shut down every client still open, newest first."""
    with _lock:
        clients = list(_open.values())[::-1]
        _open.clear()
    for client in clients:
        try:
            client.shutdown()
        except Exception:
            log.debug("shutting down %s at exit failed", type(client).__name__, exc_info=True)
