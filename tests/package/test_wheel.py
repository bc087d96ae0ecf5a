"""What `make wheel` makes, installed the way a user installs it: a fresh venv, no compiler.

The wheel must carry the compiled paths (a user's machine need not have gcc or the Python
headers), and adding an extra to an installed shmq, by pip or by make, must install the
extra's requirements only, never rebuild shmq.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import shmq
from tests.package.conftest import ROOT, Dists

# building the wheel (once per session, when dist/ has no current one) takes minutes on a loaded machine
pytestmark = pytest.mark.timeout(1800)

PYX = sorted(p.stem for p in (ROOT / "shmq" / "_speedups").glob("*.pyx"))


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def env(self) -> dict[str, str]:
        """A machine without a compiler: only the venv's bin on PATH, CC and CXX that fail, and
        nothing that would import shmq from the source tree instead of the venv."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(PATH=str(self.root / "bin"), CC="/bin/false", CXX="/bin/false")
        return env

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), check=False, capture_output=True, text=True, timeout=timeout, env=self.env(), cwd=str(self.root)
        )

    def speedups(self) -> dict[str, int]:
        """The compiled modules pip installed, with their modification times (ns)."""
        [site] = (self.root / "lib").glob("python3*/site-packages")
        return {p.name: p.stat().st_mtime_ns for p in (site / "shmq" / "_speedups").glob("*.so")}


@pytest.fixture(scope="module")
def venv(dists: Dists, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """A fresh venv with the wheel installed offline from the wheelhouse, binaries only
    (removed after the module: with numpy and mypy it weighs some 200 MB)."""
    v = Venv(tmp_path_factory.mktemp("fresh") / "venv")
    subprocess.run([sys.executable, "-m", "venv", str(v.root)], check=True, timeout=300)
    out = v.run(
        v.python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "--only-binary=:all:",
        str(dists.wheel),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Building" not in out.stdout + out.stderr
    yield v
    shutil.rmtree(v.root.parent, ignore_errors=True)


def test_the_wheel_has_the_compiled_paths_and_no_build_leftovers(dists: Dists) -> None:
    assert dists.wheel.name.startswith(f"shmq-{shmq.__version__}-cp3")
    assert "manylinux" in dists.wheel.name  # auditwheel repaired it: pip elsewhere trusts the tag
    with zipfile.ZipFile(dists.wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for module in PYX:
        assert any(n.startswith(f"shmq/_speedups/{module}.") and n.endswith(".so") for n in names), module
    assert not [n for n in names if n.endswith(".c")]  # the generated C is the sdist's, ten times the .so
    assert "shmq/py.typed" in names
    for stub in (ROOT / "shmq").rglob("*.pyi"):
        assert stub.relative_to(ROOT).as_posix() in names
    assert "shmq/cli/demo.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Operating System :: POSIX :: Linux" in metadata
    assert "shmq = shmq.cli:main" in entry_points


def test_the_sdist_has_what_the_build_needs(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as t:
        top = f"shmq-{shmq.__version__}/"
        names = {n.removeprefix(top) for n in t.getnames()}
    for needed in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        assert needed in names
    for p in (ROOT / "shmq" / "_speedups").iterdir():
        if p.suffix in (".pyx", ".pxd", ".h"):
            assert p.relative_to(ROOT).as_posix() in names


def test_the_wheel_installs_and_runs_without_a_compiler(venv: Venv, dists: Dists, ipc_tracker) -> None:
    env = venv.env()
    assert shutil.which("gcc", path=env["PATH"]) is None and shutil.which("cc", path=env["PATH"]) is None
    assert venv.run("/bin/sh", "-c", "command -v gcc || command -v cc").returncode != 0
    assert sorted(name.split(".")[0] for name in venv.speedups()) == PYX

    version = venv.run(str(venv.root / "bin" / "shmq"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"shmq {shmq.__version__} (compiled paths: on)"

    store = ipc_tracker.store(str(venv.root.parent / "store"))
    p = subprocess.Popen(
        [
            str(venv.root / "bin" / "shmq"),
            "demo",
            "--producers",
            "1",
            "--messages",
            "200",
            "--orders",
            "4",
            "--steps",
            "3",
            "--timeout",
            "60",
            "--store",
            store,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(venv.root),
    )
    ipc_tracker.names.append(f"demo{p.pid}")  # the demo names its broker after its process
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stdout + stderr
    assert "PASS: every message arrived" in stdout


def test_pip_adds_an_extra_to_the_installed_wheel_without_rebuilding(venv: Venv, wheelhouse: Path) -> None:
    """The wheelhouse offers shmq's sdist too: pip would build it if it meant to reinstall shmq."""
    before = venv.speedups()
    out = venv.run(venv.python, "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse), "shmq[wheel]")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Requirement already satisfied: shmq" in out.stdout
    assert "Building" not in out.stdout + out.stderr
    assert venv.speedups() == before
    assert venv.run(venv.python, "-c", "import build, auditwheel").returncode == 0


def test_make_adds_an_extra_without_reinstalling_shmq(venv: Venv, wheelhouse: Path) -> None:
    """The Makefile's extra stamps (.venv/.installed-spark) install the extra's requirements;
    before, they ran `pip install -e '.[dev,spark]'`, which rebuilt shmq from the tree."""
    before = venv.speedups()
    (venv.root / ".installed").touch()  # `make install` done: the venv has shmq (the wheel's)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS")}
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse), CC="/bin/false")
    out = subprocess.run(
        ["make", "-C", str(ROOT), f"VENV={venv.root}", f"{venv.root}/.installed-dev"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (venv.root / ".installed-dev").exists()
    where = venv.run(venv.python, "-c", "import shmq, pytest, hypothesis; print(shmq.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv.root)), where.stdout  # still the wheel's shmq
    assert venv.speedups() == before
