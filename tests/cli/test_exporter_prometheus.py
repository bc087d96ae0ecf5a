"""A real Prometheus server scraping `shmq exporter` (both name sets): PromQL over its HTTP API
returns the broker's rates and a lagging group's lag.

Debian's ``prometheus`` (the Makefile's host-tools target installs it); without the binary the
test skips and says why. Prometheus runs on a free port with a temp config and data directory,
both removed (and the process ended) however the test ends.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import shmq
from shmq import ConsumeFrom, LitePullConsumer, Message, Producer
from tests.cli.test_exporter import SMALL, exporter_process
from tests.docs.test_grafana import exprs, load
from tests.ipc_tracking import IpcTracker
from tests.waiting import wait_for

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs Debian's prometheus server (make host-tools installs it)"
)

TOPIC, GROUP = "PromOrders", "prom-billing"
SENT, TAKEN = 240, 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus(targets: dict[str, str]) -> Iterator[str]:
    """A Prometheus scraping each ``job -> host:port`` every second; yields its base URL."""
    with tempfile.TemporaryDirectory(prefix="shmq-prom-") as tmp:
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            for job, target in targets.items()
        )
        config = Path(tmp, "prometheus.yml")
        config.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}")
        port = _free_port()
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            assert wait_for(lambda: _ready(base) or proc.poll() is not None), "prometheus did not get ready"
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stderr.close()  # type: ignore[union-attr]


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _query(base: str, promql: str, at: float | None = None) -> list[dict]:
    """The result vector of an instant query (``at``: its evaluation time)."""
    params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
    with urllib.request.urlopen(f"{base}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _one(base: str, promql: str, at: float | None = None) -> float | None:
    """The value of a query that selects one series (None while it selects none)."""
    result = _query(base, promql, at)
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def _host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def test_prometheus_scrapes_rates_and_lag_in_both_name_sets(ipc_tracker: IpcTracker, tmp_path) -> None:
    name = ipc_tracker.name("prom")
    store = ipc_tracker.store(str(tmp_path / "store"))
    serving = f"serving broker {name!r}"
    with (
        shmq.Broker(store, name, SMALL),
        exporter_process(["--name", name], serving) as plain,
        exporter_process(["--name", name, "--names", "rocketmq5", "--cluster", "c1"], serving) as rmq,
        prometheus({"shmq": _host_port(plain), "rmq5": _host_port(rmq)}) as prom,
    ):
        assert wait_for(lambda: _one(prom, 'up{job="shmq"}') == 1 and _one(prom, 'up{job="rmq5"}') == 1)
        started = time.time()  # before the first message is stored
        with Producer("prom-pg", broker=name) as p:
            for i in range(SENT):  # over ~3 s: several scrapes see the counter grow
                p.send(Message(TOPIC, b"order %d" % i))
                if i % 20 == 19:
                    time.sleep(0.25)
        # a group that consumed TAKEN of the SENT messages and committed them: it lags
        consumer = LitePullConsumer(
            GROUP, broker=name, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit=False, pull_batch_size=10
        )
        consumer.subscribe(TOPIC)
        consumer.start()
        try:
            taken = 0
            deadline = time.monotonic() + 30
            while taken < TAKEN and time.monotonic() < deadline:
                taken += len(consumer.poll(timeout=1.0))
            assert TAKEN <= taken < SENT
            consumer.commit_sync()  # the offsets after every message poll returned
            lag = SENT - taken

            shmq_in = f'shmq_topic_messages_in_total{{job="shmq",topic="{TOPIC}"}}'
            rmq_in = f'rocketmq_messages_in_total{{job="rmq5",topic="{TOPIC}"}}'
            shmq_lag = f'shmq_group_lag{{job="shmq",group="{GROUP}",topic="{TOPIC}"}}'
            rmq_lag = f'rocketmq_consumer_lag_messages{{job="rmq5",consumer_group="{GROUP}",topic="{TOPIC}"}}'
            assert wait_for(
                lambda: (
                    _one(prom, shmq_in) == SENT
                    and _one(prom, rmq_in) == SENT
                    and _one(prom, shmq_lag) == lag
                    and _one(prom, rmq_lag) == lag
                )
            ), (_one(prom, shmq_in), _one(prom, rmq_in), _one(prom, shmq_lag), _one(prom, rmq_lag))
            labels = _query(prom, rmq_lag)[0]["metric"]
            assert (labels["cluster"], labels["node_type"], labels["node_id"]) == ("c1", "broker", name)
            assert _one(prom, f'rocketmq_messages_out_total{{consumer_group="{GROUP}",topic="{TOPIC}"}}') == taken
            age = _one(prom, f'rocketmq_consumer_lag_latency{{consumer_group="{GROUP}",topic="{TOPIC}"}}')
            assert age is not None and 0 < age < (time.time() - started) * 1000

            # rates: while sending, rate() over the sending period is positive, and irate() is
            # exactly the last two scraped samples' difference over their time apart
            assert (_one(prom, f"max_over_time(rate({shmq_in}[5s])[1m:1s])") or 0) > 0
            assert (_one(prom, f"max_over_time(rate({rmq_in}[5s])[1m:1s])") or 0) > 0

            # evaluated 3 s back: a scrape that started before that instant is stored by then
            # (its sample carries the scrape's start time), so both queries see the same samples
            def settled() -> tuple[float, list] | None:
                at = time.time() - 3
                result = _query(prom, f"{shmq_in}[1m]", at)
                return (at, result[0]["values"]) if result and len(result[0]["values"]) >= 2 else None

            assert wait_for(lambda: settled() is not None)
            now, raw = settled()  # type: ignore[misc]
            (t0, v0), (t1, v1) = raw[-2], raw[-1]
            expected = (float(v1) - float(v0)) / (float(t1) - float(t0))
            assert _one(prom, f"irate({shmq_in}[1m])", now) == pytest.approx(expected)
            # once the sends stopped, the rate falls to 0 (the counter no longer moves)
            # (a 5 s window holds two samples even when a loaded machine delays a scrape)
            assert wait_for(lambda: _one(prom, f"rate({shmq_in}[5s])") == 0 and _one(prom, f"rate({rmq_in}[5s])") == 0)
            # the Grafana dashboard's queries: each one valid PromQL for this Prometheus (a
            # query it cannot parse fails _query), the lag panel showing this group's lag
            for e in exprs(load()):
                _query(prom, e)
            lag_panel = next(e for e in exprs(load()) if "shmq_group_lag" in e and "group, topic" in e)
            rows = {(r["metric"]["group"], r["metric"]["topic"]): float(r["value"][1]) for r in _query(prom, lag_panel)}
            assert rows[(GROUP, TOPIC)] == lag
        finally:
            consumer.shutdown()
