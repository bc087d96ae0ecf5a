"""The one place that creates store folders and files: as private as the IPC objects.

Shared-memory segments and semaphores are 0600; the store holds the same message bodies, so
its folders are 0700 and its files 0600 whatever the umask. With ``shmGroup`` the store root
becomes 02750 and owned by that group: the kernel gives everything created below a setgid
folder the folder's group, and a folder or file created in a group-readable setgid folder is
made 02750 or 0640 here, so consumers of that group (who map the files read-only) can read
them and nobody else can. Nothing is looked up per write: the mode is decided once per file,
from the folder it is created in.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import stat

from shmq.errors import ForeignOwnerError, StoreLockedError

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600
GROUP_DIR, GROUP_FILE = 0o2750, 0o640  # setgid: new entries inherit the folder's group


def _group_readable(directory: str) -> bool:
    """True if ``directory`` was made for a group (setgid, group may list and enter it)."""
    mode = os.stat(directory).st_mode
    return bool(mode & stat.S_ISGID) and mode & 0o050 == 0o050


def prepare_root(store_dir: str, gid: int | None) -> None:
    """Create the store root if missing and set its owner group and mode (also of an existing root).

    An existing root is tightened too: a store first written by an older shmq (0755 folder,
    0644 files) is closed to other users by its root alone. Files created before ``shmGroup``
    was set stay 0600; `chmod -R g+rX` and `chgrp -R` open them to the group.
    """
    parent = os.path.dirname(store_dir)
    if parent:
        os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(store_dir, PRIVATE_DIR)
    except FileExistsError:
        pass
    _check_owner(f"store folder {store_dir}", os.stat(store_dir).st_uid)
    if gid is not None and os.stat(store_dir).st_gid != gid:
        try:
            os.chown(store_dir, -1, gid)
        except PermissionError:
            raise PermissionError(
                f"cannot give store {store_dir} to group {gid} (shmGroup): the broker's "
                "user must be a member of that group"
            ) from None
    want = GROUP_DIR if gid is not None else PRIVATE_DIR
    if stat.S_IMODE(os.stat(store_dir).st_mode) != want:
        os.chmod(store_dir, want)


def make_dirs(path: str) -> None:
    """``os.makedirs`` for folders inside the store: each new one as private as its parent allows."""
    path = os.path.abspath(path)  # a relative name's parents end in "", which would never be a folder
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    make_dirs(parent)
    try:
        os.mkdir(path, PRIVATE_DIR)
    except FileExistsError:
        return
    os.chmod(path, GROUP_DIR if _group_readable(parent) else PRIVATE_DIR)  # mkdir's mode is cut by the umask


def open_file(path: str, flags: int = os.O_RDWR) -> tuple[int, bool]:
    """Open ``path`` with ``flags``, creating it (0600, or 0640 in a group folder) if missing.

    Returns the descriptor and whether this call created the file. An existing file keeps
    its mode: it may belong to a reader's expectations set up by the operator.
    """
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return os.open(path, flags), False
    try:
        os.fchmod(fd, GROUP_FILE if _group_readable(os.path.dirname(path) or ".") else PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd, True


def _describe_uid(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _check_owner(what: str, uid: int) -> None:
    """``ForeignOwnerError`` unless ``what`` belongs to this process's user: whoever owns a store's
    folder or lock file can change its modes, hold its lock or replace its files."""
    me = os.geteuid()
    if uid != me:
        raise ForeignOwnerError(
            f"{what} belongs to {_describe_uid(uid)}, not to the broker's user "
            f"({_describe_uid(me)}); give it to that user (chown) or use another store folder"
        )


def open_lock(path: str) -> int:
    """Open (creating if missing) the store's lock file: ours and 0600 whatever the folder.

    Whoever can open the lock file can hold ``flock`` on it, even read-only and in shared
    mode, and so keep every broker from starting: it is never group-readable (not even in a
    ``shmGroup`` store), a symlink is not followed, and a lock file another user owns is refused.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_owner(f"store lock file {path}", os.fstat(fd).st_uid)
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_holders(fd: int) -> list[tuple[int, int]]:
    """(pid, uid) of the processes holding a ``flock`` on the file of ``fd``, from /proc/locks.

    The pid is the one that took the lock; a holder that passed its descriptor on (fork) may
    be another process. Empty if it cannot be told (no /proc, the holder already gone).
    """
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != inode:
                    continue
                pid = int(fields[4])
                try:
                    out.append((pid, os.stat(f"/proc/{pid}").st_uid))
                except FileNotFoundError:
                    continue
    except OSError:
        return []
    return out


def describe_lock_holders(fd: int) -> str:
    """`` by pid 123 of uid 1001 (alice)``, or an empty string when the holder is unknown."""
    holders = lock_holders(fd)
    if not holders:
        return ""
    return " by " + ", ".join(f"pid {pid} of {_describe_uid(uid)}" for pid, uid in holders)


def lock_store(store_dir: str) -> int:
    """Take the store's lock (one broker per store): the held descriptor, or StoreLockedError
    naming the holder. The pid written into the file is for people; the kernel's lock is what
    counts (and a full disk must not stop a start over the pid)."""
    fd = open_lock(os.path.join(store_dir, "lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = describe_lock_holders(fd)
        os.close(fd)
        raise StoreLockedError(f"store {store_dir} is already open by another broker (lock held{holders})") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as e:
        logging.getLogger(__name__).warning("could not write the pid into the store's lock file: %s", e)
    return fd


def unlock_store(fd: int) -> None:
    """Release a lock taken by ``lock_store`` (nothing if ``fd`` is -1)."""
    if fd >= 0:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
