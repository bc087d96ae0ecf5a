"""How `shmq ... --help` lays out a long description: refilled to the terminal's width.

argparse's own formatter runs a description together into one paragraph, and its raw one
keeps the source's line breaks, which overflow a terminal narrower than the source (80
columns). ``ParagraphHelpFormatter`` keeps the source's structure (paragraphs, ``  - `` list
items, a line ending with ``:`` before a list) and refills each part to the width.
"""

from __future__ import annotations

import argparse
import textwrap

BULLET = "  - "


def blocks(text: str) -> list[tuple[str, str, str]]:
    """``text`` as (first-line prefix, next-lines prefix, words) blocks; a blank line is ("", "", "")."""
    out: list[tuple[str, str, str]] = []
    joinable = False  # whether the next plain line continues the last block
    for line in textwrap.dedent(text).strip("\n").splitlines():
        if not line.strip():
            out.append(("", "", ""))
            joinable = False
        elif line.startswith(BULLET):
            out.append((BULLET, " " * len(BULLET), line[len(BULLET) :].strip()))
            joinable = True
        elif (joinable and (line.startswith(" ") == out[-1][0].startswith(" "))) or (
            joinable and out[-1][0] == BULLET and line.startswith(" " * len(BULLET))
        ):
            first, rest, words = out[-1]
            out[-1] = (first, rest, f"{words} {line.strip()}")
        else:
            out.append(("", "", line.strip()))
            joinable = True
        if line.rstrip().endswith(":"):
            joinable = False  # a lead-in: what follows is its list
    return out


class ParagraphHelpFormatter(argparse.HelpFormatter):
    """A description's paragraphs and list items refilled to the width (see the module)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = [
            textwrap.fill(
                words, width, initial_indent=indent + first, subsequent_indent=indent + rest, break_on_hyphens=False
            )
            if words
            else ""
            for first, rest, words in blocks(text)
        ]
        return "\n".join(lines) + "\n"
