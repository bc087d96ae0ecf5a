"""The broker's control plane: attach, detach and admin requests over the SysV control queue.

It must never block the broker loop and never let one client's requests or replies starve
the others:
- replies are sent without waiting (IPC_NOWAIT); what does not fit waits in a small pending
  buffer, retried on every control poll and dropped when its client is gone or it is too old;
- replies nobody reads (the client gave up, died or left) are purged from the queue by
  receiving them with their type: at once when the queue is full, else on a periodic sweep;
- a request acting on a channel (detach, admin as a client) must carry the secret the broker
  wrote into that channel's private segment at attach; a mismatch is refused and logged;
- attaches are capped per client process, in total (never past the state segment's client
  table) and in ring bytes, with a refusal that says which limit was hit;
- channels are made (and unmapped) by a worker thread (``channel_worker``): backing a 64 MiB
  ring takes ~40 ms, which the loop must not wait for. The checks run at once, the limits count
  the attaches in flight, and the client is registered and answered when its channel is done,
  unless it died or gave up meanwhile (then its channel is removed and nothing is left);
- a client dropped while alive (a malformed frame) keeps being watched, and its liveness
  semaphore is removed once it dies, so nothing of it is left behind;
- a client killed before its attach was read (or while it made its semaphore) is unknown here:
  its semaphore has a key of this broker's family (``client_keys``), and the family's
  semaphores whose holder is gone are removed at start, every ``REAP_S`` and at stop.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import posix_ipc
import sysv_ipc

from shmq.broker import admin
from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.broker.publish import now_ms
from shmq.config import BrokerConfig
from shmq.errors import ControlProtocolError, ReplicaReadOnlyError, ShmqError, plain_message
from shmq.procs.channel_worker import ChannelWorker, Making
from shmq.ring import client_keys
from shmq.ring.channel import Channel, channel_size
from shmq.ring.control import MAX_PID, Attach, ControlQueue, Detach, Reply, Request, encode_reply, id_pid
from shmq.ring.doorbell import Doorbell
from shmq.ring.liveness import Watch

log = logging.getLogger("shmq.broker")

MIN_RING_BYTES = 4096
MAX_RING_BYTES = 64 * 1024 * 1024
MAX_REQUESTS_PER_POLL = 32
BUDGET_S = 0.002  # control work per poll (a list_topics of thousands of topics takes ~1 ms): the loop comes first
SWEEP_S = 0.05  # how often stale replies, pending replies and dropped clients are checked
REPLY_TTL_S = 5.0  # a reply unread this long belongs to a client that gave up (they read within ms)
FULL_TTL_S = 0.5  # with the queue full, replies unread this long are purged at once
MAX_PENDING = 1024  # reply messages waiting for queue room, all clients together
SERVICE_NOT_AVAILABLE = 14  # RocketMQ's answer to a send on a slave
MAX_TRACKED = 4096  # client ids with replies in the queue that a sweep looks at
REAP_S = 5.0  # how often the semaphores of clients that died before their attach was read are removed
UNBORN_S = 10.0  # a family semaphore never operated on is a dead creator's after this long (a live one sets it at once)
# errors that become the request's error reply (anything else is a bug and ends the loop)
_REFUSED = (ValueError, ShmqError, OSError, sysv_ipc.Error, posix_ipc.Error)


@dataclass(eq=False)
class Client(Peer):
    """An attached client: the core's Peer plus its channel and the watch on its liveness."""

    channel: Channel = field(kw_only=True)
    watch: Watch = field(kw_only=True)
    ring_bytes: int = field(kw_only=True)


class Host(Protocol):
    """What the control plane needs of the broker process (the BrokerController)."""

    name: str
    store_dir: str
    config: BrokerConfig
    bell: Doorbell
    core: BrokerCore
    clients: dict[int, Client]

    def _rebuild_park_flags(self) -> None: ...

    def _drop(self, c: Client, reason: str | None, remove_liveness: bool = False) -> None: ...


class _Throttled:
    """A warning logged at most once per ``every`` seconds, with a count of those left out: a
    client sending junk as fast as it can must not fill the disk with the broker's log."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self._next = 0.0
        self._left_out = 0

    def warn(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._left_out += 1
            return
        if self._left_out:
            msg += f" ({self._left_out} more like it since the last one not logged)"
        log.warning(msg, *args)
        self._left_out = 0
        self._next = now + self.every


@dataclass
class _Pending:
    """Reply messages of one client that did not fit into the queue yet."""

    messages: deque[bytes]
    deadline: float


class ControlPlane:
    """Serves the control queue for the broker loop (``serve``, every millisecond or so)."""

    def __init__(self, host: Host, queue: ControlQueue, client_capacity: int) -> None:
        self.host = host
        self.queue = queue
        self.max_channels = min(host.config.max_channels, client_capacity)
        self._pending: dict[int, _Pending] = {}
        self._pending_count = 0
        self._sent: dict[int, float] = {}  # client id -> when its newest reply went into the queue
        self._orphans: list[Watch] = []  # liveness of clients dropped while alive
        self._making: dict[int, Making] = {}  # attaches whose channel the worker is making
        self._worker = ChannelWorker()
        self._next_sweep = 0.0
        self._last_full = 0.0
        self._malformed = _Throttled()
        self._refused = _Throttled()
        self._family = client_keys.family(queue.key)
        self._next_reap = 0.0  # the first sweep removes what clients of a crashed predecessor left

    # ------------------------------------------------------------------ serving

    def serve(self) -> int:
        """Register the clients whose channel is made, send what waits, answer up to
        ``MAX_REQUESTS_PER_POLL`` requests within ``BUDGET_S``, sweep now and then; the number of
        requests handled and attaches finished (0: nothing to do)."""
        now = time.monotonic()
        made = self._collect(now)
        self._flush(now)
        n = 0
        # requests wait in the queue while replies wait for room, or this poll used its time
        while (
            n < MAX_REQUESTS_PER_POLL
            and self._pending_count < MAX_PENDING
            and (n == 0 or time.monotonic() - now < BUDGET_S)
        ):
            try:
                req = self.queue.recv_request(0)
            except ControlProtocolError as e:
                self._malformed.warn("dropped a malformed control message: %s", e)
                n += 1
                continue
            if req is None:
                break
            n += 1
            reply = self._answer(req)
            if reply is not None:  # None: an attach, answered when its channel is made
                self._queue_reply(reply, now)
        if self._pending:
            self._flush(now)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._sweep(now, REPLY_TTL_S)
        if now >= self._next_reap:
            self._next_reap = now + REAP_S
            self._reap(UNBORN_S)
        return n + made

    def _answer(self, req: Request) -> Reply | None:
        try:
            if isinstance(req, Attach):
                self._attach(req)
                return None
            if isinstance(req, Detach):
                c = self._owner(req.client_id, req.secret, "DETACH")
                if c is not None:
                    self.host._drop(c, None)
                body = {}
            else:
                self._owner(req.client_id, req.secret, f"admin {req.command!r}")
                body = admin.handle(self.host.core, req.client_id, req.command, req.args)
            return Reply(req.client_id, req.req_id, True, body)
        except _REFUSED as e:
            return _error_reply(req, e)

    def _owner(self, client_id: int, secret: int, what: str) -> Client | None:
        """The attached client ``client_id`` if ``secret`` is its channel's; None if it is not attached."""
        c = self.host.clients.get(client_id)
        if c is not None and secret != c.channel.secret:
            self._refused.warn(
                "refused %s for client %d (pid %d): wrong channel secret (not sent by the channel's owner)",
                what,
                client_id,
                c.pid,
            )
            raise ValueError(f"{what} for client {client_id} refused: the request does not carry its channel's secret")
        return c

    # ------------------------------------------------------------------ attach

    def _attach(self, req: Attach) -> None:
        """Check the attach, reserve its place in the limits, hand its channel to the worker."""
        host = self.host
        if req.client_id in host.clients or req.client_id in self._making:
            raise ValueError(f"client id {req.client_id} is already attached")
        if not host.config.is_master and req.info.get("role", "producer") != "consumer":
            raise ReplicaReadOnlyError(SERVICE_NOT_AVAILABLE, replica_refusal(host.name, host.config))
        rb = req.ring_bytes
        if not MIN_RING_BYTES <= rb <= MAX_RING_BYTES or rb & (rb - 1):
            raise ValueError(f"ring_bytes must be a power of two in {MIN_RING_BYTES}..{MAX_RING_BYTES}, got {rb}")
        watch = Watch(req.alive_key)
        if not watch.is_alive():
            raise ValueError(f"client {req.client_id}: liveness semaphore {req.alive_key:#x} is not held")
        if watch.holder_pid() != req.pid:
            raise ValueError(
                f"client {req.client_id}: liveness semaphore {req.alive_key:#x} is not held by pid {req.pid}"
            )
        self._check_limits(req.pid, rb)
        m = Making(req, watch, secrets.randbits(63) + 1, host.name, host.bell)
        self._worker.make(m)
        self._making[req.client_id] = m

    def _collect(self, now: float) -> int:
        """Register the clients whose channel the worker made and answer their attach; remove
        the channels of clients that died or gave up meanwhile; the number of attaches finished."""
        finished = self._worker.done()
        for m in finished:
            req = m.req
            del self._making[req.client_id]
            if m.channel is None:
                self._queue_reply(_error_reply(req, m.error), now)
                continue
            if not m.watch.is_alive():
                log.info(
                    "client %d (pid %d) died or gave up while its channel was made: removed it", req.client_id, req.pid
                )
                self.retire(m.channel)
                m.watch.remove()
                continue
            try:
                reply = Reply(req.client_id, req.req_id, True, self._register(m, m.channel))
            except _REFUSED as e:
                reply = _error_reply(req, e)
            self._queue_reply(reply, now)
        return len(finished)

    def _register(self, m: Making, channel: Channel) -> dict[str, str | int]:
        host, req = self.host, m.req
        info = req.info
        c = Client(
            req.client_id,
            req.pid,
            str(info.get("role", "producer")),
            info.get("group"),
            m.watch.key,
            now_ms(),
            channel=channel,
            watch=m.watch,
            ring_bytes=req.ring_bytes,
        )
        host.clients[req.client_id] = c
        try:
            host._rebuild_park_flags()
            host.core.add_client(c)
        except BaseException as e:
            host._drop(c, f"registering it failed: {e}")
            raise
        log.info("client %d (pid %d, %s %s) attached", c.client_id, c.pid, c.role, c.group or "")
        return {"channel": channel.segment.name, "store_dir": host.store_dir, "store_host": host.config.store_host}

    def retire(self, channel: Channel) -> None:
        """Remove the names of a channel that goes now; unmap it (which frees its pages, ~20 ms
        for 64 MiB rings) off the loop."""
        channel.unlink()
        self._worker.unmap(channel)

    def close(self) -> None:
        """Broker shutdown: stop the worker; channels made for attaches not answered yet are removed."""
        for m in self._worker.stop():
            if m.channel is not None:
                m.channel.unlink()
                m.channel.close()
        self._making.clear()
        self._reap(0.0)  # every client is gone or on its own now: a semaphore not held is nobody's

    def _reap(self, unborn_s: float) -> None:
        """Remove the liveness semaphores of clients that died before the broker knew them."""
        watched = {c.watch.key for c in self.host.clients.values()} | {m.watch.key for m in self._making.values()}
        removed = client_keys.reap(self._family, unborn_s, watched)
        if removed:
            log.info("removed %d liveness semaphore(s) of clients that died while attaching", len(removed))

    def _check_limits(self, pid: int, ring_bytes: int) -> None:
        """Refuse an attach past maxClientsPerProcess, maxChannels (or the state table) or
        maxRingBytesTotal, counting the attaches in flight as attached."""
        cfg, clients, making = self.host.config, self.host.clients.values(), self._making.values()
        n = len(self.host.clients) + len(self._making)
        if n >= self.max_channels:
            raise ValueError(
                f"{n} clients are attached, the most this broker "
                f"takes (maxChannels={cfg.max_channels}, state table {self.max_channels})"
            )
        mine = sum(1 for c in clients if c.pid == pid) + sum(1 for m in making if m.req.pid == pid)
        if mine >= cfg.max_clients_per_process:
            raise ValueError(
                f"process {pid} already has {mine} channels (maxClientsPerProcess={cfg.max_clients_per_process})"
            )
        total = (
            sum(channel_size(c.ring_bytes) for c in clients)
            + sum(channel_size(m.req.ring_bytes) for m in making)
            + channel_size(ring_bytes)
        )
        if total > cfg.max_ring_bytes_total:
            raise ValueError(
                f"channels would hold {total} bytes of shared memory (maxRingBytesTotal={cfg.max_ring_bytes_total})"
            )

    # ------------------------------------------------------------------ replies

    def _queue_reply(self, reply: Reply, now: float) -> None:
        try:
            messages = encode_reply(reply)
        except ValueError as e:
            messages = encode_reply(Reply(reply.client_id, reply.req_id, False, refusal_body(e)))
        if self._pending_count + len(messages) > MAX_PENDING:
            log.warning(
                "dropped the reply to client %d: %d reply messages already wait for queue room",
                reply.client_id,
                self._pending_count,
            )
            return
        p = self._pending.get(reply.client_id)
        if p is None:
            p = self._pending[reply.client_id] = _Pending(deque(), 0.0)
        p.messages.extend(messages)
        p.deadline = now + REPLY_TTL_S
        self._pending_count += len(messages)

    def _flush(self, now: float) -> None:
        """Send waiting reply messages, one per client per round (a long reply does not hold up
        short ones); on a full queue purge unread replies once, then stop until the next poll."""
        pending, try_send = self._pending, self.queue.try_send
        retried = False
        while pending:
            for cid in list(pending):
                p = pending[cid]
                if not try_send(p.messages[0], cid):
                    if retried or now - self._last_full < SWEEP_S / 5:
                        return
                    retried, self._last_full = True, now
                    self._sweep(now, FULL_TTL_S)
                    break
                p.messages.popleft()
                self._pending_count -= 1
                self._sent.pop(cid, None)
                self._sent[cid] = now
                if not p.messages:
                    del pending[cid]
        while len(self._sent) > MAX_TRACKED:
            oldest = next(iter(self._sent))
            self.queue.drain(oldest)
            del self._sent[oldest]

    def _gone(self, client_id: int) -> bool:
        """Whether the client behind ``client_id`` is gone: an attached one's liveness, else the
        pid inside the id (``new_client_id``); an id with no plausible pid waits for its TTL."""
        c = self.host.clients.get(client_id)
        if c is not None:
            return not c.watch.is_alive()
        pid = id_pid(client_id)
        if not 0 < pid <= MAX_PID:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _sweep(self, now: float, ttl: float) -> None:
        """Purge replies of clients that are gone or did not read them for ``ttl``; forget pending
        replies of gone clients and past their deadline; remove dropped clients' semaphores."""
        for cid, sent in list(self._sent.items()):
            if now - sent > ttl or self._gone(cid):
                n = self.queue.drain(cid)
                del self._sent[cid]
                if n:
                    log.info("purged %d unread control replies of client %d", n, cid)
        for cid, p in list(self._pending.items()):
            if now > p.deadline or self._gone(cid):
                self._pending_count -= len(p.messages)
                del self._pending[cid]
        if self._orphans:
            alive = []
            for w in self._orphans:
                if w.is_alive():
                    alive.append(w)
                else:
                    w.remove()
            self._orphans = alive

    def watch_orphan(self, watch: Watch) -> None:
        """A client dropped while alive: remove its liveness semaphore once it dies."""
        self._orphans.append(watch)


def replica_refusal(name: str, config: BrokerConfig) -> str:
    """What a producer attaching to a replica is told: where to send instead."""
    return (
        f"broker {name!r} is a replica (brokerRole=SLAVE) of the master at {config.ha_master_address}: it serves "
        "consumers only; send to the master broker"
    )


def _error_reply(req: Request, e: BaseException | None) -> Reply:
    """The refusal of ``req`` because of ``e``."""
    return Reply(req.client_id, req.req_id, False, refusal_body(e))


def refusal_body(e: BaseException | None) -> dict[str, str]:
    """A refusal's reply body: ``error`` in plain words for the user, ``kind`` (the exception's
    class) for a client that raises a matching exception (a replica's refusal of a producer)."""
    return {"error": "refused" if e is None else plain_message(e), "kind": type(e).__name__}
