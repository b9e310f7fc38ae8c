"""The test folders have no ``__init__.py``: pytest imports test modules by basename, so two
files of the same name in different folders break collection of the whole suite."""

from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique() -> None:
    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
