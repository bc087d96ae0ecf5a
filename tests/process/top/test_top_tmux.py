"""`shmq top` driven in a real terminal (tmux, 160x50): attach, watch a send move the numbers,
see "broker down" after a SIGKILL, reattach to the restarted broker, quit with q."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

import shmq
from shmq import Message, Producer
from tests.waiting import wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (make host-tools installs it as root)"
)


class Tmux:
    """One detached session on a tmux server of its own (a socket in the test's temporary
    directory, so nothing is left behind), killed at the end."""

    def __init__(self, socket: str, command: str) -> None:
        self.socket = socket
        # one command line: the option holds before the pane's program starts; with no client
        # attached tmux resizes windows to default-size, so that is the fixed size too
        self._tmux(
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "50",
            command,
            ";",
            "set-option",
            "-g",
            "default-size",
            "160x50",
        )

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True, timeout=10
        ).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "top")

    def shows(self, pattern: str, timeout: float = 10.0) -> bool:
        return wait_for(lambda: re.search(pattern, self.screen()) is not None, timeout=timeout, step=0.1)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "top", *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def tmux_top(broker_name: str, tmp_path) -> Iterator[Tmux]:
    """top in a tmux pane; its exit status lands in ``tmp_path/status`` (tmux's own pane status
    is not dependable: tmux 3.3a at times leaves the exited program unreaped)."""
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    t = Tmux(
        str(tmp_path / "tmux.sock"),
        f"cd {cwd} && {sys.executable} -m shmq top --name {broker_name} "
        f"--interval 0.2; echo $? > {tmp_path / 'status'}",
    )
    try:
        yield t
    finally:
        t.kill()


def _max_offset(screen: str, topic: str) -> int:
    row = next(line for line in screen.splitlines() if line.startswith(f"{topic} "))
    return int(row.split()[-3].replace(",", ""))


def test_top_attaches_follows_survives_a_restart_and_quits(store_dir, broker_name, config, tmux_top, tmp_path) -> None:
    broker = shmq.Broker(store_dir, name=broker_name, config=config)
    try:
        with Producer("top-e2e", broker=broker_name) as p:
            p.send(Message("Watched", b"first"))
            assert tmux_top.shows(rf"shmq top - {broker_name}\s+ASYNC_MASTER.*pid {broker.pid}"), tmux_top.screen()
            assert tmux_top.shows(r"(?m)^Watched\s+\d+"), tmux_top.screen()
            assert wait_for(lambda: _max_offset(tmux_top.screen(), "Watched") == 1, timeout=5.0, step=0.1)
            sent = 0

            # keep sending until a frame shows a non-zero in rate (frames are 0.2 s apart)
            def moving() -> bool:
                nonlocal sent
                p.send_batch([Message("Watched", b"x" * 100) for _ in range(50)])
                sent += 50
                row = next((ln for ln in tmux_top.screen().splitlines() if ln.startswith("Watched ")), "")
                return bool(row) and float(row.split()[2].replace(",", "")) > 0

            assert wait_for(moving, timeout=10.0, step=0.05), tmux_top.screen()
            assert wait_for(lambda: _max_offset(tmux_top.screen(), "Watched") == 1 + sent, timeout=5.0, step=0.1)
        broker.kill()  # SIGKILL: the segment stays, its liveness semaphore is released
        assert tmux_top.shows("broker down - waiting for it"), tmux_top.screen()
        broker = shmq.Broker(store_dir, name=broker_name, config=config)
        assert tmux_top.shows(rf"ASYNC_MASTER.*pid {broker.pid}"), tmux_top.screen()
        assert tmux_top.shows(r"(?m)^Watched\s"), tmux_top.screen()
        tmux_top.keys("q")
        status = tmp_path / "status"
        assert wait_for(lambda: status.exists() and status.read_text().strip() != "", timeout=5.0), tmux_top.screen()
        assert status.read_text().strip() == "0"
    finally:
        broker.stop()


def test_sigterm_restores_the_terminal(tmp_path, broker_name) -> None:
    after = tmp_path / "after"
    t = Tmux(
        str(tmp_path / "tmux.sock"),
        f"{sys.executable} -m shmq top --name {broker_name} --interval 0.2; echo status=$? > {after}; "
        f"stty -a >> {after}; sleep 30",
    )
    try:
        assert t.shows("broker down - waiting for it"), t.screen()
        pane = psutil.Process(int(t._tmux("display-message", "-p", "-t", "top", "#{pane_pid}")))
        (top,) = pane.children()
        top.send_signal(signal.SIGTERM)
        assert wait_for(lambda: after.exists() and "icanon" in after.read_text(), timeout=5.0)
        text = after.read_text()
        assert text.startswith("status=143")
        assert "-icanon" not in text and "-echo " not in text  # cbreak mode undone
    finally:
        t.kill()
