"""SQL92 subscription filters (RocketMQ's ``MessageSelector.bySql``): parser and scalar evaluator.

``shmq.sql("a BETWEEN 0 AND 3 AND b = 'x'")`` parses the text at once (``BadExpressionError``
with the column and what was expected) into a small tree that ``SqlFilter.match`` evaluates
over a message's properties.

Why a hand-written recursive-descent parser and no parsing library: the grammar is a dozen
rules, the project takes no dependency a page of code does as well, errors must name the
exact column and the expected token (generated parsers give their own wording), and the
broker parses texts from clients it does not trust, so depth and literal ranges are checked
here where they are visible.

The grammar is RocketMQ 5's (``SelectorParser.jj``), with these decisions:

- keywords are case-insensitive; identifiers are property names, case-sensitive, as
  RocketMQ's ``[a-zA-Z_$][a-zA-Z0-9_$]*`` plus dots after the first character (RocketMQ 4
  took ``order.region``; user properties use dots) and, a shmq extension, double-quoted
  (``"in"``, ``"my prop"``; ``""`` escapes a quote) for names that are keywords or hold
  other characters. ``TAGS`` and ``KEYS`` are the message's tags and keys.
- ``NOT`` binds as in SQL, looser than a comparison: ``NOT a = 'x'`` is ``NOT (a = 'x')``
  (RocketMQ's grammar reads ``(NOT a) = 'x'``, which never matches).
- literals: integers (an ``L`` suffix allowed; out of the int64 range refused), floats
  (``5.``, ``.5``, ``1e3``; overflowing a double refused), ``'strings'`` (``''`` is a
  quote), TRUE, FALSE, NULL; ``--`` and ``/* */`` comments are skipped.
- checked at parse time as RocketMQ does: ``<``/``>``/``BETWEEN`` take numbers (a string,
  boolean or NULL constant is refused), ``= NULL`` is refused (write ``IS NULL``), constant
  BETWEEN bounds must be in order, ``IN`` needs a property on its left and strings in its list.

Semantics (three-valued, SQL's UNKNOWN; only TRUE matches; nothing raises on a message):
property values are strings; comparing one with a number converts it (a decimal integer or
float; anything else is UNKNOWN); a missing property is NULL, so every comparison with it is
UNKNOWN and ``NOT UNKNOWN`` is UNKNOWN. ``CONTAINS`` / ``STARTSWITH`` / ``ENDSWITH`` on a
missing property are UNKNOWN too (RocketMQ answers FALSE, so there ``NOT (a CONTAINS 'x')``
matches messages without ``a``; here it does not); an empty pattern never matches (RocketMQ's
rule, negated or not). A bare property as a condition is TRUE for ``true`` and FALSE for
``false`` (any case), else UNKNOWN.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from shmq.errors import BadExpressionError

TYPE_SQL92 = "SQL92"
MAX_DEPTH = 64  # nesting of parentheses / NOT / unary minus: a hostile text cannot exhaust the stack
MAX_LENGTH = 65_536  # characters of one expression: a filter is a condition, not a data set
INT64_MAX = 2**63 - 1

# truth values (Kleene's logic as small ints: AND is min, OR is max, NOT is 2 - x)
FALSE, UNKNOWN, TRUE = 0, 1, 2

Value = str | int | float | bool | None

_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)", re.ASCII
)


_MAX_INT_DIGITS = 4000


def to_number(s: str) -> int | float | None:
    """A property value as a number (a decimal integer, or a float such as ``2.5`` or ``1e3``);
    None when it is neither (``abc``, ``NaN``, `` 1``): the comparison is then UNKNOWN."""
    if _INT_TEXT.fullmatch(s):
        # past Python's int-from-text limit (4300 digits) the float is exact enough: +-inf
        # compares as such a number would with any literal (which fits 64 bits)
        return int(s) if len(s) <= _MAX_INT_DIGITS else float(s)
    if _FLOAT_TEXT.fullmatch(s):
        return float(s)
    return None


def _is_number(v: Value) -> bool:
    return type(v) is int or type(v) is float


def _numeric(v: Value) -> int | float | None:
    if type(v) is str:
        return to_number(v)
    return v if _is_number(v) else None  # type: ignore[return-value]


def equal(a: Value, b: Value) -> int:
    """``a = b``: strings as strings, a string against a number converted, against a boolean
    by its text (``true``/``false``); NULL or a failed conversion is UNKNOWN."""
    if a is None or b is None:
        return UNKNOWN
    ta, tb = type(a), type(b)
    if ta is tb or (_is_number(a) and _is_number(b)):
        return TRUE if a == b else FALSE
    if ta is str or tb is str:
        s, other = (a, b) if ta is str else (b, a)
        assert isinstance(s, str)
        if type(other) is bool:
            low = s.lower()
            if low not in ("true", "false"):
                return UNKNOWN
            return TRUE if (low == "true") == other else FALSE
        n = to_number(s)
        if n is None:
            return UNKNOWN
        return TRUE if n == other else FALSE
    return UNKNOWN  # a number against a boolean


def order(a: Value, b: Value) -> int | None:
    """-1, 0 or 1 comparing ``a`` and ``b`` as numbers; None (UNKNOWN) if either is not one."""
    x, y = _numeric(a), _numeric(b)
    if x is None or y is None:
        return None
    return (x > y) - (x < y)


# --------------------------------------------------------------------------- the tree


class Node:
    """A node of a parsed expression: value nodes answer ``value``, conditions ``truth``."""

    __slots__ = ()

    def names(self) -> frozenset[str]:
        """The property names this subtree reads."""
        return frozenset().union(*(c.names() for c in self.children()))

    def children(self) -> tuple[Node, ...]:
        return ()

    def value(self, props: Mapping[str, str]) -> Value:
        # the parser puts value nodes only where a value is read, conditions where a truth is
        raise NotImplementedError(f"{type(self).__name__} is a condition, not a value")

    def truth(self, props: Mapping[str, str]) -> int:
        raise NotImplementedError(f"{type(self).__name__} is a value, not a condition")


class Const(Node):
    __slots__ = ("v",)

    def __init__(self, v: Value) -> None:
        self.v = v

    def value(self, props: Mapping[str, str]) -> Value:
        return self.v

    def truth(self, props: Mapping[str, str]) -> int:  # TRUE, FALSE or NULL as a condition
        return UNKNOWN if self.v is None else TRUE if self.v else FALSE


class Prop(Node):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def names(self) -> frozenset[str]:
        return frozenset((self.name,))

    def value(self, props: Mapping[str, str]) -> Value:
        return props.get(self.name)


class _Unary(Node):
    """A node of one operand (unary minus, NOT, a property used as a condition)."""

    __slots__ = ("x",)

    def __init__(self, x: Node) -> None:
        self.x = x

    def children(self) -> tuple[Node, ...]:
        return (self.x,)


class Neg(_Unary):
    __slots__ = ()

    def value(self, props: Mapping[str, str]) -> Value:
        n = _numeric(self.x.value(props))
        return None if n is None else -n


class BoolCast(_Unary):
    """A property used as a condition."""

    __slots__ = ()

    def truth(self, props: Mapping[str, str]) -> int:
        v = self.x.value(props)
        if type(v) is bool:
            return TRUE if v else FALSE
        if type(v) is str:
            low = v.lower()
            return TRUE if low == "true" else FALSE if low == "false" else UNKNOWN
        return UNKNOWN


_ORDER_OPS = {"<": (-1,), "<=": (-1, 0), ">": (1,), ">=": (1, 0)}


class Compare(Node):
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Node, b: Node) -> None:
        self.op, self.a, self.b = op, a, b

    def children(self) -> tuple[Node, ...]:
        return (self.a, self.b)

    def truth(self, props: Mapping[str, str]) -> int:
        a, b = self.a.value(props), self.b.value(props)
        if self.op == "=":
            return equal(a, b)
        if self.op == "<>":
            return 2 - equal(a, b)
        c = order(a, b)
        return UNKNOWN if c is None else TRUE if c in _ORDER_OPS[self.op] else FALSE


class In(Node):
    __slots__ = ("x", "items", "negated")

    def __init__(self, x: Prop, items: frozenset[str], negated: bool) -> None:
        self.x, self.items, self.negated = x, items, negated

    def children(self) -> tuple[Node, ...]:
        return (self.x,)

    def truth(self, props: Mapping[str, str]) -> int:
        v = self.x.value(props)
        if type(v) is not str:
            return UNKNOWN
        return TRUE if (v in self.items) != self.negated else FALSE


class IsNull(Node):
    __slots__ = ("x", "negated")

    def __init__(self, x: Node, negated: bool) -> None:
        self.x, self.negated = x, negated

    def children(self) -> tuple[Node, ...]:
        return (self.x,)

    def truth(self, props: Mapping[str, str]) -> int:
        return TRUE if (self.x.value(props) is None) != self.negated else FALSE


class Match(Node):
    """CONTAINS, STARTSWITH, ENDSWITH (negated: NOT ...)."""

    __slots__ = ("kind", "x", "pattern", "negated")

    def __init__(self, kind: str, x: Node, pattern: str, negated: bool) -> None:
        self.kind, self.x, self.pattern, self.negated = kind, x, pattern, negated

    def children(self) -> tuple[Node, ...]:
        return (self.x,)

    def truth(self, props: Mapping[str, str]) -> int:
        v = self.x.value(props)
        if type(v) is not str:
            return UNKNOWN
        if not self.pattern:
            return FALSE
        if self.kind == "CONTAINS":
            hit = self.pattern in v
        elif self.kind == "STARTSWITH":
            hit = v.startswith(self.pattern)
        else:
            hit = v.endswith(self.pattern)
        return TRUE if hit != self.negated else FALSE


class Not(_Unary):
    __slots__ = ()

    def truth(self, props: Mapping[str, str]) -> int:
        return 2 - self.x.truth(props)


class _Junction(Node):
    """AND / OR over any number of operands, in three-valued logic: the operands' min (AND) or max
    (OR) of FALSE < UNKNOWN < TRUE, stopping at the value that decides (FALSE, TRUE)."""

    __slots__ = ("xs",)
    START = TRUE  # the value of no operands
    DECIDES = FALSE  # the value that decides whatever the other operands are

    def __init__(self, xs: list[Node]) -> None:
        self.xs = xs

    def children(self) -> tuple[Node, ...]:
        return tuple(self.xs)

    def truth(self, props: Mapping[str, str]) -> int:
        t = self.START
        for x in self.xs:
            v = x.truth(props)
            if v == self.DECIDES:
                return v
            if v == UNKNOWN:
                t = UNKNOWN
        return t


class And(_Junction):
    __slots__ = ()


class Or(_Junction):
    __slots__ = ()
    START = FALSE
    DECIDES = TRUE


CONDITIONS = (Compare, In, IsNull, Match, Not, And, Or, BoolCast)


# --------------------------------------------------------------------------- tokens

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)
MATCH_KEYWORDS = ("CONTAINS", "STARTSWITH", "ENDSWITH")
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|--[^\n\r]*|/\*.*?\*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<str>'[^']*+(?:''[^']*+)*+')
  | (?P<qid>"[^"]*+(?:""[^"]*+)*+")
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
""",
    re.VERBOSE | re.DOTALL | re.ASCII,
)


class Token:
    __slots__ = ("kind", "text", "value", "pos")

    def __init__(self, kind: str, text: str, value: object, pos: int) -> None:
        self.kind, self.text, self.value, self.pos = kind, text, value, pos

    def describe(self) -> str:
        if self.kind == "end":
            return "the end of the expression"
        return f"{self.text!r}" if len(self.text) <= 30 else f"{self.text[:27]!r}..."


def _error(text: str, pos: int, expected: str, found: str) -> BadExpressionError:
    """BadExpressionError naming the 1-based column, what was expected and what was found."""
    col = pos + 1
    where = ""
    if "\n" not in text and "\r" not in text and len(text) <= 120:
        where = f"\n    {text}\n    {' ' * pos}^"
    err = BadExpressionError(f"SQL92 expression, column {col}: expected {expected}, found {found}{where}")
    err.column, err.expected = col, expected
    return err


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; literals checked for range.

    Memory is the text's size plus one Token per token: a quoted literal or name is matched by
    possessive runs of non-quote characters, so the regex engine keeps no backtracking state
    per character (the alternation it replaced kept about 240 bytes per character)."""
    if len(text) > MAX_LENGTH:
        raise _error(text, MAX_LENGTH, f"at most {MAX_LENGTH} characters", f"{len(text)} characters")
    out: list[Token] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            c = text[pos]
            what = (
                "a closing ' for the string"
                if c == "'"
                else 'a closing " for the name'
                if c == '"'
                else "a closing */ for the comment"
                if text.startswith("/*", pos)
                else "a token"
            )
            raise _error(text, pos, what, f"{text[pos : pos + 10]!r}")
        kind, s = m.lastgroup, m.group()
        assert kind is not None
        if kind == "ws":
            pos = m.end()
            continue
        value: object = None
        if kind == "int":
            digits = s.rstrip("lL")
            if len(digits) > 19 or int(digits) > INT64_MAX:
                raise _error(text, pos, "an integer within the 64-bit range", f"{s[:30]} (overflow)")
            value = int(digits)
        elif kind == "float":
            f = float(s)
            if f == float("inf"):
                raise _error(text, pos, "a number within the double range", f"{s[:30]} (overflow)")
            value = f
        elif kind == "str":
            value = s[1:-1].replace("''", "'")
        elif kind == "qid":
            value, kind = s[1:-1].replace('""', '"'), "id"
            if not value:
                raise _error(text, pos, "a property name", 'an empty quoted name ""')
        elif kind == "id":
            if s.upper() in KEYWORDS:
                kind, value = "kw", s.upper()
            else:
                value = s
        elif kind == "op":
            value = s
        out.append(Token(kind, s, value, pos))
        pos = m.end()
    out.append(Token("end", "", None, n))
    return out


# --------------------------------------------------------------------------- the parser

_COMPARE_OPS = ("=", "<>", "<", "<=", ">", ">=")
_VALUE_START = "a value (a property, a literal, '-' or '(')"


class _Parser:
    """Recursive descent over the tokens; one method per grammar rule."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, expected: str, tok: Token | None = None) -> BadExpressionError:
        t = tok or self.tok
        return _error(self.text, t.pos, expected, t.describe())

    def at_kw(self, *words: str) -> bool:
        return self.tok.kind == "kw" and self.tok.value in words

    def at_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.value in ops

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def expect_kw(self, word: str) -> None:
        if not self.at_kw(word):
            raise self.fail(word)
        self.i += 1

    def expect_op(self, op: str) -> None:
        if not self.at_op(op):
            raise self.fail(f"{op!r}")
        self.i += 1

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"at most {MAX_DEPTH} levels of nesting (parentheses, NOT, '-')")

    # expression := or
    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise self.fail("a condition")
        node = self.condition()
        if self.tok.kind != "end":
            raise self.fail("an operator, AND, OR or the end of the expression")
        return node

    def condition(self) -> Node:
        start = self.tok
        return self.as_condition(self.or_expr(), start)

    def as_condition(self, node: Node, at: Token | None = None) -> Node:
        """``node`` used where a condition is expected: a property is cast, TRUE/FALSE/NULL stand."""
        if isinstance(node, CONDITIONS):
            return node
        if isinstance(node, Prop):
            return BoolCast(node)
        if isinstance(node, Const) and (node.v is None or type(node.v) is bool):
            return node
        raise self.fail("a condition (a comparison, AND, OR, NOT, ...)", at)

    def or_expr(self) -> Node:
        return self.junction("OR", self.and_expr, Or)

    def and_expr(self) -> Node:
        return self.junction("AND", self.not_expr, And)

    def junction(self, keyword: str, operand: Callable[[], Node], kind: type[_Junction]) -> Node:
        """``operand (keyword operand)*``: one operand as it is, more as conditions joined by ``kind``."""
        start = self.tok
        xs = [operand()]
        while self.at_kw(keyword):
            self.take()
            xs.append(self.as_condition(operand()))
        if len(xs) == 1:
            return xs[0]
        xs[0] = self.as_condition(xs[0], start)
        return kind(xs)

    def not_expr(self) -> Node:
        if self.at_kw("NOT"):
            self.take()
            self.deeper()
            start = self.tok
            node = Not(self.as_condition(self.not_expr(), start))
            self.depth -= 1
            return node
        return self.predicate()

    def predicate(self) -> Node:
        start = self.tok
        left = self.value()
        tok = self.tok
        if tok.kind == "op" and tok.value in _COMPARE_OPS:
            self.take()
            right_tok = self.tok
            right = self.value()
            return self.compare(str(tok.value), left, right, start, right_tok)
        negated = False
        if self.at_kw("NOT"):
            self.take()
            negated = True
            if not self.at_kw("BETWEEN", "IN", *MATCH_KEYWORDS):
                raise self.fail("BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
        if self.at_kw("BETWEEN"):
            return self.between(left, negated, start)
        if self.at_kw("IN"):
            return self.in_list(left, negated, start)
        if self.at_kw(*MATCH_KEYWORDS):
            kind = str(self.take().value)
            self.operand(left, start, "a value")
            return Match(kind, left, self.string(), negated)
        if self.at_kw("IS"):
            self.take()
            neg = False
            if self.at_kw("NOT"):
                self.take()
                neg = True
            self.expect_kw("NULL")
            self.operand(left, start, "a value")
            return IsNull(left, neg)
        return left

    def operand(self, node: Node, tok: Token, expected: str) -> None:
        if isinstance(node, CONDITIONS):
            raise self.fail(f"{expected}, not a condition", tok)

    def number_operand(self, node: Node, tok: Token) -> None:
        """What ``<``, ``>`` and BETWEEN compare: a constant must be a number (RocketMQ's rule)."""
        self.operand(node, tok, "a number or a property")
        if isinstance(node, Const) and not _is_number(node.v):
            raise self.fail(
                "a number or a property (strings, booleans and NULL cannot be compared with <, <=, >, >= or BETWEEN)",
                tok,
            )

    def compare(self, op: str, left: Node, right: Node, ltok: Token, rtok: Token) -> Node:
        if op in ("=", "<>"):
            for node, tok in ((left, ltok), (right, rtok)):
                self.operand(node, tok, "a value")
                if isinstance(node, Const) and node.v is None:
                    raise self.fail("a value (compare with NULL by IS NULL or IS NOT NULL)", tok)
            if (
                isinstance(left, Const)
                and isinstance(right, Const)
                and (type(left.v) is bool) != (type(right.v) is bool)
            ):
                raise self.fail("a value of the same kind (a boolean compares only with a boolean)", rtok)
        else:
            self.number_operand(left, ltok)
            self.number_operand(right, rtok)
        return Compare(op, left, right)

    def between(self, left: Node, negated: bool, start: Token) -> Node:
        self.take()
        self.number_operand(left, start)
        lo_tok = self.tok
        lo = self.value()
        self.number_operand(lo, lo_tok)
        self.expect_kw("AND")
        hi_tok = self.tok
        hi = self.value()
        self.number_operand(hi, hi_tok)
        if isinstance(lo, Const) and isinstance(hi, Const) and lo.v > hi.v:  # type: ignore[operator]
            raise self.fail(f"BETWEEN bounds in order (low <= high): {lo.v} > {hi.v}", hi_tok)
        if negated:
            return Or([Compare("<", left, lo), Compare(">", left, hi)])
        return And([Compare(">=", left, lo), Compare("<=", left, hi)])

    def in_list(self, left: Node, negated: bool, start: Token) -> Node:
        self.take()
        if not isinstance(left, Prop):
            raise self.fail("a property on the left of IN", start)
        self.expect_op("(")
        items = [self.string()]
        while self.at_op(","):
            self.take()
            items.append(self.string())
        self.expect_op(")")
        return In(left, frozenset(items), negated)

    def string(self) -> str:
        if self.tok.kind != "str":
            raise self.fail("a 'string' literal")
        return str(self.take().value)

    def value(self) -> Node:
        tok = self.tok
        if tok.kind == "op" and tok.value in ("+", "-"):
            self.take()
            self.deeper()
            inner_tok = self.tok
            inner = self.value()
            self.depth -= 1
            if isinstance(inner, CONDITIONS) or (isinstance(inner, Const) and not _is_number(inner.v)):
                raise self.fail(f"a number or a property after {tok.value!r}", inner_tok)
            if tok.value == "+":
                return inner
            if isinstance(inner, Const):
                return Const(-inner.v)  # type: ignore[operator]
            return Neg(inner)
        if tok.kind in ("int", "float", "str"):
            self.take()
            return Const(tok.value)  # type: ignore[arg-type]
        if tok.kind == "kw" and tok.value in ("TRUE", "FALSE", "NULL"):
            self.take()
            return Const(None if tok.value == "NULL" else tok.value == "TRUE")
        if tok.kind == "id":
            self.take()
            return Prop(str(tok.value))
        if self.at_op("("):
            self.take()
            self.deeper()
            node = self.or_expr()
            self.expect_op(")")
            self.depth -= 1
            return node
        raise self.fail(_VALUE_START)


def parse(text: str) -> Node:
    """The condition tree of ``text``; BadExpressionError for anything that is not one."""
    if not isinstance(text, str):
        raise BadExpressionError(f"an SQL92 expression must be a str, got {type(text).__name__}")
    return _Parser(text).parse()


class SqlFilter:
    """A parsed SQL92 subscription (``shmq.sql(text)``); ``match`` evaluates it on properties."""

    type = TYPE_SQL92

    def __init__(self, expression: str) -> None:
        self.tree = parse(expression)
        self.expression = expression
        self.names = self.tree.names()

    def truth(self, properties: Mapping[str, str]) -> int:
        """TRUE, FALSE or UNKNOWN (the three-valued result)."""
        return self.tree.truth(properties)

    def match(self, properties: Mapping[str, str]) -> bool:
        return self.tree.truth(properties) == TRUE

    def __repr__(self) -> str:
        return f"shmq.sql({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SqlFilter) and other.expression == self.expression

    def __hash__(self) -> int:
        return hash((TYPE_SQL92, self.expression))


def sql(expression: str) -> SqlFilter:
    """An SQL92 filter for ``subscribe`` / ``pull`` (RocketMQ's ``MessageSelector.bySql``)."""
    return SqlFilter(expression)
