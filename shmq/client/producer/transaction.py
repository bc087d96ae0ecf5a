"""TransactionProducer: RocketMQ's TransactionMQProducer (half message, local transaction, end).

``send_in_transaction`` sends the message as a half (sync, flagged for the broker's put hooks,
SYSFLAG prepared, PGROUP = this group): the broker keeps it under RMQ_SYS_TRANS_HALF_TOPIC,
invisible. Then ``execute(msg, arg)`` runs the local transaction; what it returns (an exception
counts as UNKNOWN) goes to the broker in a oneway END_TRANSACTION: COMMIT makes the message
visible, ROLLBACK drops it, UNKNOWN leaves it to the broker's check. The broker's check
(CHECK_TRANSACTION, after transactionTimeOut) reaches a live transaction producer of the same
group, which answers with ``check(msg)`` run on its own thread (never the reader thread, which
must keep reading answers) in an END_TRANSACTION marked as from a check.

Correlate the two with something of the message (its keys or a property): ``check`` gets the
stored half as a MessageExt with the real topic and queue, and TRANSACTION_CHECK_TIMES.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shmq.client.connection import next_request_id
from shmq.client.hooks import SYNC, SendMessageContext, hooked_call
from shmq.client.producer.producer import Producer
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.transaction_frames import EndTransaction, decode_check_transaction, encode_end_transaction
from shmq.errors import ArgumentTypeError, BadMessageError, ShmqError
from shmq.model.message import Message, SendResult, SendStatus
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import Raw

log = logging.getLogger(__name__)
# a half's answer waits behind the broker's work on the previous END (a commit is one put of two
# records): read it in this thread a while longer than a plain sync send does, so that it does
# not take the reader thread's wake-up and the Future's hand-off (measured on 2 busy vCPUs: 1.2x to
# 1.6x the committed transactions/s of the sync send's 300 us)
HALF_POLL_S = 2e-3


class TransactionStatus(enum.Enum):
    """A local transaction's state (RocketMQ's LocalTransactionState)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"


_END_TYPE = {
    TransactionStatus.COMMIT: fmt.TRANSACTION_COMMIT,
    TransactionStatus.ROLLBACK: fmt.TRANSACTION_ROLLBACK,
    TransactionStatus.UNKNOWN: fmt.TRANSACTION_NOT_TYPE,
}

Execute = Callable[[Message, Any], TransactionStatus]
Check = Callable[[MessageExt], TransactionStatus]


class TransactionSendResult(SendResult):
    """A SendResult of the half message plus what the local transaction said."""

    __slots__ = ("local_transaction_state",)
    _FIELDS = (*SendResult._FIELDS, "local_transaction_state")  # type: ignore[assignment]  # one more field

    def __init__(self, sent: SendResult, state: TransactionStatus) -> None:
        super().__init__(
            sent.status,
            sent.msg_id,
            None,
            sent.queue,
            sent.queue_offset,
            sent.store_timestamp,
            sent.count,
            sent.phys_offsets,
            sent.store_host,
        )
        self.local_transaction_state = state

    def _repr_parts(self) -> list[tuple[str, Any]]:
        return [*super()._repr_parts(), ("local_transaction_state", Raw(self.local_transaction_state.name))]


def _status(value: object, what: str) -> TransactionStatus:
    """A callback's answer as a TransactionStatus; anything else is UNKNOWN (logged)."""
    if isinstance(value, TransactionStatus):
        return value
    log.error("%s returned %r, not a TransactionStatus: taken as UNKNOWN", what, value)
    return TransactionStatus.UNKNOWN


class TransactionProducer(Producer):
    """A producer that sends transactional messages and answers the broker's checks.

    ``check(msg_ext) -> TransactionStatus`` answers for a half the broker could not settle
    (the producer died before its END, or said UNKNOWN); ``check_threads`` run it."""

    ROLE = "transaction_producer"

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        check: Check,
        check_threads: int = 1,
        namesrv: str | None = None,
        **options: Any,
    ) -> None:
        if not callable(check):
            raise ArgumentTypeError(f"check must be a callable taking a MessageExt, got {type(check).__name__}")
        super().__init__(group, broker, **options)
        self.check = check
        self._checker = ThreadPoolExecutor(check_threads, thread_name_prefix="shmq-transaction-check")

    @classmethod
    def cluster_class(cls) -> type[Producer]:
        from shmq.client.producer.cluster_transaction import ClusterTransactionProducer

        return ClusterTransactionProducer

    def shutdown(self, timeout: float | None = None) -> None:
        super().shutdown(timeout)
        self._checker.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def send_in_transaction(
        self, msg: Message, execute: Execute, arg: Any = None, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half, run ``execute(msg, arg)``, end the transaction with its answer.

        A half the broker did not store with SEND_OK is rolled back without running ``execute``
        (RocketMQ's rule); send errors raise as from ``send``."""
        if not isinstance(msg, Message):
            raise ArgumentTypeError(f"send_in_transaction takes a Message, got {type(msg).__name__}")
        if not callable(execute):
            raise ArgumentTypeError(f"execute must be a callable (msg, arg), got {type(execute).__name__}")
        if msg.delivery_rules:
            raise BadMessageError(
                "a transactional message cannot also be delayed (delay_level, deliver_at, delay): "
                "RocketMQ would store it twice and check it in a loop"
            )
        props = dict(msg.properties or {})
        props[fmt.PROPERTY_TRAN_MSG] = "true"
        props[fmt.PROPERTY_PGROUP] = self.group
        half = Message(msg.topic, msg.body, msg.tags, msg.keys, props, msg.flag)
        if self._send_hooks:  # the half is the transaction's send: send hooks (trace) see it
            sent = hooked_call(
                self._send_hooks, SendMessageContext(self.group, half, SYNC), lambda: self._send_half(half, timeout)
            )
        else:
            sent = self._send_half(half, timeout)
        if sent.status is not SendStatus.SEND_OK:
            state = TransactionStatus.ROLLBACK
        else:
            try:
                state = _status(execute(msg, arg), "execute")
            except Exception:
                log.exception(
                    "the local transaction of message %s raised: its state is UNKNOWN (the broker will check it)",
                    sent.msg_id,
                )
                state = TransactionStatus.UNKNOWN
        self._end(sent.phys_offsets[0], sent.queue_offset, sent.msg_id, state, from_check=False)
        return TransactionSendResult(sent, state)

    def _send_half(self, half: Message, timeout: float | None) -> SendResult:
        """The half, sync: SYSFLAG prepared, flagged for the broker's put hooks."""
        self._flush_accumulated()
        s = self._conn.hold_responses()
        try:
            fut = self._submit_one(half, -1, timeout, oneway=False, sysflag=fmt.TRANSACTION_PREPARED)
            self._conn.poll(s, fut.done, HALF_POLL_S)
        finally:
            self._conn.release_responses(s)
        result: SendResult = fut.result()
        return result

    def _end(self, phys: int, queue_offset: int, msg_id: str, state: TransactionStatus, from_check: bool) -> None:
        """END_TRANSACTION, oneway. If it cannot be written (the broker went away) the half stays
        open and the broker's check asks again: logged, not raised."""
        payload = encode_end_transaction(
            EndTransaction(next_request_id(), phys, queue_offset, P.FLAG_ONEWAY, _END_TYPE[state], from_check, msg_id)
        )
        try:
            self._conn.write_frame(P.END_TRANSACTION, payload, time.monotonic() + self.send_msg_timeout)
        except (ShmqError, OSError) as e:
            log.warning(
                "END_TRANSACTION (%s) of message %s not sent (%s): the broker will check it", state.name, msg_id, e
            )

    # ------------------------------------------------------------------ checks from the broker

    def _on_response(self, kind: int, view: Any) -> None:
        if kind != P.CHECK_TRANSACTION:
            return super()._on_response(kind, view)
        c = decode_check_transaction(view)
        try:
            self._checker.submit(
                self._answer_check, c.half_phys_offset, c.half_queue_offset, c.check_times, bytes(c.record)
            )
        except RuntimeError:  # shut down: the broker checks again later
            pass

    def _answer_check(self, phys: int, queue_offset: int, times: int, raw: bytes) -> None:
        try:
            rec = fmt.decode_record(raw)
        except fmt.CorruptRecordError as e:
            log.error("CHECK_TRANSACTION carried an unreadable half at %d: %s", phys, e)
            return
        msg = MessageExt.from_record(rec)
        props = dict(rec.properties)
        props[fmt.PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        msg.properties = props
        msg.topic = props.get(fmt.PROPERTY_REAL_TOPIC, rec.topic)
        qid = props.get(fmt.PROPERTY_REAL_QID, "")
        msg.queue_id = int(qid) if qid.isdigit() else rec.queue_id
        try:
            state = _status(self.check(msg), "check")
        except Exception:
            log.exception("the transaction check of message %s raised: answered UNKNOWN", msg.msg_id)
            state = TransactionStatus.UNKNOWN
        self._end(phys, queue_offset, rec.uniq_key or "", state, from_check=True)
