"""BatchSender: a producer's SEND_BATCH and SEND_MULTI frames, encoded and submitted.

Kept apart from ``Producer`` (its API, hooks and request table) because batches have rules of
their own: a user's batch is one frame with one answer (or, for the accumulator's batches, an
answer split per message), and what the accumulator hands over goes out as SEND_BATCH per
queue when a group is big enough, else mixed with other topics' small groups in SEND_MULTI
frames that the broker stores with one put. The producer hands it its encoder and its request
table (``Requests``: submit a request and await its answer, write a oneway one), and it reads
the producer's settings at each send, so that changing ``send_msg_timeout`` on a running
producer applies here as to single sends.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

import numpy as np

from shmq.client.connection import next_request_id
from shmq.client.producer.accumulator import MIN_BATCH, RECORD_OVERHEAD, Group, PendingSend, settle
from shmq.client.producer.encoder import MessageEncoder
from shmq.codec import frames as P
from shmq.errors import MessageTooLargeError, broker_error
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult, SendStatus, split_results

if TYPE_CHECKING:
    from shmq.client.producer.producer import Fill, Producer

log = logging.getLogger(__name__)
R = TypeVar("R")
MAX_BATCH_BYTES = 4 * 1024 * 1024
MAX_CACHED_QUEUES = 65536  # MessageQueues multi_results keeps for the next answers
MULTI_MAX_BYTES = 1024 * 1024  # a SEND_MULTI frame holds about this much (the broker takes up to 4 MiB)
SEND_STATUS = {
    P.SEND_OK: SendStatus.SEND_OK,
    P.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    P.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    P.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


def _settle(sent: Future[list[SendResult | Exception]], futures: Sequence[PendingSend | None]) -> None:
    """Hand each accumulated message of a batch its own SendResult (or the send's error)."""
    error = sent.exception()
    settle(futures, () if error is not None else sent.result(), error)


def _fail(future: PendingSend | None, error: Exception, topic: str) -> None:
    """An accumulated message that could not be written: its future fails; a oneway one is logged."""
    if future is None:
        log.warning("a oneway message to %s was not sent: %s", topic, error)
    elif not future.done():
        future.set_exception(error)


def multi_results(
    r: P.SendMultiResultFrame,
    topic_idx: np.ndarray,
    uniq_keys: list[str],
    topics: list[str],
    broker_name: str,
    queues: dict[tuple[str, str, int], MessageQueue],
) -> list[SendResult | Exception]:
    """One SendResult (or the broker's error) per record of a SEND_MULTI answer.

    With 1,250 topics nearly every record of a frame is of another queue: its MessageQueue (a
    frozen dataclass, ~0.7 us to make) is kept in ``queues`` across frames (at most
    MAX_CACHED_QUEUES), so a record costs its SendResult only."""
    if len(queues) > MAX_CACHED_QUEUES:
        queues.clear()
    out: list[SendResult | Exception] = []
    ok, ts, host = SendStatus.SEND_OK, r.store_timestamp, r.store_host
    for st, k, q, qoff, ph, uniq in zip(
        r.statuses.tolist(),
        topic_idx.tolist(),
        r.queue_ids.tolist(),
        r.queue_offsets.tolist(),
        r.phys_offsets.tolist(),
        uniq_keys,
    ):
        if st < 0:
            out.append(broker_error(-st, r.message))
            continue
        topic = topics[k]
        mq = queues.get((topic, broker_name, q))
        if mq is None:
            mq = queues[(topic, broker_name, q)] = MessageQueue(topic, broker_name, q)
        out.append(SendResult(SEND_STATUS.get(st, ok), uniq, None, mq, qoff, ts, 1, [ph], host))
    return out


class Submit(Protocol):
    def __call__(self, kind: int, size: int, fill: Fill, build: Callable[[Any], R], deadline: float) -> Future[R]: ...


@dataclass(frozen=True, slots=True)
class Requests:
    """The producer's request table, as a batch uses it: ``submit`` writes a request whose
    future completes with ``build(answer)`` (retried as single sends are), ``write`` writes a
    oneway one, ``born_host`` is the BORNHOST of the records written now."""

    submit: Submit
    write: Callable[[int, int, Fill, int, float], None]
    born_host: Callable[[], int]


class BatchSender:
    def __init__(self, producer: Producer, encoder: MessageEncoder, requests: Requests) -> None:
        self._producer = producer  # its settings, read at each send
        self._encoder = encoder
        self._requests = requests
        self._queues: dict[tuple[str, str, int], MessageQueue] = {}  # multi_results' MessageQueues

    @overload
    def submit(
        self,
        msgs: Sequence[Message] | MessageBatch,
        qid: int,
        timeout: float | None,
        oneway: Literal[False] = False,
        split: bool = False,
    ) -> Future[Any]: ...

    @overload
    def submit(
        self, msgs: Sequence[Message] | MessageBatch, qid: int, timeout: float | None, oneway: bool, split: bool = False
    ) -> Future[Any] | None: ...

    def submit(
        self,
        msgs: Sequence[Message] | MessageBatch,
        qid: int,
        timeout: float | None,
        oneway: bool = False,
        split: bool = False,
    ) -> Future[Any] | None:
        """Encode and write one SEND_BATCH; its future gives a SendResult, or with ``split`` a list,
        one SendResult (or the broker's error) per message."""
        producer, requests = self._producer, self._requests
        enc = self._encoder.encode_batch(msgs, int(time.time() * 1000), requests.born_host())
        batch = enc.batch
        total = len(batch.buf)
        if total > MAX_BATCH_BYTES:
            raise MessageTooLargeError(
                f"batch is {total} bytes encoded; at most {MAX_BATCH_BYTES} "
                "(cut it with shmq.client.producer.producer.split_batch)"
            )
        deadline = time.monotonic() + (producer.send_msg_timeout if timeout is None else timeout)
        size = P.send_batch_size(len(enc.topic_b), len(batch), len(batch.key_hashes), total)
        flags = P.FLAG_ONEWAY if oneway else 0

        def fill(view: memoryview, req_id: int) -> None:
            p = P.encode_send_batch_header(
                view,
                req_id,
                time.monotonic_ns(),
                qid,
                flags,
                enc.topic_b,
                batch.starts,
                batch.tags_codes,
                batch.key_hashes,
                batch.key_records,
                total,
            )
            view[p : p + total] = batch.buf

        if oneway:
            requests.write(P.SEND_BATCH, size, fill, next_request_id(), deadline)
            return None
        topic = enc.topic_b.decode()
        broker_name = producer.broker_name

        def build(r: P.SendResultFrame) -> SendResult | list[SendResult]:
            phys = r.phys_offsets or [r.phys_offset]
            status, mq = SEND_STATUS.get(r.status, SendStatus.SEND_OK), MessageQueue(topic, broker_name, r.queue_id)
            if split:
                return split_results(
                    SendResult,
                    status,
                    enc.uniq_keys.astype(str).tolist(),
                    mq,
                    r.queue_offset,
                    r.store_timestamp,
                    phys,
                    r.store_host,
                )
            return SendResult(
                status,
                lambda: enc.msg_ids,
                None,
                mq,
                r.queue_offset,
                r.store_timestamp,
                r.count,
                list(phys),
                r.store_host,
            )

        return requests.submit(P.SEND_BATCH, size, fill, build, deadline)

    def send_accumulated(self, groups: list[Group]) -> None:
        """The accumulator's flush: a SEND_BATCH per group of at least MIN_BATCH messages, its
        result split among the messages' futures. Smaller groups (many topics, each sent
        rarely) go together in SEND_MULTI frames of up to MULTI_MAX_BYTES, which the broker
        stores with one put whatever their topics."""
        mixed: list[tuple[Message, int, PendingSend | None]] = []
        for topic, qid, msgs, futures in groups:
            if len(msgs) < MIN_BATCH:
                mixed.extend(zip(msgs, repeat(qid), futures))
                continue
            try:
                batch_future = self.submit(msgs, qid, None, oneway=all(f is None for f in futures), split=True)
            except Exception as e:  # noqa: BLE001 - each future gets the error
                for f in futures:
                    _fail(f, e, topic)
                continue
            if batch_future is not None:
                batch_future.add_done_callback(functools.partial(_settle, futures=futures))
        size, start = 0, 0
        for i, (msg, _, _) in enumerate(mixed):
            size += len(msg.body) + RECORD_OVERHEAD
            if size >= MULTI_MAX_BYTES or i == len(mixed) - 1:
                self._send_multi(mixed[start : i + 1])
                size, start = 0, i + 1

    def _send_multi(self, items: list[tuple[Message, int, PendingSend | None]]) -> None:
        """Encode and write one SEND_MULTI; each message's future gets its own SendResult."""
        producer, requests = self._producer, self._requests
        msgs, qids, futures = zip(*items)
        try:
            enc = self._encoder.encode_mixed(msgs, int(time.time() * 1000), requests.born_host())
            batch = enc.batch
            deadline = time.monotonic() + producer.send_msg_timeout
            size = P.send_multi_size(enc.topics_b, len(batch), len(batch.key_hashes), len(batch.buf))
            qid_arr = np.array(qids, np.int64)
            oneway = all(f is None for f in futures)

            def fill(view: memoryview, req_id: int) -> None:
                p = P.encode_send_multi_header(
                    view,
                    req_id,
                    time.monotonic_ns(),
                    P.FLAG_ONEWAY if oneway else 0,
                    enc.topics_b,
                    enc.topic_idx,
                    qid_arr,
                    batch,
                )
                view[p : p + len(batch.buf)] = batch.buf

            if oneway:
                requests.write(P.SEND_MULTI, size, fill, next_request_id(), deadline)
                return
            topics = [t.decode() for t in enc.topics_b]
            broker_name = producer.broker_name

            def build(r: P.SendMultiResultFrame) -> list[SendResult | Exception]:
                return multi_results(r, enc.topic_idx, enc.uniq_keys, topics, broker_name, self._queues)

            sent = requests.submit(P.SEND_MULTI, size, fill, build, deadline)
        except Exception as e:  # noqa: BLE001 - each future gets the error
            for m, f in zip(msgs, futures):
                _fail(f, e, m.topic)
            return
        sent.add_done_callback(lambda bf: _settle(bf, list(futures)))
