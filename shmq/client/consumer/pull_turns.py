"""PullTurns: a push consumer's two puller threads taking turns (leader and follower).

The thread holding the turn pulls and parks on the client bell. When a pass finds messages and
would park, it keeps one pulled list (``keep``), hands the turn to the other thread (still the
deputy reading the response ring: the reader thread is not woken) and calls the listener on
that list itself, then waits for the turn again. So a message that arrives while the consumer
waits reaches the listener without a hand-off to a consume thread (a futex wake-up and the GIL:
~80 us p50 and ~600 us p99 of the send -> listener hop on 2 busy cores); the follower's
wake-up runs beside the listener call, and it pulls and parks meanwhile, so a long listener
call delays no pull. One listener call at a time runs on a puller; other lists go to the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

W = TypeVar("W")


class PullTurns(Generic[W]):
    """The turn, and whether a puller thread is in a listener call."""

    def __init__(self) -> None:
        self._turn = threading.Lock()
        self._listening = False
        self._in_listener: threading.Thread | None = None
        self.park_first = False  # the next turn parks before it pulls (the last one kept a list)

    def run(self, running: Callable[[], bool], turn: Callable[[], W | None], listen: Callable[[W], None]) -> None:
        """A puller thread's life: ``turn()`` (passes and parks) while it holds the turn, until
        it returns work kept for this thread, which ``listen`` then handles without the turn."""
        while running():
            with self._turn:
                mine = turn()
            if mine is not None:
                self._in_listener = threading.current_thread()
                try:
                    listen(mine)
                finally:
                    self._in_listener = None
                    self._listening = False

    def keep(self, found: list[W], reserve: Callable[[], bool]) -> W | None:
        """One of a pass's ``found`` lists for the calling thread's own listener call (removed
        from ``found``), if none runs on a puller yet and ``reserve()`` gives it a listener slot."""
        if not found or self._listening or not reserve():
            return None
        self._listening = self.park_first = True
        return found.pop()

    def give_back(self) -> None:
        """Undo ``keep`` (the pass failed before the turn was handed over)."""
        self._listening = self.park_first = False

    def joinable(self, threads: list[threading.Thread]) -> list[threading.Thread]:
        """The puller threads a shutdown waits for: not the one in a listener call (the consumer
        waits for that call as for the consume threads')."""
        return [t for t in threads if t is not self._in_listener]
