"""The name server process (`shmq namesrv`): serves registrations, publishes the route table.

One loop, no threads, waking every ``TICK_S`` (idle, it costs well under 1 % of a core): it
answers what its SysV control queue holds (``register_broker`` / ``unregister_broker``
requests, answered with a Reply), drops the brokers whose liveness semaphore is gone (so a dead
broker leaves the routes within a tick, not after RocketMQ's 120 s scan), every ``TOPICS_S``
looks at each broker's ``meta_gen`` and re-reads the topics of those that changed, and after
any change publishes the table into the route segment.

A clean stop (SIGTERM, SIGINT) removes the segment, the queue and the liveness semaphore. A
SIGKILLed name server leaves them; the next one started under that name replaces them, with a
new incarnation, and the live brokers, which watch for that, register again.
"""

from __future__ import annotations

import logging
import signal
import sys
import time

import posix_ipc
import sysv_ipc

from shmq.errors import ControlProtocolError, RegistrationError, RouteTableError, ShmqError
from shmq.namesrv.broker_topics import BrokerTopics
from shmq.namesrv.routes import check_namesrv_name, encode_table
from shmq.namesrv.segment import RouteWriter, broker_alive, namesrv_key
from shmq.namesrv.server import NameServerCore, parse_registration, parse_unregistration
from shmq.ring.control import Admin, ControlQueue, Reply, Request, encode_reply
from shmq.ring.reclaim import remove_queue

log = logging.getLogger("shmq.namesrv")

TICK_S = 0.01  # the loop's period: requests are answered, dead brokers dropped, every tick
TOPICS_S = 0.03  # how often the brokers' meta_gen is looked at
COMMANDS = ("register_broker", "unregister_broker")


class NameServer:
    """The route segment, the control queue and the registered brokers of one name server."""

    def __init__(self, name: str) -> None:
        self.name = check_namesrv_name(name)
        self._stopping = False
        self._sources: dict[tuple[str, int], tuple[int, BrokerTopics]] = {}  # key -> (pid, its state)

    def start(self) -> NameServer:
        """Take the name (a live name server of this name is a RouteTableError), replace a dead
        one's leftovers, create the queue brokers register through."""
        control_key = namesrv_key(self.name, "control")
        self.writer = RouteWriter.create(self.name, control_key)
        try:
            remove_queue(control_key)  # the writer holds the name: whoever made the queue is dead
            self.control = ControlQueue.create(control_key)
        except BaseException:
            self.writer.close()
            self.writer.unlink()
            raise
        self.core = NameServerCore(self.name, self.writer.incarnation, broker_alive, _now_ms)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.request_stop)
        return self

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def serve_forever(self) -> None:
        try:
            self._loop()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Remove the queue, the segment and the liveness semaphore: clients see no server."""
        for _pid, src in self._sources.values():
            src.close()
        self._sources.clear()
        self.control.remove()
        self.writer.close()
        self.writer.unlink()
        log.info("name server %r stopped", self.name)

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        next_topics = time.monotonic()
        while not self._stopping:
            self._serve()
            changed = self._prune()
            now = time.monotonic()
            if now >= next_topics:
                next_topics = now + TOPICS_S
                changed = self._refresh_topics() or changed
            if changed:
                self._publish()
            time.sleep(TICK_S)  # registrations are rare: a request waits at most one tick

    def _serve(self) -> None:
        """Answer every queued request."""
        while not self._stopping:
            try:
                req = self.control.recv_request(0.0)
            except ControlProtocolError as e:
                log.warning("ignoring a malformed control message: %s", e)
                continue
            if req is None:
                return
            try:
                self._answer(req)
            except Exception:  # a request that found a bug: logged, and the next one is served
                log.exception("answering %s from client %d failed", type(req).__name__, req.client_id)
                self._reply(Reply(req.client_id, req.req_id, False, {"error": "the name server failed; see its log"}))

    def _answer(self, req: Request) -> None:
        """Answer one request, publishing the table first if it changed (the broker's next look
        finds itself registered)."""
        if not isinstance(req, Admin) or req.command not in COMMANDS:
            what = req.command if isinstance(req, Admin) else type(req).__name__.lower()
            self._reply(Reply(req.client_id, req.req_id, False, {"error": _not_served(what)}))
            return
        before = self.core.table
        try:
            if req.command == "register_broker":
                self._register(req.args)
            else:
                name, broker_id, pid = parse_unregistration(req.args)
                if self.core.unregister(name, broker_id, pid):
                    log.info("broker %r id %d (pid %d) unregistered", name, broker_id, pid)
            self._sync_sources()
            if self.core.table is not before:
                self.writer.publish(self.core.table)
        except (RegistrationError, RouteTableError) as e:
            self.core.table = before
            self._sync_sources()
            log.warning("refused %s: %s", req.command, e)
            self._reply(Reply(req.client_id, req.req_id, False, {"error": str(e)}))
            return
        body = {"incarnation": self.core.table.incarnation, "version": self.core.table.version}
        self._reply(Reply(req.client_id, req.req_id, True, body))

    def _register(self, args: dict[str, object]) -> None:
        reg = parse_registration(args)
        src = BrokerTopics.open(reg)
        try:
            entry = self.core.register(reg, src.read())
            encoded = len(encode_table(self.core.table))
            if encoded > self.writer.capacity:
                raise RouteTableError(
                    f"the route table would take {encoded} bytes, more than the segment's {self.writer.capacity}"
                )
        except BaseException:
            src.close()
            raise
        old = self._sources.pop(reg.key, None)
        if old is not None:
            old[1].close()
        self._sources[reg.key] = (reg.pid, src)
        log.info(
            "broker %r id %d registered: attach name %r, cluster %r, %s, pid %d, %d topics",
            entry.broker_name,
            entry.broker_id,
            entry.attach_name,
            entry.cluster,
            entry.role,
            entry.pid,
            len(entry.topics),
        )

    def _reply(self, reply: Reply) -> None:
        try:
            for chunk in encode_reply(reply):
                if not self.control.try_send(chunk, reply.client_id):
                    log.warning("control queue full: reply to client %d dropped", reply.client_id)
                    return
        except (ValueError, sysv_ipc.Error) as e:
            log.warning("cannot answer client %d: %s", reply.client_id, e)

    def _prune(self) -> bool:
        dead = self.core.prune()
        for b in dead:
            log.info("broker %r id %d (pid %d) is gone: out of the routes", b.broker_name, b.broker_id, b.pid)
        if dead:
            self._sync_sources()
        return bool(dead)

    def _sync_sources(self) -> None:
        """Close the state segments of brokers no longer registered (or registered anew by another pid)."""
        for key, (pid, src) in list(self._sources.items()):
            b = self.core.table.broker(*key)
            if b is None or b.pid != pid:
                src.close()
                del self._sources[key]

    def _refresh_topics(self) -> bool:
        changed = False
        for key, (_pid, src) in self._sources.items():
            if src.changed():
                try:
                    changed = self.core.set_topics(*key, src.read()) or changed
                except ShmqError as e:  # a broker that died mid-update: the next prune takes it out
                    log.warning("cannot read the topics of broker %r id %d: %s", key[0], key[1], e)
        return changed

    def _publish(self) -> None:
        try:
            self.writer.publish(self.core.table)
        except RouteTableError as e:
            log.error("route table not published (clients keep the previous one): %s", e)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _not_served(what: str) -> str:
    return f"a name server answers {' and '.join(COMMANDS)} only, not {what}"


def run_namesrv(name: str = "default") -> int:
    """Entry point of `shmq namesrv`: serve until SIGTERM/SIGINT; exit status 0, or 2 on a start error."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s namesrv[{name}] %(levelname)s %(message)s"
    )
    try:
        server = NameServer(name).start()
    except (ShmqError, OSError, sysv_ipc.Error, posix_ipc.Error) as e:
        print(f"shmq namesrv: error: {e}", file=sys.stderr)
        return 2
    log.info("name server %r serving (incarnation %d)", name, server.writer.incarnation)
    server.serve_forever()
    return 0
