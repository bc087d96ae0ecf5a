"""Subscription expressions: which messages of a topic a consumer wants.

Only tag expressions exist today ("*", "TagA || TagB"). A consumer holds an `Expression`;
the pull path asks a `TagFilter` for its tag codes to drop mismatches by hash over whole
consume-queue ranges, then re-checks the tag string (hashes collide). Any other expression
type (SQL92 comes later) only has to implement `match(properties)`; the batch decoder
evaluates such expressions record by record.
"""
from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

import numpy as np

from shmq.codec import record as fmt

SUB_ALL = "*"
TAG_SEPARATOR = "||"
TYPE_TAG = "TAG"


@runtime_checkable
class Expression(Protocol):
    """A subscription filter evaluated over a message's properties."""

    type: str

    def match(self, properties: Mapping[str, str]) -> bool: ...


class TagFilter:
    """`*`, empty or None (everything), or tags joined by `||` (RocketMQ's tag syntax)."""

    type = TYPE_TAG

    def __init__(self, expression: str | None = None) -> None:
        text = (expression or "").strip()
        if text in ("", SUB_ALL):
            self.expression = SUB_ALL
            self.tags: frozenset[str] = frozenset()
        else:
            tags = [t.strip() for t in text.split(TAG_SEPARATOR)]
            tags = [t for t in tags if t]
            if not tags:
                raise ValueError(f"tag expression {expression!r} names no tag")
            if SUB_ALL in tags:
                raise ValueError(f"tag expression {expression!r}: '*' cannot be combined with tags")
            self.expression = " || ".join(dict.fromkeys(tags))
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
            return codes == self.codes[0]
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


def as_expression(expression: str | Expression | None) -> Expression:
    """What consumers accept in `subscribe`: a tag string, None, or an Expression object."""
    if expression is None or isinstance(expression, str):
        return TagFilter(expression)
    if isinstance(expression, Expression):
        return expression
    raise TypeError(f"subscription expression must be a str or an Expression, got {type(expression).__name__}")
