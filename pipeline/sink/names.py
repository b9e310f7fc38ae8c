"""Names of jobstream's Elasticsearch indices and aliases (pure).

Three index families, each a set of monthly indices of one *generation* behind one alias::

    <prefix>hpc-jobs-<gen>-2026.11         alias <prefix>hpc-jobs
    <prefix>hpc-job-events-<gen>-2026.11   alias <prefix>hpc-job-events
    <prefix>hpc-queue-snapshots-<gen>-2026.11  alias <prefix>hpc-queue-snapshots

The sink writes to the concrete index and everybody reads through the alias; a replay
writes a new generation (``v2``) beside the live one and then moves the aliases.

A job document lives in the month of its ``t_submit``, a function of the job that never
changes, because external versions are checked per index: a job spread over two months
would have two documents. A job whose submit time is not known yet lives in the
``undated`` index of its generation until a revision with ``t_submit`` moves it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache

__all__ = [
    "DEFAULT_GENERATION",
    "UNDATED",
    "Family",
    "alias_name",
    "check_generation",
    "index_name",
    "index_pattern",
    "month_of",
]

DEFAULT_GENERATION = "v1"

#: Month part of the index of jobs whose submit time is unknown.
UNDATED = "undated"

_GENERATION = re.compile(r"^v[0-9]{1,6}$")


class Family(StrEnum):
    """An index family: its value is the base name of its alias and indices."""

    JOBS = "hpc-jobs"
    EVENTS = "hpc-job-events"
    SNAPSHOTS = "hpc-queue-snapshots"


def check_generation(generation: str) -> str:
    """Return ``generation`` if it is a valid generation name (``v1``, ``v2``, ...).

    The name is part of index patterns (``hpc-jobs-v1-*``), so it must never be a prefix of
    another family's indices or contain a dash.
    """
    if not _GENERATION.match(generation):
        raise ValueError(f"index generation must look like v1, v2, ...: {generation!r}")
    return generation


def alias_name(prefix: str, family: Family) -> str:
    return f"{prefix}{family.value}"


def index_pattern(prefix: str, family: Family, generation: str) -> str:
    """The wildcard matching every index of one family and generation."""
    return f"{prefix}{family.value}-{check_generation(generation)}-*"


@lru_cache(maxsize=4096)  # called per document; few distinct answers
def index_name(prefix: str, family: Family, generation: str, month: str) -> str:
    return f"{prefix}{family.value}-{check_generation(generation)}-{month}"


_DAY_MS = 86_400_000


def month_of(epoch_ms: int | float) -> str:
    """``YYYY.MM`` of an epoch-milliseconds time, UTC."""
    return _month_of_day(int(epoch_ms // _DAY_MS))


@lru_cache(maxsize=4096)
def _month_of_day(day: int) -> str:
    # A month boundary is always a day boundary in UTC, so the day decides the month.
    return datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y.%m")
