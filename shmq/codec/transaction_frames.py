"""END_TRANSACTION and CHECK_TRANSACTION payloads (pure; decoders raise only CorruptFrameError).

A transaction producer ends a half message with END_TRANSACTION (RocketMQ's
EndTransactionRequestHeader: the half's commitlog offset and its offset in the half queue,
commit / rollback / unknown as the SYSFLAG transaction type, whether it answers a check). The
broker asks a producer of the half's group about a half left unresolved with CHECK_TRANSACTION,
which carries the half record itself so the producer's ``check`` sees the message.

Layouts (little-endian)::

    END_TRANSACTION    req_id u64, half_phys_offset i64, half_queue_offset i64, flags u32,
                       commit_or_rollback u8 (TRANSACTION_NOT_TYPE / _COMMIT / _ROLLBACK),
                       from_check u8, msg_id_len u16 | msg_id (ASCII, the half's UNIQ_KEY)
    CHECK_TRANSACTION  req_id u64, half_phys_offset i64, half_queue_offset i64, check_times u32,
                       record_len u32 | the half record as stored (topic RMQ_SYS_TRANS_HALF_TOPIC)

END_TRANSACTION is oneway from producers (``flags`` FLAG_ONEWAY, as RocketMQ); without it the
broker answers a SEND_RESULT (commit: where the message became visible; rollback or unknown:
offsets -1) or an ERROR.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer
from shmq.errors import CorruptFrameError

_END = struct.Struct("<QqqIBBH")
_CHECK = struct.Struct("<QqqII")
MAX_MSG_ID = 128
END_TYPES = frozenset((fmt.TRANSACTION_NOT_TYPE, fmt.TRANSACTION_COMMIT, fmt.TRANSACTION_ROLLBACK))


class EndTransaction(NamedTuple):
    req_id: int
    half_phys_offset: int
    half_queue_offset: int
    flags: int
    commit_or_rollback: int  # fmt.TRANSACTION_COMMIT, TRANSACTION_ROLLBACK or TRANSACTION_NOT_TYPE (unknown)
    from_check: bool
    msg_id: str


def encode_end_transaction(e: EndTransaction) -> bytes:
    m = e.msg_id.encode("ascii")
    if len(m) > MAX_MSG_ID:
        raise ValueError(f"msg id of {len(m)} bytes; at most {MAX_MSG_ID}")
    return (
        _END.pack(
            e.req_id, e.half_phys_offset, e.half_queue_offset, e.flags, e.commit_or_rollback, int(e.from_check), len(m)
        )
        + m
    )


def decode_end_transaction(payload: ReadBuffer) -> EndTransaction:
    try:
        req_id, phys, qoff, flags, kind, from_check, n = _END.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("END_TRANSACTION frame shorter than its header") from None
    if len(payload) != _END.size + n or n > MAX_MSG_ID:
        raise CorruptFrameError(f"END_TRANSACTION frame is {len(payload)} bytes, its fields say {_END.size + n}")
    if kind not in END_TYPES:
        raise CorruptFrameError(f"END_TRANSACTION type {kind:#x} is not commit, rollback or unknown")
    if from_check > 1:
        raise CorruptFrameError(f"END_TRANSACTION from_check {from_check}")
    try:
        msg_id = bytes(payload[_END.size :]).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFrameError("END_TRANSACTION msg id is not ASCII") from None
    return EndTransaction(req_id, phys, qoff, flags, kind, bool(from_check), msg_id)


class CheckTransaction(NamedTuple):
    """``record`` is a view into the ring in the decoder's result (copy it to keep it)."""

    req_id: int
    half_phys_offset: int
    half_queue_offset: int
    check_times: int
    record: ReadBuffer


def encode_check_transaction(c: CheckTransaction) -> bytes:
    return _CHECK.pack(c.req_id, c.half_phys_offset, c.half_queue_offset, c.check_times, len(c.record)) + bytes(
        c.record
    )


def decode_check_transaction(payload: ReadBuffer) -> CheckTransaction:
    try:
        req_id, phys, qoff, times, n = _CHECK.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("CHECK_TRANSACTION frame shorter than its header") from None
    if len(payload) != _CHECK.size + n:
        raise CorruptFrameError(f"CHECK_TRANSACTION frame is {len(payload)} bytes, its fields say {_CHECK.size + n}")
    return CheckTransaction(req_id, phys, qoff, times, payload[_CHECK.size :])
