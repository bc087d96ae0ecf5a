"""The master broker's HA sender child (``shmq ha``): started with the broker, restarted when it
dies while sends go on, stopped with the broker, gone by itself when the broker is killed, and a
sender that cannot bind its port only logs."""

from __future__ import annotations

import os
import signal
import threading
import time

import shmq
from shmq import Message, Producer, SendStatus
from shmq.ha.shared import HASegment
from tests.process.broker.test_sync_master import free_port
from tests.waiting import wait_for


def alive(pid: int) -> bool:
    """A live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]


def sender_pid(ha: HASegment) -> int:
    return int(ha.header["sender_pid"][0])


def test_sender_is_restarted_while_async_master_sends_go_on(store_dir, broker_name, config):
    config.update(haListenPort=free_port(), haAuthToken="s3cret")
    broker = shmq.Broker(store_dir, broker_name, config)
    ha = None
    stop = threading.Event()
    results: list[tuple[SendStatus, float]] = []
    try:
        ha = HASegment.open(broker_name)
        assert wait_for(lambda: sender_pid(ha) != 0, 10)
        first = sender_pid(ha)
        args = cmdline(first)
        assert args[1:4] == ["-m", "shmq", "ha"] and args[args.index("--name") + 1] == broker_name
        conf = args[args.index("--config") + 1]
        assert conf.startswith("/dev/fd/")  # inherited, never a file a killed broker leaves with the token
        assert os.readlink(f"/proc/{first}/fd/{conf[8:]}").startswith("/memfd:")
        with open(f"/proc/{first}/fd/{conf[8:]}") as f:
            assert "haAuthToken=s3cret\n" in f.read()

        def produce() -> None:
            with Producer("pg", broker=broker_name) as p:
                while not stop.is_set():
                    t = time.perf_counter()
                    results.append((p.send(Message("T", b"x")).status, time.perf_counter() - t))

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            assert wait_for(lambda: len(results) > 20, 10)
            os.kill(first, signal.SIGKILL)
            assert wait_for(lambda: sender_pid(ha) not in (0, first) and alive(sender_pid(ha)), 10)
            before = len(results)
            assert wait_for(lambda: len(results) > before + 20, 10)
        finally:
            stop.set()
            thread.join(10)
        assert {s for s, _ in results} == {SendStatus.SEND_OK}
        assert max(t for _, t in results) < 0.5  # never stalled on the sender's absence
    finally:
        if ha is not None:
            ha.close()
        broker.stop()
    assert f"HA sender (pid {first}) ended: killed by SIGKILL" in broker.log()
    assert not alive(first)


def running_sender(broker_name: str) -> int:
    ha = HASegment.open(broker_name)
    try:
        assert wait_for(lambda: sender_pid(ha) != 0, 10)
        return sender_pid(ha)
    finally:
        ha.close()


def test_broker_shutdown_leaves_no_sender(store_dir, broker_name, config):
    config.update(haListenPort=free_port())
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        pid = running_sender(broker_name)
        assert alive(pid)
    finally:
        broker.stop()
    assert not alive(pid)
    with open(os.path.join(store_dir, "ha.log")) as f:
        assert "stopped" in f.read()  # SIGTERM: it stopped by itself, no SIGKILL needed
    assert "did not stop" not in broker.log()


def test_sender_of_a_killed_broker_exits_by_itself(store_dir, broker_name, config):
    config.update(haListenPort=free_port())
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        pid = running_sender(broker_name)
        os.kill(broker.pid, signal.SIGKILL)
        broker.process.wait()
        assert wait_for(lambda: not alive(pid), 30)
    finally:
        broker.stop()  # removes what the killed broker left


def test_a_second_broker_whose_sender_cannot_bind_only_logs(tmp_path, ipc_tracker, config):
    port = free_port()
    names = [ipc_tracker.name("b"), ipc_tracker.name("b")]
    stores = [ipc_tracker.store(str(tmp_path / f"s{i}")) for i in range(2)]
    brokers = []
    try:
        for name, store in zip(names, stores):
            brokers.append(shmq.Broker(store, name, {**config, "haListenPort": port}))
        pids = [running_sender(n) for n in names]

        def complains() -> bool:
            with open(os.path.join(stores[1], "ha.log")) as f:
                return f"cannot listen on 127.0.0.1:{port}" in f.read()

        assert wait_for(complains, 10)
        for name in names:
            with Producer("pg", broker=name) as p:
                assert p.send(Message("T", b"x")).status is SendStatus.SEND_OK
        assert all(alive(pid) for pid in pids)
        log = brokers[1].log()
        assert log.count("HA sender started") == 1 and "ended" not in log  # it waits for the port, no restarts
    finally:
        for b in brokers:
            b.stop()


def test_restart_backoff_doubles_to_the_cap_and_resets_after_a_long_run(tmp_path, ipc_tracker):
    """Driven with the clock the broker's tick passes; the children are real ``shmq ha``
    processes that exit at once (no broker of that name runs)."""
    from shmq.config import BrokerConfig
    from shmq.procs import ha_supervisor as S

    sup = S.SenderSupervisor(str(tmp_path), ipc_tracker.name("b"), BrokerConfig())
    s = 1_000_000_000

    def exits(now: int) -> int:
        """Let the running child end, see it on a check; when its restart is due."""
        p = sup.process
        assert p is not None and wait_for(lambda: p.poll() is not None, 10)
        sup.check(now)
        assert sup.process is None and sup._restart_at is not None
        return sup._restart_at

    try:
        now = 0
        sup.start(now)
        delays = []
        for _ in range(7):
            now += S.CHECK_NS
            due = exits(now)
            delays.append((due - now) / s)
            sup.check(due - 1)  # not yet (the check interval passed, the backoff did not)
            assert sup.process is None
            now = due - 1 + S.CHECK_NS  # the next check after it is due restarts it
            sup.check(now)
            assert sup.process is not None
        assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0] and sup.restarts == 7
        due = exits(now + 31 * s)  # it ran 31 s: the backoff starts over
        assert (due - now - 31 * s) / s == 0.2
    finally:
        sup.stop(lambda: None)
    with open(tmp_path / "ha.log") as f:
        assert f.read().count("shmq ha: error: no broker named") == 8  # the config it read was fine
