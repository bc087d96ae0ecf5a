"""Driving the broker's POP through the core: join a POP group, put messages, pop, ack."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.broker.groups import POP
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.store.message_store import MessageStore

from .conftest import SMALL

_req = iter(range(1, 1 << 40))
_crashed: set[BrokerCore] = set()


@contextmanager
def open_core(store_dir: str, **config: object) -> Iterator[BrokerCore]:
    """A core over a real store; at the end shut down as the broker does (pop log closed)."""
    store = MessageStore(store_dir, dict(SMALL, **config)).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(dict(SMALL, **config)))
    except BaseException:
        store.shutdown()
        raise
    try:
        yield core
    finally:
        if core not in _crashed:
            core.persist()
            store.shutdown()


def crash(core: BrokerCore) -> None:
    """What a SIGKILL leaves: files as written, nothing flushed or closed in order."""
    if core.pop_store is not None:
        os.close(core.pop_store.fd)
    core.store.shutdown()
    _crashed.add(core)


def join(core: BrokerCore, peer: Peer, group: str = "wg", subs: dict | None = None) -> None:
    core.consumers.join(group, peer.client_id, POP, subs if subs is not None else {"Jobs": "*"})


def put(core: BrokerCore, topic: str, bodies: list[bytes], qid: int | None = None, tags: str | None = None) -> None:
    """Messages spread over the topic's queues (or all in ``qid``)."""
    n = core.topics.get(topic).read_queue_nums if core.topics.get(topic) else 4
    props = {"TAGS": tags} if tags else {}
    core.put_internal(
        [
            (topic, qid if qid is not None else i % n, fmt.encode_message(topic, b, properties=props))
            for i, b in enumerate(bodies)
        ]
    )
    core.end_pass()


def run(core: BrokerCore, peer: Peer, kind: int, payload: bytes) -> list[tuple[int, object]]:
    core.handle(peer, [(kind, memoryview(payload))], time.monotonic_ns())
    core.end_pass()
    return take(peer)


def take(peer: Peer) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    while peer.out:
        kind, payload = peer.out.popleft()
        if kind == F.POP_RESULT:
            out.append((kind, F.decode_pop_result(payload)))
        elif kind == F.RECEIPT_RESULT:
            out.append((kind, F.decode_receipt_result(payload)))
        elif kind == P.ERROR:
            out.append((kind, P.decode_error(payload)))
    return out


def pop(
    core: BrokerCore,
    peer: Peer,
    n: int = 32,
    invisible_ms: int = 60_000,
    group: str = "wg",
    await_ms: int = 0,
    flags: int = 0,
    max_attempts: int = 16,
) -> F.PopResult:
    got = run(core, peer, F.POP, F.encode_pop(next(_req), 0, group, invisible_ms, await_ms, n, flags, max_attempts))
    assert len(got) == 1 and got[0][0] == F.POP_RESULT, got
    result = got[0][1]
    assert isinstance(result, F.PopResult)
    return result


Receipt = tuple[list[str], list[int], list[int], list[int], list[int]]


def receipts(r: F.PopResult, rows: list[int] | None = None) -> Receipt:
    rows = list(range(len(r.tokens))) if rows is None else rows
    return (
        r.topics,
        [int(r.topic_idx[i]) for i in rows],
        [int(r.queue_ids[i]) for i in rows],
        [int(r.queue_offsets[i]) for i in rows],
        [int(r.tokens[i]) for i in rows],
    )


def ack(
    core: BrokerCore, peer: Peer, r: F.PopResult, rows: list[int] | None = None, group: str = "wg"
) -> F.ReceiptResult:
    got = run(core, peer, F.ACK, F.encode_receipts(next(_req), 0, group, *receipts(r, rows)))
    assert len(got) == 1 and got[0][0] == F.RECEIPT_RESULT, got
    result = got[0][1]
    assert isinstance(result, F.ReceiptResult)
    return result


def change(core: BrokerCore, peer: Peer, r: F.PopResult, invisible_ms: int, group: str = "wg") -> F.ReceiptResult:
    rc = receipts(r)
    got = run(core, peer, F.CHANGE_INVISIBLE, F.encode_receipts(next(_req), 0, group, *rc, [invisible_ms] * len(rc[4])))
    result = got[0][1]
    assert isinstance(result, F.ReceiptResult)
    return result


def bodies(core: BrokerCore, r: F.PopResult) -> list[bytes]:
    """The messages a POP_RESULT names, read from the commitlog as a consumer does."""
    out = []
    for off, size in zip(r.commitlog_offsets.tolist(), r.sizes.tolist()):
        view = core.store.commitlog.data(off, size)
        assert view is not None
        out.append(bytes(fmt.decode_record(view).body))
    return out


def tick(core: BrokerCore) -> None:
    core.tick(time.monotonic_ns())
    core.end_pass()
