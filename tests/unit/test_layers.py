"""The architecture's arrows, enforced: a wrong import fails the test suite, not a review.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); this runs import-linter
on them, so a layer importing a layer above it, the sink importing the worker, or product
code importing the tooling fails here with import-linter's report of the offending chain.
A second test keeps the worker's modules free of import cycles, which import-linter's
layers do not see inside one package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                               "lint_imports_command()", "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"import contracts broken:\n{proc.stdout}\n{proc.stderr}"


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in modules)
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in edges[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            component = []
            while True:
                n = stack.pop()
                on_stack.discard(n)
                component.append(n)
                if n == m:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return found


def test_the_worker_has_no_import_cycle() -> None:
    """Counts every import, those under ``TYPE_CHECKING`` too: a cycle hidden from the
    interpreter is still two modules that cannot be understood one without the other."""
    graph = grimp.build_graph("agents", cache_dir=None)
    cycles = _cycles(graph, "agents")
    details = [
        ", ".join(c) + ": " + "; ".join(
            f"{d['importer']}:{d['line_number']} imports {d['imported']}"
            for a in c for b in c if a != b
            for d in graph.get_import_details(importer=a, imported=b))
        for c in cycles
    ]
    assert not cycles, "import cycles in agents/:\n" + "\n".join(details)
