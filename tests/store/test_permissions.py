"""The store is as private as the IPC: folders 0700 and files 0600 whatever the umask, or
02750/0640 and the `shmGroup` group, checked on the modes and by reading as another user."""

from __future__ import annotations

import grp
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from shmq.errors import StoreLockedError
from shmq.store import config_files
from shmq.store.message_store import MessageStore

from .conftest import SMALL, put_one, record

PYTHON = shutil.which("python3", path="/usr/bin:/bin")  # one another user may run (not the venv under /root)


@pytest.fixture(params=[0o000, 0o077], ids=["umask000", "umask077"])
def any_umask(request: pytest.FixtureRequest) -> Iterator[None]:
    """A permissive and a strict umask: whatever the store gets, it chose itself."""
    old = os.umask(request.param)
    yield
    os.umask(old)


@pytest.fixture
def shared_tmp() -> Iterator[str]:
    """A folder other users may enter (pytest's tmp_path is under a 0700 folder, which would hide
    the store from them whatever its own modes)."""
    d = tempfile.mkdtemp(prefix="shmq-perm-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _fill(store_dir: str, config: dict) -> list[str]:
    """A store with records in two topics, an index, a checkpoint and a config file; its paths."""
    s = MessageStore(store_dir, config).start()
    try:
        for topic in ("A", "B"):
            for i in range(3):
                put_one(s, topic, i % 2, record(topic, b"secret body", keys=f"k{i}"))
        config_files.write_json(os.path.join(store_dir, "config", "topics.json"), {"topicConfigTable": {}})
        running = _tree(store_dir)  # lock and abort exist while it runs
    finally:
        s.shutdown()
    return sorted(set(running) | set(_tree(store_dir)))


def _tree(root: str) -> list[str]:
    out = [root]
    for d, dirs, files in os.walk(root):
        out += [os.path.join(d, n) for n in dirs + files]
    return out


def _modes(paths: list[str]) -> dict[str, tuple[bool, int]]:
    return {p: (os.path.isdir(p), stat.S_IMODE(os.stat(p).st_mode)) for p in paths if os.path.exists(p)}


def test_store_folders_0700_and_files_0600_whatever_the_umask(tmp_path, any_umask):
    paths = _fill(str(tmp_path / "store"), dict(SMALL))
    modes = _modes(paths)
    names = {os.path.relpath(p, tmp_path / "store") for p in modes}
    for expected in ("commitlog", "consumequeue/A/0", "index", "config/topics.json", "checkpoint", "lock"):
        assert expected in names
    wrong = {p: oct(m) for p, (is_dir, m) in modes.items() if m != (0o700 if is_dir else 0o600)}
    assert wrong == {}


def test_existing_store_root_is_closed_at_start(tmp_path):
    """A store folder made by someone else (or an older shmq) with 0755 is tightened at start."""
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    MessageStore(str(root), dict(SMALL)).start().shutdown()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_shm_group_store_is_group_readable(tmp_path, any_umask):
    gid = os.getgid()
    config = dict(SMALL, shmGroup=str(gid))
    paths = _fill(str(tmp_path / "store"), config)
    modes = _modes(paths)
    lock = os.path.join(str(tmp_path / "store"), "lock")  # never group-readable: a reader could hold its flock
    wrong = {
        p: oct(m) for p, (is_dir, m) in modes.items() if m != (0o2750 if is_dir else 0o600 if p == lock else 0o640)
    }
    assert wrong == {}
    assert {os.stat(p).st_gid for p in modes} == {gid}


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def users() -> Iterator[tuple[str, str, str]]:
    """(group, member, outsider): a fresh group, a user in it and a user not in it; removed after."""
    if os.geteuid() != 0:
        pytest.skip("creating users for the cross-user check needs root")
    if PYTHON is None or not all(shutil.which(t) for t in ("useradd", "groupadd", "userdel", "groupdel", "runuser")):
        pytest.skip("needs useradd, groupadd, userdel, groupdel, runuser and /usr/bin/python3")
    tag = uuid.uuid4().hex[:8]
    group, member, outsider = f"shmqg{tag}", f"shmqm{tag}", f"shmqo{tag}"
    made: list[list[str]] = []
    try:
        _run(["groupadd", group])
        made.append(["groupdel", group])
        _run(["useradd", "-M", "-N", "-G", group, member])
        made.append(["userdel", member])
        _run(["useradd", "-M", "-N", outsider])
        made.append(["userdel", outsider])
        yield group, member, outsider
    finally:
        for cmd in reversed(made):
            subprocess.run(cmd, capture_output=True)


def _read_as(user: str, path: str) -> str:
    """What happens when `user` opens `path` to read: "ok" or the exception's class name."""
    code = (
        f"try:\n    open({path!r}, 'rb').read(1)\n    print('ok')\nexcept OSError as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run(["runuser", "-u", user, "--", PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()


def _segment(store_dir: str) -> str:
    d = os.path.join(store_dir, "commitlog")
    return os.path.join(d, sorted(os.listdir(d))[0])


def test_other_users_cannot_read_the_commitlog(shared_tmp, users):
    _group, member, outsider = users
    store_dir = os.path.join(shared_tmp, "store")
    _fill(store_dir, dict(SMALL))
    segment = _segment(store_dir)
    assert _read_as(outsider, segment) == "PermissionError"
    assert _read_as(member, segment) == "PermissionError"
    assert _read_as(outsider, os.path.join(store_dir, "config", "topics.json")) == "PermissionError"


def test_shm_group_members_read_the_store_and_no_one_else(shared_tmp, users):
    group, member, outsider = users
    store_dir = os.path.join(shared_tmp, "store")
    _fill(store_dir, dict(SMALL, shmGroup=group))
    assert os.stat(store_dir).st_gid == grp.getgrnam(group).gr_gid
    cq_dir = os.path.join(store_dir, "consumequeue", "A", "0")
    for path in (
        _segment(store_dir),
        os.path.join(cq_dir, sorted(os.listdir(cq_dir))[0]),
        os.path.join(store_dir, "config", "topics.json"),
    ):
        assert _read_as(member, path) == "ok"
        assert _read_as(outsider, path) == "PermissionError"


_HOLD = (
    "import fcntl, sys, time\n"
    "try:\n    f = open(sys.argv[1], 'rb')\n    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
    "except OSError as e:\n    print(type(e).__name__, flush=True)\n    sys.exit()\n"
    "print('held', flush=True)\ntime.sleep(60)\n"
)


@contextmanager
def _holding(user: str, path: str) -> Iterator[str]:
    """`user` tries to hold a shared flock on `path` (read-only, as any reader could); yields
    "held" or the error it got, and ends the holder afterwards."""
    p = subprocess.Popen(
        ["runuser", "-u", user, "--", PYTHON, "-c", _HOLD, path],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield p.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # runuser is reaped; wait for its python child too
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)


def test_shm_group_member_cannot_hold_the_store_lock(shared_tmp, users):
    """A reader of a shmGroup store may read its files, but not hold its lock and so keep every
    broker from starting: the lock file stays 0600."""
    group, member, _outsider = users
    store_dir = os.path.join(shared_tmp, "store")
    config = dict(SMALL, shmGroup=group)
    MessageStore(store_dir, config).start().shutdown()
    with _holding(member, os.path.join(store_dir, "lock")) as got:
        assert got == "PermissionError"
        MessageStore(store_dir, config).start().shutdown()


def test_a_foreign_lock_holder_is_named(shared_tmp, users):
    """A holder that opened the lock while an older shmq left it readable keeps it: the error says who."""
    _group, _member, outsider = users
    store_dir = os.path.join(shared_tmp, "store")
    MessageStore(store_dir, dict(SMALL)).start().shutdown()
    lock = os.path.join(store_dir, "lock")
    os.chmod(store_dir, 0o755)
    os.chmod(lock, 0o644)
    with _holding(outsider, lock) as got:
        assert got == "held"
        with pytest.raises(StoreLockedError, match=rf"lock held by pid \d+ of uid \d+ \({outsider}\)"):
            MessageStore(store_dir, dict(SMALL)).start()
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    MessageStore(store_dir, dict(SMALL)).start().shutdown()


def test_folders_named_relative_to_the_working_directory_are_made_private(tmp_path, monkeypatch):
    """Regression: a folder named relative to the working directory ("commitlog", as a
    CommitLog used on its own takes it) made make_dirs recurse on "" until RecursionError."""
    from shmq.store import files

    monkeypatch.chdir(tmp_path)
    files.make_dirs(os.path.join("commitlog", "sub"))
    assert stat.S_IMODE(os.stat(tmp_path / "commitlog" / "sub").st_mode) == 0o700
