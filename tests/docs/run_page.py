"""Runs one page's python blocks in order in this process, like a notebook: later blocks see
the names of earlier ones. Argument: a JSON file of [page, [[line, code], ...]].

Each block is compiled under the page's name with its page line numbers, so a traceback points
into the page. Before each block a marker line goes to stdout and stderr, so the runner can
tell which block printed what.
"""

from __future__ import annotations

import builtins
import json
import sys

MARKER = "\x1esnippet-block "


def main(spec_path: str) -> None:
    with open(spec_path, encoding="utf-8") as f:
        page, blocks = json.load(f)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for index, (line, code) in enumerate(blocks):
        for stream in (sys.stdout, sys.stderr):
            print(f"{MARKER}{index}", file=stream, flush=True)
        exec(compile("\n" * (line - 1) + code, page, "exec"), namespace)
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    del sys.path[0]  # this directory: a snippet's imports must not find the test helpers
    main(sys.argv[1])
