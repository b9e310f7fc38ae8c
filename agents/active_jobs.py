"""This worker's jobs in memory, for the queue snapshots and the expiry of finished jobs:
per partition, job key -> a packed summary, and when each done job was first seen done.

The snapshots summarize every job of this worker's partitions at each
``worker.snapshot_interval_s``, and the expiry needs the done ones; the table holds their
whole states. The view is rebuilt from the table when this worker's partitions move
(:meth:`ActiveJobs.rebuild`) and updated by the jobs stage as it writes states.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Iterable, Iterator
from typing import Any

from agents.routing import job_partition
from agents.states import decode_state
from pipeline.core.snapshots import JobSummary, summarize
from pipeline.fold import JobFold

__all__ = ["ActiveJobs"]

_U32 = 1 << 32


class ActiveJobs:
    """In-memory view of this worker's jobs for snapshots and expiry: per partition, job
    key -> packed summary, and the time each done job was first seen done.

    Rebuilt from the table whenever partitions move; updated as states change. A worker
    may track a million pending jobs, so a job costs here its key and a packed summary of
    44 bytes (an 80-byte object), its strings numbered once for all jobs: ~180 bytes,
    against ~290 for a :class:`JobSummary` of its own (docs/benchmarks-history.md). Counts of 2**32
    and more (no real job's) take the wide form, 56 bytes (a 96-byte object).
    """

    #: cluster, queue, state, reason (numbers of their strings); nodes, cores, gpus;
    #: t_submit_ms (-1: none), timelimit_s (NaN: none)
    _PACKED = struct.Struct("<IIIIIIIqd")
    _WIDE = struct.Struct("<IIIIqqqqd")

    def __init__(self) -> None:
        self.by_partition: dict[int, dict[bytes, bytes]] = {}
        self.done: dict[bytes, tuple[int, float]] = {}  # key -> (partition, done since)
        self.partitions: set[int] = set()
        self.stale = True
        self._strings: list[str | None] = []
        self._numbers: dict[str | None, int] = {}

    def __len__(self) -> int:
        return sum(map(len, self.by_partition.values()))

    def update(self, key: bytes, partition: int, summary: JobSummary, now: float) -> None:
        self.by_partition.setdefault(partition, {})[key] = self._pack(summary)
        if summary.state == "done":
            self.done.setdefault(key, (partition, now))
        else:
            self.done.pop(key, None)

    def forget(self, key: bytes) -> None:
        """A job expired: it leaves the view."""
        self.done.pop(key, None)
        for jobs in self.by_partition.values():
            jobs.pop(key, None)

    def keep(self, partitions: set[int]) -> None:
        """Forget the jobs of every other partition."""
        self.by_partition = {p: jobs for p, jobs in self.by_partition.items()
                             if p in partitions}
        self.done = {k: v for k, v in self.done.items() if v[0] in partitions}

    def tracks(self, key: bytes, partition: int) -> bool:
        return key in self.by_partition.get(partition, ())

    def summaries(self, partitions: set[int]) -> Iterator[JobSummary]:
        strings, unpack, unpack_wide = self._strings, self._PACKED.unpack, self._WIDE.unpack
        size = self._PACKED.size
        for p in partitions:
            for packed in self.by_partition.get(p, {}).values():
                c, q, s, r, nodes, cores, gpus, submit, limit = (
                    unpack(packed) if len(packed) == size else unpack_wide(packed))
                yield JobSummary(strings[c], strings[q], strings[s], nodes, cores, gpus,  # type: ignore[arg-type]
                                 None if submit < 0 else submit,
                                 None if math.isnan(limit) else limit, strings[r])

    def expired(self, now: float, grace_s: float) -> list[bytes]:
        return [k for k, (p, done) in self.done.items()
                if now - done >= grace_s and p in self.partitions]

    def rebuild(self, entries: Iterable[tuple[bytes, Any]], partitions: int,
                assigned: set[int]) -> None:
        """Re-read the summaries of the assigned partitions' jobs from the table's
        ``entries`` (its items: key, table value).

        The table iterates only the keys of partitions this worker holds, without saying
        which; the partition is the key's under murmur2 (the table's partitioner), of the
        table's ``partitions``.
        """
        now = time.time()
        self.keep(assigned)
        for key, value in entries:
            partition = job_partition(key, partitions)
            if self.tracks(key, partition):
                continue
            state = decode_state(value)
            if state is None:
                continue
            docs = JobFold.from_dict(state).documents()
            if docs:
                self.update(key, partition, summarize(docs[-1]), now)
        self.partitions = assigned
        self.stale = False

    def _pack(self, s: JobSummary) -> bytes:
        number = self._number
        narrow = 0 <= s.nodes < _U32 and 0 <= s.cores < _U32 and 0 <= s.gpus < _U32
        return (self._PACKED if narrow else self._WIDE).pack(
            number(s.cluster), number(s.queue), number(s.state), number(s.reason),
            s.nodes, s.cores, s.gpus, -1 if s.t_submit_ms is None else s.t_submit_ms,
            math.nan if s.timelimit_s is None else s.timelimit_s)

    def _number(self, text: str | None) -> int:
        n = self._numbers.get(text)
        if n is None:
            n = self._numbers[text] = len(self._strings)
            self._strings.append(text)
        return n
