"""No private name of Faust, mode or aiokafka is used outside agents.faust_patches.

A Faust upgrade may rename or drop anything private; the version check and the contract
tests of the package see that only if every such use lives in it. This reads the source
of every other module (AST): a private name imported from those libraries, or a private
attribute (``x._name``, not ``self``'s or ``cls``'s) read in a module that imports them or
in any module of the worker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIBRARIES = ("faust", "mode", "aiokafka")
PACKAGE = ROOT / "agents" / "faust_patches"


def _sources() -> list[Path]:
    return sorted(p for d in ("agents", "pipeline") for p in (ROOT / d).rglob("*.py")
                  if PACKAGE not in p.parents)


def _from_library(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in LIBRARIES  # type: ignore[union-attr]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(tree: ast.AST, *, worker: bool = False) -> list[str]:
    """The private Faust names ``tree`` uses, as ``line: text``; a module of the worker
    (``worker``) handles Faust's objects whether it imports Faust or not."""
    found: list[str] = []
    imports_library = worker
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _from_library(node.module):
            imports_library = True
            module = node.module or ""
            if any(_private(part) for part in module.split(".")):
                found.append(f"{node.lineno}: from {module}")
            found += [f"{node.lineno}: {module}.{a.name}" for a in node.names
                      if _private(a.name)]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _from_library(a.name):
                    imports_library = True
                    if any(_private(part) for part in a.name.split(".")):
                        found.append(f"{node.lineno}: import {a.name}")
    if imports_library:
        own = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and not (isinstance(node.value, ast.Name)
                             and (node.value.id in {"self", "cls"} or node.value.id in own))):
                found.append(f"{node.lineno}: .{node.attr}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in {"getattr", "setattr", "hasattr"} and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and _private(node.args[1].value)
                  and not (isinstance(node.args[0], ast.Name)
                           and node.args[0].id in {"self", "cls"})):
                found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_faust_name_outside_the_patches(path: Path) -> None:
    worker = (ROOT / "agents") in path.parents
    assert private_uses(ast.parse(path.read_text(), str(path)), worker=worker) == []


def test_the_check_sees_a_private_faust_name() -> None:
    tree = ast.parse("import faust.streams\nfrom faust.streams import _current_event\n"
                     "consumer._thread._ensure_consumer()\n"
                     "getattr(app.producer, '_producer', None)\n")
    assert sorted(private_uses(tree)) == [
        "2: faust.streams._current_event", "3: ._ensure_consumer", "3: ._thread",
        "4: getattr(..., '_producer')"]
