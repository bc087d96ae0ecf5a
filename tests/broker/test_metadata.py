"""Issue 10 D11: damaged config/topics.json and config/consumerOffset.json, loaded by the broker
core over a real store: every value is checked, what cannot be read is logged as an error with
what was done instead, topics are rebuilt from the store, and offsets are never silently reset
(the previous copy, or a refused start)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.errors import MetadataError
from shmq.ha import protocol
from shmq.model.perm import PERM_READ, PERM_RW
from shmq.model.system_topics import is_system_topic
from shmq.procs.replica import ReplicaInbox
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest

from .conftest import serve
from .test_core import send


def user_topics(names) -> set[str]:
    """The topics of a table but those the broker makes for itself at start."""
    return {t for t in names if not is_system_topic(t)}


def config_path(store_dir: str, name: str) -> str:
    return os.path.join(store_dir, "config", name)


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def prepare(store_dir: str, config: dict) -> None:
    """A store as a broker leaves it: topics Old (8 queues, read-only) and New (auto-created,
    4 queues), messages in Old/0..2 and New/0..3, offsets committed for group g.
    topics.json.bak is the copy before New existed (stale); consumerOffset.json.bak has Old/0 at 1."""
    with MessageStore(store_dir, config) as store:
        core = BrokerCore(store, BrokerConfig.load(config))
        core.update_topic("Old", 8, 8, PERM_READ)
        for qid in range(3):
            store.put(PutRequest.of_records("Old", qid, [fmt.encode_message("Old", b"o%d" % qid)]))
        core.commit_offset("g", "Old", 0, 1)
        core.offsets.persist()
        core.update_topic("New")
        for qid in range(4):
            store.put(PutRequest.of_records("New", qid, [fmt.encode_message("New", b"n%d" % qid)]))
        core.commit_offset("g", "New", 3, 1)
        core.offsets.persist()


def open_core(store_dir: str, config: dict) -> tuple[MessageStore, BrokerCore]:
    store = MessageStore(store_dir, config).start()
    try:
        return store, BrokerCore(store, BrokerConfig.load(config))
    except BaseException:
        store.shutdown()
        raise


@pytest.fixture
def store_dir(tmp_path, config) -> str:
    d = str(tmp_path / "store")
    prepare(d, config)
    return d


def test_garbage_topics_json_takes_the_backup_and_rebuilds_the_newest_topic(store_dir, config, caplog):
    """Regression: garbage topics.json silently loaded the stale .bak: New was invisible."""
    write(config_path(store_dir, "topics.json"), "\x00garbage{")
    with caplog.at_level(logging.ERROR):
        store, core = open_core(store_dir, config)
    try:
        old, new = core.topics.get("Old"), core.topics.get("New")
        assert (old.read_queue_nums, old.perm) == (8, PERM_READ)  # from the .bak, perm kept
        assert new is not None and (new.write_queue_nums, new.perm) == (4, PERM_RW)  # from its queues
    finally:
        store.shutdown()
    assert "topics.json" in caplog.text and "topics.json.bak" in caplog.text and "New" in caplog.text
    with open(config_path(store_dir, "topics.json")) as f:  # repaired on disk; the damaged copy kept
        assert user_topics(json.load(f)["topicConfigTable"]) == {"Old", "New"}
    assert Path(config_path(store_dir, "topics.json.damaged")).read_text() == "\x00garbage{"


def test_garbage_topics_json_without_backup_rebuilds_every_topic(store_dir, config, caplog):
    """Regression: with no .bak every topic was gone (its messages invisible)."""
    write(config_path(store_dir, "topics.json"), "[1, 2")
    os.unlink(config_path(store_dir, "topics.json.bak"))
    with caplog.at_level(logging.ERROR):
        store, core = open_core(store_dir, config)
    try:
        assert core.topics.get("Old").read_queue_nums == 4  # queues 0..2 hold messages: the default 4
        assert core.topics.get("New").read_queue_nums == 4
    finally:
        store.shutdown()
    assert "no readable copy" in caplog.text and "rebuilt 2" in caplog.text


@pytest.mark.parametrize(
    "entry",
    [
        {"topicName": "New", "readQueueNums": 4, "writeQueueNums": 0, "perm": 6},
        {"topicName": "New", "readQueueNums": "4", "writeQueueNums": 4, "perm": 6},
        {"topicName": "New", "readQueueNums": 4, "writeQueueNums": 4, "perm": [6]},
        {"topicName": "New", "readQueueNums": 4, "writeQueueNums": 4, "perm": 99},
        {"topicName": "New", "readQueueNums": True, "writeQueueNums": 4, "perm": 6},
        {"topicName": "New", "readQueueNums": 4, "writeQueueNums": 10**9, "perm": 6},
        {"topicName": "Other", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
        {"topicName": "New", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "order": "yes"},
        ["not", "an", "object"],
    ],
    ids=["write0", "str", "list-perm", "perm-bits", "bool", "huge", "name", "order", "list"],
)
def test_a_bad_topic_entry_is_dropped_and_rebuilt(store_dir, config, caplog, entry):
    """Regression: writeQueueNums 0 loaded and the first send died (ZeroDivisionError); wrong
    types raised at load (a traceback at broker start)."""
    path = config_path(store_dir, "topics.json")
    with open(path) as f:
        data = json.load(f)
    data["topicConfigTable"]["New"] = entry
    write(path, json.dumps(data))
    with caplog.at_level(logging.ERROR):
        store, core = open_core(store_dir, config)
    try:
        assert core.topics.get("New").write_queue_nums == 4 and core.topics.get("Old").perm == PERM_READ
        peer = Peer(1)
        got = serve(core, peer, *[send(i, "New", b"after") for i in range(5)])  # the broker picks the queues
        assert [(k, r.status) for k, r in got] == [(P.SEND_RESULT, P.SEND_OK)] * 5
    finally:
        store.shutdown()
    assert "topic 'New'" in caplog.text and "entry dropped" in caplog.text


def test_a_bad_topics_table_shape_is_damage(store_dir, config, caplog):
    write(config_path(store_dir, "topics.json"), json.dumps({"topicConfigTable": [1, 2]}))
    with caplog.at_level(logging.ERROR):
        store, core = open_core(store_dir, config)
    try:
        assert user_topics(core.topics.topics) == {"Old", "New"}
    finally:
        store.shutdown()
    assert "topicConfigTable" in caplog.text


def test_garbage_offsets_take_the_backup_loudly(store_dir, config, caplog):
    """Regression: garbage consumerOffset.json silently reset every offset to -1."""
    write(config_path(store_dir, "consumerOffset.json"), "{{{{")
    with caplog.at_level(logging.ERROR):
        store, core = open_core(store_dir, config)
    try:
        assert core.offsets.query("g", "Old", 0) == 1  # from the previous copy
        assert core.offsets.query("g", "New", 3) == -1  # committed after it: re-consumed, not skipped
    finally:
        store.shutdown()
    assert "consumerOffset.json" in caplog.text and "consumerOffset.json.bak" in caplog.text
    assert os.path.exists(config_path(store_dir, "consumerOffset.json.damaged"))


@pytest.mark.parametrize(
    "text",
    [
        "{{{{",
        json.dumps({"offsetTable": {"New@g": {"3": 2**70}}}),
        json.dumps({"offsetTable": {"New@g": {"3": "7"}}}),
        json.dumps({"offsetTable": {"New@g": {"x": 7}}}),
        json.dumps({"offsetTable": {"New": {"3": 7}}}),
        json.dumps({"offsetTable": {"bad topic@g": {"3": 7}}}),
        json.dumps({"offsetTable": {"New@g": {"3": -5}}}),
        json.dumps({"offsetTable": []}),
        json.dumps([]),
    ],
    ids=["garbage", "2^70", "str", "qid", "no-group", "topic", "negative", "list-table", "list"],
)
def test_offsets_without_a_valid_copy_refuse_the_start(store_dir, config, text):
    """Regression: these loaded as no offsets (or raised a TypeError/OverflowError later): a
    LAST_OFFSET group would skip messages. Now the start is refused with one clear error."""
    write(config_path(store_dir, "consumerOffset.json"), text)
    write(config_path(store_dir, "consumerOffset.json.bak"), "not json either")
    with pytest.raises(MetadataError, match=r"consumerOffset\.json") as e:
        open_core(store_dir, config)
    assert "\n" not in str(e.value) and "remove it" in str(e.value)
    with open(config_path(store_dir, "consumerOffset.json")) as f:  # left as it was, for the operator
        assert f.read() == text


def test_a_good_offset_file_loads_unchanged(store_dir, config, caplog):
    with caplog.at_level(logging.WARNING):
        store, core = open_core(store_dir, config)
    try:
        assert core.offsets.query("g", "New", 3) == 1 and core.offsets.query("g", "Old", 0) == 1
    finally:
        store.shutdown()
    assert "damaged" not in caplog.text


NESTED = "[" * 200_000  # past the JSON decoder's recursion limit: RecursionError inside json.loads

LOADED_AT_START = [
    "topics.json",
    "consumerOffset.json",
    "delayOffset.json",
    "timerCheckpoint.json",
    "transactionCheck.json",
    "dlqResend.json",
]


@pytest.mark.parametrize("name", LOADED_AT_START)
def test_a_deeply_nested_metadata_file_is_damage_not_a_traceback(store_dir, config, caplog, name):
    """Every JSON file the store and the broker core load at start, nested too deep to decode:
    the broker starts, with the file's damage logged as for any garbage (its backup or what was
    rebuilt instead), and the messages are all still there."""
    write(config_path(store_dir, name), NESTED)
    with caplog.at_level(logging.WARNING):
        store, core = open_core(store_dir, config)
    try:
        assert user_topics(core.topics.topics) == {"Old", "New"}
        assert store.get_max_offset_in_queue("New", 3) == 1
    finally:
        store.shutdown()
    assert name in caplog.text and "nested too deeply" in caplog.text


def test_deeply_nested_offsets_without_a_valid_copy_refuse_the_start_in_one_line(store_dir, config):
    write(config_path(store_dir, "consumerOffset.json"), NESTED)
    write(config_path(store_dir, "consumerOffset.json.bak"), "{" + '"a": {' * 200_000)
    with pytest.raises(MetadataError, match="nested too deeply") as e:
        open_core(store_dir, config)
    assert "\n" not in str(e.value) and "remove it" in str(e.value)


@pytest.mark.parametrize(
    "kind",
    [protocol.META_TOPICS, protocol.META_OFFSETS, protocol.META_DELAY_OFFSETS],
    ids=["topics", "offsets", "progress"],
)
def test_a_replica_refuses_deeply_nested_metadata_from_its_master_in_one_line(tmp_path, config, caplog, kind):
    """Regression: the master's topics.json, consumerOffset.json or a progress file nested past
    the JSON decoder's limit raised RecursionError in the replica's broker loop."""
    config = dict(config, brokerRole="SLAVE")
    with MessageStore(str(tmp_path / "replica"), config) as store:
        core = BrokerCore(store, BrokerConfig.load(config))
        inbox = ReplicaInbox(None)  # type: ignore[arg-type]  # never rung: apply is called directly
        inbox.metadata(kind, NESTED.encode())
        with caplog.at_level(logging.ERROR):
            inbox.apply(core)
    assert "nested too deeply" in caplog.text and "was not" in caplog.text
