"""The layering of docs/architecture.md ("## Layers") holds for every import of every module
under shmq/, and no module reaches into another module's private names.

The table is the rule: its rows are the layers from the bottom up, and the entries of a row
(a package such as `shmq/client/`, or a module such as `shmq/client/hooks.py`, which then
takes that place instead of its package's) are in order too. A module imports modules of a
lower layer, of its own entry, or of an entry listed before its own in its row. Every import
counts: top-level, inside a function, relative, and under ``if TYPE_CHECKING:``. Each
offence is one line naming the file, the line, the import and the two places.

Private names: ``obj._name`` where ``obj`` is not ``self`` or ``cls`` and ``_name`` is not
defined in the same module (a def, a class, a class attribute, ``__slots__``, an assigned
``self._name`` or ``cls._name``), and ``from m import _name``. Allowed everywhere: the private
package ``shmq._speedups`` (the compiled twins and their switch), dunder names, namedtuple's
``_replace`` / ``_asdict`` / ``_fields`` / ``_make``, ``os._exit``, ``sys._getframe``.

The compiled twins (``shmq/_speedups/*.pyx``) are not Python source and are not read here:
each is its reference module's twin and looks that module's names up by design.

What is left crossing is in the two allow-lists below, each with its reason; an entry that no
longer matches anything fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = (
    "shmq.__version__ lives in shmq/__init__.py, where the build reads it (pyproject's version attr); "
    "imported inside the function, once the package is loaded"
)

# (importing file, entry of the imported module) -> why it is allowed for now
LAYER_ALLOWED: dict[tuple[str, str], str] = {
    ("shmq/broker/admin_status.py", "shmq/__init__.py"): VERSION,
    ("shmq/broker/health.py", "shmq/__init__.py"): VERSION,
}

# (file, private name it touches) -> why it is allowed for now: none left
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {}

PUBLIC_PRIVATES = {"_replace", "_asdict", "_fields", "_make"}  # namedtuple's API
STDLIB_PRIVATES = {("os", "_exit"), ("sys", "_getframe")}


@dataclass(frozen=True)
class Place:
    """Where an entry of the table sits: its layer (row) and its position in that row."""

    layer: int
    position: int
    layer_name: str
    entry: str


def layer_table(text: str) -> dict[str, Place]:
    """The "## Layers" table of architecture.md: each entry (`shmq/...`) and its place."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # after header and rule
    places: dict[str, Place] = {}
    for layer, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        for position, entry in enumerate(re.findall(r"`(shmq/[^`]*)`", cells[1])):
            assert entry not in places, f"{entry} is in the layer table twice"
            places[entry] = Place(layer, position, cells[0], entry)
    return places


def place_of(path: str, places: dict[str, Place]) -> Place | None:
    """The most specific entry holding ``path`` (a module listed itself, else its nearest package)."""
    candidates = [e for e in places if path == e or (e.endswith("/") and path.startswith(e))]
    return places[max(candidates, key=len)] if candidates else None


def module_files() -> dict[str, str]:
    """Every module under shmq/: dotted name -> path relative to the repo."""
    out = {}
    for p in sorted((ROOT / "shmq").rglob("*.py")):
        rel = p.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = str(rel)
    return out


@functools.cache
def nodes_of(text: str) -> list[ast.AST]:
    """Every node of a module's source, parsed and walked once for all the checks."""
    return list(ast.walk(ast.parse(text)))


def type_checking_lines(nodes: list[ast.AST]) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` bodies."""
    lines: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def imports_of(name: str, path: str, nodes: list[ast.AST], modules: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, the import as written, dotted name of the shmq module it reaches) per imported module."""
    out = []
    package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}", a.name) for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                target = f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                if target in modules:
                    out.append((node.lineno, f"from {'.' * node.level}{node.module or ''} import {a.name}", target))
    return out


def layer_offences(places: dict[str, Place], sources: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(file, entry imported, one line) per import that goes up the table.

    ``sources``: dotted module name -> (path, source text)."""
    modules = {name: path for name, (path, _) in sources.items()}
    out = []
    for name, (path, text) in sorted(sources.items()):
        src = place_of(path, places)
        assert src is not None, f"{path} is in no layer of docs/architecture.md's table"
        nodes = nodes_of(text)
        guarded = type_checking_lines(nodes)
        for line, written, target in imports_of(name, path, nodes, modules):
            dst = place_of(modules[target], places)
            assert dst is not None, f"{modules[target]} is in no layer of docs/architecture.md's table"
            if dst.layer < src.layer or (dst.layer == src.layer and dst.position <= src.position):
                continue
            where = "" if line not in guarded else " (under TYPE_CHECKING)"
            if dst.layer > src.layer:
                why = f"{src.layer_name} (`{src.entry}`) imports {dst.layer_name} (`{dst.entry}`), a higher layer"
            else:
                why = f"{src.layer_name}: `{src.entry}` imports `{dst.entry}`, listed after it in its row"
            out.append((path, dst.entry, f"{path}:{line}: {written}{where}: {why}"))
    return sorted(out, key=lambda o: (o[0], int(o[2].split(":")[1])))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(nodes: list[ast.AST]) -> set[str]:
    """Names a module defines for its own objects: defs, classes, class attributes (and
    ``__slots__``), attributes it assigns on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else []
                targets += [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
                for t in targets:
                    if isinstance(t, ast.Name):
                        names.add(t.id)
                    if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(stmt.value, ast.Tuple | ast.List):
                        names.update(e.value for e in stmt.value.elts if isinstance(e, ast.Constant))
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ("self", "cls"):
                        names.add(e.attr)
    return names


def private_offences(path: str, text: str) -> list[tuple[str, str, str]]:
    """(file, private name, one line) per touch of another module's private name."""
    nodes = nodes_of(text)
    own = defined_names(nodes)
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "shmq._speedups" or module.startswith("shmq._speedups."):
                continue
            names = [a.name for a in node.names if _private(a.name) and (module, a.name) != ("shmq", "_speedups")]
            out += [(path, n, f"{path}:{node.lineno}: from {module} import {n}") for n in names]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and (
                owner.id in ("self", "cls") or (owner.id, node.attr) in STDLIB_PRIVATES
            ):
                continue
            if node.attr in own or node.attr in PUBLIC_PRIVATES:
                continue
            out.append((path, node.attr, f"{path}:{node.lineno}: {ast.unparse(node)}"))
    return sorted(out, key=lambda o: int(o[2].split(":")[1]))


def shmq_sources() -> dict[str, tuple[str, str]]:
    return {name: (path, (ROOT / path).read_text()) for name, path in module_files().items()}


def architecture() -> dict[str, Place]:
    return layer_table((ROOT / "docs" / "architecture.md").read_text())


@functools.cache
def found() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The layer offences and the private-name offences of shmq/ as it is (once per run)."""
    sources = shmq_sources()
    privates = [o for path, text in sources.values() for o in private_offences(path, text)]
    return layer_offences(architecture(), sources), privates


def test_every_entry_of_the_layer_table_exists() -> None:
    places = architecture()
    assert len(places) > 20
    assert [e for e in places if not (ROOT / e).exists() or e.endswith("/") != (ROOT / e).is_dir()] == []


def test_every_module_is_in_a_layer() -> None:
    places = architecture()
    assert [path for path in module_files().values() if place_of(path, places) is None] == []


def test_imports_go_down_the_layers() -> None:
    bad = [line for path, entry, line in found()[0] if (path, entry) not in LAYER_ALLOWED]
    assert not bad, "imports up the layers of docs/architecture.md:\n" + "\n".join(bad)


def test_no_module_touches_another_modules_private_names() -> None:
    bad = [line for path, name, line in found()[1] if (path, name) not in PRIVATE_ALLOWED]
    assert not bad, "private names of another module:\n" + "\n".join(bad)


def test_the_allow_lists_name_only_crossings_that_exist() -> None:
    """A crossing fixed leaves the list: the list says what is left, never more."""
    layers, privates = found()
    assert sorted(set(LAYER_ALLOWED) - {(path, entry) for path, entry, _ in layers}) == []
    assert sorted(set(PRIVATE_ALLOWED) - {(path, name) for path, name, _ in privates}) == []


TABLE = """
## Layers

| layer | entries |
|---|---|
| low | `shmq/a/`, `shmq/b.py` |
| high | `shmq/c/`, `shmq/c/d.py`, `shmq/e/` |

## Next
"""


def test_the_checks_catch_what_they_are_for() -> None:
    """The checkers themselves, on made-up modules: each kind of offence is found, the
    allowed forms are not."""
    places = layer_table(TABLE)
    assert place_of("shmq/c/d.py", places) == Place(1, 1, "high", "shmq/c/d.py")
    assert place_of("shmq/c/x/y.py", places) == Place(1, 0, "high", "shmq/c/")
    sources = {
        "shmq.a.m": ("shmq/a/m.py", "def f():\n    from shmq.c import d\n"),
        "shmq.b": (
            "shmq/b.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import shmq.a.m\n    import shmq.e.n\n",
        ),
        "shmq.c": ("shmq/c/__init__.py", "from . import d\nfrom .x import y\n"),
        "shmq.c.d": ("shmq/c/d.py", "from shmq.e import n\nfrom shmq.c.x import y\n"),
        "shmq.c.x.y": ("shmq/c/x/y.py", "from ..d import q\nfrom shmq.b import z\n"),
        "shmq.e.n": ("shmq/e/n.py", "from shmq.c.d import q\n"),
    }
    lines = [line for _, _, line in layer_offences(places, sources)]
    assert lines == [
        "shmq/a/m.py:2: from shmq.c import d: low (`shmq/a/`) imports high (`shmq/c/d.py`), a higher layer",
        "shmq/b.py:4: import shmq.e.n (under TYPE_CHECKING): low (`shmq/b.py`) imports high (`shmq/e/`), "
        "a higher layer",
        "shmq/c/__init__.py:1: from . import d: high: `shmq/c/` imports `shmq/c/d.py`, listed after it in its row",
        "shmq/c/d.py:1: from shmq.e import n: high: `shmq/c/d.py` imports `shmq/e/`, listed after it in its row",
        "shmq/c/x/y.py:1: from ..d import q: high: `shmq/c/` imports `shmq/c/d.py`, listed after it in its row",
    ]
    text = (
        "import os, sys\nfrom shmq._speedups import _put\nfrom shmq import _speedups\nfrom m import _hidden\n"
        "class A:\n    _kind = 1\n    __slots__ = ('_slot',)\n    def __init__(self):\n        self._mine = 1\n"
        "def f(a, b, t):\n    os._exit(0); sys._getframe(); t._replace(x=1); a.__dict__; a._kind; a._slot\n"
        "    a._mine; a._theirs; b.c._deep\n"
    )
    assert [line for _, _, line in private_offences("m.py", text)] == [
        "m.py:4: from m import _hidden",
        "m.py:12: a._theirs",
        "m.py:12: b.c._deep",
    ]
