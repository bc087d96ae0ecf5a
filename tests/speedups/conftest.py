"""Differential tests: each compiled function against the pure-Python reference it replaces.

They skip when the extension is not built, except where ``SHMQ_REQUIRE_EXTENSIONS=1`` (set by
``make test``, so CI cannot pass while silently testing only the Python paths).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from shmq import _speedups


def compiled_or_skip(module: str, name: str) -> Any:
    fn = _speedups.compiled(module, name)
    if fn is None:
        if os.environ.get("SHMQ_REQUIRE_EXTENSIONS") == "1":
            pytest.fail(f"shmq._speedups.{module}.{name} is not built but SHMQ_REQUIRE_EXTENSIONS=1")
        pytest.skip(f"shmq._speedups.{module} is not built (no C compiler at install?)")
    return fn
