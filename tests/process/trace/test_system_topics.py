"""System topics in the admin listing: marked; users may not create or reshape them."""

from __future__ import annotations

import json
import os

import pytest

import shmq
from shmq import Admin, Message, Producer
from shmq.errors import BrokerError
from shmq.model.system_topics import TRACE_TOPIC, TRANS_HALF_TOPIC


def test_system_topics_are_listed_and_marked(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("Plain", b"x"))
        topics = Admin(broker=broker_name).topics()
        assert topics["Plain"].system is False
        for name in (TRACE_TOPIC, TRANS_HALF_TOPIC, "SCHEDULE_TOPIC_XXXX"):
            assert topics[name].system is True, name
        assert {n for n, t in topics.items() if not t.system} == {"Plain"}


def test_users_cannot_create_or_reshape_system_topics(store_dir, broker_name, config):
    os.makedirs(os.path.join(store_dir, "config"))
    dlq = {"topicName": "%DLQ%cg", "readQueueNums": 1, "writeQueueNums": 1, "perm": 2}
    with open(os.path.join(store_dir, "config", "topics.json"), "w") as f:
        json.dump({"topicConfigTable": {"%DLQ%cg": dlq}}, f)
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker=broker_name)
        for name in ("%RETRY%new", "%DLQ%new", "RMQ_SYS_MINE", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX"):
            with pytest.raises(BrokerError, match="system topic"):
                admin.create_topic(name, queues=1)
        with pytest.raises(BrokerError, match="system topic"):
            admin.update_topic(TRACE_TOPIC, perm=4)
        with pytest.raises(BrokerError, match="system topic"):
            admin.delete_topic(TRANS_HALF_TOPIC)
        with pytest.raises(BrokerError, match="queue counts"):
            admin.update_topic("%DLQ%cg", queues=4)
        # what stays allowed: the perm of an existing dead-letter topic (so tools can read it) ...
        assert admin.update_topic("%DLQ%cg", perm=6).perm == 6
        assert admin.topics()["%DLQ%cg"].system is True
        # ... and deleting a retired group's one
        assert admin.delete_topic("%DLQ%cg") is True
        assert TRACE_TOPIC in admin.topics() and "RMQ_SYS_MINE" not in admin.topics()
