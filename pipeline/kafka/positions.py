"""Kafka positions seen from outside: partition ends, group commits, lag, times -> offsets.

For the demo's live summary and the replay's progress and "caught up" test. Every call
goes through an AdminClient (no consumer joins a group here), so watching a group never
disturbs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.runtime.backoff import retry
from pipeline.runtime.errors import ServiceError

__all__ = ["Positions", "TP", "group_lag"]

#: (topic, partition)
TP = tuple[str, int]

_TIMEOUT_S = 15.0
#: attempts of a request that fails with a retriable error (a partition without its
#: leader yet, just after the topic was created)
_ATTEMPTS = 20
_RETRY_WAIT_S = 0.25
#: a new topic's partitions answer these until their leader is elected and known, and a
#: broker just started answers group requests with the coordinator ones until it has
#: loaded the offsets topic; the admin results do not always mark them retriable
_TRANSIENT_CODES = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION,
                              KafkaError.LEADER_NOT_AVAILABLE,
                              KafkaError.UNKNOWN_TOPIC_OR_PART,
                              KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                              KafkaError.COORDINATOR_NOT_AVAILABLE,
                              KafkaError.NOT_COORDINATOR})

T = TypeVar("T")


def _result(future: Future[Any], what: str) -> Any:
    try:
        return future.result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise _Failed(what, exc) from exc


class _Failed(Exception):
    def __init__(self, what: str, exc: KafkaException) -> None:
        super().__init__(f"kafka: {what}: {exc}")
        error = exc.args[0] if exc.args else None
        self.retriable = (bool(getattr(error, "retriable", lambda: False)())
                          or getattr(error, "code", lambda: None)() in _TRANSIENT_CODES)


def _retrying(request: Callable[[], T]) -> T:
    try:
        return retry(request, on=_Failed, wait=lambda: time.sleep(_RETRY_WAIT_S),
                     attempts=_ATTEMPTS, retriable=lambda exc: getattr(exc, "retriable", False))
    except _Failed as exc:
        raise ServiceError(str(exc)) from exc


class Positions:
    """Offsets of topics and consumer groups, through one AdminClient."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin

    def partitions(self, topics: Iterable[str]) -> list[TP]:
        """Every partition of ``topics`` (a missing topic has none)."""
        names = list(topics)
        try:
            meta = self.admin.list_topics(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            raise ServiceError(f"kafka: list topics: {exc}") from exc
        return [(t, p) for t in names if t in meta.topics and meta.topics[t].error is None
                for p in sorted(meta.topics[t].partitions)]

    def ends(self, topics: Iterable[str]) -> dict[TP, int]:
        """High watermark (the next offset to be written) of every partition."""
        return self._list_offsets(self.partitions(topics), OffsetSpec.latest())

    def starts(self, topics: Iterable[str]) -> dict[TP, int]:
        """First offset still kept of every partition."""
        return self._list_offsets(self.partitions(topics), OffsetSpec.earliest())

    def at_time(self, topics: Iterable[str], epoch_ms: int) -> dict[TP, int]:
        """Per partition, the first offset whose record time is at or after ``epoch_ms``
        (the partition's end if there is none)."""
        tps = self.partitions(topics)
        found = self._list_offsets(tps, OffsetSpec.for_timestamp(epoch_ms))
        ends = self._list_offsets(tps, OffsetSpec.latest())
        return {tp: off if off >= 0 else ends[tp] for tp, off in found.items()}

    def committed(self, group: str, partitions: Iterable[TP]) -> dict[TP, int]:
        """The group's committed offset per partition (-1 when none)."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}

        def request() -> dict[TP, int]:
            futures = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, tps)], request_timeout=_TIMEOUT_S)
            answer = _result(futures[group], f"offsets of group {group}")
            return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}

        return _retrying(request)

    def commit(self, group: str, offsets: Mapping[TP, int]) -> None:
        """Set the group's committed offsets (the group must have no active member)."""
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

        def request() -> None:
            futures = self.admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, tps)], request_timeout=_TIMEOUT_S)
            _result(futures[group], f"set the offsets of group {group}")

        _retrying(request)

    def lag(self, group: str, topics: Iterable[str]) -> int:
        """Records of ``topics`` not yet committed by ``group``."""
        return group_lag(self.ends(topics), self.committed_for(group, topics))

    def committed_for(self, group: str, topics: Iterable[str]) -> dict[TP, int]:
        return self.committed(group, self.partitions(topics))

    def _list_offsets(self, tps: list[TP], spec: OffsetSpec) -> dict[TP, int]:
        if not tps:
            return {}

        def request() -> dict[TP, int]:
            futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                              request_timeout=_TIMEOUT_S)
            return {(tp.topic, tp.partition): _result(f, f"offsets of {tp.topic}").offset
                    for tp, f in futures.items()}

        return _retrying(request)


def group_lag(ends: Mapping[TP, int], committed: Mapping[TP, int],
              starts: Mapping[TP, int] | None = None) -> int:
    """Sum over partitions of end - committed; a partition never committed counts from its
    start (``starts``, else offset 0)."""
    total = 0
    for tp, end in ends.items():
        pos = committed.get(tp, -1)
        if pos < 0:
            pos = (starts or {}).get(tp, 0)
        total += max(end - pos, 0)
    return total
