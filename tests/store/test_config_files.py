"""config_files: every way a metadata file's text can be damaged is one ValueError (or a
fallback) for its loader, never an exception it does not expect."""

from __future__ import annotations

import pytest

from shmq.store.config_files import load_json, parse_json, read_json, read_json_file

DEEP = "[" * 200_000  # nested far past the decoder's recursion limit: RecursionError in json.loads
DAMAGED = [DEEP, '{"a": ' * 200_000, "{not json", "\xff\xfe", "1" * 5000]


@pytest.mark.parametrize("text", DAMAGED, ids=["deep-list", "deep-object", "garbage", "not-utf8", "long-number"])
def test_every_damaged_text_is_a_value_error(tmp_path, text):
    """Regression: a deeply nested file raised RecursionError, which loaders did not catch (a
    traceback at start instead of their one-line error)."""
    path = tmp_path / "x.json"
    path.write_bytes(text.encode("latin-1") if text == "\xff\xfe" else text.encode())
    with pytest.raises(ValueError):
        read_json_file(str(path))
    if text != "\xff\xfe":
        with pytest.raises(ValueError):
            parse_json(text)
    assert read_json(str(path), default="dflt") == "dflt"  # the fallback reader skips it
    loaded = load_json(str(path), lambda data: None)
    assert loaded.source is None and len(loaded.problems) == 1 and str(path) in loaded.problems[0]


def test_a_deep_file_falls_back_to_its_backup(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(DEEP)
    (tmp_path / "x.json.bak").write_text('{"ok": 1}')
    assert read_json(str(path)) == {"ok": 1}
    loaded = load_json(str(path), lambda data: None)
    assert loaded.data == {"ok": 1} and "nested too deeply" in loaded.problems[0]


def test_a_deep_queue_table_is_read_as_damaged(tmp_path):
    """The queue table (recovery after a crash) loads through the same reader: damaged, not raised."""
    from shmq.store import queue_table

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "queueMaxOffsets.json").write_text(DEEP)
    table, problems = queue_table.read(str(tmp_path))
    assert table is None and "nested too deeply" in problems[0]
