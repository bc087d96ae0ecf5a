"""The everyday objects a snippet prints show as one readable line: the fields that are set,
a body cut to its first 60 bytes and its size (a 100 KB body printed in full fills a screen)."""

from __future__ import annotations

from shmq import (
    LitePullConsumer,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    ResendResult,
    SendResult,
    SendStatus,
    TransactionSendResult,
    TransactionStatus,
)


def test_everyday_objects_print_readably() -> None:
    mq = MessageQueue("Orders", "b1", 3)
    assert repr(mq) == "MessageQueue(topic='Orders', broker_name='b1', queue_id=3)"
    assert repr(Message("Orders", b"hi")) == "Message(topic='Orders', body=b'hi')"
    big = Message("Orders", bytes(range(256)) * 400, tags="TagA", keys=["a", "b"], properties={"n": "1"})
    text = repr(big)
    assert text == (
        f"Message(topic='Orders', body={bytes(range(60))!r}… (102400 bytes), tags='TagA', "
        "keys='a b', properties={'n': '1'})"
    )
    ext = MessageExt(
        "Orders", memoryview(b"x" * 61), tags="TagA", queue_id=3, queue_offset=7, msg_id="ID1", reconsume_times=2
    )
    assert repr(ext) == (
        f"MessageExt(topic='Orders', queue_id=3, queue_offset=7, msg_id='ID1', tags='TagA', "
        f"body={b'x' * 60!r}… (61 bytes), reconsume_times=2)"
    )
    sent = SendResult(SendStatus.SEND_OK, "ID1", None, mq, 41, 7, 1, [4096], 0)
    assert repr(sent) == (
        "SendResult(status=SEND_OK, msg_id='ID1', queue=MessageQueue(topic='Orders', "
        "broker_name='b1', queue_id=3), queue_offset=41)"
    )
    assert (
        repr(TransactionSendResult(sent, TransactionStatus.COMMIT))
        == repr(sent).replace("SendResult(", "TransactionSendResult(")[:-1] + ", local_transaction_state=COMMIT)"
    )


def test_a_big_resend_prints_its_first_ids_and_counts() -> None:
    done = ResendResult([f"ID{i}" for i in range(5000)], ["X1"], 3)
    assert repr(done) == "ResendResult(resent=['ID0', 'ID1', 'ID2', …] (5000 ids), skipped=['X1'], remaining=3)"


def test_clients_print_group_broker_topics_and_state() -> None:
    """Not started: no broker needed (tests/process/consumers/test_reprs.py has them running)."""
    push = PushConsumer("cg", broker="b1")
    push.subscribe("Orders", "TagA")
    assert repr(push) == "PushConsumer(group='cg', broker='b1', topics=['Orders'], state=stopped)"
    lite = LitePullConsumer("cg", broker="b1")
    lite.subscribe("Audit")
    assert repr(lite) == "LitePullConsumer(group='cg', broker='b1', topics=['Audit'], state=stopped)"
    assert repr(Producer("pg", broker="b1")) == "Producer(group='pg', broker='b1', state=stopped)"
