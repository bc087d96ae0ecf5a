"""BrokerConnection: a client's link to a named broker, shared by producers and consumers.

It attaches over the control queue with a role, writes frames into the channel's request ring
(reserve, encode in place, commit), runs a reader thread that hands every response frame to
its owner, sees the broker die through its liveness semaphore (or drop this client's channel:
the flag in the channel header), and attaches again to the next broker incarnation, or to the
same broker, when its owner asks for a live session. Detaches on shutdown; a detach and admin
commands as this client carry the secret the broker wrote into the channel. A thread that
waits for one answer (a sync send) may read the response ring itself for a moment (``poll``);
a lock keeps the ring single-consumer.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import posix_ipc
import sysv_ipc

from shmq.codec.frames import SERVICE_NOT_AVAILABLE
from shmq.errors import (
    BrokerError,
    BrokerGoneError,
    BrokerNotFoundError,
    ControlTimeoutError,
    CorruptFrameError,
    MessageTooLargeError,
    ReplicaReadOnlyError,
    SharedMemoryFullError,
    ShmqError,
)
from shmq.ring import client_keys
from shmq.ring.channel import Channel, follow_broker_bell
from shmq.ring.control import Admin, Attach, ControlQueue, Detach, new_client_id
from shmq.ring.doorbell import park, wake
from shmq.ring.framing import CONSUMER, PRODUCER, full_fence
from shmq.ring.liveness import Liveness, Watch
from shmq.ring.owner import check_channel, foreign_sysv
from shmq.ring.state import StateReader

log = logging.getLogger(__name__)

CHECK_S = 0.05  # how often the reader thread checks the broker's liveness and calls on_tick
# how often a sync send waiting for its answer checks the broker's liveness itself: a cluster
# producer retries on another broker as soon as the send's broker is seen dead, so this is most
# of its failover time (one semaphore read per slice, only while an answer is late)
ANSWER_CHECK_S = 0.005
PRIMARY_CHECK_S = 1.0  # how often a client reading from a replica looks whether its broker is back
DRAIN_S = 2.0  # how long a detaching client waits for the broker to read its last frames

_req_ids = itertools.count(1)
# the broker incarnations (``Session.incarnation``) whose loss this process has reported
_lost_reported: set[tuple[str, int, int]] = set()
_lost_lock = threading.Lock()

FrameHandler = Callable[[int, memoryview], None]


def next_request_id() -> int:
    """A request id unique in this process (frames and control requests share the space)."""
    return next(_req_ids)


def broker_name_or_default(broker: str | None) -> str:
    """The broker a client talks to: the argument, then ``SHMQ_BROKER``, then ``default``."""
    return broker or os.environ.get("SHMQ_BROKER") or "default"


def not_serving_message(broker: str, cause: Exception) -> str:
    """Why attaching to ``broker`` failed, said once: a BrokerNotFoundError already names the
    broker (its message is kept as is), any other cause is given after the name."""
    hint = f"start one with `shmq broker --store DIR --name {broker}`"
    if isinstance(cause, BrokerNotFoundError):
        return f"{cause}; {hint}"
    return f"no broker named {broker!r} is serving ({cause}); {hint}"


def open_state(broker: str) -> StateReader:
    """``broker``'s state segment, for a client that reads it without attaching (``Admin``, the
    store lookups); no such broker is a BrokerNotFoundError saying how to start one, as an attach says."""
    try:
        return StateReader.open(broker)
    except BrokerNotFoundError as e:
        raise BrokerNotFoundError(not_serving_message(broker, e)) from None


def report_lost(s: Session, why: str) -> None:
    """Say that the broker of ``s`` went away: once per broker incarnation in this process,
    whichever client or thread (a reader thread's liveness check, a puller's failed call) sees
    it first. Every client of a stopped broker sees it, some threads of a client several times;
    the user needs one line."""
    with _lost_lock:
        if s.incarnation in _lost_reported:
            return
        _lost_reported.add(s.incarnation)
    log.warning("lost broker %r: %s", s.name, why)


def _serving(name: str) -> bool:
    """Whether a live broker named ``name`` serves."""
    try:
        state = StateReader.open(name)
    except ShmqError:
        return False
    try:
        return Watch(int(state.view.header[0]["alive_key"])).is_alive()
    finally:
        state.close()


# The refusals a program may handle keep their class (the reply names it as ``kind``): a
# replica's refusal of a producer, no room in /dev/shm for the client's channel.
_REFUSALS: dict[str, Callable[[str, str], ShmqError]] = {
    ReplicaReadOnlyError.__name__: lambda broker, error: ReplicaReadOnlyError(SERVICE_NOT_AVAILABLE, error),
    SharedMemoryFullError.__name__: lambda broker, error: SharedMemoryFullError(
        f"broker {broker!r} refused to attach: {error}"
    ),
}


def _refusal(broker: str, body: dict[str, Any]) -> ShmqError:
    """The exception for a refused attach: the class ``_REFUSALS`` keeps, else ShmqError."""
    error = str(body.get("error"))
    make = _REFUSALS.get(str(body.get("kind")))
    return make(broker, error) if make else ShmqError(f"broker {broker!r} refused to attach: {error}")


class Session:
    """One attachment to one broker incarnation: channel, state segment, the broker's liveness."""

    def __init__(
        self,
        name: str,
        client_id: int,
        liveness: Liveness,
        state: StateReader,
        channel: Channel,
        broker: Watch,
        control: ControlQueue,
        reply: dict[str, Any],
    ) -> None:
        self.name = name
        self.client_id = client_id
        self.liveness = liveness
        self.state = state
        self.channel = channel
        self.broker = broker
        # which broker process: its name, liveness key and pid (a restarted broker differs in both)
        self.incarnation = (name, broker.key, int(state.view.header[0]["broker_pid"]))
        self.control = control
        self.store_host = int(reply.get("store_host", 0))
        self.store_dir = str(reply.get("store_dir") or bytes(state.view.header[0]["store_dir"]).rstrip(b"\0").decode())
        self.alive = True
        self.lost = False  # the broker's death was handled (``BrokerConnection._broker_died``)
        # threads that may still be in the channel: its reader thread, and a shutdown while it
        # detaches; the last one out closes it (``BrokerConnection._let_go``)
        self._in_channel = 1
        self._in_channel_lock = threading.Lock()
        self._control_lock = threading.Lock()

    def admin(self, command: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run an admin command (join_group, query_offset, ...) and return its result.

        One control request of this client id at a time: sending drops the id's unread replies
        and receiving drops replies to other requests, so two threads (a push consumer's puller
        and the user's) must not interleave."""
        req = Admin(self.client_id, next_request_id(), command, args, self.channel.secret)
        with self._control_lock:
            reply = self.control.call(req, timeout, self.channel.broker_bell.ring)
        if not reply.ok:
            raise BrokerError(0, str(reply.body.get("error")))
        return reply.body

    def leave(self) -> None:
        """Detach from a live broker, first letting it read every frame written (it drops a
        detaching client's ring unread: a last commit or oneway send would be lost). The channel
        stays mapped: the reader thread may still be in it."""
        if not self.broker.is_alive():
            return
        deadline = time.monotonic() + DRAIN_S
        while self.channel.requests.used() and time.monotonic() < deadline and self.broker.is_alive():
            time.sleep(0.001)
        try:
            with self._control_lock:
                self.control.call(
                    Detach(self.client_id, next_request_id(), self.channel.secret),
                    timeout=1.0,
                    nudge=self.channel.broker_bell.ring,
                )
        except (ShmqError, OSError):
            pass

    def hold(self) -> bool:
        """Keep the channel open until this thread's ``let_go``; False if it is closed already."""
        with self._in_channel_lock:
            if not self._in_channel:
                return False
            self._in_channel += 1
            return True

    def let_go(self) -> bool:
        """This thread is out of the channel; True if it was the last one in (it closes it)."""
        with self._in_channel_lock:
            self._in_channel -= 1
            return not self._in_channel

    def close(self) -> None:
        """Unmap and close this side's handles; by the last thread out of the channel (``let_go``):
        a sem_close under a wait on the client bell, or an unmap under a read of a ring, crashes
        the process, and a starved reader thread may get there seconds after a shutdown."""
        self.channel.close()
        self.state.close()
        self.liveness.release()


class BrokerConnection:
    """Attach, write frames, dispatch responses, reconnect; ``lock`` guards ring writes and session changes.

    ``on_response(kind, view)`` runs in the reader thread for every response frame (the view is
    valid only during the call); ``on_tick(now)`` every ``CHECK_S``; ``on_lost(session, why)``
    once when the broker of ``session`` dies.
    """

    def __init__(
        self,
        broker: str | None,
        role: str,
        group: str,
        ring_bytes: int,
        on_response: FrameHandler,
        on_tick: Callable[[float], None] | None = None,
        on_lost: Callable[[Session, str], None] | None = None,
        replica: str | None = None,
    ) -> None:
        self.broker_name = broker_name_or_default(broker)
        # attach under this id every time (a cluster member names itself the same on every
        # broker); None: a new id per attach
        self.client_id: int | None = None
        # RocketMQ's slave read: a replica of ``broker`` served from while ``broker`` is down
        self.replica = replica
        self.role = role
        self.group = group
        self.ring_bytes = ring_bytes
        self.on_response = on_response
        self.on_tick = on_tick
        self.on_lost = on_lost
        self.lock = threading.RLock()
        self.session: Session | None = None
        self.started = False
        # how long a call waits for a dead broker to come back (None: until the call's deadline);
        # a cluster producer's broker producers use 0: their send goes to another broker instead
        self.reattach_timeout: float | None = None
        self._reader: threading.Thread | None = None
        self._read_lock = threading.Lock()  # one reader of the response ring at a time
        self._holders_lock = threading.Lock()
        self._holders = 0  # threads polling the response ring themselves (sync sends)
        self._deputy: Session | None = None  # while set, a thread of the owner reads that session's ring
        self._deputy_parked = False  # the deputy sleeps on the client bell (``nudge`` rings it)
        self._reader_on_bell = False  # the reader thread sleeps on the client bell (a new deputy rings it)
        # a thread that stays deputy between its sync waits (``wait_answer``): nobody else awaits an answer
        self._idle_owner: int | None = None
        self._waiting_deputy = False  # a ``wait_answer`` sleeps on the bell (set under ``_holders_lock``)
        self._resume = threading.Event()  # set when the deputy hands the ring back to the reader thread
        # held by the deputy through a ``park_reading`` and by ``nudge`` while it posts: a session's
        # bell is closed only with both (sem_close under a waiter or a poster can crash the process)
        self._deputy_lock = threading.Lock()
        self._bell_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float) -> Session:
        """Attach; ``BrokerNotFoundError`` within ``timeout`` if no broker of this name serves."""
        with self.lock:
            s = self._connect(time.monotonic() + timeout)
        self.started = True
        return s

    def shutdown(self) -> None:
        """Stop the reader thread and detach; the later of the two out of the channel closes it."""
        self.started = False
        with self.lock:
            s, self.session = self.session, None
            reader = self._reader
        if s is not None and not s.hold():  # its reader thread died of an unexpected error and closed it
            s = None
        if s is not None:
            s.alive = False  # the reader sees it on the bell's post or on ``_resume``, not a tick later
            s.channel.client_bell.ring()
            self._resume.set()
        # a bounded wait: the reader thread may be starved of CPU, or in user code (a future's
        # done-callback, run by ``on_response``) that waits for anything, or be this thread
        if reader is not None and reader is not threading.current_thread():
            reader.join(2.0)
        if s is not None:
            try:
                s.leave()
            finally:
                self._let_go(s)

    def reachable(self) -> bool:
        """Whether a call now would find a broker: the session is live, or a broker of this
        name serves again (the next call attaches to it). A shutdown skips what needs the
        broker when not: its loss was reported already, and waiting for it would only delay."""
        s = self.session
        return (s is not None and s.alive) or _serving(self.broker_name)

    def live_session(self, deadline: float) -> Session:
        """The current session, attaching again (until ``deadline``) after the broker restarted."""
        s = self.session
        if s is not None and s.alive:
            return s
        with self.lock:
            s = self.session
            if s is not None and s.alive:
                return s
            if not self.started:
                raise ShmqError(f"the {self.role} is not started (call start())")
            if self.reattach_timeout is not None:
                deadline = min(deadline, time.monotonic() + self.reattach_timeout)
            try:
                return self._connect(deadline)
            except BrokerNotFoundError as e:
                raise BrokerGoneError(f"broker {self.broker_name!r} is gone and did not come back: {e}") from None

    def _connect(self, deadline: float) -> Session:
        """Attach (caller holds the lock); waits for a broker to appear until ``deadline``. With a
        ``replica``, each round that finds the broker down tries the replica."""
        while True:
            try:
                return self._attach_once(deadline, self.broker_name)
            except (BrokerNotFoundError, BrokerGoneError, ControlTimeoutError) as e:
                last = e
            if self.replica is not None:
                try:
                    s = self._attach_once(deadline, self.replica)
                    log.warning(
                        "broker %r is down (%s): reading from its replica %r until it is back",
                        self.broker_name,
                        last,
                        self.replica,
                    )
                    return s
                except (BrokerNotFoundError, BrokerGoneError, ControlTimeoutError) as e:
                    last = BrokerNotFoundError(f"{last}; its replica {self.replica!r}: {e}")
            if time.monotonic() >= deadline:
                raise BrokerNotFoundError(not_serving_message(self.broker_name, last))
            time.sleep(0.02)

    def _attach_once(self, deadline: float, name: str) -> Session:
        state = StateReader.open(name)
        control_key = int(state.view.header[0]["control_key"])
        try:
            return self._attach_with(state, deadline, name)
        except sysv_ipc.PermissionsError:  # the state was readable, its queue or semaphore is not: not ours
            raise foreign_sysv(f"the control queue of broker {name!r}", "msg", control_key) from None

    def _attach_with(self, state: StateReader, deadline: float, name: str) -> Session:
        """Attach to the broker whose state segment is ``state`` (closed on failure)."""
        try:
            h = state.view.header[0]
            broker = Watch(int(h["alive_key"]))
            if not broker.is_alive():
                raise BrokerNotFoundError(f"the last broker named {name!r} died")
            state.trust.check_queue(int(h["control_key"]))  # the state segment's owner was checked by open
            control = ControlQueue.open(int(h["control_key"]))
            liveness = Liveness.hold(family=client_keys.family(int(h["control_key"])))  # the broker can find it
        except BaseException:
            state.close()
            raise
        client_id = self.client_id if self.client_id is not None else new_client_id()
        try:
            req = Attach(
                client_id,
                next_request_id(),
                os.getpid(),
                liveness.key,
                self.ring_bytes,
                {"role": self.role, "group": self.group},
            )
            control.send_request(req, timeout=max(0.0, deadline - time.monotonic()))
            bell = follow_broker_bell(name, lambda: int(state.view.header["bell_gen"][0]))
            try:
                state.trust.check_semaphore(bell.name)
                bell.ring()
            finally:
                bell.close()
            reply = control.recv_reply(client_id, req.req_id, max(0.05, deadline - time.monotonic()))
            if not reply.ok:
                raise _refusal(name, reply.body)
            channel = Channel.open(name, client_id, state.trust.check_semaphore)
            try:
                check_channel(state.trust, channel)
            except BaseException:
                channel.close()
                raise
        except BaseException:
            liveness.release()
            state.close()
            raise
        s = Session(name, client_id, liveness, state, channel, broker, control, reply.body)
        self.session = s
        self._reader = threading.Thread(
            target=self._read_loop, args=(s,), name=f"shmq-{self.role}-{client_id}", daemon=True
        )
        self._reader.start()
        return s

    # ------------------------------------------------------------------ requests

    def write(
        self,
        kind: int,
        size: int,
        fill: Callable[[memoryview, int], None],
        req_id: int,
        deadline: float,
        on_full: Callable[[], Exception],
        urgent: Callable[[], bool] | None = None,
    ) -> Session:
        """Encode one frame straight into the request ring with ``fill(view, req_id)`` and ring the broker.

        Waits for ring room until ``deadline``, then raises ``on_full()``. ``urgent``: for a
        frame that may wait for the broker's next pass (a PULL_WAIT), asked after the frame is
        published and only when the broker sleeps: whether to wake it anyway. A sleeping
        broker reads the frame when a send, any client's frame or its 20 ms timeout wakes it.
        """
        owner = self._idle_owner
        if owner is not None and (owner != threading.get_ident() or not self._holders):
            self._take_back()  # this frame's answer is for the reader thread (not a sync wait of the idle deputy)
        with self.lock:
            s = self.live_session(deadline)
            requests = s.channel.requests
            try:
                view = requests.reserve(kind, size)
            except ValueError:
                raise MessageTooLargeError(f"request of {size} bytes does not fit the channel ring") from None
            while view is None:
                if not s.alive:
                    raise BrokerGoneError(f"broker {self.broker_name!r} died")
                if time.monotonic() > deadline:
                    raise on_full()
                time.sleep(50e-6)
                view = requests.reserve(kind, size)
            fill(view, req_id)
            requests.commit()
            if urgent is not None:
                full_fence()  # the frame is published before ``urgent`` reads what the broker published
                if not requests.parked(CONSUMER) or not urgent():
                    return s
            wake(requests, CONSUMER, s.channel.broker_bell)
            return s

    def write_frame(
        self, kind: int, payload: bytes, deadline: float, urgent: Callable[[], bool] | None = None
    ) -> Session:
        """Write an encoded frame (its request id is already inside ``payload``); ``urgent`` as for ``write``."""

        def fill(view: memoryview, _req_id: int) -> None:
            view[:] = payload

        return self.write(
            kind,
            len(payload),
            fill,
            0,
            deadline,
            lambda: ControlTimeoutError(f"the request ring to broker {self.broker_name!r} stayed full"),
            urgent,
        )

    def admin(self, command: str, args: dict[str, Any], timeout: float = 3.0) -> dict[str, Any]:
        """An admin command over the control queue of the live session."""
        return self.live_session(time.monotonic() + timeout).admin(command, args, timeout)

    # ------------------------------------------------------------------ responses

    def _read_loop(self, s: Session) -> None:
        ring = s.channel.responses
        bell = s.channel.client_bell
        next_check = time.monotonic() + CHECK_S
        next_primary = next_check + PRIMARY_CHECK_S
        try:
            while s.alive:
                if self._deputy is s:  # another thread reads the ring (``park_reading``): only the checks
                    self._resume.wait(CHECK_S)
                    if self._idle_owner is not None:  # unsolicited frames wait at most one CHECK_S
                        self._take_back()
                else:
                    with self._read_lock:
                        got = self._dispatch(s)
                    if got and self._deputy is not None:  # a deputy came while this read: its answer may be among these
                        self.nudge()
                    if not got:
                        self._reader_on_bell = True
                        try:
                            park(
                                lambda: ring.has_data() or self._deputy is s or not s.alive,
                                [(ring, CONSUMER)],
                                bell,
                                CHECK_S,
                                spin=0.0,
                            )
                        finally:
                            self._reader_on_bell = False
                        if self._deputy is s:  # the post it took may have been for the deputy: pass it on
                            bell.ring()
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + CHECK_S
                    if not s.broker.is_alive():
                        self._broker_died(s, "its liveness semaphore was released")
                        return
                    if s.channel.dropped():
                        self._broker_died(s, "it dropped this client's channel (attaching again on the next call)")
                        return
                    if s.name != self.broker_name and now >= next_primary:
                        next_primary = now + PRIMARY_CHECK_S
                        if _serving(self.broker_name):
                            self._broker_died(s, f"broker {self.broker_name!r} is back: leaving replica {s.name!r}")
                            return
                    if self.on_tick is not None:
                        try:
                            self.on_tick(now)
                        except Exception:  # the reader must live on: it answers every request of the client
                            log.exception("client %r: periodic check failed; going on", self.group)
        except CorruptFrameError as e:
            self._broker_died(s, f"it wrote a malformed response: {e}")
        finally:
            self._let_go(s)

    def _dispatch(self, s: Session) -> bool:
        """Hand the waiting response frames to ``on_response`` (caller holds the read lock)."""
        ring = s.channel.responses
        frames = ring.read_batch(256)
        if not frames:
            return False
        for kind, view in frames:
            self.on_response(kind, view)
        del frames, view
        ring.release()
        wake(ring, PRODUCER, s.channel.broker_bell)
        return True

    def hold_responses(self) -> Session | None:
        """Tell the broker not to post this client's doorbell: a thread will ``poll`` the
        response ring itself. Call before writing the request (the answer may come at once);
        pair with ``release_responses``. The reader thread, if asleep, stays asleep."""
        with self._holders_lock:
            s = self.session
            if s is None or not s.alive:
                return None
            self._holders += 1
            if self._waiting_deputy:  # it sleeps on the bell until the broker posts: the flag stays up
                return s
            try:
                s.channel.responses.set_parked(CONSUMER, False)
            except ValueError:  # the session closed as the broker died
                pass
            return s

    def release_responses(self, s: Session | None) -> None:
        """Undo ``hold_responses``. The last holder raises the reader thread's parked flag again
        and, if a frame came while it was down, posts the doorbell the broker did not (the
        same store-fence-load as ``wake``, so no answer waits for the reader's timeout)."""
        if s is None:
            return
        with self._holders_lock:
            self._holders -= 1
            if self._holders:
                return
            try:
                ring = s.channel.responses
                ring.set_parked(CONSUMER, True)
                full_fence()
                if ring.has_data():
                    s.channel.client_bell.ring()
            except (ValueError, posix_ipc.ExistentialError):
                pass

    def poll(self, s: Session | None, done: Callable[[], bool], seconds: float) -> None:
        """Read responses in the calling thread until ``done()`` or ``seconds`` pass (between
        ``hold_responses`` and ``release_responses``).

        A sync send waits here: it sees its answer without a doorbell post, a wake-up of the
        reader thread and a hand-off through the Future's condition (~60-100 us on 2 vCPUs)."""
        if s is None:
            return
        ring = s.channel.responses
        end = time.perf_counter() + seconds
        try:
            while not done() and s.alive:
                if ring.has_data() and self._read_lock.acquire(False):
                    try:
                        self._dispatch(s)
                    finally:
                        self._read_lock.release()
                    continue
                if time.perf_counter() >= end:
                    return
                os.sched_yield()  # the broker may need this core (2 vCPUs, more processes)
        except (ValueError, CorruptFrameError):
            return  # closed or corrupt: the reader thread sees it too and handles the broker's death

    def park_reading(self, s: Session, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``ready()`` or ``timeout``, reading the response ring in the calling thread
        and sleeping on the client bell; ``ready()``'s last answer. One thread (a push consumer's
        puller) at a time.

        The reader thread stands down from the first call until ``stand_down``: it keeps its
        liveness checks and ticks but leaves the ring and the bell alone, so a WAKE wakes the
        waiting thread itself, not the reader thread that then wakes it (a futex wake and a GIL
        hand-over with the GIL held, 30-80 us a message on 2 busy cores). While the deputy works
        between parks nobody sleeps on the bell: answers wait for its next park, so it must call
        ``stand_down`` before anything long or anything that waits for an answer. Whatever makes
        ``ready()`` true from another thread must call ``nudge`` after."""
        with self._deputy_lock:
            if not s.alive:
                return ready()
            return self._park_reading(s, ready, timeout)

    def _park_reading(self, s: Session, ready: Callable[[], bool], timeout: float) -> bool:
        ring, bell = s.channel.responses, s.channel.client_bell
        if self._deputy is not s:
            self._deputy = s
            self._resume.clear()
            if self._reader_on_bell:  # off the bell, to stand down (it checks ``_deputy`` before it sleeps)
                bell.ring()
        deadline = time.monotonic() + timeout
        try:
            while s.alive:
                if ring.has_data():
                    with self._read_lock:  # the reader thread may finish a dispatch it began before
                        self._dispatch(s)
                if ready():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._deputy_parked = True
                try:
                    park(lambda: ready() or ring.has_data(), [(ring, CONSUMER)], bell, remaining, spin=0.0)
                finally:
                    self._deputy_parked = False
        except (ValueError, CorruptFrameError):  # closed or corrupt: the reader thread sees it and handles it
            self.stand_down()
        return ready()

    def wait_answer(self, s: Session | None, done: Callable[[], bool], idle: Callable[[], bool]) -> None:
        """Wait for ``done()`` reading the response ring in the calling thread and sleeping on the
        client bell (``park_reading``), between ``hold_responses`` and ``release_responses``, if
        this thread is the only one waiting; else return at once (the caller then waits for the
        reader thread's hand-off).

        A sync send whose answer is slow (SYNC_FLUSH: one disk flush) waits here: the broker's
        post wakes it directly instead of the reader thread that then wakes it through the
        Future's condition (two wake-ups and a GIL hand-over per send on the critical path).
        The park is cut into ANSWER_CHECK_S slices: what fails the request from another thread
        (its expiry on the reader's tick) is seen within one slice without a ``nudge``, and the
        broker's death (the liveness semaphore, read after each slice) within one slice rather
        than the reader thread's CHECK_S.

        When ``idle()`` (no other answer awaited) the thread stays deputy afterwards, so that a
        run of sync sends does not wake the reader thread twice per send to stand it down and up
        again. Any other frame written (``write``) or the reader's next tick takes the ring back."""
        me = threading.get_ident()
        if s is None or not self._deputy_lock.acquire(False):
            return
        try:
            if self._idle_owner == me:
                self._idle_owner = None
            elif self._deputy is not None:  # another thread's park_reading
                return
            with self._holders_lock:
                alone = self._holders == 1
                self._waiting_deputy = alone  # from now on a new holder leaves the parked flag up
            if alone:
                try:
                    while s.alive and not self._park_reading(s, done, ANSWER_CHECK_S):
                        if not s.broker.is_alive():
                            self._broker_died(s, "its liveness semaphore was released")
                finally:
                    with self._holders_lock:
                        self._waiting_deputy = False
                if s.alive and idle():
                    self._idle_owner = me
                    if idle():  # a request registered before its write read ``_idle_owner`` is seen here
                        return
                    self._idle_owner = None
            self.stand_down()
        finally:
            self._deputy_lock.release()

    def _take_back(self) -> None:
        """Give the ring of an idle deputy (``wait_answer``) back to the reader thread; a deputy
        that is waiting right now gives it back itself if anyone else awaits an answer (it clears
        ``_idle_owner`` under the lock before it waits, and asks ``idle()`` after)."""
        while self._idle_owner is not None:
            if self._deputy_lock.acquire(False):
                try:
                    if self._idle_owner is not None:
                        self._idle_owner = None
                        self.stand_down()
                finally:
                    self._deputy_lock.release()
                return
            time.sleep(0)  # the deputy is between its last ``idle()`` and the lock's release

    def nudge(self) -> None:
        """Wake a ``park_reading`` that sleeps (its ``ready()`` may have become true)."""
        s = self._deputy
        if s is not None and self._deputy_parked:
            with self._bell_lock:
                if s.alive:
                    s.channel.client_bell.ring()

    def stand_down(self) -> None:
        """Give the response ring back to the reader thread (after ``park_reading``)."""
        if self._deputy is not None:
            self._deputy = None
            self._resume.set()

    def _broker_died(self, s: Session, why: str) -> None:
        """The session is over (the broker died or dropped the channel): the next call attaches
        again. Called by the reader thread, which closes the session as it exits (``_let_go``),
        or by a sync send that saw the broker die first (``wait_answer``); once per session."""
        s.alive = False  # before the lock: a writer waiting for ring room under it gives up
        with self.lock:
            if s.lost:
                return
            s.lost = True
            report_lost(s, why)
            # under the lock and before the session is cleared: no call can attach again and
            # register a request on a new session that ``on_lost`` would then fail as lost
            if self.on_lost is not None:
                self.on_lost(s, why)
            if self.session is s:
                self.session = None

    def _let_go(self, s: Session) -> None:
        """The calling thread is out of ``s``'s channel. The last one out closes it once no
        ``park_reading`` sleeps on its client bell and no ``nudge`` posts it: with ``s.alive``
        False, the bell post ends the deputy's park, and it stops."""
        s.alive = False  # already, unless the reader thread died of an unexpected error
        if not s.let_go():
            return
        s.channel.client_bell.ring()
        with self._deputy_lock, self._bell_lock:
            s.close()
