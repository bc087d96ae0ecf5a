"""JSON files under DIR/config/ (topics, consumer offsets, delay offsets), written atomically.

Write to a temp file, fsync, rename over the old one, fsync the folder: a crash leaves either
the old or the new file, never a torn one. The previous version is kept as `<name>.bak` so a
file damaged by other means can still be read; ``load_json`` says which copy it used and why
the newer one could not be, so a stale fallback is never silent. Every metadata loader decodes
through ``parse_json``/``read_json_file``, so a damaged text is one ValueError whatever the
fault (not UTF-8, not JSON, a number too long, nested too deep), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shmq.store import files


def write_json(path: str, data: Any, durable: bool = True) -> None:
    """Replace ``path`` atomically; the temp file is private like the file it becomes (store.files).
    ``durable`` False skips the fsyncs: the replacement survives the process being killed, not a
    power loss (for progress written often and made durable on an interval)."""
    directory = os.path.dirname(path) or "."
    files.make_dirs(directory)
    tmp = f"{path}.tmp"
    try:
        with os.fdopen(files.open_file(tmp, os.O_WRONLY | os.O_TRUNC)[0], "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except BaseException:  # a full disk: the old file stays, the torn copy goes
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if os.path.exists(path):
        os.replace(path, f"{path}.bak")
    os.replace(tmp, path)
    if not durable:
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, with a text nested deeper than the decoder's recursion limit refused as
    ValueError like any other damage (the decoder raises RecursionError for it, which no
    caller expects from a file: a ``[[[[...`` file was a traceback at broker start)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


def read_json_file(path: str) -> Any:
    """The JSON value in ``path``: ValueError if its content is damaged (UnicodeDecodeError is
    one), OSError as reading raises it (FileNotFoundError: there is none)."""
    with open(path, encoding="utf-8") as f:
        return parse_json(f.read())


@dataclass
class Loaded:
    """What ``load_json`` found: the content of the first readable copy (None: none was), the
    copy it came from, and why each copy before it could not be used (one line per copy)."""

    data: Any = None
    source: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """A copy existed but could not be used: the caller must say loudly what it does instead."""
        return bool(self.problems)


def load_json(path: str, check: Callable[[Any], object]) -> Loaded:
    """``path``, else ``<path>.bak``: the first copy that parses and passes ``check`` (which raises
    ValueError or TypeError saying what is wrong). Unlike ``read_json`` nothing is skipped
    silently: every copy that exists but fails is in ``problems``, so the caller can log it and
    decide whether an older copy is good enough."""
    out = Loaded()
    for candidate in (path, f"{path}.bak"):
        try:
            data = read_json_file(candidate)
            check(data)
        except FileNotFoundError:
            continue
        except (ValueError, TypeError) as e:  # what read_json_file or check refused
            out.problems.append(f"{candidate}: {e}")
            continue
        except OSError as e:  # unreadable (EIO, EACCES): as damaged as garbage
            out.problems.append(f"{candidate}: {e.strerror or e}")
            continue
        out.data, out.source = data, candidate
        return out
    return out


def set_aside(path: str) -> str | None:
    """Rename a damaged ``path`` to ``<path>.damaged`` (for inspection) before the repaired table
    is written, so that ``write_json`` does not rotate the damaged copy over a good ``.bak``."""
    if not os.path.exists(path):
        return None
    aside = f"{path}.damaged"
    os.replace(path, aside)
    return aside


def read_json(path: str, default: Any = None) -> Any:
    """The file's content; falls back to `<name>.bak`, then to `default`."""
    for candidate in (path, f"{path}.bak"):
        try:
            return read_json_file(candidate)
        except FileNotFoundError:
            continue
        except ValueError:
            continue
    return default
