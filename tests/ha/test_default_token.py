"""HA is closed by default: a master started with no haAuthToken (the default config, which runs an
HA sender) admits no peer that lacks its generated token, a replica refuses to run without the
token and refuses a master that cannot prove it, and a pair set up as docs/HA.md says works."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

import shmq
from shmq import Message, SendStatus
from shmq.errors import BrokerStartError, HAProtocolError
from shmq.ha import protocol as P
from shmq.ha.shared import HASegment
from shmq.ha.token import token_path
from tests.ha.conftest import BASE, REPLICA, SEGMENT, Pair
from tests.ha.fake_master import commitlog_bytes
from tests.ha.sender_support import free_port
from tests.ipc_tracking import IpcTracker
from tests.waiting import wait_for

# a replica configured only as the docs say: where to follow, and its store's copy of the token
DOCUMENTED_REPLICA = {k: v for k, v in REPLICA.items() if k != "haAuthToken"}
GUESSES = (b"", b"change-me", b"secret")


class DefaultMaster:
    """A SYNC_MASTER broker with no haAuthToken set, whose own HA sender listens on loopback."""

    def __init__(self, store: str, name: str, tmp: str) -> None:
        self.store, self.name, self.tmp = store, name, tmp
        self.port = free_port()
        self.broker = shmq.Broker(
            store, name, {**BASE, "brokerRole": "SYNC_MASTER", "haListenPort": self.port, "syncFlushTimeout": 1000}
        )
        self.ha = HASegment.open(name, read_only=True)
        assert wait_for(lambda: int(self.ha.header["listen_port"][0]) == self.port, 20), self.ha_log()

    def ha_log(self) -> str:
        path = os.path.join(self.store, "ha.log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def close(self) -> None:
        self.ha.close()
        self.broker.stop()


@pytest.fixture
def master(tmp_path, ipc_tracker: IpcTracker) -> Iterator[DefaultMaster]:
    m = DefaultMaster(ipc_tracker.store(str(tmp_path / "master")), ipc_tracker.name("m"), str(tmp_path))
    try:
        yield m
    finally:
        m.close()


def _impostor(port: int, token: bytes, stop: threading.Event, received: list[bytes]) -> None:
    """A peer that knows no token and plays replica with a guessed key: it answers HELLO, reports
    offset 0 once welcomed and then the end of every frame it gets (acks for SYNC_MASTER sends),
    over and over until ``stop``; what each connection received goes to ``received``."""
    while not stop.is_set():
        session = P.ReplicaSession(b"-", "impostor", 1 << 24)
        session.token = token  # a guess, the empty one included (a real session refuses an empty key)
        got = bytearray()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.settimeout(0.2)
                while not stop.is_set():
                    try:
                        chunk = s.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        break
                    got += chunk
                    for ev in session.receive(chunk):
                        if isinstance(ev, P.Welcome):
                            s.sendall(P.encode_report(0))
                        elif isinstance(ev, P.Data) and ev.data:
                            s.sendall(P.encode_report(ev.offset + len(ev.data)))
                    s.sendall(session.take_output())
        except (OSError, HAProtocolError):
            pass
        received.append(bytes(got))


def test_a_default_master_gives_a_peer_without_its_token_nothing(master: DefaultMaster) -> None:
    path = token_path(master.store)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()  # no other user can read it
    assert path in master.broker.log()  # the broker says where the token is
    with shmq.Producer("pg", broker=master.name) as p:  # a log and a topic table worth stealing
        assert p.send(Message("Secret", b"body-nobody-may-read")).status is SendStatus.SLAVE_NOT_AVAILABLE
    stop = threading.Event()
    received: list[bytes] = []
    threads = [threading.Thread(target=_impostor, args=(master.port, t, stop, received)) for t in GUESSES]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: len(received) >= 6, 20)
        with shmq.Producer("pg", broker=master.name) as p:  # SYNC_MASTER sends while the impostors try to ack
            statuses = [p.send(Message("Secret", b"m%d" % i)).status for i in range(5)]
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert statuses == [SendStatus.SLAVE_NOT_AVAILABLE] * 5
    assert wait_for(lambda: master.ha.replicas() == [], 10)  # the last handshakes were cut off by the stop
    assert any(received), "no impostor connection got the master's HELLO"
    # each connection: HELLO, then at most a refusal (auth): no WELCOME, no metadata, no log; or
    # nothing at all when ``stop`` cut it off before the master's HELLO arrived (at high load)
    for got in received:
        assert got == b"" or got[:4] == b"SQHM", got
        assert b"SQHW" not in got and b"Secret" not in got and b"body-nobody" not in got
        rest = got[P.HELLO.size :]
        assert rest == b"" or (rest[:4] == b"SQHX" and int.from_bytes(rest[6:8], "big") == P.REFUSE_AUTH)
    log = master.ha_log()
    assert "did not prove haAuthToken" in log and "proved" not in log.replace("did not prove", "")


def test_a_pair_set_up_as_documented_works(master: DefaultMaster, tmp_path, ipc_tracker: IpcTracker) -> None:
    """The operator copies the master's STORE/config/ha.token into the replica's store: nothing else."""
    rstore = ipc_tracker.store(str(tmp_path / "replica"))
    os.makedirs(os.path.join(rstore, "config"), mode=0o700)
    shutil.copy2(token_path(master.store), token_path(rstore))
    rname = ipc_tracker.name("r")
    with shmq.Broker(rstore, rname, {**DOCUMENTED_REPLICA, "haMasterAddress": f"127.0.0.1:{master.port}"}) as r:
        assert wait_for(lambda: [x.name for x in master.ha.replicas()] == [rname], 20), (master.ha_log(), r.log())
        with shmq.Producer("pg", broker=master.name) as p:
            assert p.send(Message("Orders", b"acked-by-the-replica")).status is SendStatus.SEND_OK
        end = master.ha.master_offset
        assert wait_for(lambda: master.ha.replicas()[0].acked_offset == end, 20)
        assert commitlog_bytes(rstore, SEGMENT, end) == commitlog_bytes(master.store, SEGMENT, end)
    assert f"replica {rname!r} at 127.0.0.1:" in master.ha_log()


def _stored_nothing(store: str) -> bool:
    cl = os.path.join(store, "commitlog")
    return not os.path.isdir(cl) or not any(any(open(os.path.join(cl, f), "rb").read()) for f in os.listdir(cl))


def test_a_replica_without_a_token_does_not_start(pair: Pair) -> None:
    """No token configured and none in its store: refused in one line, before it connects anywhere
    (it would otherwise follow a master that signs with an empty key)."""
    impostor = pair.fake(token=b"", trust_any=True)
    conf = os.path.join(pair.tmp, "no-token.conf")
    with open(conf, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in DOCUMENTED_REPLICA.items()))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shmq",
            "replica",
            "--store",
            pair.replica_store,
            "--name",
            pair.replica_name,
            "--master",
            impostor.address,
            "--config",
            conf,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs its master's HA token" in lines[0] and "haAuthTokenFile" in lines[0], lines
    with pytest.raises(BrokerStartError, match="needs its master's HA token"):
        shmq.Broker(pair.replica_store, pair.replica_name, {**DOCUMENTED_REPLICA, "haMasterAddress": impostor.address})
    assert impostor.connections == 0 and _stored_nothing(pair.replica_store)


def test_a_master_that_cannot_prove_the_token_feeds_nothing(pair: Pair) -> None:
    """A replica holding the token refuses a master that signs with an empty key (one that bound the
    port while the real master was down): nothing it sends is stored, nothing is reported."""
    with shmq.Producer("pg", broker=pair.master_name) as p:
        p.send(Message("Forged", b"x" * 500))
    impostor = pair.fake(token=b"", trust_any=True)
    os.makedirs(os.path.join(pair.replica_store, "config"), mode=0o700)
    with open(token_path(pair.replica_store), "w") as f:
        f.write("the-real-token\n")
    os.chmod(token_path(pair.replica_store), 0o600)
    r = shmq.Broker(pair.replica_store, pair.replica_name, {**DOCUMENTED_REPLICA, "haMasterAddress": impostor.address})
    pair.replicas.append(r)
    assert wait_for(lambda: impostor.connections >= 2, 20)
    r.stop()
    assert impostor.reports == []
    assert "the master did not prove haAuthToken" in r.log()
    assert _stored_nothing(pair.replica_store)


def test_a_master_given_an_unusable_token_file_does_not_start(tmp_path, ipc_tracker: IpcTracker) -> None:
    """A token file other users can read is no secret: the broker refuses to start, in one line."""
    token = tmp_path / "ha.token"
    token.write_text("secret\n")
    token.chmod(0o644)
    store, name = ipc_tracker.store(str(tmp_path / "m")), ipc_tracker.name("m")
    with pytest.raises(BrokerStartError, match="readable by other users \\(mode 0644\\): chmod 600 it"):
        shmq.Broker(store, name, {**BASE, "haListenPort": free_port(), "haAuthTokenFile": str(token)})
