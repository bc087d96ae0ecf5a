"""The steps around a pull pass that a group member's puller thread (PushConsumer, LitePullConsumer) shares.

Both threads loop: get the live session (waiting for the broker while there is none), run a
pass, and after a failed pass log it and wait before the next. The pass itself, where the
thread sleeps between passes and the lock the lite consumer shares with its caller stay in
each consumer; the steps here were the same lines in both. Messages go to the consumer's own
logger (``log``), so they read as they did.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from contextlib import AbstractContextManager
from typing import Protocol

from shmq.client.connection import Session, report_lost
from shmq.client.consumer.rejoin import GroupMember
from shmq.errors import BrokerGoneError, ShmqError

REBALANCE_POLL_S = 0.02  # the longest a puller sleeps between passes (and how often it checks the group)
RECONNECT_WAIT_S = 0.5  # how long one attempt to reach a broker that is not there waits


class Puller(GroupMember, Protocol):
    broker_name: str
    _running: bool

    @property
    def _wakeup(self) -> threading.Event: ...  # read-only here: a subclass of Event will do

    def _bind(self, deadline: float) -> Session: ...


def wait_for_session(
    c: Puller, log: logging.Logger, lock: AbstractContextManager[object] | None = None
) -> Session | None:
    """The live session (bound under ``lock``); None after waiting ``RECONNECT_WAIT_S`` for a
    broker that is gone or refuses, said once until a session is bound again."""
    try:
        with lock if lock is not None else contextlib.nullcontext():
            return c._bind(time.monotonic() + RECONNECT_WAIT_S)
    except (BrokerGoneError, ShmqError) as e:
        if not c._broker_wait_logged:
            log.warning("consumer %r waits for broker %r: %s", c.group, c.broker_name, e)
            c._broker_wait_logged = True
        c._wakeup.wait(RECONNECT_WAIT_S)
        return None


def broker_lost(c: Puller) -> None:
    """The broker went away (its loss is reported once, by ``report_lost``): waiting for it to
    come back is no news to say again."""
    c._broker_wait_logged = True


def pass_failed(c: Puller, e: Exception, session: Session, log: logging.Logger) -> None:
    """``e`` ended a pass (call it in the ``except``, for the traceback): the broker going away
    is reported once per broker (``report_lost``), its refusal is a warning while running;
    anything else is logged with its traceback unless the session died under the pass (it
    unmapped what the pass was reading: not a fault, the next bind attaches again). Then wait a
    poll interval, but for a broker error after ``shutdown``."""
    if isinstance(e, (BrokerGoneError, ShmqError, OSError)):
        if not c._running:
            return
        if isinstance(e, BrokerGoneError):
            report_lost(session, str(e))
            broker_lost(c)
        else:
            log.warning("consumer %r: %s", c.group, e)
    elif session.alive:
        log.exception("consumer %r puller failed; going on", c.group)  # noqa: LOG004 - called from an except block
    c._wakeup.wait(REBALANCE_POLL_S)


def rebalance_if_changed(c: GroupMember, me: int) -> None:
    """Apply this member's (client id ``me``) new queues if members, queue counts or perms changed."""
    change = c._rebalance.check(c._wrapper.views()[0], sorted(c._subscriptions), me, c._pqs)
    if change is None:
        return
    c._rebalance.apply(change, c._pqs, c._drop, me)
