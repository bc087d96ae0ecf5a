"""EpochFile: config/epochs.json written atomically, validated on load, master epochs opened."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shmq.errors import MetadataError
from shmq.ha.protocol import Epoch
from shmq.store.epochs import EpochFile


def test_fresh_store_gets_epoch_one(tmp_path):
    f = EpochFile(str(tmp_path))
    assert f.entries == []
    e = f.begin_master_epoch(0)
    assert (e.epoch, e.start_offset, len(e.id)) == (1, 0, 16)
    assert EpochFile(str(tmp_path)).entries == [e]
    assert os.stat(f.path).st_mode & 0o777 == 0o600


def test_restarts_append_or_replace(tmp_path):
    f = EpochFile(str(tmp_path))
    first = f.begin_master_epoch(0)
    second = f.begin_master_epoch(5000)
    assert (second.epoch, second.start_offset) == (2, 5000)
    third = f.begin_master_epoch(5000)  # nothing written in epoch 2: replaced, number still rises
    assert (third.epoch, third.start_offset) == (3, 5000) and third.id != second.id
    assert f.entries == [first, third]
    # a promoted replica that adopted an epoch its master began past what reached it: dropped
    fourth = f.begin_master_epoch(100)
    assert (fourth.epoch, fourth.start_offset) == (4, 100)
    assert f.entries == [first, fourth]


def test_save_is_atomic_and_checked(tmp_path):
    f = EpochFile(str(tmp_path))
    entries = [Epoch(1, 0, b"a" * 16), Epoch(4, 100, b"b" * 16)]
    f.save(entries)
    assert f.entries == entries
    assert not os.path.exists(f.path + ".tmp")
    with pytest.raises(ValueError, match="out of order"):
        f.save([Epoch(2, 0, b"a" * 16), Epoch(2, 10, b"b" * 16)])
    assert f.entries == entries  # the refused list was never written


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not valid JSON"),
        ("[" * 200_000, "nested too deeply"),  # was a RecursionError traceback
        ('{"epochs": ' * 200_000, "nested too deeply"),
        ('{"epochs": 3}', "epochs"),
        ("[1, 2]", "epochs"),
        ('{"epochs": [{"epoch": 1, "startOffset": 0}]}', "keys"),
        ('{"epochs": [{"epoch": 0, "startOffset": 0, "id": "' + "00" * 16 + '"}]}', "out of range"),
        ('{"epochs": [{"epoch": 1, "startOffset": 0, "id": "xyz"}]}', "out of range"),
        (
            '{"epochs": [{"epoch": 2, "startOffset": 9, "id": "' + "00" * 16 + '"}, '
            '{"epoch": 1, "startOffset": 10, "id": "' + "11" * 16 + '"}]}',
            "out of order",
        ),
    ],
)
def test_garbage_is_a_clear_error(tmp_path, text, why):
    f = EpochFile(str(tmp_path))
    os.makedirs(os.path.dirname(f.path))
    with open(f.path, "w") as fh:
        fh.write(text)
    with pytest.raises(MetadataError, match=why) as err:
        f.entries  # noqa: B018 - reading the property raises
    assert f.path in str(err.value)
    with pytest.raises(MetadataError):
        f.begin_master_epoch(0)  # never taken for "no history"
    assert Path(f.path).read_text() == text


def test_json_shape(tmp_path):
    f = EpochFile(str(tmp_path))
    e = f.begin_master_epoch(0)
    with open(f.path) as fh:
        assert json.load(fh) == {"epochs": [{"epoch": 1, "startOffset": 0, "id": e.id.hex()}]}


def test_an_epoch_that_cannot_be_written_holds_writes_back_until_it_is(tmp_path):
    """A master starting on a full disk still starts (reads go on), but no record is written in
    an epoch the history does not name: puts are refused as DiskFullError until it is written."""
    from shmq.errors import DiskFullError
    from shmq.store.epochs import open_master_epoch

    (tmp_path / "config").write_text("not a folder: every write below it fails like a full disk")
    pending = open_master_epoch(str(tmp_path), 700)
    assert pending is not None
    with pytest.raises(DiskFullError, match="new epoch cannot be written"):
        pending.before_put(None)
    (tmp_path / "config").unlink()
    (tmp_path / "config").mkdir()
    pending.before_put(None)
    assert pending.done
    assert [(e.epoch, e.start_offset) for e in EpochFile(str(tmp_path)).entries] == [(1, 700)]
    assert open_master_epoch(str(tmp_path), 900) is None
