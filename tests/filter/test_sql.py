"""SQL92 filters: a table of expressions x properties (RocketMQ's edge cases), parse errors with
their column, and fuzzing: any text is a filter or a BadExpressionError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shmq
from shmq.errors import BadExpressionError
from shmq.filter.sql import FALSE, TRUE, UNKNOWN, SqlFilter, sql, to_number
from shmq.filter.tags import as_expression

P = {
    "a": "2",
    "b": "x",
    "s": "it's",
    "f": "2.5",
    "neg": "-3",
    "t": "TRUE",
    "e": "",
    "big": "9" * 5000,
    "TAGS": "TagA",
    "KEYS": "k1 k2",
    "order.region": "eu",
    "in": "kw",
}

TABLE = [
    # numbers vs strings
    ("a = 2", TRUE),
    ("a = '2'", TRUE),
    ("a = 2.0", TRUE),
    ("a > 1", TRUE),
    ("a >= 2", TRUE),
    ("a < 2", FALSE),
    ("a <> 2", FALSE),
    ("a <> 3", TRUE),
    ("b = 'x'", TRUE),
    ("b <> 'y'", TRUE),
    ("b > 1", UNKNOWN),
    ("b = 1", UNKNOWN),
    ("f > 2", TRUE),
    ("f = 2.5", TRUE),
    ("neg < -2", TRUE),
    ("-a = -2", TRUE),
    ("big > 9223372036854775807", TRUE),
    ("e = ''", TRUE),
    ("e > 0", UNKNOWN),
    ("a > f", FALSE),
    ("f > a", TRUE),
    # escaped quotes
    ("s = 'it''s'", TRUE),
    ("s = 'its'", FALSE),
    ("s CONTAINS ''''", TRUE),
    # NULL handling: a missing property is UNKNOWN everywhere, NOT UNKNOWN too
    ("missing = 'x'", UNKNOWN),
    ("missing <> 'x'", UNKNOWN),
    ("NOT missing = 'x'", UNKNOWN),
    ("missing > 1", UNKNOWN),
    ("missing IS NULL", TRUE),
    ("missing IS NOT NULL", FALSE),
    ("a IS NULL", FALSE),
    ("a IS NOT NULL", TRUE),
    ("missing = 'x' OR a = 2", TRUE),
    ("missing = 'x' AND a = 2", UNKNOWN),
    ("missing = 'x' AND a = 3", FALSE),
    ("NULL", UNKNOWN),
    # BETWEEN
    ("a BETWEEN 1 AND 3", TRUE),
    ("a BETWEEN 2 AND 2", TRUE),
    ("a BETWEEN 3 AND 5", FALSE),
    ("a NOT BETWEEN 3 AND 5", TRUE),
    ("a NOT BETWEEN 1 AND 3", FALSE),
    ("missing NOT BETWEEN 1 AND 3", UNKNOWN),
    ("b BETWEEN 1 AND 3", UNKNOWN),
    ("f BETWEEN 2.4 AND 2.6", TRUE),
    ("a BETWEEN -1 AND a", TRUE),
    # IN lists
    ("b IN ('x', 'y')", TRUE),
    ("b IN ('y')", FALSE),
    ("b NOT IN ('y', 'z')", TRUE),
    ("b NOT IN ('x')", FALSE),
    ("missing IN ('x')", UNKNOWN),
    ("missing NOT IN ('x')", UNKNOWN),
    ("a IN ('2')", TRUE),
    # CONTAINS / STARTSWITH / ENDSWITH (missing: UNKNOWN; empty pattern never matches)
    ("KEYS CONTAINS 'k2'", TRUE),
    ("KEYS NOT CONTAINS 'k3'", TRUE),
    ("b STARTSWITH 'x'", TRUE),
    ("b ENDSWITH 'y'", FALSE),
    ("b NOT ENDSWITH 'y'", TRUE),
    ("missing CONTAINS 'x'", UNKNOWN),
    ("missing NOT CONTAINS 'x'", UNKNOWN),
    ("NOT (missing CONTAINS 'x')", UNKNOWN),
    ("b CONTAINS ''", FALSE),
    ("b NOT CONTAINS ''", FALSE),
    ("a CONTAINS '2'", TRUE),
    # booleans, keywords in any case, precedence, identifiers
    ("TRUE", TRUE),
    ("FALSE", FALSE),
    ("t", TRUE),
    ("t = TRUE", TRUE),
    ("b = TRUE", UNKNOWN),
    ("NOT t", FALSE),
    ("a = 2 and not b = 'y'", TRUE),
    ("a = 3 OR a = 2 AND b = 'y'", FALSE),
    ("(a = 3 OR a = 2) AND b = 'x'", TRUE),
    ("TAGS = 'TagA'", TRUE),
    ("order.region = 'eu'", TRUE),
    ("\"in\" = 'kw'", TRUE),
    ('"a" = 2', TRUE),
    ("a = 2 -- comment", TRUE),
    ("/* c */ a = 2", TRUE),
    ("a = 2L", TRUE),
    ("a > .5e0", TRUE),
    ("+a = 2", TRUE),
]


@pytest.mark.parametrize("text, expected", TABLE)
def test_table(text, expected):
    f = sql(text)
    assert f.truth(P) == expected
    assert f.match(P) is (expected == TRUE)
    assert f.type == "SQL92" and f.expression == text


@pytest.mark.parametrize(
    "text, column, expected",
    [
        ("a >", 4, "a value"),
        ("a > 'x'", 5, "a number or a property"),
        ("a = NULL", 5, "IS NULL"),
        ("a BETWEEN 3 AND 1", 17, "BETWEEN bounds in order"),
        ("a BETWEEN 'a' AND 'b'", 11, "a number"),
        ("9223372036854775808 = a", 1, "64-bit"),
        ("a = 9223372036854775807", None, None),
        ("a = 1e309", 5, "double"),
        ("a IN (1)", 7, "'string'"),
        ("'x' IN ('x')", 1, "a property on the left of IN"),
        ("a NOT = 1", 7, "BETWEEN, IN"),
        ("a = 'x", 5, "closing '"),
        ("(a = 1", 7, "')'"),
        ("a = 1)", 6, "the end"),
        ("", 1, "a condition"),
        ("5", 1, "a condition"),
        ("a b", 3, "an operator"),
        ("TRUE = 1", 8, "same kind"),
        ("a = (b > 1)", 5, "not a condition"),
        ("(" * 100 + "a = 1" + ")" * 100, 66, "nesting"),
        ("NOT " * 100 + "a", 261, "nesting"),
        ("a = 1 /* x", 7, "*/"),
        ('"" = 1', 1, "property name"),
        ("a = 01", 6, "an operator"),
    ],
)
def test_errors_name_the_column_and_what_was_expected(text, column, expected):
    if column is None:
        sql(text)
        return
    with pytest.raises(BadExpressionError) as e:
        sql(text)
    assert e.value.column == column, str(e.value)
    assert expected in str(e.value) and expected in (e.value.expected or "") + str(e.value)


def test_public_api():
    f = shmq.sql("a > 1")
    assert isinstance(f, shmq.SqlFilter) and as_expression(f) is f
    assert f == SqlFilter("a > 1") and hash(f) == hash(SqlFilter("a > 1"))
    with pytest.raises(BadExpressionError, match="must be a str"):
        sql(42)  # type: ignore[arg-type]
    with pytest.raises(BadExpressionError, match=r"shmq\.sql"):
        as_expression("a > 1")


def test_to_number():
    assert to_number("12") == 12 and to_number("-1.5e2") == -150.0 and to_number(".5") == 0.5
    assert to_number("abc") is None and to_number("NaN") is None and to_number(" 1") is None
    assert to_number("1" * 5000) == float("inf")


_ALPHABET = st.sampled_from(
    [
        *"ab ()'\"=<>-+.,0123456789eEL_$\n",
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "IN",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
        "--",
        "/*",
        "*/",
        "''",
        "9223372036854775808",
        "1e400",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(_ALPHABET, max_size=25).map(" ".join),
        st.lists(_ALPHABET, max_size=25).map("".join),
    ),
    st.dictionaries(st.sampled_from(["a", "b", "e", "L"]), st.text(max_size=6), max_size=3),
)
def test_fuzz_parser_only_raises_bad_expression(text, props):
    try:
        f = sql(text)
    except BadExpressionError as e:
        assert e.column is not None and 1 <= e.column <= len(text) + 1
        return
    assert f.truth(props) in (FALSE, UNKNOWN, TRUE)


@pytest.mark.parametrize(
    "text",
    [
        "a = '" + "x" * 60_000 + "'",  # a string literal
        "a = '" + "x''" * 20_000 + "'",  # one with escaped quotes
        '"' + "x" * 60_000 + '" = 1',  # a quoted name
        '"' + 'x""' * 20_000 + '" = 1',
        "/*" + "x" * 60_000 + "*/ a = 1",  # a comment
    ],
)
def test_tokenizing_a_long_literal_takes_memory_in_proportion_to_its_text(text):
    """Regression: a quoted literal was matched by an alternation inside a repetition, for which
    the regex engine kept about 240 bytes of backtracking state per character (a 4 MB string
    literal took 959 MB). Now: the text, the token's text and its value, a few bytes a character."""
    import tracemalloc

    tracemalloc.start()
    try:
        f = sql(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f.tree is not None
    assert peak < 8 * len(text) + 100_000, f"{peak} bytes at peak for {len(text)} characters"


def test_an_expression_over_the_length_limit_is_refused_in_one_line():
    """A limit chosen here (RocketMQ documents none): 64 Ki characters, refused before tokenizing."""
    from shmq.filter.sql import MAX_LENGTH

    sql("a = '" + "x" * (MAX_LENGTH - 6) + "'")  # at the limit: taken
    with pytest.raises(BadExpressionError) as e:
        sql("a = '" + "x" * (5 << 20) + "'")
    assert f"at most {MAX_LENGTH} characters" in str(e.value) and "\n" not in str(e.value)
    assert e.value.column == MAX_LENGTH + 1
