"""The docs site builds with `mkdocs build --strict` (broken links, anchors and docstrings fail
it), every page of the nav is built, and the configuration reference lists every key the code
accepts or refuses."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

mkdocs = pytest.importorskip("mkdocs", reason="mkdocs is not installed (the docs extra: make docs installs it)")
yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of mkdocs) is not installed")


def _nav_pages(nav: Any) -> list[str]:
    """Every .md file the nav names, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def _built_path(site: pathlib.Path, page: str) -> pathlib.Path:
    """Where mkdocs writes a page with directory URLs: a.md -> a/index.html, index.md -> index.html."""
    stem = page[: -len(".md")]
    if stem == "index" or stem.endswith("/index"):
        return site / (stem + ".html")
    return site / stem / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_every_nav_page_is_built(site: pathlib.Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    assert len(pages) > 20
    missing = [p for p in pages if not _built_path(site, p).is_file()]
    assert missing == []
    # no page of docs/ is left out of the nav
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert [p for p in on_disk if p not in pages] == []


def test_configuration_reference_lists_every_key(site: pathlib.Path) -> None:
    from shmq.config import NOT_SUPPORTED, BrokerConfig, camel

    html = _built_path(site, "configuration.md").read_text()
    keys = [camel(f.name) for f in dataclasses.fields(BrokerConfig)] + list(NOT_SUPPORTED)
    assert [k for k in keys if f"<code>{k}</code>" not in html] == []
    assert "config-keys" not in html  # the mark was replaced by the table


def test_api_reference_covers_the_public_api() -> None:
    """Every name of shmq.__all__ (and shmq.aio's, shmq.spark's) has its `::: name` on an API page."""
    import shmq
    import shmq.aio

    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    names = [f"shmq.{n}" for n in shmq.__all__] + [f"shmq.aio.{n}" for n in shmq.aio.__all__]
    names.append("shmq.spark.ShmqDataSource")
    assert [n for n in names if f"::: {n}\n" not in text] == []


def test_user_pages_describe_the_project_as_it_is() -> None:
    """No issue numbers, references to files outside the repo, or paths of a developer's machine
    in the guide (history goes to CHANGES.md). BENCHMARKS.md is a record of runs and is left out."""
    import re

    banned = re.compile(r"\bissue[ -]\d+|DESIGN\.md|OPERATIONS\.md|/work/|/tmp/scratch")
    hits = [
        f"{p.name}: {m.group(0)}"
        for p in sorted((ROOT / "docs").rglob("*.md"))
        if p.name != "BENCHMARKS.md"
        for m in banned.finditer(p.read_text())
    ]
    assert hits == []
