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
from typing import Protocol

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
    queues: dict[str, list[MessageQueue]]  # topic -> the queues it was computed over
    mine: set[MessageQueue]
    added: list[MessageQueue]  # mine and not owned before, sorted
    handed_over: set[MessageQueue]  # of ``added``: another live member owned them before


@dataclass(frozen=True, slots=True)
class GroupShape:
    """What an allocation is computed from: every queue of the topics and the group's members."""

    key: tuple[object, ...]  # equal to the last one applied: the allocation cannot differ
    queues: dict[str, list[MessageQueue]]  # topic -> its readable queues, sorted (broker name, queue id)
    members: list[int]  # sorted client ids ([] broadcasting)
    blocked: list[str]  # topics skipped: their perm lacks the read bit


class GroupScope(Protocol):
    """Where a member's group spans more than its own broker (a cluster): the queues of every
    broker and the members seen on any of them, one shape for all of this member's brokers."""

    def seen(self, topics: list[str]) -> tuple[object, ...]:
        """A cheap token: equal to an earlier one means ``shape`` would answer the same."""
        ...

    def shape(self, group: str, topics: list[str]) -> GroupShape: ...


def local_shape(state: BrokerState, broker_name: str, group: str, topics: list[str], clustering: bool) -> GroupShape:
    """The shape of a group on one broker, read from its state segment."""
    perms = tuple(state.topic_perm(t) for t in topics)
    blocked = [t for t, perm in zip(topics, perms) if perm is not None and not perm & PERM_READ]
    # a topic without the read bit has no queues for us (its files are there, but reading is forbidden)
    counts = tuple(0 if t in blocked else state.read_queue_count(t) for t in topics)
    queues = {t: [MessageQueue(t, broker_name, q) for q in range(n)] for t, n in zip(topics, counts)}
    if not clustering:
        return GroupShape((counts, perms), queues, [], blocked)
    version, members = state.group_members(group)
    return GroupShape((version, counts, perms), queues, members, blocked)


class RebalanceImpl:
    def __init__(
        self,
        group: str,
        broker_name: str,
        model: MessageModel,
        allocate: AllocateStrategy[MessageQueue, int],
        log: logging.Logger,
        scope: GroupScope | None = None,
    ) -> None:
        """``log``: the consumer's logger, whose name users filter the consumer's records by.
        ``scope``: a clustering group spread over several brokers; this member's share is computed
        over all their queues, and this RebalanceImpl keeps the part on ``broker_name``."""
        self.group = group
        self.broker_name = broker_name
        self.model = model
        self.allocate = allocate
        self._log = log
        self._scope = scope if model is MessageModel.CLUSTERING else None
        self._key: tuple[object, ...] | None = None
        self._members: list[int] | None = None
        self._queues: dict[str, list[MessageQueue]] = {}  # the queue lists of the last applied assignment
        self._seen: tuple[object, ...] | None = None  # ``Assignment.seen`` of the last applied (or unchanged) check

    def reset(self) -> None:
        """A new session: compute again on the next check (client ids are new after a broker restart)."""
        self._key = None
        self._members = None
        self._queues = {}
        self._seen = None

    def check(self, state: BrokerState, topics: list[str], me: int, owned: Iterable[MessageQueue]) -> Assignment | None:
        """The queues of member ``me`` (client id) if members, queue counts or perms of the sorted
        ``topics`` changed since the last ``done``; None if not, or if our join is not published yet.

        Every 20 ms in the puller with the GIL held: when the broker's ``meta_gen`` (raised by every
        change of topic rows, groups or members) is what the last applied check read first, for the
        same topics and client id, nothing it reads can differ, and that one load answers (was ~25 us
        quiet, ~200 us under GIL contention, holding up a message that arrived meanwhile)."""
        scope = self._scope
        # a new session's state starts its own count
        seen = (state, state.meta_gen(), topics, me) if scope is None else (state, scope.seen(topics), me)
        if seen == self._seen:
            return None
        clustering = self.model is MessageModel.CLUSTERING
        if scope is None:
            shape = local_shape(state, self.broker_name, self.group, topics, clustering)
        else:
            shape = scope.shape(self.group, topics)
        key, queues, members, blocked = shape.key, shape.queues, shape.members, shape.blocked
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
        mine: set[MessageQueue] = set()
        for t in topics:  # over a cluster's queues: keep this broker's
            share = self.allocate(queues[t], members, me) if clustering else queues[t]
            mine.update(mq for mq in share if mq.broker_name == self.broker_name)
        previous = self._members if self._members is not None else [m for m in members if m != me]
        added = sorted(mine - set(owned))
        # who owned a queue before: the previous members over the previous queue list (a queue
        # list changes too: in a cluster, a broker leaving moves the others' queues between members)
        handed_over = {
            mq
            for mq in added
            if clustering and self._handed_over(self._queues.get(mq.topic, queues[mq.topic]), previous, mq, members, me)
        }
        return Assignment(key, seen, members, queues, mine, added, handed_over)

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
        self._queues = assignment.queues

    def _handed_over(
        self, queues: Sequence[MessageQueue], previous: list[int], mq: MessageQueue, members: list[int], me: int
    ) -> bool:
        """Whether another live member owned ``mq`` under the previous members (it is handing it over)."""
        return any(m != me and m in members and mq in self.allocate(queues, previous, m) for m in previous)
