"""What a sink run tells about itself: its running totals and the consumer lag metric.

:class:`SinkStats` is what ``jobstream demo`` and ``bench`` read, and what ``until`` of
:meth:`~pipeline.sink.runner.SinkRunner.run` is asked about; :class:`ConsumerLag` computes
``jobstream_consumer_lag`` from what the offset tracker knows, so the lag counts what
Elasticsearch has acknowledged rather than what the consumer has merely read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException

from pipeline.runtime.metrics import LagReporter
from pipeline.sink.offsets import OffsetTracker, TopicPartition

__all__ = ["ConsumerLag", "SinkStats"]

logger = logging.getLogger(__name__)

#: the longest a broker's answer for one partition's ends is waited for
ENDS_TIMEOUT_S = 1.0


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


class ConsumerLag:
    """``jobstream_consumer_lag`` of the consumer group ``group_id``, at most every
    ``interval_s``."""

    def __init__(self, group_id: str, tracker: OffsetTracker,
                 clock: Callable[[], float], interval_s: float) -> None:
        self._lag = LagReporter(group_id)
        self._tracker = tracker
        self._clock = clock
        self.interval_s = interval_s
        self._next_lag = 0.0

    def report(self, consumer: Consumer | None, *, cached: bool = True) -> None:
        """``jobstream_consumer_lag``: per assigned partition, its end past the first
        record Elasticsearch has not acknowledged, or past the consumer's position when
        nothing of it is in hand. The end is the last fetch's (``cached``), or the
        broker's: a paused partition fetches nothing, and its cached end stands still
        while its records pile up."""
        if consumer is None or self._clock() < self._next_lag:
            return
        self._next_lag = self._clock() + self.interval_s
        lags: dict[TopicPartition, int] = {}
        try:
            for part in consumer.assignment():
                if cached:
                    _, end = consumer.get_watermark_offsets(part, cached=True)
                else:
                    _, end = consumer.get_watermark_offsets(part, timeout=ENDS_TIMEOUT_S)
                tp = (part.topic, part.partition)
                done = self._tracker.acknowledged_up_to(tp)
                if done is None:
                    done = consumer.position([part])[0].offset
                if end >= 0 and done >= 0:
                    lags[tp] = end - done
        except KafkaException as exc:
            logger.debug("consumer lag not known now: %s", exc)
            return
        self._lag.report(lags)
