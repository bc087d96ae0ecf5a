"""`shmq admin offset reset` without a broker: timestamps as people type them, rows, argument rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shmq.cli.admin.offset import parse_timestamp, reset_rows
from shmq.cli.main import main


def test_timestamp_epoch_ms_or_iso_8601() -> None:
    assert parse_timestamp("1764000000000") == 1764000000000
    assert parse_timestamp("2026-11-24T05:00:00Z") == int(datetime(2026, 11, 24, 5, tzinfo=UTC).timestamp() * 1000)
    assert parse_timestamp("2026-11-24 05:00:00+01:00") == int(datetime(2026, 11, 24, 4, tzinfo=UTC).timestamp() * 1000)
    assert parse_timestamp("2026-11-24T05:00:00") == int(datetime(2026, 11, 24, 5).timestamp() * 1000)  # local
    with pytest.raises(ValueError, match="epoch milliseconds or an ISO 8601"):
        parse_timestamp("yesterday")


def test_rows_by_queue_id() -> None:
    assert reset_rows({"10": 5, "2": 7, "0": 1}) == [(0, 1), (2, 7), (10, 5)]


@pytest.mark.parametrize("extra", [[], ["--to", "first", "--offset", "3"], ["--to", "middle"]])
def test_exactly_one_of_timestamp_offset_to(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["admin", "offset", "reset", "--group", "cg", "--topic", "T", *extra])
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err
