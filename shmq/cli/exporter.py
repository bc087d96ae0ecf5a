"""`shmq exporter`: the broker's snapshot over HTTP in the Prometheus text format (with
``--namesrv``: every broker of a name server's routes, and the name server's own metrics).

Like `shmq top` it reads only the state segment (and psutil for the broker process), so a
scrape never waits on the broker. Each GET /metrics takes a fresh snapshot; the mapping is
kept between scrapes and reopened when the broker restarted (its liveness semaphore, the
same one clients watch, says so). While no broker runs the endpoint still answers, with
``shmq_up 0``, so Prometheus tells "broker down" from "exporter down".

``--names rocketmq5`` serves RocketMQ 5's metric names (RIP-46, ``shmq.monitor.rocketmq5``)
instead of the ``shmq_`` ones, for dashboards made for a RocketMQ 5 cluster; ``shmq_up`` and
the name server's metrics keep their names in both sets. Its lag latency also maps the
broker's store files read-only (``shmq.monitor.lag_age``), as a consumer does.

Loopback by default: topic and group names are business data, and the endpoint has no
authentication; another address is served only when asked, with a warning.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from shmq.client.connection import broker_name_or_default
from shmq.errors import BrokerGoneError, BrokerNotFoundError, ConfigError, ShmqError
from shmq.monitor import rocketmq5
from shmq.monitor.cluster import RoutedSet
from shmq.monitor.lag_age import LagAges
from shmq.monitor.prometheus import CONTENT_TYPE, Family, down_families, families, merge, namesrv_families, render
from shmq.monitor.snapshot import ProcessWatch, Snapshot, take
from shmq.namesrv.routes import namesrv_or_env
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader

log = logging.getLogger("shmq.exporter")

DEFAULT_PORT = 9500
NAME_SETS = ("shmq", "rocketmq5")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="broker name (default: $SHMQ_BROKER, else default)")
    p.add_argument(
        "--namesrv",
        metavar="NS",
        help="serve every broker of this name server, each sample labelled with its broker "
        "(default: $SHMQ_NAMESRV when neither --name nor $SHMQ_BROKER is given)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one, printed at start)",
    )
    p.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything not loopback is served with a warning)",
    )
    p.add_argument(
        "--names",
        choices=NAME_SETS,
        default="shmq",
        help="metric names: shmq (shmq_*, the default) or rocketmq5 (RocketMQ 5's rocketmq_*, for its dashboards)",
    )
    p.add_argument(
        "--cluster",
        default=rocketmq5.DEFAULT_CLUSTER,
        help="the cluster label of --names rocketmq5 for a single broker "
        f"(default {rocketmq5.DEFAULT_CLUSTER}; with --namesrv each broker's own cluster)",
    )


class Scraper:
    """Snapshots of one broker, reattaching across its restarts; one scrape at a time (the
    psutil watch measures CPU between consecutive looks and is not thread-safe)."""

    def __init__(self, broker: str, names: str = "shmq", cluster: str = rocketmq5.DEFAULT_CLUSTER) -> None:
        self.broker = broker
        self.names, self.cluster = names, cluster
        self.label = f"Broker {broker}"  # what the root page names
        self._reader: StateReader | None = None
        self._lag_ages: LagAges | None = None  # --names rocketmq5: the store, read for lag latency
        self._alive: Watch | None = None
        self._process = ProcessWatch()
        self._lock = threading.Lock()
        self._last_problem = ""

    def metrics(self) -> str:
        return render(self.families())

    def families(self) -> list[Family]:
        """This broker's metric families in the chosen name set (only ``shmq_up 0`` while it is down)."""
        with self._lock:
            snap = self._snapshot()
            if snap is None:
                return down_families(self.broker)
            if self.names != "rocketmq5":
                return families(snap)
            if self._lag_ages is None or self._lag_ages.store_dir != snap.broker.store_dir:
                self._close_lag_ages()
                self._lag_ages = LagAges(snap.broker.store_dir)
            return rocketmq5.families(snap, self.cluster, self._lag_ages.ages_ms(snap, snap.taken_ms))

    def _snapshot(self) -> Snapshot | None:
        """The broker's snapshot, or None while it is down. A mapping whose broker died is
        dropped and the name opened again once: a restarted broker has a new segment."""
        for _ in range(2):
            if self._reader is None and not self._open():
                return None
            assert self._reader is not None and self._alive is not None
            if self._alive.is_alive():
                try:
                    return take(self._reader, self.broker, self._process)
                except BrokerGoneError:
                    pass
            self.close()
        self._note(f"broker {self.broker!r} is not running (its state segment was left behind)", logging.INFO)
        return None

    def _open(self) -> bool:
        try:
            reader = StateReader.open(self.broker)
        except BrokerNotFoundError as e:
            self._note(str(e), logging.INFO)
            return False
        except (ShmqError, ValueError, OSError) as e:  # another user's segment, an unknown layout version
            self._note(f"cannot read broker {self.broker!r}: {e}", logging.WARNING)
            return False
        header = reader.view.header[0]
        self._reader, self._alive = reader, Watch(int(header["alive_key"]))
        log.info("reading broker %r (pid %d)", self.broker, int(header["broker_pid"]))
        self._last_problem = ""
        return True

    def _note(self, problem: str, level: int) -> None:
        """Log why the broker reads as down once, not on every scrape."""
        if problem != self._last_problem:
            log.log(level, "%s (serving shmq_up 0)", problem)
        self._last_problem = problem

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader, self._alive = None, None
        self._close_lag_ages()  # a restarted broker may have another store: map afresh

    def _close_lag_ages(self) -> None:
        if self._lag_ages is not None:
            self._lag_ages.close()
        self._lag_ages = None


class ClusterScraper:
    """``--namesrv``: a ``Scraper`` per broker of the name server's routes, their families
    merged (every sample keeps its ``broker`` label), and the name server's own metrics."""

    def __init__(self, namesrv: str, names: str = "shmq") -> None:
        self.label = f"Brokers of name server {namesrv}"  # what the root page names
        self.namesrv = namesrv
        self._brokers: RoutedSet[Scraper] = RoutedSet(
            namesrv, lambda b: Scraper(b.attach_name, names, b.cluster), Scraper.close
        )
        self._lock = threading.Lock()

    def metrics(self) -> str:
        with self._lock:
            members = self._brokers.sync()
            up = self._brokers.problem is None and self._brokers.server_alive()
            parts = [namesrv_families(self.namesrv, up, len(members))]
            parts += [scraper.families() for _b, scraper in members]
        return render(merge(parts))

    def close(self) -> None:
        self._brokers.close()


def _handler(scraper: Scraper | ClusterScraper) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "shmq-exporter"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, CONTENT_TYPE, scraper.metrics())
            elif path == "/":
                self._reply(
                    200,
                    "text/html; charset=utf-8",
                    f"<html><head><title>shmq exporter</title></head><body><h1>shmq exporter</h1>"
                    f'<p>{scraper.label}: <a href="/metrics">/metrics</a></p></body></html>\n',
                )
            else:
                self._reply(404, "text/plain; charset=utf-8", "not found: try /metrics\n")

        def _reply(self, status: int, content_type: str, text: str) -> None:
            body = text.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow scraper does not hold up the exit


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; a port that cannot be bound is one error line and status 1."""
    logging.basicConfig(level=logging.INFO, format="shmq exporter: %(message)s", stream=sys.stderr)
    if args.namesrv and args.name:
        print(
            "shmq exporter: error: give --name (one broker) or --namesrv (every broker of a name server), not both",
            file=sys.stderr,
        )
        return 2
    try:
        namesrv = namesrv_or_env(args.namesrv, args.name or os.environ.get("SHMQ_BROKER"))
    except ConfigError as e:
        print(f"shmq exporter: error: {e}", file=sys.stderr)
        return 2
    scraper: Scraper | ClusterScraper = (
        Scraper(broker_name_or_default(args.name), args.names, args.cluster)
        if namesrv is None
        else ClusterScraper(namesrv, args.names)
    )
    server_class = type("Server6", (_Server,), {"address_family": socket.AF_INET6}) if ":" in args.address else _Server
    try:
        server = server_class((args.address, args.port), _handler(scraper))
    except OSError as e:
        why = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        print(f"shmq exporter: error: cannot listen on {args.address}:{args.port}: {why}", file=sys.stderr)
        return 1
    if not is_loopback(args.address):
        log.warning("listening on %s, not loopback: anyone who reaches it reads topic and group names", args.address)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to return: from another thread, not this handler's
        threading.Thread(target=server.shutdown, daemon=True).start()

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}  # before the line that says we serve
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    what = (
        f"the brokers of name server {namesrv!r}"
        if isinstance(scraper, ClusterScraper)
        else f"broker {scraper.broker!r}"
    )
    print(f"serving {what} on http://{shown}:{port}/metrics", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        server.server_close()
        scraper.close()
    return 0
