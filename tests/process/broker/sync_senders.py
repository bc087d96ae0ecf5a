"""Threads that send numbered messages with sync ``send`` until stopped, for tests that kill a
broker under load: what was acknowledged (body, SendResult) and what failed."""

from __future__ import annotations

import threading

import shmq
from shmq import Message, Producer, SendResult, SendStatus


class SyncSenders:
    def __init__(self, producer: Producer, topic: str, threads: int = 4) -> None:
        self.producer = producer
        self.topic = topic
        self.acked: list[tuple[bytes, SendResult]] = []
        self.failed: list[shmq.ShmqError] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, args=(k,)) for k in range(threads)]

    def start(self) -> SyncSenders:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.ident is not None:
                t.join(30)

    def _send(self, k: int) -> None:
        n = 0
        while not self._stop.is_set():
            body = b"%d-%d" % (k, n)
            n += 1
            try:
                r = self.producer.send(Message(self.topic, body))
            except shmq.ShmqError as e:
                self.failed.append(e)
                continue
            assert r.status is SendStatus.SEND_OK
            with self._lock:
                self.acked.append((body, r))
