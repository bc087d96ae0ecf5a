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

import os
import stat

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
    if gid is not None and os.stat(store_dir).st_gid != gid:
        try:
            os.chown(store_dir, -1, gid)
        except PermissionError:
            raise PermissionError(f"cannot give store {store_dir} to group {gid} (shmGroup): the broker's "
                                  "user must be a member of that group") from None
    want = GROUP_DIR if gid is not None else PRIVATE_DIR
    if stat.S_IMODE(os.stat(store_dir).st_mode) != want:
        os.chmod(store_dir, want)


def make_dirs(path: str) -> None:
    """``os.makedirs`` for folders inside the store: each new one as private as its parent allows."""
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

