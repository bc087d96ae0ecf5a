"""What a command family's ``register`` is handed: the object ``add_subparsers()`` returns.

argparse names its class only privately (``argparse._SubParsersAction``); this protocol says the
one thing the families use of it, adding their parser, so that no module names the private one.
"""

from __future__ import annotations

import argparse
from typing import Protocol


class Subcommands(Protocol):
    def add_parser(
        self,
        name: str,
        *,
        help: str | None = ...,  # noqa: A002 - argparse's keyword
        description: str | None = ...,
        formatter_class: type[argparse.HelpFormatter] = ...,
    ) -> argparse.ArgumentParser: ...
