"""SendResult's field storage: the compiled ``_message.SendResultFields`` base against the
Python reference ``_ResultFields``. The same attributes, repr, equality, pickle state and
copies either way (this file runs with and without extensions), and the compiled base holds
exactly the reference's slots."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.client.producer.transaction import TransactionSendResult, TransactionStatus
from shmq.codec import ids
from shmq.model import message as M
from shmq.model.message import MessageQueue, SendResult, SendStatus, split_results
from tests.speedups.conftest import compiled_or_skip

MQ = MessageQueue("T", "b", 3)


def _fields(r: SendResult) -> dict:
    return {f: getattr(r, f) for f in r._FIELDS} | {"store_host": r.store_host}


def test_compiled_base_has_the_reference_slots() -> None:
    base = compiled_or_skip("_message", "SendResultFields")
    made = base.__new__(base)
    for name in M._ResultFields.__slots__:
        setattr(made, name, name)
        assert getattr(made, name) == name
    assert not hasattr(made, "__dict__")


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=40),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 2**63 - 1),
    st.sampled_from(list(SendStatus)),
)
def test_pickle_copy_and_equality(uniq: str, phys: int, offset: int, host: int, status: SendStatus) -> None:
    r = split_results(SendResult, status, [uniq], MQ, offset, 7, [phys], host)[0]
    made = SendResult(status, uniq, None, MQ, offset, 7, 1, [phys], host)
    assert r == made and repr(r) == repr(made) and type(r) is SendResult
    for other in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert other == r and _fields(other) == _fields(r)
    state = r.__getstate__()
    assert state == {
        "status": status,
        "queue": MQ,
        "queue_offset": offset,
        "store_timestamp": 7,
        "count": 1,
        "phys_offsets": [phys],
        "store_host": host,
        "_msg_id": uniq,
        "_make_msg_id": None,
        "_offset_msg_id": ids.offset_msg_id(host, phys),
    }


def test_a_batch_result_pickles_with_its_ids_made() -> None:
    """The function that makes a batch's ids would not pickle, and an unmade id (UNSET) would
    not survive one: both are made first."""
    r = SendResult(SendStatus.SEND_OK, lambda: "A,B", None, MQ, 5, 0, 2, [100, 200], 9)
    back = pickle.loads(pickle.dumps(r))
    assert back.msg_id == "A,B" and back.offset_msg_id == r.offset_msg_id and back == r


def test_transaction_result_and_subclass_attributes() -> None:
    sent = SendResult(SendStatus.SEND_OK, "U", None, MQ, 5, 1, 1, [300], 9)
    t = TransactionSendResult(sent, TransactionStatus.COMMIT)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and back.local_transaction_state is TransactionStatus.COMMIT and repr(back) == repr(t)

    class WithDict(SendResult):
        pass

    w = WithDict(SendStatus.SEND_OK, "U", None, MQ, 5)
    w.note = "kept"
    assert copy.copy(w).note == "kept" and copy.copy(w) == w


def test_state_pickled_before_the_base_moved_is_read() -> None:
    """The default pickle of the all-Python slotted SendResult gave (None, slots)."""
    r = SendResult.__new__(SendResult)
    r.__setstate__(
        (
            None,
            {
                "status": SendStatus.SEND_OK,
                "queue": MQ,
                "queue_offset": 1,
                "store_timestamp": 2,
                "count": 1,
                "phys_offsets": [3],
                "store_host": 4,
                "_msg_id": "U",
                "_make_msg_id": None,
                "_offset_msg_id": "X",
            },
        )
    )
    assert r == SendResult(SendStatus.SEND_OK, "U", "X", MQ, 1, 2, 1, [3], 4)


def test_no_new_attributes_on_a_plain_result() -> None:
    r = SendResult(SendStatus.SEND_OK, "U", None, MQ, 5)
    try:
        r.extra = 1  # type: ignore[attr-defined]
    except AttributeError:
        return
    raise AssertionError("a plain SendResult took an attribute it has no slot for")
