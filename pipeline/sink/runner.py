"""The sink's consumer loop: Kafka topics -> Elasticsearch, offsets committed after acks.

One process consumes ``hpc.jobs.state``, ``hpc.jobs.events`` and ``hpc.queue.snapshots``
(consumer group ``<worker.app_id>-sink``; more processes share the partitions), gathers a
batch (``sink.max_batch`` records, ``sink.flush_interval_s`` after its first record, or
as soon as a poll of ``sink.quiet_s`` brings nothing more) and flushes it. Records that
cannot be decoded or turned into documents, and documents Elasticsearch rejects for their
content, go to the DLQ; the stream goes on. A tombstone (a job aged out of the state
topic) writes nothing: the document is history.

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

import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from elasticsearch import Elasticsearch

from pipeline.codecs.codec import AvroCodec, codecs_from_config
from pipeline.kafka.producer import producer_config
from pipeline.kafka.topics import ensure_topics
from pipeline.runtime.config import Config
from pipeline.runtime.crashguard import CrashGuard, GuardBusyError
from pipeline.runtime.errors import ConfigError, JobstreamError, ParseError, ServiceError, SinkError
from pipeline.runtime.metrics import SINK_RECORDS_READ, LagReporter
from pipeline.sink.client import BulkClient, ItemResult, Outcome, make_client
from pipeline.sink.converter import Action, Converter, DocumentError, coalesce
from pipeline.sink.deadletter import DeadLetters
from pipeline.sink.names import DEFAULT_GENERATION, Family
from pipeline.sink.offsets import OffsetTracker, TopicPartition
from pipeline.sink.templates import ensure_indices, live_generation

__all__ = ["SinkRunner", "SinkStats"]

logger = logging.getLogger(__name__)

STAGE = "sink"
#: How often a sink that follows the aliases checks whether a replay moved them (default).
FOLLOW_INTERVAL_S = 30.0
#: Longest single poll, so that a stop request is seen promptly.
MAX_POLL_S = 0.5
#: How often the consumer lag metric is computed (from librdkafka's cached ends: no request).
LAG_INTERVAL_S = 5.0
#: Runs in a row that died at one coordinate before it is dead-lettered (one death may be
#: an innocent kill: an operator, or the OOM killer for another process's sake).
CRASH_THRESHOLD = 2
#: DLQ reason of a record set aside because handling it killed the sink.
CRASHED = "crashed-sink"
_FLUSH = "flush "
_RECORD = "record "
_RANGE = re.compile(r"^(.+)\[(\d+)\]@(\d+)-(\d+)$")


class _Stopped(Exception):
    """A stop was requested while a flush could not complete."""


@dataclass
class SinkStats:
    """Running totals (read by ``jobstream demo`` and ``bench``)."""

    records: int = 0
    flushes: int = 0
    written: int = 0
    duplicates: int = 0
    superseded: int = 0
    dead_lettered: int = 0
    tombstones: int = 0
    commits: int = 0
    retries: int = 0


@dataclass(slots=True)
class _Record:
    msg: Message
    family: Family
    #: assignment epoch of its partition when received (stale after a revoke)
    epoch: int

    @property
    def tp(self) -> TopicPartition:
        return (self.msg.topic(), self.msg.partition())

    @property
    def where(self) -> str:
        return f"{self.msg.topic()}[{self.msg.partition()}]@{self.msg.offset()}"


@dataclass
class _Batch:
    records: list[_Record] = field(default_factory=list)
    started: float = 0.0
    #: the last poll brought nothing: the batch is all there is for now
    quiet: bool = False


class SinkRunner:
    """Consume, convert, bulk-write, dead-letter, commit.

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
        self._bulk = BulkClient(self._es, sleep=self._wait)
        # the DLQ's: acks=all and idempotent as every producer of jobstream
        self._producer = producer if producer is not None else Producer(
            producer_config(cfg, "jobstream-sink"))
        self._dead = DeadLetters(self._producer, cfg.topics.dlq, stage=STAGE)
        self._guard = guard
        codecs = codecs if codecs is not None else codecs_from_config(cfg)
        self._families: dict[str, tuple[Family, AvroCodec]] = {
            cfg.topics.state: (Family.JOBS, codecs["state"]),
            cfg.topics.events: (Family.EVENTS, codecs["events"]),
            cfg.topics.snapshots: (Family.SNAPSHOTS, codecs["snapshots"]),
        }
        self._clock = clock
        self._read = {topic: SINK_RECORDS_READ.labels(topic) for topic in self._families}
        self._lag = LagReporter(self._group_id)
        self._next_lag = 0.0
        self._converter = _converter(cfg.elasticsearch.index_prefix, self._generation)
        self._tracker = OffsetTracker()
        self._epochs: dict[TopicPartition, int] = {}
        self._batch = _Batch()
        self._consumer: Consumer | None = None
        self._stopping = False
        self._paused = False
        self._closing = False
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
        self._consumer = Consumer(self.cfg.librdkafka(**{
            "group.id": self._group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }))
        self._consumer.subscribe(list(self._families), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)
        logger.info("sink subscribed group=%s topics=%s generation=%s", self._group_id,
                    ",".join(self._families), self._generation)

    def run(self, *, until: Callable[[SinkStats], bool] | None = None) -> SinkStats:
        """Run until :meth:`stop`, or until ``until(stats)`` is true when nothing is
        waiting to be flushed (checked after each flush and while idle)."""
        clean = False
        try:
            self._guarded()
            if self._consumer is None:
                self.setup()
            while not self._stopping:
                self._poll()
                if self._due():
                    self.flush()
                if not self._batch.records:
                    self._commit()  # again, if the last commit failed
                    if until is not None and until(self.stats):
                        break
                self._maybe_follow()
                self._report_lag()
            self.flush()
            clean = True
        except _Stopped:
            left = self._tracker.in_flight()
            raise ServiceError(f"stopped while Elasticsearch or Kafka was unavailable; "
                               f"{left} record(s) not committed will be read again") from None
        finally:
            self.close(clean=clean)
        return self.stats

    def close(self, *, clean: bool = True) -> None:
        """Close the consumer, deliver what the DLQ producer holds, release the crash
        guard; ``clean``: the sink stopped cleanly (False keeps what the guard knows of
        past deaths for the next start)."""
        try:
            if self._consumer is not None:
                self._closing = True
                try:
                    self._consumer.close()
                finally:
                    self._consumer = None
            self._producer.flush(5.0)
        finally:
            if self._guard is not None:
                self._guard.close(clean=clean)
                self._guard = None

    def _poll(self) -> None:
        assert self._consumer is not None
        sink = self.cfg.sink
        room = max(1, sink.max_batch - len(self._batch.records))
        timeout = sink.flush_interval_s
        if self._batch.records:
            timeout = max(self._batch.started + sink.flush_interval_s - self._clock(), 0.0)
        if sink.quiet_s > 0:
            # librdkafka's consume waits out its timeout unless it fills the batch: a poll
            # longer than quiet_s would hold back a batch that is all there
            timeout = min(timeout, sink.quiet_s)
        msgs = self._consumer.consume(num_messages=min(room, 10000),
                                      timeout=min(timeout, MAX_POLL_S))
        self._accept(msgs)
        self._batch.quiet = sink.quiet_s > 0 and not msgs and bool(self._batch.records)

    def _accept(self, msgs: Sequence[Message]) -> None:
        if msgs:
            logger.debug("polled %d message(s); batch holds %d", len(msgs),
                         len(self._batch.records) + len(msgs))
        read: Counter[str] = Counter()
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise ServiceError(f"kafka consumer failed: {err}")
                if err.code() != KafkaError._PARTITION_EOF:
                    logger.warning("kafka consumer: %s", err)
                continue
            topic = msg.topic()
            assert topic is not None
            tp = (topic, msg.partition())
            self._tracker.track(topic, tp[1], msg.offset())
            if not self._batch.records:
                self._batch.started = self._clock()
            family = self._families[topic][0]
            self._batch.records.append(_Record(msg, family, self._epochs.get(tp, 0)))
            read[topic] += 1
        # counted once per poll: a Prometheus counter's inc() takes a lock
        for topic, n in read.items():
            self.stats.records += n
            self._read[topic].inc(n)

    def _due(self) -> bool:
        b = self._batch
        return bool(b.records) and (
            b.quiet or len(b.records) >= self.cfg.sink.max_batch
            or self._clock() - b.started >= self.cfg.sink.flush_interval_s)

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
        batch, self._batch = self._batch, _Batch()
        if not batch.records:
            return
        started = self._clock()
        guard = self._guarded()
        coord, one_by_one = self._plan(batch.records, guard)
        try:
            if one_by_one:
                logger.warning("flush of %d record(s) one at a time: a flush of these "
                               "records killed the sink before", len(batch.records))
                failed = self._write_one_by_one(batch.records, guard)
                with guard.handling(coord):
                    self._seal(batch.records, failed)
            else:
                actions = self._convert(batch.records, guard)
                with guard.handling(coord):
                    failed = self._write(actions)
                    self._seal(batch.records, failed)
        finally:
            self._resume()
        self.stats.flushes += 1
        self.stats.retries = self._bulk.retries
        logger.info("flush records=%d failed=%d ms=%.0f totals=%s", len(batch.records),
                    len(failed), (self._clock() - started) * 1000, self.stats)
        if failed:
            where, error = next(iter(failed.items()))
            raise SinkError(f"elasticsearch failed to write {where}: {error} "
                            f"({len(failed)} record(s) not committed; see the log)")

    def _seal(self, records: list[_Record], failed: Mapping[str, str]) -> None:
        """Steps 6-8."""
        self._deliver_dlq()
        for rec in records:
            if rec.where not in failed and self._epochs.get(rec.tp, 0) == rec.epoch:
                self._tracker.ack(rec.tp[0], rec.tp[1], rec.msg.offset())
        self._commit()

    def _convert(self, records: list[_Record], guard: CrashGuard | None) -> list[Action]:
        """Step 1; each record under its own coordinate when ``guard`` is given."""
        actions: list[Action] = []
        for rec in records:
            value = rec.msg.value()
            if value is None:
                self.stats.tombstones += 1
                continue
            if guard is None:
                action = self._convert_one(rec, value)
            else:
                where = rec.where
                if guard.poisoned(where):
                    with guard.handling(where):  # if this kills too, the next goes lighter
                        self._dead_letter_crashed(rec, guard.deaths(where), "converting",
                                                  guard.threshold)
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

    def _convert_one(self, rec: _Record, value: bytes) -> Action | None:
        family, codec = self._families[rec.msg.topic() or ""]
        try:
            return self._converter.convert(family, codec.decode(value), rec)
        except (ParseError, DocumentError) as exc:
            self._dead_letter(rec, exc.reason, exc.message)
        except JobstreamError:
            raise  # the sink's own (a schema registry out of reach): not this record's
        except Exception as exc:  # a bug met by this record alone: the stream goes on
            logger.exception("converting %s failed", rec.where)
            self._dead_letter(rec, "internal-error", f"{type(exc).__name__}: {exc}")
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
            self._settle(result, failed)
        return failed

    def _write_one_by_one(self, records: list[_Record], guard: CrashGuard) -> dict[str, str]:
        """Steps 1-5 for one record at a time, each under its coordinate ``record <where>``:
        one whose turn killed the sink in the last runs (as many as the guard's threshold:
        a kill of an innocent sink can land there too) is dead-lettered instead."""
        failed: dict[str, str] = {}
        for rec in records:
            coord = _RECORD + rec.where
            with guard.handling(coord):
                deaths = guard.deaths(coord)
                if guard.poisoned(coord):
                    self._dead_letter_crashed(rec, deaths, "writing", guard.threshold)
                else:
                    failed.update(self._write(self._convert([rec], None)))
        return failed

    def _plan(self, records: list[_Record], guard: CrashGuard) -> tuple[str, bool]:
        """The flush's coordinate, and whether it is written one record at a time."""
        ranges = _ranges(records)
        coord = _flush_coord(ranges, guard.MAX_COORD_BYTES)
        last = guard.last_death
        if last is None:
            return coord, False
        if last.coord.startswith(_RECORD):
            where = last.coord[len(_RECORD):]
            return coord, any(rec.where == where for rec in records)
        if last.coord.startswith(_FLUSH) and _overlap(ranges, _parse_flush(last.coord)):
            if last.deaths >= guard.threshold:
                return coord, True
            return last.coord, False  # the same flush again, as far as deaths count
        return coord, False

    def _settle(self, result: ItemResult, failed: dict[str, str]) -> None:
        rec: _Record = result.action.origin
        if result.outcome is Outcome.OK:
            self.stats.written += 1
        elif result.outcome is Outcome.DUPLICATE:
            self.stats.duplicates += 1
            logger.debug("already applied %s id=%s", rec.where, result.action.doc_id)
        elif result.outcome is Outcome.REJECT:
            self._dead_letter(rec, result.error_type, result.error)
        else:
            logger.error("write failed %s index=%s id=%s status=%d %s: %s", rec.where,
                         result.action.index, result.action.doc_id, result.status,
                         result.error_type, result.error)
            failed[rec.where] = f"{result.status} {result.error_type}: {result.error}"

    def _dead_letter(self, rec: _Record, reason: str, error: str, *,
                     drop_value: str = "") -> None:
        logger.warning("dead letter %s reason=%s: %s", rec.where, reason,
                       error[:300].encode("utf-8", "backslashreplace").decode())
        self.stats.dead_lettered += 1
        self._dead.send(rec.msg.key(), rec.msg.value(), reason, error,
                        {"origin": rec.where}, drop_value=drop_value)

    def _dead_letter_crashed(self, rec: _Record, deaths: int, doing: str,
                             needed: int) -> None:
        """Set aside a record that killed the sink; if dead-lettering it killed the sink
        too (more deaths than it took to get here), without its value."""
        drop = "dead-lettering it whole killed the sink" if deaths > needed else ""
        self._dead_letter(rec, CRASHED, f"the sink died {deaths} time(s) in a row while "
                                        f"{doing} this record: it is set aside so that the "
                                        "stream goes on", drop_value=drop)

    def _deliver_dlq(self) -> None:
        """Step 6: a DLQ record not yet in Kafka must not have its input committed."""
        self._dead.deliver(lambda: self._wait(0.0))

    def _commit(self) -> None:
        """Step 8."""
        offsets = self._tracker.committable()
        if not offsets or self._consumer is None:
            return
        try:
            self._consumer.commit(offsets=[KafkaTopicPartition(t, p, o)
                                           for (t, p), o in offsets.items()],
                                  asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the records stay uncommitted and are read again after a restart
            # or rebalance; the next commit carries the higher offsets.
            logger.warning("offset commit failed (will retry with the next flush): %s", exc)
            return
        self._tracker.committed(offsets)
        self.stats.commits += 1

    # -- waiting, pausing, rebalancing --------------------------------------------------

    def _wait(self, seconds: float) -> None:
        """Sleep while a flush is blocked, keeping the consumer in its group."""
        deadline = self._clock() + seconds
        self._pause()
        while True:
            if self._stopping:
                raise _Stopped
            if self._consumer is not None:
                # Paused partitions return nothing; a partition assigned during the wait is
                # paused by _on_assign, so a message here is only a late straggler.
                msg = self._consumer.poll(min(max(deadline - self._clock(), 0.0), MAX_POLL_S))
                if msg is not None:
                    self._accept([msg])
            else:
                time.sleep(min(max(deadline - self._clock(), 0.0), MAX_POLL_S))
            if self._clock() >= deadline:
                return

    def _pause(self) -> None:
        # Only when a flush has to wait: pausing drops librdkafka's prefetched messages.
        if self._consumer is not None and not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True

    def _resume(self) -> None:
        if self._consumer is not None and self._paused and not self._closing:
            self._consumer.resume(self._consumer.assignment())
        self._paused = False

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        if self._paused:
            consumer.pause(partitions)
        logger.info("assigned %s", _names(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        # What was read from these partitions and not committed is read again by their
        # next owner (no flush here: a flush may block, and a rebalance callback must not).
        # Records of the current flush carry the old epoch and are not acknowledged.
        tps = [(p.topic, p.partition) for p in partitions]
        for tp in tps:
            self._epochs[tp] = self._epochs.get(tp, 0) + 1
        self._tracker.forget(tps)
        self._batch.records = [r for r in self._batch.records if r.tp not in set(tps)]
        logger.info("revoked %s", _names(partitions))

    def _report_lag(self) -> None:
        """``jobstream_consumer_lag``: per assigned partition, its end (as of the last
        fetch) past the first record Elasticsearch has not acknowledged, or past the
        consumer's position when nothing of it is in hand."""
        if self._consumer is None or self._clock() < self._next_lag:
            return
        self._next_lag = self._clock() + LAG_INTERVAL_S
        lags: dict[TopicPartition, int] = {}
        try:
            for part in self._consumer.assignment():
                _, end = self._consumer.get_watermark_offsets(part, cached=True)
                tp = (part.topic, part.partition)
                done = self._tracker.acknowledged_up_to(tp)
                if done is None:
                    done = self._consumer.position([part])[0].offset
                if end >= 0 and done >= 0:
                    lags[tp] = end - done
        except KafkaException as exc:
            logger.debug("consumer lag not known now: %s", exc)
            return
        self._lag.report(lags)

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


def open_guard(cfg: Config, group_id: str) -> CrashGuard:
    """The crash guard of a sink of ``group_id``: the first free one of that group in
    ``sink.state_dir`` (default ``<stack.cache_dir>/sink-state``).

    One that cannot be opened (a read-only directory) is no reason not to run: the sink
    runs unguarded, in memory, and says so, as it was before there were guards.
    """
    directory = Path(cfg.sink.state_dir or Path(cfg.stack.cache_dir) / "sink-state")
    innocent = (JobstreamError, _Stopped)
    try:
        return CrashGuard.claim(directory, _file_name(group_id), threshold=CRASH_THRESHOLD,
                                innocent=innocent)
    except (OSError, GuardBusyError) as exc:
        logger.error("no crash guard (%s): a record that kills the sink would kill it again "
                     "on every start; give sink.state_dir a directory the sink may write",
                     exc)
        return CrashGuard(None, threshold=CRASH_THRESHOLD, innocent=innocent)


def _file_name(group_id: str) -> str:
    """A file name for a consumer group (any characters, any length)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", group_id)[:100]
    if safe != group_id or not safe:
        safe += "-" + hashlib.blake2b(group_id.encode(), digest_size=6).hexdigest()
    return safe


def _converter(prefix: str, generation: str) -> Converter:
    try:
        return Converter(prefix, generation)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


#: (topic, partition) -> (first, last) offset of a batch's records there
_Ranges = Mapping[TopicPartition, tuple[int, int]]


def _ranges(records: Iterable[_Record]) -> dict[TopicPartition, tuple[int, int]]:
    out: dict[TopicPartition, tuple[int, int]] = {}
    for rec in records:
        offset = rec.msg.offset()
        old = out.get(rec.tp)
        out[rec.tp] = (offset, offset) if old is None else (min(old[0], offset),
                                                            max(old[1], offset))
    return out


def _flush_coord(ranges: _Ranges, limit: int) -> str:
    """``flush t[0]@100-250 t[1]@7-99 ...``, partitions sorted, as many as fit in
    ``limit`` bytes (a partition left out only makes an overlap less likely to be seen)."""
    text = _FLUSH.rstrip()
    for (topic, partition), (first, last) in sorted(ranges.items()):
        part = f" {topic}[{partition}]@{first}-{last}"
        if len(text.encode()) + len(part.encode()) > limit:
            break
        text += part
    return text


def _parse_flush(coord: str) -> dict[TopicPartition, tuple[int, int]]:
    out: dict[TopicPartition, tuple[int, int]] = {}
    for part in coord[len(_FLUSH):].split():
        m = _RANGE.match(part)
        if m:
            out[(m[1], int(m[2]))] = (int(m[3]), int(m[4]))
    return out


def _overlap(a: _Ranges, b: _Ranges) -> bool:
    return any(tp in b and a[tp][0] <= b[tp][1] and b[tp][0] <= a[tp][1] for tp in a)


def _names(partitions: Iterable[KafkaTopicPartition]) -> str:
    return ",".join(f"{p.topic}[{p.partition}]" for p in partitions) or "-"

