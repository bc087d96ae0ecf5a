"""Subscription expressions: which messages of a topic a consumer wants.

Tag expressions ("*", "TagA || TagB") are strings; SQL92 filters are ``shmq.sql(text)``
objects (``shmq.filter.sql``). A consumer holds an `Expression`; the pull path asks a
`TagFilter` for its tag codes to drop mismatches by hash over whole consume-queue ranges, then
re-checks the tag string (hashes collide). Any other expression type only has to implement
`match(properties)`; the batch decoder evaluates an SQL92 filter over columns
(``shmq.filter.sql_batch``) and any other one record by record. A plain callable becomes a
``FunctionFilter`` (shmq.filter.function), evaluated on decoded messages after the pull.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from shmq.codec import record as fmt
from shmq.errors import BadExpressionError
from shmq.filter.function import FunctionFilter
from shmq.model.message_ext import MessageExt

SUB_ALL = "*"
TAG_SEPARATOR = "||"
TYPE_TAG = "TAG"


_SQL_WORDS = re.compile(r"\b(AND|OR|NOT|BETWEEN|IN|IS|NULL|TRUE|FALSE)\b", re.IGNORECASE)
_SQL_CHARS = frozenset("=<>()'\"!")


def parse_tags(text: str) -> list[str]:
    """The tags of a tag expression (RocketMQ's syntax: tags separated by ``||``), each once.

    Stricter than RocketMQ, which would take ``TagA ||`` or ``TagA | TagB`` and then match
    nothing or the wrong thing: an empty tag, a single bar, whitespace inside a tag, ``*``
    among tags and anything that looks like SQL92 raise ``BadExpressionError`` here, at
    ``subscribe``, instead of a consumer that silently never receives a message."""
    pieces = [t.strip() for t in text.split(TAG_SEPARATOR)]
    if any(c in _SQL_CHARS for c in text) or (len(pieces) == 1 and _SQL_WORDS.search(text) and " " in text):
        raise BadExpressionError(
            f"subscription expression {text!r} looks like SQL92: a string is a tag "
            f"expression ('TagA || TagB' or '*'); for SQL92 pass shmq.sql({text!r})"
        )
    for t in pieces:
        if not t:
            raise BadExpressionError(f"tag expression {text!r} has an empty tag: write tags as 'TagA || TagB'")
        if "|" in t:
            raise BadExpressionError(f"tag expression {text!r}: tags are separated by '||', not '|'")
        if any(c.isspace() for c in t):
            raise BadExpressionError(f"tag expression {text!r}: tag {t!r} contains whitespace; separate tags with '||'")
        if t == SUB_ALL:
            raise BadExpressionError(f"tag expression {text!r}: '*' cannot be combined with tags")
    return list(dict.fromkeys(pieces))


@runtime_checkable
class Expression(Protocol):
    """A subscription filter evaluated over a message's properties."""

    type: str

    def match(self, properties: Mapping[str, str]) -> bool: ...


class TagFilter:
    """`*`, empty or None (everything, as in RocketMQ), or tags joined by `||` (see ``parse_tags``)."""

    type = TYPE_TAG

    def __init__(self, expression: str | None = None) -> None:
        text = (expression or "").strip()
        if text in ("", SUB_ALL):
            self.expression = SUB_ALL
            self.tags: frozenset[str] = frozenset()
        else:
            tags = parse_tags(text)
            self.expression = " || ".join(tags)
            self.tags = frozenset(tags)
        self.codes = np.array(sorted({fmt.tags_code(t) for t in self.tags}), dtype=np.int64)

    @property
    def is_all(self) -> bool:
        return not self.tags

    def matches_codes(self, entries: np.ndarray) -> np.ndarray:
        """Bool mask of consume-queue entries (or a tags_code array) whose tag hash may match."""
        codes = entries["tags_code"] if entries.dtype.names else entries
        if self.is_all:
            return np.ones(len(codes), dtype=bool)
        if len(self.codes) == 1:
            answer: np.ndarray = codes == self.codes[0]
            return answer
        return np.isin(codes, self.codes)

    def exact(self, tags: str | None) -> bool:
        """The exact check after a hash match."""
        return self.is_all or tags in self.tags

    def match(self, properties: Mapping[str, str]) -> bool:
        return self.exact(properties.get(fmt.PROPERTY_TAGS))

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TagFilter) and other.tags == self.tags

    def __hash__(self) -> int:
        return hash(self.tags)


# what a consumer holds per subscribed topic: an Expression, or a predicate it evaluates on decoded messages
Subscription = Expression | FunctionFilter


def subscription_arg(expression: Subscription) -> str | dict[str, str]:
    """How a consumer names its subscription to the broker at join: SQL92 as ``{"type": "SQL92",
    "expression": text}`` (the broker checks it and keeps it for the filter bitmap), a tag
    expression or any other (consumer-side) expression as a string, shown in the group listing
    (a predicate shows "*": the broker filters nothing for it)."""
    if expression.type == "SQL92":
        return {"type": "SQL92", "expression": str(getattr(expression, "expression", ""))}
    return str(getattr(expression, "expression", repr(expression)))


def as_expression(
    expression: str | Expression | FunctionFilter | Callable[[MessageExt], object] | None,
) -> Subscription:
    """What consumers accept in `subscribe`: a tag string, None, an Expression object
    (``shmq.sql(...)``; a string is never taken for SQL92, as RocketMQ's ``MessageSelector``
    makes the type explicit), or a plain predicate ``fn(msg: MessageExt) -> bool`` (a
    ``FunctionFilter``, see shmq.filter.function)."""
    if expression is None or isinstance(expression, str):
        return TagFilter(expression)
    if isinstance(expression, (Expression, FunctionFilter)):
        return expression
    if callable(expression):
        return FunctionFilter(expression)
    raise BadExpressionError(
        f"subscription expression must be a str, an Expression or a callable "
        f"fn(msg) -> bool, got {type(expression).__name__}"
    )
