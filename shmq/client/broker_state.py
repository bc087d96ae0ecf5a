"""What consumers read from the broker's state segment: queues, their offsets, perms, group members.

Consumers read the store files directly, so the broker cannot refuse them a read as
RocketMQ's does: they check the topic's published perm themselves (``pull_bounds``).

Reads go through the seqlock. A topic's row and queue block are cached and re-checked on each
read (the broker moves a block only when the topic grows), so the hot read of a few max
offsets costs a handful of field loads, not a scan of the topic table.

``pull_bounds`` (2-3 times per pushed message) goes further: what it read of a topic row is kept
with the state's ``meta_gen``, which the broker raises in every section that rewrites topic rows
or groups. While that word is unchanged the read is two loads of the queue's min/max words between
two loads of an even, unchanged ``seq`` (the seqlock itself, without numpy): ~0.4 us, was ~3.4.
"""

from __future__ import annotations

from shmq.model.perm import PERM_READ
from shmq.ring.state import MAX_WORD, META_GEN_WORD, MIN_WORD, QUEUE_WORDS, SEQ_WORD, StateReader, StateView


class BrokerState:
    """Consumer-side queries over one broker incarnation's state segment."""

    def __init__(self, reader: StateReader) -> None:
        self.reader = reader
        self._rows: dict[str, tuple[int, int, int]] = {}  # topic -> (topic row, queue base, queue count)
        self._words = reader.words
        self._queue_words = reader.queue_words
        # topic -> (meta_gen, perm, first word of its queue block, read queues) as last read in a section
        self._bounds: dict[str, tuple[int, int, int, int]] = {}

    def meta_gen(self) -> int:
        """The broker's ``meta_gen``: unchanged means no topic row, group or member changed since
        a read that saw the same value (one lone aligned load)."""
        return self._words[META_GEN_WORD]

    def _topic(self, v: StateView, topic: str) -> tuple[int, int, int] | None:
        """(row, queue base, read queues) of ``topic``, checked against the live table; None if absent."""
        cached = self._rows.get(topic)
        if cached is not None:
            t = v.topics[cached[0]]
            if (
                t["used"]
                and int(t["queue_base"]) == cached[1]
                and int(t["read_queues"]) == cached[2]
                and t["name"] == topic.encode()
            ):
                return cached
        slot = v.topic_slot(topic)
        if slot is None:
            return None
        t = v.topics[slot]
        found = (slot, int(t["queue_base"]), int(t["read_queues"]))
        self._rows[topic] = found
        return found

    def read_queue_count(self, topic: str) -> int:
        """The topic's read queues; 0 when the topic does not exist (yet)."""

        def fn(v: StateView) -> int:
            t = self._topic(v, topic)
            return t[2] if t is not None else 0

        return self.reader.read(fn)

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset) of a queue; (0, 0) for a queue that does not exist (yet)."""

        def fn(v: StateView) -> tuple[int, int]:
            t = self._topic(v, topic)
            if t is None or queue_id >= t[2]:
                return 0, 0
            q = v.queues[t[1] + queue_id]
            return int(q["min_offset"]), int(q["max_offset"])

        return self.reader.read(fn)

    def pull_bounds(self, topic: str, queue_id: int) -> tuple[int, int, int]:
        """(perm, min offset, max offset) of a queue in one read: what a pull checks first.
        A topic that does not exist (yet) is readable and empty: (PERM_READ, 0, 0)."""
        words = self._words
        before = words[SEQ_WORD]
        cached = self._bounds.get(topic)
        if cached is not None and not before & 1 and cached[0] == words[META_GEN_WORD] and queue_id >= 0:
            _, perm, base, count = cached
            if queue_id < count:
                i = base + queue_id * QUEUE_WORDS
                lo, hi = self._queue_words[i + MIN_WORD], self._queue_words[i + MAX_WORD]
            else:
                lo = hi = 0
            if words[SEQ_WORD] == before:
                return perm, lo, hi
        bounds, entry = self.reader.read(lambda v: self._read_bounds(v, topic, queue_id))
        self._bounds[topic] = entry  # kept only from a read the seqlock confirmed (never a torn one)
        return bounds

    def _read_bounds(
        self, v: StateView, topic: str, queue_id: int
    ) -> tuple[tuple[int, int, int], tuple[int, int, int, int]]:
        """``pull_bounds`` through the view, inside the seqlock, and the topic's entry for the fast path."""
        t = self._topic(v, topic)
        gen = self._words[META_GEN_WORD]
        if t is None:
            return (PERM_READ, 0, 0), (gen, PERM_READ, 0, 0)
        perm = int(v.topics[t[0]]["perm"])
        entry = (gen, perm, t[1] * QUEUE_WORDS, t[2])
        if queue_id >= t[2]:
            return (perm, 0, 0), entry
        q = v.queues[t[1] + queue_id]
        return (perm, int(q["min_offset"]), int(q["max_offset"])), entry

    def topic_perm(self, topic: str) -> int | None:
        """The topic's perm bits (4 read, 2 write) as the broker published them; None if it does not exist."""

        def fn(v: StateView) -> int | None:
            t = self._topic(v, topic)
            return int(v.topics[t[0]]["perm"]) if t is not None else None

        return self.reader.read(fn)

    def group_members(self, group: str) -> tuple[int, list[int]]:
        """(version, sorted live member client ids) of a group."""

        def fn(v: StateView) -> tuple[int, list[int]]:
            slot = v.group_slot(group)
            if slot is None:
                return -1, []
            return int(v.groups[slot]["version"]), v.group_members(slot)

        return self.reader.read(fn)
