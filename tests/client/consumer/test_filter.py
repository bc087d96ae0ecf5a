import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shmq.codec import record as fmt
from shmq.errors import BadExpressionError, ShmqError
from shmq.filter.tags import Expression, TagFilter, as_expression


@pytest.mark.parametrize("expr", [None, "", "  ", "*", " * "])
def test_subscribe_all(expr):
    f = TagFilter(expr)
    assert f.is_all and f.expression == "*" and len(f.codes) == 0
    assert f.matches_codes(np.array([0, 5, 7], np.int64)).all()
    assert f.exact(None) and f.exact("anything")
    assert f.match({})


def test_tags_are_split_and_trimmed():
    f = TagFilter(" TagA||  TagB || TagA ")
    assert f.tags == {"TagA", "TagB"}
    assert f.expression == "TagA || TagB"
    assert sorted(f.codes.tolist()) == sorted({fmt.tags_code("TagA"), fmt.tags_code("TagB")})
    assert f.exact("TagA") and f.exact("TagB") and not f.exact("TagC") and not f.exact(None)
    assert f.match({"TAGS": "TagB"}) and not f.match({"KEYS": "TagB"})


@pytest.mark.parametrize("expr", ["||", " || ", "TagA || *"])
def test_bad_expressions(expr):
    with pytest.raises(ValueError):
        TagFilter(expr)


def test_matches_codes_on_entries_and_arrays():
    entries = np.zeros(4, dtype=fmt.CQ_DTYPE)
    entries["tags_code"] = [fmt.tags_code("A"), fmt.tags_code("B"), 0, fmt.tags_code("A")]
    assert TagFilter("A").matches_codes(entries).tolist() == [True, False, False, True]
    assert TagFilter("A || B").matches_codes(entries["tags_code"]).tolist() == [True, True, False, True]


@given(
    st.lists(
        st.text(
            st.characters(
                min_codepoint=33,
                max_codepoint=0x2FF,
                exclude_characters="|=<>()'\"!",
                exclude_categories=("Zs", "Zl", "Zp", "Cc"),
            ),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    ),
    st.lists(st.text(max_size=6), max_size=40),
)
def test_code_mask_agrees_with_isin(tags, present):
    tags = [t for t in tags if t.strip() and t.strip() != "*"]
    if not tags:
        return
    f = TagFilter(" || ".join(tags))
    codes = np.array([fmt.tags_code(t) for t in present + tags], np.int64)
    want = np.isin(codes, [fmt.tags_code(t.strip()) for t in tags])
    assert np.array_equal(f.matches_codes(codes), want)
    for t in tags:
        assert f.exact(t.strip())


class EvenA:
    type = "TEST"

    def match(self, properties):
        return int(properties.get("a", "1")) % 2 == 0


def test_as_expression():
    assert as_expression(None) == TagFilter("*")
    assert as_expression("A || B") == TagFilter("B || A")
    e = EvenA()
    assert isinstance(e, Expression) and as_expression(e) is e
    with pytest.raises(ShmqError):
        as_expression(42)


@pytest.mark.parametrize("expr", ["a > 3", "a BETWEEN 1 AND 3", "color = 'red'", "(TagA)", "price IS NOT NULL"])
def test_sql_looking_expressions_raise_at_once(expr):
    """Regression (issue 9 A6): "a > 3" was taken as a tag and the consumer silently got nothing."""
    with pytest.raises(BadExpressionError, match=r"looks like SQL92.*shmq\.sql\("):
        as_expression(expr)


@pytest.mark.parametrize(
    "expr, why",
    [("TagA ||", "empty tag"), ("|| TagA", "empty tag"), ("TagA | TagB", "not '|'"), ("TagA TagB", "whitespace")],
)
def test_malformed_tag_expressions_raise_at_once(expr, why):
    """Regression (issue 9 A6): "TagA ||" and "TagA | TagB" were accepted and matched nothing."""
    with pytest.raises(BadExpressionError, match=why):
        TagFilter(expr)
