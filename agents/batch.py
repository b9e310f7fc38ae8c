"""The jobs stage's batch: the jobs folded since the last batch ended, the records to
acknowledge once the batch's outputs are confirmed, and when the batch ends.

A job's table entry, its states and the acknowledgement of its records wait for the batch
(:mod:`agents.jobs` says why), which ends after ``STATE_BATCH`` events or ``STATE_FLUSH_S``
after its first record; while the worker is catching up (more than ``BEHIND_RECORDS``
records past the batch's already in Kafka) the timer waits up to ``STATE_FLUSH_BEHIND_S``.

The batch also counts what it read, folded and sent, and :class:`BatchCounters` adds those
counts to the metrics at its end: a Prometheus counter's ``inc()`` takes a lock, and three
per event were 2 % of the stage's time offline.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter as Metric

from pipeline.fold import JobFold
from pipeline.fold.node_state import NodeFold
from pipeline.runtime.metrics import (
    WORKER_EVENTS_FOLDED,
    WORKER_RECORDS_PUBLISHED,
    WORKER_RECORDS_READ,
)

__all__ = ["BEHIND_RECORDS", "STATE_BATCH", "STATE_FLUSH_BEHIND_S", "STATE_FLUSH_S", "Batch",
           "BatchCounters"]

#: end the batch after this many events ...
STATE_BATCH = 5000
#: ... or this long after its first record (the latency it adds, at most) ...
STATE_FLUSH_S = 0.25
#: ... or, while more than this many records past the batch's wait in Kafka, ...
BEHIND_RECORDS = 1000
#: ... this long after its first record
STATE_FLUSH_BEHIND_S = 2.0


class Batch:
    """The jobs and the nodes folded since the last batch ended (key -> the last message of
    the job or node read, its fold) and the messages to acknowledge once their outputs
    are confirmed."""

    def __init__(self) -> None:
        self.folds: dict[bytes, tuple[Any, JobFold]] = {}
        self.nodes: dict[bytes, tuple[Any, NodeFold]] = {}
        self.records: list[Any] = []
        self.ends: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset
        self.events = 0
        self.since = 0.0
        # the batch's counts, added to the metrics at its end (module docstring)
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


class BatchCounters:
    """The worker's counters a batch's counts go to: records read from the raw topic,
    records sent per topic, events folded per cluster (each label looked up once)."""

    def __init__(self, raw: str, sent_topics: tuple[str, ...]) -> None:
        self._read = WORKER_RECORDS_READ.labels(raw)
        self._sent = {t: WORKER_RECORDS_PUBLISHED.labels(t) for t in sent_topics}
        self._folded: dict[str, Metric] = {}  # cluster -> its counter, looked up once

    def count(self, batch: Batch) -> None:
        self._read.inc(batch.read)
        for topic, n in batch.sent.items():
            self._sent[topic].inc(n)
        for cluster, n in batch.folded.items():
            counter = self._folded.get(cluster)
            if counter is None:
                counter = self._folded[cluster] = WORKER_EVENTS_FOLDED.labels(cluster)
            counter.inc(n)
