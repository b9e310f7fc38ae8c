"""Names of jobstream's Elasticsearch indices and aliases (pure).

Five index families, each a set of indices of one *generation* behind one alias: monthly
indices for four of them, a single ``current`` index for the nodes::

    <prefix>hpc-jobs-<gen>-2026.11         alias <prefix>hpc-jobs
    <prefix>hpc-job-events-<gen>-2026.11   alias <prefix>hpc-job-events
    <prefix>hpc-queue-snapshots-<gen>-2026.11  alias <prefix>hpc-queue-snapshots
    <prefix>hpc-nodes-<gen>-current        alias <prefix>hpc-nodes
    <prefix>hpc-node-events-<gen>-2026.11  alias <prefix>hpc-node-events

The sink writes to the concrete index and everybody reads through the alias; a replay
writes a new generation (``v2``) beside the live one and then moves the aliases.

A job document lives in the month of its ``t_submit``, a function of the job that never
changes, because external versions are checked per index: a job spread over two months
would have two documents. A job whose submit time is not known yet lives in the
``undated`` index of its generation until a revision with ``t_submit`` moves it.

A node event, like a job event, lives in the month of its own time (``timestamp``).

A node document (one per cluster and node, its current state) has no time of its own to
be filed under, and is few (one per node, not per job): all of a generation's live in one
index, :data:`CURRENT` (:data:`SINGLE_INDEX` families), so that its external versions are
checked in one place.

Every name is valid by construction, whatever a record or the configuration says:

* a month comes from a time between 1970-01-01 and 9999-12-31 (UTC) only
  (:data:`MIN_TIME_MS`, :data:`MAX_TIME_MS`); :func:`month_of` refuses any other time
  (negative, NaN, 1e300 s, year 10000) with :class:`TimeRangeError` rather than inventing
  an index (a five-digit year, a month before the epoch) or raising an exception that
  stops the sink; the converter makes it the record's DLQ reason ``bad_time``. 9999 is
  the last year of four digits (``YYYY.MM`` stays one shape, so patterns and sorting by
  name keep working); nothing earlier than 1970 is an HPC job. A far but real month
  (2100.01) is a month like any other: whether such a time is plausible is the
  admission checks' business, upstream;
* the prefix (``elasticsearch.index_prefix``) must obey Elasticsearch's index-name rules
  (lower case, none of ``\\ / * ? " < > | , # :`` or a space, not starting with
  ``- _ +``, not ``.`` or ``..``) and leave room for the longest family, generation and
  month within Elasticsearch's 255 bytes (:func:`check_prefix`).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache

__all__ = [
    "CURRENT",
    "DEFAULT_GENERATION",
    "MAX_INDEX_NAME_BYTES",
    "MAX_PREFIX_BYTES",
    "MAX_TIME_MS",
    "MIN_TIME_MS",
    "SINGLE_INDEX",
    "UNDATED",
    "Family",
    "TimeRangeError",
    "alias_name",
    "check_generation",
    "check_prefix",
    "index_name",
    "index_pattern",
    "month_of",
]

DEFAULT_GENERATION = "v1"

#: Month part of the index of jobs whose submit time is unknown.
UNDATED = "undated"

#: Last part of the one index of a :data:`SINGLE_INDEX` family's generation.
CURRENT = "current"

#: The range of times a document may be filed under (epoch milliseconds, UTC, inclusive):
#: 1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z.
MIN_TIME_MS = 0
MAX_TIME_MS = 253_402_300_799_999

#: Elasticsearch's limit of an index name, in bytes of UTF-8.
MAX_INDEX_NAME_BYTES = 255

_GENERATION = re.compile(r"^v[0-9]{1,6}$")
_MONTH = re.compile(r"^[0-9]{4}\.(0[1-9]|1[0-2])$")
#: characters Elasticsearch refuses anywhere in an index name
_FORBIDDEN = frozenset('\\/*?"<>|,# :')


class TimeRangeError(ValueError):
    """A time outside :data:`MIN_TIME_MS`..:data:`MAX_TIME_MS` (or not a number)."""


class Family(StrEnum):
    """An index family: its value is the base name of its alias and indices."""

    JOBS = "hpc-jobs"
    EVENTS = "hpc-job-events"
    SNAPSHOTS = "hpc-queue-snapshots"
    #: node documents (issue 36), one per (cluster, node): the sink keeps them in one
    #: ``<prefix>hpc-nodes-<gen>-current`` index of each generation behind this alias
    NODES = "hpc-nodes"
    #: node events (issue 36), one per ``event_id``, monthly by their time as job events
    NODE_EVENTS = "hpc-node-events"


#: Families of one index per generation (:data:`CURRENT`) instead of one per month.
SINGLE_INDEX: frozenset[Family] = frozenset({Family.NODES})


#: Room left for the prefix: the longest family, generation (``v`` and six digits) and
#: last part (``YYYY.MM``, ``undated`` or ``current``), and their two dashes.
MAX_PREFIX_BYTES = MAX_INDEX_NAME_BYTES - max(len(f"{f.value}-v999999-{last}")
                                              for f in Family
                                              for last in ("0000.00", UNDATED, CURRENT))


def check_generation(generation: str) -> str:
    """Return ``generation`` if it is a valid generation name (``v1``, ``v2``, ...).

    The name is part of index patterns (``hpc-jobs-v1-*``), so it must never be a prefix of
    another family's indices or contain a dash.
    """
    if not _GENERATION.match(generation):
        raise ValueError(f"index generation must look like v1, v2, ...: {generation!r}")
    return generation


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if every index and alias name made with it is valid.

    Checked once, where the prefix is taken (the converter, :func:`index_name`'s first
    call, the templates), so that an invalid one is a configuration error at start rather
    than every bulk item refused.
    """
    problem = ""
    if prefix != prefix.lower():
        problem = "must be lower case"
    elif set(prefix) & _FORBIDDEN:
        problem = "must not contain any of \\ / * ? \" < > | , # : or a space"
    elif prefix[:1] in ("-", "_", "+"):
        problem = "must not start with -, _ or +"
    elif prefix in (".", ".."):
        problem = "must not be . or .."
    elif len(prefix.encode("utf-8", "surrogatepass")) > MAX_PREFIX_BYTES:
        problem = (f"must be at most {MAX_PREFIX_BYTES} bytes (index names are at most "
                   f"{MAX_INDEX_NAME_BYTES})")
    if problem:
        raise ValueError(f"elasticsearch.index_prefix {problem}: {prefix!r}")
    return prefix


def alias_name(prefix: str, family: Family) -> str:
    return f"{prefix}{family.value}"


def index_pattern(prefix: str, family: Family, generation: str) -> str:
    """The wildcard matching every index of one family and generation."""
    return f"{prefix}{family.value}-{check_generation(generation)}-*"


@lru_cache(maxsize=4096)  # called per document; few distinct answers
def index_name(prefix: str, family: Family, generation: str, month: str) -> str:
    """The concrete index; ``month`` is :func:`month_of`'s ``YYYY.MM`` or :data:`UNDATED`,
    and :data:`CURRENT` for (only) a :data:`SINGLE_INDEX` family (ValueError for anything
    else: no name is made of what is not a month)."""
    if family in SINGLE_INDEX:
        if month != CURRENT:
            raise ValueError(f"{family.value} has one index per generation, {CURRENT}: "
                             f"{month!r}")
    elif month != UNDATED and not _MONTH.match(month):
        raise ValueError(f"index month must be YYYY.MM or {UNDATED}: {month!r}")
    return f"{check_prefix(prefix)}{family.value}-{check_generation(generation)}-{month}"


_DAY_MS = 86_400_000


def month_of(epoch_ms: int | float) -> str:
    """``YYYY.MM`` of an epoch-milliseconds time, UTC; :class:`TimeRangeError` for a time
    outside 1970..9999 or one that is not a number."""
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int | float):
        raise TimeRangeError(f"time must be epoch milliseconds, got {epoch_ms!r}")
    if isinstance(epoch_ms, float) and not math.isfinite(epoch_ms):
        raise TimeRangeError(f"time must be a finite number, got {epoch_ms!r}")
    if not MIN_TIME_MS <= epoch_ms <= MAX_TIME_MS:
        raise TimeRangeError(f"time {epoch_ms!r} ms is outside 1970-01-01..9999-12-31")
    return _month_of_day(int(epoch_ms // _DAY_MS))


@lru_cache(maxsize=4096)
def _month_of_day(day: int) -> str:
    # A month boundary is always a day boundary in UTC, so the day decides the month.
    return datetime.fromtimestamp(day * 86_400, tz=UTC).strftime("%Y.%m")
