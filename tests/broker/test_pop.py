"""The broker's POP driven through the core with a real store: messages handed out once, acked,
revived to the retry topic and the DLQ, receipts refused with their status, FIFO queues held,
caps, long polls and the committed low watermark."""

from __future__ import annotations

import time

import numpy as np
import pytest

from shmq.broker.answers import Peer
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.codec import record as fmt

from .pop_helpers import ack, bodies, change, join, open_core, pop, put, receipts, run, take, tick


@pytest.fixture
def core(tmp_path):
    with open_core(str(tmp_path / "store")) as c:
        c.update_topic("Jobs", 4, 4)
        yield c


def test_four_workers_get_each_message_once_and_acks_settle(core):
    workers = [Peer(10 + i) for i in range(4)]
    for w in workers:
        join(core, w)
    put(core, "Jobs", [b"%d" % i for i in range(200)])
    seen: list[bytes] = []
    while True:
        got = [(w, pop(core, w, 16)) for w in workers]
        if not any(len(r.tokens) for _, r in got):
            break
        for w, r in got:
            seen += bodies(core, r)
            if len(r.tokens):
                assert ack(core, w, r).statuses.tolist() == [F.RECEIPT_OK] * len(r.tokens)
    assert sorted(seen) == sorted(b"%d" % i for i in range(200)), "each message exactly once"
    assert core.pop_store.state.rows == 0
    for q in range(4):  # the low watermark is the group's committed offset
        assert core.offsets.query("wg", "Jobs", q) == 50


def test_workers_start_on_different_queues(core):
    a, b = Peer(1), Peer(2)
    join(core, a), join(core, b)
    put(core, "Jobs", [b"x"] * 8)
    ra, rb = pop(core, a, 1), pop(core, b, 1)
    assert ra.queue_ids.tolist() != rb.queue_ids.tolist()


def test_unacked_messages_revive_to_the_retry_topic_then_the_dlq(core):
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"job"], qid=2)
    r = pop(core, w, invisible_ms=50, max_attempts=3)
    assert r.attempts.tolist() == [1] and r.topics == ["Jobs"]
    for attempt in (2, 3):
        time.sleep(0.06)
        tick(core)  # revived: %RETRY%wg, reconsume_times + 1, no delay
        r = pop(core, w, invisible_ms=50, max_attempts=3)
        assert r.topics == ["%RETRY%wg"] and r.attempts.tolist() == [attempt], attempt
        rec = fmt.decode_record(core.store.commitlog.data(int(r.commitlog_offsets[0]), int(r.sizes[0])))
        assert rec.properties["RETRY_TOPIC"] == "Jobs" and "DELAY" not in rec.properties
        assert bodies(core, r) == [b"job"]
    time.sleep(0.06)
    tick(core)  # attempt 3 of 3 not acked: the DLQ
    assert len(pop(core, w).tokens) == 0
    dlq = core.store.find_consume_queue("%DLQ%wg", 0)
    assert dlq is not None and dlq.max_offset == 1
    assert core.pop_store.state.rows == 0
    assert core.offsets.query("wg", "Jobs", 2) == 1 and core.offsets.query("wg", "%RETRY%wg", 0) == 2


def test_an_ack_after_the_deadline_but_before_the_revive_is_taken(core):
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"a"])
    r = pop(core, w, invisible_ms=10)
    time.sleep(0.03)
    assert ack(core, w, r).statuses.tolist() == [F.RECEIPT_OK]
    tick(core)
    assert core.store.find_consume_queue("%RETRY%wg", 0) is None


def test_receipts_get_their_statuses(core):
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"a", b"b"], qid=0)
    r = pop(core, w, 2)
    first = ack(core, w, r, [0])
    assert first.statuses.tolist() == [F.RECEIPT_OK] and first.message == ""
    again = ack(core, w, r, [0])
    assert again.statuses.tolist() == [F.RECEIPT_UNKNOWN] and "settled already" in again.message
    # a token never handed out, a queue never popped, another group's retry topic, a DLQ
    cases = [
        (["Jobs"], 0, 1, 10**12, F.RECEIPT_UNKNOWN),
        (["Jobs"], 3, 0, 1, F.RECEIPT_UNKNOWN),
        (["%RETRY%other"], 0, 0, 1, F.RECEIPT_ILLEGAL),
        (["%DLQ%wg"], 0, 0, 1, F.RECEIPT_ILLEGAL),
    ]
    for topics, q, off, token, status in cases:
        got = run(core, w, F.ACK, F.encode_receipts(7, 0, "wg", topics, [0], [q], [off], [token]))
        assert got[0][1].statuses.tolist() == [status], (topics, q, off)
    got = run(core, w, F.ACK, F.encode_receipts(8, 0, "nogroup", ["Jobs"], [0], [0], [1], [int(r.tokens[1])]))
    assert got[0][1].statuses.tolist() == [F.RECEIPT_UNKNOWN], "a foreign group holds nothing of ours"
    bad = run(core, w, F.ACK, b"\x09" * 12)
    assert bad[0][0] == P.ERROR and bad[0][1].code == P.MESSAGE_ILLEGAL and "ack refused" in bad[0][1].message
    assert ack(core, w, r, [1]).statuses.tolist() == [F.RECEIPT_OK]


def test_one_ack_frame_of_several_queues_gets_a_status_per_receipt(core):
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"a", b"b", b"c", b"d"])  # one in each of the 4 queues
    r = pop(core, w, 4)
    assert sorted(r.queue_ids.tolist()) == [0, 1, 2, 3]
    rows = [0, 1, 0, 2]  # the first receipt twice: the second copy is stale
    topics, idx, qids, offs, toks = receipts(r, rows)
    qids, offs, toks = [*qids, qids[0]], [*offs, offs[0] + 7], [*toks, toks[0]]  # and one never handed out
    got = run(core, w, F.ACK, F.encode_receipts(9, 0, "wg", topics, [*idx, 0], qids, offs, toks))
    result = got[0][1]
    assert result.statuses.tolist() == [F.RECEIPT_OK, F.RECEIPT_OK, F.RECEIPT_STALE, F.RECEIPT_OK, F.RECEIPT_UNKNOWN]
    assert "handed out again" in result.message, "the first refused receipt says why"
    assert ack(core, w, r, [3]).statuses.tolist() == [F.RECEIPT_OK], "the one not in the frame is still in flight"
    assert ack(core, w, r, [0, 1, 2]).statuses.tolist() == [F.RECEIPT_UNKNOWN] * 3, "settled by the first frame"


def test_change_invisible_gives_a_new_token_and_the_old_one_is_stale(core):
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"a"])
    r = pop(core, w, invisible_ms=30)
    c = change(core, w, r, 60_000)
    assert c.statuses.tolist() == [F.RECEIPT_OK] and c.tokens[0] > r.tokens[0]
    time.sleep(0.05)
    tick(core)
    assert core.store.find_consume_queue("%RETRY%wg", 0) is None, "the new invisible time holds"
    stale = ack(core, w, r)
    assert stale.statuses.tolist() == [F.RECEIPT_STALE] and "handed out again" in stale.message
    new = r._replace(tokens=c.tokens)
    assert ack(core, w, new).statuses.tolist() == [F.RECEIPT_OK]
    bad = change(core, w, new, 0)
    assert bad.statuses.tolist() == [F.RECEIPT_ILLEGAL] and "invisible time" in bad.message


def test_fifo_holds_a_queue_and_redelivers_in_place_in_order(core):
    w, other = Peer(1), Peer(2)
    join(core, w), join(core, other)
    put(core, "Jobs", [b"m1", b"m2", b"m3"], qid=1)
    fifo = F.FLAG_FIFO
    r = pop(core, w, 2, invisible_ms=1000, flags=fifo, max_attempts=2)
    assert bodies(core, r) == [b"m1", b"m2"]
    assert len(pop(core, other, 8, flags=fifo).tokens) == 0, "the queue is held while m1, m2 are in flight"
    assert ack(core, w, r, [0]).statuses.tolist() == [F.RECEIPT_OK]
    assert len(pop(core, other, 8, flags=fifo).tokens) == 0, "m2 still holds it"
    time.sleep(1.05)
    tick(core)
    again = pop(core, other, 8, invisible_ms=50, flags=fifo, max_attempts=2)
    assert bodies(core, again) == [b"m2"] and again.queue_offsets.tolist() == [1] and again.attempts.tolist() == [2]
    assert ack(core, w, r, [1]).statuses.tolist() == [F.RECEIPT_STALE]
    time.sleep(0.06)
    tick(core)  # attempt 2 of 2: m2 goes to the DLQ, the queue moves on
    assert core.store.find_consume_queue("%DLQ%wg", 0).max_offset == 1
    nxt = pop(core, other, 8, flags=fifo)
    assert bodies(core, nxt) == [b"m3"]
    assert core.store.find_consume_queue("%RETRY%wg", 0) is None, "FIFO groups never use the retry topic"


def test_an_ordered_topic_is_fifo_for_every_pop_group(core):
    """A topic created with order=True holds its queues as a FIFO group does, without the flag;
    the group's other topics are not held."""
    core.update_topic("Seq", 2, 2, order=True)
    w, other = Peer(1), Peer(2)
    join(core, w, subs={"Seq": "*"}), join(core, other, subs={"Seq": "*"})
    put(core, "Seq", [b"s1", b"s2"], qid=0)
    r = pop(core, w, 1)
    assert bodies(core, r) == [b"s1"]
    assert len(pop(core, other, 8).tokens) == 0, "the ordered queue is held while s1 is in flight"
    ack(core, w, r)
    assert bodies(core, pop(core, other, 8)) == [b"s2"]


def test_filters_pass_over_what_does_not_match(core):
    w = Peer(1)
    join(core, w, subs={"Jobs": "A || C"})
    for tag in "ABCAB":
        put(core, "Jobs", [tag.encode()], qid=0, tags=tag)
    r = pop(core, w, 8)
    assert bodies(core, r) == [b"A", b"C", b"A"]
    ack(core, w, r)
    assert core.offsets.query("wg", "Jobs", 0) == 5, "passed-over messages count as settled"
    s = Peer(2)
    join(core, s, group="sq", subs={"Jobs": {"type": "SQL92", "expression": "TAGS = 'B'"}})
    assert bodies(core, pop(core, s, 8, group="sq")) == [b"B", b"B"]


def test_a_new_group_starts_at_the_queue_min_offset(core):
    put(core, "Jobs", [b"early"], qid=0)
    w = Peer(1)
    join(core, w)
    assert bodies(core, pop(core, w)) == [b"early"]


def test_pop_needs_a_joined_member_and_a_master(core):
    stranger = Peer(9)
    got = run(core, stranger, F.POP, F.encode_pop(1, 0, "wg", 1000, 0, 1))
    assert got[0][0] == P.ERROR and got[0][1].code == P.MESSAGE_ILLEGAL and "join the group first" in got[0][1].message
    bad = run(core, stranger, F.POP, F.encode_pop(2, 0, "wg", 0, 0, 1))
    assert got[0][0] == P.ERROR and bad[0][1].code == P.MESSAGE_ILLEGAL and "invisible time" in bad[0][1].message


def test_replica_answers_service_not_available(tmp_path):
    with open_core(str(tmp_path / "r"), brokerRole="SLAVE") as replica:
        got = run(replica, Peer(1), F.POP, F.encode_pop(1, 0, "wg", 1000, 0, 1))
        assert got[0][1].code == P.SERVICE_NOT_AVAILABLE and "master" in got[0][1].message
        got = run(replica, Peer(1), F.ACK, F.encode_receipts(2, 0, "wg", ["Jobs"], [0], [0], [0], [1]))
        assert got[0][1].code == P.SERVICE_NOT_AVAILABLE


def test_long_poll_is_woken_by_a_put_and_times_out_at_its_deadline(core):
    w = Peer(1)
    join(core, w)
    assert run(core, w, F.POP, F.encode_pop(1, 0, "wg", 60_000, 60_000, 4)) == []
    put(core, "Jobs", [b"wake"], qid=3)
    got = take(w)
    assert len(got) == 1 and bodies(core, got[0][1]) == [b"wake"] and got[0][1].req_id == 1
    assert run(core, w, F.POP, F.encode_pop(2, 0, "wg", 60_000, 30, 4)) == []
    time.sleep(0.05)
    tick(core)
    got = take(w)
    assert got and got[0][1].req_id == 2 and len(got[0][1].tokens) == 0
    assert core.pop.waiters.held == {}
    assert run(core, w, F.POP, F.encode_pop(3, 0, "wg", 60_000, 60_000, 4)) == []
    core.remove_client(w)
    assert core.pop.waiters.held == {} and core.pop.waiters.by_group == {}


def test_one_client_that_never_acks_is_capped(tmp_path):
    with open_core(str(tmp_path / "s"), popMaxInflightPerClient=10_000) as core:
        core.update_topic("Jobs", 4, 4)
        hog, good = Peer(1), Peer(2)
        join(core, hog), join(core, good)
        put(core, "Jobs", [b"j"] * 10_050)
        held = 0
        while held < 10_000:
            held += len(pop(core, hog, 1024).tokens)
        assert held == 10_000
        got = run(core, hog, F.POP, F.encode_pop(1, 0, "wg", 60_000, 0, 1))
        assert got[0][1].code == P.SYSTEM_BUSY
        assert got[0][1].message == (
            "client holds 10000 unacked messages of group wg (popMaxInflightPerClient); "
            "ack or wait for their invisible time"
        )
        assert core.pop_store.state.rows == 10_000
        assert len(pop(core, good, 100).tokens) == 50, "others go on"
        assert np.all(core.pop_store.state.queues[("wg", "Jobs", 0)].low_watermark() == 0)


def test_a_fifo_long_poll_is_woken_when_an_ack_frees_the_queue(tmp_path):
    with open_core(str(tmp_path / "f")) as core:
        core.update_topic("Jobs", 1, 1)
        a, b = Peer(1), Peer(2)
        join(core, a), join(core, b)
        put(core, "Jobs", [b"first", b"second"], qid=0)
        r = pop(core, a, 1, flags=F.FLAG_FIFO)
        assert run(core, b, F.POP, F.encode_pop(5, 0, "wg", 60_000, 60_000, 4, F.FLAG_FIFO)) == []
        assert ack(core, a, r).statuses.tolist() == [F.RECEIPT_OK]
        got = take(b)
        assert len(got) == 1 and got[0][1].req_id == 5 and bodies(core, got[0][1]) == [b"second"]


def test_a_long_poll_of_a_member_that_left_is_answered_empty_at_its_deadline(core):
    w = Peer(1)
    join(core, w)
    assert run(core, w, F.POP, F.encode_pop(4, 0, "wg", 60_000, 20, 4)) == []
    core.consumers.leave("wg", w.client_id)
    put(core, "Jobs", [b"x"])
    assert take(w) == []
    time.sleep(0.03)
    tick(core)
    got = take(w)
    assert len(got) == 1 and got[0][1].req_id == 4 and len(got[0][1].tokens) == 0


def test_long_polls_of_one_client_are_capped(tmp_path):
    with open_core(str(tmp_path / "w"), maxPullWaitersPerClient=2) as core:
        core.update_topic("Jobs", 4, 4)
        w = Peer(1)
        join(core, w)
        for req in (1, 2):
            assert run(core, w, F.POP, F.encode_pop(req, 0, "wg", 60_000, 60_000, 1)) == []
        got = run(core, w, F.POP, F.encode_pop(3, 0, "wg", 60_000, 60_000, 1))
        assert got[0][0] == P.ERROR and got[0][1].code == P.SYSTEM_BUSY and got[0][1].req_id == 3
        assert "maxPullWaitersPerClient" in got[0][1].message


def test_an_offset_reset_moves_a_pop_group_and_drops_what_was_in_flight(tmp_path):
    with open_core(str(tmp_path / "r")) as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"m%d" % i for i in range(6)], qid=0)
        first = pop(core, w, 3)
        assert bodies(core, first) == [b"m0", b"m1", b"m2"]
        core.resets.reset("wg", "Jobs", to="first")
        assert core.pop_store.state.rows == 0 and take(w) == [], "POP members get no RESET_OFFSET frame"
        assert ack(core, w, first).statuses.tolist() == [F.RECEIPT_UNKNOWN] * 3
        assert bodies(core, pop(core, w, 8)) == [b"m%d" % i for i in range(6)], "again from the first"
        core.resets.reset("wg", "Jobs", to="last")
        assert len(pop(core, w, 8).tokens) == 0 and core.offsets.query("wg", "Jobs", 0) == 6


def test_a_subscription_the_broker_cannot_filter_is_refused_in_one_line(core):
    w = Peer(1)
    join(core, w, subs={"Jobs": "A | B"})  # joined without the client's checks
    put(core, "Jobs", [b"x"])
    got = run(core, w, F.POP, F.encode_pop(1, 0, "wg", 60_000, 0, 4))
    assert got[0][0] == P.ERROR and got[0][1].code == P.MESSAGE_ILLEGAL
    assert got[0][1].message.startswith("the broker cannot filter this member's subscription: ")
    assert core.pop_store.state.rows == 0


def test_order_survives_a_restart_and_an_update_that_does_not_name_it(tmp_path):
    store_dir = str(tmp_path / "store")
    with open_core(store_dir) as core:
        core.update_topic("Seq", 2, 2, order=True)
        core.update_topic("Seq", 4, 4)
        assert core.topics.get("Seq").order
    with open_core(store_dir) as core:
        assert core.topics.get("Seq").order and core.topics.get("Seq").read_queue_nums == 4
        core.update_topic("Seq", order=False)
        assert not core.topics.get("Seq").order
