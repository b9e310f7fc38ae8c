"""Where a job's records belong: the partition of a job key, the partitions of a topic,
and whether a raw record is already in its job's table partition (its events are folded
where they are read) or must have its events re-keyed through the canonical topic.

What the jobs stage asks Kafka (a topic's partitions, a partition's high watermark) it
asks a :class:`KafkaView`: :class:`ConsumerView` reads the app's Faust consumer, looked up
at each question (Faust makes its consumer when first asked for it, and the stage exists
before the worker starts); :class:`OfflineKafka` answers for a stage run without Kafka
(the bench, the tests).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any, Protocol

import faust
from aiokafka.partitioner import murmur2
from faust.types import TP

from agents.faust_patches import kafka_consumer

__all__ = ["ConsumerView", "Home", "KafkaView", "OfflineKafka", "job_partition",
           "topic_partitions"]

logger = logging.getLogger(__name__)


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
        partitions = kafka_consumer(consumer).partitions_for_topic(topic)
        count = len(partitions) if partitions else None
    return count


class KafkaView(Protocol):
    """What the jobs stage asks Kafka about its topics."""

    def topic_partitions(self, topic: str) -> int | None:
        """The number of partitions of ``topic`` (None: not known yet)."""

    def highwater(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark at the consumer's last fetch (None: not fetched
        yet); raises AssertionError, as aiokafka does, for a partition not assigned."""


class ConsumerView:
    """The :class:`KafkaView` of the app's Faust consumer."""

    def __init__(self, app: faust.App) -> None:
        self.app = app

    def topic_partitions(self, topic: str) -> int | None:
        return topic_partitions(self.app.consumer, topic)

    def highwater(self, topic: str, partition: int) -> int | None:
        end: int | None = self.app.consumer.highwater(TP(topic, partition))
        return end


class OfflineKafka:
    """The :class:`KafkaView` of a stage run without Kafka: every topic has ``partitions``
    partitions, and the high watermarks are the ones set in :attr:`ends` (a partition
    without one is not assigned)."""

    def __init__(self, partitions: int | None) -> None:
        self.partitions = partitions
        self.ends: dict[tuple[str, int], int | None] = {}

    def topic_partitions(self, topic: str) -> int | None:
        return self.partitions

    def highwater(self, topic: str, partition: int) -> int | None:
        if (topic, partition) not in self.ends:
            raise AssertionError("Partition is not assigned")  # as aiokafka says it
        return self.ends[topic, partition]


class Home:
    """Whether a raw record is in its key's table partition (its events of that key can be
    folded here). The raw topic's partitions are asked once they are known; a raw topic
    partitioned otherwise than the table has every record re-keyed."""

    def __init__(self, kafka: KafkaView, raw: str, canonical: str, partitions: int) -> None:
        self.kafka, self.raw, self.canonical, self.partitions = kafka, raw, canonical, partitions
        self._raw_partitions: int | None = None

    def holds(self, message: Any) -> bool:
        if message.key is None:
            return False
        return self.holds_key(message, message.key)

    def holds_key(self, message: Any, key: bytes) -> bool:
        """Whether events of ``key`` may be folded where ``message`` was read: its topic
        is partitioned as the table (the canonical topic always is) and ``message`` is in
        ``key``'s partition (a Flux job's allocation names other keys than its own)."""
        if message.topic == self.canonical:
            return job_partition(key, self.partitions) == message.partition
        if self._raw_partitions is None:
            self._raw_partitions = self.kafka.topic_partitions(self.raw)
            if self._raw_partitions is not None and self._raw_partitions != self.partitions:
                logger.warning("%s has %d partitions, the worker's table %d "
                               "(kafka.partitions): every raw record is re-keyed through %s",
                               self.raw, self._raw_partitions, self.partitions, self.canonical)
        return (self._raw_partitions == self.partitions
                and job_partition(key, self.partitions) == message.partition)
