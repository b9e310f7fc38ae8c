"""The durable spool of the producer edges: local disk between a source and Kafka.

An edge acknowledges a record to its source (HTTP 201, hook ack, Kafka offset commit, the
journal watermark) only once :meth:`Spool.append` has returned, and ``append`` returns only
after the record is on disk: SQLite in WAL mode with ``synchronous=FULL`` fsyncs the WAL on
every commit. A :class:`Drainer` thread sends the records in spool order with one idempotent
confluent-kafka producer (``acks=all``) and deletes a record only from the delivery report
that confirms it. So a record survives a Kafka outage of any length, SIGKILL at any moment
and a reboot; after a crash the records sent but not yet deleted are sent again (duplicates,
which the agents drop). SQLite rolls back a transaction that hits a full disk, so the spool
never holds half a record; the caller gets a :class:`~pipeline.runtime.errors.SpoolError`.

One spool is one file ``<spool_dir>/<name>.db``; ``meta`` keeps small durable values of the
edge beside its records (the Flux journal watermark, the Slurm poller's high-water mark).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.kafka.producer import POISON_ERRORS
from pipeline.runtime.backoff import retry
from pipeline.runtime.config import Config
from pipeline.runtime.errors import SpoolError

__all__ = [
    "Drainer",
    "Spool",
    "SpoolRecord",
    "SpoolStats",
    "spool_dir",
    "spool_stats",
]

logger = logging.getLogger(__name__)

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
        with self._appended:
            self._appended.notify_all()
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


class Drainer:
    """Sends a spool's records to Kafka in order and deletes each once Kafka confirmed it.

    Runs in its own thread. At most ``max_inflight`` records (``max_inflight_bytes``) are
    handed to librdkafka at once, which bounds the edge's memory however deep the spool is:
    librdkafka keeps a copy of each until it is confirmed, and another in the request that
    carries it, and an edge has 50 MB resident in all.
    When a delivery fails, the drainer waits for every record in flight, then starts again
    from the oldest record still in the spool, with exponential backoff while Kafka is down.

    :param on_acked: called in the drainer thread with the sequence numbers of each batch
        of records Kafka confirmed (after they were deleted from the spool).
    """

    def __init__(self, spool: Spool, producer_conf: dict[str, Any], *,
                 on_acked: Callable[[list[int]], None] | None = None,
                 max_inflight: int = 500, max_inflight_bytes: int = 2 << 20,
                 idle_poll_s: float = 0.5, backoff_max_s: float = 30.0) -> None:
        self.spool = spool
        self._conf = dict(producer_conf)
        self._conf.setdefault("error_cb", self._on_error)
        # librdkafka's own log lines go through logging (served by poll), not raw stderr
        self._conf.setdefault("logger", logging.getLogger("pipeline.edges.spool.librdkafka"))
        self._on_acked = on_acked
        self._max_inflight = max_inflight
        self._max_inflight_bytes = max_inflight_bytes
        self._idle_poll_s = idle_poll_s
        self._backoff_max_s = backoff_max_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self._cursor = 0
        self._inflight: dict[int, int] = {}
        self._inflight_bytes = 0
        self._acked: list[int] = []
        self._failed = False
        self._fatal = False
        self._poison: list[tuple[int, str]] = []
        self._backoff = 0.0
        self._flush_s = 5.0
        self.delivered = 0
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Drainer:
        self._thread = threading.Thread(target=self._run, name=f"drainer-{self.spool.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop; records in flight get ``timeout`` seconds to be confirmed (the rest stays
        spooled and is sent on the next start)."""
        self._flush_s = min(timeout, 5.0)
        self._stop.set()
        with self.spool._appended:
            self.spool._appended.notify_all()
        if self._thread is not None:
            self._thread.join(timeout + 5.0)
        self._thread = None

    def drain(self, timeout: float) -> bool:
        """Wait until the spool is empty (True) or the timeout passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.spool.depth() == 0:
                return True
            time.sleep(0.05)
        return self.spool.depth() == 0

    # -- the loop ----------------------------------------------------------------------

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer
        return Producer(self._conf)

    def _run(self) -> None:
        self._producer = self._new_producer()
        try:
            while not self._stop.is_set():
                try:
                    self._step()
                except SpoolError as exc:
                    self._spool_failed(exc)
            self._finish(self._flush_s)
        except Exception:
            logger.exception("spool %s: drainer failed", self.spool.name)
            raise

    def _spool_failed(self, exc: SpoolError) -> None:
        """The spool file refused a write (a full disk refuses even a delete in WAL mode):
        keep sending and retry the deletes with backoff until space returns. Delivered
        records not yet deleted stay acknowledged in memory (or, after a crash, are sent
        again: duplicates, never a loss)."""
        if self.last_error != str(exc):
            logger.error("%s; the drainer retries until there is room", exc)
        self.last_error = str(exc)
        # a short cap: whoever frees the disk should see the spool drain soon after
        self._backoff = min(self._backoff_max_s, 5.0, max(1.0, self._backoff * 2))
        self._stop.wait(self._backoff)

    def _step(self) -> None:
        if self._failed or self._fatal:
            self._recover()
            return
        sent = self._send_more()
        self._producer.poll(0.05 if self._inflight else 0)
        self._settle()
        if not sent and not self._inflight:
            self.spool.wait_appended(self._idle_poll_s)

    def _send_more(self) -> int:
        if len(self._inflight) >= self._max_inflight:
            return 0
        room = self._max_inflight - len(self._inflight)
        sent = 0
        for rec in self.spool.read(self._cursor, min(room, 500)):
            if self._inflight_bytes >= self._max_inflight_bytes or self._failed:
                break
            outcome = self._produce(rec)
            if outcome == "failed":
                break
            self._cursor = rec.seq
            if outcome == "poison":
                continue
            self._inflight[rec.seq] = len(rec.value)
            self._inflight_bytes += len(rec.value)
            sent += 1
        return sent

    def _produce(self, rec: SpoolRecord) -> str:
        """Hand one record to librdkafka: ``sent``; ``poison`` when it is refused for good
        before sending (a record over ``message.max.bytes``: quarantined like one the
        broker refuses); ``failed`` for any other refusal (retried after a recovery)."""
        def produce() -> None:
            self._producer.produce(
                rec.topic, value=rec.value, key=rec.key, headers=list(rec.headers) or None,
                on_delivery=lambda err, msg, seq=rec.seq: self._on_delivery(seq, err))

        try:
            try:  # once as it is (retry's closures cost a microsecond on every record)
                produce()
            except BufferError:  # librdkafka's queue is full: let it send some
                retry(produce, on=BufferError, wait=lambda: self._producer.poll(0.1))
            return "sent"
        except Exception as exc:
            from confluent_kafka import KafkaException
            if not isinstance(exc, KafkaException):
                raise
            err = exc.args[0]
            if err.name() in POISON_ERRORS:
                self._poison.append((rec.seq, f"{err.name()}: {err.str()}"))
                return "poison"
            self.last_error = f"{err.name()}: {err.str()}"
            self._failed = True
            return "failed"

    def _on_delivery(self, seq: int, err: Any) -> None:
        self._inflight_bytes -= self._inflight.pop(seq, 0)
        if err is None:
            self._acked.append(seq)
            return
        name = err.name()
        if name in POISON_ERRORS:
            self._poison.append((seq, f"{name}: {err.str()}"))
            return
        self.last_error = f"{name}: {err.str()}"
        if err.fatal():
            self._fatal = True
        if not self._failed:
            logger.warning("spool %s: delivery failed (%s); records stay spooled and are "
                           "sent again", self.spool.name, self.last_error)
        self._failed = True

    def _on_error(self, err: Any) -> None:
        self.last_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = True
        logger.info("spool %s: kafka: %s", self.spool.name, self.last_error)

    def _settle(self) -> None:
        for seq, reason in self._poison:
            logger.error("spool %s: record %d can never be delivered (%s); moved to "
                         "quarantine", self.spool.name, seq, reason)
            self.spool.quarantine(seq, reason)
        self._poison.clear()
        if not self._acked:
            return
        acked, self._acked = self._acked, []
        try:
            self.spool.delete(acked)
        except SpoolError:
            self._acked = acked + self._acked  # delivered: deleted once there is room
            raise
        self.delivered += len(acked)
        self._backoff = 0.0
        if self._on_acked is not None:
            self._on_acked(acked)

    def _recover(self) -> None:
        """After a failed delivery: let everything in flight resolve, then resend from the
        oldest record left, so no later record overtakes an earlier one for good."""
        while self._inflight and not self._stop.is_set():
            self._producer.poll(0.2)
            self._settle()
        self._settle()
        if self._fatal:
            logger.warning("spool %s: producer hit a fatal error (%s); starting a new one",
                           self.spool.name, self.last_error)
            self._producer = self._new_producer()
            self._fatal = False
        self._backoff = min(self._backoff_max_s, max(1.0, self._backoff * 2))
        self._stop.wait(self._backoff)
        self._cursor = 0
        self._inflight.clear()
        self._inflight_bytes = 0
        self._failed = False

    def _finish(self, timeout: float) -> None:
        if self._producer is not None:
            self._producer.flush(timeout)
            self._settle()
