"""Leaving the README's loop, ``async for m in shmq.aio.PushConsumer(...).messages(T): break``,
in a real process: the consumer leaves its group at once, the script's process exits when the
script ends, and SIGTERM ends it too. Nothing is left behind (the autouse leak check)."""

from __future__ import annotations

import signal
import subprocess
import sys

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message
from tests.ipc_tracking import client_semaphores
from tests.waiting import wait_for

QUEUES = 4
_SCRIPT = """
import asyncio, sys, time
import shmq
from shmq import ConsumeFrom

async def main():
    consumer = shmq.aio.PushConsumer("cg", broker=sys.argv[1], consume_from=ConsumeFrom.FIRST_OFFSET)
    async for msg in consumer.messages("T"):
        print("got", msg.body.decode(), flush=True)
        break
    print("left the loop", flush=True)
    await asyncio.sleep(float(sys.argv[2]))

asyncio.run(main())
print("end of script", flush=True)
"""


def _run(broker: str, linger: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, broker, str(linger)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _feed(broker: str, count: int) -> None:
    shmq.Admin(broker).create_topic("T", queues=QUEUES)
    with shmq.Producer("feed", broker=broker) as p:
        p.send_batch([Message("T", b"%d" % i) for i in range(count)])


def _members(broker: str) -> int:
    group = shmq.Admin(broker).groups().get("cg")
    return 0 if group is None else len(group.members)


def _queues_of_t(c: shmq.PushConsumer) -> int:
    return sum(1 for mq in c.assigned_queues() if mq.topic == "T")


def _wait_exit(p: subprocess.Popen, timeout: float) -> int | None:
    """The exit status within ``timeout``, else None (then the process is killed)."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None
    finally:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]


def test_the_process_exits_when_the_script_ends(store_dir, broker_name, config):
    """Hundreds of messages read ahead, consume threads waiting for the loop: before, the process
    hung at exit (the consume threads waited for a verdict from a closed loop)."""
    with shmq.Broker(store_dir, broker_name, config):
        _feed(broker_name, 300)
        p = _run(broker_name, 0)
        rc = _wait_exit(p, 60)
        assert rc == 0
        assert client_semaphores(store_dir) == []  # it released its own (the feeding producer did too)
        assert wait_for(lambda: _members(broker_name) == 0, 20)


def test_leaving_the_loop_leaves_the_group_and_sigterm_ends_the_process(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _feed(broker_name, 300)
        p = _run(broker_name, 600)
        try:
            assert p.stdout.readline().startswith("got ")  # type: ignore[union-attr]
            assert p.stdout.readline() == "left the loop\n"  # type: ignore[union-attr]
            # the process lives on; its consumer is out of the group: a second member gets every queue
            assert wait_for(lambda: _members(broker_name) == 0, 20), "the consumer stayed in its group"
            second = shmq.PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
            second.subscribe("T")
            second.register_listener(lambda msgs, ctx: ConsumeResult.SUCCESS)
            with second.start():
                assert wait_for(lambda: _queues_of_t(second) == QUEUES, 20), second.assigned_queues()
            p.send_signal(signal.SIGTERM)
        finally:
            rc = _wait_exit(p, 30)
        assert rc == -signal.SIGTERM
