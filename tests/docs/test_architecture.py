"""docs/architecture.md maps every module under shmq/: a new module without its line fails here."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_module_is_on_the_architecture_map() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "shmq"
    modules = sorted(
        str(p.relative_to(package))
        for pattern in ("*.py", "*.pyx")
        for p in package.rglob(pattern)
        if "__pycache__" not in p.parts
    )
    assert len(modules) > 100
    assert [m for m in modules if f"| `{m}` |" not in text] == []


def test_the_map_names_no_module_that_is_gone() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1]
    named = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert [m for m in named if not (ROOT / "shmq" / m).is_file()] == []
