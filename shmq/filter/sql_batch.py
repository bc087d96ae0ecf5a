"""SQL92 filters over a batch of records at once (the pull path and the broker's bitmap).

The scalar path decodes every property of every record into a dict and walks the tree once
per record. Here each property the filter names is found once per record in the encoded
properties (a few ``bytes.rfind`` calls, no dict), the values of a property are
dictionary-encoded (a batch holds few distinct values of a property: a region, a type, a
price), and each subtree that reads a single property is evaluated once per distinct value
by the scalar evaluator, then spread over the records by one numpy gather. ``AND``, ``OR`` and
``NOT`` combine uint8 truth arrays (Kleene's logic: min, max, 2 - x). A subtree reading two
properties or more (``a = b``) is evaluated record by record. The results are the scalar
evaluator's by construction (and checked against it by the tests); only the cost differs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shmq.codec import record as fmt
from shmq.filter.sql import TRUE, And, Node, Not, Or, SqlFilter

_SEP = fmt.PROPERTY_SEPARATOR.encode()
_NV = fmt.NAME_VALUE_SEPARATOR.encode()


def property_value(raw: bytes, name: bytes) -> str | None:
    """The value ``fmt.decode_properties(raw)`` gives ``name`` (the last item whose key it is;
    an item without a value separator has the value ""), without decoding the rest."""
    if not raw:
        return None
    buf = _SEP + raw
    head = _SEP + name
    i = buf.rfind(head + _NV)
    j = buf.rfind(head + _SEP)
    e = len(buf) - len(head) if buf.endswith(head) else -1
    if i < 0 and j < 0 and e < 0:
        return None
    if i > j and i > e:
        start = i + len(head) + 1
        end = buf.find(_SEP, start)
        return buf[start : end if end >= 0 else len(buf)].decode("utf-8", "replace")
    return ""


class Batch:
    """The properties of ``raws`` (encoded, one per record) as columns, made when a filter asks."""

    def __init__(self, raws: Sequence[bytes]) -> None:
        self.raws = raws
        self.n = len(raws)
        self._columns: dict[str, list[str | None]] = {}
        self._codes: dict[str, tuple[np.ndarray, list[str | None]]] = {}

    def column(self, name: str) -> list[str | None]:
        col = self._columns.get(name)
        if col is None:
            if fmt.NAME_VALUE_SEPARATOR in name or fmt.PROPERTY_SEPARATOR in name:
                col = [None] * self.n  # no decoded key holds a separator
            elif "\ufffd" in name:  # only a decode can tell which invalid bytes a name matches
                col = [fmt.decode_properties(r).get(name) for r in self.raws]
            else:
                key = name.encode("utf-8")
                col = [property_value(r, key) for r in self.raws]
            self._columns[name] = col
        return col

    def codes(self, name: str) -> tuple[np.ndarray, list[str | None]]:
        """Per record the number of its value of ``name``, and the distinct values in that order."""
        got = self._codes.get(name)
        if got is None:
            index: dict[str | None, int] = {}
            codes = np.fromiter((index.setdefault(v, len(index)) for v in self.column(name)), np.int64, self.n)
            got = self._codes[name] = (codes, list(index))
        return got

    def truth(self, node: Node) -> np.ndarray:
        """Per record the truth (FALSE, UNKNOWN, TRUE as 0, 1, 2) of condition ``node``."""
        names = node.names()
        if not names:
            return np.full(self.n, node.truth({}), np.uint8)
        if len(names) == 1:
            (name,) = names
            codes, values = self.codes(name)
            table = np.fromiter((node.truth({} if v is None else {name: v}) for v in values), np.uint8, len(values))
            answer: np.ndarray = table[codes]
            return answer
        if isinstance(node, Not):
            return 2 - self.truth(node.x)
        if isinstance(node, (And, Or)):
            # later operands only on the records the earlier ones left open (not FALSE for AND,
            # not TRUE for OR): a selective first condition spares reading the other properties
            is_and = isinstance(node, And)
            combine, decided = (np.minimum, 0) if is_and else (np.maximum, 2)
            out = self.truth(node.xs[0])
            for x in node.xs[1:]:
                open_rows = np.flatnonzero(out != decided)
                if len(open_rows) == self.n:
                    out = combine(out, self.truth(x))
                elif len(open_rows):
                    raws = self.raws
                    out[open_rows] = combine(out[open_rows], Batch([raws[i] for i in open_rows.tolist()]).truth(x))
            return out
        cols = [(name, self.column(name)) for name in sorted(names)]
        return np.fromiter(
            (node.truth({k: v for k, c in cols if (v := c[i]) is not None}) for i in range(self.n)), np.uint8, self.n
        )

    def match(self, f: SqlFilter) -> np.ndarray:
        """Bool per record: whether ``f`` matches it."""
        answer: np.ndarray = self.truth(f.tree) == TRUE
        return answer


def match_batch(f: SqlFilter, raws: Sequence[bytes]) -> np.ndarray:
    return Batch(raws).match(f)
