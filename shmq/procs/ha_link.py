"""The master broker's end of HA: the HA segment it owns, the wake-ups it sends the HA sender,
the acked offsets SYNC_MASTER answers wait for, and the sender child it supervises.

After every pass that wrote, the loop publishes the commitlog's new max offset in the HA
segment (one aligned store) and, only if the sender is parked, wakes it with one datagram, so
a busy broker makes no system call for replication. While SYNC_MASTER answers wait the
``broker_waiting`` word is 1 and the sender rings the broker's doorbell when an ack advances.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from shmq.broker.health import ReplicaHealth
from shmq.config import BrokerConfig
from shmq.ha.shared import HASegment, SenderWaker
from shmq.ha.token import master_token
from shmq.procs.ha_supervisor import SenderSupervisor
from shmq.ring.framing import full_fence

log = logging.getLogger("shmq.broker")


def _with_token(store_dir: str, config: BrokerConfig) -> BrokerConfig:
    """The sender's config, holding the token replicas must prove (generated into the store when
    none is configured, so that no HA port is ever open to whoever connects); ConfigError if a
    configured token file cannot be used (the broker refuses to start: one line)."""
    token = master_token(store_dir, config)
    if token.generated:
        log.info(
            "haAuthToken is not set: generated an HA token in %s (mode 0600); a replica must be given it "
            "(copy it to the replica's STORE/config/ha.token)",
            token.source,
        )
    else:
        log.info("HA sender: replicas must prove the HA token (%s)", token.source)
    return dataclasses.replace(config, ha_auth_token=token.secret, ha_auth_token_file=None)


class MasterLink:
    """Owned by the broker process of a master (``brokerRole`` ASYNC_MASTER or SYNC_MASTER);
    ``log_end`` reads the commitlog's max offset (the in-sync gap is measured from it)."""

    def __init__(self, broker: str, store_dir: str, config: BrokerConfig, log_end: Callable[[], int]) -> None:
        sender_config = _with_token(store_dir, config) if config.ha_listen_port > 0 else None
        self.segment = HASegment.create(broker, config.group_id())
        try:
            self._waker = SenderWaker(broker)
            self.sender = SenderSupervisor(store_dir, broker, sender_config) if sender_config is not None else None
        except BaseException:
            self.segment.close()
            self.segment.unlink()
            raise
        self._published = -1
        self._log_end = log_end
        self._max_gap = config.ha_max_gap_not_in_sync

    def start_sender(self, now: int) -> None:
        """Once the broker serves (the sender watches its liveness from the state segment)."""
        if self.sender is not None:
            self.sender.start(now)

    def after_pass(self, max_offset: int) -> None:
        """Publish a grown log end; wake a parked sender."""
        if max_offset != self._published:
            self._published = max_offset
            header = self.segment.header
            header["master_offset"] = max_offset
            full_fence()  # the store before the load: the sender fences between raising the flag and re-reading
            if header["sender_parked"][0]:
                self._waker.wake()

    def tick(self, now: int) -> None:
        """The broker's timer tick: restart a sender that died (no blocking call)."""
        if self.sender is not None:
            self.sender.check(now)

    # ------------------------------------------------------------------ replication.AckSource

    def best_acked(self) -> int:
        return self.segment.best_acked(self._log_end(), self._max_gap)

    def health(self) -> ReplicaHealth:
        """For the monitor: replicas connected, how many within ``haMaxGapNotInSync``, the best acked offset."""
        end = self._log_end()
        replicas = self.segment.replicas()
        return ReplicaHealth(
            len(replicas), sum(1 for r in replicas if end - r.acked_offset <= self._max_gap), self.best_acked(), end
        )

    def set_waiting(self, waiting: bool) -> None:
        self.segment.set_broker_waiting(waiting)
        if waiting:  # Dekker with the sender: our flag before we read its acks again
            full_fence()

    def close(self) -> None:
        """At shutdown: the sender stops, then the segment goes."""
        try:
            if self.sender is not None:
                self.sender.stop(self._waker.wake)
        finally:
            self._waker.close()
            self.segment.close()
            self.segment.unlink()
