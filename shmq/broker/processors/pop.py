"""POP, ACK and CHANGE_INVISIBLE (RocketMQ 5's PopMessageProcessor, AckMessageProcessor and
ChangeInvisibleTimeProcessor): the broker hands a POP member messages of its subscriptions and
of its group's retry topic, each invisible to the rest of the group until it is acked or its
invisible time is over (then ``shmq.broker.pop_revive`` brings it back).

Which messages a POP takes is ``shmq.broker.pop_fetch``'s job; this module checks the frames,
writes what changed to the pop log before answering (``shmq.broker.pop_store``: an ack is
durable before the consumer hears it is done), commits each queue's low watermark as the
group's offset (so progress, lag and cleanup see a POP group like any group), and parks POPs
that found nothing (``shmq.broker.pop_waiters``) until a put, an ack or a revive may give them
something, or their deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from shmq.broker.answers import Peer
from shmq.broker.groups import POP, check_group
from shmq.broker.pop_fetch import Handed, PopFetcher
from shmq.broker.pop_state import QueueKey, Row
from shmq.broker.pop_store import PopStore, row_array
from shmq.broker.pop_waiters import PopWaiter, PopWaiters
from shmq.broker.schedule import now_ms
from shmq.broker.topics import MAX_QUEUE_NUMS
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.codec import pop_log as L
from shmq.errors import BadExpressionError, CorruptFrameError
from shmq.model import system_topics as st

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore

log = logging.getLogger("shmq.broker")

_REPLICA = "POP needs the master: a replica holds no pop state; receive from the master"


class PopProcessor:
    """The three frames, the long polls and the committed progress of POP groups."""

    def __init__(self, core: BrokerCore, store: PopStore | None) -> None:
        self.core = core
        self.store = store
        self.cap = core.config.pop_max_inflight_per_client
        self.waiters = PopWaiters(core.config.max_pull_waiters_per_client)
        self.fetch = PopFetcher(core, store.state) if store is not None else None
        self._wake_groups: set[str] = set()
        if store is not None:  # the watermarks recovered from the pop log (the offsets file may be older)
            for key, qs in store.state.queues.items():
                if core.offsets.query(*key) != qs.low_watermark():
                    core.offsets.commit(*key, qs.low_watermark())

    # ------------------------------------------------------------------ POP

    def handle_pop(self, peer: Peer, view: memoryview, now: int) -> None:
        try:
            pop = F.decode_pop(view)
            check_group(pop.group)
        except (CorruptFrameError, ValueError) as e:
            return _error(peer, P.request_id(F.POP, view), P.MESSAGE_ILLEGAL, f"POP refused: {e}")
        if self.fetch is None:
            return _error(peer, pop.req_id, P.SERVICE_NOT_AVAILABLE, _REPLICA)
        if self._subscriptions(pop.group, peer.client_id) is None:
            return _error(
                peer,
                pop.req_id,
                P.MESSAGE_ILLEGAL,
                f"client is not a member of POP group {pop.group!r}: join the group first",
            )
        held = self.fetch.state.client_rows(peer.client_id)
        if held >= self.cap:
            return _error(
                peer,
                pop.req_id,
                P.SYSTEM_BUSY,
                f"client holds {held} unacked messages of group {pop.group} (popMaxInflightPerClient); "
                f"ack or wait for their invisible time",
            )
        if self._serve(peer, pop, answer_empty=pop.await_ms == 0):
            return
        subs = self._subscriptions(pop.group, peer.client_id) or {}
        if not self.waiters.park(peer, pop, [*subs, st.retry_topic(pop.group)], now):
            _error(
                peer,
                pop.req_id,
                P.SYSTEM_BUSY,
                "client holds the most long polls maxPullWaitersPerClient allows; receive again after an answer",
            )

    def _serve(self, peer: Peer, pop: F.Pop, answer_empty: bool = False) -> bool:
        """Hand out what there is; answer and return True if anything was (or ``answer_empty``)."""
        assert self.fetch is not None and self.store is not None
        subs = self._subscriptions(pop.group, peer.client_id)
        if subs is None:  # the member left the group while it waited: nothing for it
            if answer_empty:
                peer.out.append((F.POP_RESULT, _result(pop, now_ms(), {})))
            return answer_empty
        want = min(pop.max_nums, self.cap - self.fetch.state.client_rows(peer.client_id))
        ms = now_ms()
        try:
            moved = self.fetch.pop(pop, peer.client_id, subs, want, ms)
        except BadExpressionError as e:  # a member that joined with an expression only it can evaluate
            _error(peer, pop.req_id, P.MESSAGE_ILLEGAL, f"the broker cannot filter this member's subscription: {e}")
            return True
        if moved:
            try:
                self.store.append(self._checkpoints(moved))
            except OSError as e:  # logged by the store; what was handed out comes back after its invisible time
                _error(peer, pop.req_id, P.SYSTEM_ERROR, f"the broker cannot write its pop state: {e.strerror}")
                return True
            self._progress(moved)
        if not any(moved.values()) and not answer_empty:
            return False
        peer.out.append((F.POP_RESULT, _result(pop, ms, moved)))
        return True

    def _checkpoints(self, moved: Handed) -> bytes:
        """One CHECKPOINT record per queue a POP moved in: its rows handed out and its cursor."""
        assert self.fetch is not None
        queues = self.fetch.state.queues
        return b"".join(
            L.encode(L.CHECKPOINT, *key, queues[key].cursor, row_array(items)) for key, items in moved.items()
        )

    # ------------------------------------------------------------------ ACK, CHANGE_INVISIBLE

    def handle_ack(self, peer: Peer, view: memoryview, now: int) -> None:
        self._receipts(peer, view, False)

    def handle_change(self, peer: Peer, view: memoryview, now: int) -> None:
        self._receipts(peer, view, True)

    def _receipts(self, peer: Peer, view: memoryview, change: bool) -> None:
        kind = F.CHANGE_INVISIBLE if change else F.ACK
        try:
            r = F.decode_receipts(view, change)
            check_group(r.group)
        except (CorruptFrameError, ValueError) as e:
            what = "change of invisible time" if change else "ack"
            return _error(peer, P.request_id(kind, view), P.MESSAGE_ILLEGAL, f"{what} refused: {e}")
        if self.fetch is None or self.store is None:
            return _error(peer, r.req_id, P.SERVICE_NOT_AVAILABLE, _REPLICA)
        state = self.fetch.state
        n = len(r.tokens)
        statuses = [F.RECEIPT_OK] * n
        tokens = np.zeros(n, np.int64)
        message = ""
        ok: dict[QueueKey, list[int]] = {}
        ms = now_ms()
        foreign = [_foreign_topic(r.group, t) for t in r.topics]
        invisible = r.invisible_ms.tolist() if r.invisible_ms is not None else [0] * n
        # per (topic index, queue id): the queue's key, its rows in flight, the offsets accepted
        # in this frame (the same receipt twice: the first settles it, the second is stale)
        queues: dict[tuple[int, int], tuple[QueueKey, dict[int, Row], list[int], set[int]]] = {}
        no_rows: dict[int, Row] = {}
        for i, (t, qid, offset, token) in enumerate(
            zip(r.topic_idx.tolist(), r.queue_ids.tolist(), r.queue_offsets.tolist(), r.tokens.tolist())
        ):
            q = queues.get((t, qid))
            if q is None:
                key = (r.group, r.topics[t], qid)
                qs = state.queues.get(key)
                q = queues[(t, qid)] = (key, qs.rows if qs is not None else no_rows, ok.setdefault(key, []), set())
            key, rows, accepted, seen = q
            row = rows.get(offset)
            bad_time = change and not 0 < invisible[i] <= F.MAX_INVISIBLE_MS
            if row is not None and row.token == token and offset not in seen and not (foreign[t] or bad_time):
                if change:
                    tokens[i] = state.change(key, offset, ms + invisible[i]).token
                seen.add(offset)
                accepted.append(offset)
                continue
            status, why = _refused(qid, offset, token, row, foreign[t], invisible[i] if bad_time else None)
            statuses[i] = status
            message = message or f"receipt of {key[1]} queue {qid} offset {offset}: {why}"
        ok = {key: offsets for key, offsets in ok.items() if offsets}
        if ok:
            try:
                self.store.append(self._settle_or_change(ok, change))
            except OSError as e:  # logged by the store
                return _error(peer, r.req_id, P.SYSTEM_ERROR, f"the broker cannot write its pop state: {e.strerror}")
            if not change:
                self.settled(ok)
        result = F.ReceiptResult(r.req_id, np.array(statuses, np.int64), tokens, message)
        peer.out.append((F.RECEIPT_RESULT, F.encode_receipt_result(result)))

    def _settle_or_change(self, ok: dict[QueueKey, list[int]], change: bool) -> bytes:
        """The log records of receipts accepted: SETTLE (an ack), or CHECKPOINT with the changed
        rows (new token and deadline)."""
        assert self.fetch is not None
        out = []
        for key, offsets in ok.items():
            if change:
                qs = self.fetch.state.queues[key]
                out.append(L.encode(L.CHECKPOINT, *key, qs.cursor, row_array([(o, qs.rows[o]) for o in offsets])))
            else:
                out.append(L.encode(L.SETTLE, *key, 0, L.settle_rows(offsets)))
        return b"".join(out)

    def settled(self, done: dict[QueueKey, list[int]]) -> None:
        """Rows done (acked, or revived: their log record written): they leave the state, the
        queues' watermarks are committed, and FIFO queues they held are free for the group."""
        assert self.fetch is not None
        state = self.fetch.state
        for key, offsets in done.items():
            state.settle_many(key, offsets)
            if not state.queues[key].rows:
                self._wake_groups.add(key[0])
        self._progress(done)

    def reset(self, group: str, topic: str, targets: dict[int, int]) -> None:
        """An operator reset the group's offsets of ``topic``: each queue's cursor moves to its
        target and what was in flight there is dropped (its receipts become unknown)."""
        if self.fetch is None or self.store is None:
            return
        state = self.fetch.state
        out = []
        for qid, offset in targets.items():
            key = (group, topic, qid)
            qs = state.queues.get(key)
            if qs is None:
                continue
            if qs.rows:
                out.append(L.encode(L.SETTLE, *key, 0, L.settle_rows(list(qs.rows))))
                for o in list(qs.rows):
                    state.settle(key, o)
            qs.cursor = offset
            out.append(L.encode(L.CHECKPOINT, *key, offset))
        self.store.append(b"".join(out))
        self._wake_groups.add(group)

    def wake_group(self, group: str) -> None:
        """A FIFO queue of ``group`` may be handed out again (its rows' deadline passed)."""
        self._wake_groups.add(group)

    # ------------------------------------------------------------------ progress, long polls

    def _progress(self, keys: Iterable[QueueKey]) -> None:
        """Commit each queue's low watermark as the group's offset when it moved."""
        assert self.fetch is not None
        offsets = self.core.offsets
        for key in keys:
            lw = self.fetch.state.queues[key].low_watermark()
            if offsets.query(*key) != lw:
                self.core.commit_progress(*key, lw)

    def wake_topics(self, topics: set[str]) -> None:
        """Puts to ``topics``: their groups' waiters may find something now."""
        if self.waiters.by_group:
            self._wake_groups |= self.waiters.groups_of(topics)

    def end_pass(self) -> None:
        """After the pass's puts: serve the woken groups' waiters, then (SYNC_FLUSH) fsync the pop
        log once for the whole pass, before any answer is written to a ring."""
        if self._wake_groups:
            groups, self._wake_groups = self._wake_groups, set()
            for group in groups:
                self._wake(self.waiters.waiting(group))
        if self.store is not None and self.store.sync_flush:
            self.store.sync()

    def _wake(self, waiting: list[PopWaiter]) -> None:
        empty: set[tuple[str, int]] = set()  # (subscriptions, flags) that found nothing this time
        for w in waiting:
            subs = self._subscriptions(w.pop.group, w.peer.client_id)
            shape = (repr(sorted(subs.items())) if subs else "", w.pop.flags)
            if shape in empty:
                continue
            if not w.peer.alive or self._serve(w.peer, w.pop):
                self.waiters.done(w)
            else:
                empty.add(shape)

    def expire(self, now: int) -> None:
        """Answer the long polls whose deadline passed: what there is now, or nothing."""
        for w in self.waiters.expired(now):
            if w.peer.alive:
                self._serve(w.peer, w.pop, answer_empty=True)

    def forget(self, peer: Peer) -> None:
        self.waiters.forget(peer)

    def _subscriptions(self, group: str, client_id: int) -> dict[str, str | dict[str, str]] | None:
        g = self.core.consumers.groups.get(group)
        if g is None or g.model != POP:
            return None
        return g.members.get(client_id)


_WHY = {
    F.RECEIPT_UNKNOWN: "no such message in flight for the group (never handed out, or settled already)",
    F.RECEIPT_STALE: "an earlier delivery's receipt: the message was handed out again since",
}


def _refused(qid: int, offset: int, token: int, row: Row | None, foreign: str, bad_time: int | None) -> tuple[int, str]:
    """The status of a receipt not accepted, and why (the checks in the order a user reads them)."""
    if foreign:
        return F.RECEIPT_ILLEGAL, foreign
    if not 0 <= qid < MAX_QUEUE_NUMS or offset < 0:
        return F.RECEIPT_ILLEGAL, f"queue {qid} offset {offset} is out of range"
    if bad_time is not None:
        return F.RECEIPT_ILLEGAL, f"invisible time {bad_time} ms is not in 1..{F.MAX_INVISIBLE_MS}"
    if row is None or token > row.token or token <= 0:
        return F.RECEIPT_UNKNOWN, _WHY[F.RECEIPT_UNKNOWN]
    return F.RECEIPT_STALE, _WHY[F.RECEIPT_STALE]  # an earlier delivery's, or the same receipt twice in one frame


def _foreign_topic(group: str, topic: str) -> str:
    """Why no receipt of ``topic`` can be the group's (another group's retry topic, a DLQ, a
    system topic), or "" for a topic it may consume."""
    if (st.is_system_topic(topic) and topic != st.retry_topic(group)) or st.is_dlq_topic(topic):
        return f"topic {topic} is not one group {group} consumes"
    return ""


def _result(pop: F.Pop, ms: int, moved: Handed) -> bytes:
    """The POP_RESULT payload: one row per message handed out, in order (built as one table: a
    POP's fixed cost is in numpy calls, not in its rows)."""
    topics = list(dict.fromkeys(key[1] for key, items in moved.items() if items))
    index = {t: i for i, t in enumerate(topics)}
    table = np.array(
        [
            (index[topic], qid, offset, row.phys, row.size, row.attempt, row.token)
            for (_, topic, qid), items in moved.items()
            for offset, row in items
        ],
        np.int64,
    ).reshape(-1, 7)
    return F.encode_pop_result_rows(pop.req_id, ms, pop.invisible_ms, topics, table)


def _error(peer: Peer, req_id: int, code: int, message: str) -> None:
    peer.out.append((P.ERROR, P.encode_error(req_id, code, message)))
