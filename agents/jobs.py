"""The jobs stage: raw records (and re-keyed events) -> per-job state table -> canonical
events and job states out, in one hop.

**One hop.** Every jobstream producer keys a raw record by its job (``cluster:job_id``)
and partitions it with murmur2, as Faust partitions the table: such a record is already
in its job's table partition and is folded where it is read. A record that is not (no
key, another key than its events', another partitioner: a foreign producer or a raw topic
written by a jobstream before 0.9) has its events re-keyed once through the internal
canonical topic, read by this same agent, and folded like the rest. The fold does not
depend on order, so a job whose records take both paths folds the same.

**Batches.** An event is folded into its job's state at once and emitted to
``hpc.jobs.events``; the job's table entry, its documents for ``hpc.jobs.state`` and the
acknowledgement of the records wait for the batch, which ends after ``STATE_BATCH`` events
or ``STATE_FLUSH_S`` after its first record (a timer). A job's events come in bursts (a
Flux submit, validate, depend, priority within milliseconds; alloc, prolog, start; the
end), so a burst costs one table write, one changelog record and one state. While the
worker is catching up (more than ``BEHIND_RECORDS`` records past the batch's are already
in Kafka) the timer waits up to ``STATE_FLUSH_BEHIND_S``: under a backlog the count ends
the batches, and a job's events make one state per batch, not one per quarter second.
The batch's outputs and changelog records (:mod:`agents.table`) are flushed before its
records are acknowledged, and Faust commits only acknowledged offsets: a crash loses
nothing, the records are read again. A rebalance, and stopping, wait until every record
taken is acknowledged (``stream_wait_empty``; :mod:`agents.intake` tracks them), so a
batch is always written whole before its partitions go; the timer ends it within
``STATE_FLUSH_BEHIND_S``.

A job state the state topic's schema cannot hold (a value beyond its types) goes to the
DLQ as JSON, stage ``state``, and the batch goes on.

A *duplicate* event changes no state but is emitted again all the same, and its job's
table entry written again: after a crash the table (RocksDB, written at once) can be ahead
of the outputs and of its own changelog (confirmed at the batch's end), and re-emitting is
what makes them catch up. The sink is idempotent (events by id, states by revision).

Timers: queue snapshots of this worker's partitions every ``worker.snapshot_interval_s``,
and the expiry of finished jobs after ``worker.done_grace_s`` (a control message through
the canonical topic, since a table may only change inside its stream).
"""

from __future__ import annotations

import asyncio
import logging
import math
import struct
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka.partitioner import murmur2
from faust.streams import _current_event
from faust.types import TP

from agents.canonical import (
    RecentIds,
    Rejected,
    canonical_events,
    dlq_headers,
    part_headers,
)
from agents.intake import Intake, acknowledge
from agents.outputs import Outputs
from agents.states import JobStates, decode_state
from pipeline.codecs.wire import EXPIRE, decode_canonical, encode_canonical, encode_control
from pipeline.core.anonymize import IDENTITY_FIELDS
from pipeline.core.jsontext import dumps
from pipeline.core.model import JobEvent
from pipeline.core.snapshots import JobSummary, build_snapshots, summarize
from pipeline.fold import JobFold, StateTooLarge, folds
from pipeline.runtime.crashguard import CrashGuard
from pipeline.runtime.errors import ParseError, ServiceError
from pipeline.runtime.metrics import (
    DLQ_RECORDS,
    WORKER_DUPLICATES_DROPPED,
    WORKER_EVENTS_FOLDED,
    WORKER_RECORDS_PUBLISHED,
    WORKER_RECORDS_READ,
    LastEventTime,
)

if TYPE_CHECKING:
    from agents.app import Worker

__all__ = ["JobsStage", "job_partition", "register", "topic_partitions"]

logger = logging.getLogger(__name__)

#: end the batch after this many events ...
STATE_BATCH = 5000
#: ... or this long after its first record (the latency it adds, at most) ...
STATE_FLUSH_S = 0.25
#: ... or, while more than this many records past the batch's wait in Kafka, ...
BEHIND_RECORDS = 1000
#: ... this long after its first record
STATE_FLUSH_BEHIND_S = 2.0

_U32 = 1 << 32


@lru_cache(maxsize=1 << 12)
def job_partition(key: bytes, partitions: int) -> int:
    """The partition of a job key under murmur2, as Faust's (aiokafka's) default
    partitioner and librdkafka's ``murmur2_random`` put it (cached: a job's records come
    in bursts and the hash is pure Python; an entry costs ~220 bytes, so the jobs of the
    last few thousand records, not every job a worker tracks)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def topic_partitions(consumer: Any, topic: str) -> int | None:
    """The number of partitions of ``topic`` (None: not known yet). Faust's
    ``Consumer.topic_partitions`` reads the group coordinator's snapshot of the
    subscription, which only the group's leader fills; every other worker asks the
    consumer's metadata, or it would re-key all its records through the canonical topic."""
    count: int | None = consumer.topic_partitions(topic)
    if count is None:
        partitions = consumer._thread._ensure_consumer().partitions_for_topic(topic)  # noqa: SLF001
        count = len(partitions) if partitions else None
    return count


class as_current:  # noqa: N801 - used as a context manager, like contextlib's
    """Make ``message`` Faust's current event's: a table reads and writes the partition
    of the current event, and refuses a write outside one. Records reach the stage
    without a Faust event (:mod:`agents.intake`), and a batch is written after its records
    were read, from the fetch loop or the timer. The table reads ``.message`` of its
    current event, through a weak reference: this object is that event."""

    __slots__ = ("__weakref__", "_token", "message")

    def __init__(self, message: Any) -> None:
        self.message = message

    def __enter__(self) -> None:
        self._token = _current_event.set(weakref.ref(self))

    def __exit__(self, *exc: object) -> None:
        _current_event.reset(self._token)


class ActiveJobs:
    """In-memory view of this worker's jobs for snapshots and expiry: per partition, job
    key -> packed summary, and the time each done job was first seen done.

    Rebuilt from the table whenever partitions move; updated as states change. A worker
    may track a million pending jobs, so a job costs here its key and a packed summary of
    44 bytes (an 80-byte object), its strings numbered once for all jobs: ~180 bytes,
    against ~290 for a :class:`JobSummary` of its own (BENCHMARKS.md). Counts of 2**32
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


class Batch:
    """The jobs folded since the last flush (key -> the last message of the job read, its
    fold) and the messages to acknowledge once their outputs are confirmed."""

    def __init__(self) -> None:
        self.folds: dict[bytes, tuple[Any, JobFold]] = {}
        self.records: list[Any] = []
        self.ends: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset
        self.events = 0
        self.since = 0.0
        # the batch's counts, added to the metrics at its end (a Prometheus counter's
        # inc() takes a lock: three per event were 2 % of the stage's time offline)
        self.read = 0
        self.folded: Counter[str] = Counter()  # cluster -> events folded
        self.sent: Counter[str] = Counter()  # topic -> records sent

    def took(self, message: Any) -> None:
        if not self.records:
            self.since = time.monotonic()
        self.records.append(message)
        self.ends[message.topic, message.partition] = message.offset

    def due(self, now: float, behind: Callable[[], bool]) -> bool:
        """Whether the timer ends the batch now (``behind()``: whether the worker is
        catching up, asked only when it matters)."""
        if not self.records:
            return False
        age = now - self.since
        return age >= STATE_FLUSH_BEHIND_S or (age >= STATE_FLUSH_S and not behind())


class JobsStage:
    """Folds a worker's records into its jobs' states, in batches (module docstring)."""

    def __init__(self, worker: Worker, outputs: Outputs, states: JobStates,
                 active: ActiveJobs, acknowledge: Callable[[Any], None],
                 guard: CrashGuard | None = None) -> None:
        self.worker, self.outputs, self.states, self.active = worker, outputs, states, active
        #: where this worker is in its records, for the next run if it dies there (a guard
        #: in memory only when none is given: tests, the bench)
        self.guard = guard or CrashGuard(None, innocent=(ServiceError,))
        #: a message's outputs are confirmed: it may be committed
        self.acknowledge = acknowledge
        self.topics = worker.cfg.topics
        self.raw = worker.raw.get_topic_name()
        self.canonical = worker.canonical.get_topic_name()
        self.partitions = worker.cfg.kafka.partitions
        self.max_bytes = worker.cfg.worker.max_event_bytes
        self.recent = RecentIds()
        self.batch = Batch()
        self._flushing = asyncio.Lock()
        self._raw_partitions: int | None = None
        self._read = WORKER_RECORDS_READ.labels(self.raw)
        self._sent = {t: WORKER_RECORDS_PUBLISHED.labels(t)
                      for t in (self.topics.events, self.topics.state, self.canonical)}
        self._folded: dict[str, Any] = {}  # cluster -> its counter, looked up once
        self._last_event = LastEventTime()

    def take(self, message: Any) -> Awaitable[None] | None:
        """One message of the raw or the canonical topic, as Kafka gave it; what must be
        awaited before the next (the batch's flush when it is full, an expiry), or None.

        A message the worker died handling in each of its last runs (:attr:`guard`) is
        not handled a third time: to the DLQ as it came, reason ``crashed-worker``."""
        coord = (message.topic, message.partition, message.offset)
        if self.guard.poisoned(coord):
            self._dead_poison(message)
        else:
            with self.guard.handling(coord), as_current(message):
                if message.topic == self.raw:
                    self._take_raw(message)
                else:
                    item = decode_canonical(message.value)
                    if item == EXPIRE:
                        return self._expire(message.key, message)
                    assert isinstance(item, JobEvent)
                    self._fold(message.key, message, item)
        self.batch.took(message)
        if self.batch.events >= STATE_BATCH:
            return self.flush()
        return None

    def _dead_poison(self, message: Any) -> None:
        deaths = self.guard.threshold
        rejected = Rejected("crashed-worker", f"the worker died while handling this record "
                                              f"in each of its last {deaths} runs")
        logger.error("record %s[%d]@%d: %s; to %s", message.topic, message.partition,
                     message.offset, rejected.error, self.topics.dlq)
        self.outputs.send(self.topics.dlq, message.key, message.value,
                          dlq_headers(message, rejected))
        DLQ_RECORDS.labels("normalize", rejected.reason).inc()

    def behind(self) -> bool:
        """Whether more than ``BEHIND_RECORDS`` records past the batch's are already in
        Kafka, by the high watermarks of the consumer's last fetches."""
        consumer = self.worker.app.consumer
        waiting = 0
        for (topic, partition), offset in self.batch.ends.items():
            try:
                end = consumer.highwater(TP(topic, partition))
            except AssertionError:  # aiokafka's: the partition was just revoked
                continue
            if end is not None:
                waiting += max(end - offset - 1, 0)
        return waiting > BEHIND_RECORDS

    async def flush(self) -> None:
        """Write the batch: each job's table entry and states, every output confirmed,
        then its records acknowledged."""
        async with self._flushing:
            batch, self.batch = self.batch, Batch()
            if not batch.records:
                return
            now = time.time()
            sent = 0
            guard = self.guard
            for key, (message, fold) in batch.folds.items():
                coord = "job " + key.decode(errors="replace")
                if guard.poisoned(coord):
                    self._dead_job(key, message, None, Rejected(
                        "crashed-worker", f"the worker died while writing this job's state "
                        f"in each of its last {guard.threshold} runs"))
                    continue
                try:
                    with guard.handling(coord):
                        sent += self._write_job(key, message, fold, now)
                except ServiceError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one job's failure must not stop all
                    self._dead_job(key, message, fold, exc)
            batch.sent[self.topics.state] += sent
            self._count(batch)
            await self.outputs.flush()
            self.states.flushed()
            for message in batch.records:
                self.acknowledge(message)

    def _write_job(self, key: bytes, message: Any, fold: JobFold, now: float) -> int:
        """One job's table entry and states; the number of states sent."""
        with as_current(message):
            self.states.put(key, fold)
        sent = 0
        written = None
        for doc in fold.documents():
            doc = self.worker.anonymizer.document(self.worker.enricher.facts(doc))
            try:
                value = self.worker.wire.encode_state(doc)
                if len(value) > self.max_bytes:
                    raise ParseError("too-large", f"the job state is {len(value)} bytes, over "
                                                  f"worker.max_event_bytes ({self.max_bytes})")
            except ParseError as exc:
                self._dead_state(key, message, doc, exc)
                continue
            self.outputs.send(self.topics.state, key, value)
            sent += 1
            written = doc
        if written is not None:
            self.active.update(key, message.partition, summarize(written), now)
        return sent

    def _dead_job(self, key: bytes, message: Any, fold: JobFold | None,
                  exc: Exception) -> None:
        """A job whose state cannot be written (over its budget even with one event of
        each kind, a bug, or the worker died writing it: ``fold`` None): its latest
        document to the DLQ, and the batch goes on. The job goes on from its last state
        written, and is judged again at its next event."""
        if isinstance(exc, Rejected):
            rejected = exc
            logger.error("job state of %s: %s; to %s", key.decode(errors="replace"),
                         exc.error, self.topics.dlq)
        elif isinstance(exc, StateTooLarge):
            rejected = Rejected("state-too-large", str(exc))
            logger.warning("job state of %s cannot be kept, to %s: %s",
                           key.decode(errors="replace"), self.topics.dlq, exc)
        else:
            rejected = Rejected("internal-error", f"{type(exc).__name__}: {exc}")
            logger.error("job state of %s failed, to %s", key.decode(errors="replace"),
                         self.topics.dlq, exc_info=exc)
        self.states.forget(key)
        value = None
        try:
            docs = fold.documents() if fold is not None else []
            value = dumps(docs[-1]) if docs else None
        except Exception:  # noqa: BLE001 - the record says why; the fold may be what fails
            logger.debug("no document of %s for its DLQ record", key, exc_info=True)
        self.outputs.send(self.topics.dlq, key, value, dlq_headers(message, rejected,
                                                                   stage="state"))
        DLQ_RECORDS.labels("state", rejected.reason).inc()

    def _dead_state(self, key: bytes, message: Any, doc: dict[str, Any], exc: ParseError) -> None:
        """A job state the state topic's schema cannot hold (a value beyond its types, from
        events admitted before the check that refuses them): to the DLQ as JSON, and the
        stream goes on; the job's later states are judged again."""
        logger.warning("job state of %s cannot be written, to %s: %s", key.decode(errors="replace"),
                       self.topics.dlq, exc.message)
        self.outputs.send(self.topics.dlq, key, dumps(doc),
                          dlq_headers(message, Rejected(exc.reason, exc.message), stage="state"))
        DLQ_RECORDS.labels("state", exc.reason).inc()

    def _count(self, batch: Batch) -> None:
        self._read.inc(batch.read)
        for topic, n in batch.sent.items():
            self._sent[topic].inc(n)
        for cluster, n in batch.folded.items():
            counter = self._folded.get(cluster)
            if counter is None:
                counter = self._folded[cluster] = WORKER_EVENTS_FOLDED.labels(cluster)
            counter.inc(n)

    def _take_raw(self, message: Any) -> None:
        self.batch.read += 1
        try:
            events, parts = canonical_events(self.worker.wire, message.value, self.max_bytes)
        except Rejected as rejected:
            logger.warning("bad raw record %s[%d]@%d: %s", message.topic, message.partition,
                           message.offset, rejected.error,
                           exc_info=rejected.__cause__ if rejected.reason == "internal-error"
                           else None)
            self.outputs.send(self.topics.dlq, message.key, message.value,
                              dlq_headers(message, rejected))
            DLQ_RECORDS.labels("normalize", rejected.reason).inc()
            return
        if parts:
            # one bad job of a multi-job record: that job to the DLQ, its neighbours on
            for part in parts:
                logger.warning("bad job %d of raw record %s[%d]@%d: %s", part.index,
                               message.topic, message.partition, message.offset,
                               part.message, exc_info=part.cause)
                self.outputs.send(self.topics.dlq, message.key, part.payload,
                                  part_headers(message, part))
                DLQ_RECORDS.labels("normalize", part.reason).inc()
        home = self._is_home(message)
        for ev, data in events:
            if self.recent.seen(data):
                WORKER_DUPLICATES_DROPPED.inc()
                continue
            key = ev.key.encode()
            if home and key == message.key:
                self._fold(key, message, ev)
            else:
                self.outputs.send(self.canonical, key, data)
                self.batch.sent[self.canonical] += 1

    def _is_home(self, message: Any) -> bool:
        """Whether a raw record is in its key's table partition (its events of that key
        can be folded here)."""
        if message.key is None:
            return False
        if self._raw_partitions is None:
            self._raw_partitions = topic_partitions(self.worker.app.consumer, self.raw)
            if self._raw_partitions is not None and self._raw_partitions != self.partitions:
                logger.warning("%s has %d partitions, the worker's table %d "
                               "(kafka.partitions): every raw record is re-keyed through %s",
                               self.raw, self._raw_partitions, self.partitions, self.canonical)
        return (self._raw_partitions == self.partitions
                and job_partition(message.key, self.partitions) == message.partition)

    def _fold(self, key: bytes, message: Any, ev: JobEvent) -> None:
        """Fold one event and emit it; an event that fails (a bug, a value the events
        topic's schema cannot hold) goes to the DLQ as its canonical JSON, stage ``fold``,
        and the record's other events go on."""
        try:
            self._fold_one(key, message, ev)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - one event's failure must not stop all
            reason = exc.reason if isinstance(exc, ParseError) else "internal-error"
            logger.error("event %s of job %s failed, to %s: %s", ev.event_id,
                         key.decode(errors="replace"), self.topics.dlq, exc,
                         exc_info=None if isinstance(exc, ParseError) else exc)
            self.outputs.send(self.topics.dlq, key, encode_canonical(ev), dlq_headers(
                message, Rejected(reason, f"{type(exc).__name__}: {exc}"), stage="fold"))
            DLQ_RECORDS.labels("fold", reason).inc()

    def _fold_one(self, key: bytes, message: Any, ev: JobEvent) -> None:
        if folds(ev):
            fold = self._job(key)
            fold.add(ev)
            self.batch.folds[key] = (message, fold)
            self.batch.events += 1
            self.batch.folded[ev.cluster] += 1
        event = ev.to_dict()
        event["facts"] = self.worker.enricher.facts(event["facts"])
        known = self._identities(self._job(key)) if self.worker.anonymizer.active else ()
        event = self.worker.anonymizer.event(event, known)
        self.outputs.send(self.topics.events, key, self.worker.wire.encode_event(event))
        self.batch.sent[self.topics.events] += 1
        self._last_event.saw(ev.cluster, ev.timestamp)

    def _job(self, key: bytes) -> JobFold:
        """The job's fold as this batch left it (its table entry is written at the end of
        the batch), empty for a job not seen yet."""
        entry = self.batch.folds.get(key)
        if entry is not None:
            return entry[1]
        return self.states.get(key) or JobFold()

    async def _expire(self, key: bytes, message: Any) -> None:
        await self.flush()  # a pending state must not follow the tombstone
        with as_current(message):
            done = self.states.get(key)
            expired = done is not None and done.done
            if expired:
                self.states.delete(key)
        if expired:
            self.active.forget(key)
            self.outputs.send(self.topics.state, key, None)
            self._sent[self.topics.state].inc()
            await self.outputs.flush()
            self.states.flushed()
        self.acknowledge(message)

    def _identities(self, fold: JobFold) -> set[tuple[str, Any]]:
        """(field, value) of every identity a job's events state (enriched), for the
        anonymization of free text."""
        facts = self.worker.enricher.facts
        return {(f, v) for ev in fold.events() for f, v in facts(ev.facts).items()
                if f in IDENTITY_FIELDS and v is not None}


def register(worker: Worker) -> None:
    app, cfg = worker.app, worker.cfg
    states = JobStates(worker.jobs, max_bytes=cfg.worker.max_state_bytes)
    active = ActiveJobs()
    raw, canonical = worker.raw.get_topic_name(), worker.canonical.get_topic_name()
    guard = CrashGuard.claim(Path(app.conf.datadir), "jobs-stage", innocent=(ServiceError,))
    stage = JobsStage(worker, worker.outputs, states, active, partial(acknowledge, app), guard)
    Intake(app, {raw, canonical}, stage).install()

    @app.on_partitions_revoked.connect
    async def forget_revoked(app: Any, revoked: Any, **kwargs: Any) -> None:
        states.clear()

    @app.on_partitions_assigned.connect
    async def forget_assigned(app: Any, assigned: Any, **kwargs: Any) -> None:
        states.clear()

    # subscribes the topics; their records go to the stage by the intake, not this stream
    @app.agent(app.topic(raw, canonical, key_serializer="raw", value_serializer="raw"),
               name="jobs", concurrency=1)
    async def jobs(stream):  # type: ignore[no-untyped-def]
        async for _ in stream.noack().events():
            raise RuntimeError("a jobs record reached the agent's stream, not the intake")

    @app.task
    async def end_batches() -> None:
        # A plain loop, not a Faust timer: Faust's timers end as soon as the worker begins
        # to stop, and stopping waits until every record delivered is acknowledged, so
        # the batch open at that moment must still end, or the worker never stops.
        while True:
            await asyncio.sleep(STATE_FLUSH_S / 5)
            if stage.batch.due(time.monotonic(), stage.behind):
                await stage.flush()

    sent_snapshots = WORKER_RECORDS_PUBLISHED.labels(cfg.topics.snapshots)

    @app.timer(interval=cfg.worker.snapshot_interval_s)
    async def queue_snapshots() -> None:
        assigned = {tp.partition for tp in app.assignor.assigned_actives()
                    if tp.topic == stage.canonical}
        if assigned != active.partitions or active.stale:
            _rebuild(active, worker, assigned)
        snaps = build_snapshots(active.summaries(assigned), time.time(), worker.name, assigned,
                                cfg.worker.snapshot_interval_s)
        logger.info("queue snapshots: partitions=%s jobs=%d queues=%d", sorted(assigned),
                    len(active), len(snaps))
        for snap in snaps:
            key = f"{snap['cluster']}:{snap['queue']}".encode()
            worker.outputs.send(cfg.topics.snapshots, key, worker.wire.encode_snapshot(snap))
        worker.outputs.poll()
        sent_snapshots.inc(len(snaps))

    @app.timer(interval=max(cfg.worker.done_grace_s / 4, 1.0))
    async def expire_done() -> None:
        for key in active.expired(time.time(), cfg.worker.done_grace_s):
            worker.outputs.send(stage.canonical, key, encode_control(EXPIRE))
        worker.outputs.poll()


def _rebuild(active: ActiveJobs, worker: Worker, assigned: set[int]) -> None:
    """Re-read the summaries of the assigned partitions' jobs from the table.

    The table iterates only the keys of partitions this worker holds, without saying which;
    the partition is the key's under murmur2 (the table's partitioner).
    """
    now = time.time()
    partitions = worker.cfg.kafka.partitions
    active.keep(assigned)
    for key, value in worker.jobs.items():
        partition = job_partition(key, partitions)
        if active.tracks(key, partition):
            continue
        state = decode_state(value)
        if state is None:
            continue
        docs = JobFold.from_dict(state).documents()
        if docs:
            active.update(key, partition, summarize(docs[-1]), now)
    active.partitions = assigned
    active.stale = False
