"""`shmq admin` output rules: --json prints the data, errors are one line and status 1."""
from __future__ import annotations

import argparse
import io
import json

import pytest

from shmq.cli.admin.output import Result, run_command, table
from shmq.errors import BrokerNotFoundError


def _args(run, json_out: bool = False) -> argparse.Namespace:
    return argparse.Namespace(run=run, json=json_out, admin_command="topic", sub_command="list")


def test_json_prints_the_data_alone() -> None:
    out = io.StringIO()
    data = {"topics": [{"name": "T", "queues": 4}]}
    assert run_command(_args(lambda a: Result(data, lambda d: table(None, ["name"], [["T"]])), True), out) == 0
    assert json.loads(out.getvalue()) == data


def test_table_for_people() -> None:
    out = io.StringIO()
    run_command(_args(lambda a: Result({}, lambda d: table("Topics", ["name", "queues"], [["Orders", 8]],
                                                           right=["queues"]))), out)
    text = out.getvalue()
    assert "Topics" in text and "Orders" in text and "8" in text


def test_error_is_one_line_and_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    def fail(a: argparse.Namespace) -> Result:
        raise BrokerNotFoundError("no broker named 'x' is running (no state segment)")
    assert run_command(_args(fail), io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == "shmq admin topic list: error: no broker named 'x' is running (no state segment)\n"


def test_a_failed_check_sets_the_status() -> None:
    assert run_command(_args(lambda a: Result({"ok": False}, status=1)), io.StringIO()) == 1
