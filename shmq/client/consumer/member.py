"""MQConsumerInner: what a member of a consumer group (PushConsumer, LitePullConsumer) is.

RocketMQ's push and lite pull consumers both implement ``MQConsumerInner`` over the same parts
(a RebalanceImpl, an offset store, process queues, the pull API); here that common part is
one base class. It holds the connection to one broker and the session bound on it, the
subscriptions, the rebalance, the offsets and process queues, and the steps of the puller
thread around a pass: get the live session (waiting for a broker that is gone, said once),
join the group again on a new session (start, broker restart, new subscriptions), rebalance
when members or queues changed, report a failed pass, and the order of a shutdown. The pass
itself, where the thread sleeps between passes and what a dropped queue means stay in the
subclass (a listener and its consume service, or a buffer that ``poll`` empties).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

from shmq.client import exit_close
from shmq.client.connection import BrokerConnection, Session, report_lost
from shmq.client.consumer.offset_reset import ResetInbox
from shmq.client.consumer.process_queue import ProcessQueue
from shmq.client.consumer.pull import CONSUMER_RING_BYTES
from shmq.client.consumer.pull_wrapper import PullAPIWrapper
from shmq.client.consumer.queue_offsets import QueueOffsets
from shmq.client.consumer.rebalance_impl import GroupScope, RebalanceImpl
from shmq.errors import BrokerGoneError, ShmqError
from shmq.filter.tags import Subscription, subscription_arg
from shmq.model.consumer_types import MessageModel
from shmq.model.message import MessageQueue

REBALANCE_POLL_S = 0.02  # the longest a puller sleeps between passes (and how often it checks the group)
RECONNECT_WAIT_S = 0.5  # how long one attempt to reach a broker that is not there waits


class MQConsumerInner(ABC):
    """One group member on one broker; subclasses set ``_offsets`` and ``_rebalance`` before binding.

    ``log`` is the subclass's logger: its records read as the consumer's. ``_pass_lock`` is
    what the puller holds around binding and its pass (the lite consumer shares it with its
    caller; the push consumer needs none)."""

    model: MessageModel = MessageModel.CLUSTERING
    _offsets: QueueOffsets
    _rebalance: RebalanceImpl

    def __init__(
        self,
        group: str,
        broker: str | None,
        start_timeout: float,
        log: logging.Logger,
        replica: str | None = None,
    ) -> None:
        self.group = group
        self.start_timeout = start_timeout
        self._log = log
        self._conn = BrokerConnection(
            broker,
            "consumer",
            group,
            CONSUMER_RING_BYTES,
            self._on_response,
            on_lost=self._on_lost,
            replica=replica,
        )
        self.broker_name = self._conn.broker_name
        self._wrapper = PullAPIWrapper(self._conn)
        self._subscriptions: dict[str, Subscription] = {}
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._wakeup = self._new_wakeup()
        self._resets = ResetInbox(self._conn, group, self._wakeup)
        self._pass_lock: AbstractContextManager[object] = contextlib.nullcontext()
        self._session: Session | None = None
        self._running = False
        self._thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._broker_wait_logged = False
        self._scope: GroupScope | None = None

    def join_cluster(self, client_id: int, scope: GroupScope | None) -> None:
        """Make this the part on one broker of a member of a cluster's group (before ``start``):
        attach as ``client_id`` (the member's one id on every broker) and, clustering, take this
        broker's share of an allocation over the whole ``scope``."""
        self._conn.client_id = client_id
        self._scope = scope

    # ------------------------------------------------------------------ what subclasses decide

    def _new_wakeup(self) -> threading.Event:
        """The event the puller waits on between passes (WAKE, room made, shutdown, a reset)."""
        return threading.Event()

    def _on_response(self, kind: int, view: memoryview) -> None:
        """A response frame of this member's channel (the connection's reader thread)."""
        if not self._resets.on_response(kind, view):
            self._wrapper.on_response(kind, view)

    @abstractmethod
    def _restart(self, pq: ProcessQueue, offset: int) -> None:
        """An operator reset ``pq``'s queue to ``offset`` (already committed by the broker)."""

    @abstractmethod
    def _drop(self, pq: ProcessQueue) -> None:
        """Give a queue away (a rebalance, or a subscription ended)."""

    def _resets_on_start(self) -> bool:
        """Apply pending offset resets also on the first session, not only after a restart."""
        return False

    def _recommit(self) -> bool:
        """Hand this member's offsets to a restarted broker (it lost the commits since its last persist)."""
        return self.model is MessageModel.CLUSTERING

    # ------------------------------------------------------------------ the session

    def _bind(self, deadline: float) -> Session:
        """The live session; on a new one (start, broker restart, new subscriptions) join the group
        again, forget the long polls of the old session, apply a reset that arrived just before the
        restart (before the re-commit, or the re-commit would undo it), give a restarted broker back
        the commits it lost, drop the queues of topics no longer subscribed, and rebalance afresh."""
        s = self._wrapper.bind(deadline)
        if s is self._session:
            return s
        subs = {t: subscription_arg(e) for t, e in self._subscriptions.items()}
        s.admin(
            "join_group", {"group": self.group, "model": self.model.value, "subscriptions": subs}, self.start_timeout
        )
        for pq in self._pqs.values():
            pq.wait_req = None
        restarted = self._session is not None
        if self._resets_on_start() or (restarted and self.model is MessageModel.CLUSTERING):
            self._resets.apply(self._pqs, self._restart)
        if restarted and self._recommit():
            self._offsets.commit([pq for pq in self._pqs.values() if pq.next_offset >= 0], sync=True, force=True)
        for mq in [mq for mq in self._pqs if mq.topic not in self._subscriptions]:
            self._drop(self._pqs.pop(mq))
        self._session = s
        self._rebalance.reset()
        self._broker_wait_logged = False
        return s

    @abstractmethod
    def start(self) -> MQConsumerInner:
        """Attach, join the group and start the puller."""

    def _start_session(self) -> None:
        """Attach and bind (``BrokerNotFoundError`` within ``start_timeout``); detach again on failure."""
        self._conn.start(self.start_timeout)
        try:
            with self._pass_lock:
                self._bind(time.monotonic() + self.start_timeout)
        except BaseException:
            self._conn.shutdown()
            raise

    def _start_puller(self, name: str, threads: int = 1) -> None:
        """Start ``threads`` threads running ``_run`` (a push consumer's two take turns pulling)."""
        self._running = True
        self._threads = [threading.Thread(target=self._run, name=name, daemon=True) for _ in range(threads)]
        self._thread = self._threads[0]
        for t in self._threads:
            t.start()
        exit_close.track(self)

    # ------------------------------------------------------------------ the puller thread's steps

    @abstractmethod
    def _run(self) -> None:
        """The puller thread: passes until ``shutdown``."""

    def _wait_for_session(self) -> Session | None:
        """The live session (bound under ``_pass_lock``); None after waiting ``RECONNECT_WAIT_S`` for
        a broker that is gone or refuses, said once until a session is bound again."""
        try:
            with self._pass_lock:
                return self._bind(time.monotonic() + RECONNECT_WAIT_S)
        except (BrokerGoneError, ShmqError) as e:
            if not self._broker_wait_logged:
                self._log.warning("consumer %r waits for broker %r: %s", self.group, self.broker_name, e)
                self._broker_wait_logged = True
            self._wakeup.wait(RECONNECT_WAIT_S)
            return None

    def _on_lost(self, _session: Session, _why: str) -> None:
        """The broker went away (its loss is reported once, by ``report_lost``): waiting for it to
        come back is no news to say again; every long poll looks again and finds the session gone."""
        self._broker_wait_logged = True
        self._wrapper.wake_all()
        self._wakeup.set()

    def _pass_failed(self, e: Exception, session: Session) -> None:
        """``e`` ended a pass (call it in the ``except``, for the traceback): the broker going away
        is reported once per broker (``report_lost``), its refusal is a warning while running;
        anything else is logged with its traceback unless the session died under the pass (it
        unmapped what the pass was reading: not a fault, the next bind attaches again). Then wait a
        poll interval, but for a broker error after ``shutdown``."""
        if isinstance(e, (BrokerGoneError, ShmqError, OSError)):
            if not self._running:
                return
            if isinstance(e, BrokerGoneError):
                report_lost(session, str(e))
                self._broker_wait_logged = True
            else:
                self._log.warning("consumer %r: %s", self.group, e)
        elif session.alive:
            self._log.exception("consumer %r puller failed; going on", self.group)
        self._wakeup.wait(REBALANCE_POLL_S)

    def _rebalance_if_changed(self, me: int) -> None:
        """Apply this member's (client id ``me``) new queues if members, queue counts or perms changed."""
        change = self._rebalance.check(self._wrapper.views()[0], sorted(self._subscriptions), me, self._pqs)
        if change is not None:
            self._rebalance.apply(change, self._pqs, self._drop, me)

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Stop the puller, settle the queues, commit, leave the group and detach, in that order."""
        if not self._running:
            return
        exit_close.untrack(self)
        self._running = False
        self._wakeup.set()
        self._stopping()
        deadline = time.monotonic() + 5.0
        for t in self._pullers_to_join():
            t.join(max(0.0, deadline - time.monotonic()))
        self._settle()
        with self._pass_lock:
            try:
                self._commit_at_shutdown()
            except (ShmqError, OSError) as e:
                self._log.warning("could not commit offsets at shutdown: %s", e)
            self._pqs.clear()
        self._release()
        self._conn.shutdown()
        self._wrapper.wake_all()
        self._wrapper.close()
        self._closed()

    def _pullers_to_join(self) -> list[threading.Thread]:
        """The puller threads ``shutdown`` waits for (at most 5 s in all)."""
        return self._threads

    def _stopping(self) -> None:  # noqa: B027 - a hook subclasses may leave out
        """Wake whatever waits for the puller (before it is joined)."""

    def _settle(self) -> None:  # noqa: B027 - a hook subclasses may leave out
        """After the puller stopped, before the final commit: let the work on hand finish."""

    @abstractmethod
    def _commit_at_shutdown(self) -> None:
        """The last commit, after the puller stopped (under ``_pass_lock``)."""

    def _release(self) -> None:  # noqa: B027 - a hook subclasses may leave out
        """What the subclass runs besides the puller, stopped before the connection closes."""

    def _closed(self) -> None:  # noqa: B027 - a hook subclasses may leave out
        """After the connection closed."""
