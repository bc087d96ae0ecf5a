"""A small tmpfs or loop-mounted ext4 for disk-full tests (root only; skipped otherwise)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

MiB = 1 << 20


@contextlib.contextmanager
def small_disk(kind: str) -> Iterator[str]:
    """A 48 MiB tmpfs or an 80 MB ext4 image mounted on a fresh folder; unmounted and removed after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mnt = tempfile.mkdtemp(prefix="shmq-disk-")
    image = None
    try:
        if kind == "tmpfs":
            cmd = ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mnt]
        else:
            fd, image = tempfile.mkstemp(prefix="shmq-ext4-", suffix=".img")
            os.ftruncate(fd, 80 * 1000 * 1000)
            os.close(fd)
            if subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], capture_output=True).returncode:
                pytest.skip("mkfs.ext4 failed")
            cmd = ["mount", "-o", "loop", image, mnt]
        if subprocess.run(cmd, capture_output=True).returncode:
            pytest.skip(f"cannot mount a {kind} here")
        try:
            yield mnt
        finally:
            if subprocess.run(["umount", mnt], capture_output=True).returncode:
                subprocess.run(["umount", "-l", mnt], capture_output=True)
    finally:
        os.rmdir(mnt)
        if image is not None:
            os.unlink(image)


def fill(mnt: str, leave: int) -> str:
    """Take the disk's free space but ``leave`` bytes (0: to the last block) with an unrelated
    file; returns its path."""
    path = os.path.join(mnt, "filler")
    st = os.statvfs(mnt)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = max(os.fstat(fd).st_size + st.f_bavail * st.f_frsize - max(leave, MiB), 4096)
        os.posix_fallocate(fd, 0, size)
        step = MiB
        while not leave and step >= 4096:  # file system metadata takes some: go on until refused
            try:
                os.posix_fallocate(fd, 0, size + step)
                size += step
            except OSError:
                step //= 2
    finally:
        os.close(fd)
    return path
