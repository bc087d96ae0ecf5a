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
    run_command(
        _args(lambda a: Result({}, lambda d: table("Topics", ["name", "queues"], [["Orders", 8]], right=["queues"]))),
        out,
    )
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


def test_a_narrow_terminal_leaves_out_optional_columns_and_never_cuts() -> None:
    from rich.console import Console

    msg_id = "7F00000100002A9F0000000000000001"
    t = table(
        "T",
        ["msg_id", "store_time", "body_size"],
        [[msg_id, "2026-12-06T23:17:32.123+00:00", 7]],
        optional=["body_size", "store_time"],
    )
    out = io.StringIO()
    Console(file=out, width=50).print(t)
    text = out.getvalue()
    assert msg_id in text and "store_time" not in text.splitlines()[1] and "…" not in text
    assert "body_size, store_time left out at this width" in text.replace("\n", " ")
    out = io.StringIO()
    Console(file=out, width=20).print(table(None, ["path"], [["/a/very/long/store/path/that/folds"]]))
    assert "…" not in out.getvalue()
    assert (
        "".join(line.strip("│ ") for line in out.getvalue().splitlines()[3:-1]) == "/a/very/long/store/path/that/folds"
    )  # folded, every character kept


def test_a_pipe_gets_every_value_whole_and_markup_as_text() -> None:
    out = io.StringIO()
    long_topic = "T" * 150
    run_command(
        _args(
            lambda a: Result(
                {}, lambda d: table("Topics", ["name", "key"], [[long_topic, "k-[red]x"]]), notes=["[bold]as is"]
            )
        ),
        out,
    )
    assert long_topic in out.getvalue() and "k-[red]x" in out.getvalue() and "[bold]as is" in out.getvalue()
