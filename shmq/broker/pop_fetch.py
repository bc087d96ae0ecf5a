"""Which messages a POP takes (the heart of RocketMQ's PopMessageProcessor): the member's
subscribed topics' queues and its group's retry topic, starting at the next queue each time (so
concurrent workers spread out), up to the number asked for.

In a queue the group reads from its cursor; a new group starts at its committed offset, else at
the queue's min offset (a worker pool sees the jobs sent before it started). Filters are the
broker's: the tag hash of the consume-queue entry, then the tag string of the record (hashes
collide), or an SQL92 expression on the record's properties; a message that does not match is
passed over (its offset counts as settled, as RocketMQ acks it at once). A FIFO pop (the
consumer's ``fifo=True``, or any pop of a topic created with ``order=True``) takes a queue only
while the group has nothing in flight there, or hands its rows out again in place once all of
them are past their deadline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shmq.broker.pop_state import PopState, QueueKey, QueueState, Row
from shmq.codec import pop_frames as F
from shmq.codec import record as fmt
from shmq.filter.sql import SqlFilter
from shmq.filter.tags import TagFilter
from shmq.model import system_topics as st
from shmq.store.consume_queue import BLANK_SIZE

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore

SCAN_PER_QUEUE = 4096  # consume-queue entries one POP looks at in one queue (filters pass over the rest later)
_FILTER_CACHE = 1024


Handed = dict[QueueKey, list[tuple[int, Row]]]  # per queue visited: (offset, row) put in flight, in order


Filter = TagFilter | SqlFilter


def _takes_all(flt: Filter) -> bool:
    """A filter that takes every message (no record read)."""
    return isinstance(flt, TagFilter) and flt.is_all


class PopFetcher:
    def __init__(self, core: BrokerCore, state: PopState) -> None:
        self.core = core
        self.state = state
        self._filters: dict[str, Filter] = {}

    def pop(self, pop: F.Pop, client: int, subs: dict[str, str | dict[str, str]], want: int, now_ms: int) -> Handed:
        """Hand out up to ``want`` messages; returns, per queue whose state changed, the rows put
        in flight with their offsets, in the order handed out (empty when only the cursor moved).
        BadExpressionError, before anything is handed out, for a subscription the broker cannot
        filter by."""
        filters = {topic: self._filter(e) for topic, e in subs.items()}
        fifo = bool(pop.flags & F.FLAG_FIFO)
        ordered = self._ordered(subs)  # topics created with order=True: FIFO for every group
        queues = self._queues(pop.group, subs, fifo)
        moved: Handed = {}
        if not queues:
            return moved
        got = 0
        start = self.state.start_index(pop.group, len(queues))
        for i in range(len(queues)):
            if got >= want:
                break
            topic, qid = queues[(start + i) % len(queues)]
            cq = self.core.store.find_consume_queue(topic, qid)
            if cq is None:
                continue
            key = (pop.group, topic, qid)
            qs = self.state.queues.get(key)
            if qs is None:
                committed = self.core.offsets.query(*key)
                qs = self.state.queue(key, committed if committed >= 0 else cq.min_offset)
            held = fifo or topic in ordered
            if held:
                ready = qs.fifo_ready(now_ms)
                if ready is None:
                    continue
                if ready:
                    moved[key] = self._again(key, qs, ready[: want - got], client, pop, now_ms)
                    got += len(moved[key])
                    continue
            retry = st.is_retry_topic(topic)
            flt = self._filter("*") if retry else filters[topic]
            every = _takes_all(flt)
            first = max(qs.cursor, cq.min_offset)
            need = want - got  # "*" takes every entry but blanks: no need to look further
            entries = cq.get_range(first, need if every else max(need, SCAN_PER_QUEUE))
            if len(entries) == 0:
                continue
            taken: list[tuple[int, Row]] = []
            k = 0
            deadline = now_ms + pop.invisible_ms
            take, max_attempts = self.state.take_token, pop.max_attempts
            for k, (phys, size, code) in enumerate(entries.tolist(), 1):
                if size == BLANK_SIZE or not (every or self._match(flt, phys, size, code)):
                    continue
                attempt = self._attempt(phys, size) if retry else 1
                taken.append((first + k - 1, Row(take(), deadline, attempt, max_attempts, client, phys, size, held)))
                if got + len(taken) >= want:
                    break
            self.state.hand_out_new(key, taken, client)
            got += len(taken)
            qs.cursor = first + k
            moved[key] = taken
        return moved

    def _again(
        self, key: QueueKey, qs: QueueState, offsets: list[int], client: int, pop: F.Pop, now_ms: int
    ) -> list[tuple[int, Row]]:
        """FIFO: hand the queue's rows out again in place, in order, with attempt + 1."""
        out = []
        for offset in offsets:
            old = qs.rows[offset]
            row = Row(
                self.state.take_token(),
                now_ms + pop.invisible_ms,
                old.attempt + 1,
                pop.max_attempts,
                client,
                old.phys,
                old.size,
                True,
            )
            self.state.hand_out(key, offset, row)
            out.append((offset, row))
        return out

    def _ordered(self, subs: dict[str, str | dict[str, str]]) -> set[str]:
        """The subscribed topics created with ``order=True``."""
        topics = self.core.topics
        return {t for t in subs if (tc := topics.get(t)) is not None and tc.order}

    def _queues(self, group: str, subs: dict[str, str | dict[str, str]], fifo: bool) -> list[tuple[str, int]]:
        """Every readable queue of the subscribed topics, then the group's retry queue (not for
        FIFO groups: they redeliver in place)."""
        out = []
        for topic in subs:
            tc = self.core.topics.get(topic)
            if tc is not None:
                out += [(topic, q) for q in range(tc.read_queue_nums)]
        if not fifo:
            out.append((st.retry_topic(group), 0))
        return out

    def _filter(self, expression: str | dict[str, str]) -> Filter:
        text = expression if isinstance(expression, str) else "SQL92:" + expression.get("expression", "")
        flt = self._filters.get(text)
        if flt is None:
            if len(self._filters) >= _FILTER_CACHE:
                self._filters.clear()
            flt = TagFilter(expression) if isinstance(expression, str) else SqlFilter(expression.get("expression", ""))
            self._filters[text] = flt
        return flt

    def _match(self, flt: Filter, phys: int, size: int, code: int) -> bool:
        """The tag hash first (no record read), then the exact check on the record's properties."""
        if isinstance(flt, TagFilter):
            if flt.is_all:
                return True
            if not flt.matches_codes(np.array([code], np.int64))[0]:
                return False
        raw = self.core.store.commitlog.data(phys, size)
        return raw is not None and flt.match(fmt.decode_record(raw).properties)

    def _attempt(self, phys: int, size: int) -> int:
        """The delivery attempt of a message of the retry topic: its revives + 1."""
        raw = self.core.store.commitlog.data(phys, size)
        if raw is None:
            return 1
        return int.from_bytes(raw[fmt.OFF_RECONSUMETIMES : fmt.OFF_RECONSUMETIMES + 4], "big") + 1
