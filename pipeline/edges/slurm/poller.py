"""Reconciliation poller: ``squeue --json`` and ``sacct --json`` every ``poll_interval_s``.

Hooks miss jobs that never start and jobcomp misses jobs that have not ended; the poller
sees both (docs/slurm.md, "The poller"; after cc-slurm-adapter). Each poll publishes one
record per job:
the command's JSON document with ``jobs`` cut down to that one job (``meta`` and the other
top-level keys kept), so every record has a job key and stays far below Kafka's message
size even on a large cluster. A job whose JSON object did not change since the previous
poll is not published again; the top-level keys do not count, since Slurm 23.02 prints
``last_backfill`` and ``last_update``, which change at every poll. The digests of the last
poll's jobs are kept in a file beside the spool, not in memory (:class:`_Digests`).

The output is never held in memory: 50,000 queued jobs are ~28 MiB of JSON and ~5x that as
Python objects, against an edge's budget of 50 MB resident. Each command writes to an
unlinked temporary file beside the spool; a first streaming pass (``ijson``) validates the
document and keeps its top-level keys other than ``jobs``, wherever they are (22.05 prints
``meta`` first, newer releases after ``jobs``); a second pass reads the jobs one by one and
spools them :data:`CHUNK` records at a time.

``sacct`` asks for the window from the high-water mark (minus 1 s) to now, at most
``catchup_max_s`` back; the mark moves to the poll's start time only after every record of
the poll is durably spooled, so a crash re-asks the same window (duplicates, no gap). While
Slurm is unreachable (command missing, failing, timing out, printing no JSON) the poller
backs off exponentially up to ``poll_backoff_max_s``.

A little over 400 lines because the two streaming passes, the digest file and the poll
loop are one job: bounding the edge's memory whatever the size of the cluster.
"""

from __future__ import annotations

import codecs
import hashlib
import heapq
import json
import logging
import os
import shlex
import subprocess
import tempfile
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import ijson

from pipeline.core.model import RawRecord
from pipeline.edges.base import EdgeRuntime, record_key
from pipeline.runtime.backoff import Backoff
from pipeline.runtime.errors import JobstreamError

__all__ = ["CHUNK", "PollError", "SlurmPoller", "iter_jobs", "top_level"]

logger = logging.getLogger(__name__)

HWM_META = "slurm.sacct.hwm"
#: records per publish_many (one spool transaction): bounds the memory of a poll (a
#: squeue job is 0.5-5 KB, held as its payload and again Avro-encoded while spooled)
CHUNK = 250

#: runs ``argv`` with its stdout written to the file; raises PollError
Runner = Callable[[list[str], float, IO[bytes]], None]


def _dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, as ``json.dumps`` of what ``json.loads`` gave: ijson reads non-integral
    numbers as Decimal (see :func:`top_level`), written back as the float json.loads made."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys, default=float).encode()


class PollError(Exception):
    """A Slurm command failed; the poller backs off."""


def run_command(argv: list[str], timeout: float, out: IO[bytes]) -> None:
    try:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                              check=False)
    except FileNotFoundError as exc:
        raise PollError(f"{argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise PollError(f"{argv[0]} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PollError(f"{argv[0]} exited {proc.returncode}: {err[-1] if err else ''}")


class _Utf8Replaced:
    """``f`` from its start, as UTF-8 with invalid bytes replaced by U+FFFD (as the decode
    of the whole output did): Slurm prints job names and comments byte for byte, and yajl
    rejects a whole document for one invalid byte."""

    def __init__(self, f: IO[bytes]) -> None:
        f.seek(0)
        self._f = f
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        # size 0 is ijson probing for bytes vs str, not the end of the file
        return self._decoder.decode(data, final=not data and size != 0).encode()


def _not_json(exc: ijson.JSONError) -> PollError:
    # yajl's messages go on with a picture of the spot over several lines
    first = str(exc).strip().splitlines()
    return PollError(f"output is not JSON: {first[0] if first else type(exc).__name__}")


def _unreadable(exc: Exception) -> PollError:
    """A document yajl reads but Python cannot hold: an integer of more digits than
    ``int()`` takes. yajl2_c's ``basic_parse`` reports it as a SystemError, and its
    ``items`` crashes the process on it, so :func:`top_level`'s pass, which comes first
    and reads every value, must refuse such a document before :func:`iter_jobs` sees it."""
    return PollError(f"output holds a value Python cannot read: {str(exc)[:200]}")


def top_level(f: IO[bytes]) -> dict[str, Any]:
    """The document's top-level keys other than ``jobs``, in their order, from one streaming
    pass that also checks the whole document (the jobs are skipped, not built)."""
    rest: dict[str, Any] = {}
    key = ""
    builder: ijson.ObjectBuilder | None = None
    depth = 0  # containers open inside the current top-level value
    has_jobs = False
    # not use_float=True: yajl then reads integers as int64 and rejects a larger one, and
    # Slurm prints uint64 values (e.g. memory with the MEM_PER_CPU bit set); the Decimals
    # ijson gives instead become the same floats as json.loads made in _dumps
    events = ijson.basic_parse(_Utf8Replaced(f))
    try:
        first = next(events, None)
        if first is None or first[0] != "start_map":
            raise PollError("output has no jobs list")
        for event, value in events:
            if depth == 0:
                if event == "map_key":
                    key = value
                    builder = None if key == "jobs" else ijson.ObjectBuilder()
                    continue
                if event == "end_map":  # the document's own end
                    continue
                if key == "jobs":  # the first event of its value
                    has_jobs = event == "start_array"
            if builder is not None:
                builder.event(event, value)
            if event in ("start_map", "start_array"):
                depth += 1
            elif event in ("end_map", "end_array"):
                depth -= 1
            if depth == 0 and builder is not None:
                rest[key] = builder.value
                builder = None
    except ijson.JSONError as exc:
        raise _not_json(exc) from exc
    except (ValueError, SystemError) as exc:
        raise _unreadable(exc) from exc
    if not has_jobs:
        raise PollError("output has no jobs list")
    return rest


def iter_jobs(f: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The job objects of a document :func:`top_level` accepted, one at a time."""
    try:
        yield from ijson.items(_Utf8Replaced(f), "jobs.item")  # Decimals: see top_level
    except ijson.JSONError as exc:
        raise _not_json(exc) from exc
    except (ValueError, SystemError) as exc:
        raise _unreadable(exc) from exc


def _digest(job: dict[str, Any]) -> int:
    # the job alone: the top-level keys (last_update, ...) change at every poll
    digest = hashlib.blake2b(_dumps(job, sort_keys=True), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class _Digests:
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


class _DigestWriter:
    """The digests of one poll, as they come, made into a :class:`_Digests`: runs of
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

    def finish(self) -> _Digests:
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
                    if len(block) == _Digests.BLOCK:
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
            return _Digests(out, firsts)
        finally:
            self.close()

    def close(self) -> None:
        self._runs_file.close()
        self._run = array("Q")


class SlurmPoller:
    """Runs the polls in a thread; ``poll_once`` is the unit of work (tests call it)."""

    def __init__(self, runtime: EdgeRuntime, *, runner: Runner = run_command,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.runtime = runtime
        self.cfg = runtime.cfg.edge.slurm
        self.runner = runner
        self.clock = clock
        self.published = 0
        self.polls = 0
        self.failures = 0
        #: the digests of the last poll's jobs, by format (the job id is in the job)
        self._seen: dict[str, _Digests] = {"slurm-squeue": _Digests(),
                                            "slurm-sacct": _Digests()}
        self._stop = threading.Event()
        #: waits between polls; returns True when the poller should stop
        self._sleep = sleep or self._stop.wait
        self._thread: threading.Thread | None = None

    @property
    def high_water_mark(self) -> float | None:
        value = self.runtime.spool.get_meta(HWM_META)
        return float(value) if value else None

    def _window_start(self, now: float) -> float:
        hwm = self.high_water_mark
        start = now - self.cfg.catchup_max_s
        if hwm is not None:
            start = max(start, hwm - 1.0)
        return start

    def _publish(self, fmt: str, f: IO[bytes], rest: dict[str, Any]) -> int:
        cluster = self.runtime.cfg.cluster
        now = time.time()
        seen = self._seen[fmt]
        fresh = _DigestWriter(self.runtime.spool.path.parent)
        try:
            records: list[RawRecord] = []
            n = 0
            for job in iter_jobs(f):
                digest = _digest(job)
                if digest in seen:  # unchanged, and keyed when it was published
                    fresh.append(digest)
                    continue
                # the record as before the streaming parse: the parsers downstream are
                # unchanged
                payload = _dumps({**rest, "jobs": [job]})
                key = record_key(fmt, payload, cluster, now)
                if key is not None:  # an unkeyed record goes out again at every poll
                    fresh.append(digest)
                records.append(RawRecord(cluster=cluster, scheduler="slurm", format=fmt,
                                         received_at=now, payload=payload, key=key))
                if len(records) >= CHUNK:
                    self.runtime.publish_many(records)
                    n += len(records)
                    records = []
            if records:
                self.runtime.publish_many(records)
                n += len(records)
        except BaseException:
            fresh.close()
            raise
        self._seen[fmt] = fresh.finish()
        seen.close()
        return n

    def poll_once(self) -> int:
        """One squeue + sacct round; the number of records published. Raises PollError."""
        now = self.clock()
        squeue = shlex.split(self.cfg.squeue_command)
        sacct = shlex.split(self.cfg.sacct_command) + [
            "--starttime", time.strftime("%Y-%m-%dT%H:%M:%S",
                                         time.localtime(self._window_start(now))),
            "--endtime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now + 1)),
        ]
        timeout = self.cfg.command_timeout_s
        # on disk beside the spool, not in /tmp (often tmpfs, i.e. memory); unlinked at once
        spool_dir = self.runtime.spool.path.parent
        with tempfile.TemporaryFile(dir=spool_dir) as squeue_out, \
                tempfile.TemporaryFile(dir=spool_dir) as sacct_out:
            self.runner(squeue, timeout, squeue_out)
            self.runner(sacct, timeout, sacct_out)
            # both documents are checked before anything is published
            squeue_rest, sacct_rest = top_level(squeue_out), top_level(sacct_out)
            n = (self._publish("slurm-squeue", squeue_out, squeue_rest)
                 + self._publish("slurm-sacct", sacct_out, sacct_rest))
        # everything of this window is on disk: the next poll may start from here
        self.runtime.spool.set_meta(HWM_META, repr(now))
        self.polls += 1
        self.published += n
        return n

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="slurm-poller", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Poll until stopped: every ``poll_interval_s``, backing off while Slurm fails."""
        backoff = Backoff(min(5.0, self.cfg.poll_interval_s), self.cfg.poll_backoff_max_s)
        while not self._stop.is_set():
            try:
                n = self.poll_once()
                backoff.reset()
                delay = self.cfg.poll_interval_s
                logger.info("slurm poll: %d records", n)
            # OSError: the command's output and the digests are files beside the spool,
            # whose disk may be full; the poll is tried again like a Slurm failure
            except (PollError, JobstreamError, OSError) as exc:
                self.failures += 1
                delay = backoff.next()
                logger.warning("slurm poll failed (%s); next attempt in %.0f s", exc, delay)
            if self._sleep(delay):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.cfg.command_timeout_s + 5.0)
            if self._thread.is_alive():
                return  # still in a poll, which uses the digests
        self.close()

    def close(self) -> None:
        """Close the digests' files (a poll after this republishes every job)."""
        for digests in self._seen.values():
            digests.close()

    def describe(self) -> dict[str, Any]:
        return {"polls": self.polls, "published": self.published, "failures": self.failures,
                "high_water_mark": self.high_water_mark}
