"""The compiled hot paths, and the one place that decides whether they are used.

Each ``_*.pyx`` module here is a compiled twin of pure-Python functions in shmq (the codec,
the store's put path, the rings). The pure-Python code stays the reference: docs/FORMAT.md
describes it, and tests/speedups/ check every compiled function against it (same bytes
written, same values read, same errors for bad input).

``pick(module, name, fallback)`` is how a pure-Python module offers its compiled twin: the
compiled function when its module is built and loadable, else ``fallback``. Set
``SHMQ_NO_EXTENSIONS=1`` to force every Python path (for debugging, or to compare). ``status()``
tells what is in use (``shmq --version`` prints it).
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any, TypeVar

log = logging.getLogger(__name__)

DISABLED = os.environ.get("SHMQ_NO_EXTENSIONS", "") not in ("", "0")
"""Set from ``SHMQ_NO_EXTENSIONS`` at import: the choice is made once per process."""

_loaded: dict[str, ModuleType | None] = {}
_picked: dict[str, bool] = {}
_references: dict[str, Any] = {}
F = TypeVar("F")


def load(module: str) -> ModuleType | None:
    """The compiled module ``shmq._speedups.<module>``; None when disabled or not built."""
    if module not in _loaded:
        found: ModuleType | None = None
        if not DISABLED:
            try:
                found = importlib.import_module(f"{__name__}.{module}")
            except ImportError as e:
                log.debug("compiled module %s not available (%s): using the Python paths", module, e)
        _loaded[module] = found
    return _loaded[module]


def pick(module: str, name: str, fallback: F) -> F:
    """``module.name`` compiled if available, else ``fallback`` (the pure-Python reference)."""
    compiled = load(module)
    fn: Any = getattr(compiled, name, None) if compiled is not None else None
    _picked[f"{module}.{name}"] = fn is not None
    _references[f"{module}.{name}"] = fallback
    return fn if fn is not None else fallback


def reference(module: str, name: str) -> Any:
    """The pure-Python function ``pick(module, name, ...)`` was given (what the tests compare with)."""
    return _references[f"{module}.{name}"]


def compiled(module: str, name: str) -> Any:
    """The compiled ``module.name`` even if ``SHMQ_NO_EXTENSIONS`` is set (tests); None if not built."""
    try:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
    except ImportError:
        return None


def status() -> dict[str, Any]:
    """Whether the compiled paths are in use: ``enabled`` (not disabled and built), the
    functions picked (name -> compiled?), and why not when not."""
    built = any(m is not None for m in _loaded.values())
    reason = "SHMQ_NO_EXTENSIONS is set" if DISABLED else ("" if built else "not built (no C compiler at install?)")
    return {"enabled": built and not DISABLED, "reason": reason, "functions": dict(sorted(_picked.items()))}
