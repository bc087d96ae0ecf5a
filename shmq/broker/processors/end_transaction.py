"""END_TRANSACTION: a producer commits, rolls back or reports unknown for a half message
(RocketMQ's EndTransactionProcessor).

The frame is checked against what the broker stored (the half queue offset must hold a half
at the given commitlog offset, with that msg id, of the sender's producer group); anything
else is answered with an ERROR, never taken for another half. A frame that does not decode is
answered with an ERROR too (its request id is the first 8 bytes) and changes nothing. Producers
send END oneway; a sender that asks for an answer gets a SEND_RESULT (the commit's place, or
offsets -1) once the put is flushed under SYNC_FLUSH, like a send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shmq.broker.answers import Peer
from shmq.codec import frames as P
from shmq.codec.transaction_frames import decode_end_transaction
from shmq.errors import CorruptFrameError, DiskFullError, StoreClosedError, plain_message

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore
    from shmq.broker.transaction import TransactionalMessageService


class EndTransactionProcessor:
    def __init__(self, core: BrokerCore, service: TransactionalMessageService) -> None:
        self.core = core
        self.service = service

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        try:
            e = decode_end_transaction(view)
        except CorruptFrameError as err:
            req_id = P.request_id(P.END_TRANSACTION, view)  # too short for one: CorruptFrameError drops the client
            peer.out.append((P.ERROR, P.encode_error(req_id, P.MESSAGE_ILLEGAL, f"malformed END_TRANSACTION: {err}")))
            return
        oneway = bool(e.flags & P.FLAG_ONEWAY)
        try:
            r = self.service.end(peer.group, e)
        except (DiskFullError, StoreClosedError) as err:  # the half stays open: the check asks again later
            return self._error(peer, e.req_id, oneway, P.SERVICE_NOT_AVAILABLE, plain_message(err))
        if r.code:
            return self._error(peer, e.req_id, oneway, r.code, r.message)
        if oneway:
            return
        result = P.SendResultFrame(e.req_id, P.SEND_OK, -1, -1, -1, 0, self.core.store_host)
        put = r.put
        if put is None:  # unknown: nothing written
            peer.out.append((P.SEND_RESULT, P.encode_send_result(result)))
            return
        result.store_timestamp = put.store_timestamp
        if put.msg_num > 1:  # committed: where its message became visible
            result.queue_id = r.queue_id
            result.queue_offset = int(put.queue_offsets[1])
            result.phys_offset = int(put.phys_offsets[1])
        self.core.answers.add(peer, put.end_offset, [result])

    @staticmethod
    def _error(peer: Peer, req_id: int, oneway: bool, code: int, message: str) -> None:
        if not oneway:
            peer.out.append((P.ERROR, P.encode_error(req_id, code, message)))
