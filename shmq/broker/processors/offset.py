"""COMMIT_OFFSET: a consumer's committed offset, kept by the ConsumerOffsetManager (persisted on
the broker's timer) and published at once into the state segment (RocketMQ's
ConsumerManageProcessor.updateConsumerOffset). A member's commit of a queue an operator reset
and the member has not acknowledged yet is dropped (see shmq.broker.offset_reset): it is of a
position from before the reset."""

from __future__ import annotations

from collections.abc import Callable

from shmq.broker.answers import Peer
from shmq.broker.groups import ConsumerOffsetManager
from shmq.codec import frames as P
from shmq.errors import CorruptFrameError


class CommitOffsetProcessor:
    def __init__(
        self,
        offsets: ConsumerOffsetManager,
        publish: Callable[[str, str, int, int], None],
        allows: Callable[[int, str, str, int], bool] = lambda *_: True,
    ) -> None:
        """``allows(client id, group, topic, queue id)``: whether that member's commit counts now."""
        self.offsets = offsets
        self._publish = publish
        self.allows = allows

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        co = P.decode_commit_offset(view)
        if not self.allows(peer.client_id, co.group, co.topic, co.queue_id):
            return
        try:
            self.commit(co.group, co.topic, co.queue_id, co.offset)
        except ValueError as e:  # a negative offset or a bad group: never stored
            raise CorruptFrameError(f"COMMIT_OFFSET: {e}") from None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit(group, topic, queue_id, offset)
        self._publish(group, topic, queue_id, offset)
