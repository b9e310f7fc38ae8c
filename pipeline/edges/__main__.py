"""``python -m pipeline.edges [-v] [--config F] flux | slurm | status | install-hook``:
``jobstream edge`` under a name that needs no console script (the hook installer and the
tests use it).

The ``jobstream`` command loads each area only when its command runs, so an edge carries
none of the sink's or agents' libraries (docs/design.md, "Targets": an edge stays under
50 MB resident).
"""

from __future__ import annotations

import sys

from pipeline.cli import main


def _args(argv: list[str]) -> list[str]:
    """``jobstream`` arguments: the leading global options, then ``edge`` and the rest."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--help":
        i += 2 if argv[i] == "--config" else 1
    return [*argv[:i], "edge", *argv[i:]]


if __name__ == "__main__":
    main(prog_name="python -m pipeline.edges", args=_args(sys.argv[1:]))
