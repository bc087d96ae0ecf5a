"""Transactions end to end with real brokers and producers: commit, rollback, unknown settled by
the check (commit or rollback), discarded after transactionCheckMax, a producer SIGKILLed
between its half and its END (another producer of the group answers the check), broker
SIGKILLs in the middle of transactions (tools/chaos/tx_crash.py, a few rounds), hostile
END_TRANSACTION frames; consumers never see a half."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import shmq
from shmq import (
    BadMessageError,
    Message,
    MessageQueue,
    PullConsumer,
    PullStatus,
    SendStatus,
    TransactionProducer,
    TransactionStatus,
)
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.codec.transaction_frames import EndTransaction, encode_end_transaction
from shmq.model import system_topics as st
from tests.waiting import wait_for

from .rawclient import RawClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TX = {"transactionTimeOut": 150, "transactionCheckInterval": 50, "transactionCheckMax": 3}


@pytest.fixture
def config(config: dict) -> dict:
    return dict(config, **TX)


def visible(broker_name: str, topic: str = "Tx") -> list[bytes]:
    """Every body a consumer of ``topic`` sees, from the start of each queue."""
    out: list[bytes] = []
    with PullConsumer("watch", broker=broker_name) as c:
        for mq in c.fetch_queues(topic):
            offset = c.min_offset(mq)
            while True:
                r = c.pull(mq, "*", offset=offset, max_nums=64, timeout=0)
                if r.status is not PullStatus.FOUND:
                    break
                out += [bytes(m.body) for m in r.messages]
                offset = r.next_begin_offset
    return out


def decide(msg: shmq.MessageExt) -> TransactionStatus:
    return TransactionStatus.COMMIT if msg.keys == "yes" else TransactionStatus.ROLLBACK


def test_commit_rollback_and_unknown_settled_by_the_check(broker_name, store_dir, config):
    checked: list[tuple[str, str, int, str]] = []

    def check(msg: shmq.MessageExt) -> TransactionStatus:
        checked.append((msg.topic, msg.keys, msg.queue_id, msg.properties[fmt.PROPERTY_TRANSACTION_CHECK_TIMES]))
        return decide(msg)

    with shmq.Broker(store_dir, broker_name, config), TransactionProducer("tpg", broker=broker_name, check=check) as tp:

        def run(body: bytes, keys: str, state: TransactionStatus) -> shmq.TransactionSendResult:
            return tp.send_in_transaction(Message("Tx", body, keys=keys), lambda m, a: a, arg=state)

        class Seen:  # send hooks (trace) see the half as the transaction's send
            def __init__(self) -> None:
                self.sent: list[tuple[str, str]] = []

            def send_message_before(self, ctx) -> None:
                pass

            def send_message_after(self, ctx) -> None:
                self.sent.append((ctx.message.properties[fmt.PROPERTY_TRAN_MSG], ctx.result.msg_id))

        seen = Seen()
        tp.register_send_hook(seen)
        r = run(b"committed", "x", TransactionStatus.COMMIT)
        assert r.status is SendStatus.SEND_OK and r.local_transaction_state is TransactionStatus.COMMIT
        assert seen.sent == [("true", r.msg_id)]
        run(b"rolled back", "x", TransactionStatus.ROLLBACK)
        run(b"checked in", "yes", TransactionStatus.UNKNOWN)
        run(b"checked out", "no", TransactionStatus.UNKNOWN)
        boom = tp.send_in_transaction(Message("Tx", b"raised", keys="yes"), lambda m, a: 1 / 0)
        assert boom.local_transaction_state is TransactionStatus.UNKNOWN
        assert visible(broker_name) == [b"committed"]  # halves wait, invisible
        assert wait_for(lambda: len(visible(broker_name)) == 3, timeout=5)
        time.sleep(0.3)  # more check rounds change nothing
        assert sorted(visible(broker_name)) == [b"checked in", b"committed", b"raised"]
        assert sorted(keys for _, keys, _, _ in checked) == ["no", "yes", "yes"]  # each checked once
        assert all(t == "Tx" and 0 <= q < 4 and times == "1" for t, _, q, times in checked)
        with pytest.raises(BadMessageError, match="cannot also be delayed"):
            tp.send_in_transaction(Message("Tx", b"late", delay_level=2), lambda m, a: TransactionStatus.COMMIT)
        with PullConsumer("watch2", broker=broker_name) as c:  # halves stay under the half topic only
            half = MessageQueue(st.TRANS_HALF_TOPIC, broker_name, 0)
            assert c.max_offset(half) == 5


def test_a_half_nobody_settles_is_discarded_after_the_max_checks(broker_name, store_dir, config):
    calls = []

    def never(msg: shmq.MessageExt) -> TransactionStatus:
        calls.append(msg.properties[fmt.PROPERTY_TRANSACTION_CHECK_TIMES])
        return TransactionStatus.UNKNOWN

    with (
        shmq.Broker(store_dir, broker_name, config) as broker,
        TransactionProducer("tpg", broker=broker_name, check=never) as tp,
    ):
        tp.send_in_transaction(Message("Tx", b"limbo"), lambda m, a: TransactionStatus.UNKNOWN)
        assert wait_for(lambda: "discarded after 3 checks" in broker.log(), timeout=5)
        assert calls == ["1", "2", "3"]
        time.sleep(0.3)
        assert calls == ["1", "2", "3"] and visible(broker_name) == []


_DYING_PRODUCER = """
import os, signal, sys
import shmq
tp = shmq.TransactionProducer("tpg", broker=sys.argv[1], check=lambda m: shmq.TransactionStatus.ROLLBACK).start()

def die(msg, arg):
    print("half stored", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

tp.send_in_transaction(shmq.Message("Tx", b"orphan", keys="yes"), die)
"""


def test_a_producer_killed_between_half_and_end_is_settled_by_another_of_its_group(broker_name, store_dir, config):
    with shmq.Broker(store_dir, broker_name, config):
        child = subprocess.run(
            [sys.executable, "-c", _DYING_PRODUCER, broker_name], capture_output=True, cwd=ROOT, timeout=30
        )
        assert child.returncode == -9 and child.stdout == b"half stored\n"
        time.sleep(0.3)  # older than transactionTimeOut, but nobody of group tpg lives: it waits
        assert visible(broker_name) == []
        view = shmq.Admin(broker_name).transactions()
        [stuck] = view["open"]
        assert (view["half_offset"], view["half_max_offset"], view["checks_sent"]) == (0, 1, 0)
        assert (stuck["queue_offset"], stuck["topic"], stuck["producer_group"], stuck["check_times"]) == (
            0,
            "Tx",
            "tpg",
            0,
        ) and time.time() * 1000 - stuck["store_timestamp"] >= 300
        with TransactionProducer("tpg", broker=broker_name, check=decide):
            assert wait_for(lambda: visible(broker_name) == [b"orphan"], timeout=5)
            time.sleep(0.3)
            assert visible(broker_name) == [b"orphan"]
            view = shmq.Admin(broker_name).transactions()
            assert (view["half_offset"], view["open"], view["checks_sent"]) == (1, [], 1)


def test_broker_sigkills_mid_transaction(store_dir, broker_name):
    """A few rounds of tools/chaos/tx_crash.py (the 60-round run is in the ops note)."""
    sys.path.insert(0, ROOT)
    from tools.chaos.tx_crash import TxCrashHarness

    h = TxCrashHarness(store_dir, broker_name, seed=13)
    h.start()
    try:
        for _ in range(4):
            h.round()
    finally:
        h.close()
    assert h.totals.rounds == 4 and h.totals.acked > 0 and h.totals.committed_visible > 0
    assert h.totals.repairs_logged == h.totals.cut_commits


def test_hostile_end_transaction_frames_are_refused_and_harm_nothing(broker_name, store_dir, config):
    allow = threading.Event()  # the check keeps the half open until the hostile frames are done

    def check(msg: shmq.MessageExt) -> TransactionStatus:
        return decide(msg) if allow.is_set() else TransactionStatus.UNKNOWN

    config["transactionCheckMax"] = 1000
    with shmq.Broker(store_dir, broker_name, config), TransactionProducer("tpg", broker=broker_name, check=check) as tp:
        r = tp.send_in_transaction(Message("Tx", b"target", keys="yes"), lambda m, a: TransactionStatus.UNKNOWN)
        raw = RawClient(broker_name, role="transaction_producer")
        try:
            phys = r.phys_offsets[0]
            frames = [
                encode_end_transaction(
                    EndTransaction(1, phys, r.queue_offset + 5, 0, fmt.TRANSACTION_COMMIT, False, r.msg_id)
                ),
                encode_end_transaction(
                    EndTransaction(2, phys + 1, r.queue_offset, 0, fmt.TRANSACTION_COMMIT, False, r.msg_id)
                ),
                encode_end_transaction(
                    EndTransaction(3, phys, r.queue_offset, 0, fmt.TRANSACTION_COMMIT, False, r.msg_id)
                ),  # right half, but not this client's group
                b"\x04" + b"\0" * 7 + os.urandom(40),
            ]
            for i, frame in enumerate(frames, 1):
                raw.write(P.END_TRANSACTION, frame)
                kind, err = raw.read()
                assert kind == P.ERROR and err.req_id == i, (kind, err)
                assert err.code in (P.MESSAGE_ILLEGAL, P.NO_PERMISSION)
            raw.write(P.HEARTBEAT, P.encode_heartbeat(9))  # still attached and served
        finally:
            raw.close()
        time.sleep(0.3)
        assert visible(broker_name) == []
        allow.set()
        assert wait_for(lambda: visible(broker_name) == [b"target"], timeout=5)  # the check still settles it
        ok = tp.send_in_transaction(Message("Tx", b"after"), lambda m, a: TransactionStatus.COMMIT)
        assert ok.status is SendStatus.SEND_OK
        assert wait_for(lambda: sorted(visible(broker_name)) == [b"after", b"target"], timeout=5)
