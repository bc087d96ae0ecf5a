"""The broker core driven directly: a real store in tmp_path, frames in, answers out, no process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from shmq.broker.answers import PACKED, Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.config import BrokerConfig
from shmq.store.message_store import MessageStore

SMALL = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 1024,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
}


@pytest.fixture
def config() -> dict:
    return dict(SMALL)


@pytest.fixture
def core(tmp_path, config) -> Iterator[BrokerCore]:
    store = MessageStore(str(tmp_path / "store"), config).start()
    c = BrokerCore(store, BrokerConfig.load(config))
    yield c
    store.shutdown()


def serve(core: BrokerCore, peer: Peer, *frames: tuple[int, bytes]) -> list[tuple[int, object]]:
    """One pass over ``frames`` from ``peer``; its answers decoded, in order."""
    core.handle(peer, [(kind, memoryview(payload)) for kind, payload in frames], time.monotonic_ns())
    core.end_pass()
    return answers(peer)


def answers(peer: Peer) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    while peer.out:
        kind, payload = peer.out.popleft()
        if kind == PACKED:
            out.extend(
                (P.SEND_RESULT, P.decode_send_result(row.tobytes()[8:]))
                for row in np.frombuffer(payload, P.RESULT_FRAME)
            )
        elif kind == P.SEND_RESULT:
            out.append((kind, P.decode_send_result(payload)))
        elif kind == P.SEND_MULTI_RESULT:
            out.append((kind, P.decode_send_multi_result(payload)))
        elif kind == P.ERROR:
            out.append((kind, P.decode_error(payload)))
        elif kind == P.WAKE:
            out.append((kind, P.decode_wake(payload)))
    return out
