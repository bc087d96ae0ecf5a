"""Queue selectors exported from shmq, and their stable hash (no broker needed)."""

from __future__ import annotations

import subprocess
import sys

import shmq
from shmq.model.message import MessageQueue


def test_selectors_are_public():
    assert {"SelectMessageQueueByHash", "SelectMessageQueueByRandom"} <= set(shmq.__all__)
    from shmq import SelectMessageQueueByHash, SelectMessageQueueByRandom  # noqa: F401
    from shmq.client.producer.producer import SelectMessageQueueByHash as old_path  # noqa: N813

    assert old_path is shmq.SelectMessageQueueByHash


def test_hash_selector_is_the_same_in_another_python_run():
    queues = [MessageQueue("T", "b", q) for q in range(7)]
    here = [shmq.SelectMessageQueueByHash()(queues, None, f"key-{i}").queue_id for i in range(50)]
    code = (
        "import shmq; from shmq.model.message import MessageQueue; qs=[MessageQueue('T','b',q) for q in range(7)];"
        "print([shmq.SelectMessageQueueByHash()(qs, None, f'key-{i}').queue_id for i in range(50)])"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "12345"}
    ).stdout
    assert str(here) == there.strip()
    assert len(set(here)) > 1  # it spreads keys


def test_random_selector_returns_one_of_the_queues():
    queues = [MessageQueue("T", "b", q) for q in range(4)]
    picked = {shmq.SelectMessageQueueByRandom()(queues, None, None).queue_id for _ in range(200)}
    assert picked == {0, 1, 2, 3}
