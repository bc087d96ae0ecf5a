"""Running this interpreter as another user, for tests of what other users of the machine can do.

A throwaway user (``stranger`` fixture, made with useradd and removed with userdel) runs this
very interpreter and source tree with runuser. The interpreter may live under a folder other
users cannot enter (pyenv under /root, 0700): the command then runs in a private mount
namespace where that folder is replaced by an empty tmpfs holding only the interpreter's
prefix, bind-mounted back in place, so every path stays the same and nothing outside the
namespace changes. Needs root; tests skip otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from tests.waiting import wait_for

TOOLS = ("useradd", "userdel", "runuser", "unshare", "mount")


def _hidden_ancestor(path: str) -> str | None:
    """The outermost folder above ``path`` that others may not enter (no o+x), or None."""
    parts = os.path.realpath(path).split(os.sep)
    for i in range(2, len(parts)):
        d = os.sep.join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def _wrapper(user: str, scratch: str) -> list[str]:
    """argv prefix that runs the rest of a command as ``user`` with this interpreter reachable."""
    prefix = os.path.realpath(sys.base_prefix)
    hidden = _hidden_ancestor(os.path.join(prefix, "bin"))
    if hidden is None:
        return ["runuser", "-u", user, "--"]
    script = (
        'set -e; mount --bind "$1" "$2"; mount -t tmpfs -o mode=0755,size=1m tmpfs "$3"; '
        'mkdir -p "$1"; mount --bind "$2" "$1"; shift 3; exec runuser -u "$0" -- "$@"'
    )
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, user, prefix, scratch, hidden]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Stranger:
    """A throwaway user and a folder it owns (0755, under /tmp) for its stores."""

    def __init__(self, name: str, home: str) -> None:
        self.name = name
        self.home = home
        self.uid = int(subprocess.run(["id", "-u", name], check=True, capture_output=True, text=True).stdout)
        self._scratch = tempfile.mkdtemp(prefix="shmq-bind-", dir="/tmp")
        self._procs: list[subprocess.Popen] = []

    def popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen:
        """Start ``argv`` as this user in its own session (``stop`` signals the whole group)."""
        p = subprocess.Popen(
            _wrapper(self.name, self._scratch) + argv,
            cwd=self.home,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )  # type: ignore[call-overload]
        self._procs.append(p)
        return p

    def python(self, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``code`` with this interpreter as this user; its output."""
        p = self.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    @staticmethod
    def stop(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        """Signal ``p``'s process group and wait; SIGKILL it if it does not exit in ``timeout``."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
                p.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        wait_for(lambda: not _group_alive(p.pid), timeout)  # runuser is gone; its children may not be yet
        return p.returncode

    def close(self) -> None:
        for p in self._procs:
            self.stop(p, signal.SIGKILL, timeout=5)
        # the mount namespaces went with their processes; the scratch folder is empty again
        shutil.rmtree(self._scratch, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
def stranger() -> Iterator[Stranger]:
    """Another user of the machine, with its own folder; removed afterwards (also on failure)."""
    if os.geteuid() != 0:
        pytest.skip("running processes as another user needs root (useradd, runuser)")
    if not all(shutil.which(t) for t in TOOLS):
        pytest.skip(f"needs {', '.join(TOOLS)}")
    name = f"shmqs{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-N", name], check=True, capture_output=True)
    s = None
    try:
        home = tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp")
        os.chmod(home, 0o755)
        s = Stranger(name, home)
        os.chown(home, s.uid, -1)
        probe = s.python("import shmq, numpy; print('ok')")
        if probe.stdout.strip() != "ok":
            pytest.skip(f"another user cannot run this interpreter and source tree: {probe.stderr.strip()[-300:]}")
        yield s
    finally:
        if s is not None:
            s.close()
        subprocess.run(["userdel", "-r", name], capture_output=True)
