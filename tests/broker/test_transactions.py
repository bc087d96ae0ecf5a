"""Transactions in the broker core: END_TRANSACTION commits (op record, then the real message, in
one put), rolls back (op record alone) or changes nothing for a settled half; the check service
asks a live transaction producer of the half's group and discards after transactionCheckMax;
a restart rebuilds what is settled from the op queue and repairs a commit cut after its op
record. Driven without a process: a real store, frames in, answers out."""

from __future__ import annotations

import json
import os
import time

import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.broker.transaction import PROPERTY_TRAN_OP, TRANSACTION_PRODUCER
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.transaction_frames import EndTransaction, decode_check_transaction, encode_end_transaction
from shmq.config import BrokerConfig
from shmq.model import system_topics as st
from shmq.store.message_store import MessageStore

from .conftest import serve

COMMIT, ROLLBACK, UNKNOWN = fmt.TRANSACTION_COMMIT, fmt.TRANSACTION_ROLLBACK, fmt.TRANSACTION_NOT_TYPE


@pytest.fixture
def config(config: dict) -> dict:
    return dict(config, transactionTimeOut=1, transactionCheckInterval=1, transactionCheckMax=2)


def producer(core: BrokerCore, client_id: int = 1, group: str = "tpg") -> Peer:
    peer = Peer(client_id, role=TRANSACTION_PRODUCER, group=group)
    core.add_client(peer)
    return peer


def half(
    core: BrokerCore, peer: Peer, req_id: int, body: bytes, topic: str = "T", queue_id: int = 1, group: str = "tpg"
) -> P.SendResultFrame:
    rec = fmt.encode_message(
        topic,
        body,
        properties={fmt.PROPERTY_UNIQ_KEY: f"U{req_id}", fmt.PROPERTY_PGROUP: group, fmt.PROPERTY_TAGS: "A"},
        sysflag=fmt.TRANSACTION_PREPARED,
    )
    [(kind, r)] = serve(
        core, peer, (P.SEND, P.encode_send(req_id, time.monotonic_ns(), queue_id, P.FLAG_INSPECT, 0, topic, [], rec))
    )
    assert kind == P.SEND_RESULT
    return r  # type: ignore[return-value]


def end(
    core: BrokerCore,
    peer: Peer,
    r: P.SendResultFrame,
    kind: int,
    req_id: int = 99,
    from_check: bool = False,
    oneway: bool = False,
    msg_id: str | None = None,
) -> list:
    e = EndTransaction(
        req_id,
        r.phys_offset,
        r.queue_offset,
        P.FLAG_ONEWAY if oneway else 0,
        kind,
        from_check,
        f"U{r.req_id}" if msg_id is None else msg_id,
    )
    return serve(core, peer, (P.END_TRANSACTION, encode_end_transaction(e)))


def check_round(core: BrokerCore) -> None:
    """One check round now (the halves are older than transactionTimeOut = 1 ms)."""
    time.sleep(0.003)
    core.transactions._next_round = 0
    core.tick(time.monotonic_ns())


def visible(store: MessageStore, topic: str = "T", qid: int = 1) -> list[fmt.StoredRecord]:
    return store.get_message(topic, qid, store.get_min_offset_in_queue(topic, qid), 1000).messages


def bodies(core: BrokerCore, topic: str = "T", qid: int = 1) -> list[bytes]:
    return [bytes(m.body) for m in visible(core.store, topic, qid)]


def ops(core: BrokerCore) -> list[tuple[int, str]]:
    return [
        (int(bytes(m.body)), m.properties[PROPERTY_TRAN_OP])
        for m in core.store.get_message(st.TRANS_OP_HALF_TOPIC, 0, 0, 1000).messages
    ]


def test_commit_writes_the_op_then_the_real_message_once(core):
    p = producer(core)
    r = half(core, p, 1, b"pay")
    assert bodies(core) == []
    [(kind, res)] = end(core, p, r, COMMIT)
    assert kind == P.SEND_RESULT and res.queue_id == 1 and res.queue_offset == 0
    [m] = core.store.get_message("T", 1, 0, 10).messages
    assert bytes(m.body) == b"pay" and m.uniq_key == "U1" and m.tags == "A"
    assert m.sysflag & fmt.TRANSACTION_MASK == COMMIT and m.prepared_tx_offset == r.phys_offset
    assert not {fmt.PROPERTY_REAL_TOPIC, fmt.PROPERTY_REAL_QID} & set(m.properties)
    [op] = core.store.get_message(st.TRANS_OP_HALF_TOPIC, 0, 0, 10).messages
    assert (bytes(op.body), op.tags) == (b"0", "d") and op.physical_offset < m.physical_offset
    # a second END, a check's answer racing it, a rollback after it: nothing changes
    for kind2, from_check in ((COMMIT, False), (COMMIT, True), (ROLLBACK, True)):
        [(k, err)] = end(core, p, r, kind2, from_check=from_check)
        assert k == P.ERROR and "already settled (commit)" in err.message
    assert bodies(core) == [b"pay"] and ops(core) == [(0, "commit")]


def test_rollback_writes_only_the_op_and_unknown_writes_nothing(core):
    p = producer(core)
    r1, r2 = half(core, p, 1, b"no"), half(core, p, 2, b"later")
    assert end(core, p, r1, ROLLBACK)[0][0] == P.SEND_RESULT
    [(kind, res)] = end(core, p, r2, UNKNOWN)
    assert kind == P.SEND_RESULT and res.queue_offset == -1
    assert bodies(core) == [] and ops(core) == [(0, "rollback")]
    assert end(core, p, r2, COMMIT)[0][0] == P.SEND_RESULT  # unknown left it open
    assert bodies(core) == [b"later"]


def test_hostile_ends_are_refused_and_harm_nothing(core):
    p = producer(core)
    r = half(core, p, 1, b"x")
    stranger = producer(core, 2, group="other")
    cases = [
        (EndTransaction(5, r.phys_offset, 7, 0, COMMIT, False, "U1"), "no half message at half queue offset 7"),
        (EndTransaction(5, r.phys_offset + 8, 0, 0, COMMIT, False, "U1"), "not " + str(r.phys_offset + 8)),
        (EndTransaction(5, r.phys_offset, -1, 0, COMMIT, False, "U1"), "no half message"),
        (EndTransaction(5, r.phys_offset, 0, 0, COMMIT, False, "U9"), "not U9"),
    ]
    for e, why in cases:
        [(kind, err)] = serve(core, p, (P.END_TRANSACTION, encode_end_transaction(e)))
        assert kind == P.ERROR and err.code == P.MESSAGE_ILLEGAL and why in err.message, err
    [(kind, err)] = end(core, stranger, r, COMMIT)
    assert kind == P.ERROR and err.code == P.NO_PERMISSION and "'tpg'" in err.message
    good = encode_end_transaction(EndTransaction(6, r.phys_offset, 0, 0, COMMIT, False, "U1"))
    for junk in (good[:20], good[:28] + b"\x07" + good[29:], good + b"zz", b"\x06" * 8 + b"\xff" * 40):
        [(kind, err)] = serve(core, p, (P.END_TRANSACTION, junk))
        assert kind == P.ERROR and err.code == P.MESSAGE_ILLEGAL and "malformed END_TRANSACTION" in err.message
    oneway_bad = EndTransaction(7, r.phys_offset, 3, P.FLAG_ONEWAY, COMMIT, False, "U1")
    assert serve(core, p, (P.END_TRANSACTION, encode_end_transaction(oneway_bad))) == []
    assert bodies(core) == [] and ops(core) == []
    assert end(core, p, r, COMMIT)[0][0] == P.SEND_RESULT and bodies(core) == [b"x"]


def test_the_check_asks_a_live_producer_of_the_group_then_discards_after_the_max(core, caplog):
    r = half(core, Peer(9, group="tpg"), 1, b"open")  # sent by a producer that is gone
    check_round(core)
    assert core.transactions.checks_sent == 0  # nobody to ask: waits, not counted
    assert core.transactions.state.check_times == {}
    other = producer(core, 3, group="else")
    p = producer(core, 2)
    for n in (1, 2):
        check_round(core)
        [(kind, payload)] = list(p.out)
        p.out.clear()
        c = decode_check_transaction(payload)
        assert kind == P.CHECK_TRANSACTION and (c.half_phys_offset, c.half_queue_offset, c.check_times) == (
            r.phys_offset,
            0,
            n,
        )
        assert fmt.decode_record(c.record).body == b"open"
    assert not other.out
    check_round(core)
    assert not p.out and ops(core) == [(0, "discard")] and "discarded after 2 checks" in caplog.text
    [(kind, err)] = end(core, p, r, COMMIT, from_check=True)
    assert kind == P.ERROR and "already settled" in err.message and bodies(core) == []


def test_a_restart_keeps_what_is_settled_and_the_check_progress(tmp_path, config):
    store = MessageStore(str(tmp_path / "s"), config).start()
    core = BrokerCore(store, BrokerConfig.load(config))
    p = producer(core)
    rs = [half(core, p, i, b"m%d" % i) for i in range(4)]
    end(core, p, rs[0], COMMIT)
    end(core, p, rs[2], ROLLBACK)
    check_round(core)  # checks 1 and 3
    assert sorted(core.transactions.state.check_times) == [1, 3] and core.transactions.state.half_offset == 1
    assert core.offsets.query(st.TRANS_CHECK_GROUP, st.TRANS_HALF_TOPIC, 0) == 1
    core.persist()
    store.shutdown()
    with open(os.path.join(store.store_dir, "config", "transactionCheck.json")) as f:
        assert json.load(f) == {"halfOffset": 1, "opOffset": 1, "checkTimes": {"1": 1, "3": 1}}
    store = MessageStore(str(tmp_path / "s"), config).start()
    core = BrokerCore(store, BrokerConfig.load(config))
    p = producer(core)
    s = core.transactions.state
    assert (s.half_offset, s.resolved, s.check_times) == (1, {2: "rollback"}, {1: 1, 3: 1})
    for r in rs:
        answer = end(core, p, r, COMMIT)[0]
        assert (answer[0] == P.SEND_RESULT) == (r.queue_offset in (1, 3))
    assert sorted(bodies(core)) == [b"m0", b"m1", b"m3"]
    store.shutdown()


def test_a_commit_cut_after_its_op_record_is_written_at_restart(tmp_path, config, caplog):
    """The crash between the two records of a commit's put, made by hand: the message is cut
    off the commitlog after its op record, as recovery leaves it after a SIGKILL."""
    store = MessageStore(str(tmp_path / "s"), config).start()
    core = BrokerCore(store, BrokerConfig.load(config))
    p = producer(core)
    r = half(core, p, 1, b"kept")
    end(core, p, r, COMMIT)
    [m] = store.get_message("T", 1, 0, 10).messages
    end_of_log = store.commitlog.max_offset
    store.shutdown()
    path = os.path.join(store.store_dir, "commitlog", fmt.offset_file_name(0))
    with open(path, "r+b") as f:  # zero the message record and what follows, as an unwritten tail is
        f.seek(m.physical_offset)
        f.write(b"\0" * (end_of_log - m.physical_offset))
    os.remove(os.path.join(store.store_dir, "checkpoint"))
    open(os.path.join(store.store_dir, "abort"), "w").close()
    store = MessageStore(str(tmp_path / "s"), config).start()
    assert store.get_message("T", 1, 0, 10).messages == [] and store.commitlog.max_offset == m.physical_offset
    core = BrokerCore(store, BrokerConfig.load(config))
    assert "cut off by a crash after its op record" in caplog.text
    [m2] = visible(store)
    assert bytes(m2.body) == b"kept" and m2.prepared_tx_offset == r.phys_offset
    store.shutdown()
    store = MessageStore(str(tmp_path / "s"), config).start()  # and not twice after the next start
    BrokerCore(store, BrokerConfig.load(config))
    assert len(visible(store)) == 1
    store.shutdown()
