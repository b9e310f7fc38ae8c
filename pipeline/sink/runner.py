"""The sink's consumer loop: Kafka topics -> Elasticsearch, offsets committed after acks.

One process consumes ``hpc.jobs.state``, ``hpc.jobs.events``, ``hpc.queue.snapshots``,
``hpc.nodes.state`` and ``hpc.nodes.events`` (consumer group ``<worker.app_id>-sink``; more
processes share the partitions), gathers a batch (``sink.max_batch`` records,
``sink.flush_interval_s`` after its first record, or as soon as a poll of ``sink.quiet_s``
brings nothing more) and flushes it. Records that cannot be decoded or turned into
documents, and documents Elasticsearch rejects for their content, go to the DLQ; the
stream goes on. A tombstone of a job (aged out of the state topic) writes nothing: the
document is history. A tombstone of a node deletes its document (:mod:`.converter`).

While Elasticsearch is unreachable the flush blocks and retries; the consumer's partitions
are paused and it keeps polling, so the group does not evict it. SIGTERM/SIGINT
(:meth:`SinkRunner.stop`) ends the loop after a last flush and commit; a stop during an
outage abandons the batch, which is read again on the next start (at-least-once, and
every write is idempotent).

No record can stop the stream (issue 31, Kafka Connect's ``errors.tolerance=all`` as a
guarantee). Any error converting one record, expected or not, dead-letters that record
(``internal-error`` for the unexpected); a document Elasticsearch refuses, alone or by
making it refuse its whole bulk request, is dead-lettered by its error type; a dead
letter the DLQ cannot take whole goes without its value (:mod:`.deadletter`). What is
left is a process that dies anyway (the OOM killer, a segfault in C code, a bug that
escapes every handler) and would die again on the same records after a restart: the
crash guard (:mod:`pipeline.runtime.crashguard`, a file in ``sink.state_dir``) records what the
sink is handling, at two grains:

* converting one record: coordinate ``topic[partition]@offset``. A record whose
  conversion killed two runs in a row is dead-lettered (``crashed-sink``) by the third;
* the rest of a flush (bulk write, dead letters, commit): coordinate ``flush`` and the
  batch's offset range per partition. A later batch that overlaps the range of a flush
  that killed the last run counts as the same flush; once one killed two runs, batches
  that overlap it are written *record by record*, each record its own coordinate
  ``record topic[partition]@offset`` (one bulk request each: slow, and only then), and a
  record that kills the sink in that mode in two runs in a row is dead-lettered
  (``crashed-sink``) on the next start.

An error that is the sink's own, deliberate (an Elasticsearch or Kafka failure not about
one record: credentials, an outage), is not a death of the records: it ends the
coordinate first, so it can never get a record dead-lettered. The hot path costs one
guard write (no system call) per record converted and one per flush.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, Producer
from elasticsearch import Elasticsearch

from pipeline.codecs.codec import AvroCodec, codecs_from_config
from pipeline.kafka.producer import producer_config
from pipeline.kafka.topics import ensure_topics
from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard
from pipeline.runtime.errors import ConfigError, JobstreamError, ParseError, ServiceError, SinkError
from pipeline.sink.client import BulkClient, make_client
from pipeline.sink.consumer import Intake, Record, Stopped
from pipeline.sink.converter import Action, Converter, DocumentError, coalesce
from pipeline.sink.crashes import open_guard, plan, write_one_by_one
from pipeline.sink.deadletter import DeadLetters
from pipeline.sink.names import DEFAULT_GENERATION, Family
from pipeline.sink.offsets import OffsetTracker
from pipeline.sink.settlement import Router
from pipeline.sink.stats import ConsumerLag, SinkStats
from pipeline.sink.templates import ensure_indices, live_generation

__all__ = ["FOLLOW_INTERVAL_S", "SinkRunner", "SinkStats"]

logger = logging.getLogger(__name__)

STAGE = "sink"
#: How often a sink that follows the aliases checks whether a replay moved them (default).
FOLLOW_INTERVAL_S = 30.0


class SinkRunner:
    """Consume, convert, bulk-write, dead-letter, commit.

    The consumer side is an :class:`~pipeline.sink.consumer.Intake`, each record's fate a
    :class:`~pipeline.sink.settlement.Router`'s, the crash guard's coordinates
    :mod:`~pipeline.sink.crashes`'; the runner keeps the loop and the flush.

    :param cfg: the configuration tree (topics, kafka, elasticsearch, sink)
    :param generation: index generation to write; None = follow the aliases (the generation
        they point at, ``v1`` when there are none)
    :param live: whether this generation carries the aliases (None = decide from them)
    :param group_id: consumer group (default ``<worker.app_id>-sink``)
    :param follow_interval_s: how often a following sink reads the aliases
    :param es, producer, codecs, clock: injected for tests and tools; built from ``cfg``
        when None
    :param guard: the crash guard; None = claimed in ``sink.state_dir`` when the run starts
    """

    def __init__(self, cfg: Config, *, generation: str | None = None, live: bool | None = None,
                 group_id: str | None = None, follow_interval_s: float = FOLLOW_INTERVAL_S,
                 es: Elasticsearch | None = None,
                 producer: Producer | None = None, codecs: dict[str, AvroCodec] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 guard: CrashGuard | None = None) -> None:
        self.cfg = cfg
        self.stats = SinkStats()
        self._follow = generation is None
        self._follow_interval_s = follow_interval_s
        self._generation = generation or DEFAULT_GENERATION
        self._live = live
        self._group_id = group_id or f"{cfg.worker.app_id}-sink"
        self._es = es if es is not None else make_client(cfg.elasticsearch)
        # the DLQ's: acks=all and idempotent as every producer of jobstream
        self._producer = producer if producer is not None else Producer(
            producer_config(cfg, "jobstream-sink"))
        self._route = Router(DeadLetters(self._producer, cfg.topics.dlq, stage=STAGE),
                             self.stats)
        self._guard = guard
        codecs = codecs if codecs is not None else codecs_from_config(cfg)
        self._families: dict[str, tuple[Family, AvroCodec]] = {
            cfg.topics.state: (Family.JOBS, codecs["state"]),
            cfg.topics.events: (Family.EVENTS, codecs["events"]),
            cfg.topics.snapshots: (Family.SNAPSHOTS, codecs["snapshots"]),
            cfg.topics.nodes: (Family.NODES, codecs["nodes"]),
            cfg.topics.node_events: (Family.NODE_EVENTS, codecs["node_events"]),
        }
        self._clock = clock
        self._tracker = OffsetTracker()
        self._intake = Intake(cfg.sink, self._families, self._tracker, self.stats, clock,
                              lambda: self._stopping)
        self._bulk = BulkClient(self._es, sleep=self._blocked)
        self._lag = ConsumerLag(self._group_id, self._tracker, clock, cfg.sink.lag_interval_s)
        self._converter = _converter(cfg.elasticsearch.index_prefix, self._generation)
        self._stopping = False
        self._next_follow = 0.0

    @property
    def generation(self) -> str:
        return self._generation

    def stop(self) -> None:
        """Ask the loop to end after a last flush (safe from a signal handler)."""
        self._stopping = True

    # -- the loop ----------------------------------------------------------------------

    def setup(self) -> None:
        """Topics, templates and indices (blocking until Elasticsearch answers), then
        subscribe."""
        ensure_topics(self.cfg)
        self._prepare_indices()
        self._intake.consumer = consumer = Consumer(self.cfg.librdkafka(**{
            "group.id": self._group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }))
        consumer.subscribe(list(self._families), on_assign=self._intake.on_assign,
                           on_revoke=self._intake.on_revoke, on_lost=self._intake.on_revoke)
        logger.info("sink subscribed group=%s topics=%s generation=%s", self._group_id,
                    ",".join(self._families), self._generation)

    def run(self, *, until: Callable[[SinkStats], bool] | None = None) -> SinkStats:
        """Run until :meth:`stop`, or until ``until(stats)`` is true when nothing is
        waiting to be flushed (checked after each flush and while idle)."""
        clean = False
        try:
            self._guarded()
            if self._intake.consumer is None:
                self.setup()
            while not self._stopping:
                self._intake.poll()
                if self._intake.due():
                    self.flush()
                if not self._intake.batch.records:
                    self._intake.commit()  # again, if the last commit failed
                    if until is not None and until(self.stats):
                        break
                self._maybe_follow()
                self._lag.report(self._intake.consumer)
            self.flush()
            clean = True
        except Stopped:
            left = self._tracker.in_flight()
            raise ServiceError(f"stopped while Elasticsearch or Kafka was unavailable; "
                               f"{left} record(s) not committed will be read again") from None
        finally:
            self.close(clean=clean)
        return self.stats

    def _blocked(self, seconds: float) -> None:
        """A flush's wait for Elasticsearch: the consumer kept in its group, and the lag
        reported from the broker's ends meanwhile (an outage is when it matters)."""
        deadline = self._clock() + seconds
        while True:
            self._lag.report(self._intake.consumer, cached=False)
            left = deadline - self._clock()
            if left <= 0:
                return
            self._intake.wait(min(left, self._lag.interval_s))

    def close(self, *, clean: bool = True) -> None:
        """Close the consumer, deliver what the DLQ producer holds, release the crash
        guard; ``clean``: the sink stopped cleanly (False keeps what the guard knows of
        past deaths for the next start)."""
        try:
            self._intake.close()
            self._producer.flush(5.0)
        finally:
            if self._guard is not None:
                self._guard.close(clean=clean)
                self._guard = None

    # -- the flush ---------------------------------------------------------------------

    def flush(self) -> None:
        """Write the batch and commit. The steps, in order:

        1. decode and convert every record; undecodable or unconvertible ones -> DLQ;
        2. coalesce: one action per document (a job's highest revision);
        3. move jobs that got their submit time out of the undated index;
        4. bulk-write, retrying until every item is written, a duplicate, rejected or failed;
        5. rejected documents -> DLQ (with the original key and value);
        6. wait until the DLQ producer delivered everything;
        7. acknowledge every record whose fate is sealed (not the failed ones);
        8. commit, per partition, the last contiguous acknowledged offset + 1;
        9. raise the sticky error, if an item failed, after committing what came before it.

        Step 1 runs each record under its own crash-guard coordinate, steps 2-8 under the
        flush's; a batch that overlaps a flush that killed the sink twice runs steps 1-5
        one record at a time instead (see the module's docstring).
        """
        batch = self._intake.take()
        if not batch.records:
            return
        started = self._clock()
        guard = self._guarded()
        coord, one_by_one = plan(batch.records, guard)
        try:
            if one_by_one:
                logger.warning("flush of %d record(s) one at a time: a flush of these "
                               "records killed the sink before", len(batch.records))
                failed = write_one_by_one(batch.records, guard, self._route,
                                          lambda rec: self._write(self._convert([rec], None)))
                with guard.handling(coord):
                    self._seal(batch.records, failed)
            else:
                actions = self._convert(batch.records, guard)
                with guard.handling(coord):
                    failed = self._write(actions)
                    self._seal(batch.records, failed)
        finally:
            self._intake.resume()
        self.stats.flushes += 1
        self.stats.retries = self._bulk.retries
        logger.info("flush records=%d failed=%d ms=%.0f totals=%s", len(batch.records),
                    len(failed), (self._clock() - started) * 1000, self.stats)
        if failed:
            where, error = next(iter(failed.items()))
            raise SinkError(f"elasticsearch failed to write {where}: {error} "
                            f"({len(failed)} record(s) not committed; see the log)")

    def _seal(self, records: list[Record], failed: Mapping[str, str]) -> None:
        """Steps 6-8."""
        self._route.deliver(self._intake.wait)
        self._intake.ack(records, failed)
        self._intake.commit()

    def _convert(self, records: list[Record], guard: CrashGuard | None) -> list[Action]:
        """Step 1; each record under its own coordinate when ``guard`` is given."""
        actions: list[Action] = []
        for rec in records:
            value = rec.msg.value()
            if value is None:
                self.stats.tombstones += 1
                if rec.family is not Family.NODES:
                    continue
            if guard is None:
                action = self._convert_one(rec, value)
            else:
                where = rec.where
                if guard.poisoned(where):
                    with guard.handling(where):  # if this kills too, the next goes lighter
                        self._route.dead_letter_crashed(rec, guard.deaths(where),
                                                        "converting", guard.threshold)
                    continue
                guard.begin(where)
                try:
                    action = self._convert_one(rec, value)
                except JobstreamError:
                    guard.end()  # the sink's own error, not a death at this record
                    raise
                guard.end()
            if action is not None:
                actions.append(action)
        return actions

    def _convert_one(self, rec: Record, value: bytes | None) -> Action | None:
        family, codec = self._families[rec.msg.topic() or ""]
        try:
            if value is None:  # a node's tombstone: _convert passes no other
                return self._converter.node_gone(rec.msg.key(), rec)
            return self._converter.convert(family, codec.decode(value), rec)
        except (ParseError, DocumentError) as exc:
            self._route.dead_letter(rec, exc.reason, exc.message)
        except JobstreamError:
            raise  # the sink's own (a schema registry out of reach): not this record's
        except Exception as exc:  # a bug met by this record alone: the stream goes on
            logger.exception("converting %s failed", rec.where)
            self._route.dead_letter(rec, "internal-error", f"{type(exc).__name__}: {exc}")
        return None

    def _write(self, actions: list[Action]) -> dict[str, str]:
        """Steps 2-5; returns the records that failed (where -> error)."""
        kept, superseded = coalesce(actions)
        self.stats.superseded += len(superseded)
        dated = [a for a in kept if a.family is Family.JOBS]
        if dated:
            undated = self._bulk.existing_ids(self._converter.undated_index(),
                                              (a.doc_id for a in dated))
            kept += self._converter.relocations(dated, undated)
        failed: dict[str, str] = {}
        for result in self._bulk.write(kept) if kept else []:
            self._route.settle(result, failed)
        return failed

    # -- indices -----------------------------------------------------------------------

    def _prepare_indices(self) -> None:
        prefix = self.cfg.elasticsearch.index_prefix
        if self._follow:
            current = self._bulk.call(lambda: live_generation(self._es, prefix),
                                      "read the aliases")
            self._set_generation(current or DEFAULT_GENERATION)
        self._bulk.call(lambda: ensure_indices(self._es, prefix, self._generation,
                                               live=self._live), "create the indices")
        self._next_follow = self._clock() + self._follow_interval_s

    def _maybe_follow(self) -> None:
        """After a replay moved the aliases, write the generation they point at.

        Records not flushed yet go to the new generation too (they are converted at flush
        time): readers see the new one now."""
        if not self._follow or self._clock() < self._next_follow:
            return
        self._next_follow = self._clock() + self._follow_interval_s
        current = self._bulk.call(
            lambda: live_generation(self._es, self.cfg.elasticsearch.index_prefix),
            "read the aliases")
        if current and current != self._generation:
            logger.warning("aliases moved to generation %s; writing it from now on", current)
            self._set_generation(current)
            self._bulk.call(lambda: ensure_indices(self._es, self.cfg.elasticsearch.index_prefix,
                                                   self._generation, live=True),
                            "create the indices")

    def _set_generation(self, generation: str) -> None:
        self._generation = generation
        self._converter = _converter(self.cfg.elasticsearch.index_prefix, generation)

    # -- the crash guard ---------------------------------------------------------------

    def _guarded(self) -> CrashGuard:
        if self._guard is None:
            self._guard = open_guard(self.cfg, self._group_id)
        return self._guard


def _converter(prefix: str, generation: str) -> Converter:
    try:
        return Converter(prefix, generation)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
