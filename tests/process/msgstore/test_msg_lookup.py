"""Admin.query_by_key / view_message / message_track and `shmq admin msg` while a broker runs."""

from __future__ import annotations

import json
import zlib

import pytest

import shmq
from shmq import Admin, Message, MessageNotFoundError, MessageQueue, Producer, PullConsumer
from shmq.cli.main import main
from shmq.client.msg_lookup import CONSUMED, NOT_CONSUME_YET
from tests.waiting import wait_for


def _colliding_keys() -> tuple[str, str]:
    """Two keys whose index hashes in topic T are equal (birthday search over 31 bits)."""
    seen: dict[int, str] = {}
    i = 0
    while True:
        key = f"c{i}"
        h = zlib.crc32(f"T#{key}".encode()) & 0x7FFFFFFF
        if h in seen:
            return seen[h], key
        seen[h] = key
        i += 1


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["admin", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_lookups_while_the_broker_runs(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _colliding_keys()
    config = dict(config, flushConsumerOffsetInterval=100)  # groups without members: from the persisted file
    with shmq.Broker(store_dir, name=broker_name, config=config):
        admin = Admin(broker=broker_name)
        admin.create_topic("T", queues=2)
        admin.create_topic("U", queues=1)
        p = Producer("pg", broker=broker_name).start()
        try:
            sent = [
                p.send(Message("T", f"m{i}".encode(), tags="A", keys=f"k{i % 4} {a if i == 5 else b}"))
                for i in range(20)
            ]
            other = p.send(Message("U", b"u", keys="k1"))
        finally:
            p.shutdown()

        assert wait_for(lambda: admin.view_message(other.offset_msg_id) and admin.query_by_key("U", "k1"))
        found = admin.query_by_key("T", "k1")  # the index is written behind the commitlog: U's is last
        assert [m.body for m in found] == [f"m{i}".encode() for i in (17, 13, 9, 5, 1)]  # newest first
        assert all(m.topic == "T" for m in found)  # U's k1 is another topic's
        assert [m.body for m in admin.query_by_key("T", a)] == [b"m5"]  # b shares a's hash: filtered out
        assert len(admin.query_by_key("T", "k1", max_num=2)) == 2
        last = max(m.store_timestamp for m in found)
        assert admin.query_by_key("T", "k1", begin=last + 1) == []
        cut = found[-1].store_timestamp
        assert admin.query_by_key("T", "k1", end=cut) == [m for m in found if m.store_timestamp <= cut] != []

        by_id = admin.view_message(sent[6].msg_id)
        by_offset = admin.view_message(sent[6].offset_msg_id)
        assert by_id.body == by_offset.body == b"m6" and by_id.msg_id == sent[6].msg_id
        assert admin.view_message(other.msg_id, topic="U").body == b"u"
        with pytest.raises(MessageNotFoundError):
            admin.view_message(other.msg_id, topic="T")
        with pytest.raises(MessageNotFoundError):
            admin.view_message("0" * 31 + "1")

        mq = MessageQueue("T", broker_name, by_id.queue_id)
        done, behind = (
            PullConsumer("done", broker=broker_name).start(),
            PullConsumer("behind", broker=broker_name).start(),
        )
        try:
            done.commit(mq, by_id.queue_offset + 1)
            behind.commit(mq, by_id.queue_offset)
            assert wait_for(lambda: len(admin.message_track(by_id)) == 2)
        finally:
            done.shutdown()
            behind.shutdown()
        tracks = {t.consumer_group: t.track_type for t in admin.message_track(by_id)}
        assert tracks == {"done": CONSUMED, "behind": NOT_CONSUME_YET}

        status, out, _ = _cli(capsys, "msg", "query", "--topic", "T", "--key", "k1", "--name", broker_name, "--json")
        rows = json.loads(out)["messages"]
        assert status == 0 and [r["msg_id"] for r in rows] == [m.msg_id for m in found]
        status, out, _ = _cli(capsys, "msg", "view", sent[6].msg_id, "--name", broker_name, "--json")
        view = json.loads(out)
        assert status == 0 and view["body"]["text"] == "m6" and view["properties"]["TAGS"] == "A"
        assert {c["consumer_group"]: c["track_type"] for c in view["consumers"]} == tracks
        status, out, _ = _cli(capsys, "msg", "view", sent[6].msg_id, "--name", broker_name)
        assert status == 0 and "CONSUMED" in out and "m6" in out
        status, _, err = _cli(capsys, "msg", "view", "NOPE", "--name", broker_name)
        assert status == 1 and err == "shmq admin msg view: error: no message with id 'NOPE'\n"


def test_lookups_cost_the_broker_no_request(broker_name: str, store_dir: str, config: dict) -> None:
    """A query works with the broker's control queue unused: it reads files and the state segment only."""
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        try:
            r = p.send(Message("T", b"x", keys="only"))
        finally:
            p.shutdown()
        admin = Admin(broker=broker_name, timeout=0.001)  # a control-queue call would time out
        assert wait_for(lambda: admin.query_by_key("T", "only"))
        assert [m.msg_id for m in admin.query_by_key("T", "only")] == [r.msg_id]


def test_a_message_is_viewable_as_soon_as_its_send_returns(broker_name: str, store_dir: str, config: dict) -> None:
    """Read your writes: the commitlog end is published with each pass's max offsets, not on the
    10 ms timer tick, so a lookup right after SEND_OK finds the message (it raised
    MessageNotFoundError for up to a tick before)."""
    with shmq.Broker(store_dir, name=broker_name, config=config):
        admin = Admin(broker=broker_name)
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(30):
                r = p.send(Message("V", f"v{i}".encode()))
                assert admin.view_message(r.offset_msg_id).body == f"v{i}".encode()
        finally:
            p.shutdown()
