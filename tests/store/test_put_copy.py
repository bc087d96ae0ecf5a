"""What the put hooks checked is what the store keeps: a put over a buffer someone else can write
(a client's request ring) is checked and stored from one private copy."""

from __future__ import annotations

import numpy as np
import pytest

from shmq.codec import record as fmt
from shmq.store.write.hooks import PutRequest

from .conftest import record


class _Flip:
    """A hook after the store's checks that changes the caller's buffer, as a client writing into
    its ring while the broker works would: breaks every record's magic and topic field."""

    def __init__(self, source: bytearray, starts: list[int]) -> None:
        self.source, self.starts = source, starts

    def plain_lane(self, req: PutRequest) -> bool:
        return False  # it may act on any put

    def before_put(self, req: PutRequest) -> None:
        for s in self.starts:
            self.source[s + 4 : s + 8] = b"\xde\xad\xbe\xef"
            self.source[s + fmt.OFF_BODY + 1] ^= 0xFF


@pytest.mark.parametrize("n", [1, 3])
def test_records_changed_after_the_checks_are_stored_as_checked(store, n):
    records = [record("T", b"body %d" % i) for i in range(n)]
    source = bytearray(b"".join(records))
    starts = np.cumsum([0] + [len(r) for r in records[:-1]]).astype(np.int64)
    req = PutRequest.of_records("T", 0, records)
    req.batch = fmt.EncodedBatch(
        memoryview(source), starts, req.batch.tags_codes, req.batch.key_hashes, req.batch.key_records
    )
    store.put_hooks.append(_Flip(source, starts.tolist()))
    r = store.put(req)
    assert r.refused is None and r.msg_num == n
    assert source[4:8] == b"\xde\xad\xbe\xef", "the hook did change the caller's buffer"
    got = store.get_message("T", 0, 0, 10).messages
    assert [bytes(m.body) for m in got] == [b"body %d" % i for i in range(n)]
    assert all(m.topic == "T" for m in got)
