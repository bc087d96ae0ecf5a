"""Every exception shmq defines is a shmq.ShmqError exported from shmq, and messages say things once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import shmq
from shmq import errors
from shmq.client.connection import BrokerConnection

# modules that need optional extras or are process entry points run as __main__
_SKIP = re.compile(r"^shmq\.(spark|__main__)")


def _modules() -> list:
    out = []
    for info in pkgutil.walk_packages(shmq.__path__, "shmq."):
        if _SKIP.match(info.name):
            continue
        out.append(importlib.import_module(info.name))
    return out


def _exception_classes() -> list[type]:
    found = {}
    for module in _modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("shmq"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return sorted(found.values(), key=lambda c: c.__qualname__)


def test_every_exception_class_of_shmq_is_a_shmq_error():
    """Regression (issue 9 A6): BrokerError, SendTimeoutError etc. lived in their modules and
    CorruptRecordError was a bare ValueError."""
    classes = _exception_classes()
    assert len(classes) >= 20
    assert [c.__qualname__ for c in classes if not issubclass(c, shmq.ShmqError)] == []


def test_every_exception_is_defined_in_errors_and_exported():
    """One place for them (only the broker process keeps BrokerRunningError, which no client sees)."""
    elsewhere = [f"{c.__module__}.{c.__qualname__}" for c in _exception_classes() if c.__module__ != "shmq.errors"]
    assert elsewhere == ["shmq.procs.broker.BrokerRunningError"]
    defined = {n for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, BaseException)}
    assert defined <= set(shmq.__all__) and all(getattr(shmq, n) is getattr(errors, n) for n in defined)


def test_missing_broker_error_says_it_once():
    """Regression (issue 9 A6): `no broker named 'nosuch' is serving (no broker named 'nosuch' is
    running (...))`."""
    conn = BrokerConnection("nosuch-test-broker", "producer", "g", 65536, lambda kind, view: None)
    with pytest.raises(errors.BrokerNotFoundError) as e:
        conn.start(0.05)
    text = str(e.value)
    assert text.count("nosuch-test-broker") == 2, text  # the name, and the command that starts it
    assert text.count("no broker named") == 1 and "shmq broker --store DIR --name nosuch-test-broker" in text


def test_a_refusal_reads_as_its_reason_and_keeps_its_code() -> None:
    e = errors.broker_error(13, "delivery time is 10 days from now; the limit is timerMaxDelaySec = 3 days (259200 s)")
    assert str(e) == "delivery time is 10 days from now; the limit is timerMaxDelaySec = 3 days (259200 s)"
    assert (e.code, e.code_name) == (13, "MESSAGE_ILLEGAL")
    full = errors.broker_error(14, "disk full: used 95% of /x, over diskSpaceWarningLevelRatio")
    assert isinstance(full, errors.DiskFullError) and full.code_name == "SERVICE_NOT_AVAILABLE"
    assert not isinstance(errors.broker_error(14, "a replica stores nothing of its own"), errors.DiskFullError)


def test_plain_message_drops_class_names_and_hides_bugs() -> None:
    assert errors.plain_message(ValueError("consumer group 'g' is unknown")) == "consumer group 'g' is unknown"
    assert (
        errors.plain_message(FileNotFoundError(2, "No such file or directory", "/s/x"))
        == "no such file or directory: /s/x"
    )
    assert "a bug" in errors.plain_message(KeyError("topic"))
