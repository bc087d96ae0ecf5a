"""Fixtures of the HA tests: ``ha_hosts``, a master and a replica host linked only by TCP (tests/ha/hosts.py)."""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.ha import hosts


@pytest.fixture
def ha_hosts() -> Iterator[tuple[hosts.Host, hosts.Host]]:
    """A fresh (master, replica) pair for the test; skips when hosts cannot be made (not root, no iproute2)."""
    reason = hosts.unavailable()
    if reason:
        pytest.skip(reason)
    with hosts.pair() as pair:
        yield pair
