"""TransactionalMessageService: ends half messages (commit, rollback) and checks the ones left
open (RocketMQ's TransactionalMessageService and TransactionalMessageCheckService).

A half message waits under ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (the DeliveryRulesHook put it
there), invisible to consumers. ``end`` settles it for the producer's END_TRANSACTION:
- COMMIT: one internal put of two records, first the op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``
  queue 0, body = the half's queue offset, tag ``d``, property ``TRAN_OP=commit``), then the
  real message (REAL_TOPIC / REAL_QID restored, SYSFLAG commit type, PREPAREDTXOFFSET = the
  half's commitlog offset), which its consumers then see;
- ROLLBACK: the op record alone (``TRAN_OP=rollback``);
- an END for a half already settled (a check's answer racing the producer's own END, a
  duplicate) changes nothing: the first END wins, so a commit is visible exactly once.

Every ``transactionCheckInterval`` ms ``tick`` walks the half queue from its progress: a half
older than ``transactionTimeOut`` without an op is checked (CHECK_TRANSACTION to a live
transaction producer of its PGROUP, round robin; with none alive it waits and is not counted);
one checked ``transactionCheckMax`` times is discarded (op record ``TRAN_OP=discard``, a
warning logged). Progress and check counts are ``config/transactionCheck.json`` (written after
each round that changed them, fsynced on the offsets interval and at shutdown) and mirrored to
the committed offsets of ``CID_RMQ_SYS_TRANS`` (half and op queue) for ``consumer_progress``.

Crash safety (a SIGKILL at any moment; the store keeps the page cache, recovery cuts the
commitlog after the last whole record, so what survives is a prefix of what was written):
1. The op queue is the decision log. At start the resolutions are rebuilt from it (from the
   persisted op progress, below which every op names a settled half): a half with an op is
   never checked, committed or discarded again, so nothing is delivered twice or resurrected.
2. A commit writes its op record before its real message, in one put. A kill inside that put
   leaves either nothing (the half is open: the check asks again and the producer commits
   again, once), the op alone (the message is missing) or both. Being a prefix, only the LAST
   op record of the log can lack the message that follows it; at start that record, if it is a
   commit, is compared with the record right after it and the message is written if missing
   (``_repair_last_commit``, one record read). So a commit whose op exists is always visible.
3. A rollback or discard is the op record alone: the message is never written, and an op
   that did not survive leaves the half open, i.e. checked again, never delivered unasked.
4. The resolutions in memory are changed only after the put that made them, in the broker's
   one loop thread, so an END racing a check's answer or a second END sees the first.
5. Check counts survive a kill: the file is rewritten after every round that sent checks
   (without fsync: a killed process loses no page cache). A kill between a round's checks and
   that write loses those counts, so a half may be checked at most once more per crash than
   ``transactionCheckMax`` before it is discarded.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from shmq.broker.answers import Peer
from shmq.broker.transaction_state import COMMIT, DISCARD, OUTCOMES, ROLLBACK, SETTLED, TransactionState, parse_state
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.transaction_frames import CheckTransaction, EndTransaction, encode_check_transaction
from shmq.config import BrokerConfig
from shmq.model.system_topics import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from shmq.store.config_files import load_json, write_json
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.message_store import MessageStore
from shmq.store.write.result import PutMessageResult
from shmq.store.write.rewrite import rewrite_record
from shmq.store.write_retry import WriteRetry

log = logging.getLogger("shmq.broker")

OP_TAG = "d"  # RocketMQ's REMOVE_TAG: the op record's tag
PROPERTY_TRAN_OP = "TRAN_OP"  # how the half named by an op record ended: commit, rollback, discard
MAX_SCAN_PER_ROUND = 8192  # half queue entries one check round looks at: the loop keeps serving
TRANSACTION_PRODUCER = "transaction_producer"  # the attach role of producers that answer checks
_CHUNK = 512

PutInternal = Callable[[list[tuple[str, int, bytes]]], PutMessageResult]
Producers = Callable[[str], list[Peer]]  # live transaction producers of a group
Progress = Callable[[str, str, int, int], None]  # (group, topic, queue id, offset) committed


class EndResult(NamedTuple):
    """What an END_TRANSACTION did: ``code`` 0 (done, or nothing to do for unknown) or an
    ERROR code and why; ``put`` the op (+ commit) put, None when nothing was written."""

    code: int
    message: str
    put: PutMessageResult | None = None
    queue_id: int = -1  # of the committed message


def op_item(half: int, outcome: str) -> tuple[str, int, bytes]:
    """The op record settling the half at queue offset ``half``."""
    return (
        TRANS_OP_HALF_TOPIC,
        0,
        fmt.encode_message(
            TRANS_OP_HALF_TOPIC, str(half).encode(), properties={fmt.PROPERTY_TAGS: OP_TAG, PROPERTY_TRAN_OP: outcome}
        ),
    )


def commit_item(raw: bytes | memoryview, half: fmt.StoredRecord) -> tuple[str, int, bytes]:
    """The half record as its real message: topic and queue restored, SYSFLAG commit type,
    PREPAREDTXOFFSET its commitlog offset. ValueError (or CorruptRecordError) for a half
    without a usable REAL_TOPIC / REAL_QID."""
    props = half.properties
    topic, qid = props.get(fmt.PROPERTY_REAL_TOPIC), props.get(fmt.PROPERTY_REAL_QID)
    if not topic or qid is None or not qid.isdigit():
        raise ValueError(f"half at {half.physical_offset} has no usable REAL_TOPIC / REAL_QID")
    sysflag = (half.sysflag & ~fmt.TRANSACTION_MASK) | fmt.TRANSACTION_COMMIT
    record = rewrite_record(
        raw,
        topic=topic,
        queue_id=int(qid),
        sysflag=sysflag,
        prepared_offset=half.physical_offset,
        drop_props=(fmt.PROPERTY_REAL_TOPIC, fmt.PROPERTY_REAL_QID, fmt.PROPERTY_TRANSACTION_CHECK_TIMES),
    )
    return topic, int(qid), record


def is_commit_of(rec: fmt.StoredRecord, half_phys: int) -> bool:
    return rec.sysflag & fmt.TRANSACTION_MASK == fmt.TRANSACTION_COMMIT and rec.prepared_tx_offset == half_phys


class TransactionalMessageService:
    """Ends and checks half messages for the broker core (a TimedService; module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        put_internal: PutInternal,
        producers: Producers,
        progress: Progress | None = None,
    ) -> None:
        self.store = store
        self.put_internal = put_internal
        self.producers = producers
        self.progress = progress
        self.timeout = config.transaction_time_out
        self.check_max = config.transaction_check_max
        self.interval = config.transaction_check_interval
        self.path = os.path.join(store.store_dir, "config", "transactionCheck.json")
        self._write = WriteRetry(log, "writing transactionCheck.json")  # a read-only or full disk: logged once
        loaded = load_json(self.path, parse_state)
        if loaded.damaged:
            log.error(
                "transaction check progress damaged (%s); using %s",
                " | ".join(loaded.problems),
                loaded.source
                or "the half and op queues' start (halves are checked again, none delivered "
                "twice: the op queue says which are settled)",
            )
        half, op, times = parse_state(loaded.data) if loaded.source else (0, 0, {})
        half_max, op_max = (store.get_max_offset_in_queue(t, 0) for t in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC))
        if half > half_max or op > op_max:  # the logs lost a tail the file had seen (power loss): never
            # take halves stored anew at those offsets for settled ones
            log.warning(
                "transactions: progress (half %d, op %d) is past the queues' end (%d, %d): the commitlog "
                "lost its tail; progress set back to the end",
                half,
                op,
                half_max,
                op_max,
            )
            half, op = min(half, half_max), min(op, op_max)
            times = {k: v for k, v in times.items() if k < half_max}
        self.state = TransactionState(half, op, times)
        self.unsynced = False
        self._mirrored = (-1, -1)  # the progress last committed as CID_RMQ_SYS_TRANS's offsets
        self._next_round = 0
        self._turn = 0  # round robin over a group's producers
        self.checks_sent = 0
        self.discarded = 0
        self._load_ops()
        self._repair_last_commit()
        cq = store.find_consume_queue(TRANS_HALF_TOPIC, 0)
        self.state.advance(cq.min_offset if cq is not None else 0)

    # ------------------------------------------------------------------ start

    def _load_ops(self) -> None:
        """Read the op queue from the persisted op progress into the state."""
        cq = self.store.find_consume_queue(TRANS_OP_HALF_TOPIC, 0)
        if cq is None:
            return
        st = self.state
        offset, hi = max(st.op_offset, cq.min_offset), cq.max_offset
        while offset < hi:
            entries = cq.get_range(offset, min(hi - offset, _CHUNK))
            if not len(entries):
                break
            for i, e in enumerate(entries):
                parsed = self._read_op(int(e["offset"]), int(e["size"]))
                if parsed is not None:
                    st.note_op(offset + i, parsed[0], parsed[1])
            offset += len(entries)
        if st.ops:
            log.info(
                "transactions: %d op records read, %d halves from offset %d settled",
                len(st.ops),
                len(st.resolved),
                st.half_offset,
            )

    def _read_op(self, phys: int, size: int) -> tuple[int, str] | None:
        view = self.store.commitlog.data(phys, size) if size != BLANK_SIZE else None
        if view is None:
            return None
        try:
            rec = fmt.decode_record(view)
            half = int(bytes(rec.body))
        except (ValueError, fmt.CorruptRecordError) as e:
            log.error("op record at commitlog offset %d unreadable, skipped: %s", phys, e)
            return None
        outcome = rec.properties.get(PROPERTY_TRAN_OP, COMMIT)
        return half, outcome if outcome in OUTCOMES else COMMIT

    def _repair_last_commit(self) -> None:
        """The last op of the log is a commit whose real message was cut off by a crash (the
        only op that can be: point 2 of the module docstring): write the message now. The last
        op is read whatever the op progress says (a progress file newer than the log's end)."""
        cq = self.store.find_consume_queue(TRANS_OP_HALF_TOPIC, 0)
        if cq is None or cq.max_offset <= cq.min_offset:
            return
        entries = cq.get_range(cq.max_offset - 1, 1)
        if not len(entries):
            return
        op_phys, op_size = int(entries[0]["offset"]), int(entries[0]["size"])
        parsed = self._read_op(op_phys, op_size)
        if parsed is None or parsed[1] != COMMIT:
            return
        half = parsed[0]
        found = self._half(half)
        if found is None:
            return
        raw, rec = found
        after = next(self.store.commitlog.iter_records(op_phys + op_size), None)
        if after is not None:
            mf, pos, size = after
            if is_commit_of(fmt.decode_record(mf.view[pos : pos + size]), rec.physical_offset):
                return
        item = commit_item(raw, rec)
        self.put_internal([item])
        log.warning(
            "transactions: the commit of half %d (msg id %s) was cut off by a crash after its op record; "
            "its message was written to %s/%d now",
            half,
            rec.uniq_key,
            item[0],
            item[1],
        )

    def _half(self, half: int) -> tuple[bytes, fmt.StoredRecord] | None:
        """(record bytes, record) of the half at queue offset ``half``; None if it is gone."""
        cq = self.store.find_consume_queue(TRANS_HALF_TOPIC, 0)
        if cq is None or not cq.min_offset <= half < cq.max_offset:
            return None
        entries = cq.get_range(half, 1)
        return self._read_entry(entries[0]) if len(entries) else None

    def _read_entry(self, entry: Any) -> tuple[bytes, fmt.StoredRecord] | None:
        """(record bytes, record) of a half queue entry; None if cleanup took it."""
        size = int(entry["size"])
        view = self.store.commitlog.data(int(entry["offset"]), size) if size != BLANK_SIZE else None
        if view is None:
            return None
        raw = bytes(view)
        return raw, fmt.decode_record(raw)

    # ------------------------------------------------------------------ END_TRANSACTION

    def end(self, group: str | None, e: EndTransaction) -> EndResult:
        """Settle a half for an END_TRANSACTION of a producer of ``group``; refusals say why."""
        h = e.half_queue_offset
        found = self._half(h)
        if found is None:
            return EndResult(P.MESSAGE_ILLEGAL, f"no half message at half queue offset {h}")
        raw, rec = found
        if rec.physical_offset != e.half_phys_offset:
            return EndResult(
                P.MESSAGE_ILLEGAL,
                f"the half at queue offset {h} is at commitlog offset {rec.physical_offset}, not {e.half_phys_offset}",
            )
        if e.msg_id and rec.uniq_key != e.msg_id:
            return EndResult(
                P.MESSAGE_ILLEGAL, f"the half at queue offset {h} is message {rec.uniq_key}, not {e.msg_id}"
            )
        owner = rec.properties.get(fmt.PROPERTY_PGROUP)
        if owner != group:
            return EndResult(
                P.NO_PERMISSION, f"the half at queue offset {h} belongs to producer group {owner!r}, not {group!r}"
            )
        done = self.state.outcome(h)
        if done is not None:
            log.info(
                "transactions: END (%s%s) for half %d ignored: already %s",
                _kind(e.commit_or_rollback),
                ", from a check" if e.from_check else "",
                h,
                done,
            )
            how = "" if done == SETTLED else f" ({done})"
            return EndResult(
                P.MESSAGE_ILLEGAL, f"the half at queue offset {h} is already settled{how}; this END changes nothing"
            )
        if e.commit_or_rollback == fmt.TRANSACTION_NOT_TYPE:
            return EndResult(0, "unknown: left to the check")
        outcome = COMMIT if e.commit_or_rollback == fmt.TRANSACTION_COMMIT else ROLLBACK
        items = [op_item(h, outcome)]
        if outcome == COMMIT:
            try:
                items.append(commit_item(raw, rec))
            except (ValueError, fmt.CorruptRecordError) as err:
                return EndResult(P.MESSAGE_ILLEGAL, str(err))
        r = self.put_internal(items)
        if r.refused is not None and r.refused[0]:
            return EndResult(*r.refusals[int(r.refused[0]) - 1])
        if r.refused is not None and r.refused.any():
            log.error(
                "transactions: the commit of half %d has its op record but its message was refused: %s", h, r.refusals
            )
        self.state.note_op(int(r.queue_offsets[0]), h, outcome)
        return EndResult(0, "", r, items[-1][1] if outcome == COMMIT else -1)

    # ------------------------------------------------------------------ the check service

    def next_due_ms(self) -> int | None:
        """None: check rounds run on an interval, an idle broker need not wake early for them."""
        return None

    def tick(self, now_ms: int) -> int:
        """One check round every ``interval`` ms; the checks sent."""
        if now_ms < self._next_round:
            return 0
        self._next_round = now_ms + self.interval
        cq = self.store.find_consume_queue(TRANS_HALF_TOPIC, 0)
        if cq is None:
            return 0
        st = self.state
        st.advance(cq.min_offset)
        offset, sent, young = st.half_offset, 0, False
        end = min(cq.max_offset, offset + MAX_SCAN_PER_ROUND)
        while offset < end and not young:
            entries = cq.get_range(offset, min(end - offset, _CHUNK))
            if not len(entries):
                break
            for i, e in enumerate(entries):
                h = offset + i
                if st.outcome(h) is not None:
                    continue
                found = self._read_entry(e)
                if found is None:
                    log.warning("transactions: half %d is gone from the commitlog (cleanup); settled", h)
                    st.note_gone(h)
                    continue
                raw, rec = found
                if now_ms - rec.store_timestamp < self.timeout:
                    young = True  # halves are in store order: the rest are younger still
                    break
                sent += self._check_or_discard(h, raw, rec)
            offset += len(entries)
        self._settle_progress(cq.min_offset)
        return sent

    def _check_or_discard(self, h: int, raw: bytes, rec: fmt.StoredRecord) -> int:
        st = self.state
        times = st.check_times.get(h, 0)
        if times >= self.check_max:
            r = self.put_internal([op_item(h, DISCARD)])
            st.note_op(int(r.queue_offsets[0]), h, DISCARD)
            self.discarded += 1
            log.warning(
                "transactions: half %d (msg id %s, topic %s, producer group %s) discarded after %d checks "
                "without commit or rollback",
                h,
                rec.uniq_key,
                rec.properties.get(fmt.PROPERTY_REAL_TOPIC),
                rec.properties.get(fmt.PROPERTY_PGROUP),
                times,
            )
            return 0
        group = rec.properties.get(fmt.PROPERTY_PGROUP) or ""
        producers = self.producers(group)
        if not producers:
            return 0  # nobody can answer: wait, do not count
        peer = producers[self._turn % len(producers)]
        self._turn += 1
        n = st.checked(h)
        peer.out.append(
            (P.CHECK_TRANSACTION, encode_check_transaction(CheckTransaction(0, rec.physical_offset, h, n, raw)))
        )
        self.checks_sent += 1
        return 1

    def _settle_progress(self, queue_min: int) -> None:
        st = self.state
        st.advance(queue_min)
        now = (st.half_offset, st.op_offset)
        if now != self._mirrored and self.progress is not None:
            self.progress(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, st.half_offset)
            self.progress(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, st.op_offset)
            self._mirrored = now
        if st.dirty:
            self.persist(durable=False)

    def describe(self, max_num: int) -> dict[str, Any]:
        """For operators (``Admin.transactions``): the progress, the check counters and up to
        ``max_num`` open halves from the oldest on (a stuck one is first, with its check count)."""
        st = self.state
        cq = self.store.find_consume_queue(TRANS_HALF_TOPIC, 0)
        hi = cq.max_offset if cq is not None else 0
        found: list[dict[str, Any]] = []
        offset, end = st.half_offset, min(hi, st.half_offset + MAX_SCAN_PER_ROUND)
        while cq is not None and offset < end and len(found) < max_num:
            entries = cq.get_range(offset, min(end - offset, _CHUNK))
            if not len(entries):
                break
            for i, e in enumerate(entries):
                half = self._read_entry(e) if st.outcome(offset + i) is None else None
                if half is not None and len(found) < max_num:
                    props = half[1].properties
                    found.append(
                        {
                            "queue_offset": offset + i,
                            "msg_id": half[1].uniq_key,
                            "topic": props.get(fmt.PROPERTY_REAL_TOPIC),
                            "producer_group": props.get(fmt.PROPERTY_PGROUP),
                            "store_timestamp": half[1].store_timestamp,
                            "check_times": st.check_times.get(offset + i, 0),
                        }
                    )
            offset += len(entries)
        return {
            "half_offset": st.half_offset,
            "half_max_offset": hi,
            "op_offset": st.op_offset,
            "open": found,
            "checks_sent": self.checks_sent,
            "discarded": self.discarded,
        }

    def persist(self, durable: bool = True) -> None:
        """Write transactionCheck.json (a failure is logged: the next round or interval tries again)."""
        st = self.state
        if not (st.dirty or (durable and self.unsynced)):
            return
        now = time.monotonic()
        if not (durable or self._write.due(now)):  # failing: a round's write waits for its retry delay
            return
        try:
            write_json(self.path, st.to_json(), durable=durable)
            st.dirty, self.unsynced = False, not durable
        except OSError as e:
            self._write.failed(e, now)
            return
        self._write.succeeded()


def _kind(t: int) -> str:
    return {fmt.TRANSACTION_COMMIT: "commit", fmt.TRANSACTION_ROLLBACK: "rollback"}.get(t, "unknown")


def live_producers(clients: dict[int, Any]) -> Producers:
    """The live transaction producers of a group among the core's clients."""

    def find(group: str) -> list[Peer]:
        return [c for c in clients.values() if c.alive and c.role == TRANSACTION_PRODUCER and c.group == group]

    return find
