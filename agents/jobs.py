"""Stage 2: canonical events -> per-job state table -> canonical events and job states out.

For every canonical event: fold it into the job's state (the same fold as ``jobstream
fold``; the table read through a bounded cache of folds, :mod:`agents.states`), then
enrich, anonymize and emit the event to ``hpc.jobs.events`` and the job's document(s) to
``hpc.jobs.state``. A *duplicate* event changes no state but is emitted
again all the same, and the table entry written again: after a crash the table (RocksDB,
written at once) can be ahead of the outputs and of its own changelog (flushed at
commit), and re-emitting is what makes them catch up. The sink
is idempotent (events by id, states by revision), so this costs a no-op write, not a
double count.

Job states are emitted per *batch*, not per event: a job's events come in bursts (a
Flux submit, validate, depend, priority within milliseconds; alloc, prolog, start; the
end), and each state is the whole document, so only the last of a burst matters. The
agent marks the job pending and keeps the event unacknowledged; :class:`PendingStates`
emits each pending job's latest state once, after ``STATE_BATCH`` events or
``STATE_FLUSH_S`` after the first one (a timer), and only then acknowledges the events.
Faust commits an offset only once its event is acknowledged and flushes its producer
before committing, so a crash can lose no state: the events are read again. This halves
the worker's work per event (the fold's documents, their Avro encoding and the sends).

Timers: queue snapshots of this worker's partitions every ``worker.snapshot_interval_s``,
and the expiry of finished jobs after ``worker.done_grace_s`` (a control message through
the canonical topic, since a table may only change inside its stream).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from agents.states import JobStates, decode_state
from pipeline.anonymize import IDENTITY_FIELDS
from pipeline.fold import JobFold
from pipeline.metrics import WORKER_EVENTS_FOLDED, WORKER_RECORDS_PUBLISHED, LastEventTime
from pipeline.model import JobEvent
from pipeline.snapshots import JobSummary, build_snapshots, summarize
from pipeline.wire import EXPIRE, decode_canonical, encode_control

if TYPE_CHECKING:
    from agents.app import Worker

__all__ = ["register"]

logger = logging.getLogger(__name__)


class ActiveJobs:
    """In-memory view of this worker's jobs for snapshots and expiry: key -> summary.

    Rebuilt from the table whenever partitions move; updated as states change.
    """

    def __init__(self) -> None:
        self.jobs: dict[bytes, tuple[int, JobSummary, float | None]] = {}
        self.partitions: set[int] = set()
        self.stale = True

    def update(self, key: bytes, partition: int, summary: JobSummary, now: float) -> None:
        previous = self.jobs.get(key)
        done_since = None
        if summary.state == "done":
            done_since = previous[2] if previous and previous[2] is not None else now
        self.jobs[key] = (partition, summary, done_since)

    def expired(self, now: float, grace_s: float) -> list[bytes]:
        return [k for k, (p, _, done) in self.jobs.items()
                if done is not None and now - done >= grace_s and p in self.partitions]


#: emit the pending job states after this many events ...
STATE_BATCH = 500
#: ... or this long after the first of them (the latency it adds, at most)
STATE_FLUSH_S = 0.05


class PendingStates:
    """Jobs whose state is not emitted yet (key -> partition, latest fold) and the events
    waiting for it, acknowledged once it is."""

    def __init__(self) -> None:
        self.folds: dict[bytes, tuple[int, JobFold]] = {}
        self.events: list[Any] = []
        self.since = 0.0

    def add(self, key: bytes, partition: int, fold: JobFold, event: Any) -> None:
        if not self.events:
            self.since = time.monotonic()
        self.folds[key] = (partition, fold)
        self.events.append(event)

    def take(self) -> tuple[dict[bytes, tuple[int, JobFold]], list[Any]]:
        """Everything pending, and empty again (no await in between: the agent and the
        timer both flush)."""
        folds, events = self.folds, self.events
        self.folds, self.events = {}, []
        return folds, events


def register(worker: Worker) -> None:
    app, table, cfg = worker.app, worker.jobs, worker.cfg
    states = JobStates(table)

    @app.on_partitions_revoked.connect
    async def forget_revoked(app: Any, revoked: Any, **kwargs: Any) -> None:
        states.clear()

    @app.on_partitions_assigned.connect
    async def forget_assigned(app: Any, assigned: Any, **kwargs: Any) -> None:
        states.clear()
    active = ActiveJobs()
    pending = PendingStates()
    sent_events = WORKER_RECORDS_PUBLISHED.labels(worker.events.get_topic_name())
    sent_states = WORKER_RECORDS_PUBLISHED.labels(worker.state.get_topic_name())
    sent_snapshots = WORKER_RECORDS_PUBLISHED.labels(worker.snapshots.get_topic_name())
    folded: dict[str, Any] = {}  # cluster -> its counter, looked up once
    last_event = LastEventTime()

    def event_output(ev: JobEvent, state: dict[str, Any]) -> dict[str, Any]:
        event = ev.to_dict()
        event["facts"] = worker.enricher.facts(event["facts"])
        return worker.anonymizer.event(event, _identities(worker, state))

    def documents(fold: JobFold) -> list[dict[str, Any]]:
        return [worker.anonymizer.document(worker.enricher.facts(d)) for d in fold.documents()]

    async def emit_states() -> None:
        folds, events = pending.take()
        now = time.time()
        for key, (partition, fold) in folds.items():
            docs = documents(fold)
            for doc in docs:
                await worker.state.send(key=key, value=worker.wire.encode_state(doc))
            sent_states.inc(len(docs))
            if docs:
                active.update(key, partition, summarize(docs[-1]), now)
        for event in events:
            event.ack()

    @app.agent(worker.canonical, name="jobs", concurrency=1)
    async def jobs(stream):  # type: ignore[no-untyped-def]
        async for event in stream.noack().events():
            message = event.message
            key: bytes = message.key
            item = decode_canonical(message.value)
            if item == EXPIRE:
                await emit_states()  # a pending state must not follow the tombstone
                done = states.get(key)
                if done is not None and done.done:
                    states.delete(key)
                    active.jobs.pop(key, None)
                    await worker.state.send(key=key, value=None)
                    sent_states.inc()
                event.ack()
                continue
            assert isinstance(item, JobEvent)
            fold = states.get(key)
            if fold is None:
                fold = JobFold()
            fold.add(item)
            # Written even for a duplicate: after a crash the local store can be ahead of the
            # changelog (written at once vs. flushed at commit); rewriting re-sends the
            # changelog entry, as re-emitting catches the outputs up.
            value = states.put(key, fold)
            await worker.events.send(key=key,
                                     value=worker.wire.encode_event(event_output(item, value)))
            sent_events.inc()
            counter = folded.get(item.cluster)
            if counter is None:
                counter = folded[item.cluster] = WORKER_EVENTS_FOLDED.labels(item.cluster)
            counter.inc()
            last_event.saw(item.cluster, item.timestamp)
            pending.add(key, message.partition, fold, event)
            if len(pending.events) >= STATE_BATCH:
                await emit_states()

    @app.timer(interval=STATE_FLUSH_S)
    async def emit_pending_states() -> None:
        if pending.events and time.monotonic() - pending.since >= STATE_FLUSH_S:
            await emit_states()

    @app.timer(interval=cfg.worker.snapshot_interval_s)
    async def queue_snapshots() -> None:
        assigned = {tp.partition for tp in app.assignor.assigned_actives()
                    if tp.topic == worker.canonical.get_topic_name()}
        if assigned != active.partitions or active.stale:
            _rebuild(active, worker, assigned)
        jobs = (s for p, s, _ in active.jobs.values() if p in assigned)
        snaps = build_snapshots(jobs, time.time(), worker.name, assigned,
                                cfg.worker.snapshot_interval_s)
        logger.info("queue snapshots: partitions=%s jobs=%d queues=%d", sorted(assigned),
                    len(active.jobs), len(snaps))
        for snap in snaps:
            key = f"{snap['cluster']}:{snap['queue']}".encode()
            await worker.snapshots.send(key=key, value=worker.wire.encode_snapshot(snap))
        sent_snapshots.inc(len(snaps))

    @app.timer(interval=max(cfg.worker.done_grace_s / 4, 1.0))
    async def expire_done() -> None:
        for key in active.expired(time.time(), cfg.worker.done_grace_s):
            await worker.canonical.send(key=key, value=encode_control(EXPIRE))


def _identities(worker: Worker, state: dict[str, Any]) -> set[tuple[str, Any]]:
    """(field, value) of every identity a job's events state (enriched), for the
    anonymization of free text; nothing when the policy is off."""
    if not worker.anonymizer.active:
        return set()
    return {(f, v) for e in state["events"] for f, v in worker.enricher.facts(e["facts"]).items()
            if f in IDENTITY_FIELDS and v is not None}


def _rebuild(active: ActiveJobs, worker: Worker, assigned: set[int]) -> None:
    """Re-read the summaries of the assigned partitions' jobs from the table.

    The table iterates only the keys of partitions this worker holds, without saying which;
    the partition is the canonical topic's (same count and partitioner as the changelog).
    """
    now = time.time()
    topic = worker.canonical.get_topic_name()
    active.jobs = {k: v for k, v in active.jobs.items() if v[0] in assigned}
    for key, value in worker.jobs.items():
        state = decode_state(value)
        if key in active.jobs or state is None:
            continue
        docs = JobFold.from_dict(state).documents()
        if docs:
            partition = worker.app.producer.key_partition(topic, key).partition
            active.update(key, partition, summarize(docs[-1]), now)
    active.partitions = assigned
    active.stale = False
