"""glibc malloc settings of jobstream's long-running processes.

Nothing changes where the C library is not glibc, and a setting the environment gives
glibc (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``) is left to it. Written by hand:
``mallopt`` is glibc's interface and no library wraps it; a call is one line of ctypes.
"""

from __future__ import annotations

import os

__all__ = ["map_large_blocks", "one_arena", "two_arenas"]

#: glibc's ``mallopt`` parameters
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: the worker's blocks of this size and more are mapped of their own (glibc's default
#: before it starts to raise the threshold)
MMAP_THRESHOLD = 128 * 1024


def _mallopt(param: int, value: int, env: str) -> None:
    if os.environ.get(env):
        return
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return
        import ctypes

        ctypes.CDLL(None).mallopt(param, value)
    except (ValueError, OSError, AttributeError):
        return


def one_arena() -> None:
    """One malloc arena for the whole process; called before it starts a thread.

    glibc gives each thread that allocates an arena of its own (up to 8 per core) and
    keeps what a thread freed in that thread's arena, where the other threads (an edge's
    poller, drainer, librdkafka's) cannot reuse it: the resident memory peaks higher, and
    an edge has a fixed 50 MB. These threads allocate little and seldom at the same time,
    so one arena does not slow them."""
    _mallopt(_M_ARENA_MAX, 1, "MALLOC_ARENA_MAX")


def two_arenas() -> None:
    """Two malloc arenas for the whole process (the worker's); called before it starts a
    thread.

    The worker's threads besides the main one (librdkafka's, RocksDB's flushes and
    compactions of each partition's store) would get up to 8 arenas per core, each
    keeping the pages of what its threads freed; RocksDB's threads free memtables and
    compaction buffers of megabytes all the time. One arena for the main thread (Python)
    and one shared by the others bound that, without the main thread waiting on a
    compaction's lock."""
    _mallopt(_M_ARENA_MAX, 2, "MALLOC_ARENA_MAX")


def map_large_blocks() -> None:
    """Blocks of :data:`MMAP_THRESHOLD` and more mapped of their own, always, and given
    back to the system when freed.

    glibc raises its threshold to the size of every mapped block that is freed (up to
    32 MiB), so that such blocks come from the heap from then on. A worker that tracks
    many jobs frees large blocks all the time (a dict's table when it grows, RocksDB's
    memtable blocks, fetched record batches): after the first of each, the next ones came
    from the heap, which keeps the pages of the holes they leave (docs/benchmarks-history.md, issue
    11). A fixed threshold stops the raising."""
    _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")
