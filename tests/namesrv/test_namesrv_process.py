"""Real name servers and brokers: registration, deaths and restarts on either side, refusals,
bad input, two name servers on one host. Times are measured and printed (run with -s), never
asserted beyond a generous bound."""

from __future__ import annotations

import logging
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
import sysv_ipc

import shmq
from shmq.namesrv.segment import HEADER_BYTES, RouteReader, routes_name
from shmq.ring.control import Admin, Attach, ControlQueue, new_client_id
from shmq.ring.shm import Segment
from tests.ipc_tracking import IpcTracker
from tests.namesrv.conftest import BASE, WAIT_S, pids, start_broker, table_when
from tests.waiting import wait_for


def test_a_cluster_registers_its_brokers_and_their_topics(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    root = os.path.join(str(tmp_path), "cluster")
    names = ipc_tracker.cluster(ns_name, root, 2)
    with shmq.Cluster(root, brokers=2, namesrv=ns_name, config={**BASE, "brokerClusterName": "c27"}) as c:
        assert c.broker_names == names
        table = reader.read()
        assert [b.attach_name for b in table.brokers] == names
        assert pids(table) == {b.pid for b in c.brokers}
        for b in table.brokers:
            assert (b.broker_name, b.cluster, b.broker_id, b.role) == (b.attach_name, "c27", 0, "ASYNC_MASTER")
            assert b.store_dir == os.path.join(root, b.attach_name)
        assert table.clusters() == {"c27": names}
        shmq.Admin(broker=names[1]).create_topic("T27", 3)
        table = table_when(reader, lambda t: t.topic_route("T27").exists)
        route = table.topic_route("T27")
        assert [b.attach_name for b in route.brokers] == [names[1]]
        assert [(q.broker_name, q.queue_id) for q in route.write_queues()] == [(names[1], i) for i in range(3)]
        assert c.namesrv.stop() == 0  # stop() again in __exit__ is harmless
    assert not os.path.exists("/dev/shm" + routes_name(ns_name))


def test_a_killed_broker_leaves_the_routes_and_a_restarted_one_comes_back(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    tmp = str(tmp_path)
    with shmq.NameServer(ns_name):
        b0 = start_broker(ipc_tracker, tmp, ns_name)
        b1 = start_broker(ipc_tracker, tmp, ns_name)
        try:
            table_when(reader, lambda t: pids(t) == {b0.pid, b1.pid})
            t0 = time.monotonic()
            b0.kill()
            table_when(reader, lambda t: pids(t) == {b1.pid})
            print(f"\nSIGKILLed broker out of the routes after {(time.monotonic() - t0) * 1000:.1f} ms")
            b0 = shmq.Broker(b0.store_dir, b0.name, {**BASE, "namesrvAddr": ns_name})
            table = table_when(reader, lambda t: pids(t) == {b0.pid, b1.pid})
            assert table.broker(b0.name).attach_name == b0.name  # type: ignore[union-attr]
        finally:
            b0.stop()
            b1.stop()
        table_when(reader, lambda t: not t.brokers)  # a clean stop deregisters


def test_a_restarted_name_server_gets_every_registration_back(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader, caplog: pytest.LogCaptureFixture
) -> None:
    tmp = str(tmp_path)
    brokers: list[shmq.Broker] = []
    first = shmq.NameServer(ns_name)
    second = None
    try:
        brokers += [start_broker(ipc_tracker, tmp, ns_name), start_broker(ipc_tracker, tmp, ns_name)]
        before = table_when(reader, lambda t: len(t.brokers) == 2)
        first.kill()
        assert wait_for(lambda: not reader.server_alive(), WAIT_S)
        with caplog.at_level(logging.WARNING):
            assert pids(reader.read()) == pids(before)  # the last table, while none serves
        brokers.append(start_broker(ipc_tracker, tmp, ns_name))  # starts although none serves
        t0 = time.monotonic()
        second = shmq.NameServer(ns_name)  # replaces what the killed one left
        started = time.monotonic()
        table = table_when(reader, lambda t: pids(t) == {b.pid for b in brokers})
        done = time.monotonic()
        print(
            f"\nname server restart: up in {(started - t0) * 1000:.0f} ms, "
            f"all {len(brokers)} brokers back {(done - started) * 1000:.0f} ms after"
        )
        assert table.incarnation != before.incarnation
    finally:
        for b in brokers:
            b.stop()
        if second is not None:
            second.stop()
        first.stop()  # a live successor holds the name: this removes only its log


def test_a_second_broker_claiming_a_live_name_and_id_is_refused(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    tmp = str(tmp_path)
    with shmq.NameServer(ns_name):
        b0 = start_broker(ipc_tracker, tmp, ns_name)
        try:
            table_when(reader, lambda t: pids(t) == {b0.pid})
            with pytest.raises(shmq.BrokerStartError) as e:
                start_broker(ipc_tracker, tmp, ns_name, masterBrokerName=b0.name)
            assert f"broker {b0.name!r} id 0 is already registered by live pid {b0.pid}" in str(e.value)
            assert pids(reader.read()) == {b0.pid}
        finally:
            b0.stop()


def test_two_name_servers_on_one_host_do_not_mix(tmp_path: object, ipc_tracker: IpcTracker, ns_name: str) -> None:
    tmp = str(tmp_path)
    other = ipc_tracker.namesrv("nsb")
    with shmq.NameServer(ns_name), shmq.NameServer(other):
        a = start_broker(ipc_tracker, tmp, ns_name)
        b = start_broker(ipc_tracker, tmp, other)
        ra, rb = RouteReader(ns_name), RouteReader(other)
        try:
            ta = table_when(ra, lambda t: len(t.brokers) == 1)
            tb = table_when(rb, lambda t: len(t.brokers) == 1)
            assert (pids(ta), pids(tb)) == ({a.pid}, {b.pid})
            assert ta.incarnation != tb.incarnation and (ta.namesrv, tb.namesrv) == (ns_name, other)
            with pytest.raises(shmq.BrokerStartError, match=f"a name server named {ns_name!r} already serves"):
                shmq.NameServer(ns_name)
        finally:
            ra.close()
            rb.close()
            a.stop()
            b.stop()


def _write_garbage(ns: str) -> None:
    """Overwrite the table's bytes and move the sequence on, as a stray writer could."""
    seg = Segment.open(routes_name(ns))
    try:
        (seq,) = struct.unpack_from("<Q", seg.buf, 16)
        seg.buf[HEADER_BYTES : HEADER_BYTES + 8] = b"garbage!"
        struct.pack_into("<Q", seg.buf, 16, seq + 2)
    finally:
        seg.close()


def test_garbage_in_the_route_segment_is_ignored_and_the_last_table_kept(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader, caplog: pytest.LogCaptureFixture
) -> None:
    tmp = str(tmp_path)
    with shmq.NameServer(ns_name):
        b0 = start_broker(ipc_tracker, tmp, ns_name)
        try:
            good = table_when(reader, lambda t: pids(t) == {b0.pid})
            _write_garbage(ns_name)
            time.sleep(0.05)
            with caplog.at_level(logging.WARNING):
                assert reader.read() == good
            assert "ignoring its route segment" in caplog.text
            shmq.Admin(broker=b0.name).create_topic("after-garbage", 1)  # the server publishes a good table
            table_when(reader, lambda t: t.topic_route("after-garbage").exists)
        finally:
            b0.stop()


def test_a_route_to_a_dead_pid_is_never_returned(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    tmp = str(tmp_path)
    with shmq.NameServer(ns_name) as ns:
        b0 = start_broker(ipc_tracker, tmp, ns_name)
        b1 = start_broker(ipc_tracker, tmp, ns_name)
        try:
            table_when(reader, lambda t: pids(t) == {b0.pid, b1.pid})
            os.kill(ns.pid, signal.SIGSTOP)  # the segment keeps naming b1 after it dies
            try:
                b1.kill()
                t0 = time.monotonic()
                table_when(reader, lambda t: pids(t) == {b0.pid})
                print(f"\nreader left the dead broker out after {(time.monotonic() - t0) * 1000:.1f} ms")
            finally:
                os.kill(ns.pid, signal.SIGCONT)
        finally:
            b0.stop()
            b1.stop()


def _call(ns: str, command: str, args: object) -> shmq.ShmqError | dict[str, object]:
    key = RouteReader(ns).control_key()
    assert key is not None
    reply = ControlQueue.open(key).call(Admin(new_client_id(), 1, command, args), WAIT_S)  # type: ignore[arg-type]
    return reply.body if reply.ok else shmq.ShmqError(str(reply.body.get("error")))


def test_malformed_requests_get_a_clear_error_and_the_server_serves_on(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    tmp = str(tmp_path)
    with shmq.NameServer(ns_name) as ns:
        b0 = start_broker(ipc_tracker, tmp, ns_name)
        try:
            entry = table_when(reader, lambda t: pids(t) == {b0.pid}).brokers[0]
            good = {
                "broker_name": "forged",
                "attach_name": b0.name,
                "cluster": "c",
                "broker_id": 0,
                "role": "ASYNC_MASTER",
                "pid": entry.pid,
                "alive_key": entry.alive_key,
                "store_dir": "/x",
            }
            cases = {
                "role 'BOSS' is not one of": {**good, "role": "BOSS"},
                "pid must be an integer": {**good, "pid": "1"},
                "unknown field 'x'": {**good, "x": 1},
                "has no readable state segment": {**good, "attach_name": "nobody-here"},
                "not the pid": {**good, "pid": os.getpid()},  # a process claiming another's segment
            }
            for says, args in cases.items():
                answer = _call(ns_name, "register_broker", args)
                assert isinstance(answer, shmq.ShmqError) and says in str(answer), (says, answer)
                assert "\n" not in str(answer) and "Traceback" not in str(answer)
            answer = _call(ns_name, "create_topic", {})
            assert isinstance(answer, shmq.ShmqError) and "register_broker and unregister_broker only" in str(answer)
            key = RouteReader(ns_name).control_key()
            assert key is not None
            reply = ControlQueue.open(key).call(Attach(new_client_id(), 1, os.getpid(), 1, 4096), WAIT_S)
            assert not reply.ok and "not attach" in reply.body["error"]
            sysv_ipc.MessageQueue(key).send(b"\x03\x02garbage", type=1)  # not even a header
            # still serving, the real broker still registered, a good request still answered
            assert _call(ns_name, "unregister_broker", {"broker_name": "x", "broker_id": 0, "pid": 1}) == {
                "incarnation": reader.read().incarnation,
                "version": reader.read().version,
            }
            assert pids(reader.read()) == {b0.pid}
            assert ns.process.poll() is None
        finally:
            b0.stop()


def test_shmq_cluster_runs_in_the_foreground_until_sigterm(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    root = os.path.join(str(tmp_path), "root")
    names = ipc_tracker.cluster(ns_name, root, 1)
    conf = os.path.join(str(tmp_path), "broker.conf")
    with open(conf, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in BASE.items()))
    cmd = [sys.executable, "-m", "shmq", "cluster", "--store-root", root, "--brokers", "1", "--namesrv", ns_name]
    proc = subprocess.Popen([*cmd, "--config", conf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        table_when(reader, lambda t: [b.attach_name for b in t.brokers] == names)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, out
    assert f"broker {names[0]!r}" in out
    assert not os.path.exists("/dev/shm" + routes_name(ns_name))


def test_a_cluster_with_a_bad_shape_starts_nothing(tmp_path: object, ns_name: str) -> None:
    root = os.path.join(str(tmp_path), "root")
    with pytest.raises(shmq.ConfigError, match=r"1\.\.64 brokers"):
        shmq.Cluster(root, brokers=0, namesrv=ns_name)
    with pytest.raises(shmq.ConfigError, match="is not this cluster's"):
        shmq.Cluster(root, brokers=1, namesrv=ns_name, config={"namesrvAddr": "other"})
    assert not os.path.exists(root)
