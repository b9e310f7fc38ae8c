"""This worker's jobs in memory, for the queue snapshots and the expiry of finished jobs:
per partition, job key -> a packed summary, and when each done job was first seen done.

The snapshots summarize every job of this worker's partitions at each
``worker.snapshot_interval_s``, and the expiry needs the done ones; the table holds their
whole states. The view is rebuilt from the table when this worker's partitions move
(:meth:`ActiveJobs.rebuild`) and updated by the jobs stage as it writes states.
"""

from __future__ import annotations

import hashlib
import math
import struct
import time
from collections.abc import Iterable, Iterator
from typing import Any

from agents.digests import DIGEST_SIZE, DigestIndex
from agents.routing import job_partition
from agents.states import decode_state
from pipeline.core.snapshots import JobSummary, summarize
from pipeline.fold import JobFold

__all__ = ["ActiveJobs"]

#: a job's record: its key's digest; the number of its (cluster, queue, state, reason);
#: nodes, cores, gpus; t_submit_ms (-1: none); timelimit_s (NaN: none)
_RECORD = struct.Struct(f"<{DIGEST_SIZE}sIIIIqd")
#: the number of a removed job's record (never a kind's: kinds are a few hundred)
_REMOVED = 0xFFFFFFFF
#: in a record's number of kind: its counts do not fit 32 bits (no real job's), they are
#: in its partition's ``wide``
_WIDE = 0x80000000
_U32 = 1 << 32
#: records unpacked at a time by a snapshot (a copy of this many, not of a partition's)
_CHUNK = 4096


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=DIGEST_SIZE).digest()


class _Partition:
    """One partition's jobs: records in the order their jobs came, and their index.

    A removed job's record stays, marked, until the removed ones outnumber the others
    (and are more than a chunk): then the records are copied without them, in the same
    order, and indexed again. The order is the one a dict kept, so a snapshot adds the
    jobs' floats up in the same order as before.
    """

    def __init__(self) -> None:
        self.records = bytearray()
        self.index = DigestIndex(self._digest_of)
        self.removed = 0
        self.wide: dict[bytes, tuple[int, int, int]] = {}  # digest -> nodes, cores, gpus

    def __len__(self) -> int:
        return len(self.index)

    def _digest_of(self, number: int) -> bytes:
        offset = number * _RECORD.size
        return bytes(self.records[offset:offset + DIGEST_SIZE])

    def find(self, digest: bytes) -> int:
        return self.index.find(digest)

    def put(self, digest: bytes, fields: tuple[Any, ...]) -> None:
        kind, nodes, cores, gpus, submit, limit = fields
        if 0 <= nodes < _U32 and 0 <= cores < _U32 and 0 <= gpus < _U32:
            if self.wide:
                self.wide.pop(digest, None)
        else:
            self.wide[digest] = (nodes, cores, gpus)
            fields = (kind | _WIDE, 0, 0, 0, submit, limit)
        number = self.index.find(digest)
        if number >= 0:
            _RECORD.pack_into(self.records, number * _RECORD.size, digest, *fields)
            return
        number = len(self.records) // _RECORD.size
        self.records += _RECORD.pack(digest, *fields)
        self.index.add(digest, number)

    def remove(self, digest: bytes) -> None:
        number = self.index.remove(digest)
        if number < 0:
            return
        self.wide.pop(digest, None)
        # the kind field, after the digest
        struct.pack_into("<I", self.records, number * _RECORD.size + DIGEST_SIZE, _REMOVED)
        self.removed += 1
        if self.removed > max(_CHUNK, len(self.index)):
            self._compact()

    def _compact(self) -> None:
        size = _RECORD.size
        kept = bytearray()
        for number in range(len(self.records) // size):
            record = self.records[number * size:(number + 1) * size]
            if _RECORD.unpack(record)[1] != _REMOVED:
                kept += record
        self.records, self.removed = kept, 0
        live = len(kept) // size
        self.index.rebuild(range(live), live)

    def fields(self) -> Iterator[tuple[Any, ...]]:
        """Every live record's fields but the digest, in order."""
        records, step, wide = self.records, _CHUNK * _RECORD.size, self.wide
        for start in range(0, len(records), step):
            for record in _RECORD.iter_unpack(bytes(records[start:start + step])):
                kind = record[1]
                if kind == _REMOVED:
                    continue
                if kind & _WIDE:
                    yield (kind & ~_WIDE, *wide[record[0]], *record[5:])
                else:
                    yield record[1:]

    @property
    def nbytes(self) -> int:
        return len(self.records) + self.index.nbytes


class ActiveJobs:
    """In-memory view of this worker's jobs for snapshots and expiry: per partition, job
    key -> summary, and the time each done job was first seen done.

    Rebuilt from the table whenever partitions move; updated as states change. A worker
    may track a million pending jobs, so a job costs here one fixed record of 48 bytes in
    its partition's ``bytearray`` (its key's 16-byte digest; its cluster, queue, state and
    reason as the number of that combination, numbered once for all jobs; its counts and
    times) and 4 to 8 bytes of index (:mod:`agents.digests`): ~55 bytes, against ~140 for
    a dict of packed summaries by key and ~290 for a :class:`JobSummary` of its own
    (docs/benchmarks-history.md; benchmarks/2026-12-04/memory_breakdown.py). Counts of
    2**32 and more, or negative (no real job's), are kept aside by digest. The done jobs
    are also kept by their keys, which their expiry sends.
    """

    def __init__(self) -> None:
        self._by_partition: dict[int, _Partition] = {}
        self.done: dict[bytes, tuple[int, float]] = {}  # key -> (partition, done since)
        self.partitions: set[int] = set()
        self.stale = True
        self._kinds: list[tuple[str, str, str, str | None]] = []
        self._numbers: dict[tuple[str, str, str, str | None], int] = {}

    def __len__(self) -> int:
        return sum(map(len, self._by_partition.values()))

    @property
    def nbytes(self) -> int:
        """Bytes of the records and indexes (not of the done jobs' keys)."""
        return sum(p.nbytes for p in self._by_partition.values())

    def update(self, key: bytes, partition: int, summary: JobSummary, now: float) -> None:
        jobs = self._by_partition.get(partition)
        if jobs is None:
            jobs = self._by_partition[partition] = _Partition()
        jobs.put(_digest(key), self._fields(summary))
        if summary.state == "done":
            self.done.setdefault(key, (partition, now))
        else:
            self.done.pop(key, None)

    def forget(self, key: bytes) -> None:
        """A job expired: it leaves the view."""
        self.done.pop(key, None)
        digest = _digest(key)
        for jobs in self._by_partition.values():
            jobs.remove(digest)

    def keep(self, partitions: set[int]) -> None:
        """Forget the jobs of every other partition."""
        self._by_partition = {p: jobs for p, jobs in self._by_partition.items()
                              if p in partitions}
        self.done = {k: v for k, v in self.done.items() if v[0] in partitions}

    def tracks(self, key: bytes, partition: int) -> bool:
        jobs = self._by_partition.get(partition)
        return jobs is not None and jobs.find(_digest(key)) >= 0

    def summaries(self, partitions: set[int]) -> Iterator[JobSummary]:
        kinds, nan = self._kinds, math.isnan
        for p in partitions:
            jobs = self._by_partition.get(p)
            if jobs is None:
                continue
            for kind, nodes, cores, gpus, submit, limit in jobs.fields():
                cluster, queue, state, reason = kinds[kind]
                yield JobSummary(cluster, queue, state, nodes, cores, gpus,
                                 None if submit < 0 else submit,
                                 None if nan(limit) else limit, reason)

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

    def _fields(self, s: JobSummary) -> tuple[Any, ...]:
        kind = (s.cluster, s.queue, s.state, s.reason)
        number = self._numbers.get(kind)
        if number is None:
            number = self._numbers[kind] = len(self._kinds)
            self._kinds.append(kind)
        return (number, s.nodes, s.cores, s.gpus,
                -1 if s.t_submit_ms is None else s.t_submit_ms,
                math.nan if s.timelimit_s is None else s.timelimit_s)
