"""The durable spool of the producer edges: local disk between a source and Kafka.

This module is the store (append, read, delete, quarantine, meta, stats); what sends its
records to Kafka is :mod:`pipeline.edges.drainer`.

An edge acknowledges a record to its source (HTTP 201, hook ack, Kafka offset commit, the
journal watermark) only once :meth:`Spool.append` has returned, and ``append`` returns only
after the record is on disk: SQLite in WAL mode with ``synchronous=FULL`` fsyncs the WAL on
every commit. A :class:`~pipeline.edges.drainer.Drainer` thread sends the records in spool
order with one idempotent confluent-kafka producer (``acks=all``) and deletes a record only
from the delivery report that confirms it. So a record survives a Kafka outage of any
length, SIGKILL at any moment and a reboot; after a crash the records sent but not yet
deleted are sent again (duplicates, which the agents drop). SQLite rolls back a transaction
that hits a full disk, so the spool never holds half a record; the caller gets a
:class:`~pipeline.runtime.errors.SpoolError`.

One spool is one file ``<spool_dir>/<name>.db``; ``meta`` keeps small durable values of the
edge beside its records (the Flux journal watermark, the Slurm poller's high-water mark).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.runtime.config import Config
from pipeline.runtime.errors import SpoolError

__all__ = [
    "Spool",
    "SpoolRecord",
    "SpoolStats",
    "spool_dir",
    "spool_stats",
]

Headers = Sequence[tuple[str, bytes]]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    topic   TEXT NOT NULL,
    key     BLOB,
    value   BLOB NOT NULL,
    headers TEXT,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    seq     INTEGER PRIMARY KEY,
    topic   TEXT NOT NULL,
    key     BLOB,
    value   BLOB NOT NULL,
    headers TEXT,
    created REAL NOT NULL,
    reason  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    seq: int
    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    created: float


class _Pending:
    """An append waiting for the next group commit."""

    __slots__ = ("rows", "seqs", "error", "done")

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.seqs: list[int] = []
        self.error: SpoolError | None = None
        self.done = False


@dataclass(frozen=True, slots=True)
class SpoolStats:
    name: str
    path: str
    depth: int
    #: age in seconds of the oldest record still waiting; None when empty
    oldest_age_s: float | None
    bytes: int
    quarantined: int
    meta: dict[str, str]


def spool_dir(cfg: Config) -> Path:
    """The spool directory of the configuration (``edge.spool_dir``, else under the cache)."""
    return Path(cfg.edge.spool_dir or Path(cfg.stack.cache_dir) / "spool")


def _encode_headers(headers: Headers | None) -> str | None:
    if not headers:
        return None
    return json.dumps([[k, v.hex()] for k, v in headers])


def _decode_headers(text: str | None) -> tuple[tuple[str, bytes], ...]:
    if not text:
        return ()
    return tuple((k, bytes.fromhex(v)) for k, v in json.loads(text))


def _spool_error(path: Path, action: str, exc: sqlite3.Error) -> SpoolError:
    code = getattr(exc, "sqlite_errorname", "")
    if code == "SQLITE_FULL":
        why = "the disk (or the spool's size limit) is full"
    elif code in ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"):
        why = "the spool file or its directory is not writable"
    else:
        why = str(exc)
    return SpoolError(f"spool {path}: cannot {action}: {why} ({code or type(exc).__name__})")


class Spool:
    """One durable FIFO of Kafka records on local disk (thread-safe).

    :param path: the SQLite file; its directory is created if missing.
    :param topic: default topic of :meth:`append`.
    :param max_bytes: refuse appends past this size (0 = no limit besides the disk).
    """

    def __init__(self, path: str | Path, *, topic: str = "", max_bytes: int = 0,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.name = self.path.stem
        self.topic = topic
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._appended = threading.Condition(threading.Lock())
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                           check_same_thread=False, isolation_level=None)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                       timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: every commit fsyncs the WAL, so append() returning means on disk.
            self._db.execute("PRAGMA synchronous=FULL")
            # 256 KiB: appends, reads and deletes each touch a few pages at one end of the
            # records, and an edge has 50 MB resident in all
            self._db.execute("PRAGMA cache_size=-256")
            self._db.executescript(_SCHEMA)
            if max_bytes:
                page = self._db.execute("PRAGMA page_size").fetchone()[0]
                self._db.execute(f"PRAGMA max_page_count={max(16, max_bytes // page)}")
        except OSError as exc:
            raise SpoolError(f"spool {self.path}: cannot create: {exc.strerror}") from exc
        except sqlite3.Error as exc:
            raise _spool_error(self.path, "open", exc) from exc

    # -- writing -----------------------------------------------------------------------

    def append(self, key: bytes | str | None, value: bytes, headers: Headers | None = None,
               *, topic: str | None = None) -> int:
        """Store one record durably and return its sequence number."""
        return self.append_many([(key, value, headers)], topic=topic)[0]

    def append_many(self, records: Iterable[tuple[bytes | str | None, bytes, Headers | None]],
                    *, topic: str | None = None) -> list[int]:
        """Store records durably; their sequence numbers, in order.

        Group commit: appends from several threads that arrive while one commit is
        fsyncing share the next transaction (one fsync for all of them), which keeps
        throughput up on slow disks without weakening what a return means.
        """
        topic = topic or self.topic
        if not topic:
            raise SpoolError(f"spool {self.path}: no topic for the record")
        now = time.time()
        req = _Pending([(topic, k.encode() if isinstance(k, str) else k, v,
                         _encode_headers(h), now) for k, v, h in records])
        with self._queue_lock:
            self._queue.append(req)
        with self._lock:
            if not req.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if req.error is not None:
            raise req.error
        self.wake()
        return req.seqs

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for req in batch:
                    req.seqs = [self._db.execute(
                        "INSERT INTO records (topic, key, value, headers, created)"
                        " VALUES (?, ?, ?, ?, ?)", row).lastrowid or 0 for row in req.rows]
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            error = _spool_error(self.path, "append", exc)
            for req in batch:
                req.error = error
        finally:
            for req in batch:
                req.done = True

    def wait_appended(self, timeout: float) -> None:
        """Block until the next append in this process (or the timeout)."""
        with self._appended:
            self._appended.wait(timeout)

    def wake(self) -> None:
        """Release every :meth:`wait_appended` now (after an append, or to stop a drainer)."""
        with self._appended:
            self._appended.notify_all()

    def delete(self, seqs: Iterable[int]) -> None:
        """Forget delivered records."""
        batch = [(s,) for s in seqs]
        if not batch:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("DELETE FROM records WHERE seq = ?", batch)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _spool_error(self.path, "delete", exc) from exc

    def quarantine(self, seq: int, reason: str) -> None:
        """Move a record Kafka will never accept (too large, invalid) out of the queue."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(
                    "INSERT OR REPLACE INTO quarantine (seq, topic, key, value, headers, created,"
                    " reason) SELECT seq, topic, key, value, headers, created, ? FROM records"
                    " WHERE seq = ?", (reason, seq))
                self._db.execute("DELETE FROM records WHERE seq = ?", (seq,))
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _spool_error(self.path, "quarantine", exc) from exc

    def set_meta(self, name: str, value: str) -> None:
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                                 (name, value))
            except sqlite3.Error as exc:
                raise _spool_error(self.path, "write meta", exc) from exc

    # -- reading -----------------------------------------------------------------------

    def read(self, after: int = 0, limit: int = 500) -> list[SpoolRecord]:
        """Records with ``seq > after``, oldest first."""
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT seq, topic, key, value, headers, created FROM records"
                    " WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)).fetchall()
            except sqlite3.Error as exc:
                raise _spool_error(self.path, "read", exc) from exc
        return [SpoolRecord(seq, topic, key, value, _decode_headers(h), created)
                for seq, topic, key, value, h, created in rows]

    def get_meta(self, name: str, default: str | None = None) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return row[0] if row else default

    def depth(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM records").fetchone()[0])

    def stats(self) -> SpoolStats:
        with self._lock:
            try:
                depth, oldest, size = self._db.execute(
                    "SELECT count(*), min(created), coalesce(sum(length(value)), 0)"
                    " FROM records").fetchone()
                quarantined = self._db.execute("SELECT count(*) FROM quarantine").fetchone()[0]
                meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
            except sqlite3.Error as exc:
                raise _spool_error(self.path, "read", exc) from exc
        age = None if oldest is None else max(0.0, time.time() - oldest)
        return SpoolStats(self.name, str(self.path), int(depth), age, int(size),
                          int(quarantined), meta)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spool_stats(directory: Path) -> list[SpoolStats]:
    """Stats of every spool file in ``directory`` (for ``jobstream edge status``)."""
    out = []
    for path in sorted(directory.glob("*.db")):
        spool = Spool(path, readonly=True)
        try:
            out.append(spool.stats())
        finally:
            spool.close()
    return out

