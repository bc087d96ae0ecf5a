"""`shmq top --namesrv` in a real terminal (tmux): both brokers of the routes with their
topics, then only one after the other is SIGKILLed (the routes leave it out at once), then
both again once it is restarted and registers."""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

import shmq
from shmq import Message, Producer
from tests.ipc_tracking import IpcTracker
from tests.process.cluster import SMALL, running_cluster
from tests.process.top.test_top_tmux import Tmux
from tests.waiting import wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (make host-tools installs it as root)"
)


def _broker_rows(screen: str, names: list[str]) -> list[str]:
    """The names of the brokers table's rows on the screen (a row starts with the name and its id)."""
    return [n for n in names if re.search(rf"(?m)^{n}\s+0\s+ASYNC_MASTER", screen)]


def test_top_follows_brokers_leaving_and_coming_back(ipc_tracker: IpcTracker, tmp_path) -> None:
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        names = sorted(b.name for b in cluster.brokers)
        shmq.Admin(namesrv=cluster.namesrv).create_topic("Watched", queues=2)
        for name in names:
            with Producer("top-e2e", broker=name) as p:
                p.send(Message("Watched", b"x"))
        status = tmp_path / "status"
        t = Tmux(
            str(tmp_path / "tmux.sock"),
            f"cd {cwd} && {sys.executable} -m shmq top --namesrv {cluster.namesrv} --interval 0.2; echo $? > {status}",
        )
        try:
            assert t.shows(rf"shmq top - name server {cluster.namesrv}\s+2 broker"), t.screen()
            assert wait_for(lambda: _broker_rows(t.screen(), names) == names, timeout=10.0, step=0.1), t.screen()
            for name in names:
                assert t.shows(rf"(?m)^{name}: topics \(1\)"), t.screen()
            assert t.shows(r"(?m)^total\s"), t.screen()

            killed = next(b for b in cluster.brokers if b.name == names[0])
            killed.kill()
            assert t.shows(rf"shmq top - name server {cluster.namesrv}\s+1 broker"), t.screen()
            assert wait_for(lambda: _broker_rows(t.screen(), names) == names[1:], timeout=10.0, step=0.1), t.screen()
            assert f"{names[0]}: topics" not in t.screen()

            back = shmq.Broker(killed.store_dir, names[0], {**SMALL, "namesrvAddr": cluster.namesrv})
            cluster.brokers[cluster.brokers.index(killed)] = back  # the cluster stops it
            assert t.shows(rf"shmq top - name server {cluster.namesrv}\s+2 broker"), t.screen()
            assert wait_for(lambda: _broker_rows(t.screen(), names) == names, timeout=10.0, step=0.1), t.screen()
            assert t.shows(rf"(?m)^{names[0]}\s+0\s+ASYNC_MASTER\s+{back.pid}\s"), t.screen()
            t.keys("q")
            assert wait_for(lambda: status.exists() and status.read_text().strip() != "", timeout=5.0), t.screen()
            assert status.read_text().strip() == "0"
        finally:
            t.kill()
