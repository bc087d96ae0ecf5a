"""RebalanceImpl: which queues one member of a consumer group owns, recomputed when that can change.

Kept apart from the puller so that the computation every member must run identically (sorted
queues and members in, the allocate strategy's share out) has one home, next to the rule that
makes a new owner wait: a queue another live member owned under the previous membership is being
handed over, and its previous owner's final commit is still on the way. The consumer applies an
``Assignment`` (drops and adds process queues) and then calls ``done``; an assignment that
fails to apply is computed again on the next check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from shmq.client.broker_state import BrokerState
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.rebalance import AllocateStrategy
from shmq.model.consumer_types import MessageModel
from shmq.model.message import MessageQueue
from shmq.model.perm import PERM_READ

HANDOFF_GRACE_S = 0.3  # a new owner waits this long for a live previous owner's final commit


@dataclass(frozen=True, slots=True)
class Assignment:
    """A member's queues after a change of members, queue counts or perms."""

    key: tuple[object, ...]  # what it was computed from
    seen: tuple[object, ...]  # (state, its meta_gen before reading, topics, me): equal next time = nothing changed
    members: list[int]
    mine: set[MessageQueue]
    added: list[MessageQueue]  # mine and not owned before, sorted
    handed_over: set[MessageQueue]  # of ``added``: another live member owned them before


class RebalanceImpl:
    def __init__(
        self,
        group: str,
        broker_name: str,
        model: MessageModel,
        allocate: AllocateStrategy[MessageQueue, int],
        log: logging.Logger,
    ) -> None:
        """``log``: the consumer's logger, whose name users filter the consumer's records by."""
        self.group = group
        self.broker_name = broker_name
        self.model = model
        self.allocate = allocate
        self._log = log
        self._key: tuple[object, ...] | None = None
        self._members: list[int] | None = None
        self._seen: tuple[object, ...] | None = None  # ``Assignment.seen`` of the last applied (or unchanged) check

    def reset(self) -> None:
        """A new session: compute again on the next check (client ids are new after a broker restart)."""
        self._key = None
        self._members = None
        self._seen = None

    def check(self, state: BrokerState, topics: list[str], me: int, owned: Iterable[MessageQueue]) -> Assignment | None:
        """The queues of member ``me`` (client id) if members, queue counts or perms of the sorted
        ``topics`` changed since the last ``done``; None if not, or if our join is not published yet.

        Every 20 ms in the puller with the GIL held: when the broker's ``meta_gen`` (raised by every
        change of topic rows, groups or members) is what the last applied check read first, for the
        same topics and client id, nothing it reads can differ, and that one load answers (was ~25 us
        quiet, ~200 us under GIL contention, holding up a message that arrived meanwhile)."""
        seen = (state, state.meta_gen(), topics, me)  # a new session's state starts its own count
        if seen == self._seen:
            return None
        perms = tuple(state.topic_perm(t) for t in topics)
        blocked = [t for t, perm in zip(topics, perms) if perm is not None and not perm & PERM_READ]
        # a topic without the read bit has no queues for us (its files are there, but reading is forbidden)
        counts = tuple(0 if t in blocked else state.read_queue_count(t) for t in topics)
        clustering = self.model is MessageModel.CLUSTERING
        if clustering:
            version, members = state.group_members(self.group)
            key: tuple[object, ...] = (version, counts, perms)
        else:
            key = (counts, perms)
            members = []
        if key == self._key:
            self._seen = seen  # as applied: the same answer until the broker changes something
            return None
        if blocked:
            self._log.warning(
                "consumer %r: topic(s) %s not readable (perm without the read bit 4): skipped until "
                "their perm allows reading",
                self.group,
                ", ".join(blocked),
            )
        if clustering and me not in members:
            return None  # our join is not published yet
        queues = {t: [MessageQueue(t, self.broker_name, q) for q in range(n)] for t, n in zip(topics, counts)}
        mine: set[MessageQueue] = set()
        for t in topics:
            mine.update(self.allocate(queues[t], members, me) if clustering else queues[t])
        previous = self._members if self._members is not None else [m for m in members if m != me]
        added = sorted(mine - set(owned))
        handed_over = {
            mq for mq in added if clustering and self._handed_over(queues[mq.topic], previous, mq, members, me)
        }
        return Assignment(key, seen, members, mine, added, handed_over)

    def apply(
        self,
        assignment: Assignment,
        pqs: dict[MessageQueue, ProcessQueue],
        drop: Callable[[ProcessQueue], None],
        me: int,
    ) -> None:
        """Bring a consumer's process queues to ``assignment``: queues no longer mine go to
        ``drop`` (the consumer's way of giving one away), new ones start unread, those another
        live member hands over after a grace for its final commit."""
        for mq in [mq for mq in pqs if mq not in assignment.mine]:
            drop(pqs.pop(mq))
        now = time.monotonic()
        for mq in assignment.added:
            pq = pqs[mq] = ProcessQueue(mq, -1)
            if mq in assignment.handed_over:
                pq.ready_at = now + HANDOFF_GRACE_S
        self._log.info(
            "consumer %r (client %d) rebalanced: %d member(s), %d queue(s) mine",
            self.group,
            me,
            len(assignment.members),
            len(pqs),
        )
        self.done(assignment)

    def done(self, assignment: Assignment) -> None:
        """``assignment`` is applied: the next check compares with it."""
        self._key = assignment.key
        self._seen = assignment.seen
        self._members = assignment.members

    def _handed_over(
        self, queues: Sequence[MessageQueue], previous: list[int], mq: MessageQueue, members: list[int], me: int
    ) -> bool:
        """Whether another live member owned ``mq`` under the previous members (it is handing it over)."""
        return any(m != me and m in members and mq in self.allocate(queues, previous, m) for m in previous)
