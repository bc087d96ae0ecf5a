"""The batch evaluator gives the scalar evaluator's answer on every record (hypothesis), and the
property lookup gives decode_properties' value on any bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.codec import record as fmt
from shmq.filter.sql import sql
from shmq.filter.sql_batch import Batch, property_value

NAMES = ["a", "b", "c"]
_values = st.one_of(
    st.sampled_from(["1", "2", "2.5", "-3", "x", "y", "", "true", "FALSE", "1e3", "abc"]),
    st.text(max_size=4).filter(lambda s: "\x01" not in s and "\x02" not in s),
)
_props = st.dictionaries(st.sampled_from([*NAMES, "TAGS"]), _values, max_size=4)

_leaf = st.one_of(
    st.builds(
        lambda n, op, v: f"{n} {op} {v}",
        st.sampled_from(NAMES),
        st.sampled_from(["=", "<>", "<", ">=", ">"]),
        st.sampled_from(["1", "2.5", "-3", "0"]),
    ),
    st.builds(lambda n, v: f"{n} = '{v}'", st.sampled_from(NAMES), st.sampled_from(["x", "1", "", "true"])),
    st.builds(
        lambda n, m: f"{n} {m}",
        st.sampled_from(NAMES),
        st.sampled_from(
            [
                "IS NULL",
                "IS NOT NULL",
                "IN ('x', '1')",
                "NOT IN ('y')",
                "BETWEEN 1 AND 2",
                "NOT BETWEEN 0 AND 1",
                "CONTAINS 'x'",
                "NOT STARTSWITH '1'",
                "ENDSWITH ''",
            ]
        ),
    ),
    st.builds(
        lambda a, op, b: f"{a} {op} {b}",
        st.sampled_from(NAMES),
        st.sampled_from(["=", "<", "<>"]),
        st.sampled_from(NAMES),
    ),
    st.sampled_from(["TRUE", "FALSE", "NULL", "a", "-a > 1"]),
)
_expr = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(lambda x: f"NOT ({x})", inner),
        st.builds(lambda x, y, op: f"({x}) {op} ({y})", inner, inner, st.sampled_from(["AND", "OR"])),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(_expr, st.lists(_props, max_size=30))
def test_batch_equals_scalar(text, records):
    f = sql(text)
    raws = [fmt.encode_properties(p) for p in records]
    got = Batch(raws).truth(f.tree).tolist()
    assert got == [f.truth(fmt.decode_properties(r)) for r in raws]


@settings(max_examples=500, deadline=None)
@given(
    st.binary(max_size=40).map(lambda b: b.replace(b"\x03", b"\x01").replace(b"\x04", b"\x02")),
    st.sampled_from(["a", "ab", "é", "TAGS"]),
)
def test_property_value_matches_decode(raw, name):
    assert property_value(raw, name.encode()) == fmt.decode_properties(raw).get(name)
