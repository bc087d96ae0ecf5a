"""A resent SEND (FLAG_RESEND) is stored once: answered with its first copy's result."""

from __future__ import annotations

import time

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.store.message_store import MessageStore

from .conftest import serve


def _send(req_id: int, uniq: str, body: bytes, flags: int = 0, topic: str = "T", qid: int = -1) -> tuple[int, bytes]:
    """A SEND as a producer writes it: the record's UNIQ_KEY among the frame's index keys."""
    rec = fmt.encode_message(topic, body, properties={fmt.PROPERTY_UNIQ_KEY: uniq})
    keys = fmt.record_key_hashes(topic, uniq, None)
    return P.SEND, P.encode_send(req_id, time.monotonic_ns(), qid, flags, 0, topic, keys, rec)


def _stored(core: BrokerCore, topic: str = "T") -> list[bytes]:
    return sorted(
        bytes(m.body)
        for q in range(core.topics.topics[topic].write_queue_nums)
        for m in core.store.get_message(topic, q, 0, 1000).messages
    )


def _result(got: list) -> tuple[int, int, int, int]:
    (kind, r), *_ = got
    assert kind == P.SEND_RESULT and r.status == P.SEND_OK, got
    return r.req_id, r.queue_id, r.queue_offset, r.phys_offset


def test_a_resend_of_a_stored_message_gets_the_first_answer_and_stores_nothing(core):
    peer = Peer(1)
    first = _result(serve(core, peer, _send(1, "U1", b"a")))
    again = _result(serve(core, peer, _send(2, "U1", b"a", P.FLAG_RESEND)))  # its first answer was lost
    assert again == (2, *first[1:])
    assert _stored(core) == [b"a"]
    assert core.stats["resends_answered"] == 1


def test_a_resend_of_a_message_never_stored_is_stored(core):
    peer = Peer(1)
    _result(serve(core, peer, _send(1, "U1", b"a")))
    got = _result(serve(core, peer, _send(2, "U2", b"b", P.FLAG_RESEND)))
    assert _stored(core) == [b"a", b"b"]
    assert core.stats["resends_answered"] == 0
    assert _result(serve(core, peer, _send(3, "U2", b"b", P.FLAG_RESEND)))[1:] == got[1:]  # and then once


def test_a_resend_behind_its_first_copy_in_one_pass_is_stored_once_in_order(core):
    """The ring keeps a producer's frames in order: the first attempt, still unanswered, and its
    resend can arrive in one pass, among other SENDs."""
    peer = Peer(1)
    got = serve(
        core,
        peer,
        _send(1, "U1", b"a"),
        _send(2, "U2", b"b"),
        _send(3, "U1", b"a", P.FLAG_RESEND),
        _send(4, "U3", b"c"),
        _send(5, "U2", b"b", P.FLAG_RESEND | P.FLAG_ONEWAY),
    )
    results = {r.req_id: (r.queue_id, r.queue_offset, r.phys_offset) for _, r in got}
    assert sorted(results) == [1, 2, 3, 4]
    assert results[3] == results[1]
    assert _stored(core) == [b"a", b"b", b"c"]


def test_a_resend_after_a_restart_finds_the_copy_stored_before(tmp_path, config):
    """The lookup is the store's index, which recovery rebuilds: nothing to persist besides."""
    store = MessageStore(str(tmp_path / "store"), config).start()
    core = BrokerCore(store, BrokerConfig.load(config))
    first = _result(serve(core, Peer(1), _send(1, "U1", b"a")))
    core.persist()
    store.shutdown()
    store = MessageStore(str(tmp_path / "store"), config).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(config))
        again = _result(serve(core, Peer(2), _send(7, "U1", b"a", P.FLAG_RESEND)))
        assert again == (7, *first[1:])
        assert _stored(core) == [b"a"]
    finally:
        store.shutdown()


def test_without_the_index_a_resend_is_stored_again(tmp_path, config):
    """messageIndexEnable=false: the broker cannot tell, so at least once (documented)."""
    config["messageIndexEnable"] = False
    store = MessageStore(str(tmp_path / "store"), config).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(config))
        serve(core, Peer(1), _send(1, "U1", b"a"))
        serve(core, Peer(1), _send(2, "U1", b"a", P.FLAG_RESEND))
        assert _stored(core) == [b"a", b"a"]
    finally:
        store.shutdown()
