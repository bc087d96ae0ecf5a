"""The messages a POP handed out, read from the consumer's own mapping of the commitlog.

A POP_RESULT names each message by its commitlog offset and size; this reads the record there
into a ``PoppedMessageExt`` the way the pull path builds a ``MessageExt``: the body copied out,
the properties kept encoded until first used (a worker that only reads bodies never decodes
them), the offset id made on first use. Only a message of the group's retry topic has its
properties read at once, to show the topic it was first sent to.
"""

from __future__ import annotations

import logging

from shmq.codec import pop_frames as F
from shmq.codec import record as fmt
from shmq.errors import CorruptRecordError
from shmq.model.message_ext import PoppedMessageExt, ReceiptHandle
from shmq.store.read.reader import StoreReader

log = logging.getLogger("shmq.client.consumer.simple")  # the records read as the simple consumer's

_LEN = fmt.OFF_BODY  # the fixed header, then body, topic length byte, topic, properties length


def popped_messages(
    store: StoreReader, result: F.PopResult, broker_name: str, retry_topic: str, group: str
) -> list[PoppedMessageExt]:
    """Every message of ``result``. One that cannot be read (its file cleaned up, damage) is
    skipped with a warning: the broker delivers it again after its invisible time."""
    out: list[PoppedMessageExt] = []
    topics = result.topics
    r = result
    columns = (r.topic_idx, r.queue_ids, r.queue_offsets, r.commitlog_offsets, r.sizes, r.attempts, r.tokens)
    for t, qid, qoff, offset, size, attempt, token in zip(*(c.tolist() for c in columns)):  # ints, not numpy scalars
        topic = topics[t]
        receipt = ReceiptHandle(broker_name, topic, qid, qoff, token)
        try:
            m = _read(store, offset, size)
        except CorruptRecordError as e:
            log.warning("consumer %r skips a message it cannot read (%s); it comes again later", group, e)
            continue
        if topic == retry_topic:
            m.topic = m.properties.get(fmt.PROPERTY_RETRY_TOPIC) or topic
        m.delivered(receipt, attempt)
        out.append(m)
    return out


def _read(store: StoreReader, offset: int, size: int) -> PoppedMessageExt:
    """The record of ``size`` bytes at commitlog ``offset``; CorruptRecordError if it is not one."""
    view = store.commitlog.data(offset, size) if size >= fmt.FIXED_OVERHEAD else None
    if view is None:
        raise CorruptRecordError(f"commitlog offset {offset} ({size} bytes) is not mapped")
    try:
        (total, magic, _crc, qid, _flag, qoff, phys, sysflag, born, _bh, stamp, host, reconsume, _prep, body_len) = (
            fmt.HEADER.unpack_from(view)
        )
        if magic != fmt.MESSAGE_MAGIC or total != size or phys != offset or not 0 <= body_len <= size - _LEN - 3:
            raise CorruptRecordError(f"commitlog offset {offset} holds no record of {size} bytes")
        p = _LEN + body_len
        topic_len = view[p]
        topic = bytes(view[p + 1 : p + 1 + topic_len]).decode("ascii", "replace")
        p += 1 + topic_len
        props_len = int.from_bytes(view[p : p + 2], "big")
        if fmt.record_size(body_len, topic_len, props_len) != size:
            raise CorruptRecordError(f"commitlog record at {offset}: its sizes do not add up to {size}")
        body = bytes(view[_LEN : _LEN + body_len])
        if sysflag & fmt.FLAG_COMPRESSED:
            body = fmt.decompress_body(body, offset)
        raw_props = bytes(view[p + 2 : p + 2 + props_len])
    finally:
        view.release()
    m = PoppedMessageExt.stored(topic, body, raw_props, qid, qoff, phys, born, stamp, reconsume, host, size, sysflag)
    assert isinstance(m, PoppedMessageExt)
    return m
