"""A resent SEND is stored once (the broker's half of the idempotent producer).

A producer resends a message, flagged ``FLAG_RESEND``, when its first attempt got no answer in
time or was cut by a broker that died: the broker may have stored it. Every message already
carries a key unique to it (``UNIQ_KEY``: the producer's id and a per-producer sequence, see
shmq.codec.ids), and the store's index holds ``topic#UNIQ_KEY`` of every record it stored,
rebuilt from the commitlog by recovery after a crash. So a resend is looked up there: found,
it is answered with the first copy's result and not stored again; not found, it is stored as
any send. First attempts carry no flag and pay nothing: only resends read the index.
"""

from __future__ import annotations

from shmq.codec import record as fmt
from shmq.store.read.lookup import MessageLookup


def first_copy(store: MessageLookup, topic: str, record: memoryview) -> fmt.StoredRecord | None:
    """The stored record with ``record``'s UNIQ_KEY in ``topic``, or None: never stored (or a
    broker without the index, ``messageIndexEnable=false``, which cannot tell)."""
    try:
        uniq = fmt.decode_record(record).uniq_key
    except fmt.CorruptRecordError:  # the put path refuses it with the reason
        return None
    if not uniq:
        return None
    return store.query_by_uniq_key(topic, uniq)
