"""Where the tests find their records, on any machine.

The real records this project recorded (the Flux 0.88 journals and ``flux jobs`` output, the
Slurm 22.05 and 25.11 records) are copied into ``tests/data/vectors/`` (its README says
where each came from), so that the parser and fold tests need nothing outside the
repository. Files taken from other projects' repositories (Flux's ``*_dump-*``,
``*_rfc20-*`` and ``*_DERIVED*`` vectors, Grafana's fixtures) stay in ``../shared`` beside
the repository root: a test that uses one skips where ``../shared`` is absent, and fails
under ``CI=true``, where it is always beside the clone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "data" / "vectors"
SHARED = REPO.parent / "shared"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str, ci: str | None = None) -> NoReturn:
    """Skip the calling test because ``reason``; under CI fail instead, saying ``ci`` (or
    ``reason``): CI must never be green by skipping what it claims to test."""
    if in_ci():
        pytest.fail(ci or f"{reason} (a failure under CI, not a skip)", pytrace=False)
    pytest.skip(reason)


def shared_path(*parts: str) -> Path:
    """``../shared/<parts>``; the calling test skips when it is absent, and fails under CI."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        where = "/".join(("..", "shared", *parts))
        unavailable(f"{where} is not beside the repository (data of other projects)",
                    f"{where} is missing: under CI ../shared must be beside the clone")
    return path


def vector(*parts: str) -> Path:
    """A test vector: the project's own recording under ``tests/data/vectors`` when it is
    one, else the file of ``../shared/vectors`` (see :func:`shared_path`)."""
    own = VECTORS.joinpath(*parts)
    return own if own.exists() else shared_path("vectors", *parts)
