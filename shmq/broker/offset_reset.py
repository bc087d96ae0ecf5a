"""Offset reset: an operator moves a consumer group's offsets of a topic, and running members follow.

Why a frame and not a generation in the state segment: a reset must reach the members that hold
the queues *now*, and they must stop delivering what they cached before it as soon as possible.
A RESET_OFFSET frame on each member's response ring (RocketMQ's RESET_CONSUMER_CLIENT_OFFSET,
code 220, which its broker also pushes to each client) carries the new offsets themselves and
wakes the member's reader thread at once; a generation in the state segment would need a new
column in its group table (a layout change every reader must agree on), then an extra query per
queue, and would be seen only on the next 20 ms rebalance tick.

Why a fence: a member commits what it consumed every second, as COMMIT_OFFSET frames or sync
commits, and some of those were written before the member saw the reset (frames already in its
request ring, a commit between the reset and the member's next pass). Taken after the reset
they would put the old position back: the bug this replaces ("a commit for a running push group
is silently ignored and later overwritten"). So from the reset until the member answers
RESET_OFFSET_ACK (after it dropped its cached state of those queues, on the same request ring as
its commits, hence after every commit of an old position), the broker drops that member's
commits of the reset queues. A member that leaves or dies takes its fences with it; one that
joins later reads the new offsets when it gets the queues.

A POP group (SimpleConsumers) has no member holding queues: its pop state is moved instead
(``pop_reset``: the cursors go to the new offsets, the messages in flight there are dropped).

Only CLUSTERING and POP groups are reset (as in RocketMQ): a BROADCASTING member keeps its own offsets
in its own file on the client's host, which the broker never sees; the command refuses such a
group with an error saying so.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

from shmq.broker.answers import Peer
from shmq.broker.groups import BROADCASTING, POP, ConsumerManager, ConsumerOffsetManager
from shmq.broker.topics import TopicConfigManager
from shmq.codec import frames as P
from shmq.codec.reset_frames import OffsetReset, decode_reset_offset_ack, encode_reset_offset
from shmq.store.message_store import MessageStore

log = logging.getLogger("shmq.broker")

FIRST, LAST = "first", "last"
QueueKey = tuple[str, str, int]  # group, topic, queue id


def new_offsets(
    bounds: dict[int, tuple[int, int]],
    *,
    offset: int | None = None,
    to: str | None = None,
    by_time: Callable[[int], int] | None = None,
) -> dict[int, int]:
    """The offset each queue resumes from: ``to`` "first" (its min offset) or "last" (its max),
    ``offset`` clamped into [min, max], or ``by_time(queue id)`` (the first message stored at or
    after a timestamp) clamped too. ``bounds``: queue id -> (min offset, max offset)."""
    out = {}
    for qid, (lo, hi) in bounds.items():
        if to == FIRST:
            v = lo
        elif to == LAST:
            v = hi
        elif offset is not None:
            v = offset
        elif by_time is not None:
            v = by_time(qid)
        else:
            raise ValueError("give one of timestamp, offset or to")
        out[qid] = min(max(v, lo), hi)
    return out


class OffsetResetService:
    """Resets, and the fences that keep members' older commits from undoing them."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        clients: dict[int, Peer],
        publish: Callable[[str, str, int, int], None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.offsets = offsets
        self.clients = clients
        self._publish = publish
        # reset ids grow across broker restarts too (they start at the wall clock in ns), so an ack a
        # member still owes a previous incarnation can never clear a fence of this one
        self._ids = itertools.count(time.time_ns())
        self._fences: dict[int, dict[QueueKey, int]] = {}  # client id -> queue -> id of the reset to ack
        # moves a POP group's pop state to the new offsets (set by the core on a master)
        self.pop_reset: Callable[[str, str, dict[int, int]], None] | None = None

    def reset(
        self, group: str, topic: str, *, timestamp: int | None = None, offset: int | None = None, to: str | None = None
    ) -> dict[str, object]:
        """Commit and publish the new offsets of every queue of ``topic`` for ``group``, persist
        them, and send RESET_OFFSET to every live member. ValueError: an unknown topic or group,
        a broadcasting group, or not exactly one of ``timestamp``, ``offset`` and ``to``."""
        if sum(v is not None for v in (timestamp, offset, to)) != 1:
            raise ValueError("give exactly one of timestamp, offset or to")
        if to is not None and to not in (FIRST, LAST):
            raise ValueError(f"to must be {FIRST!r} or {LAST!r}, got {to!r:.40}")
        tc = self.topics.get(topic)
        if tc is None:
            raise ValueError(f"topic {topic!r} does not exist")
        g = self.consumers.groups.get(group)
        if g is not None and g.model == BROADCASTING:
            raise ValueError(
                f"group {group!r} is BROADCASTING: each member keeps its offsets in its own file "
                f"(LocalFileOffsetStore) on its host; stop the members and edit or remove those "
                f"files instead (RocketMQ resets clustering groups only)"
            )
        if (g is None or not g.members) and not any(k[0] == group for k in self.offsets.offsets):
            raise ValueError(f"consumer group {group!r} is unknown: no live member and no committed offset")
        queues = range(max(tc.read_queue_nums, tc.write_queue_nums))
        bounds = {
            q: (self.store.get_min_offset_in_queue(topic, q), self.store.get_max_offset_in_queue(topic, q))
            for q in queues
        }
        by_time = None if timestamp is None else (lambda q: self.store.get_offset_in_queue_by_time(topic, q, timestamp))
        targets = new_offsets(bounds, offset=offset, to=to, by_time=by_time)
        for q, v in targets.items():
            self.offsets.commit(group, topic, q, v)
            self._publish(group, topic, q, v)
        try:
            self.offsets.persist()  # an operator's act: not lost with the next 5 s if the broker dies
        except OSError as e:  # kept in memory and published: the next persist interval tries again
            log.error("writing consumerOffset.json after an offset reset failed: %s", e)
        if g is not None and g.model == POP and self.pop_reset is not None:
            self.pop_reset(group, topic, targets)
            told: list[int] = []
        else:
            told = self._tell_members(group, topic, targets, [] if g is None else sorted(g.members))
        log.info("offset reset: group %r topic %r to %s; %d live member(s) told", group, topic, targets, len(told))
        return {"offsets": {str(q): v for q, v in targets.items()}, "members": told}

    def _tell_members(self, group: str, topic: str, targets: dict[int, int], members: list[int]) -> list[int]:
        reset_id = next(self._ids)
        payload = encode_reset_offset(OffsetReset(reset_id, group, topic, targets))
        told = []
        for cid in members:
            peer = self.clients.get(cid)
            if peer is None or not peer.alive:
                continue
            fences = self._fences.setdefault(cid, {})
            for q in targets:
                fences[(group, topic, q)] = reset_id
            peer.out.append((P.RESET_OFFSET, payload))
            told.append(cid)
        return told

    def allows(self, client_id: int, group: str, topic: str, queue_id: int) -> bool:
        """Whether a member's commit counts: not while a reset of that queue waits for its ack."""
        fences = self._fences.get(client_id)
        return fences is None or (group, topic, queue_id) not in fences

    def acked(self, client_id: int, reset_id: int) -> None:
        """The member applied reset ``reset_id`` (and every earlier one): its commits count again."""
        fences = self._fences.get(client_id)
        if fences is None:
            return
        for key in [k for k, rid in fences.items() if rid <= reset_id]:
            del fences[key]
        if not fences:
            del self._fences[client_id]

    def handle_ack(self, peer: Peer, view: memoryview, now: int) -> None:
        """RESET_OFFSET_ACK from a consumer's request ring."""
        self.acked(peer.client_id, decode_reset_offset_ack(view))

    def forget(self, client_id: int) -> None:
        """A client detached or died: its fences go with it."""
        self._fences.pop(client_id, None)
