"""Producer: encodes messages straight into its channel's request ring and matches answers to futures.

A response-reader thread parks on the client doorbell, completes futures by request id,
fails them all with BrokerGoneError when the broker's liveness semaphore says it died, and
expires requests past their deadline. After a broker restart the next send attaches again.
"""
from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from shmq import protocol as P
from shmq.errors import (BrokerGoneError, BrokerNotFoundError, ControlTimeoutError, CorruptFrameError,
                         MessageTooLargeError, ShmqError)
from shmq.message import Message, MessageQueue, SendResult, SendStatus
from shmq.ring.channel import Channel, broker_bell_name
from shmq.ring.control import Attach, ControlQueue, Detach, new_client_id
from shmq.ring.doorbell import Doorbell, park, wake
from shmq.ring.framing import CONSUMER, PRODUCER
from shmq.ring.liveness import Liveness, Watch
from shmq.ring.state import StateReader
from shmq.store import format as fmt

log = logging.getLogger(__name__)

DEFAULT_RING_BYTES = 16 * 1024 * 1024  # a 4 MiB message or batch must fit in half a ring
MAX_BATCH_BYTES = 4 * 1024 * 1024
DEFAULT_QUEUE_NUMS = 4  # what the broker auto-creates (defaultTopicQueueNums)
_STATUS = {P.SEND_OK: SendStatus.SEND_OK, P.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           P.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT, P.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
_CHECK_S = 0.05

Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


class BrokerError(ShmqError):
    """The broker refused a request; ``code`` is RocketMQ's ResponseCode number."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"broker error {code}: {message}")
        self.code = code


class BrokerBusyError(BrokerError):
    """SYSTEM_BUSY after every retry: the broker could not keep up (waitTimeMillsInSendQueue)."""


class SendTimeoutError(ShmqError, TimeoutError):
    """No answer within sendMsgTimeout (after retries)."""


class SelectMessageQueueByHash:
    """Same ``arg`` (an order id) -> same queue, so its messages stay in order."""

    def __call__(self, queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        h = arg if isinstance(arg, int) else zlib.crc32(str(arg).encode())
        return queues[abs(h) % len(queues)]


class SelectMessageQueueByRandom:
    def __call__(self, queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return random.choice(queues)


@dataclass
class _Encoded:
    """A message checked and encoded, ready to be written into a ring slot."""

    topic: str
    topic_b: bytes
    body: bytes
    props_b: bytes
    sysflag: int
    flag: int
    crc: int
    tags_code: int
    key_hashes: list[int]
    uniq: str

    @property
    def record_len(self) -> int:
        return fmt.record_size(len(self.body), len(self.topic_b), len(self.props_b))


@dataclass(eq=False)
class _Pending:
    future: Future
    resend: Callable[[], None]
    build: Callable[[P.SendResultFrame], SendResult]
    deadline: float  # of the whole send (sendMsgTimeout)
    attempt_deadline: float
    retries_left: int


class _Session:
    """One attachment to one broker incarnation."""

    def __init__(self, name: str, client_id: int, liveness: Liveness, state: StateReader, channel: Channel,
                 broker: Watch, store_host: int) -> None:
        self.name = name
        self.client_id = client_id
        self.liveness = liveness
        self.state = state
        self.channel = channel
        self.broker = broker
        self.store_host = store_host
        self.alive = True
        self.control_key = int(state.view.header[0]["control_key"])

    def close(self, detach: bool) -> None:
        if detach and self.broker.is_alive():
            try:
                ControlQueue.open(self.control_key).call(Detach(self.client_id, next(_req_ids)), timeout=1.0)
            except (ShmqError, OSError):
                pass
        self.alive = False
        self.channel.close()
        self.state.close()
        self.liveness.release()


_req_ids = itertools.count(1)


def split_batch(msgs: Sequence[Message], limit: int = MAX_BATCH_BYTES) -> list[list[Message]]:
    """Cut a list into batches whose encoded size stays under ``limit`` (RocketMQ's ListSplitter)."""
    out: list[list[Message]] = []
    cur: list[Message] = []
    size = 0
    for m in msgs:
        props = sum(len(k) + len(v) + 2 for k, v in (m.properties or {}).items())
        n = fmt.FIXED_OVERHEAD + len(m.body) + len(m.topic) + props + len(m.tags or "") + len(m.keys or "") + 64
        if n > limit:
            raise MessageTooLargeError(f"one message of about {n} bytes is over the batch limit {limit}")
        if cur and size + n > limit:
            out.append(cur)
            cur, size = [], 0
        cur.append(m)
        size += n
    if cur:
        out.append(cur)
    return out


class Producer:
    """RocketMQ's DefaultMQProducer over a shared-memory channel."""

    def __init__(self, group: str, broker: str | None = None, *, send_msg_timeout: float = 3.0,
                 retry_times_when_send_failed: int = 2, compress_msg_body_over_howmuch: int = 4096,
                 max_message_size: int = fmt.MAX_MESSAGE_SIZE, ring_bytes: int = DEFAULT_RING_BYTES,
                 start_timeout: float = 3.0) -> None:
        self.group = group
        self.broker_name = broker or os.environ.get("SHMQ_BROKER") or "default"
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_over = compress_msg_body_over_howmuch
        self.max_message_size = max_message_size
        self.ring_bytes = ring_bytes
        self.start_timeout = start_timeout
        self._uniq = fmt.UniqKeyGenerator()
        self._lock = threading.Lock()  # request-ring writes and session changes
        self._pending: dict[int, _Pending] = {}
        self._session: _Session | None = None
        self._started = False
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "Producer":
        """Attach to the broker; ``BrokerNotFoundError`` within ``start_timeout`` if none runs."""
        with self._lock:
            self._connect(time.monotonic() + self.start_timeout)
        self._started = True
        return self

    def shutdown(self) -> None:
        """Detach and release everything; requests still waiting fail."""
        self._started = False
        with self._lock:
            s, self._session = self._session, None
        if s is not None:
            s.alive = False
            s.channel.client_bell.ring()
            self._reader.join(2.0)
            s.close(detach=True)
        self._fail_all(ShmqError("the producer was shut down"))
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __enter__(self) -> "Producer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _connect(self, deadline: float) -> _Session:
        """Attach (caller holds the lock); waits for a broker to appear until ``deadline``."""
        last = "no state segment"
        while True:
            try:
                return self._attach_once(deadline)
            except (BrokerNotFoundError, BrokerGoneError, ControlTimeoutError) as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise BrokerNotFoundError(
                    f"no broker named {self.broker_name!r} is serving ({last}); start one with "
                    f"`shmq broker --store DIR --name {self.broker_name}`")
            time.sleep(0.02)

    def _attach_once(self, deadline: float) -> _Session:
        state = StateReader.open(self.broker_name)
        try:
            h = state.view.header[0]
            broker = Watch(int(h["alive_key"]))
            if not broker.is_alive():
                raise BrokerNotFoundError("the last broker of this name died")
            control = ControlQueue.open(int(h["control_key"]))
            liveness = Liveness.hold()
        except BaseException:
            state.close()
            raise
        client_id = new_client_id()
        try:
            req = Attach(client_id, next(_req_ids), os.getpid(), liveness.key, self.ring_bytes,
                         {"role": "producer", "group": self.group})
            control.send_request(req, timeout=max(0.0, deadline - time.monotonic()))
            bell = Doorbell.open(broker_bell_name(self.broker_name))
            bell.ring()
            bell.close()
            reply = control.recv_reply(client_id, req.req_id, max(0.05, deadline - time.monotonic()))
            if not reply.ok:
                raise ShmqError(f"broker {self.broker_name!r} refused to attach: {reply.body.get('error')}")
            channel = Channel.open(self.broker_name, client_id)
        except BaseException:
            liveness.release()
            state.close()
            raise
        s = _Session(self.broker_name, client_id, liveness, state, channel, broker, int(reply.body.get("store_host", 0)))
        self._session = s
        self._reader = threading.Thread(target=self._read_loop, args=(s,), name=f"shmq-producer-{client_id}", daemon=True)
        self._reader.start()
        return s

    # ------------------------------------------------------------------ public API

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues (the auto-create default before the topic exists)."""
        with self._lock:
            s = self._live_session(time.monotonic() + self.send_msg_timeout)

        def count(v) -> int:
            slot = v.topic_slot(topic)
            return int(v.topics[slot]["write_queues"]) if slot is not None else DEFAULT_QUEUE_NUMS
        n = s.state.read(count)
        return [MessageQueue(topic, self.broker_name, q) for q in range(n)]

    def send(self, msg: Message, selector: Selector | None = None, arg: Any = None,
             timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer (retried on busy/timeout within the timeout)."""
        fut = self._submit_one(msg, selector, arg, timeout, oneway=False)
        return fut.result()

    def send_async(self, msg: Message, callback: Callable[[Any], None] | None = None,
                   selector: Selector | None = None, arg: Any = None, timeout: float | None = None) -> Future:
        """Send without waiting; the Future gives the SendResult; ``callback(result_or_exception)`` if given."""
        try:
            fut = self._submit_one(msg, selector, arg, timeout, oneway=False)
        except (ShmqError, TimeoutError) as e:
            fut = Future()
            fut.set_exception(e)
        if callback is not None:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="shmq-send-callback")
            executor = self._executor
            fut.add_done_callback(lambda f: executor.submit(callback, f.exception() or f.result()))
        return fut

    def send_oneway(self, msg: Message, selector: Selector | None = None, arg: Any = None) -> None:
        """Fire and forget: no answer, no retry."""
        self._submit_one(msg, selector, arg, None, oneway=True)

    def send_batch(self, msgs: Sequence[Message], selector: Selector | None = None, arg: Any = None,
                   timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one batch (<= 4 MiB, see ``split_batch``); one SendResult."""
        if not msgs:
            raise ValueError("send_batch needs at least one message")
        topic = msgs[0].topic
        encoded = []
        for m in msgs:
            if not isinstance(m, Message):
                raise TypeError(f"send_batch takes Message objects, got {type(m).__name__}")
            if m.topic != topic:
                raise ValueError(f"a batch must be of one topic: {m.topic!r} != {topic!r}")
            if m.delay_level > 0:
                raise ValueError("delayed messages cannot be sent in a batch")
            encoded.append(self._encode(m))
        total = sum(e.record_len for e in encoded)
        if total > MAX_BATCH_BYTES:
            raise MessageTooLargeError(f"batch is {total} bytes encoded; at most {MAX_BATCH_BYTES} "
                                       "(cut it with shmq.producer.split_batch)")
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        qid = self._choose_queue(msgs[0], selector, arg, deadline)
        starts, pos = [], 0
        key_hashes, key_records = [], []
        for i, e in enumerate(encoded):
            starts.append(pos)
            pos += e.record_len
            key_hashes.extend(e.key_hashes)
            key_records.extend([i] * len(e.key_hashes))
        tags_codes = [e.tags_code for e in encoded]
        size = P.send_batch_size(len(encoded[0].topic_b), len(encoded), len(key_hashes), total)

        def fill(view, req_id: int) -> None:
            p = P.encode_send_batch_header(view, req_id, time.monotonic_ns(), qid, 0, encoded[0].topic_b, starts,
                                           tags_codes, key_hashes, key_records, total)
            for e in encoded:
                p += fmt.pack_message_into(view, p, e.topic_b, e.body, e.props_b, e.crc, flag=e.flag,
                                           sysflag=e.sysflag, born_timestamp=int(time.time() * 1000),
                                           born_host=self._born_host())

        def build(r: P.SendResultFrame) -> SendResult:
            phys = r.phys_offsets or [r.phys_offset]
            return SendResult(_STATUS.get(r.status, SendStatus.SEND_OK), ",".join(e.uniq for e in encoded),
                              ",".join(fmt.offset_msg_id(r.store_host, p) for p in phys),
                              MessageQueue(topic, self.broker_name, r.queue_id), r.queue_offset, r.store_timestamp,
                              r.count, list(phys))
        return self._submit(P.SEND_BATCH, size, fill, build, deadline).result()

    # ------------------------------------------------------------------ encoding

    def _born_host(self) -> int:
        s = self._session
        return s.client_id if s is not None else os.getpid()

    def _encode(self, msg: Message) -> _Encoded:
        body = msg.body
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"message body must be bytes, got {type(body).__name__}")
        topic_b = fmt.check_topic(msg.topic)
        if len(body) > self.max_message_size:
            raise MessageTooLargeError(f"message body is {len(body)} bytes; maxMessageSize is {self.max_message_size}")
        sysflag = 0
        if len(body) > self.compress_over:
            packed = zlib.compress(body, 5)
            if len(packed) < len(body):
                body, sysflag = packed, fmt.FLAG_COMPRESSED
        uniq = self._uniq.next()
        props_b = fmt.encode_properties(msg.build_properties(uniq))
        topic = msg.topic
        keys = [fmt.index_key_hash(topic, uniq)] + [fmt.index_key_hash(topic, k) for k in fmt.split_keys(msg.keys)]
        return _Encoded(topic, topic_b, body, props_b, sysflag, msg.flag, fmt.body_crc(body), fmt.tags_code(msg.tags),
                        keys, uniq)

    def _choose_queue(self, msg: Message, selector: Selector | None, arg: Any, deadline: float) -> int:
        if selector is None:
            return -1
        queues = self.fetch_publish_queues(msg.topic)
        mq = selector(queues, msg, arg)
        qid = mq.queue_id if isinstance(mq, MessageQueue) else int(mq)
        if not 0 <= qid < len(queues):
            raise ValueError(f"selector chose queue {qid}; topic {msg.topic!r} has {len(queues)}")
        return qid

    def _submit_one(self, msg: Message, selector: Selector | None, arg: Any, timeout: float | None,
                    oneway: bool) -> Future:
        if not isinstance(msg, Message):
            raise TypeError(f"send takes a Message, got {type(msg).__name__}")
        e = self._encode(msg)
        deadline = time.monotonic() + (self.send_msg_timeout if timeout is None else timeout)
        qid = self._choose_queue(msg, selector, arg, deadline)
        size = P.send_size(len(e.topic_b), len(e.key_hashes), e.record_len)
        flags = P.FLAG_ONEWAY if oneway else 0

        def fill(view, req_id: int) -> None:
            p = P.encode_send_header(view, req_id, time.monotonic_ns(), qid, flags, e.tags_code, e.topic_b,
                                     e.key_hashes, e.record_len)
            fmt.pack_message_into(view, p, e.topic_b, e.body, e.props_b, e.crc, flag=e.flag, sysflag=e.sysflag,
                                  born_timestamp=int(time.time() * 1000), born_host=self._born_host())

        if oneway:
            with self._lock:
                self._write(P.SEND, size, fill, next(_req_ids), deadline)
            return None  # type: ignore[return-value]

        def build(r: P.SendResultFrame) -> SendResult:
            return SendResult(_STATUS.get(r.status, SendStatus.SEND_OK), e.uniq,
                              fmt.offset_msg_id(r.store_host, r.phys_offset),
                              MessageQueue(e.topic, self.broker_name, r.queue_id), r.queue_offset, r.store_timestamp,
                              1, [r.phys_offset])
        return self._submit(P.SEND, size, fill, build, deadline)

    # ------------------------------------------------------------------ requests and retries

    def _submit(self, kind: int, size: int, fill: Callable, build: Callable, deadline: float) -> Future:
        fut: Future = Future()
        attempts = self.retry_times_when_send_failed + 1
        per_attempt = (deadline - time.monotonic()) / attempts
        p = _Pending(fut, lambda: None, build, deadline, 0.0, self.retry_times_when_send_failed)

        def attempt() -> None:
            req_id = next(_req_ids)
            p.attempt_deadline = min(deadline, time.monotonic() + per_attempt)
            self._pending[req_id] = p
            try:
                with self._lock:
                    self._write(kind, size, fill, req_id, deadline)
            except BaseException:
                self._pending.pop(req_id, None)
                raise
        p.resend = attempt
        attempt()
        return fut

    def _live_session(self, deadline: float) -> _Session:
        s = self._session
        if s is None or not s.alive:
            if not self._started:
                raise ShmqError("the producer is not started (call start())")
            try:
                s = self._connect(deadline)
            except BrokerNotFoundError as e:
                raise BrokerGoneError(f"broker {self.broker_name!r} is gone and did not come back: {e}") from None
        return s

    def _write(self, kind: int, size: int, fill: Callable, req_id: int, deadline: float) -> None:
        """Encode one frame straight into the request ring (caller holds the lock) and ring the broker."""
        s = self._live_session(deadline)
        ring = s.channel.requests
        try:
            view = ring.reserve(kind, size)
        except ValueError:
            raise MessageTooLargeError(f"request of {size} bytes does not fit the channel ring") from None
        while view is None:
            if not s.alive:
                raise BrokerGoneError(f"broker {self.broker_name!r} died")
            if time.monotonic() > deadline:
                raise SendTimeoutError(f"the request ring stayed full for {self.send_msg_timeout} s: broker overloaded?")
            time.sleep(50e-6)
            view = ring.reserve(kind, size)
        fill(view, req_id)
        ring.commit()
        wake(ring, CONSUMER, s.channel.broker_bell)

    def _retry(self, p: _Pending, error: Exception) -> None:
        """Retry ``p`` if it has attempts and time left, else fail it with ``error``."""
        if p.retries_left > 0 and time.monotonic() < p.deadline and self._started:
            p.retries_left -= 1
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="shmq-send-retry")
            self._executor.submit(self._resend, p, error)
        elif not p.future.done():
            p.future.set_exception(error)

    def _resend(self, p: _Pending, error: Exception) -> None:
        try:
            p.resend()
        except Exception as e:
            if not p.future.done():
                p.future.set_exception(e if not isinstance(e, BrokerGoneError) else error)

    # ------------------------------------------------------------------ responses

    def _read_loop(self, s: _Session) -> None:
        ring = s.channel.responses
        bell = s.channel.client_bell
        next_check = time.monotonic() + _CHECK_S
        try:
            while s.alive:
                frames = ring.read_batch(256)
                if frames:
                    for kind, view in frames:
                        self._on_response(kind, view)
                    del frames, view
                    ring.release()
                    wake(ring, PRODUCER, s.channel.broker_bell)
                else:
                    park(ring.has_data, [(ring, CONSUMER)], bell, _CHECK_S, spin=0.0)
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + _CHECK_S
                    if not s.broker.is_alive():
                        self._broker_died(s, "its liveness semaphore was released")
                        return
                    self._expire(now)
        except CorruptFrameError as e:
            self._broker_died(s, f"it wrote a malformed response: {e}")

    def _on_response(self, kind: int, view) -> None:
        if kind == P.SEND_RESULT:
            r = P.decode_send_result(view)
            p = self._pending.pop(r.req_id, None)
            if p is not None and not p.future.done():
                p.future.set_result(p.build(r))
        elif kind == P.ERROR:
            err = P.decode_error(view)
            p = self._pending.pop(err.req_id, None)
            if p is None:
                return
            if err.code == P.SYSTEM_BUSY:
                self._retry(p, BrokerBusyError(err.code, err.message))
            elif not p.future.done():
                p.future.set_exception(BrokerError(err.code, err.message))
        elif kind == P.WAKE:
            P.decode_wake(view)
        else:
            raise CorruptFrameError(f"frame kind {kind} is not a response")

    def _expire(self, now: float) -> None:
        for req_id, p in list(self._pending.items()):
            if now >= p.attempt_deadline and self._pending.pop(req_id, None) is p:
                self._retry(p, SendTimeoutError(f"no answer from broker {self.broker_name!r} within "
                                                f"{self.send_msg_timeout} s"))

    def _broker_died(self, s: _Session, why: str) -> None:
        log.warning("broker %r went away: %s", self.broker_name, why)
        s.alive = False
        with self._lock:
            if self._session is s:
                self._session = None
            s.close(detach=False)
        self._fail_all(BrokerGoneError(f"broker {self.broker_name!r} went away ({why}); "
                                       "the next send attaches again once it restarts"))

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(error)
