"""Change detection of the Slurm pollers: an object is published again only when it
changed since it was last published, judged by a digest of its canonical JSON.

Two ways of remembering what was published, for two kinds of poll:

* :class:`DigestSet` (built by :class:`DigestWriter`): the digests of the last poll's
  objects, without keys (a job's id is inside the job), in an unlinked file beside the
  spool. squeue and sacct list up to hundreds of thousands of jobs, so the set is kept on
  disk, not in memory, and forgotten at a restart (the first poll then publishes every
  job again, which the worker drops as copies).
* :class:`PublishedViews`: per key (a node), the digest last published, persisted in the
  spool's ``meta``. A node's record tells a state that lasts (drained, down), published
  only when it changes, so a restart must know what was published before it: a restart
  publishes only real changes. A digest counts as delivered only once Kafka confirmed its
  record; what was published and not confirmed when the edge stopped is published again.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import tempfile
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from pipeline.edges.spool import Spool

__all__ = ["DigestSet", "DigestWriter", "PublishedViews", "digest", "dumps"]


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, as ``json.dumps`` of what ``json.loads`` gave: ijson reads non-integral
    numbers as Decimal (see :func:`pipeline.edges.slurm.documents.top_level`), written back
    as the float json.loads made."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys, default=float).encode()


def digest(obj: Any) -> int:
    """8 bytes of blake2b over ``obj``'s JSON with sorted keys, as an unsigned integer."""
    value = hashlib.blake2b(dumps(obj, sort_keys=True), digest_size=8).digest()
    return int.from_bytes(value, "little")


class DigestSet:
    """A sorted set of 8-byte digests in an unlinked file beside the spool, with only the
    first digest of each :attr:`BLOCK` in memory: held whole, the digests grew with the
    queue (8 bytes a job, twice while a poll built the next set beside the last) against
    an edge's fixed 50 MB. A lookup reads one 4 KiB block, which the page cache keeps,
    not the process."""

    BLOCK = 512

    def __init__(self, f: IO[bytes] | None = None, firsts: array[int] | None = None) -> None:
        self._file = f
        #: the first digest of every block of the file, in order
        self._firsts = firsts if firsts is not None else array("Q")

    def __contains__(self, digest: int) -> bool:
        i = bisect_right(self._firsts, digest) - 1
        if i < 0 or self._file is None:
            return False
        block = array("Q")
        block.frombytes(os.pread(self._file.fileno(), self.BLOCK * block.itemsize,
                                 i * self.BLOCK * block.itemsize))
        j = bisect_left(block, digest)
        return j < len(block) and block[j] == digest

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._firsts = array("Q")


class DigestWriter:
    """The digests of one poll, as they come, made into a :class:`DigestSet`: runs of
    :attr:`RUN` are sorted as they fill (``sorted`` of the whole poll would build a Python
    int per job, ~48 bytes) and written to a file, then merged into the set's file."""

    RUN = 4096
    #: read buffers of the merge, all runs together
    MERGE_BUFFER = 256 * 1024

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._runs_file: IO[bytes] = tempfile.TemporaryFile(dir=directory)
        #: digests in each run written, in file order
        self._runs: list[int] = []
        self._run = array("Q")

    def append(self, digest: int) -> None:
        self._run.append(digest)
        if len(self._run) >= self.RUN:
            self._close_run()

    def _close_run(self) -> None:
        if self._run:
            array("Q", sorted(self._run)).tofile(self._runs_file)
            self._runs.append(len(self._run))
            self._run = array("Q")

    def _read_run(self, start: int, length: int, per: int) -> Iterator[int]:
        fd = self._runs_file.fileno()
        for pos in range(start, start + length, per):
            chunk = array("Q")
            n = min(per, start + length - pos)
            chunk.frombytes(os.pread(fd, n * chunk.itemsize, pos * chunk.itemsize))
            yield from chunk

    def finish(self) -> DigestSet:
        """The set of every digest appended (this writer is closed)."""
        try:
            self._close_run()
            self._runs_file.flush()
            per = max(64, self.MERGE_BUFFER // (8 * max(1, len(self._runs))))
            runs = []
            start = 0
            for length in self._runs:
                runs.append(self._read_run(start, length, per))
                start += length
            out: IO[bytes] = tempfile.TemporaryFile(dir=self._dir)
            try:
                firsts = array("Q")
                block = array("Q")
                for digest in heapq.merge(*runs):
                    block.append(digest)
                    if len(block) == DigestSet.BLOCK:
                        firsts.append(block[0])
                        block.tofile(out)
                        block = array("Q")
                if block:
                    firsts.append(block[0])
                    block.tofile(out)
                out.flush()
            except BaseException:
                out.close()
                raise
            return DigestSet(out, firsts)
        finally:
            self.close()

    def close(self) -> None:
        self._runs_file.close()
        self._run = array("Q")


class PublishedViews:
    """Per key, the digest of the object last published, persisted as JSON in the spool's
    meta ``name``: ``{"confirmed": {key: digest}, "unconfirmed": [key, ...]}``.

    :meth:`publish` spools the records of changed keys; :meth:`acked` (the drainer's
    confirmations, :meth:`pipeline.edges.base.EdgeRuntime.on_acked`) moves a key's digest
    to ``confirmed``. A key is ``unconfirmed`` from just before its record is spooled until
    Kafka confirmed its newest record, so a restart, which cannot tell whether such a
    record reached Kafka, publishes that key again whatever its digest (a copy at worst,
    never a lost change).

    Within one run the view of a key is its newest *spooled* record: the spool keeps it
    until Kafka confirms it, so a poll while Kafka is down does not spool the same change
    again, and a change undone before it was confirmed (drain, then resume) is published
    as its own record.
    """

    def __init__(self, spool: Spool, name: str) -> None:
        self.spool = spool
        self.name = name
        self._lock = threading.Lock()
        stored = json.loads(spool.get_meta(name) or "{}")
        #: the digest of each key's newest record Kafka confirmed
        self._confirmed: dict[str, int] = {
            k: int(v, 16) for k, v in stored.get("confirmed", {}).items()}
        #: keys with a record spooled and not yet confirmed (persisted)
        self._unconfirmed: set[str] = set(stored.get("unconfirmed", []))
        #: of these, the keys a previous run left: their fate is unknown
        self._unknown = set(self._unconfirmed)
        #: the digest of each key's newest record spooled by this run
        self._spooled: dict[str, int] = {}
        #: spool seq -> (key, digest) of this run's records not yet confirmed
        self._pending: dict[int, tuple[str, int]] = {}
        #: each key's newest seq spooled, and newest confirmed (acks may come out of order)
        self._newest: dict[str, int] = {}
        self._confirmed_seq: dict[str, int] = {}

    def changed(self, key: str, value: int) -> bool:
        """Whether ``value`` differs from what was last published for ``key``."""
        with self._lock:
            if key in self._spooled:
                return self._spooled[key] != value
            if key in self._unknown:
                return True
            return self._confirmed.get(key) != value

    def publish(self, items: list[tuple[str | None, int]],
                spool: Callable[[], list[int]]) -> list[int]:
        """Run ``spool`` (which spools one record per item, in order, and returns their
        sequence numbers) and remember each ``(key, digest)``; a None key is not
        tracked. The keys are marked unconfirmed, durably, before anything is spooled."""
        keyed = [(i, k, d) for i, (k, d) in enumerate(items) if k is not None]
        with self._lock:
            # held through the spool so that a confirmation never comes before its record
            # is known here (the drainer waits on the lock in acked)
            if any(k not in self._unconfirmed for _, k, _ in keyed):
                self._unconfirmed.update(k for _, k, _ in keyed)
                self._save()
            seqs = spool()
            for i, key, value in keyed:
                seq = seqs[i]
                self._pending[seq] = (key, value)
                self._spooled[key] = value
                self._newest[key] = seq
                self._unknown.discard(key)
            return seqs

    def acked(self, seqs: Iterable[int]) -> None:
        """Kafka confirmed these records (the drainer's thread; seqs of every source of
        the spool)."""
        with self._lock:
            moved = False
            for seq in seqs:
                entry = self._pending.pop(seq, None)
                if entry is None:
                    continue
                key, value = entry
                if seq > self._confirmed_seq.get(key, 0):
                    self._confirmed[key] = value
                    self._confirmed_seq[key] = seq
                if seq == self._newest.get(key):
                    self._unconfirmed.discard(key)
                moved = True
            if moved:
                self._save()

    def retain(self, keys: set[str]) -> None:
        """Forget the keys not in ``keys`` (nodes gone from the cluster): one that comes
        back is published again, and the stored views do not grow for ever."""
        with self._lock:
            gone = (self._confirmed.keys() | self._unconfirmed) - keys
            if not gone:
                return
            for key in gone:
                self._confirmed.pop(key, None)
                self._spooled.pop(key, None)
                self._newest.pop(key, None)
                self._confirmed_seq.pop(key, None)
                self._unconfirmed.discard(key)
                self._unknown.discard(key)
            self._save()

    def _save(self) -> None:
        self.spool.set_meta(self.name, json.dumps({
            "confirmed": {k: f"{v:016x}" for k, v in sorted(self._confirmed.items())},
            "unconfirmed": sorted(self._unconfirmed)}, separators=(",", ":")))
