"""Kafka positions (pipeline/kafka/positions.py): a group's commits asked of a broker that
has just started, whose coordinator answers "load in progress" until it has read the
offsets topic, are asked again, not reported as a failure (a real broker's answer in
tests/integration: test_agents failed on it once, right after the faults suite's
brokers)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.kafka.positions import Positions
from pipeline.runtime.errors import ServiceError


class Admin:
    """Answers a group's offsets after ``failures`` answers of ``code``."""

    def __init__(self, code: int, failures: int) -> None:
        self.code, self.failures, self.asked = code, failures, 0

    def list_consumer_group_offsets(self, requests: list[Any], **kwargs: Any) -> dict[str, Any]:
        self.asked += 1
        future: Future[Any] = Future()
        if self.asked <= self.failures:
            future.set_exception(KafkaException(KafkaError(self.code)))
        else:
            future.set_result(SimpleNamespace(topic_partitions=[TopicPartition("raw", 0, 42)]))
        return {requests[0].group_id: future}


@pytest.mark.parametrize("code", [KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE,
                                  KafkaError.NOT_COORDINATOR])
def test_a_coordinator_not_ready_yet_is_asked_again(code: int) -> None:
    admin = Admin(code, failures=3)
    assert Positions(admin).committed("g", [("raw", 0)]) == {("raw", 0): 42}  # type: ignore[arg-type]
    assert admin.asked == 4


def test_a_group_request_that_cannot_succeed_fails_at_once() -> None:
    admin = Admin(KafkaError.GROUP_AUTHORIZATION_FAILED, failures=1)
    with pytest.raises(ServiceError, match="offsets of group g"):
        Positions(admin).committed("g", [("raw", 0)])  # type: ignore[arg-type]
    assert admin.asked == 1
