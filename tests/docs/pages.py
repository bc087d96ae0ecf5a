"""The snippet convention of the user docs: which pages there are, what their code blocks are,
and which `shmq ...` command lines they show.

Pages are README.md and every docs/**/*.md, found on disk so a new page is tested without
anyone listing it. A page's ```python blocks run in order in one process (see run_page.py);
HTML comments set what a page or a block needs:

- ``<!-- snippet: broker -->`` anywhere: the runner starts a broker for the page;
- ``<!-- snippet: spark -->`` anywhere: the page needs Java and pyspark (skipped without);
- ``<!-- snippet: skip (why) -->`` on the line before a fence: that block is not run.

Lines of ```sh / ```console blocks that start with ``shmq `` (after a ``$ `` prompt) are
parsed by the command's own argparse parser, not run; in a ```console block with prompts, only
the lines after a prompt are commands (the others are their output).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = ("sh", "console", "shell", "bash")
_FENCE = re.compile(r"^( {0,3})```\s*([\w+-]*)[^\n]*$")
_MARKER = re.compile(r"<!--\s*snippet:\s*(\w+)")
_OPERATOR = re.compile(r"^[();<>|&]+$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language tag, the page line of its first code line, its code,
    the heading it is under and whether the line before its fence says ``snippet: skip``."""

    lang: str
    line: int
    code: str
    heading: str
    skip: bool


@dataclass(frozen=True)
class Page:
    path: str  # relative to the repository root, as the test id
    blocks: tuple[Block, ...]
    markers: frozenset[str]  # page markers outside code blocks: "broker", "spark"

    @property
    def python(self) -> list[Block]:
        return [b for b in self.blocks if b.lang == "python" and not b.skip]


def page_paths(root: Path = ROOT) -> list[str]:
    """README.md and docs/**/*.md, relative to ``root``, sorted."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [str(p.relative_to(root)) for p in found if p.is_file()]


def parse_page(path: str, root: Path = ROOT) -> Page:
    """The page's code blocks and its page markers (comments inside code blocks do not count)."""
    lines = (root / path).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    markers: set[str] = set()
    heading = ""
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            if lines[i].startswith("#"):
                heading = lines[i].lstrip("#").strip()
            markers.update(k for k in _MARKER.findall(lines[i]) if k != "skip")
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2).lower()
        skip = i > 0 and "skip" in _MARKER.findall(lines[i - 1])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        code = "\n".join(
            line[indent:] if line.startswith(" " * indent) else line.lstrip(" ") for line in lines[i + 1 : end]
        )  # a fence indented in a list item
        blocks.append(Block(lang, i + 2, code + "\n", heading, skip))
        i = end + 1
    return Page(path, tuple(blocks), frozenset(markers))


def shmq_command_lines(page: Page) -> list[tuple[int, str]]:
    """(page line, command) of every line of the page's shell blocks that runs ``shmq``;
    a trailing backslash continues a command on the next line."""
    found = []
    for block in page.blocks:
        if block.lang not in SHELL_LANGS:
            continue
        pending, start = "", 0
        lines = block.code.splitlines()
        # a console block is a session: with prompts, the lines without one are output
        prompted = block.lang == "console" and any(line.strip().startswith("$ ") for line in lines)
        for n, line in enumerate(lines):
            text = line.strip()
            if not pending:
                if prompted and not text.startswith("$ "):
                    continue
                text, start = text.removeprefix("$ "), block.line + n
            pending += text
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            if pending.startswith("shmq "):
                found.append((start, pending))
            pending = ""
    return found


def command_argv(command: str) -> list[str]:
    """The arguments of ``shmq`` in a shell line: comments dropped, cut at the first pipe,
    redirection or command separator."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    argv = []
    for token in lexer:
        if _OPERATOR.match(token):
            break
        argv.append(token)
    return argv[1:]


def parse_error(command: str) -> str | None:
    """Why ``shmq``'s parser refuses ``command`` (its own error line), None if it parses.
    --help and --version print and exit 0: they parse."""
    from shmq.cli.main import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            build_parser().parse_args(command_argv(command))
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit status {e.code}"
    return None
