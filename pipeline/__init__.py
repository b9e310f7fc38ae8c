"""jobstream: everything that is not a Faust agent, one package per part.

The parts and the direction of their imports are written down in ``docs/design.md``
("The code") and checked by import-linter (``[tool.importlinter]`` in pyproject.toml).
"""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
"""This package's directory: ``_schemas/`` lives here (a copy in a wheel, a link in a
source tree), and its parent is the source checkout when jobstream runs from one."""
