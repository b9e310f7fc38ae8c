"""XDMoD-compatible bucket labels for job size, GPU count, wait time and wall time.

The boundaries and labels are Open XDMoD's own (``configuration/etl/etl_data.d/jobs/xdw/``
``processor-buckets.json``, ``gpu-buckets.json``, ``job-wait-times.json``,
``job-times.json``), so a nightly comparison with XDMoD groups jobs the same way. XDMoD
buckets durations by whole seconds (``0 - 1s`` holds 0 s only, ``1 - 30s`` holds 1–29 s).

Each bucket has an id as well as a label: the labels do not sort in bucket order
(``"1 - 5hr"`` < ``"30 - 60min"``), so a panel that orders buckets sorts by the id.
"""

from __future__ import annotations

import math
from bisect import bisect_right

__all__ = [
    "Bucket",
    "duration_bucket",
    "gpu_bucket",
    "size_bucket",
]

#: (id, label) of one bucket
Bucket = tuple[int, str]

# (lowest value of the bucket, id, label), ascending by lowest value.
_CORES: tuple[tuple[int, int, str], ...] = (
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 3, "3 - 4"),
    (5, 4, "5 - 8"),
    (9, 5, "9 - 16"),
    (17, 6, "17 - 32"),
    (33, 7, "33 - 64"),
    (65, 8, "65 - 128"),
    (129, 9, "129 - 256"),
    (257, 10, "257 - 512"),
    (513, 11, "513 - 1024"),
    (1025, 12, "1k - 2k"),
    (2049, 13, "2k - 4k"),
    (4097, 14, "> 4k"),
)

_GPUS: tuple[tuple[int, int, str], ...] = (
    *((n, n + 1, str(n)) for n in range(9)),
    (9, 10, "9 - 16"),
    (17, 11, "17 - 32"),
    (33, 12, "33 - 64"),
    (65, 13, "65 - 128"),
    (129, 14, "129 - 256"),
    (257, 15, "257 - 512"),
    (513, 16, "513 - 1024"),
    (1025, 17, "1k - 2k"),
    (2049, 18, "2k - 4k"),
    (4097, 19, "> 4k"),
)

# Wait and wall time share one table in XDMoD (job-wait-times.json adds only "N/A").
_DURATIONS: tuple[tuple[int, int, str], ...] = (
    (0, 0, "0 - 1s"),
    (1, 1, "1 - 30s"),
    (30, 2, "30s - 30min"),
    (1800, 3, "30 - 60min"),
    (3600, 4, "1 - 5hr"),
    (18000, 5, "5 - 10hr"),
    (36000, 6, "10 - 18hr"),
    (64800, 7, "18+hr"),
)


def _lookup(table: tuple[tuple[int, int, str], ...], value: int) -> Bucket | None:
    i = bisect_right([low for low, _, _ in table], value) - 1
    if i < 0:
        return None
    _, bucket_id, label = table[i]
    return bucket_id, label


def size_bucket(cores: int | None) -> Bucket | None:
    """XDMoD job size (cores) bucket; None for an unknown or non-positive count."""
    if cores is None or cores < 1:
        return None
    return _lookup(_CORES, int(cores))


def gpu_bucket(gpus: int | None) -> Bucket | None:
    """XDMoD GPU count bucket (``"0"`` is a bucket of its own); None if unknown."""
    if gpus is None or gpus < 0:
        return None
    return _lookup(_GPUS, int(gpus))


def duration_bucket(seconds: float | None) -> Bucket | None:
    """XDMoD wait / wall time bucket of a duration; None if unknown or negative."""
    if seconds is None or seconds < 0 or math.isnan(seconds):
        return None
    return _lookup(_DURATIONS, math.floor(seconds))
