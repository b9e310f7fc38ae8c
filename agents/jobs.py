"""The jobs stage: raw records (and re-keyed events) -> per-job state table -> canonical
events and job states out, in one hop; and the nodes' records the same way -> per-node
state table -> node states out.

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
The batch's outputs and changelog records (:mod:`agents.table`) are confirmed before its
records are acknowledged, and Faust commits only acknowledged offsets: a crash loses
nothing, the records are read again. A rebalance, and stopping, wait until every record
taken is acknowledged (``stream_wait_empty``; :mod:`agents.intake` tracks them), so a
batch is always written whole before its partitions go; the timer ends it within
``STATE_FLUSH_BEHIND_S``.

**Overlap.** Kafka takes 50 to 120 ms to confirm a batch of 5,000 events; waiting for it
before folding the next left the worker idle while the sink and Elasticsearch worked, and
them idle while it folded. A batch's end therefore writes it, cuts the outputs' tally
(:class:`agents.outputs.Tally`: the records sent since the last batch's end) and hands
the tally to a confirmation, which acknowledges the batch's records once Kafka confirmed
them; the next batch is folded meanwhile. Confirmations run one after the other, in the
batches' order, and a batch's end waits for the one before it, so at most two batches
are in flight. The table's entries are written at once, as before: a crash between a
batch's end and its confirmation leaves the table ahead of its changelog, which the
re-emitted duplicates below make good. A record fetched before a rebalance whose batch is
confirmed after it is not acknowledged (:func:`agents.intake.acknowledge`): its partition
is read again from its commit, by this worker or another.

A job state the state topic's schema cannot hold (a value beyond its types) goes to the
DLQ as JSON, stage ``state``, and the batch goes on.

A *duplicate* event changes no state but is emitted again all the same, and its job's
table entry written again: after a crash the table (RocksDB, written at once) can be ahead
of the outputs and of its own changelog (confirmed at the batch's end), and re-emitting is
what makes them catch up. The sink is idempotent (events by id, states by revision).

**Nodes.** A node format's record (:data:`pipeline.parsers.NODE_FORMATS`) gives node
events, keyed ``cluster:node``: each takes the jobs' path (the same batch, the same
routing: folded where it is read when the record is in its node's table partition, else
re-keyed through the canonical topic in a wrapper, :func:`agents.canonical.encode_node_event`)
into the node's :class:`~pipeline.fold.node_state.NodeFold`, kept in the ``nodes`` table
(:class:`agents.states.NodeStates`). At the batch's end each node folded in it has its
table entry written and its document sent to ``hpc.nodes.state`` (keyed ``cluster:node``;
a duplicate rewrites both, as a job's), before the records are acknowledged; a node whose
state cannot be written goes to the DLQ like a job's, and the crash guard knows it as
``node <key>``. Node events are not job events: none goes to ``hpc.jobs.events``; each
goes, as it is folded, to ``hpc.nodes.events`` (keyed ``cluster:node``), as a job's event
to ``hpc.jobs.events``: a copy too, which the sink's ``create`` by ``event_id`` makes one
document (after a crash the table may hold events the topic did not get); a job's
allocation events (below) excepted, which are job events, indexed as such.

**Allocations.** A Flux node drained while it runs a job is ``draining`` (``flux resource
status`` asks the scheduler), which the resource journal does not tell: the jobs'
``alloc`` and ``free`` do. When the stage folds a Flux job's ``alloc`` or ``free`` it
derives the node events ``alloc`` / ``free`` of every host of its allocation
(:func:`pipeline.parsers.flux_resource.job_node_events`), and each takes the node path
above: folded here when the job's message is in the node's partition too, else re-keyed
through the canonical topic. Derived from the job's state, not in normalize, because that
is the one place the allocation is known whatever the order: a live ``free`` response
carries no R (only the ``alloc``'s does, docs/flux.md), a job's ``alloc`` and ``free``
come in separate records, in any order, some re-keyed, and only the job's state holds
both, with the allocation's hosts in the ``alloc``'s ``nodelist`` fact (R's own, kept when
an over-large event loses its R). An ``alloc`` gives its own node events (and a ``free``
folded before it, its node events, which it gave none of then), a ``free`` its own from
the ``alloc`` in the job's state: each event's cost is its hosts', not the job's whole
state again. A job allocated more than
:data:`~pipeline.parsers.flux_resource.MAX_ALLOCATION_HOSTS` hosts gives none (a warning
and ``jobstream_worker_allocations_untracked``): a few characters of host list name up to
100,000 hosts, each a node event, state and document. The node events' ids hash host,
name, job and time: derived again (a copy of the job event, a replay) they are the same
events, which the node fold counts once; an exact copy already sent or folded in this run
is skipped (:class:`RecentIds`). Hosts are R's names: an instance whose R names other
hosts than its brokers (a test instance, R by hwloc) has its jobs' allocations on R's
hosts. Slurm jobs give none: a Slurm poll states whether a node is allocated.

Timers: queue snapshots of this worker's partitions every ``worker.snapshot_interval_s``,
and the expiry of finished jobs after ``worker.done_grace_s`` (a control message through
the canonical topic, since a table may only change inside its stream).

The stage's steps, each with its collaborators: a raw record is normalized
(:func:`agents.canonical.canonical_events`) and its exact copies dropped
(:class:`agents.canonical.RecentIds`); each event is routed (:class:`agents.routing.Home`:
folded here, or re-keyed), folded into its job's state (:class:`agents.states.JobStates`,
the batch: :mod:`agents.batch`) and emitted (:class:`agents.emit.Emitter`, which encodes
the job's states at the batch's end too); what cannot go on goes to the DLQ
(:class:`agents.dead_letters.DeadLetters`). The jobs' summaries for the timers are
:class:`agents.active_jobs.ActiveJobs`, the timers :mod:`agents.job_timers`. What the
stage asks Kafka goes through a :class:`agents.routing.KafkaView`, so that the stage runs
without Kafka as well (the bench, the tests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from agents.active_jobs import ActiveJobs
from agents.active_nodes import ActiveNodes
from agents.batch import BEHIND_RECORDS, STATE_BATCH, STATE_FLUSH_S, Batch, BatchCounters
from agents.canonical import (
    Event,
    RecentIds,
    Rejected,
    canonical_events,
    decode_item,
    fit_node_event,
)
from agents.context import Sender, WorkerContext
from agents.dead_letters import DeadLetters
from agents.emit import Emitter
from agents.faust_patches import reset_current_event, set_current_event
from agents.intake import Intake, acknowledge
from agents.job_timers import JobTimers
from agents.routing import ConsumerView, Home, KafkaView
from agents.states import JobStates, NodeStates
from pipeline.codecs.wire import EXPIRE, Wire
from pipeline.core.anonymize import Anonymizer
from pipeline.core.enrich import Enricher
from pipeline.core.model import JobEvent
from pipeline.core.nodes import NodeEvent
from pipeline.core.snapshots import summarize
from pipeline.fold import JobFold
from pipeline.fold.node_state import NodeFold
from pipeline.kafka.topics import canonical_topic
from pipeline.parsers.flux_resource import (
    MAX_ALLOCATION_HOSTS,
    allocation_hosts,
    job_node_events,
)
from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.metrics import (
    WORKER_ALLOCATIONS_UNTRACKED,
    WORKER_DUPLICATES_DROPPED,
    LastEventTime,
)

__all__ = ["JobsStage", "as_current", "register"]

logger = logging.getLogger(__name__)

#: a Flux job's events that give node events (module docstring, "Allocations")
_ALLOCATION = frozenset({"alloc", "free"})


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
        self._token = set_current_event(self)

    def __exit__(self, *exc: object) -> None:
        reset_current_event(self._token)


class JobsStage:
    """Folds a worker's records into its jobs' states, in batches (module docstring)."""

    def __init__(self, cfg: Config, *, wire: Wire, enricher: Enricher, anonymizer: Anonymizer,
                 outputs: Sender, kafka: KafkaView, states: JobStates, nodes: NodeStates,
                 active: ActiveJobs, acknowledge: Callable[[Any], None],
                 guard: CrashGuard | None = None,
                 active_nodes: ActiveNodes | None = None) -> None:
        self.outputs, self.states, self.active, self.kafka = outputs, states, active, kafka
        self.nodes = nodes
        #: the nodes' summaries for the snapshots' node rows (agents.active_nodes)
        self.active_nodes = active_nodes if active_nodes is not None else ActiveNodes()
        #: where this worker is in its records, for the next run if it dies there (a guard
        #: in memory only when none is given: tests, the bench)
        self.guard = guard or CrashGuard(None, innocent=(ServiceError,))
        #: a message's outputs are confirmed: it may be committed
        self.acknowledge = acknowledge
        self.topics = cfg.topics
        self.raw = cfg.topics.raw
        self.canonical = canonical_topic(cfg.worker.app_id)
        self.wire = wire
        self.max_bytes = cfg.worker.max_event_bytes
        self.recent = RecentIds()
        self.batch = Batch()
        self.home = Home(kafka, self.raw, self.canonical, cfg.kafka.partitions)
        self.dead = DeadLetters(outputs, self.topics.dlq)
        self.emit = Emitter(wire, enricher, anonymizer, outputs, self.dead,
                            events=self.topics.events, state=self.topics.state,
                            nodes=self.topics.nodes, node_events=self.topics.node_events,
                            max_bytes=self.max_bytes,
                            usage_series_s=cfg.worker.usage_series_s)
        self.counters = BatchCounters(
            self.raw, (self.topics.events, self.topics.state, self.topics.nodes,
                       self.topics.node_events, self.canonical))
        self._ending = asyncio.Lock()
        self._confirmation: asyncio.Future[None] | None = None
        self._last_event = LastEventTime()

    def take(self, message: Any) -> Awaitable[None] | None:
        """One message of the raw or the canonical topic, as Kafka gave it; what must be
        awaited before the next (the batch's end when it is full), or None.

        A message the worker died handling in each of its last runs (:attr:`guard`) is
        not handled a third time: to the DLQ as it came, reason ``crashed-worker``."""
        coord = (message.topic, message.partition, message.offset)
        if self.guard.poisoned(coord):
            self.dead.poison(message, self.guard.threshold)
        else:
            with self.guard.handling(coord), as_current(message):
                if message.topic == self.raw:
                    self._take_raw(message)
                else:
                    item = decode_item(message.value)
                    if item == EXPIRE:
                        self._expire(message.key)
                    else:
                        assert isinstance(item, JobEvent | NodeEvent)
                        self._fold(message.key, message, item)
        self.batch.took(message)
        if self.batch.events >= STATE_BATCH:
            return self.end_batch()
        return None

    def behind(self) -> bool:
        """Whether more than ``BEHIND_RECORDS`` records past the batch's are already in
        Kafka, by the high watermarks of the consumer's last fetches."""
        kafka = self.kafka
        waiting = 0
        for (topic, partition), offset in self.batch.ends.items():
            try:
                end = kafka.highwater(topic, partition)
            except AssertionError:  # aiokafka's: the partition was just revoked
                continue
            if end is not None:
                waiting += max(end - offset - 1, 0)
        return waiting > BEHIND_RECORDS

    async def end_batch(self) -> None:
        """Write the batch: each job's and node's table entry and states; its records are
        acknowledged once its outputs are confirmed, while the next batch is folded
        (module docstring, "Overlap"). Returns once the batch before it is confirmed, so
        that at most two are in flight."""
        async with self._ending:
            batch, self.batch = self.batch, Batch()
            if not batch.records:
                return
            batch.sent[self.topics.state] += self._write_jobs(batch.folds)
            batch.sent[self.topics.nodes] += self._write_each(
                "node", batch.nodes, self._write_node, self._dead_node)
            self.counters.count(batch)
            previous = self._confirmation
            self._confirmation = asyncio.ensure_future(
                self._confirm(batch.records, self.outputs.cut(), previous))
            if previous is not None:
                await asyncio.shield(previous)

    async def _confirm(self, records: list[Any], tally: Any,
                       previous: asyncio.Future[None] | None) -> None:
        """Acknowledge a batch's ``records`` once its outputs (``tally``) are confirmed,
        after the batch before it's."""
        if previous is not None:
            await asyncio.shield(previous)
        await self.outputs.confirm(tally)
        self.states.flushed()
        self.nodes.flushed()
        for message in records:
            self.acknowledge(message)

    @property
    def confirmation(self) -> asyncio.Future[None] | None:
        """The confirmation of the last batch ended (None before the first)."""
        return self._confirmation

    async def flush(self) -> None:
        """End the batch and wait until every batch ended is confirmed and acknowledged."""
        await self.end_batch()
        if self._confirmation is not None:
            await asyncio.shield(self._confirmation)

    def _write_jobs(self, entries: Mapping[bytes, tuple[Any, JobFold]]) -> int:
        """The jobs' table entries and states (:meth:`_write_each`); the states sent."""
        now = time.time()
        return self._write_each("job", entries,
                                lambda k, m, f: self._write_job(k, m, f, now), self._dead_job)

    def _write_job(self, key: bytes, message: Any, fold: JobFold, now: float) -> int:
        """One job's table entry and states; the number of states sent."""
        with as_current(message):
            self.states.put(key, fold)
        sent, written = self.emit.states(key, message, fold)
        if written is not None:
            self.active.update(key, message.partition, summarize(written), now)
        return sent

    def _write_each(self, kind: str, entries: Mapping[bytes, tuple[Any, Any]],
                    write: Callable[[bytes, Any, Any], int],
                    dead: Callable[[bytes, Any, Any, Exception], None]) -> int:
        """Each job's (or node's) table entry and documents, under the crash guard; the
        number of documents sent. One that cannot be written goes to the DLQ (``dead``),
        the others go on; one the worker died writing in each of its last runs is not
        written a third time."""
        sent = 0
        guard = self.guard
        for key, (message, fold) in entries.items():
            coord = f"{kind} {key.decode(errors='replace')}"
            if guard.poisoned(coord):
                dead(key, message, None, Rejected(
                    "crashed-worker", f"the worker died while writing this {kind}'s state "
                    f"in each of its last {guard.threshold} runs"))
                continue
            try:
                with guard.handling(coord):
                    sent += write(key, message, fold)
            except ServiceError:
                raise
            except Exception as exc:  # noqa: BLE001 - one's failure must not stop the rest
                dead(key, message, fold, exc)
        return sent

    def _write_node(self, key: bytes, message: Any, fold: NodeFold) -> int:
        """One node's table entry and document; the number of documents sent."""
        with as_current(message):
            self.nodes.put(key, fold)
        sent, written = self.emit.node_state(key, message, fold)
        if written is not None:
            # the node is folded in its own partition, the message's (Home.holds_key)
            self.active_nodes.update(key, message.partition, written)
        return sent

    def _dead_node(self, key: bytes, message: Any, fold: NodeFold | None,
                   exc: Exception) -> None:
        """A node whose state cannot be written: to the DLQ, and it goes on from its last
        state written (as a job does, :meth:`_dead_job`)."""
        self.nodes.forget(key)
        self.dead.node(key, message, fold, exc)

    def _dead_job(self, key: bytes, message: Any, fold: JobFold | None,
                  exc: Exception) -> None:
        """A job whose state cannot be written: its latest document to the DLQ
        (:meth:`DeadLetters.job`), and the batch goes on. The job goes on from its last
        state written, and is judged again at its next event."""
        self.states.forget(key)
        self.dead.job(key, message, fold, exc)

    def _take_raw(self, message: Any) -> None:
        self.batch.read += 1
        events = self._events(message)
        if events is None:
            return
        home = self.home.holds(message)
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

    def _events(self, message: Any) -> list[tuple[Event, bytes]] | None:
        """A raw record's events with their encoding (None: the record is bad, and went to
        the DLQ); each bad job of a multi-job record to the DLQ, its neighbours go on."""
        try:
            events, parts = canonical_events(self.wire, message.value, self.max_bytes)
        except Rejected as rejected:
            self.dead.raw(message, rejected)
            return None
        for part in parts:
            self.dead.part(message, part)
        return events

    def _fold(self, key: bytes, message: Any, ev: Event) -> None:
        """Fold one event (a job's, emitted; or a node's); an event that fails (a bug, a
        value the events topic's schema cannot hold) goes to the DLQ as its canonical
        JSON, stage ``fold``, and the record's other events go on."""
        try:
            if isinstance(ev, NodeEvent):
                self._fold_node(key, message, ev)
            else:
                self._fold_one(key, message, ev)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - one event's failure must not stop all
            self.dead.event(key, message, ev, exc)

    def _fold_one(self, key: bytes, message: Any, ev: JobEvent) -> None:
        fold = self._job(key)
        fold.add(ev)
        self.batch.folds[key] = (message, fold)
        self.batch.events += 1
        self.batch.folded[ev.cluster] += 1
        self.emit.event(key, ev, self._job)
        self.batch.sent[self.topics.events] += 1
        self._last_event.saw(ev.cluster, ev.timestamp)
        if ev.scheduler == "flux" and ev.event in _ALLOCATION:
            self._allocations(message, ev, fold)

    def _allocations(self, message: Any, ev: JobEvent, fold: JobFold) -> None:
        """The node events of a Flux job's ``alloc`` or ``free`` ``ev`` (module docstring,
        "Allocations"), each folded here if ``message`` is in its node's partition, else
        re-keyed; one already sent or folded in this run is not again."""
        if ev.event == "alloc":
            alloc, frees = ev, [e for e in fold.events() if e.event == "free"]
        else:
            allocs = [e for e in fold.events() if e.event == "alloc"]
            if not allocs:  # its node events come with the alloc's
                return
            alloc, frees = allocs[0], [ev]
        hosts = allocation_hosts(alloc)
        if hosts is None:
            return
        if len(hosts) > MAX_ALLOCATION_HOSTS:
            if ev is alloc:
                WORKER_ALLOCATIONS_UNTRACKED.labels(ev.cluster).inc()
                logger.warning("job %s of cluster %s is allocated %d hosts, over %d: its "
                               "nodes' documents do not show it (docs/flux.md)", ev.job_id,
                               ev.cluster, len(hosts), MAX_ALLOCATION_HOSTS)
            return
        derived = job_node_events(alloc, "alloc", hosts) if ev is alloc else []
        for free in frees:
            derived += job_node_events(free, "free", hosts)
        for nev in derived:
            _, data = fit_node_event(nev, self.max_bytes)
            if self.recent.seen(data):
                continue
            key = nev.key.encode()
            if self.home.holds_key(message, key):
                self._fold_node(key, message, nev)
            else:
                self.outputs.send(self.canonical, key, data)
                self.batch.sent[self.canonical] += 1

    def _fold_node(self, key: bytes, message: Any, ev: NodeEvent) -> None:
        entry = self.batch.nodes.get(key)
        fold = entry[1] if entry is not None else self.nodes.get(key)
        if fold is None:
            fold = NodeFold()
        fold.add(ev)
        # a copy too: its entry and document are written again (module docstring)
        self.batch.nodes[key] = (message, fold)
        self.batch.events += 1
        self.batch.folded[ev.cluster] += 1
        if ev.event not in _ALLOCATION:  # a job's alloc and free are in hpc.jobs.events
            self.emit.node_event(key, ev)
            self.batch.sent[self.topics.node_events] += 1

    def _job(self, key: bytes) -> JobFold:
        """The job's fold as this batch left it (its table entry is written at the end of
        the batch), empty for a job not seen yet."""
        entry = self.batch.folds.get(key)
        if entry is not None:
            return entry[1]
        fold = self.states.get(key)
        return fold if fold is not None else JobFold()

    def _expire(self, key: bytes) -> None:
        """A finished job's grace is over (agents.job_timers): its table entry goes and a
        tombstone goes to the state topic, in the batch, whose confirmation acknowledges
        the expiry as its other records. The job's state of this batch, if it has one, is
        written first: a state must not follow its job's tombstone. Expiries come as fast
        as jobs end: an expiry that ended the batch and waited for Kafka made each cost a
        batch, and a worker that fell behind at 70 finished jobs a second."""
        entry = self.batch.folds.pop(key, None)
        if entry is not None:
            self.batch.sent[self.topics.state] += self._write_jobs({key: entry})
        done = self.states.get(key)
        if done is None or not done.done:
            return  # gone already, or it came back (a requeue after its end)
        self.states.delete(key)
        self.active.forget(key)
        self.outputs.send(self.topics.state, key, None)
        self.batch.sent[self.topics.state] += 1


def register(context: WorkerContext) -> None:
    """The jobs stage of ``context``'s app: the stage fed by the intake, the agent that
    subscribes its topics, the task that ends its batches and its timers."""
    app, cfg = context.app, context.cfg
    states = JobStates(context.jobs, max_bytes=cfg.worker.max_state_bytes)
    nodes = NodeStates(context.nodes, max_bytes=cfg.worker.max_state_bytes)
    active, active_nodes = ActiveJobs(), ActiveNodes()
    raw, canonical = context.raw.get_topic_name(), context.canonical.get_topic_name()
    guard = CrashGuard.claim(Path(app.conf.datadir), "jobs-stage", innocent=(ServiceError,))
    stage = JobsStage(cfg, wire=context.wire, enricher=context.enricher,
                      anonymizer=context.anonymizer, outputs=context.outputs,
                      kafka=ConsumerView(app), states=states, nodes=nodes, active=active,
                      acknowledge=partial(acknowledge, app), guard=guard,
                      active_nodes=active_nodes)
    Intake(app, {raw, canonical}, stage).install()
    timers = JobTimers(context, active, stage.canonical, active_nodes)

    @app.on_partitions_revoked.connect
    async def forget_revoked(app: Any, revoked: Any, **kwargs: Any) -> None:
        states.clear()
        nodes.clear()

    @app.on_partitions_assigned.connect
    async def forget_assigned(app: Any, assigned: Any, **kwargs: Any) -> None:
        states.clear()
        nodes.clear()

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
                await stage.end_batch()
            done = stage.confirmation
            if done is not None and done.done():
                done.result()  # a confirmation that failed stops the worker

    @app.timer(interval=cfg.worker.snapshot_interval_s)
    async def queue_snapshots() -> None:
        timers.queue_snapshots()

    @app.timer(interval=max(cfg.worker.done_grace_s / 4, 1.0))
    async def expire_done() -> None:
        timers.expire_done()
