"""The broker process: a loop that moves bytes between client channels and the broker core.

Each pass drains every request ring in batches and hands the frames to the core
(``shmq.broker.core``: processors per frame kind, the store's one put path), lets the core end
the pass (topics created in it made durable, one group commit under SYNC_FLUSH, new max
offsets published, long polls woken), then writes the answers into the response rings (a long
run of SENDs as one packed block of SEND_RESULT frames). Counters for the monitor are
published on the 10 ms tick, the control queue (attach, detach, admin) is polled every
millisecond and before parking, never per pass. With nothing to do it polls its rings for an
adaptive window (yielding the CPU), then parks on its doorbell; while busy it makes no system
call per message. Loop counters (passes, parks, doorbell posts, group-commit waits) are logged
at shutdown.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import signal
import sys
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import posix_ipc
import sysv_ipc

from shmq.broker.answers import PACKED
from shmq.broker.core import BrokerCore
from shmq.broker.health import ReplicaHealth, gather, pop_inflight_by_group
from shmq.broker.publish import StatePublisher
from shmq.codec import frames as P
from shmq.config import BrokerConfig
from shmq.errors import BrokerNotFoundError, CorruptFrameError, ShmqError
from shmq.procs.control_plane import Client, ControlPlane
from shmq.procs.ha_link import MasterLink
from shmq.procs.ns_link import NameServerLink
from shmq.ring import shm
from shmq.ring.channel import broker_bell_name
from shmq.ring.control import ControlQueue, sysv_key
from shmq.ring.doorbell import Doorbell, RotatingBell, park, wake
from shmq.ring.framing import CONSUMER, PRODUCER, Ring
from shmq.ring.liveness import Liveness, Watch, remove_if_dead
from shmq.ring.owner import refuse_squatters
from shmq.ring.reclaim import reclaim_dead_broker, remove_queue
from shmq.ring.state import StateReader, StateWriter
from shmq.store.epochs import open_master_epoch
from shmq.store.message_store import MessageStore

if TYPE_CHECKING:
    from shmq.procs.replica import ReplicaInbox

log = logging.getLogger("shmq.broker")

MAX_FRAMES_PER_PASS = 256
CONTROL_INTERVAL_NS = 1_000_000
TICK_NS = 10_000_000
LIVENESS_NS = 40_000_000
FILL_NS = 200_000_000
HEALTH_NS = 1_000_000_000  # the monitor's slow numbers (disk ratio, backlogs, replicas)
IDLE_PARK_S = 0.02
_RESULT_FRAME_BYTES = P.RESULT_FRAME.itemsize
# Idle: poll the rings before parking, yielding the CPU between polls. A peer that sends within
# the window finds the broker awake, so it makes no sem_post and the broker pays no wake-up.
# The window adapts to the idle gaps seen: twice the last gap when that was under SPIN_MAX_NS
# (a request/response rhythm: sync sends), SPIN_MIN_NS otherwise (a producer that encodes for
# milliseconds between batches, or nobody). Yielding keeps the spin from starving the peer on a
# small oversubscribed machine (2 shared cores: a busy 50-200 us spin cut sync throughput by
# 20-30 %, a yielding one did not).
SPIN_MIN_NS = 20_000
SPIN_MAX_NS = 400_000
SPIN_YIELD = True


class BrokerRunningError(ShmqError, RuntimeError):
    """A live broker already uses this name."""


class BrokerController:
    """Owns the store, the IPC objects of one broker name, and the serving loop."""

    core: BrokerCore  # from start() on

    def __init__(self, store_dir: str, name: str | None = None, config: Any = None) -> None:
        self.config = BrokerConfig.load(config)
        self.config.check_role()
        self.name = shm.check_broker_name(self.config.resolve_name(name))
        # the config in force names the broker it runs (`admin broker status` shows brokerName)
        self.config = dataclasses.replace(self.config, broker_name=self.name)
        self.store_dir = os.path.realpath(store_dir)
        self.store: MessageStore | None = None
        self.clients: dict[int, Client] = {}
        self._stopping = False
        self._park_flags: list[tuple[Ring, int]] = []
        self.ha: MasterLink | None = None  # a master's end of HA, from start() on
        self.follower: ReplicaInbox | None = None  # a replica's hand-over from its HA client (procs.replica)
        self.ns_link: NameServerLink | None = None  # registration with namesrvAddr, from start() on

    # ------------------------------------------------------------------ start / stop

    def start(self) -> BrokerController:
        """Take the name and the store, remove a crashed predecessor's leftovers, create the IPC objects.

        A start that fails leaves nothing behind: the store is closed again and every IPC
        object made so far is removed (``_create_ipc``).
        """
        self._claim_name()
        os.makedirs(self.store_dir, exist_ok=True)
        self.store = MessageStore(self.store_dir, self.config).start()
        # before the state segment announces us: a stop right after start must be graceful
        handlers = {sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self.config.is_master:  # a new epoch: a replica can tell what this start wrote (docs/HA.md)
                pending = open_master_epoch(self.store_dir, self.store.commitlog.max_offset)
                if pending is not None:
                    self.store.put_hooks.insert(0, pending)
            # the metadata is loaded and checked (or the start refused) before any IPC object exists
            self.core = BrokerCore(self.store, self.config)
            self._create_ipc()
            if self.ha is not None:  # it finds the broker through the state segment, which now exists
                self.ha.start_sender(time.monotonic_ns())
        except BaseException:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            store, self.store = self.store, None
            try:
                store.shutdown()
            except Exception:
                log.exception("store shutdown after a failed start failed; recovery checks it at the next start")
            raise
        return self

    def _claim_name(self) -> None:
        """Refuse a name or store whose objects belong to another user, or a live broker of this
        name; then remove what a crashed predecessor of ours left."""
        refuse_squatters(
            self.name, [("msg", sysv_key(self.store_dir, "control")), ("sem", sysv_key(self.store_dir, "alive"))]
        )
        try:
            old = StateReader.open(self.name)
        except BrokerNotFoundError:
            old = None
        except Exception as e:  # noqa: BLE001 - a torn or foreign state segment: a crashed predecessor's
            log.warning("removing unreadable state segment of %r: %s", self.name, e)
            old = None
        if old is not None:
            h = old.view.header[0]
            alive_key = int(h["alive_key"])
            store = bytes(h["store_dir"]).rstrip(b"\0").decode(errors="replace")
            old.close()
            if Watch(alive_key).is_alive():
                raise BrokerRunningError(
                    f"a broker named {self.name!r} is already running (store {store}); stop it or pick another --name"
                )
        removed = reclaim_dead_broker(self.name, self.store_dir)
        if removed:
            log.info("removed leftovers of a crashed broker %r: %s", self.name, ", ".join(removed))

    def _create_ipc(self) -> None:
        """Create the liveness semaphore, control queue, doorbell and state segment, and publish
        the core's topics; if any step fails, remove what the earlier ones made before raising."""
        control_key = sysv_key(self.store_dir, "control")
        alive_key = sysv_key(self.store_dir, "alive")
        remove_queue(control_key)  # we hold the store lock: whoever made these is dead
        remove_if_dead(alive_key)
        with ExitStack() as undo:
            self.liveness = Liveness.hold(alive_key)
            undo.callback(self.liveness.release)
            self.control = ControlQueue.create(control_key)
            undo.callback(self.control.remove)
            # rotates to a new name when flooded (_bell_rotated tells the clients)
            self.bell: Doorbell = RotatingBell.create_rotating(
                lambda gen: broker_bell_name(self.name, gen), self._bell_rotated
            )
            undo.callback(self.bell.unlink)
            undo.callback(self.bell.close)
            if self.config.is_master:  # before the state segment: a broker seen running has it
                commitlog = self.core.store.commitlog
                self.ha = MasterLink(self.name, self.store_dir, self.config, lambda: commitlog.max_offset)
                self.ha.after_pass(commitlog.max_offset)
                undo.callback(self.ha.close)
                if self.core.replica is not None:
                    self.core.replica.source = self.ha
            self.state = StateWriter.create(
                self.name, self.store_dir, control_key, alive_key, shm_gid=self.config.group_id()
            )
            undo.callback(self.state.unlink)
            undo.callback(self.state.close)
            self.control_plane = ControlPlane(self, self.control, self.state.view.layout.clients)
            self.publisher = StatePublisher(self.state)
            self.core.publisher = self.publisher
            self.core.publish_topics()
            # last: the name server checks the registration against the state segment
            self.ns_link = NameServerLink.start(self.config, self.name, os.getpid(), alive_key, self.store_dir)
            undo.pop_all()

    def request_stop(self, *_: object) -> None:
        """Signal handler: finish the current pass, then shut down gracefully."""
        self._stopping = True

    def serve_forever(self) -> None:
        try:
            self._loop()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Answer what is in flight, flush, persist offsets and topics, remove every IPC object."""
        if self.store is None:
            return
        if self.ns_link is not None:  # out of the routes first: clients go elsewhere while this one drains
            self.ns_link.stop()
        core = self.core
        try:
            self._pass(time.monotonic_ns())
            if core.replica is not None:
                core.replica.finish(time.monotonic_ns())
            for c in list(self.clients.values()):
                self._flush_out(c)
            core.publish_counters()
        except Exception:
            log.exception("error while answering in-flight requests at shutdown")
        core.persist()
        try:
            self.state.close()
            self.state.unlink()
            self.control.remove()
            for c in list(self.clients.values()):
                self._release_client(c, remove_liveness=not c.watch.is_alive())
            self.control_plane.close()  # channels in the making or removal are done with before the bell goes
            self.bell.close()
            self.bell.unlink()
            if self.ha is not None:
                self.ha.close()
        finally:
            try:
                self.store.shutdown()
            except Exception:
                log.exception("store shutdown failed; recovery checks it at the next start")
            self.store = None
            self.liveness.release()
        st = core.stats
        log.info(
            "broker %r stopped; loop: %d frames in %d busy passes, %d parks (%d timed out), "
            "%d spins that found work, %d client doorbell posts; "
            "%d resent sends stored already (answered, not stored again)",
            self.name,
            st["frames"],
            st["busy_passes"],
            st["parks"],
            st["park_timeouts"],
            st["spin_hits"],
            st["posts"],
            st["resends_answered"],
        )
        if core.replica is not None:
            log.info(
                "SYNC_MASTER: %d answers waited for a replica (%.1f us on average), %d timed out "
                "(FLUSH_SLAVE_TIMEOUT), %d found no replica in sync (SLAVE_NOT_AVAILABLE), %d dropped",
                st["replica_waits"],
                st["replica_wait_ns"] / max(1, st["replica_acked"]) / 1000,
                st["replica_timeouts"],
                st["slave_not_available"],
                st["replica_dropped"],
            )
        if st["group_commits"]:
            log.info(
                "group commit: %d answers in %d flushes, %.1f us per flush on average",
                st["flushed_answers"],
                st["group_commits"],
                st["group_commit_ns"] / st["group_commits"] / 1000,
            )

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        core = self.core
        next_control = next_tick = next_live = next_fill = next_health = time.monotonic_ns()
        next_persist = next_tick + self.config.flush_consumer_offset_interval * 1_000_000
        idle_since = None
        spin_ns = SPIN_MIN_NS
        stats = core.stats
        while not self._stopping:
            now = time.monotonic_ns()
            work = self._pass(now)
            if now >= next_control:
                work += self.control_plane.serve()
                next_control = now + CONTROL_INTERVAL_NS
            if now >= next_tick:
                next_tick = now + TICK_NS
                core.tick(now)
                if self.ha is not None:
                    self.ha.tick(now)
                if now >= next_live:
                    next_live = now + LIVENESS_NS
                    self._check_liveness()
                if now >= next_fill:
                    next_fill = now + FILL_NS
                    self._publish_fill()
                    if core.topics.dirty:  # a write that failed in end_pass: try again
                        core.persist_topics()
                if now >= next_health:
                    next_health = now + HEALTH_NS
                    self._publish_health()
                if now >= next_persist:
                    next_persist = now + self.config.flush_consumer_offset_interval * 1_000_000
                    core.persist_offsets()
            if work or self._stopping:
                idle_since = None
                stats["busy_passes"] += 1
                stats["frames"] += work
                continue
            # Idle. Passes are cheap while spinning: no system call, nothing published. The
            # control queue (one msgrcv) is polled every CONTROL_INTERVAL_NS and once before
            # sleeping, never once per empty pass.
            if idle_since is None:
                idle_since = now
            if now - idle_since < spin_ns and self._spin_until(idle_since + spin_ns):
                stats["spin_hits"] += 1
                spin_ns = _next_spin(time.monotonic_ns() - idle_since)
                idle_since = None
                continue
            if self.control_plane.serve():
                next_control = time.monotonic_ns() + CONTROL_INTERVAL_NS
                continue
            try:
                stats["parks"] += 1
                timeout = (
                    IDLE_PARK_S if core.replica is None else core.replica.park_timeout(IDLE_PARK_S, time.monotonic_ns())
                )
                if core.services:
                    timeout = core.idle_timeout(timeout, next_tick - time.monotonic_ns())
                if park(self._has_work, self._flags_to_park(), self.bell, timeout, spin=0.0, ring_ends=True):
                    spin_ns = _next_spin(time.monotonic_ns() - idle_since)
                else:
                    stats["park_timeouts"] += 1
                    spin_ns = SPIN_MIN_NS
            except posix_ipc.SignalError:
                pass
            idle_since = None

    def _spin_until(self, end_ns: int) -> bool:
        """Poll the rings (no system call) until work shows up (True) or ``end_ns`` passes."""
        has_work, clock = self._has_work, time.monotonic_ns
        yield_ = os.sched_yield if SPIN_YIELD else None
        while clock() < end_ns:
            if has_work():
                return True
            if yield_ is not None:
                yield_()
        return False

    def _has_work(self) -> bool:
        if self._stopping or (self.follower is not None and self.follower.pending):
            return True
        replica = self.core.replica
        if replica is not None and replica.groups and replica.ready(time.monotonic_ns()):
            return True
        try:
            for c in self.clients.values():
                if c.out:
                    kind, payload = c.out[0]
                    if c.channel.responses.writable(_RESULT_FRAME_BYTES - 8 if kind == PACKED else len(payload)):
                        return True
                elif c.channel.requests.has_data():
                    return True
        except CorruptFrameError:
            return True  # a bad response-ring tail: the pass's flush drops that client
        return False

    def _rebuild_park_flags(self) -> None:
        """Called whenever the clients change: the park flags to raise, and the bell generation
        in every channel (a channel made while the bell rotated gets the new one here)."""
        flags = []
        gen = self.bell.gen
        for c in self.clients.values():
            flags.append((c.channel.requests, CONSUMER))
            c.channel.set_bell_gen(gen)
        self._park_flags = flags

    def _flags_to_park(self) -> list[tuple[Ring, int]]:
        """Every request ring, and the response rings of the clients whose answers wait for room.
        (push latency, issue 15) A response ring's PRODUCER flag makes the client post this bell
        after each read; raised on every ring, it woke the broker for nothing after each WAKE a
        consumer read (one more pass, spin and sem_post per pushed message)."""
        full = [(c.channel.responses, PRODUCER) for c in self.clients.values() if c.out]
        return self._park_flags + full if full else self._park_flags

    def _bell_rotated(self, gen: int) -> None:
        """The flooded doorbell was replaced (``RotatingBell.wait``, inside ``park`` before the
        parked flags go up again): publish the new generation to every channel and to clients
        that attach next (the state segment)."""
        for c in self.clients.values():
            c.channel.set_bell_gen(gen)
        self.state.view.header["bell_gen"] = gen

    def _pass(self, now: int) -> int:
        """Serve every client's requests, let the core end the pass, then write the answers."""
        work = 0
        for c in list(self.clients.values()):
            if c.out:
                self._flush_out(c)
                if c.out:
                    continue  # back pressure: the client is not reading its responses
            work += self._serve_channel(c, now)
        if self.follower is not None and self.follower.pending:
            work += self.follower.apply(self.core)
        work += self.core.end_pass()
        if self.ha is not None:
            self.ha.after_pass(self.core.store.commitlog.max_offset)
        for c in list(self.clients.values()):
            if c.out:
                self._flush_out(c)
        return work

    def _flush_out(self, c: Client) -> None:
        """Write queued answers into the response ring (as many as fit) and ring the client once;
        a client whose ring counters are corrupt is dropped."""
        if not c.alive:
            c.out.clear()
            return
        try:
            self._write_out(c)
        except CorruptFrameError as e:
            self._drop(c, f"malformed response ring: {e}")

    def _write_out(self, c: Client) -> None:
        out = c.out
        ring = c.channel.responses
        wrote = False
        while out:
            kind, payload = out[0]
            if kind == PACKED:
                k = ring.write_packed(payload, _RESULT_FRAME_BYTES)
                wrote = wrote or k > 0
                if k * _RESULT_FRAME_BYTES < len(payload):
                    out[0] = (PACKED, payload[k * _RESULT_FRAME_BYTES :])  # the ring is full
                    break
                out.popleft()
            elif ring.try_write(kind, payload):
                out.popleft()
                wrote = True
            else:
                break
        if wrote and wake(ring, CONSUMER, c.channel.client_bell):
            self.core.stats["posts"] += 1

    def _serve_channel(self, c: Client, now: int) -> int:
        ring = c.channel.requests
        try:
            frames = ring.read_batch(MAX_FRAMES_PER_PASS)
            if not frames:
                return 0
            self.core.handle(c, frames, now)
        except CorruptFrameError as e:
            self._drop(c, f"malformed frame: {e}")
            return 1
        except Exception as e:  # a frame the codec let through broke a processor: that client goes, not the broker
            log.exception("client %d's frames raised", c.client_id)
            self._drop(c, f"its frames raised {type(e).__name__}: {e}")
            return 1
        ring.release()
        if wake(ring, PRODUCER, c.channel.client_bell):
            self.core.stats["posts"] += 1
        return len(frames)

    # ------------------------------------------------------------------ clients

    def _check_liveness(self) -> None:
        for c in list(self.clients.values()):
            if not c.watch.is_alive():
                self._serve_channel(c, time.monotonic_ns())  # what it published before dying is sent
                if c.alive:
                    self._drop(c, "client died", remove_liveness=True)

    def _drop(self, c: Client, reason: str | None, remove_liveness: bool = False) -> None:
        """Reclaim a client's channel: detach (reason None), death, or a malformed frame."""
        if reason is None:
            log.info("client %d (pid %d) detached", c.client_id, c.pid)
        else:
            log.warning("dropping client %d (pid %d): %s", c.client_id, c.pid, reason)
        self._release_client(c, remove_liveness)
        self.core.remove_client(c)

    def _release_client(self, c: Client, remove_liveness: bool) -> None:
        c.alive = False
        c.out.clear()
        self.clients.pop(c.client_id, None)
        self._rebuild_park_flags()
        c.channel.mark_dropped()
        self.control_plane.retire(c.channel)  # names now, the unmapping (freeing its pages) off the loop
        if remove_liveness:
            c.watch.remove()
        else:
            self.control_plane.watch_orphan(c.watch)  # dropped alive: its semaphore goes when it dies

    def _publish_health(self) -> None:
        try:
            self.publisher.health(gather(self.core, self.replication_health()))
            self.publisher.pop_inflight(pop_inflight_by_group(self.core))
        except Exception:  # the monitor's numbers must never stop the broker
            log.exception("publishing the broker health failed")

    def replication_health(self) -> ReplicaHealth:
        """A master's replicas as its HA segment shows them (a replica overrides this)."""
        return self.ha.health() if self.ha is not None else ReplicaHealth()

    def _publish_fill(self) -> None:
        if self.clients:
            self.publisher.client_fill(
                {c.client_id: (c.channel.requests.used(), c.channel.responses.used()) for c in self.clients.values()}
            )


def _next_spin(gap_ns: int) -> int:
    """Spin window after an idle gap of ``gap_ns``: cover the next one if gaps are short."""
    return min(SPIN_MAX_NS, max(SPIN_MIN_NS, 2 * gap_ns)) if gap_ns < SPIN_MAX_NS else SPIN_MIN_NS


def _raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every consume-queue segment holds a descriptor
    (RocketMQ's deployment guide asks for ulimit -n 655350 for the same reason)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_broker(
    store_dir: str,
    name: str = "default",
    config: Any = None,
    controller_class: type[BrokerController] = BrokerController,
) -> int:
    """Entry point of `shmq broker` (``controller_class`` ReplicaController: `shmq replica`): serve
    until SIGTERM/SIGINT; exit status 0, or 2 on a start error."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s broker[{name}] %(levelname)s %(message)s"
    )
    _raise_open_file_limit()
    try:
        controller = controller_class(store_dir, name, config).start()
    except (ShmqError, ValueError, OSError, sysv_ipc.Error, posix_ipc.Error) as e:
        print(f"shmq broker: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: keep the traceback in the log, still one line and status 2
        log.exception("unexpected error while starting")
        print(f"shmq broker: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    log.info(
        "serving store %s as broker %r (pid %d, %s, %s)",
        controller.store_dir,
        name,
        os.getpid(),
        controller.config.flush_disk_type,
        controller.config.broker_role,
    )
    controller.serve_forever()
    return 0
