"""The sink's consumer side: polling a batch, pausing through an outage, rebalances, commits.

What :class:`~pipeline.sink.runner.SinkRunner` reads from Kafka and hands back to it, apart
from what it writes: :class:`Intake` gathers the batch (the records in hand, each with the
assignment epoch of its partition, so that a record of a revoked partition is never
acknowledged), keeps the consumer in its group while a flush waits (its partitions paused,
polling on), and commits what the offset tracker says is committable.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from pipeline.codecs.codec import AvroCodec
from pipeline.runtime.config import SinkConfig
from pipeline.runtime.errors import ServiceError
from pipeline.runtime.metrics import SINK_RECORDS_READ
from pipeline.sink.names import Family
from pipeline.sink.offsets import OffsetTracker, TopicPartition
from pipeline.sink.stats import SinkStats

__all__ = ["MAX_POLL_S", "Batch", "Intake", "Record", "Stopped"]

logger = logging.getLogger(__name__)

#: Longest single poll, so that a stop request is seen promptly.
MAX_POLL_S = 0.5


class Stopped(Exception):
    """A stop was requested while a flush could not complete."""


@dataclass(slots=True)
class Record:
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
class Batch:
    records: list[Record] = field(default_factory=list)
    started: float = 0.0
    #: the last poll brought nothing: the batch is all there is for now
    quiet: bool = False


class Intake:
    """The consumer (None until subscribed) and the batch it fills.

    :param sink: batch size and timing (``sink.max_batch``, ``flush_interval_s``, ``quiet_s``)
    :param families: topic -> its family (and codec): the topics consumed
    :param tracker: offsets read, acknowledged and committed
    :param stats: the run's totals (``records``, ``commits``)
    :param clock: monotonic seconds
    :param stopping: whether a stop was requested (a blocked wait then raises
        :class:`Stopped`)
    """

    def __init__(self, sink: SinkConfig, families: Mapping[str, tuple[Family, AvroCodec]],
                 tracker: OffsetTracker, stats: SinkStats, clock: Callable[[], float],
                 stopping: Callable[[], bool]) -> None:
        self.consumer: Consumer | None = None
        self.batch = Batch()
        self._sink = sink
        self._families = families
        self._tracker = tracker
        self._stats = stats
        self._clock = clock
        self._stopping = stopping
        self._read = {topic: SINK_RECORDS_READ.labels(topic) for topic in families}
        self._epochs: dict[TopicPartition, int] = {}
        self._paused = False
        self._closing = False

    def take(self) -> Batch:
        """The batch in hand; a new one is gathered from now on."""
        batch, self.batch = self.batch, Batch()
        return batch

    def poll(self) -> None:
        assert self.consumer is not None
        sink = self._sink
        room = max(1, sink.max_batch - len(self.batch.records))
        timeout = sink.flush_interval_s
        if self.batch.records:
            timeout = max(self.batch.started + sink.flush_interval_s - self._clock(), 0.0)
        if sink.quiet_s > 0:
            # librdkafka's consume waits out its timeout unless it fills the batch: a poll
            # longer than quiet_s would hold back a batch that is all there
            timeout = min(timeout, sink.quiet_s)
        msgs = self.consumer.consume(num_messages=min(room, 10000),
                                     timeout=min(timeout, MAX_POLL_S))
        self._accept(msgs)
        self.batch.quiet = sink.quiet_s > 0 and not msgs and bool(self.batch.records)

    def _accept(self, msgs: Sequence[Message]) -> None:
        if msgs:
            logger.debug("polled %d message(s); batch holds %d", len(msgs),
                         len(self.batch.records) + len(msgs))
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
            if not self.batch.records:
                self.batch.started = self._clock()
            family = self._families[topic][0]
            self.batch.records.append(Record(msg, family, self._epochs.get(tp, 0)))
            read[topic] += 1
        # counted once per poll: a Prometheus counter's inc() takes a lock
        for topic, n in read.items():
            self._stats.records += n
            self._read[topic].inc(n)

    def due(self) -> bool:
        b = self.batch
        return bool(b.records) and (
            b.quiet or len(b.records) >= self._sink.max_batch
            or self._clock() - b.started >= self._sink.flush_interval_s)

    def ack(self, records: Iterable[Record], failed: Mapping[str, str]) -> None:
        """Step 7: acknowledge every record whose fate is sealed, unless its partition was
        revoked since it was read."""
        for rec in records:
            if rec.where not in failed and self._epochs.get(rec.tp, 0) == rec.epoch:
                self._tracker.ack(rec.tp[0], rec.tp[1], rec.msg.offset())

    def commit(self) -> None:
        """Step 8."""
        offsets = self._tracker.committable()
        if not offsets or self.consumer is None:
            return
        try:
            self.consumer.commit(offsets=[KafkaTopicPartition(t, p, o)
                                          for (t, p), o in offsets.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the records stay uncommitted and are read again after a restart
            # or rebalance; the next commit carries the higher offsets.
            logger.warning("offset commit failed (will retry with the next flush): %s", exc)
            return
        self._tracker.committed(offsets)
        self._stats.commits += 1

    def close(self) -> None:
        """Close the consumer (leaving the group), if there is one."""
        if self.consumer is not None:
            self._closing = True
            try:
                self.consumer.close()
            finally:
                self.consumer = None

    # -- waiting, pausing, rebalancing --------------------------------------------------

    def wait(self, seconds: float) -> None:
        """Sleep while a flush is blocked, keeping the consumer in its group."""
        deadline = self._clock() + seconds
        self._pause()
        while True:
            if self._stopping():
                raise Stopped
            if self.consumer is not None:
                # Paused partitions return nothing; a partition assigned during the wait is
                # paused by on_assign, so a message here is only a late straggler.
                msg = self.consumer.poll(min(max(deadline - self._clock(), 0.0), MAX_POLL_S))
                if msg is not None:
                    self._accept([msg])
            else:
                time.sleep(min(max(deadline - self._clock(), 0.0), MAX_POLL_S))
            if self._clock() >= deadline:
                return

    def _pause(self) -> None:
        # Only when a flush has to wait: pausing drops librdkafka's prefetched messages.
        if self.consumer is not None and not self._paused:
            self.consumer.pause(self.consumer.assignment())
            self._paused = True

    def resume(self) -> None:
        if self.consumer is not None and self._paused and not self._closing:
            self.consumer.resume(self.consumer.assignment())
        self._paused = False

    def on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        if self._paused:
            consumer.pause(partitions)
        logger.info("assigned %s", _names(partitions))

    def on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        # What was read from these partitions and not committed is read again by their
        # next owner (no flush here: a flush may block, and a rebalance callback must not).
        # Records of the current flush carry the old epoch and are not acknowledged.
        tps = [(p.topic, p.partition) for p in partitions]
        for tp in tps:
            self._epochs[tp] = self._epochs.get(tp, 0) + 1
        self._tracker.forget(tps)
        gone = set(tps)
        self.batch.records = [r for r in self.batch.records if r.tp not in gone]
        logger.info("revoked %s", _names(partitions))


def _names(partitions: Iterable[KafkaTopicPartition]) -> str:
    return ",".join(f"{p.topic}[{p.partition}]" for p in partitions) or "-"
