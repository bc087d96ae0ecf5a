"""Short reprs for the objects a user prints: a message's body cut to its first bytes, a list
cut to its first items, offsets as a range. A pulled batch holds commitlog mappings of 100+ MB
and a batch send thousands of ids: their full repr floods a terminal."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shmq.model.system_topics import is_system_topic

BODY_PREVIEW = 60  # bytes of a body a repr shows
LIST_PREVIEW = 3  # items of a list a repr shows


class Raw(str):
    """A value `fields_repr` shows as it is (already formatted), not through repr()."""


def body_repr(body: Any) -> Raw:
    """`body` as its repr if short, else its first BODY_PREVIEW bytes, an ellipsis and its size."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        view = memoryview(body)
        if view.nbytes <= BODY_PREVIEW:
            return Raw(repr(view.tobytes()))
        head = view.cast("B")[:BODY_PREVIEW].tobytes() if view.c_contiguous else view.tobytes()[:BODY_PREVIEW]
        return Raw(f"{head!r}… ({view.nbytes} bytes)")
    text = repr(body)
    return Raw(text if len(text) <= BODY_PREVIEW else f"{text[:BODY_PREVIEW]}… ({len(text)} characters)")


def items_repr(items: Sequence[Any], unit: str) -> Raw:
    """`items` in full if at most LIST_PREVIEW, else the first ones and how many in all."""
    if len(items) <= LIST_PREVIEW:
        return Raw(repr(list(items)))
    return Raw("[" + ", ".join(repr(x) for x in items[:LIST_PREVIEW]) + f", …] ({len(items)} {unit})")


def span(first: int, last: int) -> Raw:
    """An inclusive range of offsets: `5` or `5..9`."""
    return Raw(str(first) if first == last else f"{first}..{last}")


def fields_repr(name: str, parts: Iterable[tuple[str, Any]]) -> str:
    """`name(key=value, ...)` of the parts whose value is not None: a Raw value as it is,
    anything else through repr()."""
    return (
        f"{name}("
        + ", ".join(f"{k}={v}" if isinstance(v, Raw) else f"{k}={v!r}" for k, v in parts if v is not None)
        + ")"
    )


def client_repr(kind: str, group: str, broker: str, running: bool, topics: Iterable[str] = ()) -> str:
    """A producer's or consumer's repr: its group, broker, whether it runs, the topics it
    subscribed (the retry and other system topics it adds itself left out)."""
    shown = sorted(t for t in topics if not is_system_topic(t))
    return fields_repr(
        kind,
        (
            ("group", group),
            ("broker", broker),
            ("topics", shown or None),
            ("state", Raw("running" if running else "stopped")),
        ),
    )
