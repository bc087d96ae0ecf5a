"""The master broker's end of HA: the HA segment it owns and the wake-ups it sends the HA sender.

After every pass that wrote, the loop publishes the commitlog's new max offset in the HA
segment (one aligned store) and, only if the sender is parked, wakes it with one datagram, so
a busy broker makes no system call for replication.
"""
from __future__ import annotations

from shmq.ha.shared import HASegment, SenderWaker
from shmq.ring.framing import full_fence


class MasterLink:
    """Owned by the broker process of a master (``brokerRole`` ASYNC_MASTER or SYNC_MASTER)."""

    def __init__(self, broker: str, shm_gid: int | None) -> None:
        self.segment = HASegment.create(broker, shm_gid)
        self._waker = SenderWaker(broker)
        self._published = -1

    def after_pass(self, max_offset: int) -> None:
        """Publish a grown log end; wake a parked sender."""
        if max_offset != self._published:
            self._published = max_offset
            header = self.segment.header
            header["master_offset"] = max_offset
            full_fence()  # the store before the load: the sender fences between raising the flag and re-reading
            if header["sender_parked"][0]:
                self._waker.wake()

    def close(self) -> None:
        """At shutdown: the segment goes (the sender sees the broker die and exits)."""
        self._waker.close()
        self.segment.close()
        self.segment.unlink()
