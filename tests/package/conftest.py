"""The sdist and wheel under test, and the runtime dependencies a fresh venv installs them with.

Building the wheel compiles every compiled path (minutes on a loaded machine), so it happens
once per session, and not at all when ``make wheel`` left a build in dist/ that is newer than
every source file (the same rule make uses). The dependencies are downloaded once per session
into a wheelhouse, so each venv installs offline (``--no-index``) and no test builds anything
from source behind our back.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture: the demo starts a broker)

ROOT = Path(__file__).resolve().parents[2]
# what pip says when no registry answers (the build's isolated env and `pip download` need one)
_UNREACHABLE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
)


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


def _sources() -> Iterator[Path]:
    """The files a build is made from: a change to any of them makes a build stale."""
    yield from (ROOT / name for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"))
    for p in (ROOT / "shmq").rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".c", ".pyc"):
            yield p


def _current(dist_dir: Path) -> Dists | None:
    """The sdist and manylinux wheel in ``dist_dir`` if both are newer than every source."""
    sdists, wheels = list(dist_dir.glob("shmq-*.tar.gz")), list(dist_dir.glob("shmq-*manylinux*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        return None
    newest_source = max(p.stat().st_mtime for p in _sources())
    if min(sdists[0].stat().st_mtime, wheels[0].stat().st_mtime) < newest_source:
        return None
    return Dists(sdists[0], wheels[0])


def _skip_if_unreachable(out: subprocess.CompletedProcess[str], what: str) -> None:
    text = out.stdout + out.stderr
    if any(s in text for s in _UNREACHABLE):
        pytest.skip(f"{what}: pip reaches no registry ({text.strip().splitlines()[-1]})")


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dists]:
    """``make wheel``'s build in dist/ when current, else one built the same way (tools/build_wheel.py)
    in a temporary directory, removed at the end of the session."""
    found = _current(ROOT / "dist")
    if found is not None:
        yield found
        return
    for module in ("build", "auditwheel"):
        pytest.importorskip(module, reason="building the wheel needs the wheel extra (make .venv/.installed-wheel)")
    out_dir = tmp_path_factory.mktemp("dist")
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_wheel.py"), str(out_dir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    if out.returncode:
        _skip_if_unreachable(out, "cannot build the wheel")
        pytest.fail(f"tools/build_wheel.py failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    built = _current(out_dir)
    assert built is not None, f"tools/build_wheel.py made {sorted(p.name for p in out_dir.iterdir())}"
    yield built
    shutil.rmtree(out_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def wheelhouse(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """shmq's sdist and wheel, and binary wheels of its dependencies and of two extras (dev, wheel);
    removed at the end of the session."""
    house = tmp_path_factory.mktemp("wheelhouse")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            str(house),
            f"{dists.wheel}[dev,wheel]",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode:
        _skip_if_unreachable(out, "cannot download shmq's dependencies")
        pytest.fail(f"pip download failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    shutil.copy(dists.sdist, house)  # so pip could pick it if it meant to rebuild shmq
    yield house
    shutil.rmtree(house, ignore_errors=True)
