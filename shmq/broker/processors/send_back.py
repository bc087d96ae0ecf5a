"""SEND_BACK: messages a consumer did not consume go to its group's retry topic or DLQ
(RocketMQ's SendMessageProcessor.consumerSendMsgBack), all of a frame with one internal put.

Each message is named by its commitlog offset and size; the broker reads the record there and
checks it is a whole record a consumer of the group could have read, so a hostile or stale
offset gets an error status, never a crash or a copy of someone else's record. The answer is
a SEND_MULTI_RESULT: per message SEND_OK with where the copy went (the schedule queue of its
delay level, or the DLQ), or minus an error code; a frame the broker cannot take at all (not
decodable, a bad group, a replica) gets an ERROR.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from shmq.broker.answers import Peer
from shmq.broker.groups import check_group
from shmq.broker.processors.send import put_error_code
from shmq.broker.retry import consumed_record, send_back_record
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.send_back import decode_send_back
from shmq.errors import CorruptFrameError, ShmqError, plain_message
from shmq.model import system_topics as st

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore

log = logging.getLogger("shmq.broker")


class SendBackProcessor:
    def __init__(self, core: BrokerCore, levels: int) -> None:
        self.core = core
        self.levels = levels
        self.sent_back = 0  # messages stored under a retry topic
        self.dead = 0  # messages stored under a DLQ

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        try:
            sb = decode_send_back(view)
            check_group(sb.group)
        except (CorruptFrameError, ValueError) as e:  # answered, not dropped: the client may go on
            return self._error(
                peer,
                P.request_id(P.SEND_BACK, view),
                P.MESSAGE_ILLEGAL,
                f"messages sent back for a retry were refused: {e}",
            )
        if not self.core.config.is_master:
            return self._error(
                peer,
                sb.req_id,
                P.SERVICE_NOT_AVAILABLE,
                "a replica stores nothing of its own: messages to retry go to its master",
            )
        n = len(sb.offsets)
        status = np.zeros(n, np.int64)
        message = ""
        items, rows = [], []
        commitlog = self.core.store.commitlog
        for i, (offset, size, level) in enumerate(
            zip(sb.offsets.tolist(), sb.sizes.tolist(), sb.delay_levels.tolist())
        ):
            try:
                if not fmt.FIXED_OVERHEAD <= size <= fmt.MAX_RECORD_SIZE or offset < commitlog.min_offset:
                    raise ValueError(f"no record of {size} bytes at commitlog offset {offset}")
                raw = commitlog.data(offset, size)
                rec = consumed_record(raw, offset, size, sb.group)
                assert raw is not None
                items.append(send_back_record(raw, rec, sb.group, sb.max_reconsume_times, level, self.levels))
            except (ValueError, fmt.CorruptRecordError) as e:
                status[i] = -P.MESSAGE_ILLEGAL
                message = message or str(e)
                continue
            rows.append(i)
        qids, qoffs, phys = np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        ts, end = 0, 0
        if items:
            try:
                r = self.core.put_internal([(topic, 0, record) for topic, record in items], inspect=True)
            except Exception as e:
                if not isinstance(e, (ValueError, ShmqError)):
                    log.exception("storing %d messages sent back by group %r failed", len(items), sb.group)
                status[rows] = -put_error_code(e)
                message = plain_message(e)
            else:
                idx = np.array(rows, np.int64)
                if r.refused is not None:
                    bad = r.refused != 0
                    status[idx[bad]] = [-r.refusals[k - 1][0] for k in r.refused[bad].tolist()]
                    message = message or r.refusals[int(r.refused[bad][0]) - 1][1]
                qoffs[idx], phys[idx], ts, end = r.queue_offsets, r.phys_offsets, r.store_timestamp, r.end_offset
                qids[idx] = 0
                dlq = sum(1 for k, (topic, _) in enumerate(items) if status[rows[k]] == 0 and st.is_dlq_topic(topic))
                self.dead += dlq
                self.sent_back += int((status[idx] == 0).sum()) - dlq
        result = P.SendMultiResultFrame(sb.req_id, ts, self.core.store_host, status, qids, qoffs, phys, message)
        if end:
            self.core.answers.add(peer, end, [result])
        else:
            peer.out.append((P.SEND_MULTI_RESULT, P.encode_send_multi_result(result)))

    @staticmethod
    def _error(peer: Peer, req_id: int, code: int, message: str) -> None:
        peer.out.append((P.ERROR, P.encode_error(req_id, code, message)))
