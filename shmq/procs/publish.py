"""StatePublisher: mirrors the broker's tables into the state segment for clients and `shmq top`.

Rows are stable: a topic keeps its row and its block of queue rows while it lives (the block
moves only when the topic grows past it), so a reader may cache a queue row and read its max
offset without the seqlock. Structural changes (topics, groups, clients) rewrite their tables
under the seqlock; per-pass max offsets and counters are single-row writes.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

from shmq.procs.groups import BROADCASTING, ConsumerGroup
from shmq.procs.topics import TopicConfig
from shmq.ring.state import QUEUE, StateWriter

ROLE_PRODUCER = 1
ROLE_CONSUMER = 2
ROLES = {"producer": ROLE_PRODUCER, "consumer": ROLE_CONSUMER}
_QUEUE_WORDS = QUEUE.itemsize // 8
_MIN_WORD = QUEUE.fields["min_offset"][1] // 8
_MAX_WORD = QUEUE.fields["max_offset"][1] // 8


class StatePublisher:
    def __init__(self, writer: StateWriter) -> None:
        self.writer = writer
        layout = writer.view.layout
        self._topic_rows: dict[str, int] = {}
        self._queue_blocks: dict[str, tuple[int, int]] = {}  # topic -> (base, size)
        self._queue_next = 0
        self._queue_cap = layout.queues
        self._topic_cap = layout.topics
        self._group_rows: dict[str, int] = {}
        self._offset_rows: dict[tuple[str, str, int], int] = {}

    # ------------------------------------------------------------------ topics and queues

    def topics(self, topics: dict[str, TopicConfig], offsets: Callable[[str, int], tuple[int, int]],
               committed: dict[tuple[str, str, int], int]) -> None:
        """Rewrite the topic table (after create/update/delete); ``offsets(topic, qid)`` -> (min, max)."""
        for gone in set(self._topic_rows) - set(topics):
            del self._topic_rows[gone]
            del self._queue_blocks[gone]
        for name, tc in topics.items():
            size = max(tc.read_queue_nums, tc.write_queue_nums)
            if name not in self._topic_rows:
                free = sorted(set(range(self._topic_cap)) - set(self._topic_rows.values()))
                if not free:
                    raise ValueError(f"state segment holds at most {self._topic_cap} topics")
                self._topic_rows[name] = free[0]
            block = self._queue_blocks.get(name)
            if block is None or block[1] < size:
                self._queue_blocks[name] = self._alloc_queues(size)
        with self.writer.update() as v:
            v.topics[:] = 0
            for name, row in self._topic_rows.items():
                tc = topics[name]
                base, _ = self._queue_blocks[name]
                v.topics[row] = (1, tc.perm, tc.read_queue_nums, tc.write_queue_nums, base, 0, 0, 0, 0, name.encode())
                for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
                    lo, hi = offsets(name, qid)
                    v.queues[base + qid] = (row, qid, lo, hi)
        self.offsets(committed)

    def _alloc_queues(self, size: int) -> tuple[int, int]:
        if self._queue_next + size > self._queue_cap:  # compact: hand out blocks again from 0
            self._queue_next = 0
            for name, (_, n) in sorted(self._queue_blocks.items()):
                self._queue_blocks[name] = (self._queue_next, n)
                self._queue_next += n
            if self._queue_next + size > self._queue_cap:
                raise ValueError(f"state segment holds at most {self._queue_cap} queues")
        block = (self._queue_next, size)
        self._queue_next += size
        return block

    def queue_row(self, topic: str, queue_id: int) -> int | None:
        block = self._queue_blocks.get(topic)
        return block[0] + queue_id if block is not None and queue_id < block[1] else None

    def queue_offsets(self, items: Iterable[tuple[str, int, int, int]]) -> None:
        """Publish (topic, qid, min, max) after a pass of puts.

        The hot path of every broker pass: plain aligned 8-byte stores through a ``memoryview``
        of the queue table (one ``memcpy`` each, never torn) instead of numpy structured-field
        assignment, which costs ~1 us per field; the seqlock is still bumped once.
        """
        w = self.writer
        q64 = w.queue_words
        per_row = _QUEUE_WORDS
        seq = w.begin()
        try:
            for topic, qid, lo, hi in items:
                row = self.queue_row(topic, qid)
                if row is not None:
                    i = row * per_row
                    q64[i + _MIN_WORD] = lo
                    q64[i + _MAX_WORD] = hi
        finally:
            w.end(seq)

    def topic_counters(self, counts: dict[str, tuple[int, int]]) -> None:
        """Add messages/bytes stored per topic to its row."""
        with self.writer.update() as v:
            for topic, (msgs, nbytes) in counts.items():
                row = self._topic_rows.get(topic)
                if row is not None:
                    v.topics[row]["msgs_in"] += msgs
                    v.topics[row]["bytes_in"] += nbytes

    # ------------------------------------------------------------------ groups, offsets, clients

    def groups(self, groups: dict[str, ConsumerGroup], committed: dict[tuple[str, str, int], int]) -> None:
        for name in list(self._group_rows):
            if name not in groups:
                del self._group_rows[name]
        cap = len(self.writer.view.groups)
        for name in groups:
            if name not in self._group_rows:
                free = sorted(set(range(cap)) - set(self._group_rows.values()))
                if not free:
                    raise ValueError(f"state segment holds at most {cap} consumer groups")
                self._group_rows[name] = free[0]
        with self.writer.update() as v:
            v.groups[:] = 0
            v.members[:] = 0
            m = 0
            for name, row in self._group_rows.items():
                g = groups[name]
                v.groups[row] = (1, 1 if g.model == BROADCASTING else 0, len(g.members), g.version, name.encode())
                for cid in sorted(g.members):
                    if m < len(v.members):
                        v.members[m] = (1, row, cid)
                        m += 1
        self.offsets(committed)

    def offsets(self, committed: dict[tuple[str, str, int], int]) -> None:
        """Rewrite the committed-offset table (after topic or group changes)."""
        self._offset_rows.clear()
        with self.writer.update() as v:
            v.offsets[:] = 0
            for key, offset in committed.items():
                self._write_offset(v, key, offset)

    def offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self.writer.update() as v:
            self._write_offset(v, (group, topic, queue_id), offset)

    def _write_offset(self, v, key: tuple[str, str, int], offset: int) -> None:
        group, topic, qid = key
        g, q = self._group_rows.get(group), self.queue_row(topic, qid)
        if g is None or q is None:
            return  # published once the group has members and the topic exists
        row = self._offset_rows.get(key)
        if row is None:
            row = len(self._offset_rows)
            if row >= len(v.offsets):
                return
            self._offset_rows[key] = row
        v.offsets[row] = (1, g, q, offset)

    def clients(self, clients: Iterable[tuple[int, str, int, int, str | None, int]]) -> None:
        """(client id, role, pid, alive key, group, attached ms) of every attached client."""
        with self.writer.update() as v:
            v.clients[:] = 0
            for i, (cid, role, pid, alive_key, group, attached_ms) in enumerate(clients):
                if i >= len(v.clients):
                    break
                g = self._group_rows.get(group, -1) if group else -1
                v.clients[i] = (1, ROLES.get(role, 0), pid, alive_key, g, cid, attached_ms, 0, 0)

    def client_fill(self, fills: dict[int, tuple[int, int]]) -> None:
        """Bytes waiting in each client's request and response ring (for the monitor)."""
        with self.writer.update() as v:
            c = v.clients
            for i in range(len(c)):
                if c[i]["used"] and int(c[i]["client_id"]) in fills:
                    c[i]["request_fill"], c[i]["response_fill"] = fills[int(c[i]["client_id"])]

    def counters(self, counts: dict[str, tuple[int, int]], msgs_in: int, bytes_in: int, busy: int,
                 max_phy_offset: int, flush_offset: int) -> None:
        """Per-topic counters and the broker stats in one seqlock section (the broker calls it on its tick)."""
        with self.writer.update() as v:
            for topic, (msgs, nbytes) in counts.items():
                row = self._topic_rows.get(topic)
                if row is not None:
                    v.topics[row]["msgs_in"] += msgs
                    v.topics[row]["bytes_in"] += nbytes
            s = v.stats
            s["msgs_in"] += msgs_in
            s["bytes_in"] += bytes_in
            s["busy_rejections"] += busy
            s["max_phy_offset"] = max_phy_offset
            s["flush_offset"] = flush_offset

    def stats(self, msgs_in: int, bytes_in: int, busy: int, max_phy_offset: int, flush_offset: int) -> None:
        with self.writer.update() as v:
            s = v.stats
            s["msgs_in"] += msgs_in
            s["bytes_in"] += bytes_in
            s["busy_rejections"] += busy
            s["max_phy_offset"] = max_phy_offset
            s["flush_offset"] = flush_offset


def now_ms() -> int:
    return int(time.time() * 1000)
