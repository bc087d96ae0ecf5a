"""The requirements of one of shmq's extras, read from pyproject.toml.

``make`` installs an extra (``.venv/.installed-spark``) from this list instead of running
``pip install -e '.[dev,spark]'``: that reinstalls shmq itself, which re-runs the Cython
build of every compiled path for nothing. ``python tools/extras.py spark`` prints one
requirement a line (a pip requirements file).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def requirements(extra: str) -> list[str]:
    """The requirement strings of ``extra`` (KeyError when pyproject.toml has no such extra)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["project"]["optional-dependencies"][extra])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/extras.py EXTRA (prints its requirements, one a line)", file=sys.stderr)
        return 2
    try:
        reqs = requirements(argv[0])
    except KeyError:
        data = tomllib.loads((ROOT / "pyproject.toml").read_text())
        known = ", ".join(data["project"]["optional-dependencies"])
        print(f"pyproject.toml has no extra named {argv[0]!r} (its extras: {known})", file=sys.stderr)
        return 2
    print("\n".join(reqs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
