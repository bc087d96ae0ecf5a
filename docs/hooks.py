"""MkDocs hooks of the docs site (mkdocs.yml `hooks:`).

The configuration reference is rendered at build time from the code's own tables
(`BrokerConfig`'s fields, `shmq.config_keys.KEY_DOCS`, `shmq.config.NOT_SUPPORTED`), so the
page lists exactly the keys this checkout accepts: a page that says `<!-- config-keys -->` or
`<!-- config-refused -->` gets the table in its place.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Any

# the checkout this file belongs to, before any installed shmq
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
config = importlib.import_module("shmq.config")
config_keys = importlib.import_module("shmq.config_keys")

KEYS_MARK = "<!-- config-keys -->"
REFUSED_MARK = "<!-- config-refused -->"


def _default(value: Any) -> str:
    """A default as a broker.conf would spell it; None is a key left unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" or " " in value else f"`{value}`"
    return f"`{value}`"


def config_keys_table() -> str:
    """Every field of BrokerConfig, in declaration order, as a Markdown table."""
    spelled = {field: key for key, field in config.ALIASES.items()}
    rows = ["| key (broker.conf / TOML) | type | default | unit | what it does | read by |",
            "|---|---|---|---|---|---|"]
    for f in dataclasses.fields(config.BrokerConfig):
        doc = config_keys.KEY_DOCS[f.name]
        name = f"`{config.camel(f.name)}`<br>`{f.name}`"
        if f.name in spelled:
            name += f"<br>`{spelled[f.name]}`"
        kind = str(f.type).replace(" | None", "")
        meaning = doc.meaning.replace("|", "\\|")
        rows.append(f"| {name} | {kind} | {_default(f.default)} | {doc.unit} | {meaning} | {doc.read_by} |")
    return "\n".join(rows) + "\n"


def config_refused_table() -> str:
    """RocketMQ keys shmq refuses by name, with the reason it gives."""
    rows = ["| key | refused because |", "|---|---|"]
    rows += [f"| `{key}` | {reason} |" for key, reason in config.NOT_SUPPORTED.items()]
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Put the generated tables where a page marks them."""
    if KEYS_MARK in markdown:
        markdown = markdown.replace(KEYS_MARK, config_keys_table())
    if REFUSED_MARK in markdown:
        markdown = markdown.replace(REFUSED_MARK, config_refused_table())
    return markdown
