"""What a group member (PushConsumer, LitePullConsumer) does when its session changes.

On start, after a broker restart or after new subscriptions the member joins its group again,
forgets the long polls of the old session, applies a reset that arrived just before the
restart, gives a restarted broker back the commits it lost, drops the queues of topics it no
longer subscribes to, and starts its rebalance afresh. One function for both consumers, so the
order of those steps (a reset before the re-commit, or the re-commit would undo it) has one home.
"""

from __future__ import annotations

from typing import Any, Protocol

from shmq.client.connection import Session
from shmq.client.consumer.offset_reset import ResetInbox
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.pull_wrapper import PullAPIWrapper
from shmq.client.consumer.queue_offsets import QueueOffsets
from shmq.client.consumer.rebalance_impl import RebalanceImpl
from shmq.filter.tags import subscription_arg
from shmq.model.consumer_types import MessageModel
from shmq.model.message import MessageQueue


class GroupMember(Protocol):
    group: str
    start_timeout: float
    _wrapper: PullAPIWrapper
    _session: Session | None
    _subscriptions: dict[str, Any]
    _pqs: dict[MessageQueue, ProcessQueue]
    _resets: ResetInbox
    _offsets: QueueOffsets
    _rebalance: RebalanceImpl
    _broker_wait_logged: bool

    def _restart(self, pq: ProcessQueue, offset: int) -> None: ...

    def _drop(self, pq: ProcessQueue) -> Any: ...


def rejoin(c: GroupMember, deadline: float, model: MessageModel, resets_on_start: bool, recommit: bool) -> Session:
    """The live session; on a new one, join the group again (see the module docstring).
    ``resets_on_start``: apply pending resets also on the first session (not only after a restart);
    ``recommit``: hand the member's offsets to a restarted broker."""
    s = c._wrapper.bind(deadline)
    if s is c._session:
        return s
    subs = {t: subscription_arg(e) for t, e in c._subscriptions.items()}
    s.admin("join_group", {"group": c.group, "model": model.value, "subscriptions": subs}, c.start_timeout)
    for pq in c._pqs.values():
        pq.wait_req = None
    restarted = c._session is not None
    if resets_on_start or (restarted and model is MessageModel.CLUSTERING):
        c._resets.apply(c._pqs, c._restart)  # one that came just before a restart, first
    if restarted and recommit:
        # a restarted broker lost the commits since its last persist: give it ours again
        c._offsets.commit([pq for pq in c._pqs.values() if pq.next_offset >= 0], sync=True, force=True)
    for mq in [mq for mq in c._pqs if mq.topic not in c._subscriptions]:
        c._drop(c._pqs.pop(mq))
    c._session = s
    c._rebalance.reset()
    c._broker_wait_logged = False
    return s
