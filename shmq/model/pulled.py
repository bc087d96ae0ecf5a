"""PulledBatch: the messages of one queue a consumer pulled, as columns over the commitlog
mappings (what ``PullConsumer.pull_batch`` returns and the push and lite-pull consumers turn into
``MessageExt`` objects). The read path that fills it is ``shmq.store.read.columns``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.model.message_ext import MessageExt
from shmq.model.reprs import fields_repr, span


@dataclass(slots=True, eq=False)
class PulledBatch:
    """Messages of one queue as columns; `segment[i]` indexes `buffers`, the commitlog mappings
    that `body_pos`/`props_pos` point into. Bodies are views until decompressed."""

    topic: str
    queue_id: int
    next_offset: int  # the queue offset to pull from next (past every entry scanned)
    missing: int  # entries whose records cleanup already deleted (skipped)
    queue_offset: np.ndarray
    commit_log_offset: np.ndarray
    size: np.ndarray
    store_timestamp: np.ndarray
    born_timestamp: np.ndarray
    sysflag: np.ndarray
    reconsume_times: np.ndarray
    store_host: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    segment: np.ndarray
    buffers: list[np.ndarray]

    @classmethod
    def empty(cls, topic: str, queue_id: int, next_offset: int, missing: int) -> PulledBatch:
        """No messages: the range held none (or none that passed), pull next from ``next_offset``."""
        e = np.empty(0, dtype=np.int64)
        return cls(topic, queue_id, next_offset, missing, e, e, e, e, e, e, e, e, e, e, e, e, e, [])

    def __len__(self) -> int:
        return len(self.queue_offset)

    def __repr__(self) -> str:
        """Where from, how many, which offsets and how many bytes: never the columns or the
        mappings (a print of the full dataclass showed a 134 M-element buffer)."""
        offsets = span(int(self.queue_offset[0]), int(self.queue_offset[-1])) if len(self) else None
        return fields_repr(
            "PulledBatch",
            (
                ("topic", self.topic),
                ("queue_id", self.queue_id),
                ("messages", len(self)),
                ("queue_offset", offsets),
                ("bytes", int(self.size.sum())),
                ("next_offset", self.next_offset),
                ("missing", self.missing or None),
            ),
        )

    def _raw(self, i: int, pos: np.ndarray, length: np.ndarray) -> memoryview:
        p = int(pos[i])
        return self.buffers[int(self.segment[i])].data[p : p + int(length[i])]

    def body(self, i: int) -> memoryview:
        """Record i's body: a view of the mapping, or the decompressed bytes when compressed."""
        raw = self._raw(i, self.body_pos, self.body_len)
        if self.sysflag[i] & fmt.FLAG_COMPRESSED:
            return memoryview(fmt.decompress_body(raw, int(self.commit_log_offset[i])))
        return raw

    def bodies(self) -> list[memoryview]:
        views = [b.data for b in self.buffers]
        out = [
            views[s][p : p + n]
            for s, p, n in zip(self.segment.tolist(), self.body_pos.tolist(), self.body_len.tolist())
        ]
        for i in np.flatnonzero(self.sysflag & fmt.FLAG_COMPRESSED).tolist():
            out[i] = memoryview(fmt.decompress_body(out[i], int(self.commit_log_offset[i])))
        return out

    def properties(self, i: int) -> dict[str, str]:
        return fmt.decode_properties(self._raw(i, self.props_pos, self.props_len))

    def to_message_ext(self, i: int) -> MessageExt:
        """Record i as the everyday per-message object (body copied out of the mapping)."""
        return MessageExt.stored(
            self.topic,
            bytes(self.body(i)),
            bytes(self._raw(i, self.props_pos, self.props_len)),
            self.queue_id,
            int(self.queue_offset[i]),
            int(self.commit_log_offset[i]),
            int(self.born_timestamp[i]),
            int(self.store_timestamp[i]),
            int(self.reconsume_times[i]),
            int(self.store_host[i]),
            int(self.size[i]),
            int(self.sysflag[i]),
        )

    def messages(self) -> list[MessageExt]:
        """Every record as a MessageExt (``batch_messages``: compiled when available)."""
        return batch_messages(self)


def batch_messages(batch: PulledBatch) -> list[MessageExt]:
    """Every record of ``batch`` as a MessageExt: the columns are converted once, not field by
    field per message, and properties stay encoded until a listener asks (``MessageExt.stored``)."""
    if not len(batch):
        return []
    views = [b.data for b in batch.buffers]
    props = [
        bytes(views[s][p : p + n])
        for s, p, n in zip(batch.segment.tolist(), batch.props_pos.tolist(), batch.props_len.tolist())
    ]
    stored, topic, qid = MessageExt.stored, batch.topic, batch.queue_id
    return [
        stored(topic, bytes(body), pr, qid, qoff, phys, born, stamp, reconsume, host, size, sysflag)
        for body, pr, qoff, phys, born, stamp, reconsume, host, size, sysflag in zip(
            batch.bodies(),
            props,
            batch.queue_offset.tolist(),
            batch.commit_log_offset.tolist(),
            batch.born_timestamp.tolist(),
            batch.store_timestamp.tolist(),
            batch.reconsume_times.tolist(),
            batch.store_host.tolist(),
            batch.size.tolist(),
            batch.sysflag.tolist(),
        )
    ]


batch_messages = _speedups.pick("_consumer", "batch_messages", batch_messages)
