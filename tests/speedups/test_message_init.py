"""Compiled ``MessageFields.__init__`` against the Python reference ``_Fields.__init__``: the
same stored fields (keys joined, times as float) and the same errors for every argument mix,
plain or not; and Message keeps its dataclass and pickle behaviour on the compiled base."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.model import message as M
from shmq.model.message import Message
from tests.speedups.conftest import compiled_or_skip

FIELDS = M._Fields.__slots__


class Sub(Message):
    """A subclass has a ``__dict__`` for its own attributes."""


_values = st.one_of(
    st.none(),
    st.integers(-3, 70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.sampled_from(
        [0, 0.0, "", "k", "a b", b"k", ["a", "b"], ("b", "a"), {"z", "y"}, [1], ["a b"], math.inf, -1.5, 2**70]
    ),
)


def _outcome(cls: type, args: tuple, kwargs: dict[str, Any]) -> tuple:
    try:
        m = cls(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the same type and text both ways
        return ("raised", type(e), str(e))
    return ("made", *((type(getattr(m, f)), getattr(m, f)) for f in FIELDS))


def _same(a: tuple, b: tuple) -> bool:
    """Equal outcomes, NaN equal to NaN."""
    return repr(a) == repr(b)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["tags", "keys", "properties", "flag", "delay_level", "deliver_at", "delay"]),
        _values,
        max_size=4,
    ),
    st.one_of(st.just("T"), st.integers()),
    st.one_of(st.just(b"x"), st.none()),
)
def test_init_same_as_reference(kwargs: dict[str, Any], topic: Any, body: Any) -> None:
    compiled = compiled_or_skip("_message", "MessageFields")
    ref = _outcome(M._Fields, (topic, body), kwargs)
    assert _same(_outcome(compiled, (topic, body), kwargs), ref)
    assert _same(_outcome(Message, (topic, body), kwargs), ref)


def test_positional_and_missing_arguments() -> None:
    compiled = compiled_or_skip("_message", "MessageFields")
    args = ("T", b"x", "t", "k", {"a": "b"}, 3, 0, None, None)
    assert _outcome(compiled, args, {}) == _outcome(M._Fields, args, {})
    for cls in (compiled, M._Fields):
        for bad in ((), ("T",), (*args, 1)):
            try:
                cls(*bad)
            except TypeError:
                continue
            raise AssertionError(f"{cls} took {bad}")


def test_message_behaviour() -> None:
    """Whatever the base: equality, repr, replace, copy, pickle, slots, subclasses with attributes."""
    m = Message("T", b"x", tags="a", keys={"k2", "k1"}, delay=2)
    assert repr(m) == "Message(topic='T', body=b'x', tags='a', keys='k1 k2', delay=2.0)"
    assert m == Message("T", b"x", tags="a", keys="k1 k2", delay=2.0) and m != Message("T", b"y")
    assert dataclasses.replace(m, tags="b").tags == "b"
    assert [f.name for f in dataclasses.fields(Message)] == list(FIELDS)
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(Message))
    for clone in (copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert clone == m and clone is not m
    m.keys, m.tags = "x", None  # plain attributes, as the dataclass had
    assert (m.keys, m.tags) == ("x", None)

    s = Sub("T", b"x")
    s.extra = 1
    back = pickle.loads(pickle.dumps(s))
    assert back == s and back.extra == 1
    try:
        m.extra = 1  # type: ignore[attr-defined]
    except AttributeError:
        pass
    else:
        raise AssertionError("a Message has no __dict__")
