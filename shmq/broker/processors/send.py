"""SEND, SEND_BATCH and SEND_MULTI: route the records, store them with one put, answer
(RocketMQ's SendMessageProcessor).

The SENDs of a pass (up to the next other frame, so a SEND_BATCH never overtakes SENDs of its
queue) are gathered straight from the ring frames, no per-message objects, and stored with one
``MessageStore.put``; a long run of them is answered with one packed block of SEND_RESULT
frames. Every frame kind takes the store's one put path, so a record that its topic or the
store's put hooks refuse fails alone (a SEND_BATCH, a user's MessageBatch, fails whole).
"""

from __future__ import annotations

import logging
from itertools import accumulate, chain
from typing import TYPE_CHECKING

import numpy as np

from shmq.broker.answers import EncodedResult, Peer
from shmq.broker.processors.resend import first_copy
from shmq.broker.routes import Routes
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.errors import DiskFullError, ShmqError, StoreClosedError, plain_message
from shmq.store.write import plain_put
from shmq.store.write.hooks import PutRequest

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore

log = logging.getLogger("shmq.broker")

PACK_RESULTS_MIN = 8  # runs of SENDs at least this long are answered with packed frames
_ZERO_START = np.zeros(1, np.int64)
_NO_KEYS = np.empty(0, np.int64)
# key record numbers of a one-record batch with k keys (a SEND carries at most 8), shared read-only
_KEY_RECORDS = [np.zeros(k, np.int64) for k in range(9)]
for _a in (_ZERO_START, _NO_KEYS, *_KEY_RECORDS):
    _a.flags.writeable = False


def put_error_code(e: Exception) -> int:
    """The ERROR code for a put that failed whole."""
    if isinstance(e, (DiskFullError, StoreClosedError)):
        return P.SERVICE_NOT_AVAILABLE
    if isinstance(e, ValueError):
        return P.MESSAGE_ILLEGAL
    return P.SYSTEM_ERROR


class SendRun:
    """The SENDs of one pass (any topics and queues), gathered straight from the ring frames."""

    __slots__ = ("raws", "qids", "req_ids", "flags", "records", "tags", "keys")

    def __init__(self) -> None:
        self.raws: list[bytes] = []  # topic bytes as framed
        self.qids: list[int] = []  # as requested (-1: the broker picks)
        self.req_ids: list[int] = []
        self.flags: list[int] = []
        self.records: list[memoryview] = []
        self.tags: list[int] = []
        self.keys: list[tuple[int, ...]] = []

    def subset(self, rows: list[int]) -> SendRun:
        part = SendRun()
        for name in self.__slots__:
            src = getattr(self, name)
            setattr(part, name, [src[i] for i in rows])
        return part

    def batch(self) -> fmt.EncodedBatch:
        """The run as one batch: one copy of the records, dispatch data as arrays."""
        records, keys = self.records, self.keys
        n = len(records)
        if n == 1:  # the sync send: no copy, no accumulate
            k = keys[0]
            return fmt.EncodedBatch(
                bytes(records[0]),
                _ZERO_START,
                np.array(self.tags, np.int64),
                np.array(k, np.int64) if k else _NO_KEYS,
                _KEY_RECORDS[len(k)],
            )
        starts = np.fromiter(accumulate(map(len, records), initial=0), np.int64, n + 1)[:-1]
        counts = list(map(len, keys))
        key_hashes = np.fromiter(chain.from_iterable(keys), np.int64, sum(counts))
        key_records = np.repeat(np.arange(n, dtype=np.int64), counts)
        return fmt.EncodedBatch(b"".join(records), starts, np.array(self.tags, np.int64), key_hashes, key_records)


class SendProcessor:
    """Stores sends through the core's store and queues their answers."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.store = core.store
        self.wait_ns = core.config.wait_time_mills_in_send_queue * 1_000_000  # SYSTEM_BUSY past this
        self._wait_ms = core.config.wait_time_mills_in_send_queue
        self._host = core.store_host

    # ------------------------------------------------------------------ frames

    def send_batch(self, peer: Peer, view: memoryview, now: int) -> None:
        """A SEND_BATCH: the plain lane straight from the ring frame when it takes it, else
        decoded and put (the reference, same bytes and answers)."""
        route = None  # routed once per frame: the broker's choice of queue moves on once
        head = P.send_batch_head(view) if plain_put.FRAME_ENABLED else None
        if head is not None and now - head[1] <= self.wait_ns:
            # the columns first: a frame the decoder refuses is refused before it is routed
            arrays = P.send_batch_arrays(view, len(head[4]), head[5], head[6])
            if arrays is not None:
                route = Routes(self.core.resolve_topic).route(head[4], head[2])
                if not route[1] and self._batch_lane(peer, view, head, arrays, route[0]):
                    return
        b = P.decode_send_batch(view)
        if now - b.enqueue_ns > self.wait_ns:
            return self.reject_busy(peer, b.req_id, b.flags, now - b.enqueue_ns)
        qid, code, message = route or Routes(self.core.resolve_topic).route(b.topic, b.queue_id)
        if code:
            return self._error(peer, b.req_id, b.flags, code, message)
        try:
            r = self.store.put(PutRequest(b.batch, [b.topic], None, qid, user_batch=True), wait_flush=False)
        except Exception as e:  # noqa: BLE001 - answered as an error; logged if unexpected
            return self._put_failed(peer, b.req_id, b.flags, e, f"batch put to {b.topic}/{qid}")
        if r.refused is not None:
            return self._error(peer, b.req_id, b.flags, *r.reason(0))
        results = []
        if not b.flags & P.FLAG_ONEWAY:
            results.append(
                P.SendResultFrame(
                    b.req_id,
                    P.SEND_OK,
                    qid,
                    r.queue_offset,
                    r.wrote_offset,
                    r.store_timestamp,
                    self._host,
                    r.msg_num,
                    r.phys_offsets.tolist(),
                )
            )
        self.core.count(b.topic, qid, r.msg_num, r.wrote_bytes)
        self.core.answers.add(peer, r.end_offset, results)

    def _batch_lane(
        self,
        peer: Peer,
        view: memoryview,
        head: tuple[int, int, int, int, str, int, int, int],
        arrays: np.ndarray,
        qid: int,
    ) -> bool:
        """Store a SEND_BATCH's records from the ring in one compiled pass and queue its answer,
        encoded as the put writes it; False with nothing stored or answered."""
        req_id, _, _, flags, topic, count, _, size = head
        buf, phys = P.batch_result_buffer(count)
        taken = self.store.put_frame(topic, qid, view, arrays, size, phys)
        if taken is None:
            return False
        qoff, ts = taken
        first = int(phys[0])
        self.core.count(topic, qid, count, size)
        if not flags & P.FLAG_ONEWAY:
            P.fill_batch_result(buf, req_id, qid, qoff, first, ts, self._host, count)
            self.core.answers.add(peer, first + size, EncodedResult(buf))
        return True

    def send_multi(self, peer: Peer, view: memoryview, now: int) -> None:
        """A SEND_MULTI (records of many topics, each sent rarely), stored with one put.

        Records of a topic that cannot take them or with an illegal queue id get that error as
        their status, as do records the store refuses; the others still go in. Records left to
        the broker take one queue per topic per frame."""
        m = P.decode_send_multi(view)
        if now - m.enqueue_ns > self.wait_ns:
            return self.reject_busy(peer, m.req_id, m.flags, now - m.enqueue_ns)
        n = len(m.batch)
        topics, tix = m.topics, m.topic_idx
        status, qids, message = Routes(self.core.resolve_topic).route_records(topics, tix, m.queue_ids)
        rows = np.flatnonzero(status == 0)
        queue_offsets, phys = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        ts, end = 0, 0
        if len(rows):
            whole = len(rows) == n
            req = PutRequest(
                m.batch if whole else fmt.select_records(m.batch, rows),
                list(topics),
                m.topic_idx if whole else m.topic_idx[rows],
                qids if whole else qids[rows],
            )
            try:
                r = self.store.put(req, wait_flush=False)
            except Exception as e:
                if not isinstance(e, (ValueError, ShmqError)):
                    log.exception("put of %d records of %d topics failed", len(rows), len(topics))
                status[rows] = -put_error_code(e)
                message = plain_message(e)
            else:
                if r.refused is not None:
                    bad = r.refused != 0
                    status[rows[bad]] = [-r.refusals[k - 1][0] for k in r.refused[bad].tolist()]
                    message = message or r.refusals[int(r.refused[bad][0]) - 1][1]
                queue_offsets[rows], phys[rows], ts, end = (
                    r.queue_offsets,
                    r.phys_offsets,
                    r.store_timestamp,
                    r.end_offset,
                )
                stored = np.flatnonzero(status == 0)
                sizes = np.diff(m.batch.starts, append=len(m.batch.buf))
                if r.queue_rows is not None:  # its queues published from their table rows
                    self.core.touched_rows.add(r.queue_rows)
                self.core.count_records(
                    topics,
                    tix[stored].tolist(),
                    qids[stored].tolist(),
                    sizes[stored].tolist(),
                    touch=r.queue_rows is None,
                )
        if m.flags & P.FLAG_ONEWAY:
            return
        result = P.SendMultiResultFrame(m.req_id, ts, self._host, status, qids, queue_offsets, phys, message)
        if end:
            self.core.answers.add(peer, end, [result])
        else:  # nothing stored: nothing to flush first
            peer.out.append((P.SEND_MULTI_RESULT, P.encode_send_multi_result(result)))

    # ------------------------------------------------------------------ the SENDs of a pass

    def put_single(
        self,
        peer: Peer,
        req_id: int,
        queue_id: int,
        flags: int,
        tags_code: int,
        topic_raw: bytes,
        keys: tuple[int, ...],
        record: memoryview,
    ) -> None:
        """A SEND alone in its pass (the sync send's rhythm), or a resend: the same route, put and
        answer as ``put_run`` without the run's per-pass lists, which cost as much as the put itself."""
        topic = P.decode_topic(topic_raw)
        if flags & P.FLAG_RESEND and self._answer_first_copy(peer, req_id, flags, topic, record):
            return
        qid, code, message = Routes(self.core.resolve_topic).route(topic, queue_id)
        if code:
            return self._error(peer, req_id, flags, code, message)
        batch = fmt.EncodedBatch(
            bytes(record),
            _ZERO_START,
            np.array((tags_code,), np.int64),
            np.array(keys, np.int64) if keys else _NO_KEYS,
            _KEY_RECORDS[len(keys)],
        )
        req = PutRequest(batch, [topic], None, qid, inspect=_ZERO_START if flags & P.FLAG_INSPECT else None)
        try:
            r = self.store.put(req, wait_flush=False)
        except Exception as e:  # noqa: BLE001 - answered as an error; logged if unexpected
            return self._put_failed(peer, req_id, flags, e, f"put of a message to {topic}/{qid}")
        if r.refused is not None:
            return self._error(peer, req_id, flags, *r.reason(0))
        # a parked message (delay, transaction half) is counted where it was stored, answered as
        # sent to its own queue (RocketMQ answers the real topic and queue too)
        self.core.count(
            req.topics[0],
            int(req.queue_ids) if isinstance(req.queue_ids, int) else int(req.queue_ids[0]),
            1,
            r.wrote_bytes,
        )
        if not flags & P.FLAG_ONEWAY:
            self.core.answers.add(
                peer,
                r.end_offset,
                [
                    P.SendResultFrame(
                        req_id, P.SEND_OK, qid, r.queue_offset, r.wrote_offset, r.store_timestamp, self._host
                    )
                ],
            )

    def put_run(self, peer: Peer, run: SendRun, inspect: bool = False) -> None:
        """Store the SENDs of one pass, of any topics and queues, with one store put.

        A topic that cannot take them (bad name, not writable, auto-create off) answers its own
        SENDs with an error; the others still go in. SENDs that leave the queue to the broker
        take one queue per topic per pass, round robin over the passes."""
        routes = Routes(self.core.resolve_topic)
        names: dict[bytes, str] = {}
        keep = []
        queues = []
        for i, (raw, qid) in enumerate(zip(run.raws, run.qids)):
            name = names.get(raw)
            if name is None:
                name = names[raw] = P.decode_topic(raw)
            q, code, message = routes.route(name, qid)
            if code:
                self._error(peer, run.req_ids[i], run.flags[i], code, message)
                continue
            keep.append(i)
            queues.append((name, q))
        if keep:
            self._store_run(peer, run if len(keep) == len(run.req_ids) else run.subset(keep), queues, inspect)

    def _store_run(self, peer: Peer, run: SendRun, queues: list[tuple[str, int]], inspect: bool) -> None:
        n = len(run.records)
        first = queues[0]
        # a parked message is stored elsewhere than asked: the run is then put as separate queues
        one_queue = (n == 1 or all(q == first for q in queues)) and not inspect
        if one_queue:
            req = PutRequest(run.batch(), [first[0]], None, first[1])
        else:
            table: dict[str, int] = {}
            idx = np.fromiter((table.setdefault(t, len(table)) for t, _ in queues), np.int64, n)
            req = PutRequest(run.batch(), list(table), idx, np.fromiter((q for _, q in queues), np.int64, n))
            if inspect:
                req.inspect = np.flatnonzero(np.fromiter((f & P.FLAG_INSPECT for f in run.flags), np.int64, n))
        try:
            r = self.store.put(req, wait_flush=False)
        except Exception as e:  # noqa: BLE001 - answered as an error; logged if unexpected
            self._put_failed(peer, run.req_ids[0], run.flags[0], e, f"put of {n} messages to {first[0]}/{first[1]}")
            for req_id, f in zip(run.req_ids[1:], run.flags[1:]):
                self._error(peer, req_id, f, put_error_code(e), plain_message(e))
            return
        req_ids, flags, rows = run.req_ids, run.flags, None
        phys: np.ndarray | None = None
        qoffs: np.ndarray | None = None
        if r.refused is not None:
            for i in np.flatnonzero(r.refused).tolist():
                self._error(peer, req_ids[i], flags[i], *r.reason(i))
            ok = np.flatnonzero(r.refused == 0)
            if not len(ok):
                return
            rows = ok.tolist()
            req_ids, flags = [req_ids[i] for i in rows], [flags[i] for i in rows]
            phys, qoffs = r.phys_offsets[ok], r.queue_offsets[ok]
        ts, host, count = r.store_timestamp, self._host, self.core.count
        if one_queue:
            count(*first, r.msg_num, r.wrote_bytes)
            qid: int | np.ndarray = first[1]
        else:
            stored = range(n) if rows is None else rows
            records = run.records
            where = queues
            if inspect:  # parked messages are counted where they were stored
                tids, sqids = req.topic_ids().tolist(), req.queue_id_array().tolist()
                where = [(req.topics[t], q) for t, q in zip(tids, sqids)]
            for i in stored:
                count(*where[i], 1, len(records[i]))
            qid = np.fromiter((queues[i][1] for i in stored), np.int64, len(stored))
        k = len(req_ids)
        if k == 1 and one_queue:  # the sync send: no per-record arrays
            phys_l, qoffs_l = [r.wrote_offset], [r.queue_offset]
        else:
            if phys is None or qoffs is None:
                phys, qoffs = r.phys_offsets, r.queue_offsets
            if k >= PACK_RESULTS_MIN or not one_queue:  # one numpy fill and one ring copy for the whole run
                packed = P.pack_send_results(req_ids, flags, qid, qoffs, phys, ts, host)
                self.core.answers.add(peer, r.end_offset, packed if packed is not None else [])
                return
            phys_l, qoffs_l = phys.tolist(), qoffs.tolist()
        oneway = P.FLAG_ONEWAY
        results = [
            P.SendResultFrame(req_id, P.SEND_OK, first[1], qoffs_l[i], phys_l[i], ts, host)
            for i, (req_id, f) in enumerate(zip(req_ids, flags))
            if not f & oneway
        ]
        self.core.answers.add(peer, r.end_offset, results)

    def _answer_first_copy(self, peer: Peer, req_id: int, flags: int, topic: str, record: memoryview) -> bool:
        """Answer a resend whose message is stored already with that copy's result (held, as a
        put's answer, until it is flushed under SYNC_FLUSH); whether it was."""
        rec = first_copy(self.store, topic, record)
        if rec is None:
            return False
        self.core.stats["resends_answered"] += 1
        if not flags & P.FLAG_ONEWAY:
            result = P.SendResultFrame(
                req_id, P.SEND_OK, rec.queue_id, rec.queue_offset, rec.physical_offset, rec.store_timestamp, self._host
            )
            self.core.answers.add(peer, rec.physical_offset + rec.total_size, [result])
        return True

    # ------------------------------------------------------------------ errors

    def reject_busy(self, peer: Peer, req_id: int, flags: int, waited_ns: int) -> None:
        self.core.busy += 1
        if not flags & P.FLAG_ONEWAY:
            peer.out.append(
                (
                    P.ERROR,
                    P.encode_error(
                        req_id,
                        P.SYSTEM_BUSY,
                        f"broker busy: the request waited {waited_ns // 1_000_000} ms in the send "
                        f"queue, over waitTimeMillsInSendQueue = {self._wait_ms} ms (TIMEOUT_CLEAN_QUEUE); "
                        "send again later",
                    ),
                )
            )

    @staticmethod
    def _error(peer: Peer, req_id: int, flags: int, code: int, message: str) -> None:
        if not flags & P.FLAG_ONEWAY:
            peer.out.append((P.ERROR, P.encode_error(req_id, code, message)))

    def _put_failed(self, peer: Peer, req_id: int, flags: int, e: Exception, what: str) -> None:
        if not isinstance(e, (ValueError, ShmqError)):
            log.exception("%s failed", what)  # noqa: LOG004 - called from the put's except block
        self._error(peer, req_id, flags, put_error_code(e), plain_message(e))
