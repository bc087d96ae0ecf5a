import json
import os
import threading

import pytest

from shmq.client.consumer.offset_store import LocalFileOffsetStore, OffsetTable, default_offset_dir


def test_table_update_read_remove():
    t = OffsetTable()
    assert t.read("T", 0) == -1
    assert t.update("T", 0, 10)
    assert not t.update("T", 0, 10)
    assert not t.update("T", 0, 5, increase_only=True)
    assert t.read("T", 0) == 10
    assert t.update("T", 0, 5)  # a reset (e.g. consume from a timestamp) may go back
    assert t.read("T", 0) == 5
    t.remove("T", 0)
    assert t.read("T", 0) == -1 and len(t) == 0
    with pytest.raises(ValueError):
        t.update("T", 1, -1)


def test_take_dirty_returns_changes_once():
    t = OffsetTable()
    t.update("T", 0, 1)
    t.update("T", 1, 2)
    t.update("T", 0, 3)
    assert t.take_dirty() == {("T", 0): 3, ("T", 1): 2}
    assert t.take_dirty() == {}
    t.update("T", 1, 2)
    assert t.take_dirty() == {}
    assert t.snapshot() == {("T", 0): 3, ("T", 1): 2}


def test_increase_only_under_threads():
    t = OffsetTable()

    def worker(offsets):
        for o in offsets:
            t.update("T", 0, o, increase_only=True)

    threads = [threading.Thread(target=worker, args=(range(i, 5000, 4),)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.read("T", 0) == 4999


def test_local_file_round_trip(tmp_path):
    s = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    s.load()
    assert len(s) == 0
    s.update("Orders", 0, 42)
    s.update("Orders", 3, 7)
    s.update("Other", 1, 1)
    s.persist()
    with open(s.path) as f:
        assert json.load(f) == {
            "group": "bg",
            "instance": "i1",
            "offsets": {"Orders": {"0": 42, "3": 7}, "Other": {"1": 1}},
        }
    again = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    again.load()
    assert again.snapshot() == s.snapshot()
    assert again.take_dirty() == {}


def test_persist_writes_only_changes(tmp_path):
    s = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    s.persist()
    assert not os.path.exists(s.path)
    s.update("T", 0, 1)
    s.persist()
    mtime = os.stat(s.path).st_mtime_ns
    s.persist()
    assert os.stat(s.path).st_mtime_ns == mtime


@pytest.mark.parametrize("damage", ["{ torn", "[" * 200_000], ids=["torn", "nested-too-deep"])
def test_backup_is_used_when_the_file_is_damaged(tmp_path, damage):
    """Regression (nested): a file nested past the JSON decoder's limit raised RecursionError."""
    s = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    s.update("T", 0, 1)
    s.persist()
    s.update("T", 0, 2)
    s.persist()
    with open(s.path, "w") as f:
        f.write(damage)
    again = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    again.load()
    assert again.read("T", 0) == 1


def test_default_location_and_names(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    s = LocalFileOffsetStore("grp", "inst", broker="b1")
    assert s.path == os.path.join(str(tmp_path), ".shmq", "offsets", "b1", "inst", "grp.json")
    assert default_offset_dir("b1") == os.path.dirname(os.path.dirname(s.path))
    for bad in ("", "../x", "a/b"):
        with pytest.raises(ValueError):
            LocalFileOffsetStore(bad, "i1", directory=str(tmp_path))
        with pytest.raises(ValueError):
            LocalFileOffsetStore("grp", bad, directory=str(tmp_path))


def test_instances_of_one_group_have_their_own_files(tmp_path):
    a = LocalFileOffsetStore("bg", "i1", directory=str(tmp_path))
    b = LocalFileOffsetStore("bg", "i2", directory=str(tmp_path))
    assert a.path != b.path
    a.update("T", 0, 5)
    a.persist()
    b.load()
    assert b.read("T", 0) == -1


def test_concurrent_writers_never_collide_on_a_temp_name(tmp_path):
    """Regression (issue 9 A2): writers of one path shared `<path>.tmp`; the demo printed
    `[Errno 2] ... demo-broadcast.json.tmp` when one renamed it away under the other."""
    stores = [LocalFileOffsetStore("bg", "same", directory=str(tmp_path)) for _ in range(4)]
    errors: list[BaseException] = []

    def write(s: LocalFileOffsetStore, base: int) -> None:
        try:
            for i in range(150):
                s.update("T", 0, base + i)
                s.persist()
        except BaseException as e:  # noqa: BLE001 (the assertion below reports it)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, k * 1000)) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(os.listdir(os.path.dirname(stores[0].path))) == ["bg.json", "bg.json.bak"]  # no temp left


def test_delete_removes_the_file_and_its_folder(tmp_path):
    s = LocalFileOffsetStore("bg", "gone", directory=str(tmp_path))
    s.update("T", 0, 1)
    s.persist()
    s.update("T", 0, 2)
    s.persist()
    s.delete()
    assert os.listdir(tmp_path) == []


def test_delete_leaves_no_empty_folder_in_the_default_place(tmp_path, monkeypatch):
    """The last member's delete removes ``~/.shmq/offsets/<broker>`` and up once empty; a
    folder still holding another member's file stays."""
    monkeypatch.setenv("HOME", str(tmp_path))
    a, b = LocalFileOffsetStore("bg", "i1", broker="b1"), LocalFileOffsetStore("bg", "i2", broker="b1")
    for s in (a, b):
        s.update("T", 0, 1)
        s.persist()
    a.delete()
    assert os.listdir(default_offset_dir("b1")) == ["i2"]
    b.delete()
    assert os.listdir(tmp_path) == []


def test_delete_keeps_the_directory_the_user_gave(tmp_path):
    given = tmp_path / "mine"
    s = LocalFileOffsetStore("bg", "i1", directory=str(given))
    s.update("T", 0, 1)
    s.persist()
    s.delete()
    assert os.listdir(given) == []
