"""The snippet convention as the runner reads it, on a made-up page."""

from __future__ import annotations

from pathlib import Path

from tests.docs.pages import command_argv, page_paths, parse_error, parse_page, shmq_command_lines

PAGE = """# Title
<!-- snippet: broker -->

```python
x = 1
```

<!-- snippet: skip (a fragment) -->
```python
print(y)
```

1. In a list:

   ```sh
   $ shmq admin topic list --json | jq .   # a pipe ends the command
   shmq broker --store store \\
       --name orders
   shmq brokr --store store
   make demo
   ```

```text
<!-- snippet: spark -->  (inside a block: not a page marker)
```
"""


def test_blocks_markers_and_skips(tmp_path: Path) -> None:
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "README.md").write_text(PAGE)
    (tmp_path / "docs" / "guide" / "new.md").write_text("new page\n")
    assert page_paths(tmp_path) == ["README.md", "docs/guide/new.md"]
    page = parse_page("README.md", tmp_path)
    assert page.markers == frozenset({"broker"})
    assert [(b.line, b.code) for b in page.python] == [(5, "x = 1\n")]
    assert [b.skip for b in page.blocks if b.lang == "python"] == [False, True]
    assert shmq_command_lines(page) == [
        (16, "shmq admin topic list --json | jq .   # a pipe ends the command"),
        (17, "shmq broker --store store  --name orders"),
        (19, "shmq brokr --store store"),
    ]


def test_command_lines_parse_with_shmqs_own_parser() -> None:
    assert command_argv("shmq admin topic list --json | jq . # x") == ["admin", "topic", "list", "--json"]
    assert parse_error("shmq broker --store store --name orders") is None
    assert parse_error("shmq demo --help") is None and parse_error("shmq --version") is None
    assert "invalid choice: 'brokr'" in (parse_error("shmq brokr --store store") or "")
    assert "the following arguments are required: --store" in (parse_error("shmq broker") or "")
