"""`shmq admin` as a newcomer meets it: a real broker, the command run as a process (through a
pipe, and in an 80-column terminal), ids copied from one command into the next."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator

import pytest

import shmq
from shmq import Admin, BrokerNotFoundError, Message, Producer
from shmq.cli.main import build_parser, main
from tests.ipc_tracking import IpcTracker
from tests.process.broker.test_ha_supervisor import alive
from tests.waiting import wait_for

SMALL = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
}
TOPIC = "OrdersOfTheNewcomerWithALongName"
KEY = "order-[2026]-000042"  # brackets: rich would take "[2026]" for markup
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MSG_ID = re.compile(r"\b[0-9A-F]{32}\b")


def shmq_cmd(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """`shmq ARGS` through a pipe, as a script or `| less` runs it."""
    return subprocess.run(
        [sys.executable, "-m", "shmq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def in_terminal(*args: str, columns: int = 80) -> str:
    """`shmq ARGS` in a pseudo-terminal ``columns`` wide: what a person sees (ANSI codes removed)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdout is the terminal
        os.environ["COLUMNS"] = str(columns)
        os.execv(sys.executable, [sys.executable, "-m", "shmq", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except OSError:  # EIO: the child closed the terminal
        pass
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return ANSI.sub("", out.decode()).replace("\r\n", "\n")


@pytest.fixture
def broker(ipc_tracker: IpcTracker, tmp_path) -> Iterator[tuple[str, list[str]]]:
    """(broker name, msg ids) of a broker holding three messages of TOPIC with KEY."""
    name = ipc_tracker.name("cli")
    with shmq.Broker(ipc_tracker.store(str(tmp_path / "store")), name, SMALL):
        with Producer("pg", broker=name) as p:
            ids = [p.send(Message(TOPIC, b"body %d" % i, keys=[KEY], tags="TagA")).msg_id for i in range(3)]
        yield name, ids


def no_cut(text: str) -> None:
    assert "…" not in text and "..." not in text, text


def test_ids_whole_through_a_pipe_and_copyable(broker) -> None:
    name, ids = broker
    q = shmq_cmd("admin", "msg", "query", "--topic", TOPIC, "--key", KEY, "--name", name)
    assert q.returncode == 0, q.stderr
    no_cut(q.stdout)
    assert sorted(MSG_ID.findall(q.stdout)) == sorted(ids)
    assert KEY in q.stdout and TOPIC in q.stdout
    v = shmq_cmd("admin", "msg", "view", MSG_ID.findall(q.stdout)[0], "--name", name)  # copied from the table
    assert v.returncode == 0, v.stderr
    assert MSG_ID.findall(q.stdout)[0] in v.stdout and KEY in v.stdout
    topics = shmq_cmd("admin", "topic", "list", "--name", name)
    no_cut(topics.stdout)
    for whole in (TOPIC, "RMQ_SYS_TRANS_OP_HALF_TOPIC", "in (since start)"):
        assert whole in topics.stdout


def test_ids_whole_in_an_80_column_terminal(broker) -> None:
    name, ids = broker
    seen = in_terminal("admin", "msg", "query", "--topic", TOPIC, "--key", KEY, "--name", name)
    no_cut(seen)
    assert max(len(line) for line in seen.splitlines()) <= 80, seen
    assert sorted(MSG_ID.findall(seen)) == sorted(ids), seen  # each id whole on its line
    assert KEY in seen and "left out at this width" in seen
    copied = MSG_ID.findall(seen)[0]
    assert copied in in_terminal("admin", "msg", "view", copied, "--name", name)
    for command in (["topic", "list"], ["broker", "status"], ["clients"], ["group", "list"]):
        seen = in_terminal("admin", *command, "--name", name)
        no_cut(seen)
        assert max(len(line) for line in seen.splitlines()) <= 80, seen
    assert "RMQ_SYS_TRANS_OP_HALF_TOPIC" in in_terminal("admin", "topic", "list", "--name", name)


def test_broker_status_names_the_broker(broker) -> None:
    name, _ = broker
    done = shmq_cmd("admin", "broker", "status", "--name", name, "--json")
    assert json.loads(done.stdout)["config"]["brokerName"] == name
    table = shmq_cmd("admin", "broker", "status", "--name", name).stdout
    assert re.search(rf"brokerName\s+│\s+{name}\s", table), table


def plain(line: str) -> None:
    """One line of plain words: no exception class, no `broker error N:`, no traceback."""
    assert line.count("\n") <= 1 and "Traceback" not in line, line
    assert not re.search(r"\b[A-Z]\w*Error\b|broker error|error \d+:", line.removeprefix("shmq ")), line


def test_admin_refusals_read_as_plain_words(broker) -> None:
    name, _ = broker
    done = shmq_cmd("admin", "offset", "reset", "--group", "nogroup", "--topic", TOPIC, "--to", "first", "--name", name)
    assert done.returncode == 1
    assert done.stderr == (
        "shmq admin offset reset: error: consumer group 'nogroup' is unknown: no live member and no committed offset\n"
    )
    done = shmq_cmd(
        "admin", "offset", "reset", "--group", "nogroup", "--topic", TOPIC, "--to", "first", "--name", name, "--json"
    )
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "error": "consumer group 'nogroup' is unknown: no live member and no committed offset",
        "code": 0,
        "code_name": "ADMIN_REFUSED",
    }
    for args in (["topic", "create", "bad name!"], ["topic", "create", "%DLQ%x"], ["msg", "trace", "a b"]):
        done = shmq_cmd("admin", *args, "--name", name)
        assert done.returncode == 1 and done.stderr.startswith(f"shmq admin {args[0]} {args[1]}: error: "), done
        plain(done.stderr)


def test_send_refusals_read_as_plain_words(broker) -> None:
    """Each ERROR code a producer can meet: the message in words, the code on the exception."""
    name, _ = broker
    admin = Admin(name)
    admin.create_topic("ReadOnly", queues=1, perm=4)
    with Producer("pg", broker=name, retry_times_when_send_failed=0) as p:
        cases = [
            (
                Message(TOPIC, b"x", delay=10 * 86400),
                13,
                "delivery time is 10 days from now; the limit is timerMaxDelaySec = 3 days (259200 s)",
            ),
            (
                Message("ReadOnly", b"x"),
                16,
                "topic 'ReadOnly' is not writable (perm 4): allow writes with "
                "`shmq admin topic update ReadOnly --perm 6`",
            ),
            (Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"), 16, None),
        ]
        for msg, code, text in cases:
            with pytest.raises(shmq.BrokerError) as e:
                p.send(msg)
            assert e.value.code == code, e.value
            if text is not None:
                assert str(e.value) == text
            plain(str(e.value))


def test_topic_not_exist_reads_as_plain_words(ipc_tracker: IpcTracker, tmp_path) -> None:
    name = ipc_tracker.name("cli")
    with (
        shmq.Broker(ipc_tracker.store(str(tmp_path / "store")), name, {**SMALL, "autoCreateTopicEnable": False}),
        Producer("pg", broker=name, retry_times_when_send_failed=0) as p,
        pytest.raises(shmq.BrokerError) as e,
    ):
        p.send(Message("Nope", b"x"))
    assert e.value.code == 17 and e.value.code_name == "TOPIC_NOT_EXIST"
    assert str(e.value) == (
        "topic 'Nope' does not exist (autoCreateTopicEnable is false): create it with `shmq admin topic create Nope`"
    )


def test_no_broker_gives_the_start_hint(ipc_tracker: IpcTracker) -> None:
    name = ipc_tracker.name("nobody")
    hint = f"start one with `shmq broker --store DIR --name {name}`"
    for args in (["topic", "list"], ["msg", "query", "--topic", "T", "--key", "k"], ["broker", "status"]):
        done = shmq_cmd("admin", *args, "--name", name)
        assert done.returncode == 1
        assert done.stderr == (
            f"shmq admin {args[0]} {args[1]}: error: no broker named {name!r} is running (no state segment); {hint}\n"
        ), done.stderr
    with pytest.raises(BrokerNotFoundError, match=re.escape(hint)):
        Admin(name).topics()
    with pytest.raises(BrokerNotFoundError, match=re.escape(hint)):
        Producer("pg", broker=name, start_timeout=0.1).start()  # the clients' words: the same hint


def test_promote_json(ipc_tracker: IpcTracker, tmp_path) -> None:
    """`admin promote --json`: what it did as data; a refusal as {"error": ...} (exit 1)."""
    name = ipc_tracker.name("cli")
    store = ipc_tracker.store(str(tmp_path / "store"))
    done = shmq_cmd("admin", "promote", "--store", store, "--name", name, "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    pid = d["pid"]
    try:
        assert d == {
            "store": os.path.realpath(store),
            "name": name,
            "role": "ASYNC_MASTER",
            "pid": pid,
            "replica_pid_stopped": None,
            "log": os.path.join(os.path.realpath(store), "broker.log"),
        }
        assert Admin(name).broker_status()["pid"] == pid
        again = shmq_cmd("admin", "promote", "--store", store, "--name", name, "--json")
        assert again.returncode == 1
        assert "is a master already" in json.loads(again.stdout)["error"]
        plain(again.stderr)
    finally:
        os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: not alive(pid), 30)


def _commands(parser: argparse.ArgumentParser, words: list[str]) -> Iterator[list[str]]:
    """``words`` and the words of every subcommand under it."""
    yield words
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _commands(sub, [*words, word])


def test_every_help_fits_80_columns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Every `shmq ... --help` at 80 columns: no line over 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    commands = list(_commands(build_parser(), []))
    assert len(commands) > 30 and ["admin", "msg", "query"] in commands
    for words in commands:
        with pytest.raises(SystemExit) as e:
            main([*words, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: shmq"), words
        assert not [line for line in out.splitlines() if len(line) > 80], (words, out)
